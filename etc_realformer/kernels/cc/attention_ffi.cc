// XLA FFI handlers of the fused global-local attention kernels.
//
// Two typed-FFI custom calls per query branch of the attention core:
// "etc_branch_forward" (`reference.branch_forward`) and its gradient
// "etc_branch_backward" (`reference.branch_backward`), each with two
// implementations:
//   Host  plain C++ loops of the same math, so TensorFlow on the CPU runs
//         the whole custom-call path under jit_compile (the tests), and
//   CUDA  launches of the Triton kernels' ahead-of-time compiled cubins on
// the handler's stream (`tools/kernels/build_kernels.py` writes the cubins and
// this library's build): `branch_forward`; the backward's
// `branch_backward_queries`, then `branch_backward_keys` per pattern. The CUDA
// driver API is opened with dlopen at first use, so the library builds on a
// machine without CUDA and loads on one without a GPU.
//
// Registration: `EtcRegisterFfiHandlers(api)` registers every handler into
// the XLA runtime behind `api` (TensorFlow's: `XLA_FFI_GetApi` of
// libtensorflow_framework.so.2); jaxlib registers the exported handler
// symbols itself (`jax.ffi.register_ffi_target`).
//
// Layouts: `etc_realformer/kernels/triton_attention.py`.
//
// Its sections, one file each, in this one translation unit:
//   elements.h       element types read as float32 and written back
//   branch_checks.h  a call's operands, attributes and shapes, checked
//   host_handlers.h  the host handlers
//   cuda_driver.h    the CUDA driver and the cubins' loading
//   cuda_handlers.h  the CUDA handlers and the cubins' names
//   format.h         the score codes and the kernels' names, generated from
//                    etc_realformer/kernels/format.py

#include <cstdint>

#include "branch_checks.h"
#include "cuda_driver.h"
#include "cuda_handlers.h"
#include "format.h"
#include "host_handlers.h"
#include "xla/ffi/api/ffi.h"

// ----------------------------------------------------------------- bindings
// The forward's operands and attributes; the backward's take ctx, lse and
// the incoming gradients between them.
#define ETC_BRANCH_OPERANDS(BINDER)                     \
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

#define ETC_BRANCH_ATTRIBUTES(BINDER)                   \
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

#define ETC_BRANCH_FORWARD_BINDING(BINDER)              \
  ETC_BRANCH_ATTRIBUTES(ETC_BRANCH_OPERANDS(BINDER))      \
      .Ret<ffi::AnyBuffer>()         /* ctx */        \
      .Ret<ffi::Buffer<ffi::F32>>()  /* lse */        \
      .Ret<ffi::AnyBuffer>()         /* new1 */       \
      .Ret<ffi::AnyBuffer>()         /* new2 */

#define ETC_BRANCH_BACKWARD_BINDING(BINDER)             \
  ETC_BRANCH_ATTRIBUTES(ETC_BRANCH_OPERANDS(BINDER)       \
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

namespace {

// The handlers' parameters in the bindings' order (ETC_BRANCH_OPERANDS,
// ETC_BRANCH_ATTRIBUTES), and the operands and options made of them.
#define ETC_BRANCH_OPERAND_PARAMS                                           \
  ffi::AnyBuffer q, ffi::AnyBuffer k1, ffi::AnyBuffer v1, ffi::AnyBuffer k2, \
      ffi::AnyBuffer v2, ffi::Buffer<ffi::F32> per_id,                      \
      ffi::Buffer<ffi::S8> codes1, ffi::Buffer<ffi::S8> codes2,             \
      ffi::Buffer<ffi::F32> valid, ffi::AnyBuffer prev1,                    \
      ffi::AnyBuffer prev2, ffi::AnyBuffer src_q, ffi::AnyBuffer src_k1,    \
      ffi::AnyBuffer src_k2, ffi::AnyBuffer seeds
#define ETC_BRANCH_ATTRIBUTE_PARAMS                                         \
  bool band, int64_t block_len, bool has_ids, bool read_prev1,              \
      bool read_prev2, bool emit1, bool emit2, float scale1, float scale2,  \
      int64_t keep_threshold, float gain, bool by_rows, int64_t sources
#define ETC_BRANCH_OPERANDS_OF_PARAMS                                       \
  BranchOperands {                                                          \
    q, k1, v1, k2, v2, per_id, codes1, codes2, valid, prev1, prev2, src_q,  \
        src_k1, src_k2, seeds                                               \
  }
#define ETC_BRANCH_OPTIONS_OF_PARAMS                                        \
  BranchOptions {                                                           \
    band, has_ids, {read_prev1, read_prev2}, {emit1, emit2}, by_rows,       \
        block_len, keep_threshold, {scale1, scale2}, gain, sources          \
  }

// Each handler as the bindings call it: the host and CUDA implementations
// take the operands, the options and the results gathered (`Ctx`: the
// CUDA handlers' stream, first).
template <typename... Ctx>
struct Handlers {
  template <ffi::Error (*Impl)(Ctx..., const BranchOperands&,
                               const BranchOptions&, const ForwardResults&)>
  static ffi::Error Forward(Ctx... ctx, ETC_BRANCH_OPERAND_PARAMS,
                            ETC_BRANCH_ATTRIBUTE_PARAMS,
                            ffi::Result<ffi::AnyBuffer> ctx_out,
                            ffi::Result<ffi::Buffer<ffi::F32>> lse,
                            ffi::Result<ffi::AnyBuffer> new1,
                            ffi::Result<ffi::AnyBuffer> new2) {
    return Impl(ctx..., ETC_BRANCH_OPERANDS_OF_PARAMS,
                ETC_BRANCH_OPTIONS_OF_PARAMS,
                {*ctx_out, *lse, *new1, *new2});
  }

  template <ffi::Error (*Impl)(Ctx..., const BranchOperands&,
                               const BackwardOperands&, const BranchOptions&,
                               const BackwardResults&)>
  static ffi::Error Backward(
      Ctx... ctx, ETC_BRANCH_OPERAND_PARAMS, ffi::AnyBuffer ctx_in,
      ffi::Buffer<ffi::F32> lse, ffi::AnyBuffer dctx, ffi::AnyBuffer dnew1,
      ffi::AnyBuffer dnew2, ETC_BRANCH_ATTRIBUTE_PARAMS,
      ffi::Result<ffi::AnyBuffer> dq, ffi::Result<ffi::AnyBuffer> dk1,
      ffi::Result<ffi::AnyBuffer> dv1, ffi::Result<ffi::AnyBuffer> dk2,
      ffi::Result<ffi::AnyBuffer> dv2,
      ffi::Result<ffi::Buffer<ffi::F32>> dper_id,
      ffi::Result<ffi::AnyBuffer> dprev1, ffi::Result<ffi::AnyBuffer> dprev2,
      ffi::Result<ffi::Buffer<ffi::F32>> delta) {
    return Impl(ctx..., ETC_BRANCH_OPERANDS_OF_PARAMS,
                {ctx_in, lse, dctx, dnew1, dnew2},
                ETC_BRANCH_OPTIONS_OF_PARAMS,
                {*dq, *dk1, *dv1, *dk2, *dv2, *dper_id, *dprev1, *dprev2,
                 *delta});
  }
};

constexpr auto BranchForwardHost = &Handlers<>::Forward<BranchForwardOnHost>;
constexpr auto BranchForwardCuda =
    &Handlers<CUstream>::Forward<BranchForwardOnCuda>;
constexpr auto BranchBackwardHost =
    &Handlers<>::Backward<BranchBackwardOnHost>;
constexpr auto BranchBackwardCuda =
    &Handlers<CUstream>::Backward<BranchBackwardOnCuda>;

}  // namespace

// A pass's two handler symbols, EtcBranch<Pass>Host and EtcBranch<Pass>Cuda
// (the CUDA one takes the stream first).
#define ETC_DEFINE_HANDLERS(Pass, BINDING)                                 \
  XLA_FFI_DEFINE_HANDLER_SYMBOL(EtcBranch##Pass##Host, Branch##Pass##Host, \
                                BINDING(ffi::Ffi::Bind()));                \
  XLA_FFI_DEFINE_HANDLER_SYMBOL(                                           \
      EtcBranch##Pass##Cuda, Branch##Pass##Cuda,                           \
      BINDING(ffi::Ffi::Bind().Ctx<ffi::PlatformStream<CUstream>>()))

ETC_DEFINE_HANDLERS(Forward, ETC_BRANCH_FORWARD_BINDING);
ETC_DEFINE_HANDLERS(Backward, ETC_BRANCH_BACKWARD_BINDING);

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
      {etc_kernels::kForwardTarget, "Host", EtcBranchForwardHost},
      {etc_kernels::kForwardTarget, "CUDA", EtcBranchForwardCuda},
      {etc_kernels::kBackwardTarget, "Host", EtcBranchBackwardHost},
      {etc_kernels::kBackwardTarget, "CUDA", EtcBranchBackwardCuda},
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
