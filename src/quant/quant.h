// Row-level conversions between f32 and every stored type, plus a scalar reference dot product.
//
// These are the reference implementations: exact to each format's definition, single-threaded and
// simple. Fast kernels (backends/) are tested against them.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace hymt {

// Converts n values of type t at src to f32. n must be a multiple of t's block size.
// Supports every DType except kI32 (plain float types included).
void DequantizeRow(DType t, const void* src, float* dst, int64_t n);

// Encodes n f32 values as type t (n a multiple of the block size). For the K formats this is the
// reference scale search documented in docs/QUANTIZATION.md. kF8E4M3 is not a target (read only).
void QuantizeRow(DType t, const float* src, void* dst, int64_t n);

// True when QuantizeRow supports t.
bool CanQuantizeTo(DType t);

// sum_i dequant(row)[i] * x[i], accumulated in double: the oracle for fast dot kernels.
double DotRef(DType t, const void* row, const float* x, int64_t n);

}  // namespace hymt
