// The integer dot products (quant_dot.h) against DotRef, over odd numbers of blocks.
//
// 1. Per block, the integer sums are exact: checked against sums recomputed here from decoded values.
//    A weight block re-labelled with d = 1, dmin = 0 decodes to scale_j * q (an exact integer), and
//    with d = 0, dmin = 1 to -min_j; an activation block with d = 1 decodes to its codes.
// 2. Dot(w, a) against DotRef(w, dequant(a)): both approximate the same real number E = sum w_i a_i
//    (w_i and a_i as defined by the formats). Dot's only roundings are s_b = f32(d_w d_a) and
//    m_b = f32(dmin_w d_a), each 2^-24 relative, so |Dot - E| <= 2^-24 DotAbsTerms. DotRef rounds each
//    decoded w_i and a_i once (2^-24 each) and sums in double (n 2^-53), so
//    |DotRef - E| <= (2^-23 + n 2^-53) sum |w_i a_i|. The tolerance is the sum of the two.
// 3. Dot(w, Q8(x)) against DotRef(w, x): the activation quantiser keeps |x_i - a_i| <= d_b / 2 (plus
//    its own roundings, 2^-22 |x_i|), so the difference is at most
//    sum_b d_b / 2 sum_{i in b} |w_i| + 2^-22 sum |w_i x_i|, plus the tolerance of 2.
#include "quant/quant_dot.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <type_traits>

#include "quant/blocks.h"
#include "quant/quant.h"
#include "quant_test_util.h"

namespace hymt {
namespace {

using test::BlockAt;
using test::Dist;
using test::RandomRow;

constexpr uint16_t kF16One = 0x3c00;

const DType kIntegerPaths[] = {DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};

DType ActivationType(DType w) {
  DType a = DType::kF32;
  EXPECT_TRUE(DotActivationType(w, &a)) << DTypeName(w);
  return a;
}

std::vector<int64_t> OddSizes(DType w) {
  const int64_t bs = GetDTypeInfo(w).block_size;
  return bs == kQK ? std::vector<int64_t>{bs, 3 * bs, 7 * bs, 33 * bs}
                   : std::vector<int64_t>{bs, 3 * bs, 5 * bs};
}

// sum_i u[i] * v[i] in double, exact for the small integers used below.
double Sum(const std::vector<float>& u, const std::vector<float>& v) {
  double s = 0;
  for (size_t i = 0; i < u.size(); ++i) s += static_cast<double>(u[i]) * v[i];
  return s;
}

// The activation block's codes, decoded with d = 1.
template <typename ABlock>
std::vector<float> Codes(ABlock a, DType at) {
  if constexpr (std::is_same_v<ABlock, BlockQ8_0>)
    a.d = kF16One;
  else
    a.d = 1.0f;
  return test::Dequantized(at, &a, GetDTypeInfo(at).block_size);
}

TEST(QuantDot, BlockSumsAreExact) {
  for (Dist dist : {Dist::kGaussian, Dist::kStudentT3}) {
    const std::vector<float> wx = RandomRow(dist, 256 * 5, 17), ax = RandomRow(dist, 256 * 5, 18);
    // Q8_0 and Q4_0 weights with Q8_0 activations: I = sum of decoded(d = 1) products.
    const std::vector<uint8_t> a0 = test::Quantized(DType::kQ8_0, ax);
    const std::vector<uint8_t> w8 = test::Quantized(DType::kQ8_0, wx), w4 = test::Quantized(DType::kQ4_0, wx);
    for (int b = 0; b < 40; ++b) {
      const std::vector<float> ac = Codes(BlockAt<BlockQ8_0>(a0, b), DType::kQ8_0);
      BlockQ8_0 w8b = BlockAt<BlockQ8_0>(w8, b);
      w8b.d = kF16One;
      EXPECT_EQ(DotBlockQ8_0Q8_0(BlockAt<BlockQ8_0>(w8, b), BlockAt<BlockQ8_0>(a0, b)),
                Sum(test::Dequantized(DType::kQ8_0, &w8b, kQK), ac));
      BlockQ4_0 w4b = BlockAt<BlockQ4_0>(w4, b);
      w4b.d = kF16One;
      EXPECT_EQ(DotBlockQ4_0Q8_0(BlockAt<BlockQ4_0>(w4, b), BlockAt<BlockQ8_0>(a0, b)),
                Sum(test::Dequantized(DType::kQ4_0, &w4b, kQK), ac));
    }
    // K formats with Q8_K activations.
    const std::vector<uint8_t> ak = test::Quantized(DType::kQ8_K, ax);
    const std::vector<uint8_t> q4 = test::Quantized(DType::kQ4_K, wx), q5 = test::Quantized(DType::kQ5_K, wx),
                               q6 = test::Quantized(DType::kQ6_K, wx);
    for (int b = 0; b < 5; ++b) {
      const BlockQ8_K& a = BlockAt<BlockQ8_K>(ak, b);
      const std::vector<float> ac = Codes(a, DType::kQ8_K);
      auto check_affine = [&](auto w, DType wt, KDotSums sums) {
        auto scaled = w, mins = w;
        scaled.d = kF16One;
        scaled.dmin = 0;
        mins.d = 0;
        mins.dmin = kF16One;
        EXPECT_EQ(sums.scaled, Sum(test::Dequantized(wt, &scaled, 256), ac))
            << DTypeName(wt) << " block " << b;
        EXPECT_EQ(sums.mins, -Sum(test::Dequantized(wt, &mins, 256), ac)) << DTypeName(wt) << " block " << b;
      };
      check_affine(BlockAt<BlockQ4_K>(q4, b), DType::kQ4_K, DotBlockQ4_KQ8_K(BlockAt<BlockQ4_K>(q4, b), a));
      check_affine(BlockAt<BlockQ5_K>(q5, b), DType::kQ5_K, DotBlockQ5_KQ8_K(BlockAt<BlockQ5_K>(q5, b), a));
      BlockQ6_K w6 = BlockAt<BlockQ6_K>(q6, b);
      w6.d = kF16One;
      EXPECT_EQ(DotBlockQ6_KQ8_K(BlockAt<BlockQ6_K>(q6, b), a),
                Sum(test::Dequantized(DType::kQ6_K, &w6, 256), ac));
    }
  }
}

// The extremes of every code and scale at once: no int32 overflow, and the sums still exact.
TEST(QuantDot, BlockSumsAtTheExtremes) {
  BlockQ8_K a{};
  a.d = 1.0f;
  for (int i = 0; i < 256; ++i) a.qs[i] = 127;
  for (int g = 0; g < 16; ++g) a.bsums[g] = 16 * 127;
  BlockQ5_K w5{};
  std::memset(w5.scales, 0xff, sizeof(w5.scales));  // every scale and min 63
  std::memset(w5.qs, 0xff, sizeof(w5.qs));
  std::memset(w5.qh, 0xff, sizeof(w5.qh));  // every code 31
  const KDotSums s5 = DotBlockQ5_KQ8_K(w5, a);
  EXPECT_EQ(s5.scaled, 8 * 63 * 32 * 31 * 127);
  EXPECT_EQ(s5.mins, 8 * 63 * 32 * 127);
  BlockQ6_K w6{};  // every code 0 (value -32), every scale -128
  for (int j = 0; j < 16; ++j) w6.scales[j] = -128;
  EXPECT_EQ(DotBlockQ6_KQ8_K(w6, a), 16 * 128 * 16 * 32 * 127);
}

struct Row {
  std::vector<float> w;         // decoded weights
  std::vector<uint8_t> wq, aq;  // packed weights and activations
  std::vector<float> a;         // decoded activations
};

Row MakeRow(DType wt, const std::vector<float>& wx, const std::vector<float>& x) {
  Row r;
  const int64_t n = static_cast<int64_t>(x.size());
  r.wq = test::Quantized(wt, wx);
  r.w = test::Dequantized(wt, r.wq.data(), n);
  r.aq = test::Quantized(ActivationType(wt), x);
  r.a = test::Dequantized(ActivationType(wt), r.aq.data(), n);
  return r;
}

TEST(QuantDot, MatchesDotRefOnDecodedActivations) {
  for (DType wt : kIntegerPaths) {
    for (Dist dist : {Dist::kGaussian, Dist::kStudentT3, Dist::kUniform}) {
      for (int64_t n : OddSizes(wt)) {
        const Row r = MakeRow(wt, RandomRow(dist, n, 300 + n), RandomRow(dist, n, 301 + n, 3.0));
        const double dot = Dot(wt, r.wq.data(), r.aq.data(), n);
        const double ref = DotRef(wt, r.wq.data(), r.a.data(), n);
        double abs_wa = 0;
        for (int64_t i = 0; i < n; ++i) abs_wa += std::fabs(static_cast<double>(r.w[i]) * r.a[i]);
        const double tol =
            0x1p-24 * DotAbsTerms(wt, r.wq.data(), r.aq.data(), n) + (0x1p-23 + n * 0x1p-53) * abs_wa;
        EXPECT_NEAR(dot, ref, tol) << DTypeName(wt) << " " << test::DistName(dist) << " n=" << n;
      }
    }
  }
}

TEST(QuantDot, MatchesDotRefOnFloatActivationsWithinTheQuantisationBound) {
  for (DType wt : kIntegerPaths) {
    const DType at = ActivationType(wt);
    const int64_t abs_block = GetDTypeInfo(at).block_size;
    for (Dist dist : {Dist::kGaussian, Dist::kStudentT3}) {
      for (int64_t n : OddSizes(wt)) {
        const std::vector<float> x = RandomRow(dist, n, 500 + n, 0.7);
        const Row r = MakeRow(wt, RandomRow(dist, n, 400 + n), x);
        const double dot = Dot(wt, r.wq.data(), r.aq.data(), n);
        const double ref = DotRef(wt, r.wq.data(), x.data(), n);
        double bound = 0, abs_wa = 0, abs_wx = 0;
        for (int64_t b = 0; b < n / abs_block; ++b) {
          const double d =
              at == DType::kQ8_0 ? F16ToF32(BlockAt<BlockQ8_0>(r.aq, b).d) : BlockAt<BlockQ8_K>(r.aq, b).d;
          double abs_w = 0;
          for (int64_t i = b * abs_block; i < (b + 1) * abs_block; ++i) abs_w += std::fabs(r.w[i]);
          bound += d / 2 * abs_w;
        }
        for (int64_t i = 0; i < n; ++i) {
          abs_wa += std::fabs(static_cast<double>(r.w[i]) * r.a[i]);
          abs_wx += std::fabs(static_cast<double>(r.w[i]) * x[i]);
        }
        bound += 0x1p-22 * abs_wx + 0x1p-24 * DotAbsTerms(wt, r.wq.data(), r.aq.data(), n) +
                 (0x1p-23 + n * 0x1p-53) * abs_wa;
        EXPECT_NEAR(dot, ref, bound) << DTypeName(wt) << " " << test::DistName(dist) << " n=" << n;
        // The bound is a worst case; random rounding errors cancel, so the actual difference is far
        // smaller. Guards against a bound so loose it could hide a wrong block scale.
        EXPECT_LT(std::fabs(dot - ref), 0.25 * bound) << DTypeName(wt) << " n=" << n;
      }
    }
  }
}

TEST(QuantDot, OnlyTheIntegerPathsHaveAnActivationType) {
  DType a;
  for (DType t :
       {DType::kF32, DType::kF16, DType::kBF16, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ8_K})
    EXPECT_FALSE(DotActivationType(t, &a)) << DTypeName(t);
  EXPECT_TRUE(DotActivationType(DType::kQ4_0, &a));
  EXPECT_EQ(a, DType::kQ8_0);
  EXPECT_TRUE(DotActivationType(DType::kQ6_K, &a));
  EXPECT_EQ(a, DType::kQ8_K);
}

}  // namespace
}  // namespace hymt
