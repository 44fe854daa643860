r"""Caches HotpotQA features: released JSON -> TFRecords + a stats JSON.

  python -m tasks.hotpotqa.preprocess --input=hotpot_dev_distractor_v1.json \
      --vocab=vocab.txt --output_dir=DIR [--is_training] [--strict] \
      [--long_seq_len=4096 --global_seq_len=256]

writes `DIR/<stem>.tfrecord` (one `tf.train.Example` per kept record, the
features of `features.feature_spec`) and `DIR/<stem>.stats.json` (records
read, written, truncated and by how much, skipped per reason with the list of
skipped records: file, id, field, reason). Bad records are skipped unless
`--strict`, which fails on the first one with an error naming file, record
id and field. An `_id` given twice refuses the file (naming both records)
unless `--skip_duplicate_ids`, which keeps the first and counts the others
as `duplicate_id`; a run that writes no example (e.g. a file of another
task) fails.

`--is_training` (default: on when the file name contains "train") applies
the original's training filter: examples with no supporting fact among the
kept tokens, or whose span answer cannot be located in a kept supporting
title / sentence, are skipped and counted by reason (`no_supporting_facts`,
`answer_not_found`, `answer_truncated`; with `--strict` they fail too).
Non-training (dev) examples are always kept.

A missing or malformed input file or vocabulary is one line on stderr and
exit code 2.

The model features come from `HotpotFeaturizer`'s in-graph code, run through
`tf.data` (`HotpotStep`, a `preprocessing.RecordFnStep`: the ops the exported
`serve_raw` signature runs); labels are then added in Python
(`features.add_labels`). The binary runs it as an Apache Beam pipeline
(`HotpotPipeline`, `tasks.common.pipeline.beam_pipeline`; Beam's pipeline
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
from tasks.hotpotqa import data
from tasks.hotpotqa import features as features_lib


def read_file(input_path: str, is_training: Optional[bool] = None,
              strict: bool = False
              ) -> Tuple[List[data.HotpotRecord], record_stats.RecordStats]:
  """`preprocessing.read_file` of a HotpotQA file: `is_training` (default:
  `preprocessing.default_is_training`) requires labels."""
  return preprocessing.read_file(
      data.read_records, input_path, strict,
      require_labels=preprocessing.is_training_file(input_path, is_training))


class HotpotStep(preprocessing.RecordFnStep[data.HotpotRecord]):
  """A HotpotQA record -> its labelled features; with `is_training`, the
  training filter makes a record that gives no training signal bad
  (`features.add_labels`)."""

  def __init__(self, featurizer: features_lib.HotpotFeaturizer,
               input_file: str, is_training: bool):
    super().__init__(featurizer, input_file)
    self.is_training = is_training

  def to_inputs(self, record: data.HotpotRecord) -> Tuple[Any, ...]:
    return (record.question, list(record.titles),
            [s for para in record.sentences for s in para],
            [len(p) for p in record.sentences], record.id)

  def finish(self, record: data.HotpotRecord, features: Dict[str, np.ndarray],
             amounts: Dict[str, int]) -> preprocessing.Outcome:
    reason = features_lib.add_labels(features, record, self.is_training,
                                     self.featurizer.answer_locator)
    if reason is None:
      return preprocessing.Featurized([features], amounts)
    if reason == data.NO_SUPPORTING_FACTS:
      return input_errors.BadRecordError(
          self.input_file, record.id, "supporting_facts", reason,
          "no supporting fact among the kept tokens")
    return input_errors.BadRecordError(self.input_file, record.id, "answer",
                                       reason, f"answer {record.answer!r}")


def write_features(valid: List[data.HotpotRecord],
                   stats: record_stats.RecordStats, output_dir: str,
                   featurizer: features_lib.HotpotFeaturizer,
                   is_training: Optional[bool] = None
                   ) -> record_stats.RecordStats:
  """Featurizes `read_file`'s records into `output_dir`; returns the stats.

  Labels are added per record (`features.add_labels`); with `is_training`
  (default: `preprocessing.default_is_training` of the input) the training
  filter skips what gives no training signal.

  Raises:
    input_errors.BadRecordError: in strict mode, the first record the training
      filter rejects.
  """
  step = HotpotStep(
      featurizer, stats.input_file,
      preprocessing.is_training_file(stats.input_file, is_training))
  return preprocessing.featurize_into(output_dir, valid, step, stats)


def preprocess_file(input_path: str,
                    output_dir: str,
                    featurizer: features_lib.HotpotFeaturizer,
                    is_training: Optional[bool] = None,
                    strict: bool = False) -> record_stats.RecordStats:
  """Featurizes one HotpotQA file into `output_dir`; returns its stats.

  Raises:
    input_errors.InputFileError: the input is missing, empty or malformed.
    input_errors.BadRecordError: in strict mode, the first bad record.
  """
  valid, stats = read_file(input_path, is_training, strict)
  return write_features(valid, stats, output_dir, featurizer, is_training)


@dataclasses.dataclass
class HotpotPipeline(pipeline_task.LabelledTrainingFiles,
                     pipeline_task.FileTask):
  """`preprocess_file` as a Beam pipeline (`beam_pipeline.run`), the same
  outputs; `featurizer_args`: `make_featurizer`'s arguments."""
  featurizer_args: Dict[str, Any]
  is_training: Optional[bool] = None
  strict: bool = False
  skip_duplicate_ids: bool = False
  read_records = staticmethod(data.read_records)

  def make_featurizer(self) -> features_lib.HotpotFeaturizer:
    return make_featurizer(**self.featurizer_args)

  def make_step(self, featurizer, unit) -> HotpotStep:
    return HotpotStep(featurizer, unit, self.is_training_file(unit))


def make_featurizer(vocab: Optional[str], spm_model: Optional[str],
                    long_seq_len: int = 4096, global_seq_len: int = 256,
                    lower_case: bool = True,
                    global_token_ids: Optional[List[str]] = None
                    ) -> features_lib.HotpotFeaturizer:
  """The featurizer of the binary's flags (`global_token_ids`: the
  `--global_token_ids` strings, None for the vocabulary's defaults)."""
  ids = features_lib.GlobalTokenIds.from_flag(global_token_ids,
                                              "global_token_ids")
  return features_lib.HotpotFeaturizer(
      vocab_path=vocab, spm_model_path=spm_model, long_seq_len=long_seq_len,
      global_seq_len=global_seq_len, global_token_ids=ids,
      lower_case=lower_case)


def _define_flags():
  """Flags only when run as a binary (the training binaries define flags of
  the same names)."""
  flags.DEFINE_string("input", None, "A HotpotQA JSON file.")
  preprocess_flags.define_featurizer_flags(global_seq_len=256)
  preprocess_flags.define_duplicate_ids_flag()
  flags.DEFINE_bool("is_training", None,
                    "Apply the training filter (default: file name contains "
                    "'train').")
  preprocess_flags.define_global_token_ids_flag(features_lib.GlobalTokenIds)


def main(argv):
  beam_args = beam_binary.check_command_line(argv, ("input", "output_dir"))
  f = flags.FLAGS
  task = HotpotPipeline(
      dict(global_token_ids=f.global_token_ids,
           **preprocess_flags.featurizer_flag_values()),
      is_training=f.is_training, strict=f.strict,
      skip_duplicate_ids=f.skip_duplicate_ids)
  beam_pipeline.run_and_print(task, [f.input], f.output_dir, beam_args)


if __name__ == "__main__":
  _define_flags()
  beam_binary.run_binary(main)
