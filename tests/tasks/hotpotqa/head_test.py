"""Tests for tasks.hotpotqa.head: the heads' outputs, span and BIO."""

import pytest

import hotpotqa_testing
from hotpotqa_testing import WORDS
from hotpotqa_testing import record
from tasks.hotpotqa import head
from tokenization_testing import write_test_vocab

L, G = hotpotqa_testing.L, hotpotqa_testing.G


@pytest.fixture(scope="module")
def vocab(tmp_path_factory):
  return write_test_vocab(tmp_path_factory.mktemp("v") / "vocab.txt", WORDS)


def test_span_head_never_picks_padding(vocab):
  task = hotpotqa_testing.tiny_task(vocab)
  model = task.build_model()
  assert isinstance(model, head.HotpotQAModel)
  batch = hotpotqa_testing.batch(task, [record(), record(id="q2")])
  outputs = model(batch, training=False)
  real = head.long_input_mask(batch["long_paragraph_breakpoints"]).numpy()
  assert not real[:, -3:].any() and real[:, 0].all()
  for name in ("start_logits", "end_logits"):
    assert (outputs[name].numpy()[~real] == head.NEG_INF).all()
  assert outputs["span_score"].shape == [2, G]
  assert outputs["answer_type_probs"].shape == [2, 3]


def test_bio_head_and_its_spans(vocab):
  task = hotpotqa_testing.tiny_task(vocab, answer_encoding="bio")
  model = task.build_model()
  batch = hotpotqa_testing.batch(task, [record(), record(id="q2")])
  outputs = model(batch, training=False)
  assert outputs["bio_logits"].shape == [2, L, 3]
  assert "start_logits" not in outputs
  assert outputs["span_score"].shape == [2, G]
  with pytest.raises(ValueError, match="answer_encoding"):
    head.HotpotQAModel(None, None, answer_encoding="iob")
