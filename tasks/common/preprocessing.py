"""The parts every task's `preprocess` CLI shares (raw file -> cache).

Each task's `preprocess.py` keeps its own reading, featurization and
labelling; what is the same in all of them lives here so that the output
files, the all-or-nothing write, the messages and the common flags stay
identical across tasks:

- `featurize_records`: validated records -> the in-graph featurizer (a
  parallel, ordered `tf.data` map) -> labels and checks per record -> the
  TFRecord cache and its stats: the skeleton of every `preprocess_file`;
  `featurize_into` is the same into an output folder (`output_paths`);
- `output_paths`: `DIR/<stem>.tfrecord`, `DIR/<stem>.stats.json`, ...;
- `default_is_training`: the "file name holds 'train'" default;
- `ordered_map`: a deterministic parallel `tf.data` map (outputs stay
  aligned with the records read);
- `write_cache`: the TFRecord written through a `.tmp` file (removed on any
  error, e.g. the first bad record under `--strict`) and the stats JSON;
- `log_written` / `summary_line`: the log line and the printed summary;
- `define_featurizer_flags`: the flags every preprocessing binary has, and
  `require_flags` / `check_command_line`: the checks of the command line (a
  `UserInputError`, so that `etc_realformer.cli` prints one line, not
  absl's usage text).
"""

import os
from typing import (Any, Callable, Dict, Iterable, Mapping, Optional,
                    Sequence, Tuple)

import numpy as np

from absl import flags
from absl import logging
import tensorflow as tf

from etc_realformer.data import tfrecords
from etc_realformer.errors import UserInputError
from tasks.common import records

# The flags `define_featurizer_flags` defines belong to (are key flags of,
# listed by `--help` of) the binary that calls it, not this module.
flags.disclaim_key_flags()


# What `featurize_records` asks of a task, per record: the featurizer's
# inputs, and, after featurizing, a check that may label the features in
# place and returns a `BadRecordError` to skip the record (None to keep it).
Finish = Callable[[Any, Dict[str, np.ndarray], Dict[str, int]],
                  Optional[records.BadRecordError]]


def featurize_records(
    valid: Sequence[Any],
    to_inputs: Callable[[Any], Any],
    output_signature: Any,
    featurize: Callable[..., Tuple[Mapping[str, tf.Tensor],
                                   Mapping[str, tf.Tensor]]],
    spec: tfrecords.FeatureSpec,
    record_path: str,
    stats_path: str,
    stats: records.RecordStats,
    finish: Optional[Finish] = None) -> records.RecordStats:
  """Featurizes validated records into a TFRecord cache and its stats.

  The records go through `tf.data` (a generator, so memory stays flat on
  large files) and the featurizer's in-graph code in parallel, in order; each
  result is checked by `finish`, counted (truncation amounts, written,
  skipped) and serialized with `spec`. The cache is written all or nothing
  (`write_cache`).

  Args:
    valid: the records that passed the reader's checks, in file order.
    to_inputs: record -> the featurizer's inputs (matching
      `output_signature`; a dict is passed to `featurize` as one argument, a
      tuple as several).
    output_signature: the `tf.TensorSpec`s of `to_inputs`' values.
    featurize: inputs -> (features, truncation amounts), graph code.
    spec: the feature spec of the cached examples.
    record_path, stats_path: the outputs (`output_paths`).
    stats: the file's stats, holding the reader's counts already.
    finish: optional per-record check and labelling (see `Finish`).

  Returns:
    `stats`.
  """
  def examples():
    if not valid:
      return
    ds = tf.data.Dataset.from_generator(
        lambda: (to_inputs(r) for r in valid),
        output_signature=output_signature)
    fn = featurize if isinstance(output_signature, dict) else (
        lambda *args: featurize(*args))
    mapped = ordered_map(ds, fn)
    for record, (features, amounts) in zip(valid,
                                           mapped.as_numpy_iterator()):
      amounts = {k: int(v) for k, v in amounts.items()}
      error = finish(record, features, amounts) if finish else None
      if error is not None:
        stats.handle_bad_record(error)
        continue
      stats.add_truncation(amounts)
      stats.examples_written += 1
      yield tfrecords.to_tf_example(features, spec)

  write_cache(record_path, stats_path, examples(), stats)
  log_written(stats.input_file, record_path, stats)
  return stats


def featurize_into(output_dir: str, valid: Sequence[Any],
                   stats: records.RecordStats, to_inputs: Callable[[Any], Any],
                   output_signature: Any, featurize: Callable,
                   spec: tfrecords.FeatureSpec,
                   finish: Optional[Finish] = None) -> records.RecordStats:
  """`featurize_records` into `output_dir` (created if missing): the
  `output_paths` of `stats.input_file`, e.g. DIR/dev.tfrecord and
  DIR/dev.stats.json."""
  tf.io.gfile.makedirs(output_dir)
  record_path, stats_path = output_paths(stats.input_file, output_dir)
  return featurize_records(valid, to_inputs, output_signature, featurize,
                           spec, record_path, stats_path, stats, finish)


def output_paths(input_path: str, output_dir: str,
                 suffixes: Sequence[str] = ("tfrecord", "stats.json"),
                 stem: Optional[str] = None) -> tuple:
  """`DIR/<stem>.<suffix>` for each suffix; `stem` defaults to the input's
  file name without its extension (dev.json -> dev)."""
  if stem is None:
    stem = os.path.splitext(os.path.basename(input_path))[0]
  return tuple(os.path.join(output_dir, f"{stem}.{s}") for s in suffixes)


def default_is_training(input_path: str) -> bool:
  """Training files are those whose name holds "train" (any case)."""
  return "train" in os.path.basename(input_path).lower()


def ordered_map(ds: tf.data.Dataset, fn: Callable) -> tf.data.Dataset:
  """`ds.map(fn)` in parallel, with outputs in input order."""
  options = tf.data.Options()
  options.deterministic = True
  return ds.map(fn, num_parallel_calls=tf.data.AUTOTUNE).with_options(
      options)


def write_cache(record_path: str, stats_path: str,
                examples: Iterable[tf.train.Example],
                stats: records.RecordStats) -> None:
  """Writes `examples` to `record_path`, then `stats` to `stats_path`.

  The records go to `record_path + ".tmp"`, renamed only once all are
  written: an error on the way (a bad record in strict mode, an interrupt)
  removes the partial file and leaves no cache behind.
  """
  tmp_path = record_path + ".tmp"
  try:
    tfrecords.write_tfrecord(tmp_path, examples)
  except BaseException:
    if tf.io.gfile.exists(tmp_path):
      tf.io.gfile.remove(tmp_path)
    raise
  tf.io.gfile.rename(tmp_path, record_path, overwrite=True)
  stats.write_json(stats_path)


def log_written(input_path: str, record_path: str,
                stats: records.RecordStats) -> None:
  logging.info("%s: read %d, wrote %d to %s, truncated %d, skipped %d %s",
               input_path, stats.examples_read, stats.examples_written,
               record_path, stats.examples_truncated, stats.num_skipped,
               dict(stats.skipped))


def summary_line(input_path: str, stats: records.RecordStats) -> str:
  """What a preprocessing binary prints for one input file."""
  return (f"{input_path}: read {stats.examples_read}, written "
          f"{stats.examples_written}, truncated {stats.examples_truncated}, "
          f"skipped {stats.num_skipped} {dict(stats.skipped)}")


def define_featurizer_flags(global_seq_len: int,
                            long_seq_len_help: str = "Long input length."
                            ) -> None:
  """The flags of every preprocessing binary (besides `--input`): vocab,
  spm_model, output_dir, strict, long_seq_len (4096), global_seq_len,
  lower_case. Call only when run as a binary: the training binaries define
  flags of the same names."""
  flags.DEFINE_string("vocab", None, "WordPiece vocab.txt.")
  flags.DEFINE_string("spm_model", None,
                      "SentencePiece .model (instead of --vocab).")
  flags.DEFINE_string("output_dir", None, "Output directory.")
  flags.DEFINE_bool("strict", False,
                    "Fail on the first bad record instead of skipping it.")
  flags.DEFINE_integer("long_seq_len", 4096, long_seq_len_help)
  flags.DEFINE_integer("global_seq_len", global_seq_len,
                       "Global input length.")
  flags.DEFINE_bool("lower_case", True, "Uncased vocabulary.")


def featurizer_flag_values() -> Dict[str, Any]:
  """The vocabulary, length and casing flags of `define_featurizer_flags`,
  named as the binaries' `make_featurizer` arguments: vocab, spm_model,
  long_seq_len, global_seq_len, lower_case."""
  f = flags.FLAGS
  return dict(vocab=f.vocab, spm_model=f.spm_model,
              long_seq_len=f.long_seq_len, global_seq_len=f.global_seq_len,
              lower_case=f.lower_case)


def require_flags(names: Sequence[str]) -> None:
  """Raises `UserInputError` naming the absl flags of `names` left unset."""
  missing = [f"--{n}" for n in names if flags.FLAGS[n].value in (None, "")]
  if missing:
    raise UserInputError(f"{', '.join(missing)} "
                         f"{'is' if len(missing) == 1 else 'are'} required")


def check_command_line(argv: Sequence[str], required: Sequence[str],
                       one_of: Sequence[str] = ()) -> None:
  """A binary's command line: no positional arguments (`argv[1:]`), the
  `required` flags set, and, when given, exactly one of the `one_of` flags
  (alternative inputs).

  Raises:
    UserInputError: naming the unexpected arguments, the unset flags, or the
      alternatives.
  """
  if len(argv) > 1:
    raise UserInputError(f"unexpected arguments: {list(argv[1:])}")
  require_flags(required)
  if one_of and sum(bool(flags.FLAGS[n].value) for n in one_of) != 1:
    raise UserInputError("give exactly one of " +
                         " and ".join(f"--{n}" for n in one_of))
