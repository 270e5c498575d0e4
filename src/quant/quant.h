// Row-level conversions between f32 and every stored type, plus a scalar reference dot product.
//
// These are the reference implementations: exact to each format's definition, single-threaded and
// simple. Fast kernels (backends/) are tested against them.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace hymt {

// Converts n values of type t at src to f32. n must be a multiple of t's block size.
// Supports every DType except kI32 (plain float types included). Bit-exact: each value is the f32
// rounding of the exact value the format defines (docs/QUANTIZATION.md).
void DequantizeRow(DType t, const void* src, float* dst, int64_t n);

// Encodes n finite f32 values as type t (n a multiple of the block size): round to nearest against
// the scales as stored; for the K formats the scales come from the search documented in
// docs/QUANTIZATION.md. kQ8_0 and kQ8_K are also the activation encoders of the integer dot products
// (quant_dot.h). Stateless and allocation-free: rows may be encoded on many threads at once.
// kF8E4M3 is not a target (read only).
void QuantizeRow(DType t, const float* src, void* dst, int64_t n);

// True when QuantizeRow supports t: every type but kF8E4M3 and kI32.
bool CanQuantizeTo(DType t);

// sum_i dequant(row)[i] * x[i], accumulated in double: the oracle for fast dot kernels.
double DotRef(DType t, const void* row, const float* x, int64_t n);

}  // namespace hymt
