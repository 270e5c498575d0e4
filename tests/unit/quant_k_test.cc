// Bit-exact decoding of the super-block formats (Q4_K, Q5_K, Q6_K, Q8_K) from blocks built by hand from
// the GGUF definition: every 6-bit scale and min in every packing position, every code position, the
// high-bit planes, and the one rounding each definition has. Expected values are exact in double and
// rounded to f32 once.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "quant/blocks.h"
#include "quant/quant.h"
#include "quant_test_util.h"

namespace hymt {
namespace {

using test::Dequantized;

constexpr uint16_t kF16One = 0x3c00;    // 1.0
constexpr uint16_t kF16Third = 0x3555;  // 1365 / 4096
constexpr double kThird = 1365.0 / 4096.0;
constexpr uint16_t kF16Tiny = 0x0001;  // 2^-24
constexpr uint16_t kF16Big = 0x6800;   // 2048

float Exact(double v) {
  return static_cast<float>(v);
}

// The 12 scale bytes of Q4_K / Q5_K, written straight from the definition: sub-block j < 4 keeps scale
// and min in the low 6 bits of bytes j and j + 4; j >= 4 keeps their low 4 bits in the low / high
// nibble of byte j + 4 and their top 2 bits in bits 6-7 of bytes j - 4 (scale) and j (min).
void SetKScale(uint8_t* s, int j, int scale, int min) {
  if (j < 4) {
    s[j] = static_cast<uint8_t>((s[j] & 0xc0) | scale);
    s[j + 4] = static_cast<uint8_t>((s[j + 4] & 0xc0) | min);
  } else {
    s[j + 4] = static_cast<uint8_t>((scale & 15) | ((min & 15) << 4));
    s[j - 4] = static_cast<uint8_t>((s[j - 4] & 0x3f) | ((scale >> 4) << 6));
    s[j] = static_cast<uint8_t>((s[j] & 0x3f) | ((min >> 4) << 6));
  }
}

// Code of element 32 j + l: the low (even j) or high (odd j) nibble of qs[32 (j / 2) + l].
template <typename Block>
void SetKNibble(Block* b, int e, int code) {
  const int j = e / 32, l = e % 32, shift = 4 * (j % 2);
  uint8_t& byte = b->qs[32 * (j / 2) + l];
  byte = static_cast<uint8_t>((byte & ~(15 << shift)) | ((code & 15) << shift));
}

TEST(QuantK, Q4_KEveryScaleAndMinBitInEveryPosition) {
  for (int j = 0; j < 8; ++j) {
    for (int v : {1, 2, 4, 8, 16, 32, 63}) {
      // Scale only: d = 1, dmin = 0, every code 1, only sub-block j has a scale.
      BlockQ4_K b{};
      b.d = kF16One;
      std::memset(b.qs, 0x11, sizeof(b.qs));
      SetKScale(b.scales, j, v, 0);
      std::vector<float> y = Dequantized(DType::kQ4_K, &b, 256);
      for (int e = 0; e < 256; ++e)
        ASSERT_EQ(y[e], e / 32 == j ? v : 0) << "scale " << v << " sub-block " << j;

      // Min only: d = 0, dmin = 1.
      BlockQ4_K m{};
      m.dmin = kF16One;
      SetKScale(m.scales, j, 0, v);
      y = Dequantized(DType::kQ4_K, &m, 256);
      for (int e = 0; e < 256; ++e)
        ASSERT_EQ(y[e], e / 32 == j ? -v : 0) << "min " << v << " sub-block " << j;
    }
  }
}

TEST(QuantK, Q4_KEveryNibbleInEveryPosition) {
  BlockQ4_K b{};
  b.d = kF16One;
  for (int j = 0; j < 8; ++j) SetKScale(b.scales, j, 1, 0);
  for (int e = 0; e < 256; ++e) SetKNibble(&b, e, (e / 32 + e) % 16);
  const std::vector<float> y = Dequantized(DType::kQ4_K, &b, 256);
  for (int e = 0; e < 256; ++e) EXPECT_EQ(y[e], (e / 32 + e) % 16) << "element " << e;
}

// x = d * scale * q - dmin * min, where only the subtraction rounds (f16 d times a 6-bit scale times a
// 4- or 5-bit code is exact in f32).
TEST(QuantK, Q4_KRoundsOnlyTheSubtraction) {
  const int scales[8] = {63, 1, 17, 32, 5, 48, 60, 33}, mins[8] = {0, 63, 1, 31, 62, 16, 2, 45};
  struct Case {
    uint16_t d_bits, dmin_bits;
    double d, dmin;
  } cases[] = {{kF16Third, kF16One, kThird, 1.0}, {kF16Tiny, kF16Big, std::ldexp(1.0, -24), 2048.0}};
  for (const Case& c : cases) {
    BlockQ4_K b{};
    b.d = c.d_bits;
    b.dmin = c.dmin_bits;
    for (int j = 0; j < 8; ++j) SetKScale(b.scales, j, scales[j], mins[j]);
    for (int e = 0; e < 256; ++e) SetKNibble(&b, e, (e * 7) % 16);
    const std::vector<float> y = Dequantized(DType::kQ4_K, &b, 256);
    for (int e = 0; e < 256; ++e) {
      const int j = e / 32;
      EXPECT_EQ(y[e], Exact(c.d * scales[j] * ((e * 7) % 16) - c.dmin * mins[j])) << "element " << e;
    }
  }
}

TEST(QuantK, Q5_KEveryHighBitPosition) {
  // Bit 4 of element 32 j + l is bit j of qh[l]: set one at a time, with all nibbles 0.
  for (int e = 0; e < 256; ++e) {
    BlockQ5_K b{};
    b.d = kF16One;
    for (int j = 0; j < 8; ++j) SetKScale(b.scales, j, 1, 0);
    b.qh[e % 32] = static_cast<uint8_t>(1 << (e / 32));
    const std::vector<float> y = Dequantized(DType::kQ5_K, &b, 256);
    for (int i = 0; i < 256; ++i)
      ASSERT_EQ(y[i], i == e ? 16 : 0) << "bit for element " << e << ", element " << i;
  }
}

TEST(QuantK, Q5_KScalesMinsAndCodes) {
  const int scales[8] = {1, 63, 32, 16, 8, 4, 2, 33}, mins[8] = {63, 1, 2, 4, 8, 16, 32, 0};
  BlockQ5_K b{};
  b.d = kF16Third;
  b.dmin = kF16One;
  for (int j = 0; j < 8; ++j) SetKScale(b.scales, j, scales[j], mins[j]);
  for (int e = 0; e < 256; ++e) {
    const int code = (e * 13 + 5) % 32;
    SetKNibble(&b, e, code);
    b.qh[e % 32] |= static_cast<uint8_t>((code >> 4) << (e / 32));
  }
  const std::vector<float> y = Dequantized(DType::kQ5_K, &b, 256);
  for (int e = 0; e < 256; ++e) {
    const int j = e / 32;
    EXPECT_EQ(y[e], Exact(kThird * scales[j] * ((e * 13 + 5) % 32) - mins[j])) << "element " << e;
  }
}

// Q6_K element e = 128 h + 32 k + l: low 4 bits in ql[64 h + 32 (k % 2) + l] (low nibble for k < 2),
// high 2 bits at bit 2 k of qh[32 h + l]; x = d * scales[e / 16] * (code - 32).
void SetQ6Code(BlockQ6_K* b, int e, int code) {
  const int h = e / 128, k = (e / 32) % 4, l = e % 32;
  uint8_t& low = b->ql[64 * h + 32 * (k % 2) + l];
  const int shift = 4 * (k / 2);
  low = static_cast<uint8_t>((low & ~(15 << shift)) | ((code & 15) << shift));
  uint8_t& high = b->qh[32 * h + l];
  high = static_cast<uint8_t>((high & ~(3 << (2 * k))) | ((code >> 4) << (2 * k)));
}

TEST(QuantK, Q6_KEveryCodeInEveryPosition) {
  // Four passes so that each position sees codes from every quarter of [0, 63].
  for (int pass = 0; pass < 4; ++pass) {
    BlockQ6_K b{};
    b.d = kF16One;
    for (int j = 0; j < 16; ++j) b.scales[j] = 1;
    for (int e = 0; e < 256; ++e) SetQ6Code(&b, e, (e + 16 * pass) % 64);
    const std::vector<float> y = Dequantized(DType::kQ6_K, &b, 256);
    for (int e = 0; e < 256; ++e)
      EXPECT_EQ(y[e], (e + 16 * pass) % 64 - 32) << "element " << e << " pass " << pass;
  }
}

TEST(QuantK, Q6_KSignedScalesAreExact) {
  const int8_t scales[16] = {-128, 127, -1, 1, 0, 64, -64, 100, -100, 3, -3, 77, -77, 126, -127, 2};
  BlockQ6_K b{};
  b.d = kF16Third;
  std::memcpy(b.scales, scales, 16);
  for (int e = 0; e < 256; ++e) SetQ6Code(&b, e, (e * 5) % 64);
  const std::vector<float> y = Dequantized(DType::kQ6_K, &b, 256);
  for (int e = 0; e < 256; ++e)
    EXPECT_EQ(y[e], Exact(kThird * scales[e / 16] * ((e * 5) % 64 - 32))) << "element " << e;
}

// Q8_K keeps d in f32, so d * q is the one rounding.
TEST(QuantK, Q8_KRoundsTheProduct) {
  BlockQ8_K b{};
  b.d = 0.1f;  // a full 24-bit significand
  for (int i = 0; i < 256; ++i) b.qs[i] = static_cast<int8_t>(i - 128);
  const std::vector<float> y = Dequantized(DType::kQ8_K, &b, 256);
  for (int i = 0; i < 256; ++i)
    EXPECT_EQ(y[i], Exact(static_cast<double>(b.d) * (i - 128))) << "element " << i;
}

// Q8_K's encoder: d = max|x| / 127, codes in [-127, 127], bsums the sums of 16 consecutive codes.
TEST(QuantK, Q8_KEncoderContract) {
  for (int blocks : {1, 3}) {
    std::vector<float> x = test::RandomRow(test::Dist::kStudentT3, 256 * blocks, 5 + blocks);
    const std::vector<uint8_t> q = test::Quantized(DType::kQ8_K, x);
    for (int b = 0; b < blocks; ++b) {
      const BlockQ8_K& blk = test::BlockAt<BlockQ8_K>(q, b);
      float amax = 0;
      for (int i = 0; i < 256; ++i) amax = std::max(amax, std::fabs(x[256 * b + i]));
      EXPECT_EQ(blk.d, amax / 127.0f);
      for (int g = 0; g < 16; ++g) {
        int sum = 0;
        for (int i = 16 * g; i < 16 * g + 16; ++i) {
          EXPECT_GE(blk.qs[i], -127);
          sum += blk.qs[i];
        }
        EXPECT_EQ(blk.bsums[g], sum) << "block " << b << " group " << g;
      }
    }
  }
}

}  // namespace
}  // namespace hymt
