"""Data plumbing shared by the task pipelines (WikiHop, HotpotQA, NQ, OpenKP).

- `tokenization`: in-graph WordPiece / SentencePiece tokenizers behind one
  interface (ids, byte offsets, vocabulary lookups), plus a regex sentence
  splitter that needs no download.
- `featurizing`: the featurizers' shared graph helpers (`fit`,
  `last_of_run`) and their special token ids per vocabulary kind
  (`SpecialTokenIds`).
- `records`: reading JSON inputs with clear errors, the bad-record policy
  (skip, count and name; or fail on the first with `strict=True`), the stats
  JSON written next to every cache, `write_json` for reports and
  submissions, `scoring_main` for the official-metric binaries, and
  `find_manual_file(s)` for the TFDS builders.
- `preprocessing`: what every task's preprocess CLI shares (the featurizing
  skeleton, output paths, the all-or-nothing cache write, log and summary
  lines, common flags and command-line checks).
- `tfds_files`: the base of the TFDS builders of the released files
  (imported by the `tfds_dataset` modules only: tensorflow-datasets is
  optional).

The TFRecord format itself is `etc_realformer.data.tfrecords`.
"""
