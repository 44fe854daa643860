r"""Caches WikiHop features: released json -> TFRecords + a stats JSON.

  python -m tasks.wikihop.preprocess --input=dev.json --vocab=vocab.txt \
      --output_dir=DIR [--strict] [--long_seq_len=4096 --global_seq_len=430]

writes `DIR/dev.tfrecord` (one `tf.train.Example` per kept record, with the
features of `features.feature_spec`) and `DIR/dev.stats.json` (examples read,
written, truncated and by how much, skipped per reason with the list of
skipped records: file, id, field). Bad records are skipped unless `--strict`,
which fails on the first one with an error naming file, record id and field.
An id given twice refuses the file (naming both records) unless
`--skip_duplicate_ids`, which keeps the first and counts the others as
`duplicate_id`; a run that writes no example (e.g. a file of another task)
fails.
A missing or malformed input file or vocabulary is one line on stderr and
exit code 2.

Supports are split into sentences by NLTK's Punkt in Python, as the original
(`features.split_supports`); the rest of featurization is `WikiHopFeaturizer`'s
in-graph code, run through `tf.data` (`WikiHopStep`, a
`preprocessing.RecordFnStep`): the same ops an exported serving signature runs
on the same split. The binary runs it as an Apache Beam pipeline
(`WikiHopPipeline`, `tasks.common.pipeline.beam_pipeline`; Beam's pipeline
options pass through, the outputs do not depend on them).
"""

import dataclasses
from typing import Any, Dict, List, Optional, Tuple

from absl import flags
import numpy as np

from tasks.common.command_line import beam_binary
from tasks.common.command_line import preprocess_flags
from tasks.common.inputs import input_errors
from tasks.common.inputs import record_stats
from tasks.common.pipeline import beam_pipeline
from tasks.common.pipeline import pipeline_task
from tasks.common.pipeline import preprocessing
from tasks.wikihop import data
from tasks.wikihop import features as features_lib


def read_file(input_path: str, strict: bool = False
              ) -> Tuple[List[data.WikiHopRecord], record_stats.RecordStats]:
  """`preprocessing.read_file` of a WikiHop file."""
  return preprocessing.read_file(data.read_records, input_path, strict)


class WikiHopStep(preprocessing.RecordFnStep[data.WikiHopRecord]):
  """A WikiHop record -> its features; a record whose candidates alone do
  not fit the sequences is bad (`data.TOO_LONG`)."""

  def to_inputs(self, record: data.WikiHopRecord) -> Tuple[Any, ...]:
    # Punkt splits the supports here, in Python (see
    # tasks.common.featurization.sentences).
    sentences, num_sentences = features_lib.split_supports(record.supports)
    return (record.query, record.candidates, sentences, num_sentences,
            record.answer, record.id)

  def finish(self, record: data.WikiHopRecord, features: Dict[str, np.ndarray],
             amounts: Dict[str, int]) -> preprocessing.Outcome:
    # `overflow` is a verdict, not a truncation amount.
    if not amounts.pop("overflow"):
      return preprocessing.Featurized([features], amounts)
    return input_errors.BadRecordError(
        self.input_file, record.id, "candidates", data.TOO_LONG,
        f"{len(record.candidates)} candidates do not fit long_seq_len "
        f"{self.featurizer.long_seq_len} / global_seq_len "
        f"{self.featurizer.global_seq_len}")


def write_features(valid: List[data.WikiHopRecord],
                   stats: record_stats.RecordStats, output_dir: str,
                   featurizer: features_lib.WikiHopFeaturizer
                   ) -> record_stats.RecordStats:
  """Featurizes `read_file`'s records into `output_dir`; returns the stats.

  Raises:
    input_errors.BadRecordError: in strict mode, the first record too long.
  """
  return preprocessing.featurize_into(
      output_dir, valid, WikiHopStep(featurizer, stats.input_file), stats)


def preprocess_file(input_path: str,
                    output_dir: str,
                    featurizer: features_lib.WikiHopFeaturizer,
                    strict: bool = False) -> record_stats.RecordStats:
  """Featurizes one WikiHop file into `output_dir`; returns its stats.

  Raises:
    input_errors.InputFileError: the input is missing, empty or malformed.
    input_errors.BadRecordError: in strict mode, the first bad record.
  """
  valid, stats = read_file(input_path, strict)
  return write_features(valid, stats, output_dir, featurizer)


@dataclasses.dataclass
class WikiHopPipeline(pipeline_task.FileTask):
  """`preprocess_file` as a Beam pipeline (`beam_pipeline.run`), the same
  outputs; `featurizer_args`: `make_featurizer`'s arguments."""
  featurizer_args: Dict[str, Any]
  strict: bool = False
  skip_duplicate_ids: bool = False

  def make_featurizer(self) -> features_lib.WikiHopFeaturizer:
    return make_featurizer(**self.featurizer_args)

  def read(self, unit, stats, work_dir):
    del work_dir  # Unused.
    return data.read_records(unit, stats=stats)

  def make_step(self, featurizer, unit) -> WikiHopStep:
    return WikiHopStep(featurizer, unit)


def make_featurizer(vocab: Optional[str], spm_model: Optional[str],
                    long_seq_len: int, global_seq_len: int,
                    max_num_sentences: Optional[int] = None,
                    lower_case: bool = True,
                    global_token_ids: Optional[List[str]] = None,
                    mark_query_subject: bool = False
                    ) -> features_lib.WikiHopFeaturizer:
  """The featurizer of the binary's flags (`global_token_ids`: the
  `--global_token_ids` strings, None for the vocabulary's defaults)."""
  ids = features_lib.GlobalTokenIds.from_flag(global_token_ids,
                                              "global_token_ids")
  return features_lib.WikiHopFeaturizer(
      vocab_path=vocab, spm_model_path=spm_model, long_seq_len=long_seq_len,
      global_seq_len=global_seq_len, global_token_ids=ids,
      max_num_sentences=max_num_sentences, lower_case=lower_case,
      mark_query_subject=mark_query_subject)


def _define_flags():
  """Flags only when run as a binary: importing must not define them (the
  training binaries define flags of the same names)."""
  flags.DEFINE_string(
      "input", None, "A qangaroo WikiHop json file (train.json / dev.json).")
  preprocess_flags.define_featurizer_flags(global_seq_len=430)
  preprocess_flags.define_duplicate_ids_flag()
  flags.DEFINE_integer(
      "max_num_sentences", None,
      "Optional cap on document sentences per example (original: 200).")
  preprocess_flags.define_global_token_ids_flag(features_lib.GlobalTokenIds)
  flags.DEFINE_bool(
      "mark_query_subject", False,
      "Give document mentions of the query's subject token type 2 (this "
      "project's option; the original does not; the model must be trained "
      "and served with the same setting).")


def main(argv):
  beam_args = beam_binary.check_command_line(argv, ("input", "output_dir"))
  f = flags.FLAGS
  task = WikiHopPipeline(
      dict(max_num_sentences=f.max_num_sentences,
           global_token_ids=f.global_token_ids,
           mark_query_subject=f.mark_query_subject,
           **preprocess_flags.featurizer_flag_values()), strict=f.strict,
      skip_duplicate_ids=f.skip_duplicate_ids)
  beam_pipeline.run_and_print(task, [f.input], f.output_dir, beam_args)


if __name__ == "__main__":
  _define_flags()
  beam_binary.run_binary(main)
