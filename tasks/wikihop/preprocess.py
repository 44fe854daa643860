r"""Caches WikiHop features: released json -> TFRecords + a stats JSON.

  python -m tasks.wikihop.preprocess --input=dev.json --vocab=vocab.txt \
      --output_dir=DIR [--strict] [--long_seq_len=4096 --global_seq_len=430]

writes `DIR/dev.tfrecord` (one `tf.train.Example` per kept record, with the
features of `features.feature_spec`) and `DIR/dev.stats.json` (examples read,
written, truncated and by how much, skipped per reason with the list of
skipped records: file, id, field). Bad records are skipped unless `--strict`,
which fails on the first one with an error naming file, record id and field.

Featurization is `WikiHopFeaturizer`'s in-graph code, run through `tf.data`:
the same ops an exported serving signature runs.
"""

import os
from typing import List, Optional

from absl import app
from absl import flags
from absl import logging
import tensorflow as tf

from tasks.common import records
from tasks.common import tfrecords
from tasks.wikihop import data
from tasks.wikihop import features as features_lib

def output_paths(input_path: str, output_dir: str):
  """(tfrecord path, stats path) for an input file, e.g. dev.json."""
  stem = os.path.splitext(os.path.basename(input_path))[0]
  return (os.path.join(output_dir, f"{stem}.tfrecord"),
          os.path.join(output_dir, f"{stem}.stats.json"))


def preprocess_file(input_path: str,
                    output_dir: str,
                    featurizer: features_lib.WikiHopFeaturizer,
                    strict: bool = False) -> records.RecordStats:
  """Featurizes one WikiHop file into `output_dir`; returns its stats.

  Raises:
    records.InputFileError: the input is missing, empty or malformed.
    records.BadRecordError: in strict mode, the first bad record.
  """
  tf.io.gfile.makedirs(output_dir)
  record_path, stats_path = output_paths(input_path, output_dir)
  stats = records.RecordStats(input_file=input_path, strict=strict)
  # Validate everything first (cheap, pure Python) so that strict mode fails
  # with the original error before any TF work.
  valid: List[data.WikiHopRecord] = list(
      data.read_records(input_path, stats=stats))
  by_id = {}
  for r in valid:
    by_id.setdefault(r.id, r)

  def generate():
    for r in valid:
      yield dict(query=r.query, candidates=r.candidates, supports=r.supports,
                 answer=r.answer, id=r.id)

  # A generator (not one big constant) keeps memory flat on the 44k-record
  # training file; the featurization itself runs in parallel map calls.
  ds = tf.data.Dataset.from_generator(generate, output_signature=dict(
      query=tf.TensorSpec([], tf.string),
      candidates=tf.TensorSpec([None], tf.string),
      supports=tf.TensorSpec([None], tf.string),
      answer=tf.TensorSpec([], tf.string),
      id=tf.TensorSpec([], tf.string),
  )) if valid else None
  spec = featurizer.feature_spec()

  def featurize(r):
    return featurizer.record_fn(r["query"], r["candidates"], r["supports"],
                                r["answer"], r["id"])

  def examples():
    if ds is None:
      return
    options = tf.data.Options()
    options.deterministic = True
    mapped = ds.map(featurize, num_parallel_calls=tf.data.AUTOTUNE)
    for features, amounts in mapped.with_options(options).as_numpy_iterator():
      record_id = features["example_id"].decode("utf-8", "surrogateescape")
      if amounts.pop("overflow"):
        record = by_id.get(record_id)
        stats.handle_bad_record(records.BadRecordError(
            input_path, record_id, "candidates", data.TOO_LONG,
            f"{len(record.candidates) if record else '?'} candidates do not "
            f"fit long_seq_len {featurizer.long_seq_len} / global_seq_len "
            f"{featurizer.global_seq_len}"))
        continue
      stats.add_truncation({k: int(v) for k, v in amounts.items()})
      stats.examples_written += 1
      yield tfrecords.to_tf_example(features, spec)

  tmp_path = record_path + ".tmp"
  try:
    tfrecords.write_tfrecord(tmp_path, examples())
  except BaseException:
    if tf.io.gfile.exists(tmp_path):
      tf.io.gfile.remove(tmp_path)
    raise
  tf.io.gfile.rename(tmp_path, record_path, overwrite=True)
  stats.write_json(stats_path)
  logging.info("%s: read %d, wrote %d to %s, truncated %d, skipped %d %s",
               input_path, stats.examples_read, stats.examples_written,
               record_path, stats.examples_truncated, stats.num_skipped,
               dict(stats.skipped))
  return stats


def make_featurizer(vocab: Optional[str], spm_model: Optional[str],
                    long_seq_len: int, global_seq_len: int,
                    max_num_sentences: Optional[int] = None,
                    lower_case: bool = True,
                    global_token_ids: Optional[List[str]] = None
                    ) -> features_lib.WikiHopFeaturizer:
  ids = None
  if global_token_ids:
    if len(global_token_ids) != 4:
      raise ValueError("--global_token_ids needs 4 ids: sentence,question,"
                       f"candidate,paragraph; got {global_token_ids}")
    ids = features_lib.GlobalTokenIds(*[int(i) for i in global_token_ids])
  return features_lib.WikiHopFeaturizer(
      vocab_path=vocab, spm_model_path=spm_model, long_seq_len=long_seq_len,
      global_seq_len=global_seq_len, global_token_ids=ids,
      max_num_sentences=max_num_sentences, lower_case=lower_case)


def _define_flags():
  """Flags only when run as a binary: importing must not define them (the
  training binaries define flags of the same names)."""
  flags.DEFINE_string(
      "input", None, "A qangaroo WikiHop json file (train.json / dev.json).")
  flags.DEFINE_string("vocab", None, "WordPiece vocab.txt.")
  flags.DEFINE_string("spm_model", None,
                      "SentencePiece .model (instead of --vocab).")
  flags.DEFINE_string("output_dir", None, "Output directory.")
  flags.DEFINE_bool("strict", False,
                    "Fail on the first bad record instead of skipping it.")
  flags.DEFINE_integer("long_seq_len", 4096, "Long input length.")
  flags.DEFINE_integer("global_seq_len", 430, "Global input length.")
  flags.DEFINE_integer(
      "max_num_sentences", None,
      "Optional cap on document sentences per example (original: 200).")
  flags.DEFINE_bool("lower_case", True, "Uncased vocabulary.")
  flags.DEFINE_list(
      "global_token_ids", None,
      "sentence,question,candidate,paragraph global token ids; default: the "
      "original's for the vocabulary kind (WordPiece 1,3,4,5; SentencePiece "
      "1,41,42,43).")
  flags.mark_flags_as_required(["input", "output_dir"])


def main(argv):
  del argv
  f = flags.FLAGS
  featurizer = make_featurizer(f.vocab, f.spm_model, f.long_seq_len,
                               f.global_seq_len, f.max_num_sentences,
                               f.lower_case, f.global_token_ids)
  stats = preprocess_file(f.input, f.output_dir, featurizer, strict=f.strict)
  print(f"{f.input}: read {stats.examples_read}, written "
        f"{stats.examples_written}, truncated {stats.examples_truncated}, "
        f"skipped {stats.num_skipped} {dict(stats.skipped)}")


if __name__ == "__main__":
  _define_flags()
  app.run(main)
