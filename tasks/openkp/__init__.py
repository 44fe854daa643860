"""OpenKP (MS MARCO keyphrase extraction) with ETC-RealFormer.

Modules:
- `data`: reading, validating and de-duplicating the released jsonl files;
- `features`: the feature spec and the in-graph featurizer (text + VDOM ->
  features; the VDOM JSON regex parser for serving);
- `head`: the model (VDOM visual embeddings, the n-gram head);
- `task`: the registered task "openkp" (loss, in-graph P/R/F1, predictions,
  official scores, serving signatures);
- `decode`: (n-gram, start word) logits -> the top distinct keyphrases;
- `evaluate`: the official metric (P/R/F1 at 1, 3, 5) and its CLI;
- `preprocess`: the caching binary (jsonl -> TFRecords + stats + deduped
  jsonl);
- `tfds_dataset`: a TFDS builder over the manually downloaded files.

Commands:
  # 1. Validate, dedup and cache features (TFRecords + stats + dedup jsonl).
  python -m tasks.openkp.preprocess --input=OpenKPTrain.jsonl \
      --input=OpenKPDev.jsonl --input=OpenKPEvalPublic.jsonl \
      --vocab=vocab.txt --output_dir=DATA
  # 2. Fine-tune and evaluate (in-graph P/R/F1 at 1, 3, 5; with gold_file,
  #    the official metric on the eval set's predictions too).
  python -m tasks.openkp --mode=train_and_eval --model_dir=MODEL \
      --gin_bindings="OpenKPTask.train_input='DATA/OpenKPTrain.tfrecord'" \
      --gin_bindings="OpenKPTask.eval_input='DATA/OpenKPDev.tfrecord'" \
      --gin_bindings="OpenKPTask.gold_file='DATA/OpenKPDev.dedup.jsonl'" \
      --gin_bindings="OpenKPTask.vocab_file='vocab.txt'"
  # 3. Predict (jsonl {"url", "KeyPhrases"}), score any predictions, export.
  python -m tasks.openkp --mode=predict ...
  python -m tasks.openkp.evaluate --reference=DATA/OpenKPDev.dedup.jsonl \
      --predictions=MODEL/predictions/predictions.jsonl
  python -m tasks.openkp --mode=export ...   # serve_raw(text, vdom)
"""
