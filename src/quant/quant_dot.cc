// Reference integer dot products (contract in quant_dot.h). Written for clarity, not speed: the SIMD
// kernels in src/backends/cpu are the fast versions.
#include "quant/quant_dot.h"

#include <cmath>

#include "core/half.h"
#include "core/status.h"

namespace hymt {
namespace {

// One block's contribution s * I - m * M (quant_dot.h): the scale products are f32, as a kernel
// computes them, and the integer sums exact.
struct BlockTerm {
  float s = 0;
  int32_t i = 0;
  float m = 0;  // Q4_K / Q5_K only
  int32_t mins = 0;
};

BlockTerm TermOf(const BlockQ8_0& w, const BlockQ8_0& a) {
  return {F16ToF32(w.d) * F16ToF32(a.d), DotBlockQ8_0Q8_0(w, a)};
}
BlockTerm TermOf(const BlockQ4_0& w, const BlockQ8_0& a) {
  return {F16ToF32(w.d) * F16ToF32(a.d), DotBlockQ4_0Q8_0(w, a)};
}
BlockTerm TermOf(const BlockQ4_K& w, const BlockQ8_K& a) {
  const KDotSums s = DotBlockQ4_KQ8_K(w, a);
  return {F16ToF32(w.d) * a.d, s.scaled, F16ToF32(w.dmin) * a.d, s.mins};
}
BlockTerm TermOf(const BlockQ5_K& w, const BlockQ8_K& a) {
  const KDotSums s = DotBlockQ5_KQ8_K(w, a);
  return {F16ToF32(w.d) * a.d, s.scaled, F16ToF32(w.dmin) * a.d, s.mins};
}
BlockTerm TermOf(const BlockQ6_K& w, const BlockQ8_K& a) {
  return {F16ToF32(w.d) * a.d, DotBlockQ6_KQ8_K(w, a)};
}

// Sums the block terms in double, so that the reference adds no rounding of its own beyond the f32
// scale products; also returns the sum of their magnitudes, the scale of a kernel's f32 rounding.
template <typename WBlock, typename ABlock>
void SumTerms(const void* w, const void* a, int64_t n_blocks, double* dot, double* abs_terms) {
  const WBlock* wb = static_cast<const WBlock*>(w);
  const ABlock* ab = static_cast<const ABlock*>(a);
  *dot = 0;
  *abs_terms = 0;
  for (int64_t b = 0; b < n_blocks; ++b) {
    const BlockTerm t = TermOf(wb[b], ab[b]);
    const double scaled = static_cast<double>(t.s) * t.i, mins = static_cast<double>(t.m) * t.mins;
    *dot += scaled - mins;
    *abs_terms += std::fabs(scaled) + std::fabs(mins);
  }
}

void DotAndAbsTerms(DType wt, const void* w, const void* a, int64_t n, double* dot, double* abs_terms) {
  HYMT_CHECK(n % GetDTypeInfo(wt).block_size == 0, n, " values of ", DTypeName(wt));
  const int64_t blocks = n / GetDTypeInfo(wt).block_size;
  switch (wt) {
    case DType::kQ8_0:
      return SumTerms<BlockQ8_0, BlockQ8_0>(w, a, blocks, dot, abs_terms);
    case DType::kQ4_0:
      return SumTerms<BlockQ4_0, BlockQ8_0>(w, a, blocks, dot, abs_terms);
    case DType::kQ4_K:
      return SumTerms<BlockQ4_K, BlockQ8_K>(w, a, blocks, dot, abs_terms);
    case DType::kQ5_K:
      return SumTerms<BlockQ5_K, BlockQ8_K>(w, a, blocks, dot, abs_terms);
    case DType::kQ6_K:
      return SumTerms<BlockQ6_K, BlockQ8_K>(w, a, blocks, dot, abs_terms);
    default:
      break;
  }
  HYMT_CHECK(false, "no integer dot path for ", DTypeName(wt), " (DotActivationType says which exist)");
}

// The affine K formats share everything but how a code is read (Q4KCode / Q5KCode). The mins term
// needs no codes: sum_l min_j * qa_l over sub-block j is min_j times the two bsums covering it.
template <typename Block, typename CodeFn>
KDotSums KAffineBlockSums(const Block& w, const BlockQ8_K& a, CodeFn code) {
  KDotSums sums;
  for (int j = 0; j < kQKK / 32; ++j) {
    int scale, min;
    GetKScaleMin(w.scales, j, &scale, &min);
    int32_t sub = 0;
    for (int e = 32 * j; e < 32 * (j + 1); ++e) sub += code(w, e) * a.qs[e];
    sums.scaled += scale * sub;
    sums.mins += min * (a.bsums[2 * j] + a.bsums[2 * j + 1]);
  }
  return sums;
}

}  // namespace

bool DotActivationType(DType w, DType* activation) {
  switch (w) {
    case DType::kQ8_0:
    case DType::kQ4_0:
      *activation = DType::kQ8_0;
      return true;
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
      *activation = DType::kQ8_K;
      return true;
    default:
      return false;
  }
}

double Dot(DType wt, const void* w, const void* a, int64_t n) {
  double dot, abs_terms;
  DotAndAbsTerms(wt, w, a, n, &dot, &abs_terms);
  return dot;
}

double DotAbsTerms(DType wt, const void* w, const void* a, int64_t n) {
  double dot, abs_terms;
  DotAndAbsTerms(wt, w, a, n, &dot, &abs_terms);
  return abs_terms;
}

int32_t DotBlockQ8_0Q8_0(const BlockQ8_0& w, const BlockQ8_0& a) {
  int32_t sum = 0;
  for (int i = 0; i < kQK; ++i) sum += w.qs[i] * a.qs[i];
  return sum;
}

// Element i < 16 is the low nibble of qs[i], element i + 16 the high nibble; codes are biased by 8.
int32_t DotBlockQ4_0Q8_0(const BlockQ4_0& w, const BlockQ8_0& a) {
  int32_t sum = 0;
  for (int i = 0; i < kQK / 2; ++i) {
    sum += ((w.qs[i] & 0xf) - 8) * a.qs[i];
    sum += ((w.qs[i] >> 4) - 8) * a.qs[i + kQK / 2];
  }
  return sum;
}

KDotSums DotBlockQ4_KQ8_K(const BlockQ4_K& w, const BlockQ8_K& a) {
  return KAffineBlockSums(w, a, Q4KCode);
}

KDotSums DotBlockQ5_KQ8_K(const BlockQ5_K& w, const BlockQ8_K& a) {
  return KAffineBlockSums(w, a, Q5KCode);
}

// Codes are biased by 32; subtracting per element keeps the definition plain (a kernel may instead
// subtract 32 * bsums[j] per sub-block: the same integer).
int32_t DotBlockQ6_KQ8_K(const BlockQ6_K& w, const BlockQ8_K& a) {
  int32_t sum = 0;
  for (int j = 0; j < kQKK / 16; ++j) {
    int32_t sub = 0;
    for (int e = 16 * j; e < 16 * (j + 1); ++e) sub += (Q6KCode(w, e) - 32) * a.qs[e];
    sum += w.scales[j] * sub;
  }
  return sum;
}

}  // namespace hymt
