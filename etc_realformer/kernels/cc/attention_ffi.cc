// XLA FFI handlers of the fused global-local attention kernels.
//
// One typed-FFI custom call per kernel ("etc_side_forward": either query
// side of the attention core, `reference.side_forward`), with two
// implementations:
//   Host  plain C++ loops of the same math, so TensorFlow on the CPU runs
//         the whole custom-call path under jit_compile (the tests), and
//   CUDA  a launch of the Triton kernel's ahead-of-time compiled cubin on
//         the handler's stream (`tools/build_kernels.py` writes the cubins
//         and this library's build).
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
constexpr char kCall[] = "etc_side_forward";
// The code of a masked score without a relative term (`reference.NO_ID`).
constexpr int8_t kNoId = -128;

// The call's attributes (see the bindings).
struct SideOptions {
  bool band, has_ids, read[2], emit[2], by_rows;
  int64_t block_len, keep_threshold;
  float scale[2], gain;

  bool dropout() const { return keep_threshold > 0; }
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

// A buffer's dimension, or -1 where it has no such axis (a rank mismatch
// is then reported by the shape it fails).
template <typename Buffer>
int64_t Dim(const Buffer& buffer, size_t axis) {
  auto dims = buffer.dimensions();
  return axis < dims.size() ? dims[axis] : -1;
}

ffi::Error Invalid(const std::string& message) {
  return ffi::Error::InvalidArgument(std::string(kCall) + ": " + message);
}

// Every operand's shape and type against q's and the attributes, before
// any kernel reads one: the CUDA kernel indexes raw pointers, so a
// mismatch must never reach it.
ffi::Error CheckSide(const ffi::AnyBuffer& q, const ffi::AnyBuffer& k1,
                     const ffi::AnyBuffer& v1, const ffi::AnyBuffer& k2,
                     const ffi::AnyBuffer& v2,
                     const ffi::Buffer<ffi::F32>& per_id,
                     const ffi::Buffer<ffi::S8>& codes1,
                     const ffi::Buffer<ffi::S8>& codes2,
                     const ffi::Buffer<ffi::F32>& valid,
                     const ffi::AnyBuffer& prev1, const ffi::AnyBuffer& prev2,
                     const ffi::AnyBuffer& seeds, const ffi::AnyBuffer& ctx,
                     const ffi::Buffer<ffi::F32>& lse,
                     const ffi::AnyBuffer& new1, const ffi::AnyBuffer& new2,
                     const SideOptions& o, SideShape* shape) {
  auto qd = q.dimensions();
  if (qd.size() != 4) {
    return Invalid("q has shape " + Format(qd) + ", not [B, H, N, D]");
  }
  const int64_t bsz = qd[0], h = qd[1], n = qd[2], d = qd[3];
  const int64_t b = o.block_len;
  if (o.band ? b <= 0 || n % b != 0 : b != 1) {
    return Invalid("block_len " + std::to_string(b) + " with " +
                   std::to_string(n) + " queries: the band needs a length "
                   "that divides N, the dense layout 1");
  }
  if (o.keep_threshold < 0 || o.keep_threshold > 65536) {
    return Invalid("keep_threshold " + std::to_string(o.keep_threshold) +
                   " is not in [0, 65536]");
  }
  const int64_t k1_rows = o.band ? n + 2 * b : Dim(k1, 2);
  const int64_t k2_rows = Dim(k2, 2);
  const int64_t width1 = o.band ? 3 * b : k1_rows;
  const int64_t stride1 = o.band ? Dim(codes1, 2) : k1_rows;
  const int64_t num_ids = Dim(per_id, 2);
  *shape = {bsz, h, n, d, {k1_rows, k2_rows}, {width1, k2_rows}, num_ids,
            stride1, ffi::DataType::F32};

  const char* layout = o.band ? "band" : "dense";
  std::string problem;
  auto expect = [&](const char* name, const auto& buffer,
                    const std::vector<int64_t>& want) {
    if (problem.empty() && !SameDims(buffer.dimensions(), want)) {
      problem = std::string(name) + " has shape " +
                Format(buffer.dimensions()) + "; the " + layout +
                " layout needs " + Format(want);
    }
  };
  expect("k1", k1, {bsz, h, k1_rows, d});
  expect("v1", v1, {bsz, h, k1_rows, d});
  expect("k2", k2, {bsz, h, k2_rows, d});
  expect("v2", v2, {bsz, h, k2_rows, d});
  expect("per_id", per_id, {bsz, n, num_ids, h});
  expect("codes1", codes1, {bsz, n, stride1});
  expect("codes2", codes2, {bsz, n, k2_rows});
  expect("valid", valid, {bsz, n});
  expect("ctx", ctx, {bsz, h, n, d});
  expect("lse", lse, {bsz, h, n});
  const ffi::AnyBuffer* prev[2] = {&prev1, &prev2};
  const ffi::AnyBuffer* next[2] = {&new1, &new2};
  const char* prev_names[2] = {"prev1", "prev2"};
  const char* new_names[2] = {"new1", "new2"};
  for (int p = 0; p < 2; ++p) {
    const std::vector<int64_t> stream = {bsz, h, n, shape->width[p]};
    if (o.read[p]) expect(prev_names[p], *prev[p], stream);
    if (o.emit[p]) expect(new_names[p], *next[p], stream);
  }
  if (o.dropout()) expect("seeds", seeds, {4});
  if (!problem.empty()) return Invalid(problem);
  if (o.band && (stride1 < 3 * b || stride1 % 16 != 0)) {
    return Invalid("codes1's rows hold " + std::to_string(stride1) +
                   " codes: the band needs 3b = " + std::to_string(3 * b) +
                   " or more, a multiple of 16 (the kernel's vector loads)");
  }
  if (o.has_ids && num_ids < 1) {
    return Invalid("has_ids with an empty per_id table");
  }
  if (shape->width[0] + shape->width[1] == 0) {
    return Invalid("a side without keys");
  }

  const auto t = q.element_type();
  if (!Element{t}.Supported() || k1.element_type() != t ||
      v1.element_type() != t || k2.element_type() != t ||
      v2.element_type() != t || ctx.element_type() != t) {
    return Invalid("q, keys, values and the context must share one of "
                   "float32, bfloat16, float16");
  }
  if (o.dropout() && seeds.element_type() != ffi::DataType::S32) {
    return Invalid("the dropout seeds must be int32");
  }
  // One element type for every stream read or written: a cubin has one.
  bool any_stream = false;
  for (int p = 0; p < 2; ++p) {
    for (const ffi::AnyBuffer* s : {o.read[p] ? prev[p] : nullptr,
                                    o.emit[p] ? next[p] : nullptr}) {
      if (s == nullptr) continue;
      const ffi::DataType st = s->element_type();
      if ((st != ffi::DataType::F32 && st != t) ||
          (any_stream && st != shape->stream_type)) {
        return Invalid("the running sums read and written must all be "
                       "float32 or all the inputs' type");
      }
      any_stream = true;
      shape->stream_type = st;
    }
  }

  // The kernel indexes in int32.
  std::vector<const ffi::AnyBuffer*> big = {&q, &k1, &k2, &ctx};
  for (int p = 0; p < 2; ++p) {
    if (o.read[p]) big.push_back(prev[p]);
    if (o.emit[p]) big.push_back(next[p]);
  }
  bool too_big = per_id.element_count() >= (size_t{1} << 31) ||
                 codes1.element_count() >= (size_t{1} << 31) ||
                 codes2.element_count() >= (size_t{1} << 31);
  for (const ffi::AnyBuffer* x : big) {
    too_big |= x->element_count() >= (size_t{1} << 31);
  }
  if (too_big) return Invalid("an operand of 2^31 elements or more");
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
// Two passes per query row (scores, then the context), float32 throughout;
// the probabilities are rounded to the inputs' type before the context
// product, as the kernels and the XLA path do.
ffi::Error SideForwardHost(
    ffi::AnyBuffer q, ffi::AnyBuffer k1, ffi::AnyBuffer v1, ffi::AnyBuffer k2,
    ffi::AnyBuffer v2, ffi::Buffer<ffi::F32> per_id,
    ffi::Buffer<ffi::S8> codes1, ffi::Buffer<ffi::S8> codes2,
    ffi::Buffer<ffi::F32> valid, ffi::AnyBuffer prev1, ffi::AnyBuffer prev2,
    ffi::AnyBuffer seeds, bool band, int64_t block_len, bool has_ids,
    bool read_prev1, bool read_prev2, bool emit1, bool emit2, float scale1,
    float scale2, int64_t keep_threshold, float gain, bool by_rows,
    ffi::Result<ffi::AnyBuffer> ctx, ffi::Result<ffi::Buffer<ffi::F32>> lse,
    ffi::Result<ffi::AnyBuffer> new1, ffi::Result<ffi::AnyBuffer> new2) {
  const SideOptions o{band,       has_ids,        {read_prev1, read_prev2},
                      {emit1, emit2}, by_rows,    block_len,
                      keep_threshold, {scale1, scale2}, gain};
  SideShape s;
  if (auto e = CheckSide(q, k1, v1, k2, v2, per_id, codes1, codes2, valid,
                         prev1, prev2, seeds, *ctx, *lse, *new1, *new2, o,
                         &s);
      !e.success()) {
    return e;
  }
  const Element el{q.element_type()};
  const std::vector<float> qv = el.Read(q);
  const std::vector<float> keys[2] = {el.Read(k1), el.Read(k2)};
  const std::vector<float> values[2] = {el.Read(v1), el.Read(v2)};
  const ffi::AnyBuffer* prev_in[2] = {&prev1, &prev2};
  ffi::AnyBuffer* new_out[2] = {&*new1, &*new2};
  std::vector<float> prev[2], next[2];
  for (int p = 0; p < 2; ++p) {
    if (o.read[p]) prev[p] = Element{prev_in[p]->element_type()}.Read(
        *prev_in[p]);
    if (o.emit[p]) next[p].assign(s.batch * s.heads * s.rows * s.width[p], 0);
  }
  uint32_t key[4] = {0, 0, 0, 0};  // the folded seeds, as uint32
  if (o.dropout()) std::memcpy(key, seeds.untyped_data(), sizeof(key));
  const int8_t* codes[2] = {codes1.typed_data(), codes2.typed_data()};
  const int64_t code_stride[2] = {s.codes1_stride, s.width[1]};
  const int64_t bsz = s.batch, heads = s.heads, n = s.rows,
                d = s.size_per_head, c1 = s.width[0];
  const int64_t row_block = o.band ? o.block_len : 1;
  std::vector<float> out(qv.size(), 0.0f);
  std::vector<float> logits(s.width[0] + s.width[1]);
  float* lse_out = lse->typed_data();
  for (int64_t bi = 0; bi < bsz; ++bi) {
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t bh = bi * heads + h;
      for (int64_t i = 0; i < n; ++i) {
        const int64_t row = bi * n + i;  // per-row tensors [B, N, ...]
        const int64_t head_row = bh * n + i;  // [B, H, N, ...]
        const float* qi = &qv[head_row * d];
        const int64_t first = o.band ? (i / o.block_len) * o.block_len : 0;
        // The key (and value) row of each pattern's column c.
        auto key_row = [&](int p, int64_t c) {
          return (bh * s.key_rows[p] + (p == 0 ? first + c : c)) * d;
        };
        for (int p = 0; p < 2; ++p) {
          for (int64_t c = 0; c < s.width[p]; ++c) {
            const float* k = &keys[p][key_row(p, c)];
            float score = 0.0f;
            for (int64_t x = 0; x < d; ++x) score += qi[x] * k[x];
            const int8_t code = codes[p][row * code_stride[p] + c];
            if (o.has_ids && code != kNoId) {
              const int64_t id = code >= 0 ? code : -1 - code;
              if (id >= s.num_ids) {
                return Invalid("relative id " + std::to_string(id) +
                               " of a table of " +
                               std::to_string(s.num_ids));
              }
              score += per_id.typed_data()[(row * s.num_ids + id) * heads + h];
            }
            const int64_t cell = head_row * s.width[p] + c;
            if (o.read[p]) score += prev[p][cell];
            if (o.emit[p]) next[p][cell] = score;
            // RealFormer's running mean; 1 on a pattern without a stream.
            float logit = score * o.scale[p];
            if (code < 0) logit -= 10000.0f;
            logits[p * c1 + c] = logit;
          }
        }
        float peak = -INFINITY;
        for (float l : logits) peak = std::max(peak, l);
        float total = 0.0f;
        for (float& l : logits) {
          l = std::exp(l - peak);
          total += l;
        }
        lse_out[head_row] = peak + std::log(total);
        float scale = valid.typed_data()[row] / total;
        if (o.dropout()) scale *= gain;
        // The dropout index's row part (`reference.dropout_index`), in
        // uint32 as the kernel wraps it.
        const uint32_t index_row = o.by_rows
            ? static_cast<uint32_t>(
                  (((i / row_block) * bsz + bi) * heads + h) * row_block +
                  i % row_block)
            : static_cast<uint32_t>(head_row);
        float* o_row = &out[head_row * d];
        for (int p = 0; p < 2; ++p) {
          const uint32_t width = static_cast<uint32_t>(s.width[p]);
          for (int64_t c = 0; c < s.width[p]; ++c) {
            float prob = logits[p * c1 + c] * scale;
            if (o.dropout()) {
              const uint32_t index = index_row * width +
                                     static_cast<uint32_t>(c) + key[2 * p];
              const uint32_t bits = Mix32(Mix32(index) ^ key[2 * p + 1]);
              if ((bits >> 16) < static_cast<uint32_t>(o.keep_threshold)) {
                prob = 0.0f;
              }
            }
            prob = el.Round(prob);
            const float* v = &values[p][key_row(p, c)];
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

// ------------------------------------------------------- CUDA driver, opened
// The few driver entry points the launches need, declared here (no CUDA
// headers at build time) and resolved from libcuda.so.1 at first use.
using CUresult = int;
using CUdevice = int;
using CUcontext = void*;
using CUmodule = void*;
using CUfunction = void*;
using CUstream = void*;
constexpr int kMaxDynamicSharedBytes = 8;  // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES

struct CudaDriver {
  CUresult (*ModuleLoadData)(CUmodule*, const void*) = nullptr;
  CUresult (*ModuleGetFunction)(CUfunction*, CUmodule, const char*) = nullptr;
  CUresult (*FuncSetAttribute)(CUfunction, int, int) = nullptr;
  CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned,
                           unsigned, unsigned, unsigned, CUstream, void**,
                           void**) = nullptr;
  CUresult (*CtxGetCurrent)(CUcontext*) = nullptr;
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
      d->GetErrorString = reinterpret_cast<decltype(d->GetErrorString)>(
          sym("cuGetErrorString"));
      if (!d->ModuleLoadData || !d->ModuleGetFunction ||
          !d->FuncSetAttribute || !d->LaunchKernel || !d->CtxGetCurrent) {
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
// <warps> <block_m>").
struct CubinKernel {
  CUfunction function = nullptr;
  int shared = 0, warps = 4, block_m = 64;
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
                         &kernel.warps, &kernel.block_m);
  std::fclose(meta);
  if (read != 4) return ffi::Error::Internal("bad metadata " + base + ".meta");
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
// The cubin's name; `tools/build_kernels.py` (`variant_name`) writes the
// same: side_forward_<dtype>_d<D>_<r<R>|noids>_<band|dense>_<f32|low>_
// <READ1><READ2><WRITE1><WRITE2>_<drop|nodrop>_<rows|whole>.
std::string VariantName(ffi::DataType t, const SideShape& s,
                        const SideOptions& o) {
  int64_t ids_padded = 1;  // num_ids rounded up to a power of two
  while (ids_padded < s.num_ids) ids_padded *= 2;
  const bool streams = o.read[0] || o.read[1] || o.emit[0] || o.emit[1];
  const bool low = streams && s.stream_type != ffi::DataType::F32;
  std::string flags;
  for (bool f : {o.read[0], o.read[1], o.emit[0], o.emit[1]}) {
    flags += f ? '1' : '0';
  }
  return std::string("side_forward_") + TypeName(t) + "_d" +
         std::to_string(s.size_per_head) +
         (o.has_ids ? "_r" + std::to_string(ids_padded)
                    : std::string("_noids")) +
         (o.band ? "_band" : "_dense") + (low ? "_low_" : "_f32_") + flags +
         (o.dropout() ? "_drop" : "_nodrop") +
         // The layout of the dropout index matters only with dropout.
         (!o.dropout() || o.by_rows ? "_rows" : "_whole");
}

ffi::Error SideForwardCuda(
    CUstream stream, ffi::AnyBuffer q, ffi::AnyBuffer k1, ffi::AnyBuffer v1,
    ffi::AnyBuffer k2, ffi::AnyBuffer v2, ffi::Buffer<ffi::F32> per_id,
    ffi::Buffer<ffi::S8> codes1, ffi::Buffer<ffi::S8> codes2,
    ffi::Buffer<ffi::F32> valid, ffi::AnyBuffer prev1, ffi::AnyBuffer prev2,
    ffi::AnyBuffer seeds, bool band, int64_t block_len, bool has_ids,
    bool read_prev1, bool read_prev2, bool emit1, bool emit2, float scale1,
    float scale2, int64_t keep_threshold, float gain, bool by_rows,
    ffi::Result<ffi::AnyBuffer> ctx, ffi::Result<ffi::Buffer<ffi::F32>> lse,
    ffi::Result<ffi::AnyBuffer> new1, ffi::Result<ffi::AnyBuffer> new2) {
  const SideOptions o{band,       has_ids,        {read_prev1, read_prev2},
                      {emit1, emit2}, by_rows,    block_len,
                      keep_threshold, {scale1, scale2}, gain};
  SideShape s;
  if (auto e = CheckSide(q, k1, v1, k2, v2, per_id, codes1, codes2, valid,
                         prev1, prev2, seeds, *ctx, *lse, *new1, *new2, o,
                         &s);
      !e.success()) {
    return e;
  }
  if (s.rows == 0 || s.batch * s.heads == 0) {
    return ffi::Error::Success();  // nothing to compute (an empty grid)
  }
  const std::string variant = VariantName(q.element_type(), s, o);
  CubinKernel kernel;
  if (auto e = LoadKernel(variant, &kernel); !e.success()) return e;
  // The unread streams and seeds are placeholders the kernel never reads,
  // the unwritten results buffers it never writes.
  void* ptrs[16] = {q.untyped_data(),      k1.untyped_data(),
                    v1.untyped_data(),     k2.untyped_data(),
                    v2.untyped_data(),     per_id.untyped_data(),
                    codes1.untyped_data(), codes2.untyped_data(),
                    valid.untyped_data(),  prev1.untyped_data(),
                    prev2.untyped_data(),  seeds.untyped_data(),
                    ctx->untyped_data(),   lse->untyped_data(),
                    new1->untyped_data(),  new2->untyped_data()};
  int32_t ints[9] = {static_cast<int32_t>(s.batch),
                     static_cast<int32_t>(s.heads),
                     static_cast<int32_t>(s.rows),
                     static_cast<int32_t>(s.key_rows[0]),
                     static_cast<int32_t>(s.key_rows[1]),
                     static_cast<int32_t>(s.num_ids),
                     static_cast<int32_t>(o.block_len),
                     static_cast<int32_t>(s.codes1_stride),
                     static_cast<int32_t>(o.keep_threshold)};
  float floats[3] = {o.gain, o.scale[0], o.scale[1]};
  // Triton's launch convention: the non-constexpr arguments in order, then
  // its global and profile scratch pointers (null: the kernel uses none).
  void* scratch[2] = {nullptr, nullptr};
  void* params[32];
  int n = 0;
  for (void*& p : ptrs) params[n++] = &p;
  for (int32_t& v : ints) params[n++] = &v;
  for (float& v : floats) params[n++] = &v;
  params[n++] = &scratch[0];
  params[n++] = &scratch[1];
  const unsigned grid_x = static_cast<unsigned>(
      (s.rows + kernel.block_m - 1) / kernel.block_m);
  CudaDriver& cu = CudaDriver::Get();
  if (CUresult r = cu.LaunchKernel(
          kernel.function, grid_x, static_cast<unsigned>(s.batch * s.heads),
          1, 32 * kernel.warps, 1, 1, kernel.shared, stream, params, nullptr);
      r != 0) {
    return ffi::Error::Internal("launching " + variant + ": " + cu.Describe(r));
  }
  return ffi::Error::Success();
}

}  // namespace

// ----------------------------------------------------------------- bindings
#define ETC_SIDE_FORWARD_BINDING(BINDER)             \
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
      .Arg<ffi::AnyBuffer>()         /* seeds */      \
      .Attr<bool>("band")                             \
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
      .Ret<ffi::AnyBuffer>()         /* ctx */        \
      .Ret<ffi::Buffer<ffi::F32>>()  /* lse */        \
      .Ret<ffi::AnyBuffer>()         /* new1 */       \
      .Ret<ffi::AnyBuffer>()         /* new2 */

XLA_FFI_DEFINE_HANDLER_SYMBOL(EtcSideForwardHost, SideForwardHost,
                              ETC_SIDE_FORWARD_BINDING(ffi::Ffi::Bind()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(
    EtcSideForwardCuda, SideForwardCuda,
    ETC_SIDE_FORWARD_BINDING(
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
