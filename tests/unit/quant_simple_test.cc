// Bit-exact decoding of the 32-element formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) from blocks built by hand
// from the GGUF definition, and the re-encoding round trip of the symmetric ones.
//
// Expected values are computed here in double, where every product and sum below is exact, and
// rounded to f32 once: the definition's value. f16 scales are given as bit patterns with their exact
// values spelled out, so no f16 conversion code is trusted.
#include <gtest/gtest.h>

#include <cstring>

#include "core/status.h"
#include "quant/blocks.h"
#include "quant/quant.h"
#include "quant_test_util.h"

namespace hymt {
namespace {

using test::BlockAt;
using test::Dequantized;
using test::Dist;
using test::Quantized;
using test::RandomRow;

// f16 bit patterns and their exact values.
constexpr uint16_t kF16One = 0x3c00;    // 1.0
constexpr uint16_t kF16Third = 0x3555;  // 1365 / 4096 = 0.333251953125 (all mantissa bits used)
constexpr double kThird = 1365.0 / 4096.0;
constexpr uint16_t kF16MinusThird = 0xb555;  // -1365 / 4096
constexpr uint16_t kF16Tiny = 0x0001;        // 2^-24, the smallest subnormal
constexpr uint16_t kF16Big = 0x6800;         // 2048
constexpr uint16_t kF16Minus3_1 = 0xc233;    // -3.099609375
constexpr double kMinus3_1 = -3.099609375;

float Exact(double v) {
  return static_cast<float>(v);
}

template <typename Block>
std::vector<float> Decode(DType t, const Block& b) {
  return Dequantized(t, &b, kQK);
}

// Element i < 16 is the low nibble of qs[i], element i + 16 the high nibble.
template <typename Block>
void SetNibbles(Block* b, const int* codes) {
  for (int i = 0; i < 16; ++i) b->qs[i] = static_cast<uint8_t>((codes[i] & 15) | ((codes[i + 16] & 15) << 4));
}

// Bit 4 of element i is bit i of the little-endian 32-bit qh.
template <typename Block>
void SetHighBits(Block* b, const int* codes) {
  uint32_t qh = 0;
  for (int i = 0; i < 32; ++i) qh |= static_cast<uint32_t>((codes[i] >> 4) & 1) << i;
  for (int k = 0; k < 4; ++k) b->qh[k] = static_cast<uint8_t>(qh >> (8 * k));
}

TEST(QuantSimple, Q4_0EveryNibbleInBothHalves) {
  // Low nibbles count up, high nibbles count down: every value in both positions.
  int codes[32];
  for (int i = 0; i < 16; ++i) codes[i] = i, codes[i + 16] = 15 - i;
  for (uint16_t d_bits : {kF16One, kF16Third, kF16MinusThird}) {
    const double d = d_bits == kF16One ? 1.0 : d_bits == kF16Third ? kThird : -kThird;
    BlockQ4_0 b{};
    b.d = d_bits;
    SetNibbles(&b, codes);
    const std::vector<float> y = Decode(DType::kQ4_0, b);
    for (int i = 0; i < 32; ++i) EXPECT_EQ(y[i], Exact(d * (codes[i] - 8))) << "element " << i << " d " << d;
  }
}

TEST(QuantSimple, Q4_0TinyScale) {
  int codes[32];
  for (int i = 0; i < 32; ++i) codes[i] = i % 16;
  BlockQ4_0 b{};
  b.d = kF16Tiny;
  SetNibbles(&b, codes);
  const std::vector<float> y = Decode(DType::kQ4_0, b);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(y[i], Exact(std::ldexp(codes[i] - 8.0, -24)));
}

TEST(QuantSimple, Q4_1AddsTheMinAndRoundsOnce) {
  int codes[32];
  for (int i = 0; i < 16; ++i) codes[i] = i, codes[i + 16] = 15 - i;
  // A tiny step on a large offset: d * q + m needs 39 significant bits, so the f32 result rounds
  // (to nearest even) and must equal the once-rounded exact value.
  struct Case {
    uint16_t d_bits, m_bits;
    double d, m;
  } cases[] = {{kF16Third, kF16Minus3_1, kThird, kMinus3_1},
               {kF16Tiny, kF16Big, std::ldexp(1.0, -24), 2048.0}};
  for (const Case& c : cases) {
    BlockQ4_1 b{};
    b.d = c.d_bits;
    b.m = c.m_bits;
    SetNibbles(&b, codes);
    const std::vector<float> y = Decode(DType::kQ4_1, b);
    for (int i = 0; i < 32; ++i) EXPECT_EQ(y[i], Exact(c.d * codes[i] + c.m)) << "element " << i;
  }
}

TEST(QuantSimple, Q5_0EveryCodeAndEveryHighBit) {
  int codes[32];
  for (int i = 0; i < 32; ++i) codes[i] = i;  // 0..31: both nibble halves, high bit on in 16..31
  BlockQ5_0 b{};
  b.d = kF16Third;
  SetNibbles(&b, codes);
  SetHighBits(&b, codes);
  std::vector<float> y = Decode(DType::kQ5_0, b);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(y[i], Exact(kThird * (codes[i] - 16))) << "element " << i;

  // One high bit at a time: only that element moves from -16 d to 0.
  for (int k = 0; k < 32; ++k) {
    int one[32] = {};
    one[k] = 16;
    BlockQ5_0 h{};
    h.d = kF16One;
    SetNibbles(&h, one);
    SetHighBits(&h, one);
    y = Decode(DType::kQ5_0, h);
    for (int i = 0; i < 32; ++i) EXPECT_EQ(y[i], i == k ? 0.0f : -16.0f) << "bit " << k << " element " << i;
  }
}

TEST(QuantSimple, Q5_1EveryCode) {
  int codes[32];
  for (int i = 0; i < 32; ++i) codes[i] = 31 - i;
  for (bool tiny : {false, true}) {
    BlockQ5_1 b{};
    b.d = tiny ? kF16Tiny : kF16Third;
    b.m = tiny ? kF16Big : kF16Minus3_1;
    SetNibbles(&b, codes);
    SetHighBits(&b, codes);
    const std::vector<float> y = Decode(DType::kQ5_1, b);
    const double d = tiny ? std::ldexp(1.0, -24) : kThird, m = tiny ? 2048.0 : kMinus3_1;
    for (int i = 0; i < 32; ++i) EXPECT_EQ(y[i], Exact(d * codes[i] + m)) << "element " << i;
  }
}

TEST(QuantSimple, Q8_0EveryInt8Extreme) {
  const int8_t values[32] = {-128, -127, -64, -1,  0,  1,   63, 127, -2,  2,    -100, 100, 5, -5, 17,  -17,
                             33,   -33,  99,  -99, 42, -42, 7,  -7,  120, -120, 11,   -11, 3, -3, 126, -126};
  BlockQ8_0 b{};
  b.d = kF16MinusThird;
  std::memcpy(b.qs, values, 32);
  const std::vector<float> y = Decode(DType::kQ8_0, b);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(y[i], Exact(-kThird * values[i])) << "element " << i;
}

// Rows of several blocks decode block by block (the block stride is the struct size).
TEST(QuantSimple, RowsOfBlocksDecodeIndependently) {
  for (DType t : {DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ8_0}) {
    const std::vector<float> x = RandomRow(Dist::kGaussian, 7 * kQK, 11);
    const std::vector<uint8_t> q = Quantized(t, x);
    const std::vector<float> whole = Dequantized(t, q.data(), 7 * kQK);
    const int bytes = GetDTypeInfo(t).block_bytes;
    for (int b = 0; b < 7; ++b) {
      const std::vector<float> one = Dequantized(t, q.data() + b * bytes, kQK);
      for (int i = 0; i < kQK; ++i) EXPECT_EQ(whole[b * kQK + i], one[i]) << DTypeName(t) << " block " << b;
    }
  }
}

// The symmetric formats map the element of largest magnitude onto the end of the grid with the scale
// d = max / -2^(bits-1) (Q8_0: amax / 127), and an f16 d times a small integer is exact in f32; so a
// decoded block re-encodes to the same scale and codes, byte for byte. (Q4_1 / Q5_1 need not: their
// decoded top value d * 15 + m is rounded, so the re-derived d can differ in the last f16 bit.)
TEST(QuantSimple, SymmetricFormatsReencodeTheirOwnOutput) {
  for (DType t : {DType::kQ4_0, DType::kQ5_0, DType::kQ8_0}) {
    for (Dist dist : {Dist::kGaussian, Dist::kStudentT3, Dist::kUniform}) {
      for (int blocks : {1, 3, 33}) {
        const std::vector<float> x = RandomRow(dist, blocks * kQK, 100 + blocks, 0.05);
        const std::vector<uint8_t> q = Quantized(t, x);
        const std::vector<uint8_t> again = Quantized(t, Dequantized(t, q.data(), blocks * kQK));
        EXPECT_EQ(q, again) << DTypeName(t) << " " << test::DistName(dist) << " " << blocks << " blocks";
      }
    }
  }
}

TEST(QuantSimple, CanQuantizeToEveryWritableType) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ4_0, DType::kQ4_1, DType::kQ5_0,
                  DType::kQ5_1, DType::kQ8_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kQ8_K})
    EXPECT_TRUE(CanQuantizeTo(t)) << DTypeName(t);
  EXPECT_FALSE(CanQuantizeTo(DType::kF8E4M3));
  EXPECT_FALSE(CanQuantizeTo(DType::kI32));
  float x[kQK] = {};
  uint8_t out[kQK];
  EXPECT_THROW(QuantizeRow(DType::kF8E4M3, x, out, kQK), Error);
}

}  // namespace
}  // namespace hymt
