"""HotpotQA, distractor setting: multi-hop questions over ten paragraphs.

Each record has a question, ten Wikipedia paragraphs (two gold, eight
distractors) and, when labelled, the answer (a span, "yes" or "no") and the
supporting-fact sentences. The model predicts supporting facts per global
token, the answer type on CLS and the answer span over the long tokens.

Modules:
- `data`: reading and validating the released `hotpot_train_v1.1.json` /
  `hotpot_dev_distractor_v1.json` (bad records skipped and named);
- `features`: the feature spec and the in-graph featurizer with byte offsets
  (preprocessing and `serve_raw` run the same ops), and the labels;
- `head`: the model (encoder + supporting-fact, answer-type, span heads);
- `task`: the registered task "hotpotqa" (`HotpotQATask`: loss, metrics,
  predictions, official scores with the threshold search, signatures);
- `decode`: span / supporting-fact decoding, in the graph and in Python, and
  the threshold search;
- `evaluate`: the official metric (`hotpot_evaluate_v1.py`'s numbers);
- `preprocess`: the binary that caches TFRecords;
- `tfds_dataset`: a TFDS builder ("hotpot_qa_distractor") of the released
  files, from `manual_dir`.

Commands:

  # Cache features (TFRecords + <stem>.stats.json; --strict fails on the
  # first bad record; train files get the training filter).
  python -m tasks.hotpotqa.preprocess --input=hotpot_train_v1.1.json \
      --vocab=vocab.txt --output_dir=DATA        # or --spm_model=etc.model
  # Fine-tune (gin/tasks/hotpotqa.gin: long 4096, global 256, lr 5e-5,
  # batch 64), then the official metric with the threshold search.
  python -m tasks.hotpotqa --model_dir=M --mode=train \
      --gin_bindings="HotpotQATask.train_input='DATA/hotpot_train_v1.1.tfrecord'" \
      --gin_bindings="HotpotQATask.eval_input='DATA/hotpot_dev_distractor_v1.tfrecord'" \
      --gin_bindings="HotpotQATask.vocab_file='vocab.txt'" \
      --gin_bindings="HotpotQATask.gold_file='hotpot_dev_distractor_v1.json'" \
      --gin_bindings="TrainerConfig.init_checkpoint='etc_base/'"
  python -m tasks.hotpotqa --model_dir=M --mode=eval      # + same bindings
  python -m tasks.hotpotqa --model_dir=M --mode=predict   # predictions.json
  python -m tasks.hotpotqa --model_dir=M --mode=export    # serve_raw & co.
  # Score any submission with the official metric.
  python -m tasks.hotpotqa.evaluate predictions.json \
      hotpot_dev_distractor_v1.json

The demo on synthetic data is `python -m demos.hotpotqa.demo`.

Signatures of the export: `serving_default` (the `MODEL_FEATURES` tensors),
`serve_examples` (serialized tf.Examples), and `serve_raw(question [],
titles [P], sentences [S], num_sentences [P])` -> `answer`, `answer_type`,
`answer_type_probabilities`, `answer_paragraph`, `answer_sentence`,
`answer_start_byte`, `answer_end_byte`, `sentence_sp_probabilities [S]`,
`title_sp_probabilities [P]`, `paragraph_sp_probabilities [P]`; and
`serve_raw_batch`, the same for B records, every input [B, ...] with
per-record counts (`etc_realformer/export/README.md`).
"""
