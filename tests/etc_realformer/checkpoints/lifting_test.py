"""Lifting BERT into ETC: tiled positions give BERT's function exactly on a
short input; the relative recipe copies every shared weight name by name and
initialises the rest as documented."""

import numpy as np
import pytest

from bert_testing import bert_tensors, write_bert_dir
from etc_realformer import BertConfig, BertModel, load_bert_checkpoint
from etc_realformer.checkpoints import lifting
from etc_realformer.errors import UserInputError

BERT = dict(vocab_size=40, hidden_size=16, num_hidden_layers=2,
            num_attention_heads=2, intermediate_size=20,
            max_position_embeddings=12, type_vocab_size=2,
            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
            use_running_mean=False)
OPTIONS = dict(long_seq_len=30, etc=dict(local_radius=9,
                                         relative_pos_max_distance=2,
                                         relative_vocab_size=8))


@pytest.mark.parametrize("residual", [True, False])
def test_tiled_lift_is_bert_on_a_short_input(tmp_path, residual):
  config = BertConfig(**BERT, residual_attention=residual)
  tensors = bert_tensors(BERT, seed=2)
  model, heads, _ = lifting.lift(config, tensors, lifting.LiftOptions(
      position_mode="tiled", **OPTIONS))
  assert model.config.residual_attention == residual
  assert sorted(heads)[0].startswith("cls/predictions/")
  write_bert_dir(str(tmp_path), BERT, tensors=tensors)
  reference = BertModel(config)
  load_bert_checkpoint(reference, str(tmp_path))

  rng = np.random.RandomState(0)
  batch, length, r = 2, 8, OPTIONS["etc"]["local_radius"]  # < the radius
  ids = rng.randint(0, 40, [batch, length]).astype(np.int32)
  types = rng.randint(0, 2, [batch, length]).astype(np.int32)
  want = reference({"input_ids": ids, "token_type_ids": types})
  global_len = 3
  features = {
      "token_ids": ids, "segment_ids": types,
      "global_token_ids": np.ones([batch, global_len], np.int32),
      # Every long token sees the whole (short) input and no global token.
      "l2l_att_mask": np.ones([batch, length, 2 * r + 1], np.int32),
      "l2g_att_mask": np.zeros([batch, length, global_len], np.int32),
      "g2l_att_mask": np.zeros([batch, global_len, length], np.int32),
  }
  long_out, _ = model(features)
  np.testing.assert_allclose(long_out.numpy(),
                             want["sequence_output"].numpy(), atol=1e-5,
                             rtol=0)


def test_relative_lift_copies_name_by_name_and_starts_the_rest_fresh():
  config = BertConfig(**BERT)
  tensors = bert_tensors(BERT, seed=4)
  model, heads, report = lifting.lift(config, tensors, lifting.LiftOptions(
      **OPTIONS))
  variables = model.official_variables()
  # Every copied variable holds its source, name by name.
  for etc_name, source in report.copied.items():
    value = variables[etc_name].numpy()
    if "token_type_embeddings" in source:
      np.testing.assert_array_equal(value[:2], tensors[
          "bert/embeddings/token_type_embeddings"])
    else:
      np.testing.assert_array_equal(value, tensors[source], err_msg=etc_name)
  layer1 = ("etc_document_bert/global_local_transformer_layers/"
            "fused_att_layer_1/")
  assert report.copied[layer1 + "fused_global_local_att/long_output_"
                       "projection/kernel"] == (
                           "bert/encoder/layer_1/attention/output/dense/"
                           "kernel")
  # New: relative tables (embeddings ~ truncated normal 0.5, biases 0) and
  # the segment rows BERT does not have.
  emb = variables[layer1 + "fused_global_local_att/long_qkv_attention/"
                  "qkv_relative_attention/relative_emb_table"].numpy()
  assert 0.2 < emb.std() < 0.6 and np.abs(emb).max() <= 1.0 + 1e-6
  bias = variables[layer1 + "fused_global_local_att/global_qkv_attention/"
                   "relative_bias_table"].numpy()
  assert np.all(bias == 0.0)
  segments = variables["etc_document_bert/segment_emb_lookup/"
                       "embedding_table"].numpy()
  assert segments.shape == (16, 16) and 0.0 < np.abs(segments[2:]).max()
  assert any("relative_emb_table" in f for f in report.fresh)
  # Dropped: absolute positions, pooler, next-sentence head, bookkeeping.
  for name in ("bert/embeddings/position_embeddings",
               "bert/pooler/dense/kernel",
               "cls/seq_relationship/output_weights", "global_step"):
    assert name in report.dropped
  assert "position_emb_lookup_long/embedding_table" not in variables
  assert "cls/predictions/output_bias" in heads


def test_unshared_configs_get_copies_on_both_sides():
  tensors = bert_tensors(BERT, seed=6)
  model, _, report = lifting.lift(BertConfig(**BERT), tensors,
                                  lifting.LiftOptions(
                                      long_seq_len=30, etc=dict(
                                          OPTIONS["etc"],
                                          share_qkv_projections=False,
                                          share_feed_forward_params=False)))
  att = ("etc_document_bert/global_local_transformer_layers/"
         "fused_att_layer_0/fused_global_local_att/")
  for name in ("global_query_projection", "g2g_key_projection",
               "g2l_value_projection"):
    assert report.copied[f"{att}{name}/linear/kernel"].startswith(
        "bert/encoder/layer_0/attention/self/")
  assert any("global_feed_forward_layer_0" in n for n in report.copied)


def test_a_checkpoint_that_does_not_fit_its_config_is_one_error():
  tensors = bert_tensors(BERT)
  del tensors["bert/encoder/layer_1/output/dense/kernel"]
  tensors["bert/embeddings/word_embeddings"] = np.zeros([41, 16], np.float32)
  with pytest.raises(UserInputError) as info:
    lifting.lift(BertConfig(**BERT), tensors, lifting.LiftOptions(**OPTIONS))
  message = str(info.value)
  assert "missing bert/encoder/layer_1/output/dense/kernel" in message
  assert "bert/embeddings/word_embeddings: checkpoint [41, 16]" in message


def test_unknown_options_are_named():
  with pytest.raises(UserInputError, match="hidden_size"):
    lifting.LiftOptions(etc={"hidden_size": 8})
  with pytest.raises(UserInputError, match="position_mode"):
    lifting.LiftOptions(position_mode="absolute")
