// Integer dot products of quantised weight rows with quantised activation rows: the reference
// algorithm that the SIMD kernels in src/backends/cpu implement, and their test oracle.
//
// Activations. Before a matmul, each f32 activation row is quantised once with QuantizeRow to the type
// DotActivationType names for the weight: Q8_0 (blocks of 32, f16 scale) for Q8_0 and Q4_0 weights,
// Q8_K (blocks of 256, f32 scale, bsums = sums of 16 consecutive codes) for Q4_K, Q5_K and Q6_K. Both
// encoders use d = max|x| / 127 and round to nearest, so |x - d q| <= d / 2 (plus f32 rounding), and
// their codes lie in [-127, 127], never -128: a kernel may take |q| or negate a code within int8.
//
// Accumulation, per block b of the row (32 elements for Q8_0, 256 for Q8_K):
//   I_b  an exact integer sum over the block, defined per format by the DotBlock* functions below
//        (bounds given there: none overflows int32, several overflow int16);
//   s_b  the weight's block scale times the activation's block scale, one f32 multiply
//        (exact for Q8_0 x Q8_0 and Q4_0 x Q8_0: two f16 significands fit in f32);
//   Q4_K / Q5_K also have M_b (integer) and m_b = f32(dmin_w * d_a): the block adds s_b I_b - m_b M_b.
// Dot sums the block terms in double. A kernel must reproduce every I_b exactly and may add the terms
// in f32 in any order (FMA or not); it then agrees with Dot within
//   (n_blocks + 2) * 2^-24 * DotAbsTerms(...)
// (each term rounds at most twice, I_b to f32 and the product, and any summation order of N terms
// rounds each partial sum once, at most N - 1 times).
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "quant/blocks.h"

namespace hymt {

// The activation type of the integer path for weight type w (kQ8_0 or kQ8_K). Returns false when w
// has no integer path here (plain float types, Q4_1, Q5_0, Q5_1: use DotRef or dequantise).
bool DotActivationType(DType w, DType* activation);

// sum_i w[i] * a[i] for n elements (a multiple of the block size) by the algorithm above. w holds n
// values of weight type wt; a holds n values of DotActivationType(wt), produced by QuantizeRow.
// Requires an integer path for wt.
double Dot(DType wt, const void* w, const void* a, int64_t n);

// sum_b (|s_b I_b| + |m_b M_b|) for the same arguments: the magnitude that bounds the rounding error of
// any f32 implementation of Dot (see the contract above).
double DotAbsTerms(DType wt, const void* w, const void* a, int64_t n);

// ---- per-block integer sums (exact) -------------------------------------------------------------------

// sum_i qw[i] * qa[i]. |I| <= 32 * 127 * 127.
int32_t DotBlockQ8_0Q8_0(const BlockQ8_0& w, const BlockQ8_0& a);

// sum_i (nibble_i - 8) * qa[i]. |I| <= 32 * 8 * 127.
int32_t DotBlockQ4_0Q8_0(const BlockQ4_0& w, const BlockQ8_0& a);

// For Q4_K and Q5_K, with scale_j and min_j the 6-bit values of sub-block j (GetKScaleMin):
//   scaled = sum_j scale_j * sum_{l<32} q_{32j+l} * qa_{32j+l}   (q the 4- or 5-bit code, unsigned)
//   mins   = sum_j min_j * (bsums[2j] + bsums[2j+1])
// The block adds d_w d_a * scaled - dmin_w d_a * mins. |scaled| <= 8 * 63 * 32 * 31 * 127,
// |mins| <= 8 * 63 * 32 * 127.
struct KDotSums {
  int32_t scaled = 0;
  int32_t mins = 0;
};
KDotSums DotBlockQ4_KQ8_K(const BlockQ4_K& w, const BlockQ8_K& a);
KDotSums DotBlockQ5_KQ8_K(const BlockQ5_K& w, const BlockQ8_K& a);

// sum_{j<16} scale_j * sum_{l<16} (q_{16j+l} - 32) * qa_{16j+l}, scale_j the int8 sub-block scale.
// (Equivalently sum_j scale_j * (sum q qa - 32 * bsums[j]).) |I| <= 16 * 128 * 16 * 32 * 127.
int32_t DotBlockQ6_KQ8_K(const BlockQ6_K& w, const BlockQ8_K& a);

}  // namespace hymt
