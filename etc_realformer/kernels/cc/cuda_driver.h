// The CUDA driver, opened with dlopen at first use, and the cubins' loading.
// Part of attention_ffi.cc's one translation unit (its definitions are
// internal to the library).
#ifndef ETC_REALFORMER_KERNELS_CC_CUDA_DRIVER_H_
#define ETC_REALFORMER_KERNELS_CC_CUDA_DRIVER_H_

#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

// ------------------------------------------------------- CUDA driver, opened
// The few driver entry points the launches need, declared here (no CUDA
// headers at build time) and resolved from libcuda.so.1 at first use.
using CUresult = int;
using CUdevice = int;
using CUcontext = void*;
using CUmodule = void*;
using CUfunction = void*;
using CUstream = void*;
using CUdeviceptr = unsigned long long;  // NOLINT: the driver API's type
// CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
constexpr int kMaxDynamicSharedBytes = 8;

// The entry points a launch needs, X(name) each.
#define ETC_CUDA_REQUIRED(X)                                          \
  X(ModuleLoadData) X(ModuleGetFunction) X(FuncSetAttribute) X(LaunchKernel) \
  X(CtxGetCurrent) X(MemsetD32Async)

struct CudaDriver {
  CUresult (*ModuleLoadData)(CUmodule*, const void*) = nullptr;
  CUresult (*ModuleGetFunction)(CUfunction*, CUmodule, const char*) = nullptr;
  CUresult (*FuncSetAttribute)(CUfunction, int, int) = nullptr;
  CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned,
                           unsigned, unsigned, unsigned, CUstream, void**,
                           void**) = nullptr;
  CUresult (*CtxGetCurrent)(CUcontext*) = nullptr;
  CUresult (*MemsetD32Async)(CUdeviceptr, unsigned, size_t, CUstream) =
      nullptr;
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
      // Each entry point into the field of its name (the driver's "cu"
      // + name); GetErrorString is optional (errors are then numbers).
#define ETC_CUDA_RESOLVE(name) \
  d->name = reinterpret_cast<decltype(d->name)>(dlsym(lib, "cu" #name));
#define ETC_CUDA_MISSING(name) || d->name == nullptr
      ETC_CUDA_REQUIRED(ETC_CUDA_RESOLVE)
      ETC_CUDA_RESOLVE(GetErrorString)
      if (false ETC_CUDA_REQUIRED(ETC_CUDA_MISSING)) {
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
// `tools/kernels/build_kernels.py` writes beside it ("<function> <shared bytes>
// <warps> <tile>"; the tile along the launch grid's first axis: query rows
// of `branch_forward` and `branch_backward_queries`, keys of
// `branch_backward_keys`).
struct CubinKernel {
  CUfunction function = nullptr;
  int shared = 0, warps = 4, tile = 64;
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
                      "python -m tools.kernels.build_kernels)");
  }
  char name[256] = {0};
  CubinKernel kernel;
  int read = std::fscanf(meta, "%255s %d %d %d", name, &kernel.shared,
                         &kernel.warps, &kernel.tile);
  std::fclose(meta);
  if (read != 4 || kernel.tile <= 0) {
    return ffi::Error::Internal("bad metadata " + base + ".meta");
  }
  FILE* f = std::fopen((base + ".cubin").c_str(), "rb");
  if (f == nullptr) {
    return ffi::Error::Internal("cannot open " + base + ".cubin");
  }
  std::vector<char> image;
  char chunk[65536];
  size_t n;
  while ((n = std::fread(chunk, 1, sizeof(chunk), f)) > 0) {
    image.insert(image.end(), chunk, chunk + n);
  }
  std::fclose(f);
  CUmodule module = nullptr;
  if (CUresult r = cu.ModuleLoadData(&module, image.data()); r != 0) {
    return ffi::Error::Internal("loading " + base + ".cubin: " +
                                cu.Describe(r));
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

}  // namespace

#endif  // ETC_REALFORMER_KERNELS_CC_CUDA_DRIVER_H_
