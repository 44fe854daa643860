"""The HotpotQA demo: synthetic distractor-format data, end to end.

- `synthetic`: the generator (`python -m demos.hotpotqa.synthetic
  --output_dir=DIR`): people, their birth cities and jobs, three question
  kinds, a question-blind chance level;
- `demo`: `python -m demos.hotpotqa.demo --output_dir=hotpot_demo` writes the
  data, featurizes it, trains a tiny model with the runner, scores it with
  the official metric and serves one record.
"""
