"""Demos on synthetic data: each task end to end on a CPU, in minutes.

- `demos.wikihop`: multi-hop WikiHop (the README's first command,
  `python -m demos.wikihop.demo --output_dir=demo_out`), its synthetic data,
  the optional bridge scaffold and the learnability probe;
- `demos.hotpotqa`: HotpotQA distractor with the official metric;
- `demos.nq`: Natural Questions;
- `demos.common`: what they share (flags, output folders, gin setup, the
  synthetic name pools, timing, asking the exported model).

A demo writes synthetic files in its task's released format, featurizes them
with the task's preprocessing, trains a tiny model with the one runner
(`tasks.run`) from a gin file it writes next to its outputs, exports a
SavedModel and answers one record through it. The library (`etc_realformer`,
`tasks`) never imports `demos`.
"""

import os

# Keras 2 only (tf_keras): with this set before TensorFlow loads, `tf.keras`
# is tf_keras and TensorFlow's import skips Keras 3, a quarter of its time.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
