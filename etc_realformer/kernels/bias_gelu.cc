// The feed-forward block's bias and activation, fused (CPU):
//
//   pre = x + bias                       (rounded to the compute dtype T)
//   y   = gelu(pre), tanh approximation  (computed in float32, rounded once)
//
// `tf.nn.gelu(approximate=True)` is six TF ops (pow, mul, add, mul, tanh,
// mul...), each a pass over the [N, intermediate] tensor (the largest
// activation of the layer, 4x hidden); its gradient is one more, and the
// bias's gradient another (a column sum of the same tensor). Here the
// forward is one pass, and the backward one pass that writes the
// pre-activation's gradient and sums the bias's per block of rows in a
// fixed order.
//
// Matches `tf.nn.gelu(x + bias, approximate=True)` to float32 rounding in
// float32 (Eigen's tanh, as TF's Tanh); in bfloat16 and float16 it rounds
// once where the TF ops round after each step, so it is the more accurate.
//
// Layouts: x, y, dy, dx: T [..., F] (N rows); bias: T [F]; d_bias: float [F].

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "Eigen/Core"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "cpu_common.h"

namespace etc_realformer {
namespace {

constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluA = 0.044715f;
// Rows per partial sum of the bias's gradient (fixed: deterministic sums).
constexpr int64_t kRowsPerPartial = 32;

// Rows of `cols` elements of T, widened to float, pre = x + bias rounded
// through T (what the TF path stores before the activation).
template <typename T>
inline void PreActivation(const T* x, const float* bias, int64_t cols,
                          float* pre, uint16_t* narrow) {
  Widen(x, cols, pre);
  for (int64_t c = 0; c < cols; ++c) pre[c] += bias[c];
  RoundThroughT<T>(pre, cols, narrow);
}

// tanh(sqrt(2/pi) * (x + a x^3)) of a row, in place (Eigen's tanh, the one
// TF's Tanh op uses), padded rows: `n` a multiple of the packet size.
inline void RowGeluTanh(const float* pre, int64_t n, float* t) {
  using namespace Eigen::internal;  // NOLINT: packet math
  const Packet c = pset1<Packet>(kGeluC), a = pset1<Packet>(kGeluA);
  for (int64_t i = 0; i < n; i += kPacket) {
    const Packet x = ploadu<Packet>(pre + i);
    const Packet x3 = pmul(pmul(x, x), x);
    pstoreu(t + i, ptanh(pmul(c, padd(x, pmul(a, x3)))));
  }
}

inline int64_t PadToPacket(int64_t n) {
  return (n + kPacket - 1) / kPacket * kPacket;
}

Status ReadShapes(const Tensor& x, const Tensor& bias, int64_t* n,
                  int64_t* f) {
  TF_RETURN_IF_ERROR(RowsOf(x, "x", n, f));
  return CheckShape(bias, "bias", {*f});
}

template <typename T>
std::vector<float> WideBias(const Tensor& bias, int64_t f) {
  std::vector<float> out(PadToPacket(f), 0.f);
  Widen(bias.flat<T>().data(), f, out.data());
  return out;
}

template <typename T>
class BiasGeluOp : public OpKernel {
 public:
  explicit BiasGeluOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& bias = ctx->input(1);
    int64_t n, f;
    OP_REQUIRES_OK(ctx, ReadShapes(x, bias, &n, &f));
    Tensor* y;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, x.shape(), &y));
    if (n == 0 || f == 0) return;
    const std::vector<float> b = WideBias<T>(bias, f);
    const T* xp = x.flat<T>().data();
    T* yp = y->flat<T>().data();
    auto* workers = ctx->device()->tensorflow_cpu_worker_threads()->workers;
    workers->ParallelFor(n, 40 * f, [&](int64_t begin, int64_t end) {
      const int64_t padded = PadToPacket(f);
      std::vector<float> pre(padded, 0.f), t(padded), out(f);
      std::vector<uint16_t> narrow(f);
      for (int64_t row = begin; row < end; ++row) {
        PreActivation(xp + row * f, b.data(), f, pre.data(), narrow.data());
        RowGeluTanh(pre.data(), padded, t.data());
        for (int64_t c = 0; c < f; ++c) {
          out[c] = 0.5f * pre[c] * (1.f + t[c]);
        }
        StoreAs(out.data(), f, yp + row * f);
      }
    });
  }
};

template <typename T>
class BiasGeluGradOp : public OpKernel {
 public:
  explicit BiasGeluGradOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& dy = ctx->input(0);
    const Tensor& x = ctx->input(1);
    const Tensor& bias = ctx->input(2);
    int64_t n, f;
    OP_REQUIRES_OK(ctx, ReadShapes(x, bias, &n, &f));
    OP_REQUIRES_OK(ctx, CheckSameShape(dy, "dy", x, "x"));
    Tensor *dx, *dbias;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, x.shape(), &dx));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({f}), &dbias));
    float* db = dbias->flat<float>().data();
    std::fill(db, db + f, 0.f);
    if (n == 0 || f == 0) return;
    const std::vector<float> b = WideBias<T>(bias, f);
    const T* xp = x.flat<T>().data();
    const T* dyp = dy.flat<T>().data();
    T* dxp = dx->flat<T>().data();
    const int64_t groups = (n + kRowsPerPartial - 1) / kRowsPerPartial;
    std::vector<float> partials(groups * f, 0.f);
    auto* workers = ctx->device()->tensorflow_cpu_worker_threads()->workers;
    workers->ParallelFor(
        groups, 60 * f * kRowsPerPartial, [&](int64_t gbegin, int64_t gend) {
          const int64_t padded = PadToPacket(f);
          std::vector<float> pre(padded, 0.f), t(padded), d(f);
          std::vector<uint16_t> narrow(f);
          for (int64_t grp = gbegin; grp < gend; ++grp) {
            float* part = partials.data() + grp * f;
            const int64_t last = std::min(n, (grp + 1) * kRowsPerPartial);
            for (int64_t row = grp * kRowsPerPartial; row < last; ++row) {
              PreActivation(xp + row * f, b.data(), f, pre.data(),
                            narrow.data());
              RowGeluTanh(pre.data(), padded, t.data());
              Widen(dyp + row * f, f, d.data());
              for (int64_t c = 0; c < f; ++c) {
                const float x1 = pre[c], th = t[c];
                const float deriv =
                    0.5f * (1.f + th) + 0.5f * x1 * (1.f - th * th) * kGeluC *
                                            (1.f + 3.f * kGeluA * x1 * x1);
                d[c] *= deriv;
              }
              // The bias's gradient sums what the TF path sums: the
              // pre-activation's gradient as stored in T.
              RoundThroughT<T>(d.data(), f, narrow.data());
              for (int64_t c = 0; c < f; ++c) part[c] += d[c];
              StoreAs(d.data(), f, dxp + row * f);
            }
          }
        });
    for (int64_t grp = 0; grp < groups; ++grp) {
      const float* part = partials.data() + grp * f;
      for (int64_t c = 0; c < f; ++c) db[c] += part[c];
    }
  }
};

REGISTER_OP("EtcBiasGelu")
    .Input("x: T")
    .Input("bias: T")
    .Output("y: T")
    .Attr("T: {float, bfloat16, half}")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle x;
      TF_RETURN_IF_ERROR(c->WithRankAtLeast(c->input(0), 1, &x));
      c->set_output(0, x);
      return Status();
    });

REGISTER_OP("EtcBiasGeluGrad")
    .Input("dy: T")
    .Input("x: T")
    .Input("bias: T")
    .Output("dx: T")
    .Output("d_bias: float")
    .Attr("T: {float, bfloat16, half}")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle x;
      TF_RETURN_IF_ERROR(c->WithRankAtLeast(c->input(1), 1, &x));
      c->set_output(0, x);
      c->set_output(1, c->MakeShape({c->Dim(x, -1)}));
      return Status();
    });

ETC_REGISTER_CPU_KERNEL("EtcBiasGelu", BiasGeluOp);
ETC_REGISTER_CPU_KERNEL("EtcBiasGeluGrad", BiasGeluGradOp);

}  // namespace
}  // namespace etc_realformer
