// ETC's post-LN residual, fused (CPU):
//
//   s = residual + dropout(x)                 (in the compute dtype T)
//   y = LayerNorm(s) * gamma + beta           (normalized in float32)
//
// In TensorFlow ops that is ~10 passes over the [N, hidden] activations
// forward (the dropout mask's random bits, its select, the add, the
// moments, the normalization's multiplies and adds) and ~15 backward; ETC's
// epsilon (1e-12) rules out TF's fused batch-norm kernel, which raises it to
// 1e-5. Here the forward reads x and the residual once and writes y (and s
// for the gradient); the backward reads dy and s once and writes the two
// input gradients, with gamma's and beta's gradients summed per block of
// rows in a fixed order (deterministic whatever the thread count).
//
// It matches `residual + stateless_dropout(x)` followed by tf_keras'
// LayerNormalization (etc_realformer/layers/transformer.py) to float32
// rounding: the same rounding to T of x * gain and of the sum, the same
// normalization formula (s * (rstd * gamma) + (beta - mean * rstd * gamma)),
// sums over a row in another order; and it draws the same dropout mask:
// element e of the [N, hidden] mask is the 16-bit half e of the Philox
// stream keyed by the folded seed (`stateless_dropout`).
//
// Layouts: x, residual, y, s: T [..., H] (N rows); gamma, beta: float [H];
// stats: float [N, 2] (mean, 1 / sqrt(var + epsilon)); key: int32 [2].

#include <algorithm>
#include <cmath>
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

// Rows per partial sum of gamma's and beta's gradients (a fixed grouping,
// so that the sums do not depend on how the thread pool splits the rows).
constexpr int64_t kRowsPerPartial = 64;

// Per-thread scratch of one row.
struct RowScratch {
  std::vector<float> a, b, c;
  std::vector<uint16_t> narrow;
  std::vector<uint32_t> words;  // Philox output

  explicit RowScratch(int64_t h)
      : a(h), b(h), c(h), narrow(h) {}
};

// The value of `gain` as the TF path multiplies by it: cast to T first.
template <typename T>
inline float GainInT(float gain) {
  return static_cast<float>(static_cast<T>(gain));
}

struct DropoutAttrs {
  int threshold = 0;  // keep iff 16-bit number >= threshold; 0: no dropout
  float gain = 1.f;

  Status Read(OpKernelConstruction* ctx) {
    TF_RETURN_IF_ERROR(ctx->GetAttr("threshold", &threshold));
    TF_RETURN_IF_ERROR(ctx->GetAttr("gain", &gain));
    if (threshold < 0 || threshold > 65535) {
      return InvalidArgument("threshold must be in [0, 65535]");
    }
    return Status();
  }
};

// The key halves of the folded seed (`tf.bitcast(folded, uint64)`).
inline void ReadKey(const Tensor& key, uint32_t* k0, uint32_t* k1) {
  const auto k = key.flat<int32_t>();
  *k0 = static_cast<uint32_t>(k(0));
  *k1 = static_cast<uint32_t>(k(1));
}

Status CheckVector(const Tensor& t, const char* name, int64_t n) {
  return CheckShape(t, name, {n});
}

// ------------------------------------------------------------------ forward
template <typename T>
class ResidualNormOp : public OpKernel {
 public:
  explicit ResidualNormOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, drop_.Read(ctx));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("epsilon", &epsilon_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("save_sum", &save_sum_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& residual = ctx->input(1);
    const Tensor& gamma = ctx->input(2);
    const Tensor& beta = ctx->input(3);
    const Tensor& key = ctx->input(4);
    int64_t n, h;
    OP_REQUIRES_OK(ctx, RowsOf(x, "x", &n, &h));
    OP_REQUIRES_OK(ctx, CheckSameShape(residual, "residual", x, "x"));
    OP_REQUIRES_OK(ctx, CheckVector(gamma, "gamma", h));
    OP_REQUIRES_OK(ctx, CheckVector(beta, "beta", h));
    OP_REQUIRES_OK(ctx, CheckVector(key, "key", 2));
    Tensor *y, *s_out, *stats;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, x.shape(), &y));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(
                            1, save_sum_ ? x.shape() : TensorShape({0}),
                            &s_out));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(
                            2, save_sum_ ? TensorShape({n, 2})
                                         : TensorShape({0}),
                            &stats));
    if (n == 0 || h == 0) return;
    uint32_t k0, k1;
    ReadKey(key, &k0, &k1);
    const T* xp = x.flat<T>().data();
    const T* rp = residual.flat<T>().data();
    const float* g = gamma.flat<float>().data();
    const float* bt = beta.flat<float>().data();
    T* yp = y->flat<T>().data();
    T* sp = save_sum_ ? s_out->flat<T>().data() : nullptr;
    float* st = save_sum_ ? stats->flat<float>().data() : nullptr;
    const float gain = GainInT<T>(drop_.gain);
    const uint16_t threshold = static_cast<uint16_t>(drop_.threshold);
    const bool dropout = drop_.threshold > 0;
    const float eps = epsilon_;
    auto* workers = ctx->device()->tensorflow_cpu_worker_threads()->workers;
    workers->ParallelFor(n, 30 * h, [&](int64_t begin, int64_t end) {
      RowScratch sc(h);
      float* s = sc.a.data();
      float* t = sc.b.data();
      float* yrow = sc.c.data();
      for (int64_t row = begin; row < end; ++row) {
        Widen(xp + row * h, h, t);
        if (dropout || gain != 1.f) {
          for (int64_t c = 0; c < h; ++c) t[c] *= gain;
          RoundThroughT<T>(t, h, sc.narrow.data());
        }
        if (dropout) {
          ApplyMaskTo(t, PhiloxHalves(k0, k1, row * h, h, &sc.words), h,
                      threshold, t);
        }
        Widen(rp + row * h, h, s);
        for (int64_t c = 0; c < h; ++c) s[c] += t[c];
        RoundThroughT<T>(s, h, sc.narrow.data());
        const float inv_h = 1.f / static_cast<float>(h);
        const float mean = RowSum(s, h) * inv_h;
        for (int64_t c = 0; c < h; ++c) {
          const float d = s[c] - mean;
          t[c] = d * d;
        }
        const float var = RowSum(t, h) * inv_h;
        const float rstd = 1.f / std::sqrt(var + eps);
        for (int64_t c = 0; c < h; ++c) {
          const float scale = rstd * g[c];
          yrow[c] = s[c] * scale + (bt[c] - mean * scale);
        }
        StoreAs(yrow, h, yp + row * h);
        if (save_sum_) {
          StoreAs(s, h, sp + row * h);
          st[2 * row] = mean;
          st[2 * row + 1] = rstd;
        }
      }
    });
  }

 private:
  DropoutAttrs drop_;
  float epsilon_ = 1e-12f;
  bool save_sum_ = true;
};

// ----------------------------------------------------------------- backward
template <typename T>
class ResidualNormGradOp : public OpKernel {
 public:
  explicit ResidualNormGradOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, drop_.Read(ctx));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("share", &share_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& dy = ctx->input(0);
    const Tensor& s_in = ctx->input(1);
    const Tensor& stats = ctx->input(2);
    const Tensor& gamma = ctx->input(3);
    const Tensor& key = ctx->input(4);
    int64_t n, h;
    OP_REQUIRES_OK(ctx, RowsOf(dy, "dy", &n, &h));
    OP_REQUIRES_OK(ctx, CheckSameShape(s_in, "sum", dy, "dy"));
    OP_REQUIRES_OK(ctx, CheckShape(stats, "stats", {n, 2}));
    OP_REQUIRES_OK(ctx, CheckVector(gamma, "gamma", h));
    OP_REQUIRES_OK(ctx, CheckVector(key, "key", 2));
    OP_REQUIRES(ctx, !share_ || (drop_.threshold == 0 && drop_.gain == 1.f),
                InvalidArgument("share needs no dropout"));
    Tensor *dx, *dres, *dgamma, *dbeta;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(
                            0, share_ ? TensorShape({0}) : dy.shape(), &dx));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, dy.shape(), &dres));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, TensorShape({h}), &dgamma));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(3, TensorShape({h}), &dbeta));
    float* dg = dgamma->flat<float>().data();
    float* db = dbeta->flat<float>().data();
    std::fill(dg, dg + h, 0.f);
    std::fill(db, db + h, 0.f);
    if (n == 0 || h == 0) return;
    uint32_t k0, k1;
    ReadKey(key, &k0, &k1);
    const T* dyp = dy.flat<T>().data();
    const T* sp = s_in.flat<T>().data();
    const float* st = stats.flat<float>().data();
    const float* g = gamma.flat<float>().data();
    T* dxp = share_ ? nullptr : dx->flat<T>().data();
    T* drp = dres->flat<T>().data();
    const float gain = GainInT<T>(drop_.gain);
    const uint16_t threshold = static_cast<uint16_t>(drop_.threshold);
    const bool dropout = drop_.threshold > 0;
    const int64_t groups = (n + kRowsPerPartial - 1) / kRowsPerPartial;
    // [groups, 2, h]: each group's gamma and beta gradient, summed below in
    // group order.
    std::vector<float> partials(groups * 2 * h, 0.f);
    auto* workers = ctx->device()->tensorflow_cpu_worker_threads()->workers;
    workers->ParallelFor(
        groups, 40 * h * kRowsPerPartial, [&](int64_t gbegin, int64_t gend) {
          RowScratch sc(h);
          float* d = sc.a.data();    // dy, then d(sum)
          float* xh = sc.b.data();   // normalized input
          float* dg_ = sc.c.data();  // dy * gamma
          for (int64_t grp = gbegin; grp < gend; ++grp) {
            float* pg = partials.data() + grp * 2 * h;
            float* pb = pg + h;
            const int64_t last = std::min(n, (grp + 1) * kRowsPerPartial);
            for (int64_t row = grp * kRowsPerPartial; row < last; ++row) {
              const float mean = st[2 * row], rstd = st[2 * row + 1];
              Widen(dyp + row * h, h, d);
              Widen(sp + row * h, h, xh);
              for (int64_t c = 0; c < h; ++c) {
                xh[c] = (xh[c] - mean) * rstd;
                pg[c] += d[c] * xh[c];
                pb[c] += d[c];
                dg_[c] = d[c] * g[c];
              }
              const float inv_h = 1.f / static_cast<float>(h);
              const float mean_dg = RowSum(dg_, h) * inv_h;
              const float mean_dgx = RowDot(dg_, xh, h) * inv_h;
              for (int64_t c = 0; c < h; ++c) {
                d[c] = rstd * (dg_[c] - mean_dg - xh[c] * mean_dgx);
              }
              RoundThroughT<T>(d, h, sc.narrow.data());
              StoreAs(d, h, drp + row * h);
              if (share_) continue;
              if (dropout) {
                ApplyMaskTo(d, PhiloxHalves(k0, k1, row * h, h, &sc.words),
                            h, threshold, d);
              }
              for (int64_t c = 0; c < h; ++c) d[c] *= gain;
              StoreAs(d, h, dxp + row * h);
            }
          }
        });
    for (int64_t grp = 0; grp < groups; ++grp) {
      const float* pg = partials.data() + grp * 2 * h;
      for (int64_t c = 0; c < h; ++c) {
        dg[c] += pg[c];
        db[c] += pg[h + c];
      }
    }
  }

 private:
  DropoutAttrs drop_;
  bool share_ = false;
};

// ------------------------------------------------------------- registration
REGISTER_OP("EtcResidualNorm")
    .Input("x: T")
    .Input("residual: T")
    .Input("gamma: float")
    .Input("beta: float")
    .Input("key: int32")
    .Output("y: T")
    .Output("sum: T")
    .Output("stats: float")
    .Attr("T: {float, bfloat16, half}")
    .Attr("threshold: int")
    .Attr("gain: float")
    .Attr("epsilon: float")
    .Attr("save_sum: bool = true")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle x;
      TF_RETURN_IF_ERROR(c->WithRankAtLeast(c->input(0), 1, &x));
      bool save;
      TF_RETURN_IF_ERROR(c->GetAttr("save_sum", &save));
      c->set_output(0, x);
      c->set_output(1, save ? x : c->MakeShape({0}));
      c->set_output(2, save ? c->MakeShape({c->UnknownDim(), 2})
                            : c->MakeShape({0}));
      return Status();
    });

REGISTER_OP("EtcResidualNormGrad")
    .Input("dy: T")
    .Input("sum: T")
    .Input("stats: float")
    .Input("gamma: float")
    .Input("key: int32")
    .Output("dx: T")
    .Output("d_residual: T")
    .Output("d_gamma: float")
    .Output("d_beta: float")
    .Attr("T: {float, bfloat16, half}")
    .Attr("threshold: int")
    .Attr("gain: float")
    .Attr("share: bool = false")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle dy;
      TF_RETURN_IF_ERROR(c->WithRankAtLeast(c->input(0), 1, &dy));
      bool share;
      TF_RETURN_IF_ERROR(c->GetAttr("share", &share));
      c->set_output(0, share ? c->MakeShape({0}) : dy);
      c->set_output(1, dy);
      c->set_output(2, c->MakeShape({c->Dim(dy, -1)}));
      c->set_output(3, c->MakeShape({c->Dim(dy, -1)}));
      return Status();
    });

ETC_REGISTER_CPU_KERNEL("EtcResidualNorm", ResidualNormOp);
ETC_REGISTER_CPU_KERNEL("EtcResidualNormGrad", ResidualNormGradOp);

}  // namespace
}  // namespace etc_realformer
