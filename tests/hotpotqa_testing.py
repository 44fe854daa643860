"""HotpotQA test fixtures: records (validated and in the released JSON
format) and the words their test vocabularies need, a tiny task and a batch
of featurized records, and one example's predictions by hand."""

from typing import Dict, Sequence

import numpy as np
import tensorflow as tf

from etc_realformer.config import EtcConfig
from tasks.hotpotqa import data
from tasks.hotpotqa import task as hotpotqa_task

# The tiny task's lengths.
L, G = 48, 16

# The words of `record()`'s texts (with `tokenization_testing`'s base words).
WORDS = ["who", "is", "x", "?", "born", "in", "paris", "city", "of", "the",
         "john", "doe", "was", "light", "bob", "japanese", "cafe", "big",
         "short", "long", "a", "b", "c", "d", "e", "f", "yes", "no"]
# The words of `released()`'s texts.
RELEASED_WORDS = ["who", "is", "x", "?", "born", "in", "paris", "rome", "bob",
                  "ann", "was", "big", "yes", "no", ".", "a", "b", "c"]


def record(**kwargs) -> data.HotpotRecord:
  """A validated record: the answer "Paris" in paragraph 0's first sentence
  and as paragraph 1's title; both paragraphs support."""
  fields = dict(
      id="q1", question="Who is X?", titles=("John Doe", "Paris"),
      sentences=(("John Doe was born in Paris.", "Bob is x."),
                 ("Paris is the city of light.",)),
      answer="Paris", type="bridge",
      supporting_facts=(("John Doe", 0), ("Paris", 0)))
  fields.update(kwargs)
  return data.HotpotRecord(**fields)


def released(i, **overrides) -> dict:
  """A record in the released JSON format, id `id{i}`."""
  raw = {
      "_id": f"id{i}", "question": "Who is X?", "answer": "Paris",
      "type": "bridge", "level": "easy",
      "supporting_facts": [["Bob", 0], ["Ann", 1]],
      "context": [["Bob", ["Bob was born in Paris.", "Bob is big."]],
                  ["Ann", ["Ann is x.", "Ann was born in Rome."]]],
  }
  raw.update(overrides)
  return raw


def tiny_task(vocab: str, **kwargs) -> hotpotqa_task.HotpotQATask:
  """A 1-layer HotpotQA task at L, G with the vocabulary `vocab`."""
  cfg = EtcConfig(vocab_size=60, hidden_size=16, num_hidden_layers=1,
                  num_attention_heads=2, intermediate_size=32, local_radius=4,
                  relative_pos_max_distance=2, relative_vocab_size=8,
                  hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                  residual_attention=True, use_hard_g2l_mask=True)
  return hotpotqa_task.HotpotQATask(model_config=cfg, vocab_file=vocab,
                                    long_seq_len=L, global_seq_len=G,
                                    **kwargs)


def batch(task: hotpotqa_task.HotpotQATask,
          records: Sequence[data.HotpotRecord],
          is_training: bool = False) -> Dict[str, tf.Tensor]:
  """The records featurized and labelled by the task's featurizer."""
  rows = [task.featurizer.featurize_record(r, is_training)[0]
          for r in records]
  return {k: tf.constant(np.stack([r[k] for r in rows])) for k in rows[0]}


# One example's predictions, by hand: the record, then what the model and
# the features give for it. Global tokens: CLS, paragraph 0, title 0,
# sentence 0.0, sentence 0.1, paragraph 1, title 1, sentence 1.0.
PREDICTED_RECORD = data.HotpotRecord(
    id="q1", question="Where?", titles=("Café Noir", "Oslo"),
    sentences=(("It opened in  Paris, France.", "Filler."),
               ("Oslo is cold.",)),
    answer="Paris", type="bridge",
    supporting_facts=(("Café Noir", 0), ("Oslo", 0)))
PREDICTION = {
    "example_id": b"q1",
    "global_kinds": np.array([1, 3, 4, 5, 5, 3, 4, 5]),
    "global_paragraph_ids": np.array([-1, 0, 0, 0, 0, 1, 1, 1]),
    "global_sentence_ids": np.array([-1, -1, -1, 0, 1, -1, -1, 0]),
    "sp_probs": np.array([0.0, 0.9, 0.2, 0.8, 0.4, 0.7, 0.6, 0.45]),
    "answer_type_probs": np.array([0.8, 0.1, 0.1]),
    "span_score": np.array([-1, -1, 0.9, 0.5, 0.95, -1, 0.1, 0.2]),
    # "Paris, France" in sentence 0.0 (bytes 14..27); "Café" in title 0.
    "span_start_byte": np.array([-1, -1, 0, 14, 0, -1, 0, 0]),
    "span_end_byte": np.array([-1, -1, 5, 27, 6, -1, 4, 4]),
}
