"""ETC-RealFormer pre-training: masked language modelling (whole words) and
Contrastive Predictive Coding on the sentence summary tokens, from raw text
to a checkpoint the fine-tuning tasks start from (docs/pretraining.md).

Modules:
- `data`: plain text in BERT's format (one sentence per line, a blank line
  between documents; globs, gzip), with the bad-input policy;
- `tfds_dataset`: documents of a TFDS text dataset (Wikipedia, wiki40b), and
  a builder of BERT-format text files;
- `features`: the stored (unmasked) example and the featurizer that cuts
  documents at sentence boundaries;
- `masking`: whole-word MLM and CPC masks drawn per batch in tf.data;
- `head`: the model (encoder, Model Garden's MaskedLM, the CPC head with
  the second encoder pass) and the loader of BERT's `cls/predictions/*`;
- `task`: the registered task "pretrain" (`PretrainTask`);
- `decode`: predicted wordpieces at the masked positions;
- `evaluate`: MLM / CPC accuracy and their baselines;
- `preprocess`: the binary that writes the sharded TFRecords and stats;
- `export_encoder`: the trained encoder in the released ETC format.

Commands:

  python -m tasks.pretrain.preprocess --input='corpus/*.txt' \
      --vocab=vocab.txt --output_dir=DATA
  python -m tasks.pretrain --mode=train_and_eval --model_dir=M \
      --gin_bindings="PretrainTask.train_input='DATA/train-*.tfrecord'" \
      --gin_bindings="PretrainTask.eval_input='DATA/eval-*.tfrecord'" \
      --gin_bindings="PretrainTask.train_stats_file='DATA/pretrain.stats.json'"
  python -m tasks.pretrain --mode=eval --model_dir=M ...   # + baselines
  python -m tasks.pretrain.export_encoder --model_dir=M --output_dir=OUT

The demo on the Python documentation is `python -m demos.pretrain.demo`.
"""
