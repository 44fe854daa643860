"""Natural Questions: released `nq-{train,dev}-??.jsonl.gz` -> ETC windows
-> long and short answers, scored by the official NQ scorer.

Modules:
- `data`: reading and validating the released files (full and simplified
  formats, streamed), the example-level labels and answer types;
- `features`: the feature spec and the in-graph featurizer (one document ->
  its windows);
- `head`: the model (position heads, answer type head, window decoding);
- `task`: the registered task "nq" (loss, metrics, predictions, official
  scores, serving signatures);
- `decode`: window logits -> one official prediction per document;
- `evaluate`: the official scorer as a library, and its CLI;
- `preprocess`: the caching binary (jsonl(.gz) -> TFRecords + stats);
- `tfds_dataset`: what TFDS's builder lacks, and a checked TFDS path.

Commands:
  python -m tasks.nq.preprocess --input='nq-dev-??.jsonl.gz' \
      --vocab=vocab.txt --output_dir=DATA
  python -m tasks.nq --mode=train_and_eval --model_dir=M --gin_bindings=...
  python -m tasks.nq.evaluate --gold_path='nq-dev-??.jsonl.gz' \
      --predictions_path=M/predictions/predictions.json
Synthetic files: `python -m demos.nq.synthetic`. See `tasks/nq/README.md`.
"""
