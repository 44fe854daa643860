r"""Caches OpenKP features: released jsonl -> TFRecords + stats + deduped jsonl.

  python -m tasks.openkp.preprocess --input=OpenKPDev.jsonl --vocab=vocab.txt \
      --output_dir=DIR [--strict] [--long_seq_len=4096 --global_seq_len=512]

writes, for `OpenKPDev.jsonl`:

- `DIR/OpenKPDev.tfrecord`: one `tf.train.Example` per kept document, with
  the features of `features.feature_spec`;
- `DIR/OpenKPDev.stats.json`: documents read, written, truncated (words,
  wordpieces, elements, gold keyphrases lost) and skipped per reason, with
  the skipped records named (file, url or line, field);
- `DIR/OpenKPDev.dedup.jsonl`: the valid, de-duplicated documents in the
  released format with the kept keyphrases (the scoring reference, as the
  original's input_validate_and_dedup output).

Bad records are skipped unless `--strict`, which fails on the first one.
Documents whose gold keyphrases all fall past the truncation are skipped in
training files (names holding "train"; they teach nothing) and kept in
others, where they count against the metric as they should.

The binary runs it as an Apache Beam pipeline (`OpenKPPipeline`,
`tasks.common.pipeline.beam_pipeline`; Beam's pipeline options pass through, the
outputs do not depend on them; the dedup file keeps the input's order).
"""

import dataclasses
from typing import Any, Dict, Optional

from absl import flags
import numpy as np
import tensorflow as tf

from tasks.common import output_files
from tasks.common.command_line import beam_binary
from tasks.common.command_line import output_dirs
from tasks.common.command_line import preprocess_flags
from tasks.common.inputs import input_errors
from tasks.common.inputs import input_files
from tasks.common.inputs import record_stats
from tasks.common.pipeline import beam_pipeline
from tasks.common.pipeline import pipeline_task
from tasks.common.pipeline import preprocessing
from tasks.openkp import data
from tasks.openkp import features as features_lib


def output_paths(input_path: str, output_dir: str):
  """(tfrecord, stats, dedup jsonl) paths for an input file."""
  return preprocessing.output_paths(
      input_path, output_dir, ("tfrecord", "stats.json", "dedup.jsonl"))


class OpenKPStep(preprocessing.RecordFnStep[data.OpenKPRecord]):
  """An OpenKP document -> its features with labels, url and gold
  keyphrases; with `skip_unlabeled`, a labelled document whose gold the
  truncation cut is bad (`data.KEYPHRASES_TRUNCATED`: it teaches nothing)."""

  def __init__(self, featurizer: features_lib.OpenKPFeaturizer,
               input_file: str, skip_unlabeled: bool):
    super().__init__(featurizer, input_file)
    self.skip_unlabeled = skip_unlabeled

  def to_inputs(self, record: data.OpenKPRecord):
    return features_lib.record_inputs(record)

  def finish(self, record: data.OpenKPRecord, features: Dict[str, np.ndarray],
             amounts: Dict[str, int]) -> preprocessing.Outcome:
    features_lib.add_record_fields(features, record, amounts)
    if (record.keyphrases is not None and self.skip_unlabeled and
        not (features["label_start"] >= 0).any()):
      return input_errors.BadRecordError(
          self.input_file, record.url, "KeyPhrases",
          data.KEYPHRASES_TRUNCATED,
          f"no gold keyphrase within the first {features['num_words']} "
          f"words / {self.featurizer.long_seq_len} wordpieces")
    return preprocessing.Featurized([features], amounts)


def preprocess_file(input_path: str,
                    output_dir: str,
                    featurizer: features_lib.OpenKPFeaturizer,
                    strict: bool = False,
                    labeled: Optional[bool] = None,
                    skip_unlabeled: Optional[bool] = None
                    ) -> record_stats.RecordStats:
  """Featurizes one OpenKP jsonl file into `output_dir`; returns its stats.

  Args:
    input_path: an OpenKP jsonl file.
    output_dir: where the outputs go.
    featurizer: the in-graph featurizer.
    strict: fail on the first bad record.
    labeled: whether KeyPhrases are required; None = from the file name.
    skip_unlabeled: skip labelled documents left without a gold position
      after truncation; None = only for training files.

  Raises:
    input_errors.InputFileError: the input is missing, empty or malformed.
    input_errors.BadRecordError: in strict mode, the first bad record.
    preprocessing.NothingWrittenError: no record was written.
  """
  output_dirs.check_output_dir(output_dir)
  with output_files.writing(output_dir):
    tf.io.gfile.makedirs(output_dir)
  record_path, stats_path, dedup_path = output_paths(input_path, output_dir)
  if labeled is None:
    labeled = data.infer_labeled(input_path)
  if skip_unlabeled is None:
    skip_unlabeled = preprocessing.default_is_training(input_path)
  stats = record_stats.RecordStats(input_file=input_path, strict=strict)
  # Validate everything first (pure Python; dedup needs the whole file), so
  # that strict mode fails before any TF work.
  valid = data.read_records(input_path, stats=stats, labeled=labeled)
  step = OpenKPStep(featurizer, input_path, skip_unlabeled)
  preprocessing.featurize_file(valid, step, stats, record_path, stats_path)
  # After the features: a run that fails (nothing written) leaves no file.
  output_files.write_jsonl(dedup_path, (r.to_json() for r in valid))
  return stats


@dataclasses.dataclass
class OpenKPPipeline(pipeline_task.FileTask):
  """`preprocess_file` for each input file as one Beam pipeline
  (`beam_pipeline.run`), the same outputs; `featurizer_args`:
  `make_featurizer`'s arguments."""
  featurizer_args: Dict[str, Any]
  strict: bool = False
  labeled: Optional[bool] = None

  def make_featurizer(self) -> features_lib.OpenKPFeaturizer:
    return make_featurizer(**self.featurizer_args)

  def read(self, unit, stats, work_dir):
    labeled = (data.infer_labeled(unit) if self.labeled is None
               else self.labeled)
    # Dedup needs the whole file: read by one worker, written in file order.
    valid = data.read_records(unit, stats=stats, labeled=labeled)
    output_files.write_jsonl(output_paths(unit, work_dir)[2],
                             (r.to_json() for r in valid))
    return valid

  def make_step(self, featurizer, unit) -> OpenKPStep:
    return OpenKPStep(featurizer, unit,
                      preprocessing.default_is_training(unit))


def make_featurizer(vocab: Optional[str], spm_model: Optional[str],
                    long_seq_len: int, global_seq_len: int,
                    lower_case: bool = True
                    ) -> features_lib.OpenKPFeaturizer:
  return features_lib.OpenKPFeaturizer(
      vocab_path=vocab, spm_model_path=spm_model, long_seq_len=long_seq_len,
      global_seq_len=global_seq_len, lower_case=lower_case)


def _define_flags():
  """Flags only when run as a binary (the training binaries define flags of
  the same names)."""
  flags.DEFINE_multi_string(
      "input", None, "OpenKP jsonl file(s) or globs: OpenKPTrain.jsonl, "
      "OpenKPDev.jsonl, OpenKPEvalPublic.jsonl.")
  preprocess_flags.define_featurizer_flags(global_seq_len=512)
  flags.DEFINE_enum("labeled", "auto", ["auto", "true", "false"],
                    "Whether KeyPhrases are required (auto: not for files "
                    "named *Eval*).")


def main(argv):
  beam_args = beam_binary.check_command_line(argv, ("input", "output_dir"))
  f = flags.FLAGS
  # The files first: a missing one fails before the vocabulary is loaded.
  paths = input_files.match_files(f.input)
  task = OpenKPPipeline(
      preprocess_flags.featurizer_flag_values(), strict=f.strict,
      labeled={"auto": None, "true": True, "false": False}[f.labeled])
  beam_pipeline.run_and_print(task, paths, f.output_dir, beam_args)


if __name__ == "__main__":
  _define_flags()
  beam_binary.run_binary(main)
