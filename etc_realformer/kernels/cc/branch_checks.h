// A branch call's operands, attributes and shapes, checked before any
// kernel reads them.
// Part of attention_ffi.cc's one translation unit (its definitions are
// internal to the library).
#ifndef ETC_REALFORMER_KERNELS_CC_BRANCH_CHECKS_H_
#define ETC_REALFORMER_KERNELS_CC_BRANCH_CHECKS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "elements.h"
#include "format.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

// The calls' names in their errors; the code of a masked score without a
// relative term (`format.NO_ID`): the others hold the relative id in their
// low 7 bits, the sign bit set where the score is masked.
using etc_kernels::kNoId;
constexpr const char* kForward = etc_kernels::kForwardTarget;
constexpr const char* kBackward = etc_kernels::kBackwardTarget;

// The operands of both passes, in their binding order (the bindings'
// ETC_BRANCH_OPERANDS); the backward's `BackwardOperands` follow them.
struct BranchOperands {
  ffi::AnyBuffer q, k1, v1, k2, v2;
  ffi::Buffer<ffi::F32> per_id;
  ffi::Buffer<ffi::S8> codes1, codes2;
  ffi::Buffer<ffi::F32> valid;
  ffi::AnyBuffer prev1, prev2, src_q, src_k1, src_k2, seeds;
};

// The backward's operands past the forward's: the forward's outputs and
// the incoming gradients of the context and the emitted sums.
struct BackwardOperands {
  ffi::AnyBuffer ctx;
  ffi::Buffer<ffi::F32> lse;
  ffi::AnyBuffer dctx, dnew1, dnew2;
};

// The forward's results.
struct ForwardResults {
  ffi::AnyBuffer ctx;
  ffi::Buffer<ffi::F32> lse;
  ffi::AnyBuffer new1, new2;
};

// The backward's results: each input's gradient, and delta (dctx . ctx per
// query row, which the keys kernels read).
struct BackwardResults {
  ffi::AnyBuffer dq, dk1, dv1, dk2, dv2;
  ffi::Buffer<ffi::F32> dper_id;
  ffi::AnyBuffer dprev1, dprev2;
  ffi::Buffer<ffi::F32> delta;
};

// The call's attributes (see the bindings).
struct BranchOptions {
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

struct BranchShape {
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
ffi::Error CheckBranch(bool backward, const BranchOperands& in,
                       const ffi::AnyBuffer& ctx,
                       const ffi::Buffer<ffi::F32>& lse,
                       const ffi::AnyBuffer& new1, const ffi::AnyBuffer& new2,
                       const BranchOptions& o, BranchShape* shape) {
  const auto& [q, k1, v1, k2, v2, per_id, codes1, codes2, valid, prev1,
               prev2, src_q, src_k1, src_k2, seeds] = in;
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
  if (o.band &&
      (stride1 < 3 * b || stride1 % etc_kernels::kBandRowBytes != 0)) {
    return Invalid(call, "codes1's rows hold " + std::to_string(stride1) +
                   " codes: the band needs 3b = " + std::to_string(3 * b) +
                   " or more, a multiple of 16 (the kernel's vector loads)");
  }
  if (o.has_ids && num_ids < 1) {
    return Invalid(call, "has_ids with an empty per_id table");
  }
  if (shape->width[0] + shape->width[1] == 0) {
    return Invalid(call, "a branch without keys");
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

// The forward call's operands and results.
ffi::Error CheckForward(const BranchOperands& in, const ForwardResults& r,
                        const BranchOptions& o, BranchShape* s) {
  return CheckBranch(false, in, r.ctx, r.lse, r.new1, r.new2, o, s);
}

// The backward call's operands past the forward's and its results: each
// gradient has its input's shape and type (dper_id: per_id's, also the
// [B, N, 1, H] placeholder without ids; dprev_p only where prev_p is read).
ffi::Error CheckBranchBackward(const BranchOperands& in,
                               const BackwardOperands& y,
                               const BackwardResults& r,
                               const BranchOptions& o, BranchShape* s) {
  if (auto e = CheckBranch(true, in, y.ctx, y.lse, y.dnew1, y.dnew2, o, s);
      !e.success()) {
    return e;
  }
  const auto& [q, k1, v1, k2, v2, per_id, codes1, codes2, valid, prev1,
               prev2, src_q, src_k1, src_k2, seeds] = in;
  const auto& [dq, dk1, dv1, dk2, dv2, dper_id, dprev1, dprev2, delta] = r;
  const ffi::AnyBuffer& dctx = y.dctx;
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

}  // namespace

#endif  // ETC_REALFORMER_KERNELS_CC_BRANCH_CHECKS_H_
