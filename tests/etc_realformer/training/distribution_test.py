"""Strategy and precision selection (the gin switches of
`training/distribution.py`). MultiWorkerMirroredStrategy with two local
worker processes, killed and resumed, is tested through the runner in
`tests/tasks/pretrain/multi_worker_test.py`."""

import gin
import pytest
import tensorflow as tf
import tf_keras

from etc_realformer.training import distribution


@pytest.fixture(autouse=True)
def clean():
  gin.clear_config()
  yield
  gin.clear_config()
  tf_keras.mixed_precision.set_global_policy("float32")


def test_strategy_selection():
  assert distribution.build_strategy("off") is tf.distribute.get_strategy()
  one = distribution.build_strategy("one_device")
  assert isinstance(one, tf.distribute.OneDeviceStrategy)
  with pytest.raises(ValueError, match="distribution_strategy"):
    distribution.build_strategy("parameter_server")


@pytest.mark.parametrize("name,policy", [
    (None, "float32"), ("bfloat16", "mixed_bfloat16"),
    ("float16", "mixed_float16")])
def test_precision_switch(name, policy):
  distribution.set_precision(name)
  assert tf_keras.mixed_precision.global_policy().name == policy
  with pytest.raises(ValueError, match="mixed_precision"):
    distribution.set_precision("int8")
