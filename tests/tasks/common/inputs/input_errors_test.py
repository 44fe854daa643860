"""Tests for tasks.common.inputs.input_errors: a bad record names its file,
record and field, in its message and in the stats JSON."""

from etc_realformer.errors import UserInputError
from tasks.common.inputs import input_errors


def test_bad_record_error_names_file_record_and_field():
  error = input_errors.BadRecordError("dev.json", "q7", "answer",
                                      input_errors.EMPTY_TEXT, "''")
  assert str(error) == "dev.json: record 'q7', field 'answer': empty_text ('')"
  assert error.to_dict() == dict(file="dev.json", id="q7", field="answer",
                                 reason="empty_text", detail="''")
  assert isinstance(error, UserInputError)


def test_a_duplicate_id_refuses_the_file():
  assert issubclass(input_errors.DuplicateIdError,
                    input_errors.InputFileError)
  assert issubclass(input_errors.InputFileError, UserInputError)
