"""Tests for tasks.nq.head: the four position heads and their masking, the
answer type read from the chosen [CLS], the decoding outside training, and
the settings' checks (given encoder outputs, against NumPy)."""

import numpy as np
import pytest
import tensorflow as tf

from etc_realformer.config import EtcConfig
from etc_realformer.errors import UserInputError
from tasks.nq import data
from tasks.nq import decode
from tasks.nq import head
from tasks.nq import task as T

B, L, G, HIDDEN = 2, 12, 4, 8


def _features():
  """Window b: [CLS] q q, document tokens 0..7 at positions 3..10, [SEP];
  one candidate (global token 1): document tokens 1..4, positions 4..7."""
  i64 = np.int64
  dmap = np.full([B, L], -1, i64)
  dmap[:, 3:11] = np.arange(8)
  cand = {k: np.full([B, G], -1, i64) for k in decode.DECODE_FEATURES
          if k.startswith("global_candidate")}
  for k, value in (("index", 0), ("long_start", 4), ("long_end", 7),
                   ("doc_start", 1), ("doc_end", 5), ("start_byte", 10),
                   ("end_byte", 50)):
    cand[f"global_candidate_{k}"][:, 1] = value
  return {"doc_token_map": tf.constant(dmap),
          "long_start_byte": tf.constant(np.where(dmap >= 0, 10 * dmap, -1)),
          "long_end_byte": tf.constant(np.where(dmap >= 0, 10 * dmap + 9, -1)),
          **{k: tf.constant(v) for k, v in cand.items()}}


def _outputs(seed=0):
  rng = np.random.RandomState(seed)
  return (tf.constant(rng.normal(size=[B, L, HIDDEN]), tf.float32),
          tf.constant(rng.normal(size=[B, G, HIDDEN]), tf.float32))


def _dense(layer, x):
  return x @ layer.kernel.numpy() + layer.bias.numpy()


def _close(actual, expected):
  np.testing.assert_allclose(actual, expected, rtol=1e-5,
                             atol=1e-5 * np.abs(expected).max())


def test_position_heads_masked_to_the_document_and_cls():
  model = head.NqModel(None, None)
  long_output, global_output = _outputs()
  out = model.head(_features(), long_output, global_output, training=True)
  logits = _dense(model.position_layer, long_output.numpy())  # [B, L, 4]
  allowed = np.zeros([B, L], bool)
  allowed[:, 0] = allowed[:, 3:11] = True
  for i, name in enumerate(head.POSITION_HEADS):
    got = out[f"{name}_logits"].numpy()
    assert got.dtype == np.float32 and got.shape == (B, L)
    _close(got[allowed], logits[..., i][allowed])
    assert (got[~allowed] == decode.NEG_INF).all()
  # Training skips the decoding.
  assert not set(decode.WINDOW_OUTPUTS) & set(out)


@pytest.mark.parametrize("source", [head.GLOBAL, head.LONG])
def test_answer_type_reads_the_chosen_cls(source):
  # Through the task, which passes the setting on.
  config = EtcConfig(vocab_size=30, hidden_size=HIDDEN, num_hidden_layers=1,
                     num_attention_heads=2, intermediate_size=16,
                     local_radius=2, relative_pos_max_distance=2,
                     relative_vocab_size=8)
  model = T.NaturalQuestionsTask(
      model_config=config, long_seq_len=L, global_seq_len=G,
      answer_type_source=source).build_model()
  long_output, global_output = _outputs()
  out = model.head(_features(), long_output, global_output, training=True)
  cls = (global_output if source == head.GLOBAL else long_output)[:, 0]
  logits = _dense(model.answer_type_layer, cls.numpy())
  assert logits.shape == (B, len(data.ANSWER_TYPES))
  _close(out["answer_type_logits"].numpy(), logits)
  probs = np.exp(logits - logits.max(-1, keepdims=True))
  _close(out["answer_type_probs"].numpy(),
         probs / probs.sum(-1, keepdims=True))
  np.testing.assert_array_equal(out["answer_type"], logits.argmax(-1))


def test_decoding_outside_training_with_the_models_settings():
  model = head.NqModel(None, None, max_short_answer_length=1,
                       score_mode=decode.RATIO)
  features = _features()
  long_output, global_output = _outputs()
  out = model.head(features, long_output, global_output, training=False)
  expected = decode.window_answers(
      *(out[f"{n}_logits"] for n in head.POSITION_HEADS), features,
      max_short_answer_length=1, score_mode=decode.RATIO)
  for name in decode.WINDOW_OUTPUTS:
    np.testing.assert_array_equal(out[name], expected[name], err_msg=name)
  # The one candidate is found; short answers are one wordpiece inside it.
  assert out["long_candidate"].numpy().tolist() == [0, 0]
  assert (out["short_start"].numpy() == out["short_end"].numpy()).all()
  assert ((out["short_start"].numpy() >= 4) &
          (out["short_start"].numpy() <= 7)).all()


@pytest.mark.parametrize("kwargs,field", [
    (dict(answer_type_source="cls"), "answer_type_source"),
    (dict(score_mode="max"), "score_mode"),
])
def test_bad_settings_name_the_field(kwargs, field):
  settings = dict(answer_type_source=head.GLOBAL, score_mode=decode.DIFFERENCE)
  settings.update(kwargs)
  with pytest.raises(UserInputError, match=f"{field} must be .*got "
                     f"'{list(kwargs.values())[0]}'"):
    head.check_settings(**settings)
  with pytest.raises(UserInputError, match=field):
    head.NqModel(None, None, **kwargs)
