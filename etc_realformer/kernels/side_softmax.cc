// The elementwise core of one query side of ETC attention, fused (CPU).
//
// One query side (long: l2l + l2g; global: g2g + g2l) turns two raw score
// tensors into two dropped-out probability tensors:
//
//   s      = raw + rel_per_id[id] (+ stream_in)        -> new stream
//   logits = s (/ num_summed) + mask_adder
//   p      = valid * gain * softmax over both pieces' keys
//   probs  = keep ? p : 0, in the compute dtype T
//
// In TensorFlow ops that chain is ~15 passes over the [B, H, N, keys]
// tensors forward and as many backward (gathers of the relative scores and
// their UnsortedSegmentSum gradients, pads and slices of the band layout,
// casts, the dropout mask's random bits and selects); on CPU it cost more
// than the attention's matrix products (docs/benchmarks.md, session 12).
// Here each row of queries is read and written once. XLA is TensorFlow's
// own fuser, but its CPU backend ran this softmax 4x slower than the TF op.
//
// The result matches the TensorFlow path of etc_realformer/layers/attention.py
// to float32 rounding (same summation order of the score terms, Eigen's exp
// as tf.exp; sums over a row in another order) and draws the same dropout
// masks: TF's Philox stream, element e of the mask using the 16-bit half e
// of the stream, laid out as `row_dropout` lays it out.
//
// Layouts (all row-major; Q rows of queries, NQ >= Q rows in the output):
//   raw_a      T      [B, H, NQ, KA]   piece A (band: the blocked l2l scores,
//                                       NQ = nb * b, KA = 3b; dense: g2g)
//   raw_b      T      [B, H, QB, KB]   piece B (l2g / g2l); rows >= QB are 0
//   per_id     float  [B, QR, R, H]    relative score per id (rows >= QR: 0)
//   ids_a      int32  [B, QR, WA]      band: window layout (WA = 2r + 1);
//                                       dense: WA = KA
//   ids_b      int32  [B, QR, KB]
//   stream_a   float  [B, H, NQ, KA]   (empty when the piece carries none in)
//   stream_b   float  [B, H, NQ, KB]
//   adder_a    float  [B, 1, NQ, KA]   mask adders (0 or -10000)
//   adder_b    float  [B, 1, NQ, KB]
//   valid      float  [B, 1, NQ, 1]    0 zeroes a row
//   keys       int32  [2, 2]           folded dropout seeds of pieces A and B

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <type_traits>
#include <vector>

#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "Eigen/Core"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "cpu_common.h"

namespace etc_realformer {
namespace {

// Where element (batch, head, query q, column 0) of a piece with `keys`
// columns sits in its dropout mask: `row_dropout` draws the mask rows first,
// [rows, B, H, rows_per_drop_row, keys], a drop row being a block of queries
// (long side) or one query (global side), counted from `row_start`.
inline uint64_t MaskIndex(int64_t batch, int64_t head, int64_t q,
                          int64_t num_batch, int64_t num_heads,
                          int64_t per_drop_row, int64_t row_start,
                          int64_t keys) {
  const int64_t drop_row = row_start + q / per_drop_row;
  const int64_t in_row = q % per_drop_row;
  return ((static_cast<uint64_t>(drop_row) * num_batch + batch) * num_heads +
          head) * static_cast<uint64_t>(per_drop_row * keys) +
         static_cast<uint64_t>(in_row * keys);
}

// ------------------------------------------------------------------- shapes
struct Dims {
  int64_t batch, heads, nq, ka, qb, kb, qr, num_ids, wa;
};

struct Attrs {
  bool band = false;
  int block_len = 1;  // queries per drop row (band: b = r + 1)
  int row_start = 0;
  int threshold = 0;  // keep iff 16-bit number >= threshold; 0: no dropout
  float gain = 1.f;
  float num_summed = 1.f;
  bool use_rel_a = false, use_rel_b = false;
  bool stream_in_a = false, stream_in_b = false;
  bool emit_a = false, emit_b = false;

  Status Read(OpKernelConstruction* ctx) {
    TF_RETURN_IF_ERROR(ctx->GetAttr("band", &band));
    TF_RETURN_IF_ERROR(ctx->GetAttr("block_len", &block_len));
    TF_RETURN_IF_ERROR(ctx->GetAttr("row_start", &row_start));
    TF_RETURN_IF_ERROR(ctx->GetAttr("threshold", &threshold));
    TF_RETURN_IF_ERROR(ctx->GetAttr("gain", &gain));
    TF_RETURN_IF_ERROR(ctx->GetAttr("num_summed", &num_summed));
    TF_RETURN_IF_ERROR(ctx->GetAttr("use_rel_a", &use_rel_a));
    TF_RETURN_IF_ERROR(ctx->GetAttr("use_rel_b", &use_rel_b));
    TF_RETURN_IF_ERROR(ctx->GetAttr("stream_in_a", &stream_in_a));
    TF_RETURN_IF_ERROR(ctx->GetAttr("stream_in_b", &stream_in_b));
    TF_RETURN_IF_ERROR(ctx->GetAttr("emit_a", &emit_a));
    TF_RETURN_IF_ERROR(ctx->GetAttr("emit_b", &emit_b));
    if (block_len < 1) return InvalidArgument("block_len must be >= 1");
    if (threshold < 0 || threshold > 65535) {
      return InvalidArgument("threshold must be in [0, 65535]");
    }
    return Status();
  }
};

// Reads and checks the shapes shared by the forward and the backward op:
// piece A's scores (or their gradient) give B, H, NQ, KA; `qb`, `kb` are
// piece B's rows and keys; `per_id` the relative table's shape (the backward
// op gets these sizes, not the tensors, which it would keep alive).
Status ReadDims(const Attrs& at, const Tensor& raw_a, int64_t qb, int64_t kb,
                const TensorShape& per_id, const Tensor& ids_a,
                const Tensor& ids_b, const Tensor& valid, Dims* d) {
  TF_RETURN_IF_ERROR(CheckShape(raw_a, "raw_a", {-1, -1, -1, -1}));
  d->batch = raw_a.dim_size(0);
  d->heads = raw_a.dim_size(1);
  d->nq = raw_a.dim_size(2);
  d->ka = raw_a.dim_size(3);
  d->qb = qb;
  d->kb = kb;
  if (d->qb > d->nq) return InvalidArgument("raw_b has more rows than raw_a");
  if (at.band) {
    if (d->ka != 3 * at.block_len) {
      return InvalidArgument("band: raw_a's last dimension must be 3 * ",
                             at.block_len, ", got ", d->ka);
    }
    if (d->nq % at.block_len != 0) {
      return InvalidArgument("band: raw_a's rows must be whole blocks");
    }
  }
  TF_RETURN_IF_ERROR(CheckShape(valid, "valid", {d->batch, 1, d->nq, 1}));
  d->qr = 0;
  d->num_ids = 0;
  d->wa = 0;
  if (at.use_rel_a || at.use_rel_b) {
    if (per_id.dims() != 4 || per_id.dim_size(0) != d->batch ||
        per_id.dim_size(3) != d->heads) {
      return InvalidArgument("per_id must be [", d->batch, ", rows, ids, ",
                             d->heads, "], got ", per_id.DebugString());
    }
    d->qr = per_id.dim_size(1);
    d->num_ids = per_id.dim_size(2);
    if (d->qr > d->nq) return InvalidArgument("per_id has too many rows");
  }
  if (at.use_rel_a) {
    const int64_t wa = at.band ? 2 * at.block_len - 1 : d->ka;
    TF_RETURN_IF_ERROR(CheckShape(ids_a, "ids_a", {d->batch, d->qr, wa}));
    d->wa = wa;
  }
  if (at.use_rel_b) {
    TF_RETURN_IF_ERROR(CheckShape(ids_b, "ids_b", {d->batch, d->qr, d->kb}));
  }
  // An id outside the table would read outside it (TF's gather fails there).
  for (const auto& [ids, name, use] :
       {std::make_tuple(&ids_a, "ids_a", at.use_rel_a),
        std::make_tuple(&ids_b, "ids_b", at.use_rel_b)}) {
    if (!use) continue;
    const auto flat = ids->flat<int32_t>();
    for (int64_t i = 0; i < flat.size(); ++i) {
      if (static_cast<uint32_t>(flat(i)) >= static_cast<uint64_t>(d->num_ids)) {
        return InvalidArgument(name, " holds relative id ", flat(i),
                               " outside [0, ", d->num_ids, ")");
      }
    }
  }
  return Status();
}

// Relative tables of one query are copied head-major, [H, kTableWidth]
// (zero padded), so that with <= 32 ids one head's table sits in two
// vector registers and a lookup of 16 keys is one permute.
constexpr int64_t kTableWidth = 32;

inline int64_t TableWidth(int64_t num_ids) {
  return std::max(num_ids, kTableWidth);
}

// x[c] += tab[ids[c]] (the relative score of each key).
inline void AddRelative(const int32_t* __restrict ids, int64_t n,
                        const float* __restrict tab, int64_t num_ids,
                        float* __restrict x) {
  int64_t c = 0;
#if defined(__AVX512F__)
  if (num_ids <= kTableWidth) {
    const __m512 lo = _mm512_loadu_ps(tab), hi = _mm512_loadu_ps(tab + 16);
    for (; c + 16 <= n; c += 16) {
      const __m512i idx = _mm512_loadu_si512(ids + c);
      _mm512_storeu_ps(x + c, _mm512_add_ps(_mm512_loadu_ps(x + c),
                                            _mm512_permutex2var_ps(lo, idx,
                                                                   hi)));
    }
  }
#endif
  for (; c < n; ++c) x[c] += tab[ids[c]];
}

// parts[(c % 8) * num_ids + ids[c]] += g[c]: eight partial tables, so that
// runs of one id (the clipped distances, l2g's two sentence ids) do not
// chain every add through memory.
constexpr int kParts = 8;
inline void ScatterAdd(const int32_t* __restrict ids, int64_t n,
                       const float* __restrict g, int64_t num_ids,
                       float* __restrict parts) {
  int64_t c = 0;
  for (; c + kParts <= n; c += kParts) {
    for (int j = 0; j < kParts; ++j) parts[j * num_ids + ids[c + j]] += g[c + j];
  }
  for (; c < n; ++c) parts[ids[c]] += g[c];
}


// g[c] = 0 where the mask dropped element c.
inline void ApplyMask(const uint16_t* __restrict halves, int64_t n,
                      uint16_t threshold, float* __restrict g) {
  ApplyMaskTo(g, halves, n, threshold, g);
}

// ------------------------------------------------------------ iteration
// Row buffers are padded to whole 16-float vectors.
inline int64_t PadToVector(int64_t n) { return (n + 15) / 16 * 16; }

// Per-thread scratch of one query (all its heads).
struct Scratch {
  std::vector<float> buf;        // one row's logits / gradients (KA + KB)
  std::vector<float> out;        // one row's probabilities (KA + KB)
  std::vector<uint16_t> narrow;  // one piece's row in a 16-bit dtype
  std::vector<float> tab;        // relative table of one query (see below)
  std::vector<float> parts;      // ScatterAdd's partial tables
  std::vector<uint32_t> words;   // Philox output of one row
};

// Writes n values of `src` as T to `dst` (streamed), through scratch.
template <typename T>
inline void StreamAs(const float* src, int64_t n, T* dst, Scratch* sc) {
  if constexpr (std::is_same_v<T, float>) {
    StreamBytes(dst, src, n * sizeof(float));
  } else {
    static_assert(sizeof(T) == sizeof(uint16_t));
    uint16_t* tmp = sc->narrow.data();
    NarrowTo16(src, n, static_cast<T*>(nullptr), tmp);
    StreamBytes(dst, tmp, n * sizeof(T));
  }
}

// Hands the queries (batch, q) to the thread pool; `fn(batch, q, scratch)`
// does all heads of one query, so the query's mask adders, ids and relative
// table are read once for all its heads.
template <typename Fn>
void ForEachQuery(OpKernelContext* ctx, const Dims& d, Fn fn) {
  const int64_t queries = d.batch * d.nq;
  const int64_t cost = 40 * d.heads * (d.ka + d.kb);
  auto* workers = ctx->device()->tensorflow_cpu_worker_threads()->workers;
  workers->ParallelFor(queries, cost, [&](int64_t begin, int64_t end) {
    Scratch scratch;
    scratch.buf.resize(PadToVector(d.ka + d.kb));
    scratch.out.resize(d.ka + d.kb);
    scratch.narrow.resize(std::max(d.ka, d.kb));
    scratch.tab.resize(d.heads * TableWidth(d.num_ids));
    scratch.parts.resize(kParts * std::max<int64_t>(d.num_ids, 1));
    for (int64_t query = begin; query < end; ++query) {
      fn(query / d.nq, query % d.nq, &scratch);
    }
    FenceStreams();
  });
}

// ------------------------------------------------------------------ forward
template <typename T>
class SideSoftmaxOp : public OpKernel {
 public:
  explicit SideSoftmaxOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, at_.Read(ctx));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("save_probs", &save_probs_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& raw_a = ctx->input(0);
    const Tensor& raw_b = ctx->input(1);
    const Tensor& per_id = ctx->input(2);
    const Tensor& ids_a = ctx->input(3);
    const Tensor& ids_b = ctx->input(4);
    const Tensor& stream_a = ctx->input(5);
    const Tensor& stream_b = ctx->input(6);
    const Tensor& adder_a = ctx->input(7);
    const Tensor& adder_b = ctx->input(8);
    const Tensor& valid = ctx->input(9);
    const Tensor& keys = ctx->input(10);
    OP_REQUIRES_OK(ctx, CheckShape(raw_b, "raw_b", {raw_a.dim_size(0),
                                                    raw_a.dim_size(1), -1, -1}));
    Dims d;
    OP_REQUIRES_OK(ctx, ReadDims(at_, raw_a, raw_b.dim_size(2),
                                 raw_b.dim_size(3), per_id.shape(), ids_a,
                                 ids_b, valid, &d));
    OP_REQUIRES_OK(ctx, CheckShape(adder_a, "adder_a",
                                   {d.batch, 1, d.nq, d.ka}));
    OP_REQUIRES_OK(ctx, CheckShape(adder_b, "adder_b",
                                   {d.batch, 1, d.nq, d.kb}));
    if (at_.stream_in_a) {
      OP_REQUIRES_OK(ctx, CheckShape(stream_a, "stream_a",
                                     {d.batch, d.heads, d.nq, d.ka}));
    }
    if (at_.stream_in_b) {
      OP_REQUIRES_OK(ctx, CheckShape(stream_b, "stream_b",
                                     {d.batch, d.heads, d.nq, d.kb}));
    }
    const bool dropout = at_.threshold > 0;
    if (dropout) OP_REQUIRES_OK(ctx, CheckShape(keys, "keys", {2, 2}));

    const int64_t bh = d.batch * d.heads;
    Tensor *probs_a, *probs_b, *new_a, *new_b, *p_a, *p_b;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(
        0, TensorShape({d.batch, d.heads, d.nq, d.ka}), &probs_a));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(
        1, TensorShape({d.batch, d.heads, d.nq, d.kb}), &probs_b));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(
        2, at_.emit_a ? TensorShape({d.batch, d.heads, d.nq, d.ka})
                      : TensorShape({0}), &new_a));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(
        3, at_.emit_b ? TensorShape({d.batch, d.heads, d.nq, d.kb})
                      : TensorShape({0}), &new_b));
    // The probabilities for the gradient: not written for inference
    // (`save_probs` false); a gradient then recomputes them.
    OP_REQUIRES_OK(ctx, ctx->allocate_output(
        4, save_probs_ ? TensorShape({d.batch, d.heads, d.nq, d.ka})
                       : TensorShape({0}), &p_a));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(
        5, save_probs_ ? TensorShape({d.batch, d.heads, d.nq, d.kb})
                       : TensorShape({0}), &p_b));
    if (bh * d.nq == 0) return;

    const T* ra = raw_a.flat<T>().data();
    const T* rb = raw_b.flat<T>().data();
    const float* pid = (d.qr > 0) ? per_id.flat<float>().data() : nullptr;
    const int32_t* ia = at_.use_rel_a ? ids_a.flat<int32_t>().data() : nullptr;
    const int32_t* ib = at_.use_rel_b ? ids_b.flat<int32_t>().data() : nullptr;
    const float* sa = at_.stream_in_a ? stream_a.flat<float>().data() : nullptr;
    const float* sb = at_.stream_in_b ? stream_b.flat<float>().data() : nullptr;
    const float* aa = adder_a.flat<float>().data();
    const float* ab = adder_b.flat<float>().data();
    const float* vl = valid.flat<float>().data();
    int32_t key[4] = {0, 0, 0, 0};
    if (dropout) {
      auto k = keys.flat<int32_t>();
      for (int i = 0; i < 4; ++i) key[i] = k(i);
    }
    T* pa_out = probs_a->flat<T>().data();
    T* pb_out = probs_b->flat<T>().data();
    float* na = at_.emit_a ? new_a->flat<float>().data() : nullptr;
    float* nb = at_.emit_b ? new_b->flat<float>().data() : nullptr;
    float* pa_keep = save_probs_ ? p_a->flat<float>().data() : nullptr;
    float* pb_keep = save_probs_ ? p_b->flat<float>().data() : nullptr;
    const Attrs at = at_;
    const int r2 = 2 * at.block_len - 1;  // band window width

    ForEachQuery(ctx, d, [&](int64_t bt, int64_t q, Scratch* sc) {
      const int64_t mrow = bt * d.nq + q;  // adder / valid / ids row
      const float* adda = aa + mrow * d.ka;
      const float* addb = ab + mrow * d.kb;
      const bool rel_row = q < d.qr;
      // This query's relative scores, head-major: tab[h * width + id].
      const int64_t width = TableWidth(d.num_ids);
      float* tab = sc->tab.data();
      if (rel_row) {
        const float* src = pid + (bt * d.qr + q) * d.num_ids * d.heads;
        std::fill(tab, tab + d.heads * width, 0.f);
        for (int64_t r = 0; r < d.num_ids; ++r) {
          for (int64_t h = 0; h < d.heads; ++h) {
            tab[h * width + r] = src[r * d.heads + h];
          }
        }
      }
      const int32_t* rids_a = (at.use_rel_a && rel_row) ? ia + (bt * d.qr + q)
                                                          * d.wa : nullptr;
      const int32_t* rids_b = (at.use_rel_b && rel_row) ? ib + (bt * d.qr + q)
                                                          * d.kb : nullptr;
      const int64_t first = q % at.block_len + 1;  // band: window column 0
      float* la = sc->buf.data();
      float* lb = la + d.ka;
      const int64_t k = d.ka + d.kb, k_pad = PadToVector(k);
      for (int64_t h = 0; h < d.heads; ++h) {
        const int64_t row = (bt * d.heads + h) * d.nq + q;
        const int64_t arow = row * d.ka, brow = row * d.kb;
        // ---- piece A: raw (+ relative) (+ stream in)
        Widen(ra + arow, d.ka, la);
        if (rids_a) {
          if (at.band) {
            // Window entry w of in-block query a sits at column a + 1 + w.
            AddRelative(rids_a, r2, tab + h * width, d.num_ids, la + first);
          } else {
            AddRelative(rids_a, d.ka, tab + h * width, d.num_ids, la);
          }
        }
        if (sa) {
          const float* __restrict s = sa + arow;
          for (int64_t c = 0; c < d.ka; ++c) la[c] += s[c];
        }
        if (na) StreamBytes(na + arow, la, d.ka * sizeof(float));
        // ---- piece B (rows past QB are zero raw scores)
        if (q < d.qb) {
          Widen(rb + ((bt * d.heads + h) * d.qb + q) * d.kb, d.kb, lb);
          if (rids_b) {
            AddRelative(rids_b, d.kb, tab + h * width, d.num_ids, lb);
          }
        } else {
          std::fill(lb, lb + d.kb, 0.f);
        }
        if (sb) {
          const float* __restrict s = sb + brow;
          for (int64_t c = 0; c < d.kb; ++c) lb[c] += s[c];
        }
        if (nb) StreamBytes(nb + brow, lb, d.kb * sizeof(float));
        // ---- logits, one softmax over both pieces
        if (at.num_summed != 1.f) {
          for (int64_t c = 0; c < k; ++c) la[c] /= at.num_summed;
        }
        for (int64_t c = 0; c < d.ka; ++c) la[c] += adda[c];
        for (int64_t c = 0; c < d.kb; ++c) lb[c] += addb[c];
        const float peak = RowMax(la, k);
        // The row is padded to whole vectors with -inf (exp: ~0).
        std::fill(la + k, la + k_pad, -INFINITY);
        RowExp(la, k_pad, peak);
        const float total = RowSum(la, k);
        float scale = vl[mrow] / total;
        if (at.gain != 1.f) scale = scale * at.gain;
        for (int64_t c = 0; c < k; ++c) la[c] *= scale;  // kept for the gradient
        if (pa_keep) {
          StreamBytes(pa_keep + arow, la, d.ka * sizeof(float));
          StreamBytes(pb_keep + brow, lb, d.kb * sizeof(float));
        }
        // ---- dropout and the compute dtype
        if (!dropout) {
          StreamAs(la, d.ka, pa_out + arow, sc);
          StreamAs(lb, d.kb, pb_out + brow, sc);
          continue;
        }
        const uint16_t thr = static_cast<uint16_t>(at.threshold);
        const uint16_t* halves = PhiloxHalves(
            key[0], key[1], MaskIndex(bt, h, q, d.batch, d.heads, at.block_len,
                                      at.row_start, d.ka),
            d.ka, &sc->words);
        float* dropped = sc->out.data();
        ApplyMaskTo(la, halves, d.ka, thr, dropped);
        halves = PhiloxHalves(
            key[2], key[3], MaskIndex(bt, h, q, d.batch, d.heads, at.block_len,
                                      at.row_start, d.kb),
            d.kb, &sc->words);
        ApplyMaskTo(lb, halves, d.kb, thr, dropped + d.ka);
        StreamAs(dropped, d.ka, pa_out + arow, sc);
        StreamAs(dropped + d.ka, d.kb, pb_out + brow, sc);
      }
    });
  }

 private:
  Attrs at_;
  bool save_probs_ = true;
};

// ----------------------------------------------------------------- backward
template <typename T>
class SideSoftmaxGradOp : public OpKernel {
 public:
  explicit SideSoftmaxGradOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, at_.Read(ctx));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("share_a", &share_a_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("share_b", &share_b_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& d_probs_a = ctx->input(0);
    const Tensor& d_probs_b = ctx->input(1);
    const Tensor& d_new_a = ctx->input(2);
    const Tensor& d_new_b = ctx->input(3);
    const Tensor& p_a = ctx->input(4);
    const Tensor& p_b = ctx->input(5);
    const Tensor& keys = ctx->input(6);
    const Tensor& valid = ctx->input(7);
    const Tensor& dims = ctx->input(8);
    const Tensor& ids_a = ctx->input(9);
    const Tensor& ids_b = ctx->input(10);
    OP_REQUIRES_OK(ctx, CheckShape(dims, "dims", {3}));
    OP_REQUIRES_OK(ctx, CheckShape(d_probs_b, "d_probs_b",
                                   {d_probs_a.dim_size(0),
                                    d_probs_a.dim_size(1),
                                    d_probs_a.dim_size(2), -1}));
    // [rows of raw_b, rows of per_id, relative ids]
    const auto sizes = dims.flat<int32_t>();
    TensorShape per_id_shape;
    if (at_.use_rel_a || at_.use_rel_b) {
      per_id_shape = TensorShape({d_probs_a.dim_size(0), sizes(1), sizes(2),
                                  d_probs_a.dim_size(1)});
    }
    Dims d;
    OP_REQUIRES_OK(ctx, ReadDims(at_, d_probs_a, sizes(0),
                                 d_probs_b.dim_size(3), per_id_shape, ids_a,
                                 ids_b, valid, &d));
    OP_REQUIRES_OK(ctx, CheckShape(d_probs_b, "d_probs_b",
                                   {d.batch, d.heads, d.nq, d.kb}));
    OP_REQUIRES_OK(ctx, CheckShape(p_a, "p_a", {d.batch, d.heads, d.nq, d.ka}));
    OP_REQUIRES_OK(ctx, CheckShape(p_b, "p_b", {d.batch, d.heads, d.nq, d.kb}));
    const bool dropout = at_.threshold > 0;
    const int64_t k = d.ka + d.kb;
    if (dropout) OP_REQUIRES_OK(ctx, CheckShape(keys, "keys", {2, 2}));
    const bool has_dna = at_.emit_a && d_new_a.NumElements() > 0;
    const bool has_dnb = at_.emit_b && d_new_b.NumElements() > 0;
    if (has_dna) {
      OP_REQUIRES_OK(ctx, CheckShape(d_new_a, "d_new_a",
                                     {d.batch, d.heads, d.nq, d.ka}));
    }
    if (has_dnb) {
      OP_REQUIRES_OK(ctx, CheckShape(d_new_b, "d_new_b",
                                     {d.batch, d.heads, d.nq, d.kb}));
    }
    // With `share_a` / `share_b` (float32, stream in, same rows) the raw
    // scores' gradient is the stream's: the caller uses d_stream for both and
    // d_raw is left empty, a pass of writes saved.
    OP_REQUIRES(ctx, !share_a_ || (at_.stream_in_a && sizeof(T) == 4),
                InvalidArgument("share_a needs float32 and a stream in"));
    OP_REQUIRES(ctx, !share_b_ || (at_.stream_in_b && sizeof(T) == 4 &&
                                   d.qb == d.nq),
                InvalidArgument("share_b needs float32, a stream in and "
                                "raw_b with all rows"));
    Tensor *d_raw_a, *d_raw_b, *d_stream_a, *d_stream_b, *d_per_id;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(
        0, share_a_ ? TensorShape({0})
                    : TensorShape({d.batch, d.heads, d.nq, d.ka}), &d_raw_a));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(
        1, share_b_ ? TensorShape({0})
                    : TensorShape({d.batch, d.heads, d.qb, d.kb}), &d_raw_b));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(
        2, at_.stream_in_a ? TensorShape({d.batch, d.heads, d.nq, d.ka})
                           : TensorShape({0}), &d_stream_a));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(
        3, at_.stream_in_b ? TensorShape({d.batch, d.heads, d.nq, d.kb})
                           : TensorShape({0}), &d_stream_b));
    const bool rel = at_.use_rel_a || at_.use_rel_b;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(
        4, rel ? TensorShape({d.batch, d.qr, d.num_ids, d.heads})
               : TensorShape({0}), &d_per_id));
    if (d.batch * d.heads * d.nq == 0) return;

    const T* dpa = d_probs_a.flat<T>().data();
    const T* dpb = d_probs_b.flat<T>().data();
    const float* dna = has_dna ? d_new_a.flat<float>().data() : nullptr;
    const float* dnb = has_dnb ? d_new_b.flat<float>().data() : nullptr;
    const float* pa_all = p_a.flat<float>().data();
    const float* pb_all = p_b.flat<float>().data();
    int32_t key[4] = {0, 0, 0, 0};
    if (dropout) {
      auto kf = keys.flat<int32_t>();
      for (int i = 0; i < 4; ++i) key[i] = kf(i);
    }
    const float* vl = valid.flat<float>().data();
    const int32_t* ia = at_.use_rel_a ? ids_a.flat<int32_t>().data() : nullptr;
    const int32_t* ib = at_.use_rel_b ? ids_b.flat<int32_t>().data() : nullptr;
    T* ora = share_a_ ? nullptr : d_raw_a->flat<T>().data();
    T* orb = share_b_ ? nullptr : d_raw_b->flat<T>().data();
    float* osa = at_.stream_in_a ? d_stream_a->flat<float>().data() : nullptr;
    float* osb = at_.stream_in_b ? d_stream_b->flat<float>().data() : nullptr;
    float* opid = rel ? d_per_id->flat<float>().data() : nullptr;
    const Attrs at = at_;
    const int r2 = 2 * at.block_len - 1;

    ForEachQuery(ctx, d, [&](int64_t bt, int64_t q, Scratch* sc) {
      const int64_t mrow = bt * d.nq + q;
      const bool rel_row = opid != nullptr && q < d.qr;
      const int32_t* rids_a = (at.use_rel_a && rel_row) ? ia + (bt * d.qr + q)
                                                          * d.wa : nullptr;
      const int32_t* rids_b = (at.use_rel_b && rel_row && q < d.qb)
                                  ? ib + (bt * d.qr + q) * d.kb : nullptr;
      const int64_t first = q % at.block_len + 1;
      float* tab = sc->tab.data();  // d per_id of this query, [R, H]
      if (rel_row) std::fill(tab, tab + d.num_ids * d.heads, 0.f);
      // p = c * softmax with c = gain * valid, so
      // d logits = p * (g - sum(g * p) / c); rows with c = 0 get 0.
      const float cw = vl[mrow] * at.gain;
      float* ga = sc->buf.data();  // d of the undropped probabilities
      float* gb = ga + d.ka;
      const int64_t k = d.ka + d.kb;
      for (int64_t h = 0; h < d.heads; ++h) {
        const int64_t row = (bt * d.heads + h) * d.nq + q;
        const int64_t arow = row * d.ka, brow = row * d.kb;
        const float* pa = pa_all + arow;
        const float* pb = pb_all + brow;
        if (cw == 0.f) {
          std::fill(ga, ga + k, 0.f);
        } else {
          Widen(dpa + arow, d.ka, ga);
          Widen(dpb + brow, d.kb, gb);
          if (dropout) {  // the forward pass's mask, drawn again
            const uint16_t thr = static_cast<uint16_t>(at.threshold);
            ApplyMask(PhiloxHalves(key[0], key[1],
                                   MaskIndex(bt, h, q, d.batch, d.heads,
                                             at.block_len, at.row_start, d.ka),
                                   d.ka, &sc->words),
                      d.ka, thr, ga);
            ApplyMask(PhiloxHalves(key[2], key[3],
                                   MaskIndex(bt, h, q, d.batch, d.heads,
                                             at.block_len, at.row_start, d.kb),
                                   d.kb, &sc->words),
                      d.kb, thr, gb);
          }
          const float rho =
              (RowDot(ga, pa, d.ka) + RowDot(gb, pb, d.kb)) / cw;
          for (int64_t c = 0; c < d.ka; ++c) ga[c] = pa[c] * (ga[c] - rho);
          for (int64_t c = 0; c < d.kb; ++c) gb[c] = pb[c] * (gb[c] - rho);
        }
        // d stream (summed in) = d logits / num_summed + d new stream.
        if (at.num_summed != 1.f) {
          for (int64_t c = 0; c < k; ++c) ga[c] /= at.num_summed;
        }
        if (dna) {
          const float* __restrict dn = dna + arow;
          for (int64_t c = 0; c < d.ka; ++c) ga[c] += dn[c];
        }
        if (dnb) {
          const float* __restrict dn = dnb + brow;
          for (int64_t c = 0; c < d.kb; ++c) gb[c] += dn[c];
        }
        if (ora) StreamAs(ga, d.ka, ora + arow, sc);
        if (orb && q < d.qb) {
          StreamAs(gb, d.kb, orb + ((bt * d.heads + h) * d.qb + q) * d.kb, sc);
        }
        if (osa) StreamBytes(osa + arow, ga, d.ka * sizeof(float));
        if (osb) StreamBytes(osb + brow, gb, d.kb * sizeof(float));
        if (rids_a || rids_b) {
          float* parts = sc->parts.data();
          std::fill(parts, parts + kParts * d.num_ids, 0.f);
          if (rids_a) {
            if (at.band) {
              ScatterAdd(rids_a, r2, ga + first, d.num_ids, parts);
            } else {
              ScatterAdd(rids_a, d.ka, ga, d.num_ids, parts);
            }
          }
          if (rids_b) ScatterAdd(rids_b, d.kb, gb, d.num_ids, parts);
          for (int64_t r = 0; r < d.num_ids; ++r) {
            float sum = 0.f;
            for (int j = 0; j < kParts; ++j) sum += parts[j * d.num_ids + r];
            tab[r * d.heads + h] = sum;
          }
        }
      }
      if (rel_row) {
        std::copy(tab, tab + d.num_ids * d.heads,
                  opid + (bt * d.qr + q) * d.num_ids * d.heads);
      }
    });
  }

 private:
  Attrs at_;
  bool share_a_ = false, share_b_ = false;
};

// ------------------------------------------------------------- registration
#define ETC_SIDE_ATTRS                                                     \
  Attr("T: {float, bfloat16, half}")                                       \
      .Attr("band: bool")                                                  \
      .Attr("block_len: int")                                              \
      .Attr("row_start: int")                                              \
      .Attr("threshold: int")                                              \
      .Attr("gain: float")                                                 \
      .Attr("num_summed: float")                                           \
      .Attr("use_rel_a: bool")                                             \
      .Attr("use_rel_b: bool")                                             \
      .Attr("stream_in_a: bool")                                           \
      .Attr("stream_in_b: bool")                                           \
      .Attr("emit_a: bool")                                                \
      .Attr("emit_b: bool")

Status SideSoftmaxShape(InferenceContext* c) {
  ShapeHandle raw_a, raw_b;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 4, &raw_a));
  TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 4, &raw_b));
  DimensionHandle kb = c->Dim(raw_b, 3);
  ShapeHandle lead = c->MakeShape({c->Dim(raw_a, 0), c->Dim(raw_a, 1),
                                   c->Dim(raw_a, 2)});
  ShapeHandle shape_b;
  TF_RETURN_IF_ERROR(c->Concatenate(lead, c->MakeShape({kb}), &shape_b));
  bool emit_a, emit_b;
  TF_RETURN_IF_ERROR(c->GetAttr("emit_a", &emit_a));
  TF_RETURN_IF_ERROR(c->GetAttr("emit_b", &emit_b));
  c->set_output(0, raw_a);
  c->set_output(1, shape_b);
  c->set_output(2, emit_a ? raw_a : c->MakeShape({0}));
  c->set_output(3, emit_b ? shape_b : c->MakeShape({0}));
  bool save_probs;
  TF_RETURN_IF_ERROR(c->GetAttr("save_probs", &save_probs));
  c->set_output(4, save_probs ? raw_a : c->MakeShape({0}));
  c->set_output(5, save_probs ? shape_b : c->MakeShape({0}));
  return Status();
}

REGISTER_OP("EtcSideSoftmax")
    .Input("raw_a: T")
    .Input("raw_b: T")
    .Input("per_id: float")
    .Input("ids_a: int32")
    .Input("ids_b: int32")
    .Input("stream_a: float")
    .Input("stream_b: float")
    .Input("adder_a: float")
    .Input("adder_b: float")
    .Input("valid: float")
    .Input("keys: int32")
    .Output("probs_a: T")
    .Output("probs_b: T")
    .Output("new_stream_a: float")
    .Output("new_stream_b: float")
    .Output("p_a: float")
    .Output("p_b: float")
    .ETC_SIDE_ATTRS
    .Attr("save_probs: bool = true")
    .SetShapeFn(SideSoftmaxShape);

REGISTER_OP("EtcSideSoftmaxGrad")
    .Input("d_probs_a: T")
    .Input("d_probs_b: T")
    .Input("d_new_stream_a: float")
    .Input("d_new_stream_b: float")
    .Input("p_a: float")
    .Input("p_b: float")
    .Input("keys: int32")
    .Input("valid: float")
    .Input("dims: int32")
    .Input("ids_a: int32")
    .Input("ids_b: int32")
    .Output("d_raw_a: T")
    .Output("d_raw_b: T")
    .Output("d_stream_a: float")
    .Output("d_stream_b: float")
    .Output("d_per_id: float")
    .ETC_SIDE_ATTRS
    .Attr("share_a: bool = false")
    .Attr("share_b: bool = false")
    .SetShapeFn([](InferenceContext* c) {
      bool in_a, in_b, rel_a, rel_b, share_a, share_b;
      TF_RETURN_IF_ERROR(c->GetAttr("share_a", &share_a));
      TF_RETURN_IF_ERROR(c->GetAttr("share_b", &share_b));
      TF_RETURN_IF_ERROR(c->GetAttr("stream_in_a", &in_a));
      TF_RETURN_IF_ERROR(c->GetAttr("stream_in_b", &in_b));
      TF_RETURN_IF_ERROR(c->GetAttr("use_rel_a", &rel_a));
      TF_RETURN_IF_ERROR(c->GetAttr("use_rel_b", &rel_b));
      ShapeHandle d_a, d_b;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 4, &d_a));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 4, &d_b));
      // Rows of raw_b and the relative table's [rows, ids] come from `dims`.
      ShapeHandle raw_b = c->MakeShape({c->Dim(d_a, 0), c->Dim(d_a, 1),
                                        c->UnknownDim(), c->Dim(d_b, 3)});
      ShapeHandle per_id = c->MakeShape({c->Dim(d_a, 0), c->UnknownDim(),
                                         c->UnknownDim(), c->Dim(d_a, 1)});
      c->set_output(0, share_a ? c->MakeShape({0}) : d_a);
      c->set_output(1, share_b ? c->MakeShape({0}) : raw_b);
      c->set_output(2, in_a ? d_a : c->MakeShape({0}));
      c->set_output(3, in_b ? d_b : c->MakeShape({0}));
      c->set_output(4, (rel_a || rel_b) ? per_id : c->MakeShape({0}));
      return Status();
    });

ETC_REGISTER_CPU_KERNEL("EtcSideSoftmax", SideSoftmaxOp);
ETC_REGISTER_CPU_KERNEL("EtcSideSoftmaxGrad", SideSoftmaxGradOp);

}  // namespace
}  // namespace etc_realformer
