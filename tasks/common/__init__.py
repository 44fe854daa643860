"""Data plumbing shared by the task pipelines (WikiHop, HotpotQA, NQ, OpenKP).

- `tokenization`: in-graph WordPiece / SentencePiece tokenizers behind one
  interface (ids, byte offsets, vocabulary lookups), normalizing as the
  original's BERT and ALBERT-style tokenizers, plus the in-graph regex
  sentence splitter of the pre-training text datasets.
- `sentences`: sentence splitting as the original ETC (`nltk.sent_tokenize`,
  NLTK's Punkt English model), in Python: WikiHop's supports.
- `featurizing`: the featurizers' shared graph helpers (`fit`,
  `last_of_run`) and their special token ids per vocabulary kind
  (`SpecialTokenIds`).
- `io`: the one expansion of input patterns (`match_files`), line readers
  that detect gzip by content, `write_jsonl` and `unbatch`.
- `validation`: `RecordChecker`, a raw record's field checks bound to its
  file and record, raising `records.BadRecordError`.
- `records`: reading JSON inputs with clear errors, the bad-record policy
  (skip, count and name; or fail on the first with `strict=True`), the stats
  JSON written next to every cache, `write_json` for reports and
  submissions, `scoring_main` for the official-metric binaries, and
  `find_manual_file(s)` for the TFDS builders.
- `preprocessing`: the preprocess skeleton every task's `preprocess.py`
  fills (`RecordStep` -> `ExampleSink` -> the all-or-nothing cache write and
  stats), output paths, log and summary lines, common flags and
  command-line checks.
- `segments`: an example's segments -> fitted long/global features,
  their spec and the model's feature names.
- `logits`: `NEG_INF`, the logit of an excluded choice.
- `tfds_files`: the base of the TFDS builders of the released files
  (imported by the `tfds_dataset` modules only: tensorflow-datasets is
  optional).

The TFRecord format itself is `etc_realformer.data.tfrecords`.
"""
