// The kernel functions of one ISA (namespace hymt::cpu::HYMT_ISA), as table.cc publishes them and as
// kernel files call each other. Contracts: kernel_table.h.
#pragma once

#include <cstdint>

#include "backends/cpu/kernel_table.h"
#include "backends/cpu/kernels/simd.h"

namespace hymt::cpu::HYMT_ISA {

// matmul_float.cc
void GemvFloat(const MatMulArgs& a, int64_t n_begin, int64_t n_end);
void Gemm(const MatMulArgs& a, int64_t n_begin, int64_t n_end, void* scratch);

// matmul_quant.cc
size_t QuantActRowBytes(DType w, int64_t k);
void QuantizeActRow(DType w, const float* x, int64_t k, void* dst);
void GemvQuant(const MatMulArgs& a, const void* xq, size_t xq_row_bytes, int64_t n_begin, int64_t n_end);
// out[0, n) = weights [k0, k0 + n) of one row of a block format, as f32 (k0 and n whole blocks).
void DequantizeRange(DType t, const uint8_t* row, int64_t k0, int64_t n, float* out);

#if defined(HYMT_ISA_IS_avx512) || defined(HYMT_ISA_IS_avx2)
// matmul_packed.cc (AVX-512 VNNI) and matmul_packed_avx2.cc (AVX2); the generic build keeps the stored layout
void MatMulPacked(const MatMulArgs& a, const void* xq, size_t xq_row_bytes, int64_t n_begin, int64_t n_end);
#endif

// convert.cc
void ConvertToF32(DType t, const void* src, float* dst, int64_t n, float scale);
void ConvertFromF32(DType t, const float* src, void* dst, int64_t n);

// norm.cc
void RmsNormRow(const float* x, int64_t n, const float* w, float eps, float* out);
void RopeNormRow(float* x, int n_heads, int head_dim, const float* cos, const float* sin, const float* norm_w,
                 float eps);

// elementwise.cc
void SwiGlu(const float* gate, const float* up, float* out, int64_t n);
void AddRow(float* x, const float* y, int64_t n);

// attention.cc
void Attention(const AttentionTask& t, float* scratch);

}  // namespace hymt::cpu::HYMT_ISA
