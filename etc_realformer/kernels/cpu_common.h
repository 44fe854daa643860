// Helpers shared by the fused CPU kernels (side_softmax.cc, residual_norm.cc,
// bias_gelu.cc): TF's Philox stream drawn many counters at a time, row
// reductions in a fixed order, exact dtype widening and TF-rounded
// narrowing, non-temporal stores, shape checks.
//
// Everything is in an anonymous namespace: each kernel source includes it
// and gets its own copy (the library is a handful of translation units).

#ifndef ETC_REALFORMER_KERNELS_CPU_COMMON_H_
#define ETC_REALFORMER_KERNELS_CPU_COMMON_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <type_traits>
#include <vector>

#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "Eigen/Core"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace etc_realformer {
namespace {

// What every kernel source uses of TensorFlow's op API.
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Status;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
using ::tensorflow::errors::InvalidArgument;
using ::tensorflow::shape_inference::DimensionHandle;
using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

// Eigen's float packet (what its tensor expressions, TF's elementwise ops
// included, compute exp with).
using Packet = Eigen::internal::packet_traits<float>::type;
constexpr int kPacket = Eigen::internal::unpacket_traits<Packet>::size;

// ------------------------------------------------------------------ dropout
// TF's Philox-4x32-10 (xla/tsl/lib/random/philox_random.h) over many
// counters at once: drawing the masks one 128-bit block at a time cost more
// than all the rest of the kernel, and the compiler does not vectorize the
// widening multiplies by itself. PhiloxWords fills
// words[4 * i + j] = Philox(key, counter = first + i)[j] for i < n: the
// stream StatelessRandomUniformFullIntV2 returns from counter `first` (the
// counter's upper 64 bits are 0 in `row_dropout`).
constexpr uint32_t kPhiloxM0 = 0xD2511F53u, kPhiloxM1 = 0xCD9E8D57u;
constexpr uint32_t kPhiloxW0 = 0x9E3779B9u, kPhiloxW1 = 0xBB67AE85u;

// One counter (the tail, and machines without AVX2).
inline void PhiloxOne(uint32_t k0, uint32_t k1, uint64_t counter,
                      uint32_t* w) {
  uint32_t c0 = static_cast<uint32_t>(counter);
  uint32_t c1 = static_cast<uint32_t>(counter >> 32), c2 = 0, c3 = 0;
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kPhiloxM0) * c0;
    const uint64_t p1 = static_cast<uint64_t>(kPhiloxM1) * c2;
    const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
    const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
    c1 = static_cast<uint32_t>(p1);
    c3 = static_cast<uint32_t>(p0);
    c0 = n0;
    c2 = n2;
    k0 += kPhiloxW0;
    k1 += kPhiloxW1;
  }
  w[0] = c0;
  w[1] = c1;
  w[2] = c2;
  w[3] = c3;
}

// Ten Philox rounds over a vector of counters; `Isa` supplies the vector
// type and its operations (AVX-512: 16 counters, AVX2: 8).
template <typename Isa>
inline void PhiloxRounds(uint32_t k0, uint32_t k1, typename Isa::V* c0,
                         typename Isa::V* c1, typename Isa::V* c2,
                         typename Isa::V* c3) {
  using V = typename Isa::V;
  const V m0 = Isa::Set1(kPhiloxM0), m1 = Isa::Set1(kPhiloxM1);
  for (int round = 0; round < 10; ++round) {
    V lo0, hi0, lo1, hi1;
    Isa::MulHiLo(*c0, m0, &lo0, &hi0);
    Isa::MulHiLo(*c2, m1, &lo1, &hi1);
    const V n0 = Isa::Xor(Isa::Xor(hi1, *c1), Isa::Set1(k0));
    const V n2 = Isa::Xor(Isa::Xor(hi0, *c3), Isa::Set1(k1));
    *c1 = lo1;
    *c3 = lo0;
    *c0 = n0;
    *c2 = n2;
    k0 += kPhiloxW0;
    k1 += kPhiloxW1;
  }
}

// The counters first .. first + lanes - 1 as (low words, high words).
template <int kLanes>
inline void CounterWords(uint64_t first, uint32_t* lo, uint32_t* hi) {
  for (int l = 0; l < kLanes; ++l) {
    lo[l] = static_cast<uint32_t>(first + l);
    hi[l] = static_cast<uint32_t>((first + l) >> 32);
  }
}

#if defined(__AVX512F__)
struct Avx512 {
  using V = __m512i;
  static constexpr int kLanes = 16;
  static V Set1(uint32_t x) { return _mm512_set1_epi32(static_cast<int>(x)); }
  static V Xor(V a, V b) { return _mm512_xor_si512(a, b); }
  // 32 x 32 -> 64-bit products of all lanes, as (low, high) halves.
  static void MulHiLo(V a, V m, V* lo, V* hi) {
    const V even = _mm512_mul_epu32(a, m);
    const V odd = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), m);
    *lo = _mm512_mask_blend_epi32(0xAAAA, even, _mm512_slli_epi64(odd, 32));
    *hi = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(even, 32), odd);
  }
};
using PhiloxIsa = Avx512;

inline void PhiloxLanes(uint32_t key0, uint32_t key1, uint64_t first,
                        uint32_t* words) {
  __m512i c0, c1;
  const uint32_t first_lo = static_cast<uint32_t>(first);
  if (first_lo <= 0xFFFFFFFFu - 15) {
    c0 = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(first_lo)),
                          _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10,
                                            11, 12, 13, 14, 15));
    c1 = _mm512_set1_epi32(static_cast<int>(first >> 32));
  } else {  // the low word wraps inside these 16 counters
    alignas(64) uint32_t lo[16], hi[16];
    CounterWords<16>(first, lo, hi);
    c0 = _mm512_load_si512(lo);
    c1 = _mm512_load_si512(hi);
  }
  __m512i c2 = _mm512_setzero_si512(), c3 = _mm512_setzero_si512();
  PhiloxRounds<Avx512>(key0, key1, &c0, &c1, &c2, &c3);
  // Transpose the four 16-lane words into 16 consecutive blocks of 4:
  // within 128-bit lanes first (v<j> holds blocks j, j + 4, j + 8, j + 12),
  // then the lanes.
  const __m512i lo01 = _mm512_unpacklo_epi32(c0, c1);
  const __m512i hi01 = _mm512_unpackhi_epi32(c0, c1);
  const __m512i lo23 = _mm512_unpacklo_epi32(c2, c3);
  const __m512i hi23 = _mm512_unpackhi_epi32(c2, c3);
  const __m512i v0 = _mm512_unpacklo_epi64(lo01, lo23);
  const __m512i v1 = _mm512_unpackhi_epi64(lo01, lo23);
  const __m512i v2 = _mm512_unpacklo_epi64(hi01, hi23);
  const __m512i v3 = _mm512_unpackhi_epi64(hi01, hi23);
  const __m512i x01 = _mm512_shuffle_i32x4(v0, v1, _MM_SHUFFLE(1, 0, 1, 0));
  const __m512i x23 = _mm512_shuffle_i32x4(v2, v3, _MM_SHUFFLE(1, 0, 1, 0));
  const __m512i y01 = _mm512_shuffle_i32x4(v0, v1, _MM_SHUFFLE(3, 2, 3, 2));
  const __m512i y23 = _mm512_shuffle_i32x4(v2, v3, _MM_SHUFFLE(3, 2, 3, 2));
  _mm512_storeu_si512(words,
                      _mm512_shuffle_i32x4(x01, x23, _MM_SHUFFLE(2, 0, 2, 0)));
  _mm512_storeu_si512(words + 16,
                      _mm512_shuffle_i32x4(x01, x23, _MM_SHUFFLE(3, 1, 3, 1)));
  _mm512_storeu_si512(words + 32,
                      _mm512_shuffle_i32x4(y01, y23, _MM_SHUFFLE(2, 0, 2, 0)));
  _mm512_storeu_si512(words + 48,
                      _mm512_shuffle_i32x4(y01, y23, _MM_SHUFFLE(3, 1, 3, 1)));
}
#elif defined(__AVX2__)
struct Avx2 {
  using V = __m256i;
  static constexpr int kLanes = 8;
  static V Set1(uint32_t x) { return _mm256_set1_epi32(static_cast<int>(x)); }
  static V Xor(V a, V b) { return _mm256_xor_si256(a, b); }
  static void MulHiLo(V a, V m, V* lo, V* hi) {
    const V even = _mm256_mul_epu32(a, m);
    const V odd = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), m);
    *lo = _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA);
    *hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
  }
};
using PhiloxIsa = Avx2;

inline void PhiloxLanes(uint32_t key0, uint32_t key1, uint64_t first,
                        uint32_t* words) {
  alignas(32) uint32_t lo[8], hi[8];
  CounterWords<8>(first, lo, hi);
  __m256i c0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(lo));
  __m256i c1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(hi));
  __m256i c2 = _mm256_setzero_si256(), c3 = _mm256_setzero_si256();
  PhiloxRounds<Avx2>(key0, key1, &c0, &c1, &c2, &c3);
  alignas(32) uint32_t out[4][8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(out[0]), c0);
  _mm256_store_si256(reinterpret_cast<__m256i*>(out[1]), c1);
  _mm256_store_si256(reinterpret_cast<__m256i*>(out[2]), c2);
  _mm256_store_si256(reinterpret_cast<__m256i*>(out[3]), c3);
  for (int l = 0; l < 8; ++l) {
    for (int j = 0; j < 4; ++j) words[4 * l + j] = out[j][l];
  }
}
#endif

inline void PhiloxWords(uint32_t key0, uint32_t key1, uint64_t first, int64_t n,
                 uint32_t* words) {
  int64_t i = 0;
#if defined(__AVX512F__) || defined(__AVX2__)
  for (; i + PhiloxIsa::kLanes <= n; i += PhiloxIsa::kLanes) {
    PhiloxLanes(key0, key1, first + i, words + 4 * i);
  }
#endif
  for (; i < n; ++i) PhiloxOne(key0, key1, first + i, words + 4 * i);
}

// The 16-bit numbers [e, e + count) of a Philox stream: number e is half
// (e & 1) (low half first) of word (e >> 1), the order in which
// `tf.bitcast(uint32 -> uint16)` lays out the stream. Returns a pointer into
// `buf` (resized as needed).
inline const uint16_t* PhiloxHalves(uint32_t key0, uint32_t key1, uint64_t e,
                             int64_t count, std::vector<uint32_t>* buf) {
  const uint64_t first = e >> 3;
  const int64_t blocks = static_cast<int64_t>(((e + count + 7) >> 3) - first);
  buf->resize(4 * blocks);
  PhiloxWords(key0, key1, first, blocks, buf->data());
  return reinterpret_cast<const uint16_t*>(buf->data()) + (e & 7);
}

inline Status CheckShape(const Tensor& t, const char* name,
                  std::initializer_list<int64_t> dims) {
  if (t.dims() != static_cast<int>(dims.size())) {
    return InvalidArgument(name, " must have rank ", dims.size(), ", got ",
                           t.shape().DebugString());
  }
  int i = 0;
  for (int64_t d : dims) {
    if (d >= 0 && t.dim_size(i) != d) {
      return InvalidArgument(name, " has shape ", t.shape().DebugString(),
                             "; dimension ", i, " should be ", d);
    }
    ++i;
  }
  return Status();
}

// ------------------------------------------------------------ row helpers
// Reductions and exp over one row, in an order fixed by the row alone.
// (Eigen's own Map reductions start their vector loop at the first aligned
// element and compute the elements before it with scalar code, expf
// included, so results depended on where the heap put the buffer: two runs
// of one model differed in the last bit.)
inline float RowMax(const float* x, int64_t n) {
  int64_t c = 0;
  float peak = -INFINITY;
  if (n >= kPacket) {
    Packet acc = Eigen::internal::ploadu<Packet>(x);
    for (c = kPacket; c + kPacket <= n; c += kPacket) {
      acc = Eigen::internal::pmax(acc, Eigen::internal::ploadu<Packet>(x + c));
    }
    peak = Eigen::internal::predux_max(acc);
  }
  for (; c < n; ++c) peak = std::max(peak, x[c]);
  return peak;
}

inline float RowSum(const float* x, int64_t n) {
  int64_t c = 0;
  Packet acc = Eigen::internal::pset1<Packet>(0.f);
  for (; c + kPacket <= n; c += kPacket) {
    acc = Eigen::internal::padd(acc, Eigen::internal::ploadu<Packet>(x + c));
  }
  float sum = Eigen::internal::predux(acc);
  for (; c < n; ++c) sum += x[c];
  return sum;
}

inline float RowDot(const float* a, const float* b, int64_t n) {
  int64_t c = 0;
  Packet acc = Eigen::internal::pset1<Packet>(0.f);
  for (; c + kPacket <= n; c += kPacket) {
    acc = Eigen::internal::padd(
        acc, Eigen::internal::pmul(Eigen::internal::ploadu<Packet>(a + c),
                                   Eigen::internal::ploadu<Packet>(b + c)));
  }
  float sum = Eigen::internal::predux(acc);
  for (; c < n; ++c) sum += a[c] * b[c];
  return sum;
}

// x[c] = exp(x[c] - shift) for c < n, n a multiple of 16 (padded rows):
// every element through Eigen's vectorized exp.
inline void RowExp(float* x, int64_t n, float shift) {
  static_assert(16 % kPacket == 0, "rows are padded to 16 floats");
  const Packet s = Eigen::internal::pset1<Packet>(shift);
  for (int64_t c = 0; c < n; c += kPacket) {
    Eigen::internal::pstoreu(
        x + c, Eigen::internal::pexp(Eigen::internal::psub(
                   Eigen::internal::ploadu<Packet>(x + c), s)));
  }
}

// T -> float, exact. The 16-bit types by hand: the compiler's vectorized
// loop over Eigen's conversion ran slower than the float32 kernel as a whole.
inline void Widen(const float* __restrict src, int64_t n,
                  float* __restrict dst) {
  std::memcpy(dst, src, n * sizeof(float));
}

inline void Widen(const Eigen::bfloat16* __restrict src, int64_t n,
                  float* __restrict dst) {
  const uint16_t* bits = reinterpret_cast<const uint16_t*>(src);
  int64_t c = 0;
#if defined(__AVX512F__)
  for (; c + 16 <= n; c += 16) {
    const __m512i wide = _mm512_cvtepu16_epi32(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bits + c)));
    _mm512_storeu_ps(dst + c, _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16)));
  }
#endif
  for (; c < n; ++c) {
    const uint32_t u = static_cast<uint32_t>(bits[c]) << 16;
    std::memcpy(dst + c, &u, sizeof(u));
  }
}

inline void Widen(const Eigen::half* __restrict src, int64_t n,
                  float* __restrict dst) {
  int64_t c = 0;
#if defined(__AVX512F__)
  const uint16_t* bits = reinterpret_cast<const uint16_t*>(src);
  for (; c + 16 <= n; c += 16) {
    _mm512_storeu_ps(dst + c, _mm512_cvtph_ps(_mm256_loadu_si256(
                                  reinterpret_cast<const __m256i*>(bits + c))));
  }
#endif
  for (; c < n; ++c) dst[c] = static_cast<float>(src[c]);
}

// float -> a 16-bit T, rounded as TensorFlow's Cast rounds (to nearest
// even), as raw bits (so that the loops vectorize; Eigen's scalar types hide
// the arithmetic from the vectorizer).
// bfloat16: Eigen's float_to_bfloat16_rtne (BFloat16.h), without branches.
inline void NarrowTo16(const float* __restrict src, int64_t n,
                       Eigen::bfloat16*, uint16_t* __restrict dst) {
  int64_t c = 0;
#if defined(__AVX512F__)
  const __m512i round = _mm512_set1_epi32(0x7FFF), one = _mm512_set1_epi32(1);
  const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF);
  const __m512i inf = _mm512_set1_epi32(0x7F800000);
  const __m512i quiet = _mm512_set1_epi32(0x7FC0);
  const __m512i sign16 = _mm512_set1_epi32(0x8000);
  for (; c + 16 <= n; c += 16) {
    const __m512i u = _mm512_castps_si512(_mm512_loadu_ps(src + c));
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), one);
    const __m512i rounded = _mm512_srli_epi32(
        _mm512_add_epi32(_mm512_add_epi32(u, round), lsb), 16);
    const __m512i nan = _mm512_or_si512(
        _mm512_and_si512(_mm512_srli_epi32(u, 16), sign16), quiet);
    const __mmask16 is_nan =
        _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, abs_mask), inf);
    _mm256_storeu_si256(
        reinterpret_cast<__m256i*>(dst + c),
        _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(is_nan, rounded, nan)));
  }
#endif
  for (; c < n; ++c) {
    uint32_t u;
    std::memcpy(&u, src + c, sizeof(u));
    const uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
    const uint32_t nan = (u & 0x80000000u) ? 0xFFC0u : 0x7FC0u;
    dst[c] = static_cast<uint16_t>((u & 0x7FFFFFFFu) > 0x7F800000u ? nan
                                                                   : rounded);
  }
}

// float16: the F16C conversion (round to nearest even), as Eigen::half.
inline void NarrowTo16(const float* __restrict src, int64_t n, Eigen::half*,
                       uint16_t* __restrict dst) {
  int64_t c = 0;
#if defined(__AVX512F__)
  for (; c + 16 <= n; c += 16) {
    _mm256_storeu_si256(
        reinterpret_cast<__m256i*>(dst + c),
        _mm512_cvtps_ph(_mm512_loadu_ps(src + c), _MM_FROUND_TO_NEAREST_INT));
  }
#endif
  for (; c < n; ++c) {
    dst[c] = Eigen::numext::bit_cast<uint16_t>(Eigen::half(src[c]));
  }
}

// dst[c] = halves[c] >= threshold ? p[c] : 0 (the dropout mask).
inline void ApplyMaskTo(const float* __restrict p,
                        const uint16_t* __restrict halves, int64_t n,
                        uint16_t threshold, float* __restrict dst) {
  int64_t c = 0;
#if defined(__AVX512F__)
  const __m512i thr = _mm512_set1_epi32(threshold);
  for (; c + 16 <= n; c += 16) {
    const __m512i h = _mm512_cvtepu16_epi32(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(halves + c)));
    _mm512_storeu_ps(dst + c, _mm512_maskz_mov_ps(
                                  _mm512_cmpge_epu32_mask(h, thr),
                                  _mm512_loadu_ps(p + c)));
  }
#endif
  for (; c < n; ++c) dst[c] = halves[c] >= threshold ? p[c] : 0.f;
}

// Writes `bytes` bytes to `dst` with non-temporal stores where it can: the
// outputs here are large and read again only later (next layer, backward
// pass, the value matrix product), and a normal store of a line not in
// cache first reads it; that read-for-ownership was a third of the forward
// pass's time. The callers fence (`FenceStreams`) before their shard ends.
inline void StreamBytes(void* dst, const void* src, int64_t bytes) {
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
#if defined(__AVX512F__)
  const int64_t head = std::min<int64_t>(
      bytes, (64 - (reinterpret_cast<uintptr_t>(d) & 63)) & 63);
  std::memcpy(d, s, head);
  int64_t i = head;
  for (; i + 64 <= bytes; i += 64) {
    _mm512_stream_si512(reinterpret_cast<__m512i*>(d + i),
                        _mm512_loadu_si512(s + i));
  }
  std::memcpy(d + i, s + i, bytes - i);
#else
  std::memcpy(d, s, bytes);
#endif
}

inline void FenceStreams() {
#if defined(__AVX512F__)
  _mm_sfence();
#endif
}


// Views `t` (rank >= 1) as [rows, width], width its last dimension: the
// row-wise kernels take activations in any leading layout, so that callers
// need no reshape (whose gradient would keep its input alive for its shape).
inline Status RowsOf(const Tensor& t, const char* name, int64_t* rows,
                     int64_t* width) {
  if (t.dims() < 1) {
    return InvalidArgument(name, " must have rank >= 1, got ",
                           t.shape().DebugString());
  }
  *width = t.dim_size(t.dims() - 1);
  *rows = 1;
  for (int i = 0; i + 1 < t.dims(); ++i) *rows *= t.dim_size(i);
  return Status();
}

// `t` has the shape `like` has.
inline Status CheckSameShape(const Tensor& t, const char* name,
                             const Tensor& like, const char* like_name) {
  if (t.shape() != like.shape()) {
    return InvalidArgument(name, " has shape ", t.shape().DebugString(),
                           "; ", like_name, " has ",
                           like.shape().DebugString());
  }
  return Status();
}

// Writes n floats to dst as T, rounded as TensorFlow's Cast rounds.
template <typename T>
inline void StoreAs(const float* __restrict src, int64_t n,
                    T* __restrict dst) {
  if constexpr (std::is_same_v<T, float>) {
    std::memcpy(dst, src, n * sizeof(float));
  } else {
    static_assert(sizeof(T) == sizeof(uint16_t));
    NarrowTo16(src, n, static_cast<T*>(nullptr),
               reinterpret_cast<uint16_t*>(dst));
  }
}

// Rounds v to T and back in place (what storing it in T loses), with
// `narrow` (n values) as scratch; a no-op for float.
template <typename T>
inline void RoundThroughT(float* v, int64_t n, uint16_t* narrow) {
  if constexpr (!std::is_same_v<T, float>) {
    NarrowTo16(v, n, static_cast<T*>(nullptr), narrow);
    Widen(reinterpret_cast<const T*>(narrow), n, v);
  }
}

}  // namespace
}  // namespace etc_realformer

// Registers Op<T> as the CPU kernel of op `name` for the three float types
// the kernels take (attr "T").
#define ETC_REGISTER_CPU_KERNEL(name, Op)                                  \
  REGISTER_KERNEL_BUILDER(Name(name)                                       \
                              .Device(::tensorflow::DEVICE_CPU)            \
                              .TypeConstraint<float>("T"),                 \
                          Op<float>);                                      \
  REGISTER_KERNEL_BUILDER(Name(name)                                       \
                              .Device(::tensorflow::DEVICE_CPU)            \
                              .TypeConstraint<Eigen::bfloat16>("T"),       \
                          Op<Eigen::bfloat16>);                            \
  REGISTER_KERNEL_BUILDER(Name(name)                                       \
                              .Device(::tensorflow::DEVICE_CPU)            \
                              .TypeConstraint<Eigen::half>("T"),           \
                          Op<Eigen::half>)

#endif  // ETC_REALFORMER_KERNELS_CPU_COMMON_H_
