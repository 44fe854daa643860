// XLA FFI handlers of the fused global-local attention kernels.
//
// One typed-FFI custom call per kernel ("etc_long_side_forward", ...), with
// two implementations:
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

// -------------------------------------------------------- long side: shapes
struct LongSideShape {
  int64_t batch, heads, padded_len, size_per_head, global_len, num_ids,
      block_len, band_stride;
};

// Every operand's shape and type against q's, before any kernel reads one:
// the CUDA kernels index raw pointers, so a mismatch must never reach them.
ffi::Error CheckLongSide(const ffi::AnyBuffer& q, const ffi::AnyBuffer& k_band,
                         const ffi::AnyBuffer& v_band,
                         const ffi::AnyBuffer& k_global,
                         const ffi::AnyBuffer& v_global,
                         const ffi::Buffer<ffi::F32>& per_id,
                         const ffi::Buffer<ffi::S8>& codes_band,
                         const ffi::Buffer<ffi::S8>& codes_global,
                         const ffi::Buffer<ffi::F32>& valid,
                         const ffi::AnyBuffer& ctx,
                         const ffi::Buffer<ffi::F32>& lse, int64_t block_len,
                         LongSideShape* shape) {
  auto qd = q.dimensions();
  auto kd = k_band.dimensions();
  auto gd = k_global.dimensions();
  auto pd = per_id.dimensions();
  auto cb = codes_band.dimensions();
  auto cg = codes_global.dimensions();
  auto vd = valid.dimensions();
  auto ld = lse.dimensions();
  if (qd.size() != 4 || kd.size() != 4 || gd.size() != 4 || pd.size() != 4 ||
      cb.size() != 3 || cg.size() != 3 || vd.size() != 2 || ld.size() != 3) {
    return ffi::Error::InvalidArgument(
        "etc_long_side_forward: q, keys, values, per_id must be rank 4, "
        "the codes and lse rank 3, valid rank 2");
  }
  auto same = [](auto a, auto b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
      if (a[i] != b[i]) return false;
    }
    return true;
  };
  *shape = {qd[0], qd[1], qd[2], qd[3], gd[2], pd[2], block_len,
            block_len > 0 ? cb[2] : 0};
  if (block_len <= 0 || qd[2] % block_len != 0 ||
      !same(v_band.dimensions(), kd) || !same(v_global.dimensions(), gd) ||
      !same(ctx.dimensions(), qd) || kd[0] != qd[0] || kd[1] != qd[1] ||
      gd[0] != qd[0] || gd[1] != qd[1] || cb[0] != qd[0] ||
      cb[1] != qd[2] || cb[2] < 3 * block_len || cg[0] != qd[0] ||
      cg[1] != qd[2] || cg[2] != gd[2] ||
      kd[2] != qd[2] + 2 * block_len || kd[3] != qd[3] ||
      gd[3] != qd[3] || pd[0] != qd[0] || pd[1] != qd[2] || pd[3] != qd[1] ||
      vd[0] != qd[0] || vd[1] != qd[2] || ld[0] != qd[0] || ld[1] != qd[1] ||
      ld[2] != qd[2]) {
    return ffi::Error::InvalidArgument(
        "etc_long_side_forward: shapes do not fit the long-side layout");
  }
  // The kernels index in int32.
  const int64_t band_cells = codes_band.element_count();
  const int64_t global_cells = qd[0] * qd[2] * gd[2];
  if (k_band.element_count() >= (int64_t{1} << 31) ||
      per_id.element_count() >= (int64_t{1} << 31) ||
      band_cells >= (int64_t{1} << 31) || global_cells >= (int64_t{1} << 31)) {
    return ffi::Error::InvalidArgument(
        "etc_long_side_forward: an operand of 2^31 elements or more");
  }
  const auto t = q.element_type();
  if (!Element{t}.Supported() || k_band.element_type() != t ||
      v_band.element_type() != t || k_global.element_type() != t ||
      v_global.element_type() != t || ctx.element_type() != t) {
    return ffi::Error::InvalidArgument(
        "etc_long_side_forward: q, keys, values and the context must share "
        "one of float32, bfloat16, float16");
  }
  return ffi::Error::Success();
}

// ------------------------------------------------------- long side: on host
// Two passes per query row (scores, then the context), float32 throughout;
// the probabilities are rounded to the inputs' type before the context
// product, as the kernels and the XLA path do.
ffi::Error LongSideForwardHost(
    ffi::AnyBuffer q, ffi::AnyBuffer k_band, ffi::AnyBuffer v_band,
    ffi::AnyBuffer k_global, ffi::AnyBuffer v_global,
    ffi::Buffer<ffi::F32> per_id, ffi::Buffer<ffi::S8> codes_band,
    ffi::Buffer<ffi::S8> codes_global, ffi::Buffer<ffi::F32> valid,
    int64_t block_len, bool has_ids, ffi::Result<ffi::AnyBuffer> ctx,
    ffi::Result<ffi::Buffer<ffi::F32>> lse) {
  LongSideShape s;
  if (auto e = CheckLongSide(q, k_band, v_band, k_global, v_global, per_id,
                             codes_band, codes_global, valid, *ctx, *lse,
                             block_len, &s);
      !e.success()) {
    return e;
  }
  Element el{q.element_type()};
  const std::vector<float> qv = el.Read(q), kb = el.Read(k_band),
                           vb = el.Read(v_band), kg = el.Read(k_global),
                           vg = el.Read(v_global);
  const int64_t b = s.block_len, d = s.size_per_head, lp = s.padded_len,
                g = s.global_len, band = 3 * b;
  const int64_t band_rows = lp + 2 * b;
  std::vector<float> out(qv.size(), 0.0f);
  float* lse_out = lse->typed_data();
  std::vector<float> logits(band + g);
  for (int64_t bi = 0; bi < s.batch; ++bi) {
    for (int64_t h = 0; h < s.heads; ++h) {
      const int64_t bh = bi * s.heads + h;
      for (int64_t i = 0; i < lp; ++i) {
        const int64_t row = bi * lp + i;  // per-row tensors [B, Lp, ...]
        const float* qi = &qv[(bh * lp + i) * d];
        const int64_t first = (i / b) * b, j = i - first;
        for (int64_t c = 0; c < band + g; ++c) {
          const bool is_band = c < band;
          const float* key = is_band
              ? &kb[(bh * band_rows + first + c) * d]
              : &kg[(bh * g + (c - band)) * d];
          float dot = 0.0f;
          for (int64_t x = 0; x < d; ++x) dot += qi[x] * key[x];
          // -1: masked (the score - 10000), else the relative id.
          const int8_t code = is_band
              ? codes_band.typed_data()[row * s.band_stride + c]
              : codes_global.typed_data()[row * g + (c - band)];
          float logit = dot - 10000.0f;
          if (code >= 0) {
            logit = dot;
            if (has_ids) {
              logit += per_id.typed_data()[(row * s.num_ids + code) * s.heads +
                                           h];
            }
          }
          logits[c] = logit;
        }
        float peak = logits[0];
        for (float l : logits) peak = std::max(peak, l);
        float total = 0.0f;
        for (float& l : logits) {
          l = std::exp(l - peak);
          total += l;
        }
        lse_out[bh * lp + i] = peak + std::log(total);
        const float scale = valid.typed_data()[row] / total;
        float* o = &out[(bh * lp + i) * d];
        for (int64_t c = 0; c < band + g; ++c) {
          const float p = el.Round(logits[c] * scale);
          const float* value = c < band
              ? &vb[(bh * band_rows + first + c) * d]
              : &vg[(bh * g + (c - band)) * d];
          for (int64_t x = 0; x < d; ++x) o[x] += p * value[x];
        }
      }
    }
  }
  el.Write(out, ctx->untyped_data());
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

// ------------------------------------------------------- long side: on CUDA
ffi::Error LongSideForwardCuda(
    CUstream stream, ffi::AnyBuffer q, ffi::AnyBuffer k_band,
    ffi::AnyBuffer v_band, ffi::AnyBuffer k_global, ffi::AnyBuffer v_global,
    ffi::Buffer<ffi::F32> per_id, ffi::Buffer<ffi::S8> codes_band,
    ffi::Buffer<ffi::S8> codes_global, ffi::Buffer<ffi::F32> valid,
    int64_t block_len, bool has_ids, ffi::Result<ffi::AnyBuffer> ctx,
    ffi::Result<ffi::Buffer<ffi::F32>> lse) {
  LongSideShape s;
  if (auto e = CheckLongSide(q, k_band, v_band, k_global, v_global, per_id,
                             codes_band, codes_global, valid, *ctx, *lse,
                             block_len, &s);
      !e.success()) {
    return e;
  }
  int64_t ids_padded = 1;  // num_ids rounded up to a power of two
  while (ids_padded < s.num_ids) ids_padded *= 2;
  const std::string variant = std::string("long_side_forward_") +
      TypeName(q.element_type()) + "_d" + std::to_string(s.size_per_head) +
      (has_ids ? "_r" + std::to_string(ids_padded) : std::string("_noids"));
  CubinKernel kernel;
  if (auto e = LoadKernel(variant, &kernel); !e.success()) return e;
  void* ptrs[11] = {q.untyped_data(), k_band.untyped_data(),
                    v_band.untyped_data(), k_global.untyped_data(),
                    v_global.untyped_data(), per_id.untyped_data(),
                    codes_band.untyped_data(), codes_global.untyped_data(),
                    valid.untyped_data(), ctx->untyped_data(),
                    lse->untyped_data()};
  int32_t ints[6] = {static_cast<int32_t>(s.heads),
                     static_cast<int32_t>(s.padded_len),
                     static_cast<int32_t>(s.global_len),
                     static_cast<int32_t>(s.num_ids),
                     static_cast<int32_t>(s.block_len),
                     static_cast<int32_t>(s.band_stride)};
  // Triton's launch convention: the non-constexpr arguments in order, then
  // its global and profile scratch pointers (null: the kernels use none).
  void* scratch[2] = {nullptr, nullptr};
  void* params[20];
  int n = 0;
  for (void*& p : ptrs) params[n++] = &p;
  for (int32_t& v : ints) params[n++] = &v;
  params[n++] = &scratch[0];
  params[n++] = &scratch[1];
  const unsigned grid_x = static_cast<unsigned>(
      (s.padded_len + kernel.block_m - 1) / kernel.block_m);
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
#define ETC_LONG_SIDE_FORWARD_BINDING(BINDER) \
  BINDER.Arg<ffi::AnyBuffer>()       /* q */          \
      .Arg<ffi::AnyBuffer>()         /* k_band */     \
      .Arg<ffi::AnyBuffer>()         /* v_band */     \
      .Arg<ffi::AnyBuffer>()         /* k_global */   \
      .Arg<ffi::AnyBuffer>()         /* v_global */   \
      .Arg<ffi::Buffer<ffi::F32>>()  /* per_id */     \
      .Arg<ffi::Buffer<ffi::S8>>()   /* codes_band */ \
      .Arg<ffi::Buffer<ffi::S8>>()   /* codes_global */ \
      .Arg<ffi::Buffer<ffi::F32>>()  /* valid */      \
      .Attr<int64_t>("block_len")                     \
      .Attr<bool>("has_ids")                          \
      .Ret<ffi::AnyBuffer>()         /* ctx */        \
      .Ret<ffi::Buffer<ffi::F32>>()  /* lse */

XLA_FFI_DEFINE_HANDLER_SYMBOL(EtcLongSideForwardHost, LongSideForwardHost,
                              ETC_LONG_SIDE_FORWARD_BINDING(ffi::Ffi::Bind()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(
    EtcLongSideForwardCuda, LongSideForwardCuda,
    ETC_LONG_SIDE_FORWARD_BINDING(
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
      {"etc_long_side_forward", "Host", EtcLongSideForwardHost},
      {"etc_long_side_forward", "CUDA", EtcLongSideForwardCuda},
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
