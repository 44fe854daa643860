"""OpenKP (MS MARCO keyphrase extraction) with ETC-RealFormer.

  # 1. Validate, dedup and cache features (TFRecords + stats + dedup jsonl).
  python -m tasks.openkp.preprocess --input=OpenKPTrain.jsonl \
      --input=OpenKPDev.jsonl --input=OpenKPEvalPublic.jsonl \
      --vocab=vocab.txt --output_dir=DATA
  # 2. Fine-tune and evaluate (in-graph official P/R/F1 at 1, 3, 5).
  python -m tasks.openkp --mode=train_and_eval --model_dir=MODEL \
      --gin_bindings="OpenKPTask.train_input='DATA/OpenKPTrain.tfrecord'" \
      --gin_bindings="OpenKPTask.eval_input='DATA/OpenKPDev.tfrecord'" \
      --gin_bindings="OpenKPTask.vocab_file='vocab.txt'"
  # 3. Predict (jsonl {"url", "KeyPhrases"}; scored when
  #    OpenKPTask.predict_reference is set), score, export.
  python -m tasks.openkp --mode=predict ...
  python -m tasks.openkp.evaluate --reference=DATA/OpenKPDev.dedup.jsonl \
      --predictions=MODEL/predictions/predictions.jsonl
  python -m tasks.openkp --mode=export ...   # serve_raw(text, vdom)

Modules: `data` (reading, validation, dedup), `features` (in-graph
featurizer, VDOM regex parser), `task` (visual embeddings, n-gram head, loss,
metrics, signatures), `decode`, `evaluate` (official metric), `preprocess`,
`tfds_builder`.
"""
