// The ggml/GGUF block formats as packed structs. Bit layouts follow the GGUF format definition so that
// files move freely between hymt and llama.cpp; the sizes are fixed by the format (static_assert'ed).
#pragma once

#include <cstdint>

namespace hymt {

constexpr int kQK = 32;           // elements per block of the simple formats
constexpr int kQKK = 256;         // elements per super-block of the K formats
constexpr int kKScaleBytes = 12;  // packed 6-bit scales and mins of Q4_K / Q5_K

// x[i] = d * (nibble - 8); element i < 16 is the low nibble of qs[i], element i + 16 the high nibble.
struct BlockQ4_0 {
  uint16_t d;  // f16 scale
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockQ4_0) == 18);

// x[i] = d * nibble + m.
struct BlockQ4_1 {
  uint16_t d;  // f16
  uint16_t m;  // f16
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockQ4_1) == 20);

// 5-bit: the low 4 bits as in Q4_0, bit 4 of element j in bit j of qh (little-endian u32);
// x = d * (q - 16).
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockQ5_0) == 22);

// x = d * q + m.
struct BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockQ5_1) == 24);

// x[i] = d * qs[i].
struct BlockQ8_0 {
  uint16_t d;  // f16
  int8_t qs[kQK];
};
static_assert(sizeof(BlockQ8_0) == 34);

// 8 sub-blocks of 32 with 6-bit scale and min each (packed in `scales`); 4-bit quants.
// x = d * scale_j * q - dmin * min_j.
struct BlockQ4_K {
  uint16_t d;     // f16 super-block scale of the scales
  uint16_t dmin;  // f16 super-block scale of the mins
  uint8_t scales[kKScaleBytes];
  uint8_t qs[kQKK / 2];
};
static_assert(sizeof(BlockQ4_K) == 144);

// The 6-bit scale and min of sub-block j (0..7) in the 12 packed bytes of a Q4_K / Q5_K super-block.
// j < 4: the low 6 bits of bytes j (scale) and j + 4 (min). j >= 4: the low and high nibble of byte
// j + 4 give the low 4 bits of scale and min; their top 2 bits sit in bits 6-7 of bytes j - 4 (scale)
// and j (min).
inline void GetKScaleMin(const uint8_t* scales, int j, int* scale, int* min) {
  if (j < 4) {
    *scale = scales[j] & 63;
    *min = scales[j + 4] & 63;
  } else {
    *scale = (scales[j + 4] & 0xf) | ((scales[j - 4] >> 6) << 4);
    *min = (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4);
  }
}

// As Q4_K with a fifth bit per element in qh.
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qh[kQKK / 8];
  uint8_t qs[kQKK / 2];
};
static_assert(sizeof(BlockQ5_K) == 176);

// The code of element e (0..255) of a Q4_K / Q5_K super-block. Sub-block j = e / 32 keeps its low 4 bits
// in bytes 32 * (j / 2) .. + 32 of qs, low nibbles for even j and high nibbles for odd j; Q5_K keeps
// bit 4 of element 32 j + l in bit j of qh[l].
inline int Q4KCode(const BlockQ4_K& b, int e) {
  return (b.qs[32 * (e / 64) + e % 32] >> (4 * ((e / 32) % 2))) & 0xf;
}
inline int Q5KCode(const BlockQ5_K& b, int e) {
  const int low = (b.qs[32 * (e / 64) + e % 32] >> (4 * ((e / 32) % 2))) & 0xf;
  return low | (((b.qh[e % 32] >> (e / 32)) & 1) << 4);
}

// 16 sub-blocks of 16 with int8 scales; 6-bit quants (4 low bits in ql, 2 high bits in qh);
// x = d * scale_j * (q - 32).
struct BlockQ6_K {
  uint8_t ql[kQKK / 2];
  uint8_t qh[kQKK / 4];
  int8_t scales[kQKK / 16];
  uint16_t d;  // f16
};
static_assert(sizeof(BlockQ6_K) == 210);

// The code (0..63, the value is code - 32) of element e = 128 h + 32 k + l (h < 2, k < 4, l < 32):
// low 4 bits in ql[64 h + 32 (k % 2) + l] (low nibble for k < 2, high for k >= 2), high 2 bits at
// bit 2 k of qh[32 h + l]. Its scale is scales[e / 16].
inline int Q6KCode(const BlockQ6_K& b, int e) {
  const int h = e / 128, k = (e / 32) % 4, l = e % 32;
  const int low = (b.ql[64 * h + 32 * (k % 2) + l] >> (4 * (k / 2))) & 0xf;
  return low | (((b.qh[32 * h + l] >> (2 * k)) & 3) << 4);
}

// Activations quantised for K-quant dot products: x = d * qs; bsums are sums of 16 consecutive qs.
struct BlockQ8_K {
  float d;
  int8_t qs[kQKK];
  int16_t bsums[kQKK / 16];
};
static_assert(sizeof(BlockQ8_K) == 292);

}  // namespace hymt
