"""WikiHop (qangaroo v1.1): multiple-choice multi-hop reading comprehension.

A record is a query "relation subject", candidate answers and support
documents; the answer needs facts from several documents. The model scores
one global token per candidate.

Modules:
- `data`: reading and validating the released `train.json` / `dev.json`;
- `features`: the feature spec and the in-graph featurizer (raw strings ->
  ETC features; preprocessing and serving run the same ops on the supports
  split by Punkt, `split_supports`, as the original);
- `head`: the model (encoder + candidate head);
- `task`: the registered task "wikihop" (`WikiHopTask`: loss, accuracy,
  predictions, official scores, serving signatures);
- `decode`: model outputs -> the chosen candidate;
- `evaluate`: the official metric, accuracy of `{id: answer}` predictions;
- `preprocess`: the binary that caches TFRecords;
- `tfds_dataset`: a TFDS builder ("wiki_hop") of the released files.

Commands:

  python -m tasks.wikihop.preprocess --input=dev.json --vocab=vocab.txt \
      --output_dir=DATA
  python -m tasks.wikihop --mode=train_and_eval --model_dir=M \
      --gin_bindings="WikiHopTask.train_input='DATA/train.tfrecord'" ...
  python -m tasks.wikihop --mode=eval --model_dir=M ...     # + official
  python -m tasks.wikihop --mode=predict --model_dir=M ...  # {id: answer}
  python -m tasks.wikihop --mode=export --model_dir=M ...   # serve_raw
  python -m tasks.wikihop.evaluate predictions.json dev.json

The demo on synthetic data is `python -m demos.wikihop.demo`.
"""
