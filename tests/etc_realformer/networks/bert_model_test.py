"""`BertModel`: the RealFormer golden vector made by the official RealFormer
code, and Google BERT / RealFormer variants against a NumPy transformer."""

import numpy as np
import pytest
import tensorflow as tf

from bert_testing import bert_tensors, numpy_bert, write_bert_dir
from conftest import DATA_DIR
from etc_realformer import BertConfig, BertModel, load_bert_checkpoint
from etc_realformer.errors import UserInputError

GOLDEN = DATA_DIR / "realformer_bert_small"
OUTPUTS = ("sequence_output", "pooled_output", "embedding_output")


@pytest.fixture(scope="module")
def golden():
  ref = np.load(GOLDEN / "reference.npz")
  model = BertModel(BertConfig.from_json_file(str(GOLDEN /
                                                  "bert_config.json")))
  load_bert_checkpoint(model, str(GOLDEN / "model.ckpt"))
  return model, ref


def test_reproduces_the_official_realformer_outputs(golden):
  model, ref = golden
  assert model.config.uses_residual_attention  # a RealFormer JSON
  out = model({k: ref[k] for k in ("input_ids", "input_mask",
                                   "token_type_ids")})
  for name in OUTPUTS:
    np.testing.assert_allclose(out[name].numpy(), ref[name], atol=1e-5,
                               rtol=0, err_msg=name)
  assert len(out["encoder_outputs"]) == 3
  for layer, value in enumerate(out["encoder_outputs"]):
    np.testing.assert_allclose(value.numpy(), ref["all_encoder_layers"][layer],
                               atol=1e-5, rtol=0, err_msg=f"layer {layer}")


def test_without_residual_attention_it_is_another_function(golden):
  model, ref = golden
  plain = BertModel(model.config, residual_attention=False)
  load_bert_checkpoint(plain, str(GOLDEN))
  inputs = {k: ref[k] for k in ("input_ids", "input_mask", "token_type_ids")}
  diff = np.abs(plain(inputs)["sequence_output"].numpy() -
                ref["sequence_output"]).max()
  assert diff > 1e-3


CONFIG = dict(vocab_size=50, hidden_size=24, num_hidden_layers=3,
              num_attention_heads=3, intermediate_size=29, hidden_act="gelu",
              hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
              max_position_embeddings=16, type_vocab_size=3,
              initializer_range=0.02)


def _inputs(rng, batch, length, config):
  ids = rng.randint(0, config["vocab_size"], [batch, length]).astype(np.int32)
  types = rng.randint(0, config["type_vocab_size"], [batch, length]
                      ).astype(np.int32)
  mask = np.ones([batch, length], np.int32)
  mask[-1, length // 2:] = 0
  return ids, mask, types


@pytest.mark.parametrize("changes,residual,running_mean", [
    ({}, False, False),                          # Google's BERT JSON
    ({"use_running_mean": False}, True, False),  # RealFormer
    ({"use_running_mean": True}, True, True),    # RealFormer, running mean
    ({"hidden_act": "relu"}, False, False),
])
@pytest.mark.parametrize("length", [7, 16])      # 16 = max_position_embeddings
def test_matches_a_numpy_transformer(tmp_path, changes, residual,
                                     running_mean, length):
  config = {**CONFIG, **changes}
  write_bert_dir(str(tmp_path), config, seed=3)
  model = BertModel(BertConfig.from_json_file(str(tmp_path /
                                                  "bert_config.json")))
  report = load_bert_checkpoint(model, str(tmp_path))
  assert "cls/seq_relationship/output_weights" in report.skipped
  assert "global_step" in report.skipped
  ids, mask, types = _inputs(np.random.RandomState(length), 2, length, config)
  out = model({"input_ids": ids, "input_mask": mask, "token_type_ids": types})
  ref = numpy_bert(bert_tensors(config, seed=3), config, ids, mask, types,
                   residual=residual, running_mean=running_mean)
  for name in OUTPUTS:
    np.testing.assert_allclose(out[name].numpy(), ref[name], atol=1e-5,
                               rtol=0, err_msg=name)
  for a, b in zip(out["encoder_outputs"], ref["encoder_outputs"]):
    np.testing.assert_allclose(a.numpy(), b, atol=1e-5, rtol=0)


def test_masked_lm_head_loads_and_ties_the_word_embeddings(tmp_path):
  write_bert_dir(str(tmp_path), CONFIG, seed=5)
  model = BertModel(BertConfig(**CONFIG), with_masked_lm=True)
  report = load_bert_checkpoint(model, str(tmp_path))
  assert "cls/predictions/output_bias" in report.loaded
  w = bert_tensors(CONFIG, seed=5)
  ids, mask, types = _inputs(np.random.RandomState(0), 2, 9, CONFIG)
  positions = np.array([[1, 4], [0, 2]], np.int32)
  out = model({"input_ids": ids, "input_mask": mask, "token_type_ids": types,
               "masked_lm_positions": positions})
  logits = out["masked_lm_logits"].numpy()
  assert logits.shape == (2, 2, CONFIG["vocab_size"])
  # BERT's head: gelu(dense) -> LayerNorm -> word_embeddings^T + bias.
  seq = np.take_along_axis(out["sequence_output"].numpy(),
                           positions[..., np.newaxis], axis=1)
  h = seq @ w["cls/predictions/transform/dense/kernel"] + w[
      "cls/predictions/transform/dense/bias"]
  h = 0.5 * h * (1 + np.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * h ** 3)))
  mean = h.mean(-1, keepdims=True)
  h = (h - mean) / np.sqrt(((h - mean) ** 2).mean(-1, keepdims=True) + 1e-12)
  h = (h * w["cls/predictions/transform/LayerNorm/gamma"] +
       w["cls/predictions/transform/LayerNorm/beta"])
  want = h @ w["bert/embeddings/word_embeddings"].T + w[
      "cls/predictions/output_bias"]
  np.testing.assert_allclose(logits, want, atol=1e-4 * np.abs(want).max())


def test_too_long_input_names_the_limit():
  model = BertModel(BertConfig(**CONFIG))
  with pytest.raises(UserInputError, match="max_position_embeddings 16"):
    model({"input_ids": tf.zeros([1, 17], tf.int32)})
