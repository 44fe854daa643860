"""`resolve_checkpoint_path`: prefixes, directories, index and data files."""

import pytest
import tensorflow as tf

from conftest import GOLDEN_DIR
from etc_realformer.checkpoints.paths import resolve_checkpoint_path
from etc_realformer.errors import UserInputError


def test_the_forms_a_user_gives():
  prefix = str(GOLDEN_DIR / "model.ckpt")
  for given in (prefix, str(GOLDEN_DIR), prefix + ".index",
                prefix + ".data-00000-of-00001"):
    assert resolve_checkpoint_path(given) == prefix


def test_latest_of_a_state_file(tmp_path):
  checkpoint = tf.train.Checkpoint(v=tf.Variable(1.0))
  manager = tf.train.CheckpointManager(checkpoint, str(tmp_path), 3)
  manager.save()
  second = manager.save()
  assert resolve_checkpoint_path(str(tmp_path)) == second


def test_errors_name_the_path(tmp_path):
  with pytest.raises(FileNotFoundError, match="no checkpoint"):
    resolve_checkpoint_path(str(tmp_path))
  with pytest.raises(FileNotFoundError, match="missing"):
    resolve_checkpoint_path(str(tmp_path / "missing"))
  for name in ("a", "b"):
    tf.train.Checkpoint(v=tf.Variable(1.0)).write(str(tmp_path / name))
  with pytest.raises(UserInputError, match="several checkpoints"):
    resolve_checkpoint_path(str(tmp_path))
