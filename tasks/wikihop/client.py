"""A client of WikiHop's batched raw-text signature, `serve_raw_batch`.

The export featurizes in the graph everything but the sentence split: Punkt runs
in Python (`tasks.common.featurization.sentences`, as preprocessing splits), so
a client splits the supports before sending them. This module turns qangaroo
records (`query`, `candidates`, `supports`) into the signature's inputs, every
one [B, ...] so that TF Serving can batch requests:

  inputs = client.batch_inputs(records)             # name -> numpy array
  outputs = loaded.signatures["serve_raw_batch"](
      **{k: tf.constant(v) for k, v in inputs.items()})
  answers = client.answers(outputs, inputs)

or, for TF Serving's REST API (`POST /v1/models/<name>:predict`),
`client.predict_request(records)`: the JSON body `{"signature_name": ...,
"inputs": {...}}` (columnar format). It needs NumPy and the Punkt package,
not TensorFlow nor the model.
"""

from typing import Any, Dict, List, Mapping, Sequence

import numpy as np

from tasks.common.featurization import sentences as sentences_lib

SIGNATURE = "serve_raw_batch"
# The signature's inputs, in its order.
INPUTS = ("query", "candidates", "num_candidates", "sentences",
          "num_sentences", "num_supports")


def _field(record: Any, name: str) -> Any:
  """A qangaroo JSON object's field, or a `data.WikiHopRecord`'s."""
  if isinstance(record, Mapping):
    return record[name]
  return getattr(record, name)


def _text(value: Any) -> str:
  return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def _padded(rows: Sequence[Sequence[Any]], dtype: Any, fill: Any
            ) -> np.ndarray:
  """Rows of different lengths -> [B, longest] padded with `fill`."""
  width = max((len(r) for r in rows), default=0)
  out = np.full([len(rows), width], fill, dtype)
  for i, row in enumerate(rows):
    out[i, :len(row)] = row
  return out


def batch_inputs(records: Sequence[Any]) -> Dict[str, np.ndarray]:
  """`serve_raw_batch`'s inputs of B records.

  Args:
    records: qangaroo records: JSON objects (dicts) or objects with
      `query`, `candidates` and `supports` attributes; other fields
      (`id`, `answer`) are ignored.

  Returns:
    name -> array: `query` [B], `candidates` [B, C] (padded with ""),
    `num_candidates` [B], `sentences` [B, S] (every support's Punkt
    sentences in order, padded with ""), `num_sentences` [B, D] (sentences
    per support, 0 past the record's) and `num_supports` [B]; int32 counts,
    strings as Python `str` objects.
  """
  queries, candidates, sentences, counts = [], [], [], []
  for record in records:
    queries.append(_text(_field(record, "query")))
    candidates.append([_text(c) for c in _field(record, "candidates")])
    split, per_support = sentences_lib.split_documents(
        [_text(s) for s in _field(record, "supports")])
    sentences.append(split)
    counts.append(per_support)
  return {
      "query": np.array(queries, object),
      "candidates": _padded(candidates, object, ""),
      "num_candidates": np.array([len(c) for c in candidates], np.int32),
      "sentences": _padded(sentences, object, ""),
      "num_sentences": _padded(counts, np.int32, 0),
      "num_supports": np.array([len(c) for c in counts], np.int32),
  }


def predict_request(records: Sequence[Any], signature_name: str = SIGNATURE
                    ) -> Dict[str, Any]:
  """The JSON body of a TF Serving REST predict request for `records`:
  `{"signature_name": ..., "inputs": {name: nested lists}}` (columnar)."""
  return {"signature_name": signature_name,
          "inputs": {k: v.tolist()
                     for k, v in batch_inputs(records).items()}}


def answers(outputs: Mapping[str, Any], inputs: Mapping[str, Any]
            ) -> List[Dict[str, Any]]:
  """Per record: `answer` (the chosen candidate, as given) and
  `candidate_probabilities` (one per candidate), from the signature's
  outputs (tensors, arrays or the REST response's `outputs` lists) and the
  inputs sent. (A record with more candidates than the model's global
  input holds fails the request: no answer is chosen among some.)"""
  chosen = np.asarray(outputs["answer"]).tolist()
  probabilities = np.asarray(outputs["candidate_probabilities"], np.float32)
  counts = np.asarray(inputs["num_candidates"]).tolist()
  return [{"answer": _text(a), "candidate_probabilities": p[:n].tolist()}
          for a, p, n in zip(chosen, probabilities, counts)]
