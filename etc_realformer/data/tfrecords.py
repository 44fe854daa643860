"""`tf.train.Example` writing and parsing driven by one feature spec.

A feature spec maps a feature name to `(dtype, shape)`:
- integer dtypes are stored as int64 lists and parsed back to the spec dtype;
- `tf.string` features are stored as bytes lists;
- a fully known shape is parsed with `FixedLenFeature`; a shape with a `None`
  dimension (only 1-D `(None,)` is supported) with `VarLenFeature`, densified
  (strings padded with b"", numbers with 0).

`match_files` is the project's one expansion of file patterns (TFRecords
here; the tasks' raw inputs through `tasks.common.io`).
"""

from typing import (Any, Dict, Iterable, List, Mapping, Optional,
                    Sequence, Tuple, Union)

import numpy as np
import tensorflow as tf

from etc_realformer.errors import UserInputError

FeatureSpec = Mapping[str, Tuple[tf.DType, Tuple[Optional[int], ...]]]


def _to_feature(value: Any, dtype: tf.DType) -> tf.train.Feature:
  array = np.asarray(value)
  if dtype == tf.string:
    flat = array.reshape(-1).tolist()
    flat = [v if isinstance(v, bytes) else str(v).encode("utf-8")
            for v in flat]
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=flat))
  if dtype.is_integer or dtype == tf.bool:
    return tf.train.Feature(int64_list=tf.train.Int64List(
        value=array.reshape(-1).astype(np.int64).tolist()))
  if dtype.is_floating:
    return tf.train.Feature(float_list=tf.train.FloatList(
        value=array.reshape(-1).astype(np.float32).tolist()))
  raise ValueError(f"unsupported dtype {dtype}")


def to_tf_example(features: Mapping[str, Any],
                  spec: FeatureSpec) -> tf.train.Example:
  """Serializes the spec's features (numpy values or eager tensors).

  Raises:
    ValueError: a spec feature is missing or a fixed shape does not match.
  """
  feature_map = {}
  for name, (dtype, shape) in spec.items():
    if name not in features:
      raise ValueError(f"feature {name!r} missing (spec: {sorted(spec)})")
    value = features[name]
    if isinstance(value, tf.Tensor):
      value = value.numpy()
    if None not in shape and tuple(np.shape(value)) != tuple(shape):
      raise ValueError(f"feature {name!r}: shape {np.shape(value)} does not "
                       f"match spec {shape}")
    feature_map[name] = _to_feature(value, dtype)
  return tf.train.Example(features=tf.train.Features(feature=feature_map))


def _storage_dtype(dtype: tf.DType) -> tf.DType:
  if dtype == tf.string:
    return tf.string
  if dtype.is_floating:
    return tf.float32
  return tf.int64


def parsing_spec(spec: FeatureSpec) -> Dict[str, Any]:
  """The `tf.io.parse_example` spec for a feature spec."""
  out = {}
  for name, (dtype, shape) in spec.items():
    if None in shape:
      if len(shape) != 1:
        raise ValueError(f"{name}: only (None,) variable shapes supported")
      out[name] = tf.io.VarLenFeature(_storage_dtype(dtype))
    else:
      out[name] = tf.io.FixedLenFeature(list(shape), _storage_dtype(dtype))
  return out


def parse(serialized: tf.Tensor, spec: FeatureSpec) -> Dict[str, tf.Tensor]:
  """Parses serialized examples, one (scalar) or a batch ([B]).

  Integers come back in the spec's dtype (they are stored as int64);
  variable-length `(None,)` features come back dense ([longest in the
  batch], padded with 0 or b"").
  """
  serialized = tf.convert_to_tensor(serialized, tf.string)
  if serialized.shape.rank == 0:
    parsed = tf.io.parse_single_example(serialized, parsing_spec(spec))
  else:
    parsed = tf.io.parse_example(serialized, parsing_spec(spec))
  out = {}
  for name, (dtype, _) in spec.items():
    value = parsed[name]
    if isinstance(value, tf.SparseTensor):
      value = tf.sparse.to_dense(
          value, default_value=b"" if dtype == tf.string else None)
    if value.dtype != dtype:
      value = tf.cast(value, dtype)
    out[name] = value
  return out


def write_tfrecord(path: str, examples: Iterable[tf.train.Example]) -> int:
  """Writes examples to one TFRecord file; returns how many were written."""
  count = 0
  with tf.io.TFRecordWriter(path) as writer:
    for example in examples:
      writer.write(example.SerializeToString())
      count += 1
  return count


class NoMatchingFileError(UserInputError, FileNotFoundError):
  """A file pattern matches no file.

  A `UserInputError` (the binaries print it as one line, exit code 2) that
  callers may also catch as the `FileNotFoundError` it is.
  """


def match_files(file_patterns: Union[str, Sequence[str]],
                kind: str = "TFRecord file") -> List[str]:
  """The files of comma-separated or listed glob patterns.

  Every input of the project (TFRecords, raw task files, text corpora) is
  expanded here. Each pattern's matches are sorted, the patterns keep their
  order, and a file matched twice is listed once (at its first match): the
  same file given twice is not read twice. Blank patterns (a trailing
  comma) are ignored.

  Args:
    file_patterns: the patterns.
    kind: what the files are, for the error ("no <kind> matches ...").

  Raises:
    NoMatchingFileError: a pattern matches nothing, or no pattern is given
      (the message names the pattern).
  """
  split = (file_patterns.split(",") if isinstance(file_patterns, str)
           else file_patterns)
  patterns = [p.strip() for p in split if p and p.strip()]
  if not patterns:
    raise NoMatchingFileError(f"no {kind} given ({file_patterns!r})")
  files: Dict[str, None] = {}  # Ordered, without repeats.
  for pattern in patterns:
    matched = sorted(tf.io.gfile.glob(pattern))
    if not matched:
      raise NoMatchingFileError(f"no {kind} matches {pattern!r}")
    files.update(dict.fromkeys(matched))
  return list(files)


def make_dataset(file_patterns: Union[str, Sequence[str]],
                 spec: FeatureSpec,
                 deterministic: bool = True) -> tf.data.Dataset:
  """A dataset of parsed feature dicts from TFRecord files (unbatched).

  Raises:
    NoMatchingFileError: a pattern matches nothing.
  """
  ds = tf.data.TFRecordDataset(match_files(file_patterns))
  options = tf.data.Options()
  options.deterministic = deterministic
  # Straight-line code: traced without AutoGraph's conversion cost.
  return ds.map(tf.autograph.experimental.do_not_convert(
      lambda s: parse(s, spec)),
                num_parallel_calls=tf.data.AUTOTUNE).with_options(options)
