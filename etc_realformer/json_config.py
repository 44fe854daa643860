"""Reading a model config from JSON, as the released checkpoints ship it
(`etc_config.json`, `bert_config.json`): one reader for every config class.

Unknown keys are reported and kept, not errors (newer files may carry keys
this version does not know); a missing file, invalid JSON, a missing
required key or a bad value is one `UserInputError` naming the file.
"""

import dataclasses
import json
from typing import Any, Dict, Sequence, Tuple, Type, TypeVar

from absl import logging
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
