"""Writing a task's outputs whole, with errors that name the path.

- `writing`: a write's errors (a full disk, a folder that is a file,
  read-only, no permission) as an `OutputFileError` naming the path;
- `whole_file`: a file written under a temporary name and renamed when
  complete, so that no half-written file is left;
- `write_json`: the tasks' reports and submissions; `write_jsonl`: JSON
  values one per line, gzipped when the path ends in `.gz` (the same values
  give the same bytes);
- `unbatch`: the batched arrays of a predict pass as one dict per example.
"""

import contextlib
import json
import os
from typing import Any, Dict, Iterable, Iterator, List, Mapping
import zlib

import tensorflow as tf

from etc_realformer.errors import UserInputError


class OutputFileError(UserInputError):
  """An output cannot be written: its folder is a regular file, the disk is
  full, it is read-only or not permitted."""


@contextlib.contextmanager
def writing(path: str) -> Iterator[None]:
  """Turns the errors of writing `path` (an OSError: no space left, not a
  folder, read-only, no permission; or a tf.errors equivalent) into an
  `OutputFileError` naming it."""
  try:
    yield
  except OSError as e:
    raise OutputFileError(
        f"{path}: cannot write output: {e.strerror or e}") from e
  except (tf.errors.FailedPreconditionError, tf.errors.NotFoundError,
          tf.errors.PermissionDeniedError, tf.errors.ResourceExhaustedError,
          tf.errors.AlreadyExistsError, tf.errors.UnknownError) as e:
    raise OutputFileError(f"{path}: cannot write output: {e.message}") from e


@contextlib.contextmanager
def whole_file(path: str) -> Iterator[str]:
  """Yields the temporary sibling to write `path` as; renames it to `path`
  when the block succeeds, removes it when it fails (a full disk, an
  interrupt), so that `path` is never left half written. Errors name
  `path` (`writing`)."""
  tmp = f"{path}.tmp-{os.getpid()}"
  try:
    with writing(path):
      yield tmp
      if not tf.io.gfile.exists(tmp):
        # A GFile creates its file at the first write: none was made.
        with tf.io.gfile.GFile(tmp, "wb") as f:
          f.write(b"")
      tf.io.gfile.rename(tmp, path, overwrite=True)
  finally:
    if tf.io.gfile.exists(tmp):
      tf.io.gfile.remove(tmp)


def write_json(path: str, value: Any, sort_keys: bool = False) -> None:
  """Writes `value` as UTF-8 JSON (non-ASCII kept, one-space indent, a final
  newline): the tasks' submissions and reports. Written whole
  (`whole_file`): a failure (a full disk) leaves no partial file, and is an
  `OutputFileError` naming `path`."""
  with whole_file(path) as tmp, tf.io.gfile.GFile(tmp, "w") as f:
    json.dump(value, f, indent=1, sort_keys=sort_keys, ensure_ascii=False)
    f.write("\n")


def write_jsonl(path: str, values: Iterable[Any]) -> int:
  """Writes JSON values one per line (UTF-8, non-ASCII kept); returns how
  many.

  A path ending in `.gz` is written as gzip data with a zero timestamp and no
  file name in its header (as `gzip.compress(..., mtime=0)`), so that the
  same values always give the same bytes. The values are streamed, and the
  file written whole (`whole_file`: a failure leaves no partial
  file and is an `OutputFileError` naming `path`).
  """
  compressor = (zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
                if path.endswith(".gz") else None)
  count = 0
  with whole_file(path) as tmp, tf.io.gfile.GFile(tmp, "wb") as f:
    for value in values:
      line = (json.dumps(value, ensure_ascii=False) + "\n").encode("utf-8")
      f.write(compressor.compress(line) if compressor else line)
      count += 1
    if compressor:
      f.write(compressor.flush())
  return count


def unbatch(batched: Mapping[str, Any]) -> List[Dict[str, Any]]:
  """name -> [N, ...] arrays as N dicts name -> [...], one per example.

  Raises:
    ValueError: the arrays do not all have N rows.
  """
  lengths = {name: len(value) for name, value in batched.items()}
  if len(set(lengths.values())) > 1:
    raise ValueError(f"unbatch: arrays of different lengths {lengths}")
  count = next(iter(lengths.values()), 0)
  return [{k: v[i] for k, v in batched.items()} for i in range(count)]
