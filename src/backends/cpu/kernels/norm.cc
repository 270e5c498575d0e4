// RMSNorm and RoPE (+ the per-head q/k norm) over one row. The launcher is norm.cc one level up.
#include "backends/cpu/kernels/kernels.h"

namespace hymt::cpu::HYMT_ISA {
namespace {

// sum of x^2 over n values, in f32 with kUnroll independent vector accumulators (all terms are
// positive, so the relative error is at most about n/kLanes/kUnroll + log2 steps of rounding).
float SumSquares(const float* x, int64_t n) {
  constexpr int kUnroll = 4;
  VF acc[kUnroll];
  for (int u = 0; u < kUnroll; ++u) acc[u] = Zero();
  int64_t i = 0;
  for (; i + kUnroll * kLanes <= n; i += kUnroll * kLanes) {
    for (int u = 0; u < kUnroll; ++u) {
      const VF v = Load(x + i + u * kLanes);
      acc[u] = Fma(v, v, acc[u]);
    }
  }
  for (; i + kLanes <= n; i += kLanes) {
    const VF v = Load(x + i);
    acc[0] = Fma(v, v, acc[0]);
  }
  if (i < n) {
    const VF v = LoadPartial(x + i, static_cast<int>(n - i));
    acc[1] = Fma(v, v, acc[1]);
  }
  return ReduceAdd(Add(Add(acc[0], acc[1]), Add(acc[2], acc[3])));
}

// out = float(x * inv) * w: the normalised value is rounded before the weight multiply, as HF does.
void ScaleByWeight(const float* x, int64_t n, float inv, const float* w, float* out) {
  const VF vinv = Set1(inv);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) Store(out + i, Mul(Mul(Load(x + i), vinv), Load(w + i)));
  if (i < n) {
    const int m = static_cast<int>(n - i);
    StorePartial(out + i, Mul(Mul(LoadPartial(x + i, m), vinv), LoadPartial(w + i, m)), m);
  }
}

}  // namespace

void RmsNormRow(const float* x, int64_t n, const float* w, float eps, float* out) {
  const float inv = 1.0f / Sqrt(SumSquares(x, n) / static_cast<float>(n) + eps);
  ScaleByWeight(x, n, inv, w, out);
}

void RopeNormRow(float* x, int n_heads, int head_dim, const float* cos, const float* sin, const float* norm_w,
                 float eps) {
  const int half = head_dim / 2;
  for (int h = 0; h < n_heads; ++h) {
    float* v = x + static_cast<int64_t>(h) * head_dim;
    // Rotate half: (v[j], v[j + half]) -> (v[j] c - v[j + half] s, v[j + half] c + v[j] s).
    for (int j = 0; j < half; j += kLanes) {
      const int m = Min(kLanes, half - j);
      if (m == kLanes) {
        const VF x1 = Load(v + j), x2 = Load(v + j + half), c = Load(cos + j), s = Load(sin + j);
        Store(v + j, Fnma(x2, s, Mul(x1, c)));
        Store(v + j + half, Fma(x1, s, Mul(x2, c)));
      } else {
        const VF x1 = LoadPartial(v + j, m), x2 = LoadPartial(v + j + half, m);
        const VF c = LoadPartial(cos + j, m), s = LoadPartial(sin + j, m);
        StorePartial(v + j, Fnma(x2, s, Mul(x1, c)), m);
        StorePartial(v + j + half, Fma(x1, s, Mul(x2, c)), m);
      }
    }
    if (norm_w != nullptr) {
      const float inv = 1.0f / Sqrt(SumSquares(v, head_dim) / static_cast<float>(head_dim) + eps);
      ScaleByWeight(v, head_dim, inv, norm_w, v);
    }
  }
}

}  // namespace hymt::cpu::HYMT_ISA
