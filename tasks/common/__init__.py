"""Data plumbing shared by the task pipelines (WikiHop, HotpotQA, NQ, OpenKP).

By job:

- `inputs`: reading a task's raw inputs. `input_files` (the one expansion
  of input patterns, gzip-aware line readers, the TFDS builders' manual
  files), `json_files` (JSON inputs with errors that name the file),
  `record_checks` (`RecordChecker`: a record's field checks; unique ids),
  `input_errors` (`InputFileError`, `BadRecordError` and the skip reasons),
  `record_stats` (the bad-record policy and the stats JSON) and
  `tfds_files` (the base of the TFDS builders of the released files,
  imported by the `tfds_dataset` modules only: tensorflow-datasets is
  optional).
- `output_files`: reports, submissions and JSON lines written whole, with errors
  that name the path.
- `featurization`: records -> fixed-shape features. `featurizing` (the
  featurizers' base, their one protocol, shared graph helpers and special
  token ids), `segments` (an example's segments -> fitted long/global
  features), `tokenization` (in-graph WordPiece / SentencePiece, the regex
  sentence splitter), `sentences` (NLTK Punkt, in Python: WikiHop's
  supports) and `logits` (`NEG_INF`).
- `pipeline`: the preprocess skeleton every task's `preprocess.py` fills
  (`preprocessing`: `RecordStep` -> `ExampleSink` -> the all-or-nothing
  cache write and stats; `tfrecord_shards`), and the same as an Apache Beam
  pipeline (`beam_pipeline`, `pipeline_task`, `sorted_parts`,
  `work_dirs`).
- `command_line`: what the binaries share on the command line: the
  preprocess flags and checks (`preprocess_flags`), Beam's options and
  runner choice (`beam_options`), a Beam binary's `main` (`beam_binary`),
  output-folder checks (`output_dirs`), gin's errors (`gin_errors`) and
  the official-metric binaries' `main` (`scoring`).

The TFRecord format itself is `etc_realformer.data.tfrecords`.
"""
