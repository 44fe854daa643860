"""The fused kernels' rules: the int8 score codes and the kernels' names.

Masks and relative ids reach the kernels as one int8 code per score: the
key's relative id in the low 7 bits (0 without ids), the sign bit set where
the key is masked (id - 128), and `NO_ID` (-1: id 127, masked) a masked key
without a relative term, which only the l2l band has (its columns outside
the window, where the XLA path's skewed relative scores are 0). Ids are at
most `MAX_ID`. The band's codes are [B, N, `band_stride(b)`]: 3b columns
per query, rows padded with `NO_ID` to 16 bytes.

Each branch of an ETC layer (long: l2l + l2g; global: g2g + g2l) is one
custom call per pass (`FORWARD_TARGET`, `BACKWARD_TARGET`), which the CUDA
handlers run as Triton kernels: `FORWARD`; the backward's `QUERIES`, then
`KEYS` per pattern. The C++ handlers read these rules from `cc/format.h`,
which `cc_header()` writes (a test holds the two equal).

Standard library only: the GPU tools load it without TensorFlow.
"""

MASKED = -128
NO_ID = -1
# The largest relative id a code holds (127 is NO_ID's).
MAX_ID = 126
# The band codes' rows are padded to a multiple of this many bytes.
BAND_ROW_BYTES = 16

# The Triton kernels of a branch (`triton_attention`), the cubins' first
# name part (`variants.variant_name`).
FORWARD = "branch_forward"
QUERIES = "branch_backward_queries"
KEYS = "branch_backward_keys"
KERNELS = (FORWARD, QUERIES, KEYS)

# The XLA FFI custom-call targets of a branch's two passes.
FORWARD_TARGET = "etc_branch_forward"
BACKWARD_TARGET = "etc_branch_backward"

# The branches' first patterns: the l2l band (long) or dense (global).
BRANCHES = ("band", "dense")


def band_stride(block_len: int) -> int:
  """The band codes' row length: 3b rounded up to `BAND_ROW_BYTES`."""
  return -(-3 * block_len // BAND_ROW_BYTES) * BAND_ROW_BYTES


def cc_header() -> str:
  """`cc/format.h`: these rules as C++ constants."""
  strings = (("kForwardTarget", FORWARD_TARGET),
             ("kBackwardTarget", BACKWARD_TARGET),
             ("kForwardKernel", FORWARD), ("kQueriesKernel", QUERIES),
             ("kKeysKernel", KEYS))
  ints = (("kMasked", MASKED), ("kNoId", NO_ID), ("kMaxId", MAX_ID))
  lines = [
      "// Generated from etc_realformer/kernels/format.py (`cc_header`);",
      "// do not edit by hand. The score codes and the kernels' names.",
      "#ifndef ETC_REALFORMER_KERNELS_CC_FORMAT_H_",
      "#define ETC_REALFORMER_KERNELS_CC_FORMAT_H_",
      "",
      "#include <cstdint>",
      "",
      "namespace etc_kernels {",
      "",
  ]
  lines += [f"constexpr int8_t {name} = {value};" for name, value in ints]
  lines.append(f"constexpr int64_t kBandRowBytes = {BAND_ROW_BYTES};")
  lines += [f'constexpr char {name}[] = "{value}";'
            for name, value in strings]
  lines += [
      "",
      "}  // namespace etc_kernels",
      "",
      "#endif  // ETC_REALFORMER_KERNELS_CC_FORMAT_H_",
      "",
  ]
  return "\n".join(lines)

