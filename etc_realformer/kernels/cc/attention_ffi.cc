// XLA FFI handlers of the fused global-local attention kernels.
//
// Two typed-FFI custom calls per query side of the attention core:
// "etc_side_forward" (`reference.side_forward`) and its gradient
// "etc_side_backward" (`reference.side_backward`), each with two
// implementations:
//   Host  plain C++ loops of the same math, so TensorFlow on the CPU runs
//         the whole custom-call path under jit_compile (the tests), and
//   CUDA  launches of the Triton kernels' ahead-of-time compiled cubins on
//         the handler's stream (`tools/build_kernels.py` writes the cubins
//         and this library's build): `side_forward`; the backward's
//         `side_backward_queries`, then `side_backward_keys` per pattern.
// The CUDA driver API is opened with dlopen at first use, so the library
// builds on a machine without CUDA and loads on one without a GPU.
//
// Registration: `EtcRegisterFfiHandlers(api)` registers every handler into
// the XLA runtime behind `api` (TensorFlow's: `XLA_FFI_GetApi` of
// libtensorflow_framework.so.2); jaxlib registers the exported handler
// symbols itself (`jax.ffi.register_ffi_target`).
//
// Layouts: `etc_realformer/kernels/triton_attention.py`.

#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

// ------------------------------------------------------------ element types
float Bf16ToFloat(uint16_t bits) {
  uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t FloatToBf16(float f) {  // round to nearest even, as XLA's convert
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

float HalfToFloat(uint16_t bits) {
  _Float16 h;
  std::memcpy(&h, &bits, 2);
  return static_cast<float>(h);
}

uint16_t FloatToHalf(float f) {
  _Float16 h = static_cast<_Float16>(f);
  uint16_t bits;
  std::memcpy(&bits, &h, 2);
  return bits;
}

// The inputs of a buffer as float32, and the rounding of float32 to its
// element type (float32: none).
struct Element {
  ffi::DataType type;

  bool Supported() const {
    return type == ffi::DataType::F32 || type == ffi::DataType::BF16 ||
           type == ffi::DataType::F16;
  }
  std::vector<float> Read(const ffi::AnyBuffer& buffer) const {
    size_t n = buffer.element_count();
    std::vector<float> out(n);
    const void* data = buffer.untyped_data();
    if (type == ffi::DataType::F32) {
      std::memcpy(out.data(), data, n * 4);
    } else {
      const uint16_t* bits = static_cast<const uint16_t*>(data);
      for (size_t i = 0; i < n; ++i) {
        out[i] = type == ffi::DataType::BF16 ? Bf16ToFloat(bits[i])
                                             : HalfToFloat(bits[i]);
      }
    }
    return out;
  }
  float Round(float x) const {
    if (type == ffi::DataType::BF16) return Bf16ToFloat(FloatToBf16(x));
    if (type == ffi::DataType::F16) return HalfToFloat(FloatToHalf(x));
    return x;
  }
  void Write(const std::vector<float>& values, void* data) const {
    if (type == ffi::DataType::F32) {
      std::memcpy(data, values.data(), values.size() * 4);
      return;
    }
    uint16_t* bits = static_cast<uint16_t*>(data);
    for (size_t i = 0; i < values.size(); ++i) {
      bits[i] = type == ffi::DataType::BF16 ? FloatToBf16(values[i])
                                            : FloatToHalf(values[i]);
    }
  }
};

// ------------------------------------------------------------- side: shapes
constexpr char kForward[] = "etc_side_forward";
constexpr char kBackward[] = "etc_side_backward";
// The code of a masked score without a relative term (`reference.NO_ID`);
// the others hold the relative id in their low 7 bits, the sign bit set
// where the score is masked.
constexpr int8_t kNoId = -1;

// The call's attributes (see the bindings).
struct SideOptions {
  bool band, has_ids, read[2], emit[2], by_rows;
  int64_t block_len, keep_threshold;
  float scale[2], gain;
  // > 0: recomputed streams; a read pattern's previous sum is made from
  // this many earlier layers' queries and keys (src_q, src_k1, src_k2),
  // and prev1/prev2 are placeholders.
  int64_t sources;

  bool dropout() const { return keep_threshold > 0; }
  // Whether pattern p's previous sum is read from prev_p.
  bool reads_prev(int p) const { return read[p] && sources == 0; }
};

struct SideShape {
  int64_t batch, heads, rows, size_per_head;
  int64_t key_rows[2];  // rows of k1 (band: N + 2b) and of k2
  int64_t width[2];     // score columns per query: 3b or K1, and K2
  int64_t num_ids, codes1_stride;
  // The running sums' element type (float32 where none is read or written).
  ffi::DataType stream_type;
};

template <typename Dims>
std::string Format(const Dims& dims) {
  std::string out = "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i > 0) out += ", ";
    out += dims[i] < 0 ? std::string("?") : std::to_string(dims[i]);
  }
  return out + "]";
}

template <typename Dims>
bool SameDims(const Dims& dims, const std::vector<int64_t>& want) {
  if (dims.size() != want.size()) return false;
  for (size_t i = 0; i < want.size(); ++i) {
    if (dims[i] != want[i]) return false;
  }
  return true;
}

template <typename Dims>
std::vector<int64_t> DimsOf(const Dims& dims) {
  return std::vector<int64_t>(dims.begin(), dims.end());
}

// A buffer's dimension, or -1 where it has no such axis (a rank mismatch
// is then reported by the shape it fails).
template <typename Buffer>
int64_t Dim(const Buffer& buffer, size_t axis) {
  auto dims = buffer.dimensions();
  return axis < dims.size() ? dims[axis] : -1;
}

ffi::Error Invalid(const char* call, const std::string& message) {
  return ffi::Error::InvalidArgument(std::string(call) + ": " + message);
}

// The first of a call's buffers whose shape is not the one its layout
// needs.
class ShapeCheck {
 public:
  explicit ShapeCheck(bool band) : layout_(band ? "band" : "dense") {}

  template <typename Buffer>
  void Expect(const char* name, const Buffer& buffer,
              const std::vector<int64_t>& want) {
    if (problem_.empty() && !SameDims(buffer.dimensions(), want)) {
      problem_ = std::string(name) + " has shape " +
                 Format(buffer.dimensions()) + "; the " + layout_ +
                 " layout needs " + Format(want);
    }
  }
  const std::string& problem() const { return problem_; }

 private:
  const char* layout_;
  std::string problem_;
};

// Every operand's shape and type against q's and the attributes, before
// any kernel reads one: the CUDA kernels index raw pointers, so a
// mismatch must never reach them. `backward`: the gradient's call, whose
// ctx and lse are operands and whose new1/new2 are the emitted sums'
// incoming gradients (dnew1, dnew2).
ffi::Error CheckSide(bool backward, const ffi::AnyBuffer& q,
                     const ffi::AnyBuffer& k1, const ffi::AnyBuffer& v1,
                     const ffi::AnyBuffer& k2, const ffi::AnyBuffer& v2,
                     const ffi::Buffer<ffi::F32>& per_id,
                     const ffi::Buffer<ffi::S8>& codes1,
                     const ffi::Buffer<ffi::S8>& codes2,
                     const ffi::Buffer<ffi::F32>& valid,
                     const ffi::AnyBuffer& prev1, const ffi::AnyBuffer& prev2,
                     const ffi::AnyBuffer& src_q, const ffi::AnyBuffer& src_k1,
                     const ffi::AnyBuffer& src_k2,
                     const ffi::AnyBuffer& seeds, const ffi::AnyBuffer& ctx,
                     const ffi::Buffer<ffi::F32>& lse,
                     const ffi::AnyBuffer& new1, const ffi::AnyBuffer& new2,
                     const SideOptions& o, SideShape* shape) {
  const char* call = backward ? kBackward : kForward;
  auto qd = q.dimensions();
  if (qd.size() != 4) {
    return Invalid(call, "q has shape " + Format(qd) + ", not [B, H, N, D]");
  }
  const int64_t bsz = qd[0], h = qd[1], n = qd[2], d = qd[3];
  const int64_t b = o.block_len;
  if (o.band ? b <= 0 || n % b != 0 : b != 1) {
    return Invalid(call, "block_len " + std::to_string(b) + " with " +
                   std::to_string(n) + " queries: the band needs a length "
                   "that divides N, the dense layout 1");
  }
  if (o.keep_threshold < 0 || o.keep_threshold > 65536) {
    return Invalid(call, "keep_threshold " +
                   std::to_string(o.keep_threshold) +
                   " is not in [0, 65536]");
  }
  const int64_t k1_rows = o.band ? n + 2 * b : Dim(k1, 2);
  const int64_t k2_rows = Dim(k2, 2);
  const int64_t width1 = o.band ? 3 * b : k1_rows;
  const int64_t stride1 = o.band ? Dim(codes1, 2) : k1_rows;
  const int64_t num_ids = Dim(per_id, 2);
  *shape = {bsz, h, n, d, {k1_rows, k2_rows}, {width1, k2_rows}, num_ids,
            stride1, ffi::DataType::F32};

  ShapeCheck check(o.band);
  check.Expect("k1", k1, {bsz, h, k1_rows, d});
  check.Expect("v1", v1, {bsz, h, k1_rows, d});
  check.Expect("k2", k2, {bsz, h, k2_rows, d});
  check.Expect("v2", v2, {bsz, h, k2_rows, d});
  check.Expect("per_id", per_id, {bsz, n, num_ids, h});
  check.Expect("codes1", codes1, {bsz, n, stride1});
  check.Expect("codes2", codes2, {bsz, n, k2_rows});
  check.Expect("valid", valid, {bsz, n});
  check.Expect("ctx", ctx, {bsz, h, n, d});
  check.Expect("lse", lse, {bsz, h, n});
  const ffi::AnyBuffer* prev[2] = {&prev1, &prev2};
  const ffi::AnyBuffer* next[2] = {&new1, &new2};
  const char* prev_names[2] = {"prev1", "prev2"};
  const char* new_names[2] = {backward ? "dnew1" : "new1",
                              backward ? "dnew2" : "new2"};
  for (int p = 0; p < 2; ++p) {
    const std::vector<int64_t> stream = {bsz, h, n, shape->width[p]};
    if (o.reads_prev(p)) check.Expect(prev_names[p], *prev[p], stream);
    if (o.emit[p]) check.Expect(new_names[p], *next[p], stream);
  }
  const ffi::AnyBuffer* src_k[2] = {&src_k1, &src_k2};
  if (o.sources > 0) {
    const int64_t joined = o.sources * d;  // the layers side by side
    check.Expect("src_q", src_q, {bsz, h, n, joined});
    const char* src_names[2] = {"src_k1", "src_k2"};
    const int64_t key_rows[2] = {k1_rows, k2_rows};
    for (int p = 0; p < 2; ++p) {
      if (o.read[p]) {
        check.Expect(src_names[p], *src_k[p], {bsz, h, key_rows[p], joined});
      }
    }
  }
  if (o.dropout()) check.Expect("seeds", seeds, {4});
  if (!check.problem().empty()) return Invalid(call, check.problem());
  if (o.band && (stride1 < 3 * b || stride1 % 16 != 0)) {
    return Invalid(call, "codes1's rows hold " + std::to_string(stride1) +
                   " codes: the band needs 3b = " + std::to_string(3 * b) +
                   " or more, a multiple of 16 (the kernel's vector loads)");
  }
  if (o.has_ids && num_ids < 1) {
    return Invalid(call, "has_ids with an empty per_id table");
  }
  if (shape->width[0] + shape->width[1] == 0) {
    return Invalid(call, "a side without keys");
  }

  if (o.sources < 0 || (o.sources > 0 && (o.emit[0] || o.emit[1]))) {
    return Invalid(call, "sources " + std::to_string(o.sources) + ": a "
                   "count of earlier layers, with no sum emitted");
  }
  const auto t = q.element_type();
  if (!Element{t}.Supported() || k1.element_type() != t ||
      v1.element_type() != t || k2.element_type() != t ||
      v2.element_type() != t || ctx.element_type() != t ||
      (o.sources > 0 &&
       (src_q.element_type() != t ||
        (o.read[0] && src_k1.element_type() != t) ||
        (o.read[1] && src_k2.element_type() != t)))) {
    return Invalid(call, "q, keys, values, the sources and the context "
                   "must share one of float32, bfloat16, float16");
  }
  if (o.dropout() && seeds.element_type() != ffi::DataType::S32) {
    return Invalid(call, "the dropout seeds must be int32");
  }
  // One element type for every stream read or written: a cubin has one.
  bool any_stream = false;
  for (int p = 0; p < 2; ++p) {
    for (const ffi::AnyBuffer* s : {o.reads_prev(p) ? prev[p] : nullptr,
                                    o.emit[p] ? next[p] : nullptr}) {
      if (s == nullptr) continue;
      const ffi::DataType st = s->element_type();
      if ((st != ffi::DataType::F32 && st != t) ||
          (any_stream && st != shape->stream_type)) {
        return Invalid(call, "the running sums read and written must all "
                       "be float32 or all the inputs' type");
      }
      any_stream = true;
      shape->stream_type = st;
    }
  }

  // The kernels index in int32.
  std::vector<const ffi::AnyBuffer*> big = {&q, &k1, &k2, &ctx};
  if (o.sources > 0) big.push_back(&src_q);
  for (int p = 0; p < 2; ++p) {
    if (o.reads_prev(p)) big.push_back(prev[p]);
    if (o.sources > 0 && o.read[p]) big.push_back(src_k[p]);
    if (o.emit[p]) big.push_back(next[p]);
  }
  bool too_big = per_id.element_count() >= (size_t{1} << 31) ||
                 codes1.element_count() >= (size_t{1} << 31) ||
                 codes2.element_count() >= (size_t{1} << 31);
  for (const ffi::AnyBuffer* x : big) {
    too_big |= x->element_count() >= (size_t{1} << 31);
  }
  if (too_big) return Invalid(call, "an operand of 2^31 elements or more");
  return ffi::Error::Success();
}

// The backward call's operands past the forward's and its results: each
// gradient has its input's shape and type (dper_id: per_id's, also the
// [B, N, 1, H] placeholder without ids; dprev_p only where prev_p is read).
ffi::Error CheckSideBackward(
    const ffi::AnyBuffer& q, const ffi::AnyBuffer& k1,
    const ffi::AnyBuffer& v1, const ffi::AnyBuffer& k2,
    const ffi::AnyBuffer& v2, const ffi::Buffer<ffi::F32>& per_id,
    const ffi::Buffer<ffi::S8>& codes1, const ffi::Buffer<ffi::S8>& codes2,
    const ffi::Buffer<ffi::F32>& valid, const ffi::AnyBuffer& prev1,
    const ffi::AnyBuffer& prev2, const ffi::AnyBuffer& src_q,
    const ffi::AnyBuffer& src_k1, const ffi::AnyBuffer& src_k2,
    const ffi::AnyBuffer& seeds,
    const ffi::AnyBuffer& ctx, const ffi::Buffer<ffi::F32>& lse,
    const ffi::AnyBuffer& dctx, const ffi::AnyBuffer& dnew1,
    const ffi::AnyBuffer& dnew2, const ffi::AnyBuffer& dq,
    const ffi::AnyBuffer& dk1, const ffi::AnyBuffer& dv1,
    const ffi::AnyBuffer& dk2, const ffi::AnyBuffer& dv2,
    const ffi::Buffer<ffi::F32>& dper_id, const ffi::AnyBuffer& dprev1,
    const ffi::AnyBuffer& dprev2, const ffi::Buffer<ffi::F32>& delta,
    const SideOptions& o, SideShape* s) {
  if (auto e = CheckSide(true, q, k1, v1, k2, v2, per_id, codes1, codes2,
                         valid, prev1, prev2, src_q, src_k1, src_k2, seeds,
                         ctx, lse, dnew1, dnew2, o, s);
      !e.success()) {
    return e;
  }
  ShapeCheck check(o.band);
  check.Expect("dctx", dctx, DimsOf(q.dimensions()));
  check.Expect("dq", dq, DimsOf(q.dimensions()));
  check.Expect("dk1", dk1, DimsOf(k1.dimensions()));
  check.Expect("dv1", dv1, DimsOf(v1.dimensions()));
  check.Expect("dk2", dk2, DimsOf(k2.dimensions()));
  check.Expect("dv2", dv2, DimsOf(v2.dimensions()));
  check.Expect("dper_id", dper_id, DimsOf(per_id.dimensions()));
  // dprev_p: the read sum's gradient (with sources, of the sum they make).
  if (o.read[0]) {
    check.Expect("dprev1", dprev1, {s->batch, s->heads, s->rows, s->width[0]});
  }
  if (o.read[1]) {
    check.Expect("dprev2", dprev2, {s->batch, s->heads, s->rows, s->width[1]});
  }
  check.Expect("delta", delta, {s->batch, s->heads, s->rows});
  if (!check.problem().empty()) return Invalid(kBackward, check.problem());
  const auto t = q.element_type();
  for (const ffi::AnyBuffer* x : {&dctx, &dq, &dk1, &dv1, &dk2, &dv2}) {
    if (x->element_type() != t) {
      return Invalid(kBackward, "the context's gradient and the gradients "
                     "of q, the keys and the values must be in the inputs' "
                     "type");
    }
  }
  // With sources the sums are made in float32, and so is their gradient.
  const ffi::DataType sum_type[2] = {
      o.sources > 0 ? ffi::DataType::F32 : prev1.element_type(),
      o.sources > 0 ? ffi::DataType::F32 : prev2.element_type()};
  if ((o.read[0] && dprev1.element_type() != sum_type[0]) ||
      (o.read[1] && dprev2.element_type() != sum_type[1])) {
    return Invalid(kBackward, "a previous sum's gradient must be in the "
                   "sum's type (float32 with sources)");
  }
  return ffi::Error::Success();
}

// ------------------------------------------------------------ hash dropout
// `dropout._mix32` (C. Wellons' lowbias32).
uint32_t Mix32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x21F0AAADu;
  x ^= x >> 15;
  x *= 0xD35A2D97u;
  x ^= x >> 15;
  return x;
}

// ---------------------------------------------------------- side: on host
// A side's operands read as float32, and what both passes compute per
// query row: the scores and logits, and the dropout's keep decisions.
class HostSide {
 public:
  HostSide(const ffi::AnyBuffer& q, const ffi::AnyBuffer& k1,
           const ffi::AnyBuffer& v1, const ffi::AnyBuffer& k2,
           const ffi::AnyBuffer& v2, const ffi::Buffer<ffi::F32>& per_id,
           const ffi::Buffer<ffi::S8>& codes1,
           const ffi::Buffer<ffi::S8>& codes2,
           const ffi::Buffer<ffi::F32>& valid, const ffi::AnyBuffer& prev1,
           const ffi::AnyBuffer& prev2, const ffi::AnyBuffer& src_q,
           const ffi::AnyBuffer& src_k1, const ffi::AnyBuffer& src_k2,
           const ffi::AnyBuffer& seeds, const SideOptions& o,
           const SideShape& s)
      : o_(o), s_(s), el_{q.element_type()}, q_(el_.Read(q)),
        keys_{el_.Read(k1), el_.Read(k2)},
        values_{el_.Read(v1), el_.Read(v2)},
        per_id_(per_id.typed_data()),
        codes_{codes1.typed_data(), codes2.typed_data()},
        code_stride_{s.codes1_stride, s.width[1]},
        valid_(valid.typed_data()) {
    const ffi::AnyBuffer* prev[2] = {&prev1, &prev2};
    const ffi::AnyBuffer* src_k[2] = {&src_k1, &src_k2};
    for (int p = 0; p < 2; ++p) {
      if (o.reads_prev(p)) prev_[p] = Element{prev[p]->element_type()}.Read(
          *prev[p]);
      if (o.sources > 0 && o.read[p]) src_k_[p] = el_.Read(*src_k[p]);
    }
    if (o.sources > 0) src_q_ = el_.Read(src_q);
    if (o.dropout()) std::memcpy(key_, seeds.untyped_data(), sizeof(key_));
  }

  const Element& element() const { return el_; }
  const float* Query(int64_t head_row) const {
    return &q_[head_row * s_.size_per_head];
  }
  // Pattern p's key (and value) row of query i's column c, in [B, H, K].
  int64_t KeyRow(int p, int64_t bh, int64_t i, int64_t c) const {
    const int64_t first = o_.band ? (i / o_.block_len) * o_.block_len : 0;
    return bh * s_.key_rows[p] + (p == 0 ? first + c : c);
  }
  // The start of that row in the keys and values.
  int64_t KeyOffset(int p, int64_t bh, int64_t i, int64_t c) const {
    return KeyRow(p, bh, i, c) * s_.size_per_head;
  }
  const float* Key(int p, int64_t offset) const { return &keys_[p][offset]; }
  const float* Value(int p, int64_t offset) const {
    return &values_[p][offset];
  }
  int8_t Code(int p, int64_t row, int64_t c) const {
    return codes_[p][row * code_stride_[p] + c];
  }
  float Valid(int64_t row) const { return valid_[row]; }

  // Query i of (batch bi, head h): each column's score (q.k + the relative
  // term + the previous sum read: the new running sum) and logit, the
  // second pattern's columns after the first's. An error where a relative
  // id lies outside the table.
  ffi::Error Scores(const char* call, int64_t bi, int64_t h, int64_t i,
                    float* scores, float* logits) const {
    const int64_t bh = bi * s_.heads + h;
    const int64_t row = bi * s_.rows + i;  // per-row tensors [B, N, ...]
    const int64_t head_row = bh * s_.rows + i;  // [B, H, N, ...]
    const int64_t d = s_.size_per_head;
    const float* qi = Query(head_row);
    for (int p = 0; p < 2; ++p) {
      for (int64_t c = 0; c < s_.width[p]; ++c) {
        const float* k = Key(p, KeyOffset(p, bh, i, c));
        float score = 0.0f;
        for (int64_t x = 0; x < d; ++x) score += qi[x] * k[x];
        const int8_t code = Code(p, row, c);
        if (o_.has_ids && code != kNoId) {
          const int64_t id = code & 0x7F;
          if (id >= s_.num_ids) {
            return Invalid(call, "relative id " + std::to_string(id) +
                           " of a table of " + std::to_string(s_.num_ids));
          }
          score += per_id_[(row * s_.num_ids + id) * s_.heads + h];
        }
        if (o_.reads_prev(p)) {
          score += prev_[p][head_row * s_.width[p] + c];
        } else if (o_.read[p]) {  // the sources' sum, layer after layer
          const int64_t joined = o_.sources * d;
          const float* sq = &src_q_[head_row * joined];
          const float* sk = &src_k_[p][KeyRow(p, bh, i, c) * joined];
          for (int64_t j = 0; j < o_.sources; ++j) {
            float part = 0.0f;
            for (int64_t x = j * d; x < (j + 1) * d; ++x) {
              part += sq[x] * sk[x];
            }
            score += part;
          }
        }
        // RealFormer's running mean; 1 on a pattern without a stream.
        float logit = score * o_.scale[p];
        if (code < 0) logit -= 10000.0f;
        scores[p * s_.width[0] + c] = score;
        logits[p * s_.width[0] + c] = logit;
      }
    }
    return ffi::Error::Success();
  }

  // The dropout index's row part (`reference.dropout_index`), in uint32 as
  // the kernels wrap it.
  uint32_t IndexRow(int64_t bi, int64_t h, int64_t i) const {
    const int64_t row_block = o_.band ? o_.block_len : 1;
    return o_.by_rows
        ? static_cast<uint32_t>(
              (((i / row_block) * s_.batch + bi) * s_.heads + h) *
                  row_block + i % row_block)
        : static_cast<uint32_t>((bi * s_.heads + h) * s_.rows + i);
  }
  // Whether the dropout keeps pattern p's probability at row i, column c
  // (`reference.dropout_pairs`): two columns share a hash, the even one
  // deciding by its high 16 bits; the band's pair by key (row block k's
  // column c is key k * b + c).
  bool Keep(int p, uint32_t index_row, int64_t i, int64_t c) const {
    const int64_t u =
        c + ((o_.band && p == 0) ? (i / o_.block_len) * o_.block_len % 2 : 0);
    const uint32_t pairs = static_cast<uint32_t>(s_.width[p] / 2 + 1);
    const uint32_t index = index_row * pairs +
                           static_cast<uint32_t>(u / 2) + key_[2 * p];
    const uint32_t bits = Mix32(Mix32(index) ^ key_[2 * p + 1]);
    const uint32_t half = (u % 2) ? (bits & 0xFFFFu) : (bits >> 16);
    return half >= static_cast<uint32_t>(o_.keep_threshold);
  }

 private:
  const SideOptions& o_;
  const SideShape& s_;
  const Element el_;
  const std::vector<float> q_, keys_[2], values_[2];
  std::vector<float> prev_[2], src_q_, src_k_[2];
  const float* per_id_;
  const int8_t* codes_[2];
  const int64_t code_stride_[2];
  const float* valid_;
  uint32_t key_[4] = {0, 0, 0, 0};  // the folded seeds, as uint32
};

// Two passes per query row (scores, then the context), float32 throughout;
// the probabilities are rounded to the inputs' type before the context
// product, as the kernels and the XLA path do.
ffi::Error SideForwardHost(
    ffi::AnyBuffer q, ffi::AnyBuffer k1, ffi::AnyBuffer v1, ffi::AnyBuffer k2,
    ffi::AnyBuffer v2, ffi::Buffer<ffi::F32> per_id,
    ffi::Buffer<ffi::S8> codes1, ffi::Buffer<ffi::S8> codes2,
    ffi::Buffer<ffi::F32> valid, ffi::AnyBuffer prev1, ffi::AnyBuffer prev2,
    ffi::AnyBuffer src_q, ffi::AnyBuffer src_k1, ffi::AnyBuffer src_k2,
    ffi::AnyBuffer seeds, bool band, int64_t block_len, bool has_ids,
    bool read_prev1, bool read_prev2, bool emit1, bool emit2, float scale1,
    float scale2, int64_t keep_threshold, float gain, bool by_rows,
    int64_t sources, ffi::Result<ffi::AnyBuffer> ctx,
    ffi::Result<ffi::Buffer<ffi::F32>> lse,
    ffi::Result<ffi::AnyBuffer> new1, ffi::Result<ffi::AnyBuffer> new2) {
  const SideOptions o{band,       has_ids,        {read_prev1, read_prev2},
                      {emit1, emit2}, by_rows,    block_len,
                      keep_threshold, {scale1, scale2}, gain, sources};
  SideShape s;
  if (auto e = CheckSide(false, q, k1, v1, k2, v2, per_id, codes1, codes2,
                         valid, prev1, prev2, src_q, src_k1, src_k2, seeds,
                         *ctx, *lse, *new1, *new2, o, &s);
      !e.success()) {
    return e;
  }
  const HostSide side(q, k1, v1, k2, v2, per_id, codes1, codes2, valid,
                      prev1, prev2, src_q, src_k1, src_k2, seeds, o, s);
  const Element& el = side.element();
  ffi::AnyBuffer* new_out[2] = {&*new1, &*new2};
  std::vector<float> next[2];
  for (int p = 0; p < 2; ++p) {
    if (o.emit[p]) next[p].assign(s.batch * s.heads * s.rows * s.width[p], 0);
  }
  const int64_t d = s.size_per_head, c1 = s.width[0];
  std::vector<float> out(s.batch * s.heads * s.rows * d, 0.0f);
  std::vector<float> scores(s.width[0] + s.width[1]);
  std::vector<float> logits(scores.size());
  float* lse_out = lse->typed_data();
  for (int64_t bi = 0; bi < s.batch; ++bi) {
    for (int64_t h = 0; h < s.heads; ++h) {
      const int64_t bh = bi * s.heads + h;
      for (int64_t i = 0; i < s.rows; ++i) {
        const int64_t row = bi * s.rows + i;
        const int64_t head_row = bh * s.rows + i;
        if (auto e = side.Scores(kForward, bi, h, i, scores.data(),
                                 logits.data());
            !e.success()) {
          return e;
        }
        for (int p = 0; p < 2; ++p) {
          if (!o.emit[p]) continue;
          std::copy_n(&scores[p * c1], s.width[p],
                      &next[p][head_row * s.width[p]]);
        }
        float peak = -INFINITY;
        for (float l : logits) peak = std::max(peak, l);
        float total = 0.0f;
        for (float& l : logits) {
          l = std::exp(l - peak);
          total += l;
        }
        lse_out[head_row] = peak + std::log(total);
        float scale = side.Valid(row) / total;
        if (o.dropout()) scale *= gain;
        const uint32_t index_row = side.IndexRow(bi, h, i);
        float* o_row = &out[head_row * d];
        for (int p = 0; p < 2; ++p) {
          for (int64_t c = 0; c < s.width[p]; ++c) {
            float prob = logits[p * c1 + c] * scale;
            if (o.dropout() && !side.Keep(p, index_row, i, c)) prob = 0.0f;
            prob = el.Round(prob);
            const float* v = side.Value(p, side.KeyOffset(p, bh, i, c));
            for (int64_t x = 0; x < d; ++x) o_row[x] += prob * v[x];
          }
        }
      }
    }
  }
  el.Write(out, ctx->untyped_data());
  for (int p = 0; p < 2; ++p) {
    if (o.emit[p]) {
      Element{new_out[p]->element_type()}.Write(next[p],
                                                new_out[p]->untyped_data());
    }
  }
  return ffi::Error::Success();
}

// The gradient, one pass per query row as `reference.side_backward`
// defines it, float32 throughout: the probabilities recomputed from lse,
// delta = dctx . ctx (the context as the forward wrote it, as the kernels
// read it), and each score's gradient ds into dq, dk, the per-id sums and
// the previous sum's gradient; ds and the dropped probabilities are
// rounded to the inputs' type before the products with the inputs, as the
// kernels' products round them.
ffi::Error SideBackwardHost(
    ffi::AnyBuffer q, ffi::AnyBuffer k1, ffi::AnyBuffer v1, ffi::AnyBuffer k2,
    ffi::AnyBuffer v2, ffi::Buffer<ffi::F32> per_id,
    ffi::Buffer<ffi::S8> codes1, ffi::Buffer<ffi::S8> codes2,
    ffi::Buffer<ffi::F32> valid, ffi::AnyBuffer prev1, ffi::AnyBuffer prev2,
    ffi::AnyBuffer src_q, ffi::AnyBuffer src_k1, ffi::AnyBuffer src_k2,
    ffi::AnyBuffer seeds, ffi::AnyBuffer ctx, ffi::Buffer<ffi::F32> lse,
    ffi::AnyBuffer dctx, ffi::AnyBuffer dnew1, ffi::AnyBuffer dnew2,
    bool band, int64_t block_len, bool has_ids, bool read_prev1,
    bool read_prev2, bool emit1, bool emit2, float scale1, float scale2,
    int64_t keep_threshold, float gain, bool by_rows, int64_t sources,
    ffi::Result<ffi::AnyBuffer> dq, ffi::Result<ffi::AnyBuffer> dk1,
    ffi::Result<ffi::AnyBuffer> dv1, ffi::Result<ffi::AnyBuffer> dk2,
    ffi::Result<ffi::AnyBuffer> dv2,
    ffi::Result<ffi::Buffer<ffi::F32>> dper_id,
    ffi::Result<ffi::AnyBuffer> dprev1, ffi::Result<ffi::AnyBuffer> dprev2,
    ffi::Result<ffi::Buffer<ffi::F32>> delta) {
  const SideOptions o{band,       has_ids,        {read_prev1, read_prev2},
                      {emit1, emit2}, by_rows,    block_len,
                      keep_threshold, {scale1, scale2}, gain, sources};
  SideShape s;
  if (auto e = CheckSideBackward(q, k1, v1, k2, v2, per_id, codes1, codes2,
                                 valid, prev1, prev2, src_q, src_k1, src_k2,
                                 seeds, ctx, lse, dctx, dnew1, dnew2, *dq,
                                 *dk1, *dv1, *dk2, *dv2, *dper_id, *dprev1,
                                 *dprev2, *delta, o, &s);
      !e.success()) {
    return e;
  }
  const HostSide side(q, k1, v1, k2, v2, per_id, codes1, codes2, valid,
                      prev1, prev2, src_q, src_k1, src_k2, seeds, o, s);
  const Element& el = side.element();
  const std::vector<float> out = el.Read(ctx), dout = el.Read(dctx);
  const ffi::AnyBuffer* dnew_in[2] = {&dnew1, &dnew2};
  ffi::AnyBuffer* dprev_out[2] = {&*dprev1, &*dprev2};
  std::vector<float> dnew[2], dprev[2];
  for (int p = 0; p < 2; ++p) {
    if (o.emit[p]) dnew[p] = Element{dnew_in[p]->element_type()}.Read(
        *dnew_in[p]);
    if (o.read[p]) dprev[p].assign(s.batch * s.heads * s.rows * s.width[p],
                                   0.0f);
  }
  const int64_t d = s.size_per_head, c1 = s.width[0];
  std::vector<float> dq_sum(out.size(), 0.0f);
  std::vector<float> dk_sum[2], dv_sum[2];
  for (int p = 0; p < 2; ++p) {
    dk_sum[p].assign(s.batch * s.heads * s.key_rows[p] * d, 0.0f);
    dv_sum[p].assign(dk_sum[p].size(), 0.0f);
  }
  // Without ids, the [B, N, 1, H] placeholder's gradient: zeros.
  float* dper = dper_id->typed_data();
  std::fill_n(dper, dper_id->element_count(), 0.0f);
  std::vector<float> scores(s.width[0] + s.width[1]);
  std::vector<float> logits(scores.size());
  const float* lse_in = lse.typed_data();
  float* delta_out = delta->typed_data();
  for (int64_t bi = 0; bi < s.batch; ++bi) {
    for (int64_t h = 0; h < s.heads; ++h) {
      const int64_t bh = bi * s.heads + h;
      for (int64_t i = 0; i < s.rows; ++i) {
        const int64_t row = bi * s.rows + i;
        const int64_t head_row = bh * s.rows + i;
        if (auto e = side.Scores(kBackward, bi, h, i, scores.data(),
                                 logits.data());
            !e.success()) {
          return e;
        }
        const float* qi = side.Query(head_row);
        const float* do_i = &dout[head_row * d];
        const float* ctx_i = &out[head_row * d];
        float delta_i = 0.0f;
        for (int64_t x = 0; x < d; ++x) delta_i += do_i[x] * ctx_i[x];
        delta_out[head_row] = delta_i;
        const float lse_i = lse_in[head_row], valid_i = side.Valid(row);
        const uint32_t index_row = side.IndexRow(bi, h, i);
        float* dq_i = &dq_sum[head_row * d];
        for (int p = 0; p < 2; ++p) {
          for (int64_t c = 0; c < s.width[p]; ++c) {
            const int64_t offset = side.KeyOffset(p, bh, i, c);
            const float* k = side.Key(p, offset);
            const float* v = side.Value(p, offset);
            const float prob = std::exp(logits[p * c1 + c] - lse_i) * valid_i;
            float dp = 0.0f;
            for (int64_t x = 0; x < d; ++x) dp += do_i[x] * v[x];
            float dropped = prob;
            if (o.dropout()) {
              const bool keep = side.Keep(p, index_row, i, c);
              dp = keep ? dp * gain : 0.0f;
              dropped = keep ? prob * gain : 0.0f;
            }
            const int64_t cell = head_row * s.width[p] + c;
            float ds = prob * (dp - delta_i) * o.scale[p];
            if (o.emit[p]) ds += dnew[p][cell];
            if (o.read[p]) dprev[p][cell] = ds;
            const int8_t code = side.Code(p, row, c);
            if (o.has_ids && code != kNoId) {
              const int64_t id = code & 0x7F;
              dper[(row * s.num_ids + id) * s.heads + h] += ds;
            }
            const float ds_t = el.Round(ds), dropped_t = el.Round(dropped);
            float* dk = &dk_sum[p][offset];
            float* dv = &dv_sum[p][offset];
            for (int64_t x = 0; x < d; ++x) {
              dq_i[x] += ds_t * k[x];
              dk[x] += ds_t * qi[x];
              dv[x] += dropped_t * do_i[x];
            }
          }
        }
      }
    }
  }
  el.Write(dq_sum, dq->untyped_data());
  el.Write(dk_sum[0], dk1->untyped_data());
  el.Write(dv_sum[0], dv1->untyped_data());
  el.Write(dk_sum[1], dk2->untyped_data());
  el.Write(dv_sum[1], dv2->untyped_data());
  for (int p = 0; p < 2; ++p) {
    if (o.read[p]) {
      Element{dprev_out[p]->element_type()}.Write(
          dprev[p], dprev_out[p]->untyped_data());
    }
  }
  return ffi::Error::Success();
}

// ------------------------------------------------------- CUDA driver, opened
// The few driver entry points the launches need, declared here (no CUDA
// headers at build time) and resolved from libcuda.so.1 at first use.
using CUresult = int;
using CUdevice = int;
using CUcontext = void*;
using CUmodule = void*;
using CUfunction = void*;
using CUstream = void*;
using CUdeviceptr = unsigned long long;  // NOLINT: the driver API's type
constexpr int kMaxDynamicSharedBytes = 8;  // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES

struct CudaDriver {
  CUresult (*ModuleLoadData)(CUmodule*, const void*) = nullptr;
  CUresult (*ModuleGetFunction)(CUfunction*, CUmodule, const char*) = nullptr;
  CUresult (*FuncSetAttribute)(CUfunction, int, int) = nullptr;
  CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned,
                           unsigned, unsigned, unsigned, CUstream, void**,
                           void**) = nullptr;
  CUresult (*CtxGetCurrent)(CUcontext*) = nullptr;
  CUresult (*MemsetD32Async)(CUdeviceptr, unsigned, size_t, CUstream) =
      nullptr;
  CUresult (*GetErrorString)(CUresult, const char**) = nullptr;
  std::string error;

  static CudaDriver& Get() {
    static CudaDriver* driver = [] {
      auto* d = new CudaDriver();
      void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
      if (lib == nullptr) {
        d->error = std::string("dlopen libcuda.so.1: ") + dlerror();
        return d;
      }
      auto sym = [&](const char* name) { return dlsym(lib, name); };
      d->ModuleLoadData = reinterpret_cast<decltype(d->ModuleLoadData)>(
          sym("cuModuleLoadData"));
      d->ModuleGetFunction = reinterpret_cast<decltype(d->ModuleGetFunction)>(
          sym("cuModuleGetFunction"));
      d->FuncSetAttribute = reinterpret_cast<decltype(d->FuncSetAttribute)>(
          sym("cuFuncSetAttribute"));
      d->LaunchKernel = reinterpret_cast<decltype(d->LaunchKernel)>(
          sym("cuLaunchKernel"));
      d->CtxGetCurrent = reinterpret_cast<decltype(d->CtxGetCurrent)>(
          sym("cuCtxGetCurrent"));
      d->MemsetD32Async = reinterpret_cast<decltype(d->MemsetD32Async)>(
          sym("cuMemsetD32Async"));
      d->GetErrorString = reinterpret_cast<decltype(d->GetErrorString)>(
          sym("cuGetErrorString"));
      if (!d->ModuleLoadData || !d->ModuleGetFunction ||
          !d->FuncSetAttribute || !d->LaunchKernel || !d->CtxGetCurrent ||
          !d->MemsetD32Async) {
        d->error = "libcuda.so.1 lacks a driver entry point";
      }
      return d;
    }();
    return *driver;
  }

  std::string Describe(CUresult r) const {
    const char* text = nullptr;
    if (GetErrorString != nullptr) GetErrorString(r, &text);
    return "CUDA error " + std::to_string(r) + (text ? std::string(": ") + text
                                                     : std::string());
  }
};

// A compiled kernel: its cubin file and the metadata line that
// `tools/build_kernels.py` writes beside it ("<function> <shared bytes>
// <warps> <tile>"; the tile along the launch grid's first axis: query rows
// of `side_forward` and `side_backward_queries`, keys of
// `side_backward_keys`).
struct CubinKernel {
  CUfunction function = nullptr;
  int shared = 0, warps = 4, tile = 64;
};

std::string LibraryDir() {
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&LibraryDir), &info) == 0 ||
      info.dli_fname == nullptr) {
    return ".";
  }
  std::string path = info.dli_fname;
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

std::string CubinDir() {
  const char* env = std::getenv("ETC_KERNELS_CUBIN_DIR");
  return env != nullptr ? std::string(env) : LibraryDir() + "/cubins";
}

ffi::Error LoadKernel(const std::string& variant, CubinKernel* out) {
  static std::mutex mu;
  static std::map<std::pair<CUcontext, std::string>, CubinKernel> cache;
  CudaDriver& cu = CudaDriver::Get();
  if (!cu.error.empty()) return ffi::Error::Internal(cu.error);
  CUcontext context = nullptr;
  cu.CtxGetCurrent(&context);
  std::lock_guard<std::mutex> lock(mu);
  auto key = std::make_pair(context, variant);
  auto it = cache.find(key);
  if (it != cache.end()) {
    *out = it->second;
    return ffi::Error::Success();
  }
  const std::string base = CubinDir() + "/" + variant;
  FILE* meta = std::fopen((base + ".meta").c_str(), "r");
  if (meta == nullptr) {
    return ffi::Error(ffi::ErrorCode::kNotFound,
                      "no compiled kernel " + base + ".meta (build it with "
                      "python -m tools.build_kernels)");
  }
  char name[256] = {0};
  CubinKernel kernel;
  int read = std::fscanf(meta, "%255s %d %d %d", name, &kernel.shared,
                         &kernel.warps, &kernel.tile);
  std::fclose(meta);
  if (read != 4 || kernel.tile <= 0) {
    return ffi::Error::Internal("bad metadata " + base + ".meta");
  }
  FILE* f = std::fopen((base + ".cubin").c_str(), "rb");
  if (f == nullptr) return ffi::Error::Internal("cannot open " + base + ".cubin");
  std::vector<char> image;
  char chunk[65536];
  size_t n;
  while ((n = std::fread(chunk, 1, sizeof(chunk), f)) > 0) {
    image.insert(image.end(), chunk, chunk + n);
  }
  std::fclose(f);
  CUmodule module = nullptr;
  if (CUresult r = cu.ModuleLoadData(&module, image.data()); r != 0) {
    return ffi::Error::Internal("loading " + base + ".cubin: " + cu.Describe(r));
  }
  if (CUresult r = cu.ModuleGetFunction(&kernel.function, module, name);
      r != 0) {
    return ffi::Error::Internal(std::string("kernel ") + name + ": " +
                                cu.Describe(r));
  }
  if (kernel.shared > 48 * 1024) {
    cu.FuncSetAttribute(kernel.function, kMaxDynamicSharedBytes,
                        kernel.shared);
  }
  cache[key] = kernel;
  *out = kernel;
  return ffi::Error::Success();
}

const char* TypeName(ffi::DataType t) {
  switch (t) {
    case ffi::DataType::F32: return "float32";
    case ffi::DataType::BF16: return "bfloat16";
    case ffi::DataType::F16: return "float16";
    default: return "unsupported";
  }
}

// ---------------------------------------------------------- side: on CUDA
// The cubins' names; `tools/build_kernels.py` (`variant_name`) writes the
// same. The forward's and the backward's queries kernel:
//   <kernel>_<dtype>_d<D>_<r<R>|noids>_<band|dense>_<f32|low>_
//   <READ1><READ2><WRITE1><WRITE2>_<drop|nodrop>_<rows|whole>
// and the backward's keys kernel of pattern p (its two stream flags):
//   side_backward_keys_<dtype>_d<D>_<r<R>|noids>_<band|dense>_p<1|2>_
//   <f32|low>_<READ><WRITE>_<drop|nodrop>_<rows|whole>
// "low" only where a stream the kernel touches is in the inputs' type;
// "rows" whenever dropout is off (the index layout matters only then).
// An aligned cubin ends in "_a<digits>" (`AlignedDigits`).
//
// Which of a kernel's lengths are multiples of 16, one digit each ("" when
// none is): the forward's and the queries kernel's rows, first and second
// key rows and block length; the keys kernel's rows, its pattern's key
// rows and block length (`tools.kernel_names.aligned_digits`). A cubin
// built for them takes them as multiples of 16, which vectorizes the
// loads they stride.
std::string AlignedDigits(const SideShape& s, const SideOptions& o,
                          int pattern) {
  const std::vector<int64_t> lengths =
      pattern > 0
          ? std::vector<int64_t>{s.rows, s.key_rows[pattern - 1],
                                 o.block_len}
          : std::vector<int64_t>{s.rows, s.key_rows[0], s.key_rows[1],
                                 o.block_len};
  std::string digits;
  bool any = false;
  for (int64_t n : lengths) {
    digits += n % 16 == 0 ? '1' : '0';
    any |= n % 16 == 0;
  }
  return any ? digits : std::string();
}

std::string VariantName(ffi::DataType t, const SideShape& s,
                        const SideOptions& o,
                        const char* kernel = "side_forward",
                        int pattern = 0, bool aligned = false) {
  int64_t ids_padded = 1;  // num_ids rounded up to a power of two
  while (ids_padded < s.num_ids) ids_padded *= 2;
  // A read from the sources is "s" (recomputed streams).
  const char read_flag = o.sources > 0 ? 's' : '1';
  std::vector<char> used = {o.read[0] ? read_flag : '0',
                            o.read[1] ? read_flag : '0',
                            o.emit[0] ? '1' : '0', o.emit[1] ? '1' : '0'};
  if (pattern > 0) used = {used[pattern - 1], used[pattern + 1]};
  bool streams = false;
  std::string flags;
  for (char f : used) {
    flags += f;
    streams |= f != '0';
  }
  const bool low = streams && s.stream_type != ffi::DataType::F32;
  return std::string(kernel) + "_" + TypeName(t) + "_d" +
         std::to_string(s.size_per_head) +
         (o.has_ids ? "_r" + std::to_string(ids_padded)
                    : std::string("_noids")) +
         (o.band ? "_band" : "_dense") +
         (pattern > 0 ? "_p" + std::to_string(pattern) : std::string()) +
         (low ? "_low_" : "_f32_") + flags +
         (o.dropout() ? "_drop" : "_nodrop") +
         (!o.dropout() || o.by_rows ? "_rows" : "_whole") +
         (aligned && !AlignedDigits(s, o, pattern).empty()
              ? "_a" + AlignedDigits(s, o, pattern)
              : std::string());
}

// Loads the kernel of a call: its aligned cubin where the build has one,
// else the plain one (a build need not hold every shape's); `name` is the
// loaded one's.
ffi::Error LoadVariant(ffi::DataType t, const SideShape& s,
                       const SideOptions& o, const char* kernel,
                       int pattern, std::string* name, CubinKernel* out) {
  *name = VariantName(t, s, o, kernel, pattern, /*aligned=*/true);
  if (!AlignedDigits(s, o, pattern).empty()) {
    FILE* meta = std::fopen((CubinDir() + "/" + *name + ".meta").c_str(),
                            "r");
    if (meta == nullptr) {
      *name = VariantName(t, s, o, kernel, pattern);
    } else {
      std::fclose(meta);
    }
  }
  return LoadKernel(*name, out);
}

// Launches a Triton kernel over (cdiv(extent, tile), B * H) programs on
// `stream`, with Triton's launch convention: the non-constexpr arguments
// in order, then its global and profile scratch pointers (null: the
// kernels use none). An empty grid launches nothing.
ffi::Error Launch(const std::string& variant, const CubinKernel& kernel,
                  int64_t extent, const SideShape& s, CUstream stream,
                  std::vector<void*> ptrs, std::vector<int32_t> ints,
                  std::vector<float> floats) {
  if (extent == 0 || s.batch * s.heads == 0) return ffi::Error::Success();
  void* scratch[2] = {nullptr, nullptr};
  std::vector<void*> params;
  for (void*& p : ptrs) params.push_back(&p);
  for (int32_t& v : ints) params.push_back(&v);
  for (float& v : floats) params.push_back(&v);
  params.push_back(&scratch[0]);
  params.push_back(&scratch[1]);
  const unsigned grid_x =
      static_cast<unsigned>((extent + kernel.tile - 1) / kernel.tile);
  CudaDriver& cu = CudaDriver::Get();
  if (CUresult r = cu.LaunchKernel(
          kernel.function, grid_x, static_cast<unsigned>(s.batch * s.heads),
          1, 32 * kernel.warps, 1, 1, kernel.shared, stream, params.data(),
          nullptr);
      r != 0) {
    return ffi::Error::Internal("launching " + variant + ": " +
                                cu.Describe(r));
  }
  return ffi::Error::Success();
}

int32_t I32(int64_t x) { return static_cast<int32_t>(x); }

ffi::Error SideForwardCuda(
    CUstream stream, ffi::AnyBuffer q, ffi::AnyBuffer k1, ffi::AnyBuffer v1,
    ffi::AnyBuffer k2, ffi::AnyBuffer v2, ffi::Buffer<ffi::F32> per_id,
    ffi::Buffer<ffi::S8> codes1, ffi::Buffer<ffi::S8> codes2,
    ffi::Buffer<ffi::F32> valid, ffi::AnyBuffer prev1, ffi::AnyBuffer prev2,
    ffi::AnyBuffer src_q, ffi::AnyBuffer src_k1, ffi::AnyBuffer src_k2,
    ffi::AnyBuffer seeds, bool band, int64_t block_len, bool has_ids,
    bool read_prev1, bool read_prev2, bool emit1, bool emit2, float scale1,
    float scale2, int64_t keep_threshold, float gain, bool by_rows,
    int64_t sources, ffi::Result<ffi::AnyBuffer> ctx,
    ffi::Result<ffi::Buffer<ffi::F32>> lse,
    ffi::Result<ffi::AnyBuffer> new1, ffi::Result<ffi::AnyBuffer> new2) {
  const SideOptions o{band,       has_ids,        {read_prev1, read_prev2},
                      {emit1, emit2}, by_rows,    block_len,
                      keep_threshold, {scale1, scale2}, gain, sources};
  SideShape s;
  if (auto e = CheckSide(false, q, k1, v1, k2, v2, per_id, codes1, codes2,
                         valid, prev1, prev2, src_q, src_k1, src_k2, seeds,
                         *ctx, *lse, *new1, *new2, o, &s);
      !e.success()) {
    return e;
  }
  if (s.rows == 0 || s.batch * s.heads == 0) {
    return ffi::Error::Success();  // nothing to compute (an empty grid)
  }
  std::string variant;
  CubinKernel kernel;
  if (auto e = LoadVariant(q.element_type(), s, o, "side_forward", 0,
                           &variant, &kernel);
      !e.success()) {
    return e;
  }
  // The unread streams and seeds are placeholders the kernel never reads,
  // the unwritten results buffers it never writes.
  return Launch(
      variant, kernel, s.rows, s, stream,
      {q.untyped_data(), k1.untyped_data(), v1.untyped_data(),
       k2.untyped_data(), v2.untyped_data(), per_id.untyped_data(),
       codes1.untyped_data(), codes2.untyped_data(), valid.untyped_data(),
       prev1.untyped_data(), prev2.untyped_data(), src_q.untyped_data(),
       src_k1.untyped_data(), src_k2.untyped_data(), seeds.untyped_data(),
       ctx->untyped_data(), lse->untyped_data(), new1->untyped_data(),
       new2->untyped_data()},
      {I32(s.batch), I32(s.heads), I32(s.rows), I32(s.key_rows[0]),
       I32(s.key_rows[1]), I32(s.num_ids), I32(o.block_len),
       I32(s.codes1_stride), I32(o.sources), I32(o.keep_threshold)},
      {o.gain, o.scale[0], o.scale[1]});
}

// Three launches in order on the handler's stream: the queries kernel (dq,
// dper_id, dprev, and delta, which the keys kernels read), then the keys
// kernel of each pattern (its dk, dv).
ffi::Error SideBackwardCuda(
    CUstream stream, ffi::AnyBuffer q, ffi::AnyBuffer k1, ffi::AnyBuffer v1,
    ffi::AnyBuffer k2, ffi::AnyBuffer v2, ffi::Buffer<ffi::F32> per_id,
    ffi::Buffer<ffi::S8> codes1, ffi::Buffer<ffi::S8> codes2,
    ffi::Buffer<ffi::F32> valid, ffi::AnyBuffer prev1, ffi::AnyBuffer prev2,
    ffi::AnyBuffer src_q, ffi::AnyBuffer src_k1, ffi::AnyBuffer src_k2,
    ffi::AnyBuffer seeds, ffi::AnyBuffer ctx, ffi::Buffer<ffi::F32> lse,
    ffi::AnyBuffer dctx, ffi::AnyBuffer dnew1, ffi::AnyBuffer dnew2,
    bool band, int64_t block_len, bool has_ids, bool read_prev1,
    bool read_prev2, bool emit1, bool emit2, float scale1, float scale2,
    int64_t keep_threshold, float gain, bool by_rows, int64_t sources,
    ffi::Result<ffi::AnyBuffer> dq, ffi::Result<ffi::AnyBuffer> dk1,
    ffi::Result<ffi::AnyBuffer> dv1, ffi::Result<ffi::AnyBuffer> dk2,
    ffi::Result<ffi::AnyBuffer> dv2,
    ffi::Result<ffi::Buffer<ffi::F32>> dper_id,
    ffi::Result<ffi::AnyBuffer> dprev1, ffi::Result<ffi::AnyBuffer> dprev2,
    ffi::Result<ffi::Buffer<ffi::F32>> delta) {
  const SideOptions o{band,       has_ids,        {read_prev1, read_prev2},
                      {emit1, emit2}, by_rows,    block_len,
                      keep_threshold, {scale1, scale2}, gain, sources};
  SideShape s;
  if (auto e = CheckSideBackward(q, k1, v1, k2, v2, per_id, codes1, codes2,
                                 valid, prev1, prev2, src_q, src_k1, src_k2,
                                 seeds, ctx, lse, dctx, dnew1, dnew2, *dq,
                                 *dk1, *dv1, *dk2, *dv2, *dper_id, *dprev1,
                                 *dprev2, *delta, o, &s);
      !e.success()) {
    return e;
  }
  if (s.batch * s.heads == 0) return ffi::Error::Success();
  const ffi::DataType t = q.element_type();
  // Every cubin before the first launch: a missing one fails the call
  // before it writes anything.
  std::string queries, keys[2];
  CubinKernel kernels[3];
  if (auto e = LoadVariant(t, s, o, "side_backward_queries", 0, &queries,
                           &kernels[0]);
      !e.success()) {
    return e;
  }
  for (int p = 0; p < 2; ++p) {
    if (auto e = LoadVariant(t, s, o, "side_backward_keys", p + 1, &keys[p],
                             &kernels[p + 1]);
        !e.success()) {
      return e;
    }
  }
  CudaDriver& cu = CudaDriver::Get();
  if (!o.has_ids && dper_id->element_count() > 0) {
    // The queries kernel writes dper_id only with ids; without, the
    // placeholder's gradient is zeros.
    if (CUresult r = cu.MemsetD32Async(
            reinterpret_cast<CUdeviceptr>(dper_id->untyped_data()), 0,
            dper_id->element_count(), stream);
        r != 0) {
      return ffi::Error::Internal("zeroing dper_id: " + cu.Describe(r));
    }
  }
  // The unread operands are placeholders the kernels never read, the
  // unwritten results buffers they never write.
  if (auto e = Launch(
          queries, kernels[0], s.rows, s, stream,
          {q.untyped_data(), k1.untyped_data(), v1.untyped_data(),
           k2.untyped_data(), v2.untyped_data(), per_id.untyped_data(),
           codes1.untyped_data(), codes2.untyped_data(),
           valid.untyped_data(), prev1.untyped_data(), prev2.untyped_data(),
           src_q.untyped_data(), src_k1.untyped_data(),
           src_k2.untyped_data(), seeds.untyped_data(), ctx.untyped_data(),
           lse.untyped_data(),
           dctx.untyped_data(), dnew1.untyped_data(), dnew2.untyped_data(),
           dq->untyped_data(), dper_id->untyped_data(),
           dprev1->untyped_data(), dprev2->untyped_data(),
           delta->untyped_data()},
          {I32(s.batch), I32(s.heads), I32(s.rows), I32(s.key_rows[0]),
           I32(s.key_rows[1]), I32(s.num_ids), I32(o.block_len),
           I32(s.codes1_stride), I32(o.sources), I32(o.keep_threshold)},
          {o.gain, o.scale[0], o.scale[1]});
      !e.success()) {
    return e;
  }
  const ffi::AnyBuffer* k[2] = {&k1, &k2};
  const ffi::AnyBuffer* v[2] = {&v1, &v2};
  const ffi::Buffer<ffi::S8>* codes[2] = {&codes1, &codes2};
  const ffi::AnyBuffer* prev[2] = {&prev1, &prev2};
  const ffi::AnyBuffer* src_k[2] = {&src_k1, &src_k2};
  const ffi::AnyBuffer* dnew[2] = {&dnew1, &dnew2};
  ffi::AnyBuffer* dk[2] = {&*dk1, &*dk2};
  ffi::AnyBuffer* dv[2] = {&*dv1, &*dv2};
  const int64_t code_stride[2] = {s.codes1_stride, s.width[1]};
  for (int p = 0; p < 2; ++p) {
    if (auto e = Launch(
            keys[p], kernels[p + 1], s.key_rows[p], s, stream,
            {q.untyped_data(), k[p]->untyped_data(), v[p]->untyped_data(),
             per_id.untyped_data(), codes[p]->untyped_data(),
             valid.untyped_data(), prev[p]->untyped_data(),
             src_q.untyped_data(), src_k[p]->untyped_data(),
             seeds.untyped_data(), lse.untyped_data(),
             delta->untyped_data(), dctx.untyped_data(),
             dnew[p]->untyped_data(), dk[p]->untyped_data(),
             dv[p]->untyped_data()},
            {I32(s.batch), I32(s.heads), I32(s.rows), I32(s.key_rows[p]),
             I32(s.num_ids), I32(o.block_len), I32(code_stride[p]),
             I32(o.sources), I32(o.keep_threshold)},
            {o.gain, o.scale[p]});
        !e.success()) {
      return e;
    }
  }
  return ffi::Error::Success();
}

}  // namespace

// ----------------------------------------------------------------- bindings
// The forward's operands and attributes; the backward's take ctx, lse and
// the incoming gradients between them.
#define ETC_SIDE_OPERANDS(BINDER)                     \
  BINDER.Arg<ffi::AnyBuffer>()       /* q */          \
      .Arg<ffi::AnyBuffer>()         /* k1 */         \
      .Arg<ffi::AnyBuffer>()         /* v1 */         \
      .Arg<ffi::AnyBuffer>()         /* k2 */         \
      .Arg<ffi::AnyBuffer>()         /* v2 */         \
      .Arg<ffi::Buffer<ffi::F32>>()  /* per_id */     \
      .Arg<ffi::Buffer<ffi::S8>>()   /* codes1 */     \
      .Arg<ffi::Buffer<ffi::S8>>()   /* codes2 */     \
      .Arg<ffi::Buffer<ffi::F32>>()  /* valid */      \
      .Arg<ffi::AnyBuffer>()         /* prev1 */      \
      .Arg<ffi::AnyBuffer>()         /* prev2 */      \
      .Arg<ffi::AnyBuffer>()         /* src_q */      \
      .Arg<ffi::AnyBuffer>()         /* src_k1 */     \
      .Arg<ffi::AnyBuffer>()         /* src_k2 */     \
      .Arg<ffi::AnyBuffer>()         /* seeds */

#define ETC_SIDE_ATTRIBUTES(BINDER)                   \
  BINDER.Attr<bool>("band")                           \
      .Attr<int64_t>("block_len")                     \
      .Attr<bool>("has_ids")                          \
      .Attr<bool>("read_prev1")                       \
      .Attr<bool>("read_prev2")                       \
      .Attr<bool>("emit1")                            \
      .Attr<bool>("emit2")                            \
      .Attr<float>("scale1")                          \
      .Attr<float>("scale2")                          \
      .Attr<int64_t>("keep_threshold")                \
      .Attr<float>("gain")                            \
      .Attr<bool>("by_rows")                          \
      .Attr<int64_t>("sources")

#define ETC_SIDE_FORWARD_BINDING(BINDER)              \
  ETC_SIDE_ATTRIBUTES(ETC_SIDE_OPERANDS(BINDER))      \
      .Ret<ffi::AnyBuffer>()         /* ctx */        \
      .Ret<ffi::Buffer<ffi::F32>>()  /* lse */        \
      .Ret<ffi::AnyBuffer>()         /* new1 */       \
      .Ret<ffi::AnyBuffer>()         /* new2 */

#define ETC_SIDE_BACKWARD_BINDING(BINDER)             \
  ETC_SIDE_ATTRIBUTES(ETC_SIDE_OPERANDS(BINDER)       \
      .Arg<ffi::AnyBuffer>()         /* ctx */        \
      .Arg<ffi::Buffer<ffi::F32>>()  /* lse */        \
      .Arg<ffi::AnyBuffer>()         /* dctx */       \
      .Arg<ffi::AnyBuffer>()         /* dnew1 */      \
      .Arg<ffi::AnyBuffer>())        /* dnew2 */      \
      .Ret<ffi::AnyBuffer>()         /* dq */         \
      .Ret<ffi::AnyBuffer>()         /* dk1 */        \
      .Ret<ffi::AnyBuffer>()         /* dv1 */        \
      .Ret<ffi::AnyBuffer>()         /* dk2 */        \
      .Ret<ffi::AnyBuffer>()         /* dv2 */        \
      .Ret<ffi::Buffer<ffi::F32>>()  /* dper_id */    \
      .Ret<ffi::AnyBuffer>()         /* dprev1 */     \
      .Ret<ffi::AnyBuffer>()         /* dprev2 */     \
      .Ret<ffi::Buffer<ffi::F32>>()  /* delta */

XLA_FFI_DEFINE_HANDLER_SYMBOL(EtcSideForwardHost, SideForwardHost,
                              ETC_SIDE_FORWARD_BINDING(ffi::Ffi::Bind()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(
    EtcSideForwardCuda, SideForwardCuda,
    ETC_SIDE_FORWARD_BINDING(
        ffi::Ffi::Bind().Ctx<ffi::PlatformStream<CUstream>>()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(EtcSideBackwardHost, SideBackwardHost,
                              ETC_SIDE_BACKWARD_BINDING(ffi::Ffi::Bind()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(
    EtcSideBackwardCuda, SideBackwardCuda,
    ETC_SIDE_BACKWARD_BINDING(
        ffi::Ffi::Bind().Ctx<ffi::PlatformStream<CUstream>>()));

// Registers every handler into the XLA runtime behind `api`; returns 0, or
// the number of registrations that failed.
extern "C" int EtcRegisterFfiHandlers(const XLA_FFI_Api* api) {
  int failed = 0;
  struct Entry {
    const char* name;
    const char* platform;
    XLA_FFI_Handler* handler;
  };
  const Entry entries[] = {
      {"etc_side_forward", "Host", EtcSideForwardHost},
      {"etc_side_forward", "CUDA", EtcSideForwardCuda},
      {"etc_side_backward", "Host", EtcSideBackwardHost},
      {"etc_side_backward", "CUDA", EtcSideBackwardCuda},
  };
  for (const Entry& e : entries) {
    if (XLA_FFI_Error* error =
            ffi::Ffi::RegisterStaticHandler(api, e.name, e.platform, e.handler);
        error != nullptr) {
      ++failed;
    }
  }
  return failed;
}
