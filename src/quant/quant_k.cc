// The 256-element super-block formats Q4_K, Q5_K, Q6_K and the activation format Q8_K.
//
// Decoding follows the GGUF definition. Every decoded value is the f32 rounding of the exact value:
// d * scale * q is exact in f32 (an f16 d times at most 7 + 6 more significant bits), so Q6_K decodes
// exactly, Q4_K / Q5_K round once in "- dmin * min", and Q8_K (an f32 d) rounds once in d * q.
//
// The formats leave the choice of scales open; the encoder here (docs/QUANTIZATION.md, "K formats"):
//  1. per sub-block, tries a few grid spacings around the max/min-based one, fits scale (and min) to
//     each candidate's codes by least squares and keeps the fit with the least squared error;
//  2. quantises the sub-block scales (and mins) to 6 or 8 bits against one f16 super-block scale;
//  3. for Q4_K / Q5_K, tries each sub-block's 6-bit scale and min rounded down and up, keeping the pair
//     with the least squared error;
//  4. encodes every value as its nearest code under the scales as stored.
// Cost: O(candidates x 256) per super-block, no allocation.
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "quant/quant_internal.h"

namespace hymt::quant_internal {
namespace {

constexpr int kSubA = 32;              // Q4_K / Q5_K sub-block length
constexpr int kSubsA = kQKK / kSubA;   // 8 sub-blocks, 6-bit scale and min each
constexpr int kSub6 = 16;              // Q6_K sub-block length
constexpr int kSubs6 = kQKK / kSub6;   // 16 sub-blocks, int8 scale each
constexpr int kMaxSubScale = 63;       // 6-bit sub-block scales and mins
constexpr int kQ6Half = 32;            // Q6_K codes are q + 32, q in [-32, 31]
constexpr float kQ8KMinAmax = 1e-30f;  // Q8_K blocks with a smaller max |x| encode as zeros

// Grid spacings tried per sub-block, as offsets to the number of steps that spans the sub-block's
// range (max - min, or |max| for Q6_K). Negative offsets: a coarser grid; positive: a finer one that
// clips the extremes. Chosen by measurement (docs/QUANTIZATION.md).
constexpr float kAffineSteps[] = {-1.0f, -0.5f, 0.0f, 0.5f};
constexpr float kSymmetricSteps[] = {-4.0f, -3.0f, -2.0f, -1.0f, 0.0f};

// ---- sums over a grid -------------------------------------------------------------------------------

// Kept in kLanes independent partial sums: float addition is not associative, so the compiler
// vectorises a reduction only when the source spells out the lanes (4: one SSE register).
constexpr int kLanes = 4;

struct GridSums {
  float sl = 0, sl2 = 0, sxl = 0;  // sum of codes, of codes squared, of x times code
};

// Codes l = round(clamp((x - offset) * iscale, lo, hi)) over n values (a sub-block; n a multiple of
// kLanes). One function for every format on purpose: a copy specialised to constant bounds is what
// GCC 12 compiles into branches instead of min/max, at twice the cost.
GridSums SumGrid(const float* x, int n, float offset, float iscale, float lo, float hi) {
  float sl[kLanes] = {}, sl2[kLanes] = {}, sxl[kLanes] = {};
  for (int i = 0; i < n; i += kLanes) {
    for (int k = 0; k < kLanes; ++k) {
      const float l = RoundClamp((x[i + k] - offset) * iscale, lo, hi);
      sl[k] += l;
      sl2[k] += l * l;
      sxl[k] += x[i + k] * l;
    }
  }
  GridSums sums;
  for (int k = 0; k < kLanes; ++k) {
    sums.sl += sl[k];
    sums.sl2 += sl2[k];
    sums.sxl += sxl[k];
  }
  return sums;
}

// A sub-block's values: their sum and sum of squares.
struct ValueSums {
  float sx = 0, sx2 = 0;
};

template <int kN>
ValueSums SumValues(const float* x) {
  ValueSums v;
  for (int i = 0; i < kN; ++i) {
    v.sx += x[i];
    v.sx2 += x[i] * x[i];
  }
  return v;
}

// sum (a * l + b - x)^2 over kN values, from the sums (in double: the terms nearly cancel).
double GridError(const GridSums& g, const ValueSums& v, int n, double a, double b) {
  return v.sx2 + a * a * g.sl2 + n * b * b - 2 * a * g.sxl - 2 * b * v.sx + 2 * a * b * g.sl;
}

// ---- the affine formats (Q4_K, Q5_K): x ~ scale * q - min, q in [0, nmax] ---------------------------

struct AffineFit {
  float scale = 0;  // >= 0
  float min = 0;    // >= 0: the format subtracts it, so the grid starts at or below zero
};

// The least-squares fit x ~ a * l + b with b <= 0 to one grid's codes. Its squared error is
// sum(x^2) - gain, with gain = num / den; candidates are ranked by gain (compared as cross products,
// no division), and only the winner's a and b are computed.
struct AffineGain {
  double num = -1, den = 1;
  bool operator>(const AffineGain& o) const { return num * o.den > o.num * den; }
};

AffineGain GainOf(const GridSums& g, const ValueSums& v) {
  const double n = kSubA, sl = g.sl, sl2 = g.sl2, sxl = g.sxl, sx = v.sx;
  const double var = n * sl2 - sl * sl;  // n^2 times the variance of the codes
  const double cov = n * sxl - sx * sl;  // n^2 times their covariance with x
  if (var <= 0) return {};               // all codes equal: no scale to fit
  if (sx * var > cov * sl) {
    // The free fit's offset (sx - a sl) / n would be positive, but the format subtracts its min: the
    // best fit then has b = 0, and gain sxl^2 / sl2.
    return sxl > 0 ? AffineGain{sxl * sxl, sl2} : AffineGain{};
  }
  // gain = (sx^2 + cov^2 / var) / n
  return cov > 0 ? AffineGain{sx * sx * var + cov * cov, n * var} : AffineGain{};
}

// The winner's a and b, by the same case split as GainOf.
AffineFit SolveAffine(const GridSums& g, const ValueSums& v) {
  const double n = kSubA, sl = g.sl, sl2 = g.sl2, sxl = g.sxl, sx = v.sx;
  const double var = n * sl2 - sl * sl, cov = n * sxl - sx * sl;
  if (sx * var > cov * sl) return {static_cast<float>(sxl / sl2), 0};
  const double a = cov / var;
  return {static_cast<float>(a), static_cast<float>(-(sx - a * sl) / n)};
}

AffineFit FitAffine(const float* x, const ValueSums& v, int nmax) {
  float lo = x[0], hi = x[0];
  for (int i = 1; i < kSubA; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  lo = std::min(lo, 0.0f);
  if (hi <= lo) return {0, -lo};  // constant and <= 0: every code is 0
  const float fmax = static_cast<float>(nmax), inv_range = 1.0f / (hi - lo);
  GridSums best;
  AffineGain best_gain;
  for (float step : kAffineSteps) {
    const GridSums g = SumGrid(x, kSubA, lo, (fmax + step) * inv_range, 0, fmax);
    const AffineGain gain = GainOf(g, v);
    if (gain > best_gain) {
      best_gain = gain;
      best = g;
    }
  }
  if (best_gain.num < 0) return {(hi - lo) / fmax, -lo};
  return SolveAffine(best, v);
}

// Q4_K / Q5_K before bit packing.
struct AffineSuperBlock {
  uint16_t d = 0, dmin = 0;  // f16
  int scale[kSubsA] = {};    // 6-bit
  int min[kSubsA] = {};      // 6-bit
};

// Sub-block j's step and offset as every decoder computes them (both products are exact).
void AffineStep(const AffineSuperBlock& sb, int j, float* d1, float* m1) {
  *d1 = F16ToF32(sb.d) * static_cast<float>(sb.scale[j]);
  *m1 = F16ToF32(sb.dmin) * static_cast<float>(sb.min[j]);
}

// The squared error of a sub-block's nearest codes for 6-bit scale sc and min mn under d and dmin.
double SubBlockError(const float* x, const ValueSums& v, int nmax, float d, float dmin, int sc, int mn) {
  const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(mn);
  const GridSums g = SumGrid(x, kSubA, -m1, d1 != 0 ? 1.0f / d1 : 0.0f, 0, static_cast<float>(nmax));
  return GridError(g, v, kSubA, d1, -m1);
}

// The two 6-bit values around v / unit (one when unit is 0).
void Neighbours(float v, float unit, int* lo, int* hi) {
  *lo = unit > 0 ? RoundCode(std::floor(v / unit), 0, kMaxSubScale) : 0;
  *hi = unit > 0 ? std::min(*lo + 1, kMaxSubScale) : 0;
}

AffineSuperBlock ChooseAffineScales(const float* x, int nmax) {
  ValueSums v[kSubsA];
  AffineFit fit[kSubsA];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < kSubsA; ++j) {
    v[j] = SumValues<kSubA>(x + j * kSubA);
    fit[j] = FitAffine(x + j * kSubA, v[j], nmax);
    max_scale = std::max(max_scale, fit[j].scale);
    max_min = std::max(max_min, fit[j].min);
  }
  AffineSuperBlock sb;
  const float d = StoreF16(max_scale / kMaxSubScale, &sb.d);
  const float dmin = StoreF16(max_min / kMaxSubScale, &sb.dmin);
  // Each sub-block's 6-bit scale and min: the best of rounding each down or up. Rounding a scale to
  // nearest can shrink the grid enough to clip the sub-block's extremes; trying all four costs three
  // grid passes per sub-block and buys 1.5-3% RMS (docs/QUANTIZATION.md).
  for (int j = 0; j < kSubsA; ++j) {
    int sc[2], mn[2];
    Neighbours(fit[j].scale, d, &sc[0], &sc[1]);
    Neighbours(fit[j].min, dmin, &mn[0], &mn[1]);
    sb.scale[j] = sc[0];  // kept if no error compares (values so large that the sums overflow)
    sb.min[j] = mn[0];
    double best = std::numeric_limits<double>::infinity();
    for (int a = 0; a < 2; ++a) {
      for (int b = 0; b < 2; ++b) {
        const double e = SubBlockError(x + j * kSubA, v[j], nmax, d, dmin, sc[a], mn[b]);
        if (e < best) {
          best = e;
          sb.scale[j] = sc[a];
          sb.min[j] = mn[b];
        }
      }
    }
  }
  return sb;
}

// Inverse of GetKScaleMin (blocks.h).
void PackKScales(const int* scale, const int* min, uint8_t* packed) {
  std::memset(packed, 0, kKScaleBytes);
  for (int j = 0; j < kSubsA; ++j) {
    if (j < 4) {
      packed[j] |= static_cast<uint8_t>(scale[j]);
      packed[j + 4] |= static_cast<uint8_t>(min[j]);
    } else {
      packed[j + 4] = static_cast<uint8_t>((scale[j] & 0xf) | ((min[j] & 0xf) << 4));
      packed[j - 4] |= static_cast<uint8_t>((scale[j] >> 4) << 6);
      packed[j] |= static_cast<uint8_t>((min[j] >> 4) << 6);
    }
  }
}

// Writes d, dmin, the packed scales and the nearest code of every value (a 4-bit Q4_K or 5-bit Q5_K
// code; layout in blocks.h: sub-blocks 2p and 2p + 1 share bytes 32p .. 32p + 31 of qs).
template <typename Block>
void EncodeAffineBlock(const float* x, int nmax, Block* y) {
  const AffineSuperBlock sb = ChooseAffineScales(x, nmax);
  y->d = sb.d;
  y->dmin = sb.dmin;
  PackKScales(sb.scale, sb.min, y->scales);
  float codes[kQKK];  // integers; f32 keeps this loop vectorisable
  for (int j = 0; j < kSubsA; ++j) {
    float d1, m1;
    AffineStep(sb, j, &d1, &m1);
    const float id = d1 != 0 ? 1.0f / d1 : 0.0f;
    for (int i = j * kSubA; i < (j + 1) * kSubA; ++i)
      codes[i] = RoundClamp((x[i] + m1) * id, 0, static_cast<float>(nmax));
  }
  for (int p = 0; p < kSubsA / 2; ++p) {
    for (int l = 0; l < kSubA; ++l) {
      const int low = static_cast<int>(codes[64 * p + l]), high = static_cast<int>(codes[64 * p + kSubA + l]);
      y->qs[kSubA * p + l] = static_cast<uint8_t>((low & 0xf) | ((high & 0xf) << 4));
    }
  }
  if constexpr (std::is_same_v<Block, BlockQ5_K>) {
    std::memset(y->qh, 0, sizeof(y->qh));
    for (int i = 0; i < kQKK; ++i)
      y->qh[i % kSubA] |= static_cast<uint8_t>((static_cast<int>(codes[i]) >> 4) << (i / kSubA));
  }
}

// ---- Q6_K: x ~ scale * q, q in [-32, 31] ------------------------------------------------------------

// The sub-block scale, signed so that the element of largest magnitude sits on the grid's longer side.
float FitSymmetric(const float* x) {
  const float max = SignedAbsMax(x, kSub6);
  if (max == 0) return 0;
  const float lo = -kQ6Half, hi = kQ6Half - 1, inv_max = 1.0f / max;
  // The least-squares error of a grid is sum(x^2) - sxl^2 / sl2: keep the largest sxl^2 / sl2,
  // compared as cross products to save a division per candidate.
  GridSums best{0, 1, 0};
  for (float step : kSymmetricSteps) {
    const GridSums g = SumGrid(x, kSub6, 0, (lo - step) * inv_max, lo, hi);
    if (g.sxl * g.sxl * best.sl2 > best.sxl * best.sxl * g.sl2) best = g;
  }
  return best.sxl != 0 ? best.sxl / best.sl2 : max / lo;
}

struct SymmetricSuperBlock {
  uint16_t d = 0;
  int scale[kSubs6] = {};  // int8
};

SymmetricSuperBlock ChooseSymmetricScales(const float* x) {
  float fit[kSubs6];
  for (int j = 0; j < kSubs6; ++j) fit[j] = FitSymmetric(x + j * kSub6);
  // As for the sub-blocks: the largest scale lands on -128, the int8's longer side. (A least-squares
  // refit of d, as for Q4_K, gains under 0.2% here: not worth its pass.)
  SymmetricSuperBlock sb;
  const float d = StoreF16(SignedAbsMax(fit, kSubs6) / -128.0f, &sb.d);
  for (int j = 0; j < kSubs6; ++j) sb.scale[j] = d != 0 ? RoundCode(fit[j] / d, -128, 127) : 0;
  return sb;
}

}  // namespace

// ---- decoding -----------------------------------------------------------------------------------------

// Code layouts: Q4KCode, Q5KCode, Q6KCode in blocks.h.
void DequantizeQ4_K(const BlockQ4_K* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQKK; ++b, y += kQKK) {
    const float d = F16ToF32(x[b].d), dmin = F16ToF32(x[b].dmin);
    for (int j = 0; j < kSubsA; ++j) {
      int sc, mn;
      GetKScaleMin(x[b].scales, j, &sc, &mn);
      const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(mn);
      for (int e = j * kSubA; e < (j + 1) * kSubA; ++e) {
        const float scaled = d1 * static_cast<float>(Q4KCode(x[b], e));  // exact; the subtraction rounds
        y[e] = scaled - m1;
      }
    }
  }
}

void DequantizeQ5_K(const BlockQ5_K* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQKK; ++b, y += kQKK) {
    const float d = F16ToF32(x[b].d), dmin = F16ToF32(x[b].dmin);
    for (int j = 0; j < kSubsA; ++j) {
      int sc, mn;
      GetKScaleMin(x[b].scales, j, &sc, &mn);
      const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(mn);
      for (int e = j * kSubA; e < (j + 1) * kSubA; ++e) {
        const float scaled = d1 * static_cast<float>(Q5KCode(x[b], e));
        y[e] = scaled - m1;
      }
    }
  }
}

void DequantizeQ6_K(const BlockQ6_K* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQKK; ++b, y += kQKK) {
    const float d = F16ToF32(x[b].d);
    for (int e = 0; e < kQKK; ++e) {
      const float d1 = d * static_cast<float>(x[b].scales[e / kSub6]);
      y[e] = d1 * static_cast<float>(Q6KCode(x[b], e) - kQ6Half);
    }
  }
}

void DequantizeQ8_K(const BlockQ8_K* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQKK; ++b, y += kQKK) {
    for (int i = 0; i < kQKK; ++i) y[i] = x[b].d * static_cast<float>(x[b].qs[i]);
  }
}

// ---- encoding -----------------------------------------------------------------------------------------

void QuantizeQ4_K(const float* x, BlockQ4_K* y, int64_t n) {
  for (int64_t b = 0; b < n / kQKK; ++b) EncodeAffineBlock(x + b * kQKK, 15, &y[b]);
}

void QuantizeQ5_K(const float* x, BlockQ5_K* y, int64_t n) {
  for (int64_t b = 0; b < n / kQKK; ++b) EncodeAffineBlock(x + b * kQKK, 31, &y[b]);
}

// Element e = 128 h + 32 k + l: see Q6KCode (blocks.h).
void QuantizeQ6_K(const float* x, BlockQ6_K* y, int64_t n) {
  for (int64_t b = 0; b < n / kQKK; ++b, x += kQKK) {
    const SymmetricSuperBlock sb = ChooseSymmetricScales(x);
    y[b].d = sb.d;
    const float d = F16ToF32(sb.d);
    uint8_t codes[kQKK];
    for (int j = 0; j < kSubs6; ++j) {
      y[b].scales[j] = static_cast<int8_t>(sb.scale[j]);
      const float d1 = d * static_cast<float>(sb.scale[j]);
      const float id = d1 != 0 ? 1.0f / d1 : 0.0f;
      for (int i = j * kSub6; i < (j + 1) * kSub6; ++i)
        codes[i] = static_cast<uint8_t>(RoundCode(x[i] * id, -kQ6Half, kQ6Half - 1) + kQ6Half);
    }
    for (int h = 0; h < 2; ++h) {
      const uint8_t* c = codes + 128 * h;
      for (int l = 0; l < 32; ++l) {
        y[b].ql[64 * h + l] = static_cast<uint8_t>((c[l] & 0xf) | ((c[64 + l] & 0xf) << 4));
        y[b].ql[64 * h + 32 + l] = static_cast<uint8_t>((c[32 + l] & 0xf) | ((c[96 + l] & 0xf) << 4));
        y[b].qh[32 * h + l] = static_cast<uint8_t>((c[l] >> 4) | ((c[32 + l] >> 4) << 2) |
                                                   ((c[64 + l] >> 4) << 4) | ((c[96 + l] >> 4) << 6));
      }
    }
  }
}

// d = amax / 127 kept in f32, codes in [-127, 127] (symmetric: see quant_dot.h), bsums for the mins.
void QuantizeQ8_K(const float* x, BlockQ8_K* y, int64_t n) {
  for (int64_t b = 0; b < n / kQKK; ++b, x += kQKK) {
    float amax = 0;
    for (int i = 0; i < kQKK; ++i) amax = std::max(amax, std::fabs(x[i]));
    // Below this 1 / d would overflow f32; such activations are zero for every purpose.
    if (amax < kQ8KMinAmax) amax = 0;
    y[b].d = amax / 127.0f;
    const float id = amax != 0 ? 1.0f / y[b].d : 0.0f;
    for (int i = 0; i < kQKK; ++i) y[b].qs[i] = static_cast<int8_t>(RoundCode(x[i] * id, -127, 127));
    for (int g = 0; g < kQKK / 16; ++g) {
      int sum = 0;
      for (int i = 16 * g; i < 16 * (g + 1); ++i) sum += y[b].qs[i];
      y[b].bsums[g] = static_cast<int16_t>(sum);
    }
  }
}

}  // namespace hymt::quant_internal
