"""The from-scratch initialisation options of `EtcConfig`."""

import numpy as np
import pytest
import tensorflow as tf

from encoder_testing import random_features, tiny_config
from etc_realformer import EtcModel
from etc_realformer.features.relative_positions import own_sentence_id


def _built(**overrides) -> EtcModel:
  model = EtcModel(tiny_config(**overrides))
  model.build()
  return model


def test_defaults_are_the_originals():
  model = _built()
  for block in model.blocks:
    att = block.attention
    assert np.all(att.global_relative.bias_table.numpy() == 0.0)
    assert np.all(att.long_relative.bias_table.numpy() == 0.0)
    v = att.l2l_value_projection.kernel.numpy()
    assert not np.allclose(v.T @ v, np.eye(v.shape[1]), atol=1e-2)


def test_own_sentence_bias_sets_one_row_of_the_global_table():
  config = tiny_config(own_sentence_bias_init=7.5)
  model = EtcModel(config)
  model.build()
  own = own_sentence_id(config.relative_pos_max_distance)
  for block in model.blocks:
    table = block.attention.global_relative.bias_table.numpy()
    assert np.all(table[own] == 7.5)
    assert np.all(np.delete(table, own, axis=0) == 0.0)
    # The long queries' table is untouched: a high own-sentence bias there
    # would stop long tokens from reading the query's and candidates'
    # global tokens.
    assert np.all(block.attention.long_relative.bias_table.numpy() == 0.0)


@pytest.mark.parametrize("share_qkv", [True, False])
def test_value_output_identity(share_qkv):
  model = _built(value_output_identity_init=0.5,
                 share_qkv_projections=share_qkv)
  qs = []
  for block in model.blocks:
    att = block.attention
    values = [att.l2l_value_projection, att.l2g_value_projection,
              att.g2g_value_projection, att.g2l_value_projection]
    q = values[0].kernel.numpy()
    np.testing.assert_allclose(q.T @ q, np.eye(q.shape[0]), atol=1e-5)
    for v in values[1:]:
      np.testing.assert_array_equal(v.kernel.numpy(), q)
    for out in (att.long_output_projection, att.global_output_projection):
      np.testing.assert_allclose(q @ out.kernel.numpy(),
                                 0.5 * np.eye(q.shape[0]), atol=1e-5)
      assert np.all(out.bias.numpy() == 0.0)
    qs.append(q)
  # Each layer draws its own matrix.
  assert not np.allclose(qs[0], qs[1])


@pytest.mark.parametrize("share_qkv", [True, False])
def test_query_key_identity(share_qkv):
  model = _built(query_key_identity_init=4.0, share_qkv_projections=share_qkv)
  for block in model.blocks:
    att = block.attention
    q = att.long_query_projection.kernel.numpy()
    # Query and key kernels are both 2 Q: scores start as 4 x.x'.
    np.testing.assert_allclose(q.T @ q, 4.0 * np.eye(q.shape[0]), atol=1e-4)
    for key in (att.l2l_key_projection, att.l2g_key_projection,
                att.g2g_key_projection, att.g2l_key_projection,
                att.global_query_projection):
      np.testing.assert_array_equal(key.kernel.numpy(), q)
    # Values keep the ordinary initializer.
    v = att.l2l_value_projection.kernel.numpy()
    assert not np.allclose(v.T @ v, np.eye(v.shape[1]), atol=1e-2)


def test_shared_matrix_also_when_built_inside_a_tf_function():
  config = tiny_config(value_output_identity_init=0.5,
                       query_key_identity_init=4.0)
  model = EtcModel(config)
  feats = random_features(config, batch=1, long_len=8, global_len=3, seed=1)
  tf.function(model.call)(feats)  # Variables are created while tracing.
  att = model.blocks[0].attention
  q = att.l2l_value_projection.kernel.numpy()
  np.testing.assert_allclose(q @ att.long_output_projection.kernel.numpy(),
                             0.5 * np.eye(q.shape[0]), atol=1e-5)
  k = att.l2l_key_projection.kernel.numpy()
  np.testing.assert_allclose(k.T @ k, 4.0 * np.eye(k.shape[0]), atol=1e-4)


def test_initialised_model_runs_finite():
  config = tiny_config(own_sentence_bias_init=20.0,
                       value_output_identity_init=1.0,
                       query_key_identity_init=0.5)
  model = EtcModel(config)
  feats = random_features(config, batch=2, long_len=12, global_len=4, seed=1)
  for out in model(feats):
    assert np.isfinite(out.numpy()).all()


@pytest.mark.parametrize("overrides,field", [
    (dict(value_output_identity_init=-1.0), "value_output_identity_init"),
    (dict(value_output_identity_init=1.0, att_size_per_head=4),
     "value_output_identity_init"),
    (dict(query_key_identity_init=-0.5), "query_key_identity_init"),
    (dict(query_key_identity_init=1.0, att_size_per_head=4),
     "query_key_identity_init"),
    (dict(own_sentence_bias_init=1.0, relative_vocab_size=None,
          relative_pos_max_distance=0), "own_sentence_bias_init"),
])
def test_invalid_values_name_the_field(overrides, field):
  with pytest.raises(ValueError, match=field):
    tiny_config(**overrides)
