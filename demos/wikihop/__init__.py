"""The WikiHop demo (docs/wikihop_demo.md): synthetic multi-hop chains.

- `synthetic`: the generator (`python -m demos.wikihop.synthetic
  --output_dir=DIR`): village -> city -> country chains across documents,
  in the qangaroo format (docs/wikihop_demo.md, "The synthetic task");
- `demo`: the README's first command, `python -m demos.wikihop.demo
  --output_dir=demo_out`: data, featurization, training with the runner,
  export, one served answer;
- `scaffold`: the optional bridge scaffold (`--bridge_scaffold`), a demo
  task "wikihop_bridge_scaffold" whose model marks the bridge in training;
- `probe`: the learnability probe (`python -m demos.wikihop.probe`), a plain
  training loop with controls that need a known number of attention steps.
"""
