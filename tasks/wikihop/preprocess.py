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

from typing import List, Optional

from absl import app
from absl import flags
import tensorflow as tf

from tasks.common import preprocessing
from tasks.common import records
from tasks.common import tfrecords
from tasks.wikihop import data
from tasks.wikihop import features as features_lib

def output_paths(input_path: str, output_dir: str):
  """(tfrecord path, stats path) for an input file, e.g. dev.json."""
  return preprocessing.output_paths(input_path, output_dir)


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
    mapped = preprocessing.ordered_map(ds, featurize)
    for features, amounts in mapped.as_numpy_iterator():
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

  preprocessing.write_cache(record_path, stats_path, examples(), stats)
  preprocessing.log_written(input_path, record_path, stats)
  return stats


def make_featurizer(vocab: Optional[str], spm_model: Optional[str],
                    long_seq_len: int, global_seq_len: int,
                    max_num_sentences: Optional[int] = None,
                    lower_case: bool = True,
                    global_token_ids: Optional[List[str]] = None,
                    mark_query_subject: bool = False
                    ) -> features_lib.WikiHopFeaturizer:
  ids = preprocessing.parse_token_ids(
      global_token_ids, features_lib.GlobalTokenIds, "global_token_ids",
      "sentence,question,candidate,paragraph")
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
  preprocessing.define_featurizer_flags(global_seq_len=430)
  flags.DEFINE_integer(
      "max_num_sentences", None,
      "Optional cap on document sentences per example (original: 200).")
  flags.DEFINE_list(
      "global_token_ids", None,
      "sentence,question,candidate,paragraph global token ids; default: the "
      "original's for the vocabulary kind (WordPiece 1,3,4,5; SentencePiece "
      "1,41,42,43).")
  flags.DEFINE_bool(
      "mark_query_subject", False,
      "Give document mentions of the query's subject token type 2 (this "
      "project's option; the original does not; the model must be trained "
      "and served with the same setting).")
  flags.mark_flags_as_required(["input", "output_dir"])


def main(argv):
  del argv
  f = flags.FLAGS
  featurizer = make_featurizer(f.vocab, f.spm_model, f.long_seq_len,
                               f.global_seq_len, f.max_num_sentences,
                               f.lower_case, f.global_token_ids,
                               f.mark_query_subject)
  stats = preprocess_file(f.input, f.output_dir, featurizer, strict=f.strict)
  print(preprocessing.summary_line(f.input, stats))


if __name__ == "__main__":
  _define_flags()
  app.run(main)
