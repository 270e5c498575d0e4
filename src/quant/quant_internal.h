// Internal entry points of quant/ (one per format family), dispatched from quant.cc, and the small
// helpers the encoders share. n is always a count of elements, a multiple of the format's block size.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/dtype.h"
#include "core/half.h"
#include "core/status.h"
#include "quant/blocks.h"

namespace hymt::quant_internal {

// quant_float.cc: f32, f16, bf16 (and f8_e4m3, read only).
void DequantizeFloat(DType t, const void* src, float* dst, int64_t n);
void QuantizeFloat(DType t, const float* src, void* dst, int64_t n);

// quant_simple.cc: the 32-element formats. Scales: max-based, round to nearest (docs/QUANTIZATION.md).
void DequantizeQ4_0(const BlockQ4_0* x, float* y, int64_t n);
void DequantizeQ4_1(const BlockQ4_1* x, float* y, int64_t n);
void DequantizeQ5_0(const BlockQ5_0* x, float* y, int64_t n);
void DequantizeQ5_1(const BlockQ5_1* x, float* y, int64_t n);
void DequantizeQ8_0(const BlockQ8_0* x, float* y, int64_t n);
void QuantizeQ4_0(const float* x, BlockQ4_0* y, int64_t n);
void QuantizeQ4_1(const float* x, BlockQ4_1* y, int64_t n);
void QuantizeQ5_0(const float* x, BlockQ5_0* y, int64_t n);
void QuantizeQ5_1(const float* x, BlockQ5_1* y, int64_t n);
void QuantizeQ8_0(const float* x, BlockQ8_0* y, int64_t n);

// quant_k.cc: the 256-element super-block formats. Scales: the search in docs/QUANTIZATION.md.
void DequantizeQ4_K(const BlockQ4_K* x, float* y, int64_t n);
void DequantizeQ5_K(const BlockQ5_K* x, float* y, int64_t n);
void DequantizeQ6_K(const BlockQ6_K* x, float* y, int64_t n);
void DequantizeQ8_K(const BlockQ8_K* x, float* y, int64_t n);
void QuantizeQ4_K(const float* x, BlockQ4_K* y, int64_t n);
void QuantizeQ5_K(const float* x, BlockQ5_K* y, int64_t n);
void QuantizeQ6_K(const float* x, BlockQ6_K* y, int64_t n);
void QuantizeQ8_K(const float* x, BlockQ8_K* y, int64_t n);

// Largest finite f16. Scales are saturated to it so that huge inputs clip instead of decoding as inf.
constexpr float kF16Max = 65504.0f;

// Stores a scale as f16 (saturating) and returns the value every decoder will read back.
inline float StoreF16(float v, uint16_t* bits) {
  *bits = F32ToF16(std::clamp(v, -kF16Max, kF16Max));
  return F16ToF32(*bits);
}

// Nearest integer to t within [lo, hi], ties to even, as a float. Clamping first keeps the float trick
// valid (it needs |t| < 2^22) for any finite t, and clamping to integer bounds commutes with rounding.
inline float RoundClamp(float t, float lo, float hi) {
  // Written as selects on values so that they compile to min/max instructions (std::clamp and
  // std::min/max, which go through references, compile to branches that mispredict on real data).
  t = t < lo ? lo : t;
  t = t > hi ? hi : t;
  // Adding 1.5 * 2^23 pushes the fraction out of the significand, so the FPU's round-to-nearest-even
  // does the rounding; plain float arithmetic, so loops over it vectorise.
  constexpr float kMagic = 12582912.0f;
  return (t + kMagic) - kMagic;
}

// The element of largest magnitude, with its sign (the positive one when x and -x tie). Branch-free:
// on random data a running "if (|x| > amax)" mispredicts often.
inline float SignedAbsMax(const float* x, int n) {
  float lo = x[0], hi = x[0];
  for (int i = 1; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  return hi >= -lo ? hi : lo;
}

inline int RoundCode(float t, int lo, int hi) {
  return static_cast<int>(RoundClamp(t, static_cast<float>(lo), static_cast<float>(hi)));
}

}  // namespace hymt::quant_internal
