"""Reading a model config from JSON, as the released checkpoints ship it
(`etc_config.json`, `bert_config.json`): one reader for every config class.

Unknown keys are reported and kept, not errors (newer files may carry keys
this version does not know); a missing file, invalid JSON, a missing
required key or a bad value is one `UserInputError` naming the file.
"""

import dataclasses
import json
import numbers
import typing
from typing import Any, Dict, Sequence, Tuple, Type, TypeVar

from absl import logging
import numpy as np
import tensorflow as tf

from etc_realformer.errors import UserInputError

_Config = TypeVar("_Config", bound="JsonConfig")


def read_json_object(path: str) -> Dict[str, Any]:
  """The JSON object in `path`.

  Raises:
    FileNotFoundError: no such file.
    UserInputError: not valid JSON, or not an object.
  """
  if not tf.io.gfile.exists(path):
    raise FileNotFoundError(f"config file not found: {path}")
  with tf.io.gfile.GFile(path, "r") as f:
    text = f.read()
  try:
    values = json.loads(text)
  except json.JSONDecodeError as e:
    raise UserInputError(f"{path}: not valid JSON: {e}") from e
  if not isinstance(values, dict):
    raise UserInputError(f"{path}: expected a JSON object")
  return values


def build(cls: Type, values: Dict[str, Any], source: str,
          ignored: Sequence[str] = ()) -> Any:
  """`cls(**known keys, unknown_keys=...)` with the keys it does not know
  logged and kept; `ignored` keys are dropped silently.

  Raises:
    UserInputError: `vocab_size` is missing or a value is bad (`source`
      named).
  """
  known = {f.name for f in dataclasses.fields(cls)} - {"unknown_keys"}
  kwargs = {k: v for k, v in values.items() if k in known}
  unknown = {k: v for k, v in values.items()
             if k not in known and k not in ignored}
  if "vocab_size" not in kwargs:
    raise UserInputError(f"{source}: missing required key 'vocab_size'")
  if unknown:
    logging.warning("%s: unknown config keys ignored by the model: %s",
                    source, sorted(unknown))
  try:
    return cls(**kwargs, unknown_keys=unknown)
  except (TypeError, ValueError) as e:
    raise UserInputError(f"{source}: {e}") from e


def value_matches(value: Any, hint: Any) -> bool:
  """Whether `value` is of the field type `hint` (int is a float; a bool is
  not an int; a list is a tuple, as JSON and gin write them)."""
  origin, args = typing.get_origin(hint), typing.get_args(hint)
  if hint is Any:
    return True
  if origin is typing.Union:
    return any(value_matches(value, arg) for arg in args)
  if hint is type(None):
    return value is None
  if hint is bool:
    return isinstance(value, (bool, np.bool_))
  if hint is int:  # NumPy's integers too (a shape read from an array).
    return (isinstance(value, numbers.Integral) and
            not isinstance(value, (bool, np.bool_)))
  if hint is float:
    return (isinstance(value, numbers.Real) and
            not isinstance(value, (bool, np.bool_)))
  if hint is str:
    return isinstance(value, str)
  if origin is tuple or hint is tuple:
    if not isinstance(value, (tuple, list)):
      return False
    if len(args) == 2 and args[1] is Ellipsis:
      return all(value_matches(v, args[0]) for v in value)
    return not args or (len(args) == len(value) and
                        all(value_matches(v, a) for v, a in zip(value, args)))
  if origin is dict or hint is dict:
    return isinstance(value, dict)
  return True  # A type this check does not know: the class checks it.


def describe_type(hint: Any) -> str:
  """A field type in a user's words ("an integer or null")."""
  origin, args = typing.get_origin(hint), typing.get_args(hint)
  if origin is typing.Union:
    return " or ".join(describe_type(arg) for arg in args)
  if origin is tuple or hint is tuple:
    return (f"a list of {describe_type(args[0]).split(' ', 1)[-1]}s"
            if args else "a list")
  names = {type(None): "null", bool: "a boolean (True/False)",
           int: "an integer", float: "a number", str: "a string",
           dict: "a dict"}
  return names.get(hint, names.get(origin, getattr(hint, "__name__",
                                                   str(hint))))


def check_field_types(instance: Any, owner: str = "") -> None:
  """Checks every field of a dataclass instance against its type hint: a
  value from gin or JSON is not converted, so a string where a number
  belongs would otherwise fail later, far from its setting.

  Raises:
    UserInputError: "<owner>.<field>: expected <type>, got <value>".
  """
  owner = owner or type(instance).__name__
  hints = typing.get_type_hints(type(instance))
  for field in dataclasses.fields(instance):
    if field.name == "unknown_keys" or field.name not in hints:
      continue
    value = getattr(instance, field.name)
    if not value_matches(value, hints[field.name]):
      raise UserInputError(
          f"{owner}.{field.name}: expected {describe_type(hints[field.name])}, "
          f"got {value!r}")


def known_fields(cls: Type) -> Tuple[str, ...]:
  return tuple(f.name for f in dataclasses.fields(cls)
               if f.name != "unknown_keys")


class JsonConfig:
  """The JSON file side of a config dataclass with an `unknown_keys` field.

  The class defines `from_dict(values, source)`; it may extend `to_dict` to
  turn fields into their JSON form.
  """

  @classmethod
  def from_json_file(cls: Type[_Config], path: str) -> _Config:
    return cls.from_dict(read_json_object(path), source=path)

  def to_dict(self) -> Dict[str, Any]:
    """The fields but `unknown_keys` (those are not written back)."""
    values = dataclasses.asdict(self)
    values.pop("unknown_keys")
    return values

  def to_json_string(self) -> str:
    return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

  def to_json_file(self, path: str) -> None:
    with tf.io.gfile.GFile(path, "w") as f:
      f.write(self.to_json_string())
