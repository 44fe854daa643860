"""Sparse (blocked) and full (dense) attention compute the same function."""

import numpy as np
import pytest
import tensorflow as tf

from encoder_testing import (max_abs_diff, numpy_reference, random_features,
                             randomize_relative_bias, tiny_config,
                             model_weights)
from etc_realformer import EtcModel


@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("radius,long_len", [(1, 7), (2, 12), (2, 13),
                                             (3, 16), (5, 9), (6, 5)])
def test_sparse_equals_full(residual, radius, long_len):
  # long_len covers multiples and non-multiples of the block length r + 1,
  # and a radius wider than the whole sequence.
  config = tiny_config(local_radius=radius, residual_attention=residual)
  model = EtcModel(config)
  model.build()
  randomize_relative_bias(model)
  feats = random_features(config, batch=2, long_len=long_len, global_len=4,
                          seed=radius * 100 + long_len)
  full = model(feats, att_implementation="full")
  sparse = model(feats, att_implementation="sparse")
  for a, b in zip(full, sparse):
    assert np.isfinite(a.numpy()).all() and np.isfinite(b.numpy()).all()
    assert max_abs_diff(a, b) < 1e-5


@pytest.mark.parametrize("impl", ["full", "sparse"])
def test_fully_masked_rows_are_finite_and_attend_to_nothing(impl):
  config = tiny_config(num_hidden_layers=1)
  model = EtcModel(config)
  model.build()
  feats = random_features(config, batch=2, long_len=10, global_len=4, seed=3)
  for key in ("l2l_att_mask", "l2g_att_mask", "g2g_att_mask", "g2l_att_mask"):
    feats[key] = np.zeros_like(feats[key])
  long_out, global_out, probs = model(feats, att_implementation=impl,
                                      return_attention_probs=True)
  assert np.isfinite(long_out.numpy()).all()
  assert np.isfinite(global_out.numpy()).all()
  for p in probs[0].values():
    assert np.all(p.numpy() == 0.0)


def test_missing_side_inputs_mean_no_masking_and_no_relative_term():
  config = tiny_config(num_hidden_layers=1)
  model = EtcModel(config)
  model.build()
  feats = random_features(config, batch=1, long_len=9, global_len=3,
                          fully_masked_rows=False, with_relative_ids=False)
  plain = {k: feats[k] for k in ("token_ids", "global_token_ids")}
  ones = dict(plain)
  ones["l2l_att_mask"] = np.ones_like(feats["l2l_att_mask"])
  for key in ("l2g_att_mask", "g2g_att_mask", "g2l_att_mask"):
    ones[key] = np.ones_like(feats[key])
  for impl in ("full", "sparse"):
    a = model(plain, att_implementation=impl)
    b = model(ones, att_implementation=impl)
    assert max_abs_diff(a[0], b[0]) == 0.0


def test_matches_numpy_reference_without_residual():
  config = tiny_config()
  model = EtcModel(config)
  model.build()
  randomize_relative_bias(model)
  feats = random_features(config, batch=2, long_len=11, global_len=4, seed=5)
  ref_long, ref_global = numpy_reference(model_weights(model), config, feats)
  for impl in ("full", "sparse"):
    long_out, global_out = model(feats, att_implementation=impl)
    assert max_abs_diff(long_out, ref_long) < 1e-5
    assert max_abs_diff(global_out, ref_global) < 1e-5


def test_dynamic_long_length_runs_sparse():
  config = tiny_config()
  model = EtcModel(config)
  model.build()
  feats = random_features(config, batch=1, long_len=10, global_len=3, seed=1)
  specs = {k: tf.TensorSpec([None, None] + list(v.shape[2:]), tf.int32)
           for k, v in feats.items()}
  fn = tf.function(lambda f: model(f), input_signature=[specs])
  dyn = fn(feats)
  static = model(feats, att_implementation="sparse")
  assert max_abs_diff(dyn[0], static[0]) < 1e-5
