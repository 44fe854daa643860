"""`load_bert_checkpoint`: every variable mapped, strict checking with one
error that lists what differs, heads loaded or skipped."""

import numpy as np
import pytest

from bert_testing import bert_tensors, write_bert_dir
from etc_realformer import BertConfig, BertModel, load_bert_checkpoint
from etc_realformer.checkpoints import bert

CONFIG = dict(vocab_size=40, hidden_size=16, num_hidden_layers=2,
              num_attention_heads=2, intermediate_size=20,
              max_position_embeddings=12, type_vocab_size=2)


def test_every_model_variable_has_a_checkpoint_name():
  for with_mlm in (False, True):
    model = BertModel(BertConfig(**CONFIG), with_masked_lm=with_mlm)
    mapped = {id(v) for vs in bert.variable_map(model).values() for v in vs}
    assert {id(v) for v in model.trainable_variables} <= mapped


def test_loads_everything_and_the_global_side_copies_the_long(tmp_path):
  write_bert_dir(str(tmp_path), CONFIG, seed=1)
  model = BertModel(BertConfig(**CONFIG))
  report = load_bert_checkpoint(model, str(tmp_path / "bert_model.ckpt"))
  assert report.path.endswith("bert_model.ckpt")
  assert "cls/predictions/output_bias" in report.skipped  # no head asked for
  w = bert_tensors(CONFIG, seed=1)
  emb = model.encoder.embeddings
  np.testing.assert_array_equal(emb.global_norm.gamma.numpy(),
                                w["bert/embeddings/LayerNorm/gamma"])
  block = model.encoder.blocks[1]
  np.testing.assert_array_equal(
      block.global_att_norm.beta.numpy(),
      w["bert/encoder/layer_1/attention/output/LayerNorm/beta"])


@pytest.mark.parametrize("changes,expected", [
    # A config of the wrong size: every layer name of the third is missing.
    ({"num_hidden_layers": 3}, ["missing from the checkpoint",
                                "bert/encoder/layer_2/attention/self/query/"
                                "kernel", "num_hidden_layers"]),
    # Another vocabulary.
    ({"vocab_size": 41}, ["mis-shaped", "bert/embeddings/word_embeddings: "
                          "checkpoint [40, 16] vs model [41, 16]",
                          "vocab_size"]),
    ({"intermediate_size": 21}, ["intermediate/dense/kernel: checkpoint "
                                 "[16, 20] vs model [16, 21]"]),
])
def test_a_wrong_config_is_one_error_listing_what_differs(tmp_path, changes,
                                                          expected):
  write_bert_dir(str(tmp_path), CONFIG)
  model = BertModel(BertConfig(**{**CONFIG, **changes}))
  before = [v.numpy().copy() for v in model.trainable_variables]
  with pytest.raises(bert.BertCheckpointMismatchError) as info:
    load_bert_checkpoint(model, str(tmp_path))
  for text in expected:
    assert text in str(info.value)
  for a, b in zip(before, model.trainable_variables):
    np.testing.assert_array_equal(a, b.numpy())  # nothing loaded


def test_a_missing_pooler_is_named(tmp_path):
  write_bert_dir(str(tmp_path), CONFIG, pooler=False)
  with pytest.raises(bert.BertCheckpointMismatchError,
                     match="bert/pooler/dense/kernel") as info:
    load_bert_checkpoint(BertModel(BertConfig(**CONFIG)), str(tmp_path))
  assert "pooler" in str(info.value).splitlines()[-1]  # the hint


def test_an_mlm_head_asked_for_but_absent(tmp_path):
  write_bert_dir(str(tmp_path), CONFIG, heads=False)
  with pytest.raises(bert.BertCheckpointMismatchError,
                     match="cls/predictions/output_bias"):
    load_bert_checkpoint(BertModel(BertConfig(**CONFIG), with_masked_lm=True),
                         str(tmp_path))
