"""`model_dir_lock`: one training per model_dir, a lock that the OS
releases with its process, output folders that name what is in the way."""

import os

import pytest

from etc_realformer.errors import UserInputError
from etc_realformer.training import model_dir_lock


def test_a_second_holder_is_refused_until_the_first_releases(tmp_path):
  model_dir = str(tmp_path / "model")
  first = model_dir_lock.acquire(model_dir)
  # flock belongs to the open file: a second open in this process is
  # refused as another process's would be.
  with pytest.raises(UserInputError) as error:
    model_dir_lock.acquire(model_dir)
  message = str(error.value)
  assert message.startswith(f"model_dir {model_dir}: another training")
  assert f"(pid {os.getpid()})" in message
  model_dir_lock.release(first)
  # Released (as the OS does for a killed holder): the stale file is no bar.
  assert os.path.exists(os.path.join(model_dir, model_dir_lock.LOCK_FILE))
  with model_dir_lock.hold(model_dir):
    with pytest.raises(UserInputError):
      model_dir_lock.acquire(model_dir)
  model_dir_lock.release(model_dir_lock.acquire(model_dir))


def test_an_output_dir_under_a_regular_file_is_named(tmp_path):
  (tmp_path / "file").write_text("x")
  for path in (tmp_path / "file", tmp_path / "file" / "model"):
    with pytest.raises(UserInputError, match=f"^export_dir {path}: "):
      model_dir_lock.make_output_dir(str(path), "export_dir")
  with pytest.raises(UserInputError, match=f"^model_dir {tmp_path}/file"):
    model_dir_lock.acquire(str(tmp_path / "file" / "model"))
  model_dir_lock.make_output_dir(str(tmp_path / "a" / "b"), "export_dir")
  assert (tmp_path / "a" / "b").is_dir()
