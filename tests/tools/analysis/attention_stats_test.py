"""`tools.analysis.attention_stats`: entropy and JSD of fused ETC rows against
hand-worked values, the rows left out, and the streaming summaries against
exact numbers."""

import math

import numpy as np
import pytest

from encoder_testing import random_features, tiny_model
from etc_realformer.features.side_inputs import SIDE_INPUT_KEYS
from tools.analysis import attention_stats as stats

LN2 = math.log(2.0)


def test_entropy_of_uniform_one_hot_and_fused_rows():
  # Uniform over 3 + 5 keys split across the two patterns: ln 8; one-hot: 0.
  p_a = np.array([[[[1 / 8] * 3, [1, 0, 0]]]], np.float32)
  p_b = np.array([[[[1 / 8] * 5, [0] * 5]]], np.float32)
  ones_a, ones_b = np.ones([1, 2, 3]), np.ones([1, 2, 5])
  h = stats.fused_entropy(p_a, p_b, ones_a, ones_b).numpy()
  np.testing.assert_allclose(h[0, 0], [math.log(8), 0.0], atol=1e-6)
  # Uniform over the 4 unmasked keys of 8: ln 4 (masked slots hold zeros).
  p_a = np.array([[[[0.25, 0.0, 0.25]]]], np.float32)
  p_b = np.array([[[[0.25, 0.0, 0.25, 0.0, 0.0]]]], np.float32)
  mask_a, mask_b = np.array([[[1, 0, 1]]]), np.array([[[1, 0, 1, 0, 0]]])
  h = stats.fused_entropy(p_a, p_b, mask_a, mask_b).numpy()
  np.testing.assert_allclose(h, [[[math.log(4)]]], atol=1e-6)
  assert stats.key_counts(mask_a.astype(np.float32),
                          mask_b.astype(np.float32)).numpy().tolist() == [[4]]


def test_jsd_of_hand_worked_pairs():
  def jsd(p, q, split=1):
    p, q = np.array(p, np.float32), np.array(q, np.float32)
    ones = lambda k: np.ones([1, 1, k], np.float32)
    return float(stats.fused_jsd(
        p[None, None, None, :split], p[None, None, None, split:],
        q[None, None, None, :split], q[None, None, None, split:],
        ones(split), ones(len(p) - split)).numpy()[0, 0, 0])

  # Disjoint supports: the maximum, ln 2, in nats.
  assert jsd([1, 0], [0, 1]) == pytest.approx(LN2, abs=1e-6)
  assert jsd([0.3, 0.7], [0.3, 0.7]) == pytest.approx(0.0, abs=1e-7)
  # P = (1/2, 1/2), Q = (1, 0): M = (3/4, 1/4), KL(P||M) = ln(4/3) / 2,
  # KL(Q||M) = ln(4/3): JSD = 3/4 ln(4/3); fused over the two patterns too.
  expected = 0.75 * math.log(4 / 3)
  assert jsd([0.5, 0.5], [1, 0]) == pytest.approx(expected, abs=1e-6)
  assert jsd([0.5, 0.0, 0.5], [1, 0, 0], split=2) == pytest.approx(
      expected, abs=1e-6)


def test_long_window_slots_outside_the_sequence_are_no_keys():
  # L = 3, r = 1: row 0 has no key left of it, row 2 none right of it.
  probs = {"l2l": np.zeros([1, 1, 3, 3], np.float32),
           "l2g": np.zeros([1, 1, 3, 2], np.float32),
           "g2g": np.zeros([1, 1, 2, 2], np.float32),
           "g2l": np.zeros([1, 1, 2, 3], np.float32)}
  masks = stats.key_masks({"l2g_att_mask": np.array([[[1, 0]] * 3])}, probs,
                          local_radius=1)
  np.testing.assert_array_equal(masks["long"][0].numpy()[0],
                                [[0, 1, 1], [1, 1, 1], [1, 1, 0]])
  keys = stats.key_counts(*masks["long"]).numpy()
  np.testing.assert_array_equal(keys, [[3, 4, 3]])
  np.testing.assert_array_equal(stats.key_counts(*masks["global"]).numpy(),
                                [[5, 5]])


def test_padding_and_fully_masked_rows_are_left_out_and_counted():
  keys = np.array([[4, 0, 2, 0], [0, 3, 1, 1]])
  padding = np.array([[False, False, False, True], [True, False, False, True]])
  include, padded, masked = stats.row_inclusion(keys, padding)
  np.testing.assert_array_equal(include, [[1, 0, 1, 0], [0, 1, 1, 0]])
  # Padding counts as padding even when fully masked too.
  assert (padded, masked) == (3, 1)
  summary = stats.StreamingSummary(1, 2, upper=2.0, bins=64)
  values = np.arange(16, dtype=np.float64).reshape(2, 2, 4) / 10
  summary.add(0, values, include)
  kept = np.moveaxis(values, 1, 0)[:, include]  # [H, 4]
  assert summary.total[0].tolist() == [4, 4]
  np.testing.assert_allclose(summary.sums[0], kept.sum(1))


def test_streaming_summary_matches_exact_numbers_in_fixed_memory():
  rng = np.random.RandomState(0)
  bins, upper = 512, math.log(40)
  summary = stats.StreamingSummary(2, 3, upper, bins)
  size = summary.nbytes()
  chunks = []
  for _ in range(40):
    values = upper * rng.beta(2, 5, size=[4, 3, 7])
    include = rng.rand(4, 7) < 0.8
    summary.add(1, values, include)
    chunks.append(np.moveaxis(values, 1, 0)[:, include])
  assert summary.nbytes() == size  # does not grow with the rows
  exact = np.concatenate(chunks, axis=1)  # [H, n]
  for head in range(3):
    got = summary.summary(1, head)
    row = exact[head]
    assert got["count"] == row.size
    assert got["mean"] == pytest.approx(row.mean(), rel=1e-12)
    assert (got["min"], got["max"]) == (row.min(), row.max())
    for key, q in (("q1", 0.25), ("median", 0.5), ("q3", 0.75)):
      assert abs(got[key] - np.quantile(row, q)) <= summary.width, key
  assert summary.summary(0, 0)["count"] == 0
  assert summary.summary(0, 0)["median"] is None
  coords, density = summary.density(1, 0)
  assert coords.min() >= exact[0].min() and coords.max() <= exact[0].max()
  assert (density >= 0).all()


def test_histogram_quantile_is_exact_for_one_value_and_within_a_bin():
  counts = np.zeros(10, np.int64)
  counts[3] = 1
  assert stats.histogram_quantile(counts, 0.1, 0.5, 0.33, 0.33) == 0.33
  values = np.array([0.05, 0.12, 0.13, 0.71, 0.99])
  counts = np.bincount((values / 0.1).astype(int), minlength=10)
  for q in (0.0, 0.25, 0.5, 0.6, 1.0):
    got = stats.histogram_quantile(counts, 0.1, q, values.min(), values.max())
    assert abs(got - np.quantile(values, q)) <= 0.1


def test_thresholds_scale_the_paper_s_to_the_keys_of_a_row():
  assert stats.entropy_thresholds(math.log(512)) == pytest.approx((1.5, 4.5))
  low, high = stats.entropy_thresholds(math.log(64))
  assert (low, high) == pytest.approx((1.5 * 6 / 9, 4.5 * 6 / 9))
  assert [stats.colour_class(m, (1.0, 3.0)) for m in (0.5, 2.0, 3.5)] == [
      "low", "mid", "high"]
  assert stats.colour_class(None, (1.0, 3.0)) is None
  assert stats.JSD_THRESHOLDS == pytest.approx((0.25 * LN2, 0.75 * LN2))


@pytest.mark.parametrize("impl", ["sparse", "full"])
def test_model_rows_are_distributions_over_the_keys_the_masks_allow(impl):
  # The probabilities' layouts and the masks line up: every row that counts
  # sums to 1 over its unmasked keys, and its entropy is in [0, ln K].
  model = tiny_model(num_hidden_layers=3, residual_attention=True)
  long_len, global_len = 11, 4
  feats = random_features(model.config, 2, long_len, global_len, seed=3)
  out = model.encode(feats, return_attention_probs=True,
                     att_implementation=impl)
  side = {k: feats.get(k) for k in SIDE_INPUT_KEYS}
  rows = stats.layer_statistics(out.attention_probs, side,
                                model.config.local_radius)
  masks = stats.key_masks(side, out.attention_probs[0],
                          model.config.local_radius)
  for name, (a, b) in stats.BRANCHES.items():
    keys = rows[name]["keys"].numpy()
    include, _, masked = stats.row_inclusion(keys, np.zeros_like(keys, bool))
    assert masked > 0  # random_features makes some
    mask_a, mask_b = (m.numpy()[:, None] for m in masks[name])
    for layer, probs in enumerate(out.attention_probs):
      total = ((probs[a].numpy() * mask_a).sum(-1) +
               (probs[b].numpy() * mask_b).sum(-1))  # [B, H, N]
      np.testing.assert_allclose(np.moveaxis(total, 1, 0)[:, include], 1.0,
                                 atol=1e-5)
      entropy = rows[name]["entropy"][layer].numpy()
      bound = np.log(np.maximum(keys, 1))[:, None]
      assert (entropy >= -1e-6).all()
      assert (entropy <= bound + 1e-5).all()
    assert len(rows[name]["jsd"]) == 2
    for jsd in rows[name]["jsd"]:
      assert (jsd.numpy() >= 0).all() and (jsd.numpy() <= LN2 + 1e-6).all()
    summary = stats.BranchSummary(name, 3, model.config.num_attention_heads,
                                max_keys=int(keys.max()), bins=128)
    summary.add({k: ([t.numpy() for t in v] if isinstance(v, list)
                     else v.numpy()) for k, v in rows[name].items()},
                np.zeros_like(keys, bool))
    report = summary.to_json()
    assert report["rows"] == include.sum()
    assert report["fully_masked_rows"] == masked
    assert len(report["entropy"]) == 3 and len(report["jsd"]) == 2
