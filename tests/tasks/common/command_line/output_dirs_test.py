"""Tests for tasks.common.command_line.output_dirs: an output folder with a
regular file in its way is refused before anything is written, naming it."""

import pytest

from etc_realformer.errors import UserInputError
from tasks.common import output_files
from tasks.common.command_line import output_dirs


def test_check_output_flag_names_the_flag_and_the_file(tmp_path):
  regular = tmp_path / "file"
  regular.write_text("x")
  with pytest.raises(UserInputError,
                     match=f"^--model_dir={regular}: is a regular file"):
    output_dirs.check_output_flag("model_dir", str(regular))
  with pytest.raises(UserInputError, match=f"under {regular}, a regular"):
    output_dirs.check_output_flag("export_dir", str(regular / "out"))
  output_dirs.check_output_flag("export_dir", None)
  output_dirs.check_output_flag("export_dir", str(tmp_path / "a" / "b"))
  assert not (tmp_path / "a").exists()  # checked, not made


def test_check_output_dir_is_an_output_file_error(tmp_path):
  regular = tmp_path / "file"
  regular.write_text("x")
  with pytest.raises(output_files.OutputFileError, match="is a regular file"):
    output_dirs.check_output_dir(str(regular / "out"))
  output_dirs.check_output_dir(str(tmp_path / "new" / "out"))
