"""The Triton kernels under Triton's interpreter (CPU, torch tensors, in a
child process: `triton_testing`) against the float64 NumPy reference."""

import importlib.util

import ml_dtypes
import numpy as np
import pytest

import fused_attention_testing as fat
import triton_testing

# Looked up, not imported: Triton must not load into this process
# (`triton_testing`).
pytestmark = pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in ("torch", "triton")),
    reason="the kernels' tests need torch and Triton "
    "(requirements-kernels.txt)")

# Tolerances relative to the context's scale: float32 as the project's
# references; bfloat16 and float16 inputs (the reference reads the same
# rounded inputs), with probabilities rounded for the context product.
TOLERANCE = {"float32": 1e-5, "bfloat16": 2e-2, "float16": 3e-3}
INPUTS = ("q", "k1", "v1", "k2", "v2", "src_q", "src_k1", "src_k2")
POINTERS = ("q", "k1", "v1", "k2", "v2", "per_id", "codes1", "codes2",
            "valid", "prev1", "prev2", "src_q", "src_k1", "src_k2", "seeds")
_NP = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16}


def _rounded(pieces, dtype, stream_dtype, case=None):
  """The pieces with the kernel's inputs (and the streams kept in
  `stream_dtype`) rounded to their dtypes (as float32); with recomputed
  streams, the sums the reference reads made again from the rounded
  sources."""
  out = dict(pieces)
  for name, value in pieces.items():
    kind = stream_dtype if name.startswith("prev") else (
        dtype if name in INPUTS else "float32")
    if kind != "float32":
      out[name] = value.astype(_NP[kind]).astype(np.float32)
  if case is not None:
    out.update(fat.source_sums(out, case))
  return out


def _kernel_value(case, pieces, name):
  """A launch's operand: the piece, or None where the kernel reads a
  placeholder (the sums, with recomputed streams: the kernels make them
  from the sources)."""
  if case.num_sources and name.startswith("prev"):
    return None
  return pieces.get(name)


def _forward(case, pieces, dtype, stream_dtype, block_m, block_n):
  """The launch of `branch_forward` on the pieces."""
  n, c1, c2 = case.rows, *case.widths
  shape = (case.batch, case.num_heads, n)
  args, dtypes = [], {}
  for i, name in enumerate(POINTERS):
    value = _kernel_value(case, pieces, name)
    if value is None:  # a placeholder the kernel does not read
      value = np.zeros(4, np.int32 if name == "seeds" else np.float32)
    elif name in INPUTS or (name.startswith("prev") and
                            stream_dtype != "float32"):
      dtypes[i] = dtype if name in INPUTS else stream_dtype
    args.append(value)
  outputs = {"ctx": (shape + (case.size_per_head,), dtype),
             "lse": (shape, "float32")}
  for index, width in enumerate((c1, c2)):
    name = f"new{index + 1}"
    outputs[name] = ((shape + (width,), stream_dtype)
                     if case.writes_new[index] else ((1,), "float32"))
  first_len = n + 2 * case.block_len if case.band else case.first_len
  ints = [case.batch, case.num_heads, n, first_len, case.second_len,
          case.num_ids, case.block_len, pieces["codes1"].shape[-1],
          case.num_sources, fat.keep_threshold(case.dropout_rate),
          fat.keep_gain(case.dropout_rate), *case.scales]
  return triton_testing.Launch(
      "branch_forward", (-(-n // block_m), case.batch * case.num_heads),
      args + ["ctx", "lse", "new1", "new2"] + ints,
      dict(D=case.size_per_head, BM=block_m, BN=block_n,
           R=1 << max(case.num_ids - 1, 0).bit_length(),
           BAND=case.band, HAS_IDS=case.has_ids,
           READ1=case.reads_prev[0], READ2=case.reads_prev[1],
           WRITE1=case.writes_new[0], WRITE2=case.writes_new[1],
           SOURCES=case.num_sources > 0, DROPOUT=case.dropout_rate > 0,
           BY_ROWS=case.by_rows, IEEE=dtype == "float32"),
      outputs=outputs, dtypes=dtypes)


STREAMS = dict(carried=(True, True), running_mean=True, dropout_rate=0.1)
# Every launch of the module runs in one child process (its start-up and
# Triton's import cost seconds); the tests read their results.
CASES = {
    # name: (case, dtype, stream dtype, (block_m, block_n))
    "long_float32": (fat.BranchCase.long_branch(
        ), "float32", "float32", (64, 64)),
    "long_bfloat16": (fat.BranchCase.long_branch(), "bfloat16", "float32",
                      (64, 64)),
    "long_float16": (fat.BranchCase.long_branch(
        ), "float16", "float32", (64, 64)),
    # RealFormer on both patterns (read, emitted, running mean), dropout.
    "long_streams": (fat.BranchCase.long_branch(
        **STREAMS), "float32", "float32", (64, 64)),
    # Many short blocks: a tile spans several bands. The first layer of
    # l2g-only streams (emitted, none read).
    "long_short_blocks": (fat.BranchCase.long_branch(
        num_blocks=9, block_len=5, global_len=37, carried=(False, True),
        has_prev=False, dropout_rate=0.3), "float32", "float32", (16, 16)),
    # A block length that divides no tile; no relative term; the last
    # layer (streams read, none emitted).
    "long_odd_blocks": (fat.BranchCase.long_branch(
        num_blocks=9, block_len=9, global_len=37, has_ids=False,
        carried=(True, True), emit=False), "float32", "float32", (32, 16)),
    # The global branch: G queries over G global and L long keys.
    "global_streams": (fat.BranchCase.global_branch(**STREAMS), "float32",
                       "float32", (16, 32)),
    # Streams kept in the compute dtype, dropout over the whole tensor.
    "global_bfloat16": (fat.BranchCase.global_branch(
        has_ids=False, carried=(True, False), dropout_rate=0.2,
        by_rows=False), "bfloat16", "bfloat16", (16, 32)),
    # Recomputed streams: the sums of three earlier layers made per tile
    # from their queries and keys, the running mean, dropout.
    "long_sources": (fat.BranchCase.long_branch(
        num_blocks=4, block_len=10, global_len=37, carried=(True, True),
        emit=False, num_sources=3, running_mean=True, num_summed=4,
        dropout_rate=0.1), "float32", "float32", (16, 32)),
    # ... on one pattern of the global branch, bfloat16 inputs.
    "global_sources": (fat.BranchCase.global_branch(
        has_ids=False, carried=(False, True), emit=False, num_sources=2),
        "bfloat16", "float32", (16, 32)),
}


@pytest.fixture(scope="module")
def results():
  pieces = {name: _rounded(fat.branch_pieces(case, seed=i), dtype, streams,
                           case)
            for i, (name, (case, dtype, streams, _)) in
            enumerate(CASES.items())}
  launches = [_forward(case, pieces[name], dtype, streams, *tiles)
              for name, (case, dtype, streams, tiles) in CASES.items()]
  outputs = triton_testing.run_launches(launches)
  return {name: (pieces[name], out) for name, out in zip(CASES, outputs)}


@pytest.mark.parametrize("name", sorted(CASES))
def test_branch_forward_matches_reference(results, name):
  case, dtype, stream_dtype, _ = CASES[name]
  pieces, out = results[name]
  want = fat.branch_forward(pieces, case)
  ctx, lse = out["ctx"], out["lse"]
  assert np.isfinite(ctx).all() and np.isfinite(lse).all()
  assert fat.relative_error(ctx, want.ctx) < TOLERANCE[dtype]
  valid_rows = np.broadcast_to(pieces["valid"][:, None] > 0, lse.shape)
  assert fat.relative_error(lse, want.lse, valid_rows) < 1e-6
  for index, new in enumerate(want.new):
    if new is None:
      assert out[f"new{index + 1}"].shape == (1,)
      assert np.isnan(out[f"new{index + 1}"]).all()  # never written
      continue
    tolerance = 1e-6 if stream_dtype == "float32" else 1e-2
    assert fat.relative_error(out[f"new{index + 1}"], new) < tolerance
  # Fully masked rows (the last 3 of batch 0) are exactly zero.
  assert not ctx[0, :, -3:].any()


# ------------------------------------------------------------ backward pass
def _backward_pieces(case, pieces, dtype, stream_dtype, seed):
  """The forward's values (the reference's ctx and lse, as the kernels'
  forward would hand them on) and random incoming gradients, rounded to
  their dtypes."""
  want = fat.branch_forward(pieces, case)
  rng = np.random.default_rng(seed)
  out = {"ctx": want.ctx.astype(np.float32),
         "lse": want.lse.astype(np.float32),
         "dctx": rng.normal(size=want.ctx.shape).astype(np.float32)}
  for index, new in enumerate(want.new):
    if new is not None:
      out[f"dnew{index + 1}"] = rng.normal(size=new.shape).astype(np.float32)
  return _rounded(out, dtype, stream_dtype) if dtype != "float32" else out


def _backward(case, pieces, grads_in, dtype, stream_dtype, block_m, block_n):
  """The three launches of the backward pass: queries, then each
  pattern's keys (delta from the queries' launch is recomputed here)."""
  n, c1, c2 = case.rows, *case.widths
  shape = (case.batch, case.num_heads, n)
  constexprs = dict(
      D=case.size_per_head, BM=block_m, BN=block_n,
      R=1 << max(case.num_ids - 1, 0).bit_length(), HAS_IDS=case.has_ids,
      DROPOUT=case.dropout_rate > 0, BY_ROWS=case.by_rows,
      IEEE=dtype == "float32")
  first_len = n + 2 * case.block_len if case.band else case.first_len

  def arg(name, kind=None):
    value = grads_in.get(name, _kernel_value(case, pieces, name))
    if value is None:
      return np.zeros(4, np.int32 if name == "seeds" else np.float32), None
    return value, kind

  def stream_kind(name):
    return stream_dtype if stream_dtype != "float32" else None

  names = POINTERS + ("ctx", "lse", "dctx", "dnew1", "dnew2")
  kinds = {n: dtype for n in INPUTS + ("ctx", "dctx")}
  sources = dict(SOURCES=case.num_sources > 0)
  kinds.update({n: stream_kind(n) for n in ("prev1", "prev2", "dnew1",
                                            "dnew2")})
  args, dtypes = [], {}
  for i, name in enumerate(names):
    value, kind = arg(name, kinds.get(name))
    args.append(value)
    if kind and name in grads_in or kind and name in pieces:
      dtypes[i] = kind
  outputs = {"dq": (shape + (case.size_per_head,), dtype),
             "dper_id": (pieces["per_id"].shape, "float32"),
             "delta": (shape, "float32")}
  for index, width in enumerate((c1, c2)):
    outputs[f"dprev{index + 1}"] = (
        (shape + (width,), stream_dtype) if case.reads_prev[index]
        else ((1,), "float32"))
  ints = [case.batch, case.num_heads, n, first_len, case.second_len,
          case.num_ids, case.block_len, pieces["codes1"].shape[-1],
          case.num_sources, fat.keep_threshold(case.dropout_rate),
          fat.keep_gain(case.dropout_rate), *case.scales]
  queries = triton_testing.Launch(
      "branch_backward_queries",
      (-(-n // block_m), case.batch * case.num_heads),
      args + ["dq", "dper_id", "dprev1", "dprev2", "delta"] + ints,
      dict(constexprs, BAND=case.band, READ1=case.reads_prev[0],
           READ2=case.reads_prev[1], WRITE1=case.writes_new[0],
           WRITE2=case.writes_new[1], **sources),
      outputs=outputs, dtypes=dtypes)
  delta = np.sum(grads_in["dctx"].astype(np.float64) *
                 grads_in["ctx"], -1).astype(np.float32)
  launches = [queries]
  for index in range(2):
    band = case.band and index == 0
    key_rows = (first_len, case.second_len)[index]
    names = ("q", f"k{index + 1}", f"v{index + 1}", "per_id",
             f"codes{index + 1}", "valid", f"prev{index + 1}", "src_q",
             f"src_k{index + 1}", "seeds", "lse", "delta", "dctx",
             f"dnew{index + 1}")
    args, dtypes = [], {}
    for i, name in enumerate(names):
      value, kind = (delta, None) if name == "delta" else arg(
          name, kinds.get(name) or kinds.get(name[:-1] + "1"))
      args.append(value)
      if kind and (name in grads_in or name in pieces):
        dtypes[i] = kind
    k_shape = pieces[f"k{index + 1}"].shape
    ints = [case.batch, case.num_heads, n, key_rows, case.num_ids,
            case.block_len, pieces[f"codes{index + 1}"].shape[-1],
            case.num_sources, fat.keep_threshold(case.dropout_rate),
            fat.keep_gain(case.dropout_rate), case.scales[index]]
    launches.append(triton_testing.Launch(
        "branch_backward_keys",
        (-(-key_rows // block_n), case.batch * case.num_heads),
        args + ["dk", "dv"] + ints,
        dict(constexprs, BAND=band, READ=case.reads_prev[index],
             WRITE=case.writes_new[index], PATTERN=index,
             BAND_BRANCH=case.band, **sources),
        outputs={"dk": (k_shape, dtype), "dv": (k_shape, dtype)},
        dtypes=dtypes))
  return launches


BACKWARD_CASES = ("long_float32", "long_bfloat16", "long_float16",
                  "long_streams", "long_short_blocks", "long_odd_blocks",
                  "global_streams", "global_bfloat16", "long_sources",
                  "global_sources")
GRAD_TOLERANCE = {"float32": 1e-5, "bfloat16": 3e-2, "float16": 5e-3}


@pytest.fixture(scope="module")
def backward_results():
  launches, inputs = [], {}
  for i, name in enumerate(BACKWARD_CASES):
    case, dtype, streams, tiles = CASES[name]
    pieces = _rounded(fat.branch_pieces(case, seed=i), dtype, streams, case)
    grads_in = _backward_pieces(case, pieces, dtype, streams, seed=100 + i)
    inputs[name] = (pieces, grads_in)
    launches += _backward(case, pieces, grads_in, dtype, streams, *tiles)
  outputs = triton_testing.run_launches(launches)
  return {name: (inputs[name], outputs[3 * i:3 * i + 3])
          for i, name in enumerate(BACKWARD_CASES)}


@pytest.mark.parametrize("name", BACKWARD_CASES)
def test_branch_backward_matches_reference(backward_results, name):
  case, dtype, stream_dtype, _ = CASES[name]
  (pieces, grads_in), (queries, keys1, keys2) = backward_results[name]
  fwd = fat.branch_forward(pieces, case)
  dnew = tuple(grads_in.get(f"dnew{i + 1}") for i in range(2))
  want = fat.branch_backward(pieces, case, fwd, grads_in["dctx"], dnew)
  tolerance = GRAD_TOLERANCE[dtype]
  got = {"q": queries["dq"], "k1": keys1["dk"], "v1": keys1["dv"],
         "k2": keys2["dk"], "v2": keys2["dv"]}
  if case.has_ids:
    got["per_id"] = queries["dper_id"]
  for key, value in got.items():
    assert np.isfinite(value).all(), key
    assert fat.relative_error(value, getattr(want, key)) < tolerance, key
  for index, prev in enumerate(want.prev):
    if prev is not None:
      # The sums' gradient holds the probabilities' error (the inputs'
      # precision) and, in a low dtype, its own rounding.
      stream_tolerance = (1e-5 if stream_dtype == dtype == "float32"
                          else 3e-2)
      assert fat.relative_error(queries[f"dprev{index + 1}"],
                                prev) < stream_tolerance


# ------------------------------------------------------------- memory check
_COPY_KERNEL = '''
import triton
import triton.language as tl


@triton.jit
def copy(src, dst, n, BLOCK: tl.constexpr, MASK_LOAD: tl.constexpr,
         MASK_STORE: tl.constexpr):
  i = tl.arange(0, BLOCK)
  x = tl.load(src + i, mask=i < n if MASK_LOAD else None)
  tl.store(dst + i, x, mask=i < n if MASK_STORE else None)
'''


def test_memory_check_fails_a_lane_past_the_end(tmp_path):
  """A lane the kernel leaves unmasked, one tile row past a 13-element
  tensor, fails the launch (on a GPU: another buffer's bytes, or a
  fault), load or store; masked, the same launch passes."""
  source = tmp_path / "copy_kernel.py"
  source.write_text(_COPY_KERNEL)

  def launch(mask_load, mask_store):
    return triton_testing.Launch(
        "copy", (1,), [np.arange(13, dtype=np.float32), "dst", 13],
        dict(BLOCK=16, MASK_LOAD=mask_load, MASK_STORE=mask_store),
        outputs={"dst": ((13,), "float32")}, source=str(source))

  ok, = triton_testing.run_launches([launch(True, True)])
  np.testing.assert_array_equal(ok["dst"], np.arange(13))
  for operation, tensor, flags in (("load", "argument 0", (False, True)),
                                   ("store", "dst", (True, False))):
    with pytest.raises(RuntimeError, match=(
        f"copy: a {operation} of 3 lanes outside every tensor "
        f"\\(the first 0 bytes past the end of {tensor}\\)")):
      triton_testing.run_launches([launch(*flags)])
