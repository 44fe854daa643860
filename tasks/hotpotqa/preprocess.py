r"""Caches HotpotQA features: released JSON -> TFRecords + a stats JSON.

  python -m tasks.hotpotqa.preprocess --input=hotpot_dev_distractor_v1.json \
      --vocab=vocab.txt --output_dir=DIR [--is_training] [--strict] \
      [--long_seq_len=4096 --global_seq_len=256]

writes `DIR/<stem>.tfrecord` (one `tf.train.Example` per kept record, the
features of `features.feature_spec`) and `DIR/<stem>.stats.json` (records
read, written, truncated and by how much, skipped per reason with the list of
skipped records: file, id, field, reason). Bad records are skipped unless
`--strict`, which fails on the first one with an error naming file, record
id and field.

`--is_training` (default: on when the file name contains "train") applies
the original's training filter: examples with no supporting fact among the
kept tokens, or whose span answer cannot be located in a kept supporting
title / sentence, are skipped and counted by reason (`no_supporting_facts`,
`answer_not_found`, `answer_truncated`; with `--strict` they fail too).
Non-training (dev) examples are always kept.

The model features come from `HotpotFeaturizer`'s in-graph code, run through
`tf.data` (the ops the exported `serve_raw` signature runs); labels are then
added in Python (`features.add_labels`).
"""

from typing import Dict, List, Optional

from absl import app
from absl import flags
import tensorflow as tf

from tasks.common import preprocessing
from tasks.common import records
from tasks.common import tfrecords
from tasks.hotpotqa import data
from tasks.hotpotqa import features as features_lib


def output_paths(input_path: str, output_dir: str):
  """(tfrecord path, stats path) for an input file, e.g. dev.json."""
  return preprocessing.output_paths(input_path, output_dir)


default_is_training = preprocessing.default_is_training


def preprocess_file(input_path: str,
                    output_dir: str,
                    featurizer: features_lib.HotpotFeaturizer,
                    is_training: Optional[bool] = None,
                    strict: bool = False) -> records.RecordStats:
  """Featurizes one HotpotQA file into `output_dir`; returns its stats.

  Raises:
    records.InputFileError: the input is missing, empty or malformed.
    records.BadRecordError: in strict mode, the first bad record.
  """
  if is_training is None:
    is_training = default_is_training(input_path)
  tf.io.gfile.makedirs(output_dir)
  record_path, stats_path = output_paths(input_path, output_dir)
  stats = records.RecordStats(input_file=input_path, strict=strict)
  # Validate everything first (pure Python) so that strict mode fails with
  # the original error before any TF work.
  valid: List[data.HotpotRecord] = list(data.read_records(
      input_path, stats=stats, require_labels=is_training))
  by_id: Dict[str, data.HotpotRecord] = {r.id: r for r in valid}

  def generate():
    for r in valid:
      yield dict(question=r.question, titles=list(r.titles),
                 sentences=[s for para in r.sentences for s in para],
                 num_sentences=[len(p) for p in r.sentences], id=r.id)

  spec = featurizer.feature_spec()

  def featurize(r):
    return featurizer.record_fn(r["question"], r["titles"], r["sentences"],
                                r["num_sentences"], r["id"])

  def examples():
    if not valid:
      return
    # A generator keeps memory flat on the 90k-record training file.
    ds = tf.data.Dataset.from_generator(generate, output_signature=dict(
        question=tf.TensorSpec([], tf.string),
        titles=tf.TensorSpec([None], tf.string),
        sentences=tf.TensorSpec([None], tf.string),
        num_sentences=tf.TensorSpec([None], tf.int32),
        id=tf.TensorSpec([], tf.string)))
    mapped = preprocessing.ordered_map(ds, featurize)
    for features, amounts in mapped.as_numpy_iterator():
      record = by_id[features["example_id"].decode("utf-8")]
      reason = features_lib.add_labels(features, record, is_training)
      if reason is not None:
        stats.handle_bad_record(records.BadRecordError(
            input_path, record.id,
            "supporting_facts" if reason == data.NO_SUPPORTING_FACTS
            else "answer", reason,
            f"answer {record.answer!r}" if reason != data.NO_SUPPORTING_FACTS
            else "no supporting fact among the kept tokens"))
        continue
      stats.add_truncation({k: int(v) for k, v in amounts.items()})
      stats.examples_written += 1
      yield tfrecords.to_tf_example(features, spec)

  preprocessing.write_cache(record_path, stats_path, examples(), stats)
  preprocessing.log_written(input_path, record_path, stats)
  return stats


def make_featurizer(vocab: Optional[str], spm_model: Optional[str],
                    long_seq_len: int = 4096, global_seq_len: int = 256,
                    lower_case: bool = True,
                    global_token_ids: Optional[List[str]] = None
                    ) -> features_lib.HotpotFeaturizer:
  ids = preprocessing.parse_token_ids(
      global_token_ids, features_lib.GlobalTokenIds, "global_token_ids",
      "cls,sentence,question,paragraph")
  return features_lib.HotpotFeaturizer(
      vocab_path=vocab, spm_model_path=spm_model, long_seq_len=long_seq_len,
      global_seq_len=global_seq_len, global_token_ids=ids,
      lower_case=lower_case)


def _define_flags():
  """Flags only when run as a binary (the training binaries define flags of
  the same names)."""
  flags.DEFINE_string("input", None, "A HotpotQA JSON file.")
  preprocessing.define_featurizer_flags(global_seq_len=256)
  flags.DEFINE_bool("is_training", None,
                    "Apply the training filter (default: file name contains "
                    "'train').")
  flags.DEFINE_list(
      "global_token_ids", None,
      "cls,sentence,question,paragraph global token ids; default: the "
      "original's for the vocabulary kind (WordPiece [CLS],1,3,5; "
      "SentencePiece 40,1,41,43).")
  flags.mark_flags_as_required(["input", "output_dir"])


def main(argv):
  del argv
  f = flags.FLAGS
  featurizer = make_featurizer(f.vocab, f.spm_model, f.long_seq_len,
                               f.global_seq_len, f.lower_case,
                               f.global_token_ids)
  stats = preprocess_file(f.input, f.output_dir, featurizer,
                          is_training=f.is_training, strict=f.strict)
  print(preprocessing.summary_line(f.input, stats))


if __name__ == "__main__":
  _define_flags()
  app.run(main)
