"""Tests for tasks.common.featurization.logits: NEG_INF excludes a choice
exactly, stays finite, and is the one the task heads use."""

import numpy as np
import tensorflow as tf

from tasks.common.featurization import logits
from tasks.hotpotqa import head as hotpotqa_head
from tasks.nq import decode as nq_decode
from tasks.openkp import head as openkp_head
from tasks.pretrain import head as pretrain_head
from tasks.wikihop import head as wikihop_head


def test_neg_inf_gives_exact_zeros_and_no_nans():
  scores = tf.constant([[3.0, logits.NEG_INF, -2.0],
                        [logits.NEG_INF, logits.NEG_INF, 0.5]])
  probs = tf.nn.softmax(scores).numpy()
  assert probs[0, 1] == 0.0 and probs[1, 0] == probs[1, 1] == 0.0
  np.testing.assert_allclose(probs.sum(-1), 1.0, rtol=1e-6)
  assert np.isfinite(np.float32(logits.NEG_INF))
  assert np.isfinite(np.float32(logits.NEG_INF) - np.float32(logits.NEG_INF))
  assert logits.NEG_INF < logits.NEG_INF / 2 < -1e6


def test_the_heads_share_it():
  for module in (hotpotqa_head, nq_decode, openkp_head, pretrain_head,
                 wikihop_head):
    assert module.NEG_INF == logits.NEG_INF
