// This ISA's kernel table (see kernel_table.h); dispatch.cc picks one of the three at run time.
#include "backends/cpu/kernel_table.h"
#include "backends/cpu/kernels/simd.h"

namespace hymt::cpu::HYMT_ISA {

// Defined in the kernel files of this directory (same ISA namespace).
void MatMulFloat(const MatMulArgs& a, int64_t n_begin, int64_t n_end, void* scratch);
size_t QuantActRowBytes(DType w, int64_t k);
void QuantizeActRow(DType w, const float* x, int64_t k, void* dst);
void MatMulQuant(const MatMulArgs& a, const void* xq, size_t xq_row_bytes, int64_t n_begin, int64_t n_end);
void ConvertToF32(DType t, const void* src, float* dst, int64_t n, float scale);
void ConvertFromF32(DType t, const float* src, void* dst, int64_t n);
void RmsNormRow(const float* x, int64_t n, const float* w, float eps, float* out);
void RopeNormRow(float* x, int n_heads, int head_dim, const float* cos, const float* sin, const float* norm_w,
                 float eps);
void SwiGlu(const float* gate, const float* up, float* out, int64_t n);
void AddRow(float* x, const float* y, int64_t n);
void Attention(const AttentionTask& t, float* scratch);

#define HYMT_STRINGIFY2(x) #x
#define HYMT_STRINGIFY(x) HYMT_STRINGIFY2(x)

// Constant-initialised: no constructor of the shared KernelTable type runs in ISA-specific code.
constexpr KernelTable kTable{
    .isa = HYMT_STRINGIFY(HYMT_ISA),
    .matmul_float = &MatMulFloat,
    .quant_act_row_bytes = &QuantActRowBytes,
    .quantize_act_row = &QuantizeActRow,
    .matmul_quant = &MatMulQuant,
    .convert_to_f32 = &ConvertToF32,
    .convert_from_f32 = &ConvertFromF32,
    .rms_norm_row = &RmsNormRow,
    .rope_norm_row = &RopeNormRow,
    .swiglu = &SwiGlu,
    .add = &AddRow,
    .attention = &Attention,
};

const KernelTable& Kernels() {
  return kTable;
}

}  // namespace hymt::cpu::HYMT_ISA
