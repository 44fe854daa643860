"""Typed-FFI custom calls from TensorFlow: the StableHLO text, and the long
side's host handler called directly under jit_compile against the NumPy
reference."""

import numpy as np
import pytest
import tensorflow as tf

from etc_realformer.kernels import custom_calls
from etc_realformer.kernels import ffi_library
from etc_realformer.kernels import fused_attention
from etc_realformer.kernels import reference as ref


def test_tensor_type():
  assert custom_calls.tensor_type([2, 4], tf.float32) == "tensor<2x4xf32>"
  assert custom_calls.tensor_type([], tf.int32) == "tensor<i32>"
  assert custom_calls.tensor_type([3], tf.int8) == "tensor<3xi8>"
  with pytest.raises(ValueError, match="static shapes"):
    custom_calls.tensor_type([None, 4], tf.float32)
  with pytest.raises(ValueError, match="custom calls take"):
    custom_calls.tensor_type([2], tf.int64)


def test_module_text_is_one_typed_ffi_call():
  text = custom_calls.stablehlo_module(
      "my_target", ["tensor<2xf32>", "tensor<2xi8>"], ["tensor<2xf32>"],
      {"flag": True, "count": 3, "scale": 0.5})
  assert "func.func public @main(%platform_index: tensor<i32>, " \
         "%arg0: tensor<2xf32>, %arg1: tensor<2xi8>)" in text
  call = [line for line in text.splitlines()
          if "stablehlo.custom_call" in line]
  assert len(call) == 1
  assert "stablehlo.custom_call @my_target(%arg0, %arg1)" in call[0]
  assert "api_version = 4 : i32" in call[0]
  # Attributes sorted by name, typed as the handlers' .Attr<> read them.
  assert ("backend_config = {count = 3 : i64, flag = true, "
          "scale = 0.5 : f32}" in call[0])
  with pytest.raises(ValueError, match="attribute name"):
    custom_calls.stablehlo_module("t", [], ["tensor<f32>"], {"name": "x"})


_OPERANDS = ("q", "k_band", "v_band", "k_global", "v_global", "per_id",
             "codes_band", "codes_global", "valid")


def _long_side_call(case: ref.LongSideCase, pieces):
  """The long side's custom call on `pieces`, under jit_compile: (ctx, lse)
  <f32>[B, H, Lp, D], [B, H, Lp]."""
  ffi_library.load_into_tensorflow()
  shape = [case.batch, case.num_heads, case.padded_len]

  @tf.function(jit_compile=True)
  def call(*args):
    return custom_calls.custom_call(
        fused_attention.LONG_SIDE_FORWARD, args,
        [(shape + [case.size_per_head], tf.float32), (shape, tf.float32)],
        {"block_len": case.block_len, "has_ids": case.has_ids})

  return call(*[tf.constant(pieces[n]) for n in _OPERANDS])


@pytest.mark.parametrize("has_ids", [True, False])
def test_long_side_handler_matches_the_reference(has_ids):
  case = ref.LongSideCase(batch=1, num_heads=2, num_blocks=3, block_len=4,
                          global_len=5, size_per_head=16, num_ids=6,
                          has_ids=has_ids)
  p = ref.long_side_pieces(case, seed=2, masked_rows=2)
  want_ctx, want_lse = ref.long_side_reference(p, case.block_len, has_ids)
  ctx, lse = _long_side_call(case, p)
  assert ref.relative_error(ctx.numpy(), want_ctx) < 1e-6
  live = p["valid"][:, None, :].repeat(2, axis=1) > 0
  assert ref.relative_error(lse.numpy(), want_lse, live) < 1e-6
  assert (ctx.numpy()[0, :, -2:] == 0).all()  # fully masked rows


def test_long_side_handler_rejects_values_that_do_not_fit_the_keys():
  # The CUDA kernels index raw pointers: the handler checks every operand.
  case = ref.LongSideCase(batch=1, num_heads=2, num_blocks=2, block_len=4,
                          global_len=3, size_per_head=16, num_ids=3)
  p = ref.long_side_pieces(case, seed=1)
  p["v_band"] = p["v_band"][:, :, :-1]  # one row short
  with pytest.raises(tf.errors.OpError, match="do not fit"):
    _long_side_call(case, p)
