"""`ExecutionConfig`: how the encoder computes its function, not what.

`EtcConfig` is the model (what `etc_config.json` holds, plus the RealFormer
options); these choices trade speed for memory and give the same outputs and
gradients whatever their values (to float32 rounding; `dropout_rng` draws
other dropout masks in training), so a checkpoint never depends on them:

    model = EtcModel(config, ExecutionConfig(attention_chunk_len=2048))

Gradient checkpointing (`EtcConfig.grad_checkpointing_period`) is also an
execution choice, but the released config format carries it, so it stays in
`EtcConfig`.
"""

import dataclasses
from typing import Any, Union

from etc_realformer.errors import UserInputError

ATT_IMPLEMENTATIONS = ("auto", "sparse", "full")
SOFTMAX_DTYPES = ("float32", "compute")
STREAM_DTYPES = ("float32", "compute")
# etc_realformer.attention.dropout.DROPOUT_RNGS (this module stays free of
# TensorFlow).
DROPOUT_RNGS = ("philox", "hash")
ATTENTION_KERNELS = ("xla", "fused")

# `att_implementation = "auto"`: the dense path up to this static long length
# (as the original), the sparse (blocked) path above it.
AUTO_FULL_MAX_LEN = 1024

# `attention_chunk_len = "auto"`: one piece up to this static long length,
# chunks of AUTO_CHUNK_LEN queries above it (the best measured memory at
# 8192 and 16384; docs/benchmarks.md, "Chunk length").
AUTO = "auto"
AUTO_UNCHUNKED_MAX_LEN = 4096
AUTO_CHUNK_LEN = 2048


@dataclasses.dataclass(frozen=True)
class ExecutionConfig:
  """Speed/memory choices of the encoder (see the module docstring).

  Attributes:
    att_implementation: 'sparse' = blocked l2l attention (linear in the long
      length), 'full' = dense [L, L] scores, 'auto' = full for static lengths
      <= AUTO_FULL_MAX_LEN. `EtcModel.call` can override it per call.
    recompute_attention: keep only the attention core's inputs for the
      backward pass and recompute scores, softmaxes and dropout there: saves
      the [L, 3b] / [L, G] / [G, L] score tensors for one more core pass.
    attention_chunk_len: sparse path, static lengths: compute the core in
      ceil(L / attention_chunk_len) chunks of queries, each recomputed alone
      in the backward pass, so that one chunk's scores exist at a time.
      0 = one piece; "auto" = one piece up to AUTO_UNCHUNKED_MAX_LEN tokens,
      chunks of AUTO_CHUNK_LEN above. Not applied under XLA, whose schedule
      does not keep the chunk order that bounds memory.
    recompute_residual_streams: residual attention carries each layer's score
      inputs (pre-scaled queries, keys, relative scores per id) instead of
      the running score sums, and recomputes the sums where a layer reads
      them (chunk by chunk on the sparse path): no [L, G]-sized stream
      between layers, for O(layers^2) score products. For shallow models or
      inputs of 8k tokens and more.
    softmax_dtype: under mixed precision, where the attention probabilities
      live. 'float32': softmax, probabilities, dropout and their gradients
      in float32 (cast to the compute dtype for the context product).
      'compute': logits and the per-row sums stay float32, the
      probabilities are made in the compute dtype (bfloat16 or float16) and
      only they are kept for the backward pass (a hand-written softmax
      gradient), so the score-sized tensors after the softmax take half the
      bytes. The forward values are the same (the context product read
      compute-dtype probabilities already); gradients round once more.
      No effect in float32.
    stream_dtype: under mixed precision, the dtype of the RealFormer running
      score sums carried from layer to layer. 'float32': as the scores.
      'compute': rounded to the compute dtype (bfloat16 or float16) where a
      layer emits them and read back into float32 where the next layer adds
      its own scores, so the score-sized tensors between layers (and their
      gradients) take half the bytes; each layer's logits then carry one
      more rounding of the sum (about 2^-9 of it in bfloat16). No effect in
      float32 or without residual attention.
    dropout_rng: what draws the dropout masks (`attention.dropout`).
      'philox': TensorFlow's stateless Philox op, the fastest on the CPU
      graph path. 'hash': a keyed hash of each element's index, which XLA
      fuses into the ops that apply the mask, so the step writes no mask
      bits (the GPU path). The same keep probability and the same
      chunk-independence, but other masks: unlike the other fields, this
      one changes which elements a seed drops (never the eval outputs).
    attention_kernel: 'xla': the attention core as TensorFlow ops (what XLA
      fuses as it can). 'fused': under XLA (jit_compile), each branch
      the fused kernels cover runs as custom calls, forward and backward,
      that keep scores, masks, softmax statistics and dropout decisions
      on chip (`etc_realformer.attention.fused`, on the backends of
      `etc_realformer.kernels`: Triton kernels on CUDA, C++ on the host;
      built with g++ at first use). Dropout in training is fused with
      dropout_rng='hash'; other branches (returned probabilities,
      recomputed streams, Philox dropout in training), and every call
      outside XLA, run as 'xla'.
  """
  att_implementation: str = "auto"
  recompute_attention: bool = False
  attention_chunk_len: Union[int, str] = AUTO
  recompute_residual_streams: bool = False
  softmax_dtype: str = "float32"
  stream_dtype: str = "float32"
  dropout_rng: str = "philox"
  attention_kernel: str = "xla"

  def __post_init__(self):
    for name, allowed in (("dropout_rng", DROPOUT_RNGS),
                          ("attention_kernel", ATTENTION_KERNELS),
                          ("softmax_dtype", SOFTMAX_DTYPES),
                          ("stream_dtype", STREAM_DTYPES),
                          ("att_implementation", ATT_IMPLEMENTATIONS)):
      value = getattr(self, name)
      if value not in allowed:
        raise UserInputError(f"ExecutionConfig.{name}: {value!r} is not "
                             f"one of {allowed}")
    chunk = self.attention_chunk_len
    if chunk != AUTO and (not isinstance(chunk, int) or
                          isinstance(chunk, bool) or chunk < 0):
      raise UserInputError(f"ExecutionConfig.attention_chunk_len: must be "
                       f"{AUTO!r} or a non-negative integer, got {chunk!r}")

  def implementation_for(self, long_len: Any,
                         requested: Union[str, None] = None) -> str:
    """'sparse' or 'full' for a static long length (None: dynamic).

    Args:
      long_len: the long length, an int when static.
      requested: a per-call override of `att_implementation`.
    """
    impl = requested or self.att_implementation
    if impl not in ATT_IMPLEMENTATIONS:
      raise UserInputError(f"att_implementation: {impl!r} is not one of "
                       f"{ATT_IMPLEMENTATIONS}")
    if impl != "auto":
      return impl
    if isinstance(long_len, int) and long_len <= AUTO_FULL_MAX_LEN:
      return "full"
    return "sparse"

  def chunk_len_for(self, long_len: Any) -> int:
    """Queries per attention chunk for a long length (0 = one piece).

    Resolves "auto"; a dynamic (non-int) length gets 0, since only static
    lengths are chunked.
    """
    chunk = self.attention_chunk_len
    if chunk != AUTO:
      return chunk
    if not isinstance(long_len, int) or long_len <= AUTO_UNCHUNKED_MAX_LEN:
      return 0
    return AUTO_CHUNK_LEN

  def replace(self, **changes) -> "ExecutionConfig":
    return dataclasses.replace(self, **changes)
