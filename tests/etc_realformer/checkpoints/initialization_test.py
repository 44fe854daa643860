"""`initialize_encoder` (init_checkpoint): released TF1 checkpoints, TF2
encoder and task-model ones."""

import os

import numpy as np
import pytest
import tensorflow as tf

from encoder_testing import tiny_config
from etc_realformer import EtcConfig, EtcModel
from etc_realformer.checkpoints import initialization
from etc_realformer.checkpoints import official
from etc_realformer.checkpoints.converted import save_converted_checkpoint
from etc_realformer.checkpoints.paths import resolve_checkpoint_path
from etc_realformer.errors import UserInputError

INPUT_KEYS = ("token_ids", "segment_ids", "global_token_ids",
              "global_segment_ids", "l2l_att_mask", "l2l_relative_att_ids",
              "g2g_att_mask", "g2g_relative_att_ids", "l2g_att_mask",
              "l2g_relative_att_ids", "g2l_att_mask", "g2l_relative_att_ids")


def _golden(golden_dir):
  config = EtcConfig.from_json_file(str(golden_dir / "etc_config.json"))
  ref = np.load(golden_dir / "reference.npz")
  features = {k: tf.constant(ref[k]) for k in INPUT_KEYS}
  return config, ref, features


def _weights(layer):
  return [v.numpy() for v in layer.weights]


def test_released_checkpoint_directory_reproduces_golden(golden_dir):
  config, ref, features = _golden(golden_dir)
  encoder = EtcModel(config)
  encoder(features, training=False)
  # A released download: a directory with model.ckpt.* and no state file.
  kind = initialization.initialize_encoder(encoder, str(golden_dir))
  assert kind == initialization.CheckpointKind.OFFICIAL_TF1
  long_output, global_output = encoder(features, training=False)
  np.testing.assert_allclose(long_output.numpy(), ref["long_output"],
                             atol=2e-5)
  np.testing.assert_allclose(global_output.numpy(), ref["global_output"],
                             atol=2e-5)


def test_tf2_encoder_and_task_model_checkpoints(golden_dir, tmp_path):
  config, _, features = _golden(golden_dir)
  source = EtcModel(config)
  source(features, training=False)

  # Bare-encoder checkpoints: saved (with a save counter), and written by
  # the checkpoint converter (without one).
  saved = tf.train.Checkpoint(encoder=source).save(str(tmp_path / "enc/c"))
  converted = save_converted_checkpoint(source, str(tmp_path / "converted"))
  for prefix in (saved, converted):
    target = EtcModel(config)
    target(features, training=False)
    assert initialization.initialize_encoder(target, prefix) == (
        initialization.CheckpointKind.TF2_ENCODER)
    for a, b in zip(_weights(source), _weights(target)):
      np.testing.assert_array_equal(a, b)

  # A task-model checkpoint written by the trainer (model/encoder/...),
  # given as its directory; the head and optimizer in it are skipped.
  head = tf.Variable([1.0, 2.0])
  model = tf.train.Checkpoint(encoder=source, head=head)
  manager = tf.train.CheckpointManager(
      tf.train.Checkpoint(model=model, step=tf.Variable(3)),
      str(tmp_path / "task"), max_to_keep=1)
  manager.save()
  target = EtcModel(config)
  target(features, training=False)
  assert initialization.initialize_encoder(target, str(tmp_path / "task")) == (
      initialization.CheckpointKind.TF2_TASK_MODEL)
  for a, b in zip(_weights(source), _weights(target)):
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("field", ["max_sentence_length_embeddings",
                                   "max_absolute_position_embeddings"])
def test_a_table_the_config_leaves_out_is_an_error(tmp_path, field):
  # A TF2 read skips checkpoint values the model has no variable for: a
  # pre-trained length or position table would vanish.
  config = tiny_config(**{field: 16})
  source = EtcModel(config)
  source.build()
  prefix = tf.train.Checkpoint(model=tf.train.Checkpoint(
      encoder=source)).save(str(tmp_path / "task/ckpt"))
  target = EtcModel(config.replace(**{field: 0}))
  target.build()
  with pytest.raises(UserInputError, match=f"EtcConfig.{field} = 0"):
    initialization.initialize_encoder(target, prefix)
  same = EtcModel(config)
  same.build()
  initialization.initialize_encoder(same, prefix)
  for a, b in zip(_weights(source), _weights(same)):
    np.testing.assert_array_equal(a, b)


def test_bad_checkpoints(tmp_path):
  with pytest.raises(FileNotFoundError):
    resolve_checkpoint_path(str(tmp_path))
  with pytest.raises(FileNotFoundError):
    resolve_checkpoint_path(str(tmp_path / "missing"))
  prefix = tf.train.Checkpoint(other=tf.Variable(1.0)).save(
      str(tmp_path / "x"))
  with pytest.raises(ValueError, match="not a recognised checkpoint"):
    initialization.checkpoint_kind(prefix)


def _task_checkpoint(tmp_path, config):
  """A trainer-style task checkpoint (model/encoder/...) of a fresh encoder."""
  source = EtcModel(config)
  source.build()
  return tf.train.Checkpoint(model=tf.train.Checkpoint(
      encoder=source)).save(str(tmp_path / "task/ckpt"))


@pytest.mark.parametrize("overrides,texts", [
    # Deeper than the model: a TF2 read would drop layer 2 without a word.
    ({"num_hidden_layers": 1}, ["has 2 layers, the model 1",
                                "unexpected in the checkpoint (24)"]),
    # Shallower: the read would leave layer 2 at its initial values.
    ({"num_hidden_layers": 3}, ["has 2 layers, the model 3",
                                "missing from the checkpoint (24)"]),
    # A shape that differs in every layer: a TF2 read would stop at the
    # first, after the variables before it were overwritten.
    ({"intermediate_size": 20}, ["mis-shaped (6)",
                                 "blocks/1/long_ff/layer_1/kernel"]),
], ids=["more_layers", "fewer_layers", "mis_shaped"])
def test_a_tf2_checkpoint_that_does_not_fit_assigns_nothing(
    tmp_path, overrides, texts):
  prefix = _task_checkpoint(tmp_path, tiny_config())
  target = EtcModel(tiny_config(**overrides))
  target.build()
  before = _weights(target)
  with pytest.raises(UserInputError) as error:
    initialization.initialize_encoder(target, prefix)
  message = str(error.value)
  assert message.startswith(f"checkpoint {prefix} ")
  for text in texts:
    assert text in message
  for a, b in zip(before, _weights(target)):
    np.testing.assert_array_equal(a, b)


def test_a_file_that_is_not_a_checkpoint_is_named(tmp_path):
  target = EtcModel(tiny_config())
  target.build()
  (tmp_path / "notes.txt").write_text("hello")
  # A random file, a directory without a checkpoint, a random index.
  with pytest.raises(FileNotFoundError, match="notes.txt"):
    initialization.initialize_encoder(target, str(tmp_path / "notes.txt"))
  with pytest.raises(FileNotFoundError, match=str(tmp_path)):
    initialization.initialize_encoder(target, str(tmp_path))
  (tmp_path / "fake.index").write_text("hello")
  with pytest.raises(UserInputError,
                     match=f"{tmp_path / 'fake'}: not a readable checkpoint"):
    initialization.initialize_encoder(target, str(tmp_path / "fake"))


@pytest.mark.parametrize("kind", ["tf2", "official"])
def test_a_truncated_data_file_is_named_and_assigns_nothing(tmp_path, kind):
  config = tiny_config(num_hidden_layers=1)
  source = EtcModel(config)
  source.build()
  if kind == "tf2":
    prefix = tf.train.Checkpoint(encoder=source).save(str(tmp_path / "c"))
  else:
    prefix = official.save_official_checkpoint(source,
                                               str(tmp_path / "model.ckpt"))
  data = tmp_path / (os.path.basename(prefix) + ".data-00000-of-00001")
  data.write_bytes(data.read_bytes()[:data.stat().st_size // 2])
  target = EtcModel(config)
  target.build()
  before = _weights(target)
  with pytest.raises(UserInputError,
                     match=f"{prefix}: the checkpoint cannot be read"):
    initialization.initialize_encoder(target, prefix)
  for a, b in zip(before, _weights(target)):
    np.testing.assert_array_equal(a, b)
