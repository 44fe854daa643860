// The CUDA handlers: launches of the Triton kernels' cubins, and the cubins'
// names.
// Part of attention_ffi.cc's one translation unit (its definitions are
// internal to the library).
#ifndef ETC_REALFORMER_KERNELS_CC_CUDA_HANDLERS_H_
#define ETC_REALFORMER_KERNELS_CC_CUDA_HANDLERS_H_

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "branch_checks.h"
#include "cuda_driver.h"
#include "format.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

using etc_kernels::kForwardKernel;
using etc_kernels::kKeysKernel;
using etc_kernels::kQueriesKernel;

// ---------------------------------------------------------- branch: on CUDA
// The cubins' names; `tools/kernels/build_kernels.py` (`variant_name`) writes
// the same. The forward's and the backward's queries kernel:
// <kernel>_<dtype>_d<D>_<r<R>|noids>_<band|dense>_<f32|low>_
// <READ1><READ2><WRITE1><WRITE2>_<drop|nodrop>_<rows|whole> and the backward's
// keys kernel of pattern p (its two stream flags):
// branch_backward_keys_<dtype>_d<D>_<r<R>|noids>_<band|dense>_p<1|2>_
// <f32|low>_<READ><WRITE>_<drop|nodrop>_<rows|whole> "low" only where a stream
// the kernel touches is in the inputs' type; "rows" whenever dropout is off
// (the index layout matters only then). An aligned cubin ends in "_a<digits>"
// (`AlignedDigits`).
//
// Which of a kernel's lengths are multiples of 16, one digit each ("" when
// none is): the forward's and the queries kernel's rows, first and second
// key rows and block length; the keys kernel's rows, its pattern's key
// rows and block length (`variants.aligned_digits`). A cubin
// built for them takes them as multiples of 16, which vectorizes the
// loads they stride.
std::string AlignedDigits(const BranchShape& s, const BranchOptions& o,
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

std::string VariantName(ffi::DataType t, const BranchShape& s,
                        const BranchOptions& o,
                        const char* kernel = kForwardKernel,
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
ffi::Error LoadVariant(ffi::DataType t, const BranchShape& s,
                       const BranchOptions& o, const char* kernel,
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
                  int64_t extent, const BranchShape& s, CUstream stream,
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

// The forward's and the queries kernel's pointers: the operands in order,
// then those of the pass (`build.BRANCH_POINTERS`, `QUERIES_POINTERS`).
std::vector<void*> Pointers(const BranchOperands& in,
                            std::initializer_list<void*> more) {
  std::vector<void*> ptrs = {
      in.q.untyped_data(),      in.k1.untyped_data(),
      in.v1.untyped_data(),     in.k2.untyped_data(),
      in.v2.untyped_data(),     in.per_id.untyped_data(),
      in.codes1.untyped_data(), in.codes2.untyped_data(),
      in.valid.untyped_data(),  in.prev1.untyped_data(),
      in.prev2.untyped_data(),  in.src_q.untyped_data(),
      in.src_k1.untyped_data(), in.src_k2.untyped_data(),
      in.seeds.untyped_data()};
  ptrs.insert(ptrs.end(), more);
  return ptrs;
}

// Their ints and floats (`build.BRANCH_INTS`, `BRANCH_FLOATS`).
std::vector<int32_t> BranchInts(const BranchShape& s, const BranchOptions& o) {
  return {I32(s.batch),        I32(s.heads),         I32(s.rows),
          I32(s.key_rows[0]),  I32(s.key_rows[1]),   I32(s.num_ids),
          I32(o.block_len),    I32(s.codes1_stride), I32(o.sources),
          I32(o.keep_threshold)};
}

std::vector<float> BranchFloats(const BranchOptions& o) {
  return {o.gain, o.scale[0], o.scale[1]};
}

ffi::Error BranchForwardOnCuda(CUstream stream, const BranchOperands& in,
                               const BranchOptions& o,
                               const ForwardResults& r) {
  BranchShape s;
  if (auto e = CheckForward(in, r, o, &s); !e.success()) return e;
  if (s.rows == 0 || s.batch * s.heads == 0) {
    return ffi::Error::Success();  // nothing to compute (an empty grid)
  }
  std::string variant;
  CubinKernel kernel;
  if (auto e = LoadVariant(in.q.element_type(), s, o, kForwardKernel, 0,
                           &variant, &kernel);
      !e.success()) {
    return e;
  }
  // The unread streams and seeds are placeholders the kernel never reads,
  // the unwritten results buffers it never writes.
  return Launch(
      variant, kernel, s.rows, s, stream,
      Pointers(in, {r.ctx.untyped_data(), r.lse.untyped_data(),
                    r.new1.untyped_data(), r.new2.untyped_data()}),
      BranchInts(s, o), BranchFloats(o));
}

// Three launches in order on the handler's stream: the queries kernel (dq,
// dper_id, dprev, and delta, which the keys kernels read), then the keys
// kernel of each pattern (its dk, dv).
ffi::Error BranchBackwardOnCuda(CUstream stream, const BranchOperands& in,
                                const BackwardOperands& y,
                                const BranchOptions& o,
                                const BackwardResults& r) {
  BranchShape s;
  if (auto e = CheckBranchBackward(in, y, r, o, &s); !e.success()) return e;
  if (s.batch * s.heads == 0) return ffi::Error::Success();
  const ffi::DataType t = in.q.element_type();
  // Every cubin before the first launch: a missing one fails the call
  // before it writes anything.
  std::string queries, keys[2];
  CubinKernel kernels[3];
  if (auto e = LoadVariant(t, s, o, kQueriesKernel, 0, &queries,
                           &kernels[0]);
      !e.success()) {
    return e;
  }
  for (int p = 0; p < 2; ++p) {
    if (auto e = LoadVariant(t, s, o, kKeysKernel, p + 1, &keys[p],
                             &kernels[p + 1]);
        !e.success()) {
      return e;
    }
  }
  CudaDriver& cu = CudaDriver::Get();
  if (!o.has_ids && r.dper_id.element_count() > 0) {
    // The queries kernel writes dper_id only with ids; without, the
    // placeholder's gradient is zeros.
    if (CUresult status = cu.MemsetD32Async(
            reinterpret_cast<CUdeviceptr>(r.dper_id.untyped_data()), 0,
            r.dper_id.element_count(), stream);
        status != 0) {
      return ffi::Error::Internal("zeroing dper_id: " + cu.Describe(status));
    }
  }
  // The unread operands are placeholders the kernels never read, the
  // unwritten results buffers they never write.
  if (auto e = Launch(
          queries, kernels[0], s.rows, s, stream,
          Pointers(in, {y.ctx.untyped_data(), y.lse.untyped_data(),
                        y.dctx.untyped_data(), y.dnew1.untyped_data(),
                        y.dnew2.untyped_data(), r.dq.untyped_data(),
                        r.dper_id.untyped_data(), r.dprev1.untyped_data(),
                        r.dprev2.untyped_data(), r.delta.untyped_data()}),
          BranchInts(s, o), BranchFloats(o));
      !e.success()) {
    return e;
  }
  const ffi::AnyBuffer* k[2] = {&in.k1, &in.k2};
  const ffi::AnyBuffer* v[2] = {&in.v1, &in.v2};
  const ffi::Buffer<ffi::S8>* codes[2] = {&in.codes1, &in.codes2};
  const ffi::AnyBuffer* prev[2] = {&in.prev1, &in.prev2};
  const ffi::AnyBuffer* src_k[2] = {&in.src_k1, &in.src_k2};
  const ffi::AnyBuffer* dnew[2] = {&y.dnew1, &y.dnew2};
  const ffi::AnyBuffer* dk[2] = {&r.dk1, &r.dk2};
  const ffi::AnyBuffer* dv[2] = {&r.dv1, &r.dv2};
  const int64_t code_stride[2] = {s.codes1_stride, s.width[1]};
  for (int p = 0; p < 2; ++p) {
    if (auto e = Launch(
            keys[p], kernels[p + 1], s.key_rows[p], s, stream,
            {in.q.untyped_data(), k[p]->untyped_data(), v[p]->untyped_data(),
             in.per_id.untyped_data(), codes[p]->untyped_data(),
             in.valid.untyped_data(), prev[p]->untyped_data(),
             in.src_q.untyped_data(), src_k[p]->untyped_data(),
             in.seeds.untyped_data(), y.lse.untyped_data(),
             r.delta.untyped_data(), y.dctx.untyped_data(),
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

#endif  // ETC_REALFORMER_KERNELS_CC_CUDA_HANDLERS_H_
