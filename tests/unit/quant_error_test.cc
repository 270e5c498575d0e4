// Quantise -> dequantise error of every block format against budgets derived from each format's step.
//
// Per element (every format). With the block's scales as stored, the encoder must pick the nearest code.
// Let step be the distance between neighbouring decoded values in the element's (sub-)block and
// [lo, hi] the interval the codes span. Round to nearest then gives
//     |x - x'| <= step / 2 + distance(x, [lo, hi]) + slack,
// the second term being what clipping costs outside the grid. slack covers the f32 roundings on the
// way: the encoder computes (x + offset) * (1 / step) (three roundings of at most 2^-24 relative, i.e.
// 3 * 2^-24 * (|x| + |offset|) in value terms) and the decoder rounds once more (2^-24 |x'|); so
// slack = 2^-22 (|x| + |offset|), plus 2^-20 of a step for the rounding of 1 / step, plus 2^-149 * 4
// for f32 subnormals.
//
// Per element (32-element formats, scales in f16's normal range). Their scale choice also bounds how
// far outside the grid a value can be (kSimpleBudget below): Q8_0 and the _1 formats cover the block's
// range, so |x - x'| <= step / 2; Q4_0 / Q5_0 put the largest magnitude on the long end of an
// asymmetric grid (-8..7, -16..15), so a value of the opposite sign can clip by a step: |x - x'| <= step.
// The f16 rounding of d and m moves the grid ends by at most 2^-11 of the block's max |x| per stored
// value, covered by 2^-9 * max|x|.
//
// RMS (every format): a regression guard on the scale choice, measured with bench/quant_error and
// given 10% headroom; the K formats' search (docs/QUANTIZATION.md) is judged here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "quant/blocks.h"
#include "quant/quant.h"
#include "quant_test_util.h"

namespace hymt {
namespace {

using test::BlockAt;
using test::Dist;
using test::RandomRow;

const DType kBlockTypes[] = {DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ8_0,
                             DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kQ8_K};

// The grid element i of a packed row of type t lies on, read from the stored scales.
struct Grid {
  double step = 0;        // between neighbouring codes
  double lo = 0, hi = 0;  // the values the codes span
  double offset = 0;      // what the encoder adds before dividing by the step
};

Grid Symmetric(double d, int lowest, int highest) {
  const double a = d * lowest, b = d * highest;
  return {std::fabs(d), std::min(a, b), std::max(a, b), 0};
}

Grid Affine(double d, double m, int top) {
  return {d, m, m + d * top, -m};
}

Grid GridOf(DType t, const std::vector<uint8_t>& row, int64_t i) {
  const int64_t b = i / GetDTypeInfo(t).block_size, e = i % GetDTypeInfo(t).block_size;
  switch (t) {
    case DType::kQ4_0:
      return Symmetric(F16ToF32(BlockAt<BlockQ4_0>(row, b).d), -8, 7);
    case DType::kQ5_0:
      return Symmetric(F16ToF32(BlockAt<BlockQ5_0>(row, b).d), -16, 15);
    case DType::kQ8_0:
      return Symmetric(F16ToF32(BlockAt<BlockQ8_0>(row, b).d), -127, 127);
    case DType::kQ4_1: {
      const BlockQ4_1& blk = BlockAt<BlockQ4_1>(row, b);
      return Affine(F16ToF32(blk.d), F16ToF32(blk.m), 15);
    }
    case DType::kQ5_1: {
      const BlockQ5_1& blk = BlockAt<BlockQ5_1>(row, b);
      return Affine(F16ToF32(blk.d), F16ToF32(blk.m), 31);
    }
    case DType::kQ4_K:
    case DType::kQ5_K: {
      const uint8_t* base = row.data() + b * GetDTypeInfo(t).block_bytes;
      uint16_t d, dmin;  // both formats start with d, dmin, scales[12]
      std::memcpy(&d, base, 2);
      std::memcpy(&dmin, base + 2, 2);
      int sc, mn;
      GetKScaleMin(base + 4, static_cast<int>(e / 32), &sc, &mn);
      return Affine(F16ToF32(d) * sc, -static_cast<double>(F16ToF32(dmin)) * mn, t == DType::kQ4_K ? 15 : 31);
    }
    case DType::kQ6_K: {
      const BlockQ6_K& blk = BlockAt<BlockQ6_K>(row, b);
      return Symmetric(static_cast<double>(F16ToF32(blk.d)) * blk.scales[e / 16], -32, 31);
    }
    case DType::kQ8_K:
      return Symmetric(BlockAt<BlockQ8_K>(row, b).d, -127, 127);
    default:
      break;
  }
  ADD_FAILURE() << "no grid for " << DTypeName(t);
  return {};
}

double DistanceToGrid(double x, const Grid& g) {
  return x < g.lo ? g.lo - x : x > g.hi ? x - g.hi : 0;
}

// Quantises x as t and checks every element against the nearest-code budget; returns the decoded row.
std::vector<float> CheckNearestCode(DType t, const std::vector<float>& x, const std::string& what) {
  const int64_t n = static_cast<int64_t>(x.size());
  const std::vector<uint8_t> q = test::Quantized(t, x);
  const std::vector<float> y = test::Dequantized(t, q.data(), n);
  int failures = 0;
  for (int64_t i = 0; i < n && failures < 5; ++i) {
    const Grid g = GridOf(t, q, i);
    const double err = std::fabs(static_cast<double>(y[i]) - x[i]);
    const double budget = 0.5 * g.step * (1 + 0x1p-20) + DistanceToGrid(x[i], g) +
                          0x1p-22 * (std::fabs(x[i]) + std::fabs(g.offset)) + 0x1p-147;
    if (!std::isfinite(y[i]) || !(err <= budget)) {
      ++failures;
      ADD_FAILURE() << DTypeName(t) << " " << what << " element " << i << ": x " << x[i] << " decoded "
                    << y[i] << " error " << err << " budget " << budget << " (step " << g.step << ", grid ["
                    << g.lo << ", " << g.hi << "])";
    }
  }
  return y;
}

// Rows with an odd number of blocks of each format.
std::vector<int64_t> OddSizes(DType t) {
  const int64_t bs = GetDTypeInfo(t).block_size;
  return bs == kQK ? std::vector<int64_t>{bs, 3 * bs, 7 * bs, 33 * bs}
                   : std::vector<int64_t>{bs, 3 * bs, 5 * bs};
}

TEST(QuantError, NearestCodeOnRandomData) {
  for (DType t : kBlockTypes) {
    for (Dist dist : {Dist::kGaussian, Dist::kStudentT3, Dist::kUniform}) {
      for (int64_t n : OddSizes(t)) {
        for (double scale : {1e-3, 1.0, 30.0}) {
          CheckNearestCode(t, RandomRow(dist, n, 1000 + n, scale),
                           std::string(test::DistName(dist)) + " n=" + std::to_string(n) +
                               " scale=" + std::to_string(scale));
        }
      }
    }
  }
}

// Blocks that stress the scale choice: zeros, constants, a single spike, magnitudes from f32 subnormal
// to beyond what an f16 scale can reach (those clip; the budget's distance-to-grid term accounts for it), and
// sub-blocks that differ wildly inside one K super-block.
std::vector<float> SpecialRow(int64_t block_size) {
  const int64_t sub = block_size == kQK ? kQK : 32;
  std::vector<std::vector<float>> pieces;
  auto add = [&](std::vector<float> v) { pieces.push_back(std::move(v)); };
  add(std::vector<float>(sub, 0.0f));
  add(std::vector<float>(sub, 0.37f));
  add(std::vector<float>(sub, -1.3f));
  std::vector<float> spike(sub, 0.0f);
  spike[sub / 3] = -5.0f;
  add(spike);
  std::vector<float> two(sub, 0.25f);
  two[1] = 4.0f;
  add(two);
  for (double scale : {1e-40, 1e-30, 1e-9, 1e-6, 1e3, 1e6, 1e9, 1e20})
    add(RandomRow(Dist::kGaussian, sub, static_cast<uint64_t>(std::log10(scale) + 100), scale));
  std::vector<float> row;
  for (const auto& p : pieces) row.insert(row.end(), p.begin(), p.end());
  while (row.size() % block_size != 0) row.push_back(0.5f * static_cast<float>(row.size() % 7));
  return row;
}

TEST(QuantError, NearestCodeOnSpecialBlocks) {
  for (DType t : kBlockTypes) {
    const std::vector<float> x = SpecialRow(GetDTypeInfo(t).block_size);
    const std::vector<float> y = CheckNearestCode(t, x, "special");
    // An all-zero (sub-)block decodes to zeros, a constant one to within its format's resolution.
    for (int i = 0; i < 32; ++i) EXPECT_EQ(y[i], 0.0f) << DTypeName(t) << " zero block, element " << i;
    for (int i = 32; i < 64; ++i) EXPECT_NEAR(y[i], 0.37f, 0.37f / 16) << DTypeName(t) << " constant block";
  }
}

// kSimpleBudget[t]: max |x - x'| in steps for values the scale choice covers (see the top of the file).
const std::map<DType, double> kSimpleBudget = {
    {DType::kQ4_0, 1.0}, {DType::kQ5_0, 1.0}, {DType::kQ8_0, 0.5}, {DType::kQ4_1, 0.5}, {DType::kQ5_1, 0.5}};

TEST(QuantError, SimpleFormatsStayWithinTheirStepBudget) {
  for (const auto& [t, steps] : kSimpleBudget) {
    for (Dist dist : {Dist::kGaussian, Dist::kStudentT3, Dist::kUniform}) {
      for (int64_t n : OddSizes(t)) {
        const std::vector<float> x = RandomRow(dist, n, 7 * n + 1, 0.5);
        const std::vector<uint8_t> q = test::Quantized(t, x);
        const std::vector<float> y = test::Dequantized(t, q.data(), n);
        for (int64_t b = 0; b < n / kQK; ++b) {
          double amax = 0;
          for (int i = 0; i < kQK; ++i) amax = std::max(amax, std::fabs(static_cast<double>(x[b * kQK + i])));
          for (int i = 0; i < kQK; ++i) {
            const int64_t k = b * kQK + i;
            const double budget = steps * GridOf(t, q, k).step + 0x1p-9 * amax;
            ASSERT_LE(std::fabs(static_cast<double>(y[k]) - x[k]), budget)
                << DTypeName(t) << " " << test::DistName(dist) << " element " << k;
          }
        }
      }
    }
  }
}

// Relative RMS error budgets (RMS(x - x') / RMS(x)): bench/quant_error's measurement plus 10%.
struct RmsBudget {
  double gaussian, student_t3;
};
const std::map<DType, RmsBudget> kRmsBudget = {
    {DType::kQ4_0, {0.0945, 0.139}},  {DType::kQ4_1, {0.0860, 0.110}},    {DType::kQ5_0, {0.0469, 0.0717}},
    {DType::kQ5_1, {0.0416, 0.0533}}, {DType::kQ8_0, {0.00588, 0.00940}}, {DType::kQ4_K, {0.0780, 0.0998}},
    {DType::kQ5_K, {0.0384, 0.0498}}, {DType::kQ6_K, {0.0184, 0.0268}},   {DType::kQ8_K, {0.00766, 0.0194}},
};

TEST(QuantError, RmsWithinBudget) {
  constexpr int64_t kN = 256 * 257;  // an odd number of blocks of every size
  for (const auto& [t, budget] : kRmsBudget) {
    for (Dist dist : {Dist::kGaussian, Dist::kStudentT3}) {
      const std::vector<float> x = RandomRow(dist, kN, 42);
      const std::vector<float> y = test::Dequantized(t, test::Quantized(t, x).data(), kN);
      double err = 0, ref = 0;
      for (int64_t i = 0; i < kN; ++i) {
        err += (static_cast<double>(y[i]) - x[i]) * (static_cast<double>(y[i]) - x[i]);
        ref += static_cast<double>(x[i]) * x[i];
      }
      const double rel = std::sqrt(err / ref);
      EXPECT_LE(rel, dist == Dist::kGaussian ? budget.gaussian : budget.student_t3)
          << DTypeName(t) << " " << test::DistName(dist);
    }
  }
}

}  // namespace
}  // namespace hymt
