// The inputs' element types read as float32 and written back.
// Part of attention_ffi.cc's one translation unit (its definitions are
// internal to the library).
#ifndef ETC_REALFORMER_KERNELS_CC_ELEMENTS_H_
#define ETC_REALFORMER_KERNELS_CC_ELEMENTS_H_

#include <cstdint>
#include <cstring>
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

}  // namespace

#endif  // ETC_REALFORMER_KERNELS_CC_ELEMENTS_H_
