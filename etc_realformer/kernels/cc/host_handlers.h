// The host handlers: plain C++ loops of the kernels' math (the CPU, the
// tests).
// Part of attention_ffi.cc's one translation unit (its definitions are
// internal to the library).
#ifndef ETC_REALFORMER_KERNELS_CC_HOST_HANDLERS_H_
#define ETC_REALFORMER_KERNELS_CC_HOST_HANDLERS_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "branch_checks.h"
#include "elements.h"
#include "format.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

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

// ---------------------------------------------------------- branch: on host
// A branch's operands read as float32, and what both passes compute per
// query row: the scores and logits, and the dropout's keep decisions.
class HostBranch {
 public:
  HostBranch(const BranchOperands& in, const BranchOptions& o,
             const BranchShape& s)
      : o_(o), s_(s), el_{in.q.element_type()}, q_(el_.Read(in.q)),
        keys_{el_.Read(in.k1), el_.Read(in.k2)},
        values_{el_.Read(in.v1), el_.Read(in.v2)},
        per_id_(in.per_id.typed_data()),
        codes_{in.codes1.typed_data(), in.codes2.typed_data()},
        code_stride_{s.codes1_stride, s.width[1]},
        valid_(in.valid.typed_data()) {
    const ffi::AnyBuffer* prev[2] = {&in.prev1, &in.prev2};
    const ffi::AnyBuffer* src_k[2] = {&in.src_k1, &in.src_k2};
    for (int p = 0; p < 2; ++p) {
      if (o.reads_prev(p)) prev_[p] = Element{prev[p]->element_type()}.Read(
          *prev[p]);
      if (o.sources > 0 && o.read[p]) src_k_[p] = el_.Read(*src_k[p]);
    }
    if (o.sources > 0) src_q_ = el_.Read(in.src_q);
    if (o.dropout()) std::memcpy(key_, in.seeds.untyped_data(), sizeof(key_));
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

  // A query row: its batch, head and index, and its offsets in the per-row
  // ([B, N, ...]) and per-head ([B, H, N, ...]) tensors.
  struct Row {
    int64_t bi, h, i, bh, row, head_row;
  };

  // Calls fn(row, scores, logits) for each query row in order, with the
  // row's `Scores` (whose error ends the pass).
  template <typename Fn>
  ffi::Error ForEachRow(const char* call, Fn&& fn) const {
    std::vector<float> scores(s_.width[0] + s_.width[1]);
    std::vector<float> logits(scores.size());
    for (int64_t bi = 0; bi < s_.batch; ++bi) {
      for (int64_t h = 0; h < s_.heads; ++h) {
        const int64_t bh = bi * s_.heads + h;
        for (int64_t i = 0; i < s_.rows; ++i) {
          if (auto e = Scores(call, bi, h, i, scores.data(), logits.data());
              !e.success()) {
            return e;
          }
          fn(Row{bi, h, i, bh, bi * s_.rows + i, bh * s_.rows + i}, scores,
             logits);
        }
      }
    }
    return ffi::Error::Success();
  }

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
  const BranchOptions& o_;
  const BranchShape& s_;
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
ffi::Error BranchForwardOnHost(const BranchOperands& in,
                               const BranchOptions& o,
                               const ForwardResults& r) {
  BranchShape s;
  if (auto e = CheckForward(in, r, o, &s); !e.success()) return e;
  const HostBranch branch(in, o, s);
  const Element& el = branch.element();
  const ffi::AnyBuffer* new_out[2] = {&r.new1, &r.new2};
  std::vector<float> next[2];
  for (int p = 0; p < 2; ++p) {
    if (o.emit[p]) next[p].assign(s.batch * s.heads * s.rows * s.width[p], 0);
  }
  const int64_t d = s.size_per_head, c1 = s.width[0];
  std::vector<float> out(s.batch * s.heads * s.rows * d, 0.0f);
  float* lse_out = r.lse.typed_data();
  const ffi::Error e = branch.ForEachRow(
      kForward, [&](const HostBranch::Row& q,
                    const std::vector<float>& scores,
                    std::vector<float>& logits) {
    const auto& [bi, h, i, bh, row, head_row] = q;
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
    float scale = branch.Valid(row) / total;
    if (o.dropout()) scale *= o.gain;
    const uint32_t index_row = branch.IndexRow(bi, h, i);
    float* o_row = &out[head_row * d];
    for (int p = 0; p < 2; ++p) {
      for (int64_t c = 0; c < s.width[p]; ++c) {
        float prob = logits[p * c1 + c] * scale;
        if (o.dropout() && !branch.Keep(p, index_row, i, c)) prob = 0.0f;
        prob = el.Round(prob);
        const float* v = branch.Value(p, branch.KeyOffset(p, bh, i, c));
        for (int64_t x = 0; x < d; ++x) o_row[x] += prob * v[x];
      }
    }
  });
  if (!e.success()) return e;
  el.Write(out, r.ctx.untyped_data());
  for (int p = 0; p < 2; ++p) {
    if (o.emit[p]) {
      Element{new_out[p]->element_type()}.Write(next[p],
                                                new_out[p]->untyped_data());
    }
  }
  return ffi::Error::Success();
}

// The gradient, one pass per query row as `reference.branch_backward`
// defines it, float32 throughout: the probabilities recomputed from lse,
// delta = dctx . ctx (the context as the forward wrote it, as the kernels
// read it), and each score's gradient ds into dq, dk, the per-id sums and
// the previous sum's gradient; ds and the dropped probabilities are
// rounded to the inputs' type before the products with the inputs, as the
// kernels' products round them.
ffi::Error BranchBackwardOnHost(const BranchOperands& in,
                                const BackwardOperands& y,
                                const BranchOptions& o,
                                const BackwardResults& r) {
  BranchShape s;
  if (auto e = CheckBranchBackward(in, y, r, o, &s); !e.success()) return e;
  const HostBranch branch(in, o, s);
  const Element& el = branch.element();
  const std::vector<float> out = el.Read(y.ctx), dout = el.Read(y.dctx);
  const ffi::AnyBuffer* dnew_in[2] = {&y.dnew1, &y.dnew2};
  const ffi::AnyBuffer* dprev_out[2] = {&r.dprev1, &r.dprev2};
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
  float* dper = r.dper_id.typed_data();
  std::fill_n(dper, r.dper_id.element_count(), 0.0f);
  const float* lse_in = y.lse.typed_data();
  float* delta_out = r.delta.typed_data();
  const ffi::Error e = branch.ForEachRow(
      kBackward, [&](const HostBranch::Row& q, const std::vector<float>&,
                     std::vector<float>& logits) {
    const auto& [bi, h, i, bh, row, head_row] = q;
    const float* qi = branch.Query(head_row);
    const float* do_i = &dout[head_row * d];
    const float* ctx_i = &out[head_row * d];
    float delta_i = 0.0f;
    for (int64_t x = 0; x < d; ++x) delta_i += do_i[x] * ctx_i[x];
    delta_out[head_row] = delta_i;
    const float lse_i = lse_in[head_row], valid_i = branch.Valid(row);
    const uint32_t index_row = branch.IndexRow(bi, h, i);
    float* dq_i = &dq_sum[head_row * d];
    for (int p = 0; p < 2; ++p) {
      for (int64_t c = 0; c < s.width[p]; ++c) {
        const int64_t offset = branch.KeyOffset(p, bh, i, c);
        const float* k = branch.Key(p, offset);
        const float* v = branch.Value(p, offset);
        const float prob = std::exp(logits[p * c1 + c] - lse_i) * valid_i;
        float dp = 0.0f;
        for (int64_t x = 0; x < d; ++x) dp += do_i[x] * v[x];
        float dropped = prob;
        if (o.dropout()) {
          const bool keep = branch.Keep(p, index_row, i, c);
          dp = keep ? dp * o.gain : 0.0f;
          dropped = keep ? prob * o.gain : 0.0f;
        }
        const int64_t cell = head_row * s.width[p] + c;
        float ds = prob * (dp - delta_i) * o.scale[p];
        if (o.emit[p]) ds += dnew[p][cell];
        if (o.read[p]) dprev[p][cell] = ds;
        const int8_t code = branch.Code(p, row, c);
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
  });
  if (!e.success()) return e;
  el.Write(dq_sum, r.dq.untyped_data());
  el.Write(dk_sum[0], r.dk1.untyped_data());
  el.Write(dv_sum[0], r.dv1.untyped_data());
  el.Write(dk_sum[1], r.dk2.untyped_data());
  el.Write(dv_sum[1], r.dv2.untyped_data());
  for (int p = 0; p < 2; ++p) {
    if (o.read[p]) {
      Element{dprev_out[p]->element_type()}.Write(
          dprev[p], dprev_out[p]->untyped_data());
    }
  }
  return ffi::Error::Success();
}

}  // namespace

#endif  // ETC_REALFORMER_KERNELS_CC_HOST_HANDLERS_H_
