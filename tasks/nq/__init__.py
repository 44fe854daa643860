"""Natural Questions: released `nq-{train,dev}-??.jsonl.gz` -> ETC windows.

Data (`data.py` reader, `features.py` in-graph featurizer, `preprocess.py`
cache binary, `synthetic.py`, `tfds_data.py`); model side (`task.py`,
`decode.py`, `evaluate.py`). See `tasks/nq/README.md`.
"""
