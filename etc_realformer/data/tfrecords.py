"""`tf.train.Example` writing and parsing driven by one feature spec.

A feature spec maps a feature name to `(dtype, shape)`:
- integer dtypes are stored as int64 lists and parsed back to the spec dtype;
- `tf.string` features are stored as bytes lists;
- a fully known shape is parsed with `FixedLenFeature`; a shape with a `None`
  dimension (only 1-D `(None,)` is supported) with `VarLenFeature`, densified
  (strings padded with b"", numbers with 0).

`match_files` is the project's one expansion of file patterns (TFRecords
here; the tasks' raw inputs through `tasks.common.inputs.input_files`).
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


def _stored_kind(dtype: tf.DType) -> str:
  """The `tf.train.Feature` list a feature of `dtype` is stored in."""
  if dtype == tf.string:
    return "bytes_list"
  return "float_list" if dtype.is_floating else "int64_list"


def first_example(path: str) -> Optional[tf.train.Example]:
  """The first record of a TFRecord file as a tf.Example (None: no record).

  Raises:
    UserInputError: not a TFRecord file, or its first record not a
      tf.train.Example.
  """
  try:
    first = next(iter(tf.data.TFRecordDataset(path).take(1)), None)
  except tf.errors.DataLossError as e:
    raise UserInputError(f"{path}: not a TFRecord file ({e.message})") from e
  if first is None:
    return None
  try:
    return tf.train.Example.FromString(first.numpy())
  except Exception as e:  # protobuf's DecodeError
    raise UserInputError(f"{path}: record 0 is not a tf.train.Example "
                         f"({e})") from e


def check_first_record(path: str, spec: FeatureSpec, hint: str = "") -> None:
  """Checks the first record of a TFRecord file against a feature spec.

  TFRecords made at other sequence lengths than the reader's (128 tokens
  read at 256) fail only inside tf.data, in the middle of a run, with an
  error that names neither file nor setting. One record read when the
  input is opened catches them with the file, the feature and both lengths.
  Only fixed-shape features are checked; an empty file passes (its
  reader reports that it read nothing).

  Args:
    path: a TFRecord file.
    spec: the reader's feature spec.
    hint: appended to a length mismatch's message (the reader's settings).

  Raises:
    UserInputError: not a TFRecord file of tf.Examples, or a fixed-shape
      feature missing, of another type or of another length.
  """
  example = first_example(path)
  if example is None:
    return
  stored = example.features.feature
  for name, (dtype, shape) in spec.items():
    if None in shape:
      continue
    if name not in stored:
      raise UserInputError(f"{path}: record 0 has no feature {name!r} "
                           f"(has: {sorted(stored)})")
    kind = stored[name].WhichOneof("kind")
    if kind != _stored_kind(dtype):
      raise UserInputError(f"{path}: record 0, feature {name!r}: stored as "
                           f"{kind}, expected {_stored_kind(dtype)} "
                           f"({dtype.name})")
    count = len(getattr(stored[name], kind).value)
    expected = int(np.prod(shape, dtype=np.int64))
    if count != expected:
      raise UserInputError(
          f"{path}: record 0, feature {name!r} has {count} values where "
          f"the reader expects {expected} (shape {list(shape)})" +
          (f"; {hint}" if hint else ""))


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
