"""Natural Questions on synthetic data.

- `demos.nq.synthetic`: small files in NQ's released formats (full and
  simplified, five-way annotated dev) and a BERT-shaped vocabulary:
  `python -m demos.nq.synthetic --output_dir=DIR`. Preprocess them with
  `python -m tasks.nq.preprocess --input=DIR/nq-train-00.jsonl.gz
  --vocab=DIR/vocab.txt --output_dir=DATA` (see `tasks/nq/README.md`).
"""
