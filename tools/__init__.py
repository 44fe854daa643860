import os

# Keras 2 only (tf_keras): with this set before TensorFlow loads, `tf.keras`
# is tf_keras and TensorFlow's import skips Keras 3, a quarter of its time.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
