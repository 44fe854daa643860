"""Data plumbing shared by the task pipelines (WikiHop, HotpotQA, NQ, OpenKP).

- `tokenization`: in-graph WordPiece / SentencePiece tokenizers behind one
  interface, plus a regex sentence splitter that needs no download.
- `records`: reading JSON inputs with clear errors, the bad-record policy
  (skip, count and name; or fail on the first with `strict=True`) and the
  stats JSON written next to every cache.
- `tfrecords`: `tf.train.Example` writing/parsing driven by one feature spec.
- `preprocessing`: what every task's preprocess CLI shares (output paths,
  the all-or-nothing cache write, log and summary lines, common flags).
- `synthetic`: the name pools and flags of the synthetic-data generators.
"""
