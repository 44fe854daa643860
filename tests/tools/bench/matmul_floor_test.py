"""Tests of tools/bench/matmul_floor.py."""

import pytest

from tools.bench import matmul_floor


def test_matrix_products_count_flops_of_each_layout():
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  @tf.function
  def step(x34, x43, a, b, e1, e2):
    return (tf.matmul(x34, tf.ones([4, 5])),                  # 3x4 . 4x5
            tf.matmul(x43, tf.ones([4, 5]), transpose_a=True),  # same sizes
            tf.matmul(a, b, adjoint_b=True),  # [2, 1] x [6] batch: 12 x 3x4.4x5
            tf.einsum("ij,jk->ik", e1, e2))

  graph = step.get_concrete_function(
      tf.TensorSpec([3, 4]), tf.TensorSpec([4, 3]),
      tf.TensorSpec([2, 1, 3, 4]), tf.TensorSpec([6, 5, 4]),
      tf.TensorSpec([2, 2]), tf.TensorSpec([2, 2])).graph
  products, skipped = matmul_floor.matrix_products(graph)
  assert [p["gflop"] * 1e9 for p in products] == pytest.approx(
      [120, 120, 12 * 120])
  assert [(p["transpose_a"], p["transpose_b"]) for p in products] == [
      (False, False), (True, False), (False, True)]
  assert products[2]["a"] == [2, 1, 3, 4] and products[2]["b"] == [6, 5, 4]
  assert {p["dtype"] for p in products} == {"float32"}
  assert skipped == {"Einsum": 1}  # Counted, not timed: a lower bound.

  dynamic = tf.function(lambda x: tf.matmul(x, tf.ones([4, 5])))
  with pytest.raises(ValueError, match="dynamic shape"):
    matmul_floor.matrix_products(dynamic.get_concrete_function(
        tf.TensorSpec([None, 4])).graph)


def test_matrix_products_count_adjoint_batched_products():
  # TensorFlow's own flops statistic gets this one wrong (180): it reads an
  # attribute BatchMatMul does not have.
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  step = tf.function(lambda a, b: tf.matmul(a, b, adjoint_a=True))
  graph = step.get_concrete_function(tf.TensorSpec([2, 4, 3]),
                                     tf.TensorSpec([2, 4, 5])).graph
  (product,), _ = matmul_floor.matrix_products(graph)
  assert product["transpose_a"] and product["gflop"] * 1e9 == pytest.approx(
      2 * 2 * 3 * 5 * 4)
