// The 32-element block formats Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0.
//
// Decoding follows the GGUF definition; every decoded value is the f32 rounding of the exact value
// (d * q is exact in f32 for an f16 d and |q| < 2^13, so only the "+ m" of the _1 formats rounds).
// Encoding is round to nearest against the scale *as stored* (f16), so that re-encoding a decoded block
// reproduces it (tests/unit/quant_simple_test.cc).
#include <cmath>
#include <cstring>

#include "quant/quant_internal.h"

namespace hymt::quant_internal {
namespace {

void MinMax(const float* x, int n, float* min, float* max) {
  *min = x[0];
  *max = x[0];
  for (int i = 1; i < n; ++i) {
    *min = std::min(*min, x[i]);
    *max = std::max(*max, x[i]);
  }
}

// Symmetric formats (Q4_0, Q5_0): d = max / -2^(bits-1), so the element of largest magnitude lands
// exactly on the most negative code and the grid's extra negative level is not wasted.
// Writes codes biased to [0, 2^bits).
void EncodeSymmetric(const float* x, int bits, uint16_t* d_bits, uint8_t* codes) {
  const int half = 1 << (bits - 1);
  const float d = StoreF16(SignedAbsMax(x, kQK) / static_cast<float>(-half), d_bits);
  // id = 0 when d is 0 (an all-zero block, or one too small for an f16 d): every code is then the
  // zero point.
  const float id = d != 0 ? 1.0f / d : 0.0f;
  for (int i = 0; i < kQK; ++i) codes[i] = static_cast<uint8_t>(RoundCode(x[i] * id, -half, half - 1) + half);
}

// Affine formats (Q4_1, Q5_1): the grid runs from min to max in 2^bits - 1 steps.
void EncodeAffine(const float* x, int bits, uint16_t* d_bits, uint16_t* m_bits, uint8_t* codes) {
  const int top = (1 << bits) - 1;
  float min, max;
  MinMax(x, kQK, &min, &max);
  // Codes are taken against the stored (f16-rounded) d and m, so that d q + m as decoded is the
  // nearest grid point; the f16 rounding of m may leave the minimum a hair below the grid.
  const float d = StoreF16((max - min) / static_cast<float>(top), d_bits);
  const float m = StoreF16(min, m_bits);
  const float id = d != 0 ? 1.0f / d : 0.0f;
  for (int i = 0; i < kQK; ++i) codes[i] = static_cast<uint8_t>(RoundCode((x[i] - m) * id, 0, top));
}

// Element i < 16 is the low nibble of qs[i], element i + 16 the high nibble.
void PackNibbles(const uint8_t* codes, uint8_t* qs) {
  for (int i = 0; i < kQK / 2; ++i)
    qs[i] = static_cast<uint8_t>((codes[i] & 0xf) | ((codes[i + kQK / 2] & 0xf) << 4));
}

int Nibble(const uint8_t* qs, int i) {
  return i < kQK / 2 ? qs[i] & 0xf : qs[i - kQK / 2] >> 4;
}

// Bit 4 of element i is bit i of the 32-bit little-endian qh.
void PackHighBits(const uint8_t* codes, uint8_t* qh) {
  std::memset(qh, 0, 4);
  for (int i = 0; i < kQK; ++i) qh[i / 8] |= static_cast<uint8_t>(((codes[i] >> 4) & 1) << (i % 8));
}

int HighBit(const uint8_t* qh, int i) {
  return (qh[i / 8] >> (i % 8)) & 1;
}

}  // namespace

void DequantizeQ4_0(const BlockQ4_0* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, y += kQK) {
    const float d = F16ToF32(x[b].d);
    for (int i = 0; i < kQK; ++i) y[i] = static_cast<float>(Nibble(x[b].qs, i) - 8) * d;
  }
}

void DequantizeQ4_1(const BlockQ4_1* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, y += kQK) {
    const float d = F16ToF32(x[b].d), m = F16ToF32(x[b].m);
    for (int i = 0; i < kQK; ++i) {
      const float scaled = static_cast<float>(Nibble(x[b].qs, i)) * d;  // exact; the add rounds once
      y[i] = scaled + m;
    }
  }
}

void DequantizeQ5_0(const BlockQ5_0* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, y += kQK) {
    const float d = F16ToF32(x[b].d);
    for (int i = 0; i < kQK; ++i) {
      const int q = Nibble(x[b].qs, i) | (HighBit(x[b].qh, i) << 4);
      y[i] = static_cast<float>(q - 16) * d;
    }
  }
}

void DequantizeQ5_1(const BlockQ5_1* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, y += kQK) {
    const float d = F16ToF32(x[b].d), m = F16ToF32(x[b].m);
    for (int i = 0; i < kQK; ++i) {
      const int q = Nibble(x[b].qs, i) | (HighBit(x[b].qh, i) << 4);
      const float scaled = static_cast<float>(q) * d;
      y[i] = scaled + m;
    }
  }
}

void DequantizeQ8_0(const BlockQ8_0* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, y += kQK) {
    const float d = F16ToF32(x[b].d);
    for (int i = 0; i < kQK; ++i) y[i] = static_cast<float>(x[b].qs[i]) * d;
  }
}

void QuantizeQ4_0(const float* x, BlockQ4_0* y, int64_t n) {
  uint8_t codes[kQK];
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    EncodeSymmetric(x, 4, &y[b].d, codes);
    PackNibbles(codes, y[b].qs);
  }
}

void QuantizeQ4_1(const float* x, BlockQ4_1* y, int64_t n) {
  uint8_t codes[kQK];
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    EncodeAffine(x, 4, &y[b].d, &y[b].m, codes);
    PackNibbles(codes, y[b].qs);
  }
}

void QuantizeQ5_0(const float* x, BlockQ5_0* y, int64_t n) {
  uint8_t codes[kQK];
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    EncodeSymmetric(x, 5, &y[b].d, codes);
    PackNibbles(codes, y[b].qs);
    PackHighBits(codes, y[b].qh);
  }
}

void QuantizeQ5_1(const float* x, BlockQ5_1* y, int64_t n) {
  uint8_t codes[kQK];
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    EncodeAffine(x, 5, &y[b].d, &y[b].m, codes);
    PackNibbles(codes, y[b].qs);
    PackHighBits(codes, y[b].qh);
  }
}

// d = amax / 127 with codes in [-127, 127]: symmetric, so integer dot kernels may take |q| without
// overflowing int8 (quant_dot.h). Used for weights and, unchanged, for activations.
void QuantizeQ8_0(const float* x, BlockQ8_0* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    float amax = 0;
    for (int i = 0; i < kQK; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float d = StoreF16(amax / 127.0f, &y[b].d);
    const float id = d != 0 ? 1.0f / d : 0.0f;
    for (int i = 0; i < kQK; ++i) y[b].qs[i] = static_cast<int8_t>(RoundCode(x[i] * id, -127, 127));
  }
}

}  // namespace hymt::quant_internal
