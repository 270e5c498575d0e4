// This ISA's kernel table (see kernel_table.h); dispatch.cc picks one of the three at run time.
#include "backends/cpu/kernels/kernels.h"

namespace hymt::cpu::HYMT_ISA {

#define HYMT_STRINGIFY2(x) #x
#define HYMT_STRINGIFY(x) HYMT_STRINGIFY2(x)

// Constant-initialised: no constructor of the shared KernelTable type runs in ISA-specific code.
constexpr KernelTable kTable{
    .isa = HYMT_STRINGIFY(HYMT_ISA),
    .gemv_float = &GemvFloat,
    .gemm = &Gemm,
    .quant_act_row_bytes = &QuantActRowBytes,
    .quantize_act_row = &QuantizeActRow,
    .gemv_quant = &GemvQuant,
#if defined(HYMT_ISA_IS_avx512) || defined(HYMT_ISA_IS_avx2)
    .matmul_packed = &MatMulPacked,
#endif
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
