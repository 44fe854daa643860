"""Per-layer attention probabilities for analysis, and the side-input
builders feeding the encoder end to end."""

import numpy as np
import pytest

from conftest import GOLDEN_DIR
from encoder_testing import max_abs_diff, random_features, tiny_config
from etc_realformer import EtcConfig, EtcModel, make_global_local_side_inputs


def test_probs_shapes_sums_and_paths_agree():
  config = tiny_config(num_hidden_layers=2, residual_attention=True)
  model = EtcModel(config)
  model.build()
  feats = random_features(config, batch=2, long_len=11, global_len=4, seed=2)
  outs = {}
  for impl in ("full", "sparse"):
    long_out, global_out, probs = model(feats, att_implementation=impl,
                                        return_attention_probs=True)
    assert len(probs) == 2
    p = probs[1]
    heads, window = config.num_attention_heads, 2 * config.local_radius + 1
    assert p["l2l"].shape == (2, heads, 11, window)
    assert p["l2g"].shape == (2, heads, 11, 4)
    assert p["g2g"].shape == (2, heads, 4, 4)
    assert p["g2l"].shape == (2, heads, 4, 11)
    long_sum = p["l2l"].numpy().sum(-1) + p["l2g"].numpy().sum(-1)
    valid = (feats["l2l_att_mask"].max(-1) | feats["l2g_att_mask"].max(-1)) > 0
    np.testing.assert_allclose(long_sum[:, 0][valid], 1.0, atol=1e-5)
    assert np.all(long_sum[:, 0][~valid] == 0.0)
    # Masked keys get (numerically) nothing.
    masked = feats["l2l_att_mask"][:, np.newaxis] == 0
    assert np.abs(p["l2l"].numpy()[np.broadcast_to(masked, p["l2l"].shape)]
                  ).max() < 1e-6
    outs[impl] = (long_out, probs)
  assert max_abs_diff(outs["full"][0], outs["sparse"][0]) < 1e-5
  for layer in range(2):
    for key in ("l2l", "l2g", "g2g", "g2l"):
      assert max_abs_diff(outs["full"][1][layer][key],
                          outs["sparse"][1][layer][key]) < 1e-5


def test_default_call_returns_two_outputs():
  config = tiny_config()
  model = EtcModel(config)
  outputs = model(random_features(config, batch=1, long_len=6, global_len=2))
  assert len(outputs) == 2


@pytest.mark.parametrize("hard_g2l,hard_l2g", [(False, False), (True, False),
                                               (False, True), (True, True)])
def test_side_input_builders_drive_the_encoder(hard_g2l, hard_l2g):
  ref = np.load(GOLDEN_DIR / "reference.npz")
  config = EtcConfig.from_json_file(str(GOLDEN_DIR / "etc_config.json"))
  config = config.replace(use_hard_g2l_mask=hard_g2l,
                          use_hard_l2g_mask=hard_l2g)
  side = make_global_local_side_inputs(
      ref["long_breakpoints"], ref["global_breakpoints"], ref["sentence_ids"],
      local_radius=config.local_radius,
      relative_pos_max_distance=config.relative_pos_max_distance,
      use_hard_g2l_mask=config.use_hard_g2l_mask,
      use_hard_l2g_mask=config.use_hard_l2g_mask)
  model = EtcModel(config)
  feats = dict(token_ids=ref["token_ids"],
               global_token_ids=ref["global_token_ids"],
               segment_ids=ref["segment_ids"],
               global_segment_ids=ref["global_segment_ids"], **side)
  full = model(feats, att_implementation="full")
  sparse = model(feats, att_implementation="sparse")
  for a, b in zip(full, sparse):
    assert np.isfinite(a.numpy()).all()
    assert max_abs_diff(a, b) < 1e-5


@pytest.mark.parametrize("impl", ["sparse", "full"])
def test_dropout_gain_folded_into_softmax_matches_explicit_scaling(impl):
  # Without probabilities the dropout gain rides on the softmax's row scale;
  # with them it is applied after the softmax. Same seed: same function.
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  config = tiny_config(num_hidden_layers=2, residual_attention=True,
                       attention_probs_dropout_prob=0.3,
                       hidden_dropout_prob=0.0)
  model = EtcModel(config)
  model.build()
  feats = random_features(config, batch=2, long_len=13, global_len=4, seed=6)

  def run(**kwargs):
    tf.random.set_seed(99)  # fixes the per-call dropout seed
    return model(feats, training=True, att_implementation=impl, **kwargs)

  folded = run()
  explicit = run(return_attention_probs=True)
  for a, b in zip(folded, explicit[:2]):
    assert max_abs_diff(a, b) < 1e-5
  # And dropout is on (the comparison above is not between two no-ops).
  undropped = model(feats, training=False, att_implementation=impl)
  assert max_abs_diff(folded[0], undropped[0]) > 1e-3
