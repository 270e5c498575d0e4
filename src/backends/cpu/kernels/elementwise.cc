// Element-wise ops over one row. The launchers are in cpu_ops.cc.
#include "backends/cpu/kernels/kernels.h"

namespace hymt::cpu::HYMT_ISA {

// out = silu(g) * u = g * u / (1 + exp(-g)).
void SwiGlu(const float* gate, const float* up, float* out, int64_t n) {
  const VF one = Set1(1.0f);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const VF g = Load(gate + i);
    const VF e = ExpV(Sub(Zero(), g));
#if defined(HYMT_ISA_IS_avx512)
    Store(out + i, _mm512_div_ps(Mul(g, Load(up + i)), Add(one, e)));
#elif defined(HYMT_ISA_IS_avx2)
    Store(out + i, _mm256_div_ps(Mul(g, Load(up + i)), Add(one, e)));
#else
    Store(out + i, g * Load(up + i) / (one + e));
#endif
  }
  for (; i < n; ++i) out[i] = gate[i] * up[i] / (1.0f + Exp(-gate[i]));
}

void AddRow(float* x, const float* y, int64_t n) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) Store(x + i, Add(Load(x + i), Load(y + i)));
  for (; i < n; ++i) x[i] += y[i];
}

}  // namespace hymt::cpu::HYMT_ISA
