// MatMul kernels with f32 accumulation. The launcher is matmul.cc.
//
// - GEMV (n_tokens <= kGemvMaxTokens, decode) for weights stored as plain floats (f32, f16, bf16,
//   f8_e4m3): memory bound. Each weight row is streamed once, widened to f32 in registers and multiplied
//   with every token's row; kGemvRows rows go together so that each x load serves several rows. No
//   repacking: weights are used where they are mapped. (The block formats' GEMV is matmul_quant.cc.)
// - GEMM (prefill, batched decode) for every weight type: compute bound. A block of kNc weight rows x
//   kKc inputs is converted to f32 (dequantised, for the block formats) and transposed into panels
//   [kKc][kNr] (kNr = two vectors of rows) in per-thread scratch; a register tile of up to kMr tokens x
//   kNr rows accumulates with broadcast-FMA (x read in place, one broadcast per token and input). The
//   packing costs about a tenth of the FMA time at 64 tokens.
//   f32 FMA, not vdpbf16ps: on Sapphire Rapids vdpbf16ps retires half the FLOPs of the two FMA ports
//   (bench/kernels reports both peaks), and it would round x to bf16.
#include <utility>

#include "backends/cpu/kernels/kernels.h"

namespace hymt::cpu::HYMT_ISA {
namespace {

// ---- weight loads: kLanes consecutive weights of one row as f32 ------------------------------------

template <DType T>
inline VF LoadW(const uint8_t* row, int64_t k) {
  if constexpr (T == DType::kF32) return Load(reinterpret_cast<const float*>(row) + k);
  if constexpr (T == DType::kF16) return LoadF16(reinterpret_cast<const uint16_t*>(row) + k);
  if constexpr (T == DType::kBF16) return LoadBf16(reinterpret_cast<const uint16_t*>(row) + k);
  if constexpr (T == DType::kF8E4M3) return LoadF8(row + k);
}

template <DType T>
inline VF LoadWPartial(const uint8_t* row, int64_t k, int n) {
  if constexpr (T == DType::kF32) return LoadPartial(reinterpret_cast<const float*>(row) + k, n);
  if constexpr (T == DType::kF16) return LoadF16Partial(reinterpret_cast<const uint16_t*>(row) + k, n);
  if constexpr (T == DType::kBF16) return LoadBf16Partial(reinterpret_cast<const uint16_t*>(row) + k, n);
  if constexpr (T == DType::kF8E4M3) return LoadF8Partial(row + k, n);
}

// The f8 loads return value / 256 (simd.h); the factor comes back with the tensor scale.
template <DType T>
inline float EffectiveScale(float scale) {
  return T == DType::kF8E4M3 ? scale * kF8Unscale : scale;
}

// ---- GEMV --------------------------------------------------------------------------------------------

// Weight rows per GEMV step. 4 rows x up to 4 tokens = 16 accumulators fit the 32 AVX-512 registers;
// AVX2 (16 registers) takes 2 rows when there are more than 2 tokens.
template <int kTokens>
constexpr int GemvRows() {
  return (kVectorRegisters >= 32 || kTokens <= 2) ? 4 : 2;
}

// out[t, n + r] for r < kRows, t < kTokens.
template <DType T, int kRows, int kTokens>
void GemvTile(const MatMulArgs& a, int64_t n, float scale) {
  VF acc[kRows][kTokens];
  for (int r = 0; r < kRows; ++r)
    for (int t = 0; t < kTokens; ++t) acc[r][t] = Zero();
  const uint8_t* w[kRows];
  for (int r = 0; r < kRows; ++r) w[r] = a.w + static_cast<size_t>(n + r) * a.w_row_bytes;
  const int64_t k_full = a.k / kLanes * kLanes;
  for (int64_t k = 0; k < k_full; k += kLanes) {
    VF xv[kTokens];
    for (int t = 0; t < kTokens; ++t) xv[t] = Load(a.x + t * a.x_stride + k);
    for (int r = 0; r < kRows; ++r) {
      VF wv = LoadW<T>(w[r], k);
      for (int t = 0; t < kTokens; ++t) acc[r][t] = Fma(wv, xv[t], acc[r][t]);
    }
  }
  if (k_full < a.k) {
    const int tail = static_cast<int>(a.k - k_full);
    VF xv[kTokens];
    for (int t = 0; t < kTokens; ++t) xv[t] = LoadPartial(a.x + t * a.x_stride + k_full, tail);
    for (int r = 0; r < kRows; ++r) {
      VF wv = LoadWPartial<T>(w[r], k_full, tail);
      for (int t = 0; t < kTokens; ++t) acc[r][t] = Fma(wv, xv[t], acc[r][t]);
    }
  }
  for (int r = 0; r < kRows; ++r)
    for (int t = 0; t < kTokens; ++t) a.out[t * a.out_stride + n + r] = ReduceAdd(acc[r][t]) * scale;
}

template <DType T, int kTokens>
void Gemv(const MatMulArgs& a, int64_t n_begin, int64_t n_end) {
  constexpr int kRows = GemvRows<kTokens>();
  const float scale = EffectiveScale<T>(a.scale);
  int64_t n = n_begin;
  for (; n + kRows <= n_end; n += kRows) GemvTile<T, kRows, kTokens>(a, n, scale);
  for (; n < n_end; ++n) GemvTile<T, 1, kTokens>(a, n, scale);
}

// ---- GEMM --------------------------------------------------------------------------------------------

constexpr int kNr = 2 * kLanes;  // weight rows per register tile (two vectors)
#if defined(HYMT_ISA_IS_avx512)
constexpr int kMr = 12;  // tokens per register tile: 24 accumulators + 2 panel vectors of 32 registers
#elif defined(HYMT_ISA_IS_avx2)
constexpr int kMr = 6;  // 12 accumulators + 2 + 1 broadcast of 16 registers
#else
constexpr int kMr = 4;
#endif
constexpr int64_t kKc = 256;  // inputs per packed block: a kMr x kKc tile of x is 12 KiB (L1)
constexpr int64_t kNc = 256;  // weight rows per packed block: kKc x kNc f32 = 256 KiB (L2)
static_assert((kKc * kNc + kLanes * kKc) * sizeof(float) <= kGemmScratchBytes);  // panels + stage
static_assert(kMatMulRowAlign % kNr == 0);

// In-register transpose of a kLanes x kLanes block: r[i][j] -> r[j][i].
inline void TransposeSquare(VF* r) {
#if defined(HYMT_ISA_IS_avx512)
  __m512 t[16], u[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  // u[4j + c], 128-bit lane L: element 4L + c of rows 4j..4j+3.
  for (int j = 0; j < 4; ++j) {
    u[4 * j + 0] = _mm512_shuffle_ps(t[4 * j], t[4 * j + 2], 0x44);
    u[4 * j + 1] = _mm512_shuffle_ps(t[4 * j], t[4 * j + 2], 0xee);
    u[4 * j + 2] = _mm512_shuffle_ps(t[4 * j + 1], t[4 * j + 3], 0x44);
    u[4 * j + 3] = _mm512_shuffle_ps(t[4 * j + 1], t[4 * j + 3], 0xee);
  }
  // A 4 x 4 transpose of 128-bit lanes across u[c], u[4 + c], u[8 + c], u[12 + c].
  for (int c = 0; c < 4; ++c) {
    __m512 v0 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88);
    __m512 v1 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xdd);
    __m512 v2 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88);
    __m512 v3 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xdd);
    r[c] = _mm512_shuffle_f32x4(v0, v2, 0x88);
    r[8 + c] = _mm512_shuffle_f32x4(v0, v2, 0xdd);
    r[4 + c] = _mm512_shuffle_f32x4(v1, v3, 0x88);
    r[12 + c] = _mm512_shuffle_f32x4(v1, v3, 0xdd);
  }
#elif defined(HYMT_ISA_IS_avx2)
  __m256 t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int j = 0; j < 2; ++j) {
    u[4 * j + 0] = _mm256_shuffle_ps(t[4 * j], t[4 * j + 2], 0x44);
    u[4 * j + 1] = _mm256_shuffle_ps(t[4 * j], t[4 * j + 2], 0xee);
    u[4 * j + 2] = _mm256_shuffle_ps(t[4 * j + 1], t[4 * j + 3], 0x44);
    u[4 * j + 3] = _mm256_shuffle_ps(t[4 * j + 1], t[4 * j + 3], 0xee);
  }
  for (int c = 0; c < 4; ++c) {
    r[c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x20);
    r[4 + c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x31);
  }
#else
  (void)r;  // one lane: nothing to transpose
#endif
}

// Packs W rows [n0, n0 + nc) x inputs [k0, k0 + kc) as f32 panels bp[p][kk][j] = W[n0 + p*kNr + j][k0 + kk];
// rows past nc are zero so the microkernel never branches on them.
template <DType T>
void PackPanels(const MatMulArgs& a, int64_t n0, int64_t nc, int64_t k0, int64_t kc, float* bp) {
  for (int64_t p = 0; p * kNr < nc; ++p) {
    float* panel = bp + p * kc * kNr;
    for (int h = 0; h < kNr / kLanes; ++h) {
      const int64_t row0 = p * kNr + h * kLanes;
      const int valid = static_cast<int>(Max<int64_t>(0, Min<int64_t>(kLanes, nc - row0)));
      for (int64_t kk = 0; kk < kc; kk += kLanes) {
        const int n_k = static_cast<int>(Min<int64_t>(kLanes, kc - kk));
        VF r[kLanes];
        for (int i = 0; i < kLanes; ++i) {
          if (i >= valid) {
            r[i] = Zero();
            continue;
          }
          const uint8_t* row = a.w + static_cast<size_t>(n0 + row0 + i) * a.w_row_bytes;
          r[i] = n_k == kLanes ? LoadW<T>(row, k0 + kk) : LoadWPartial<T>(row, k0 + kk, n_k);
        }
        TransposeSquare(r);
        for (int i = 0; i < n_k; ++i) Store(panel + (kk + i) * kNr + h * kLanes, r[i]);
      }
    }
  }
}

// As PackPanels for the block formats: each row's [k0, k0 + kc) is dequantised into `stage`
// ([kLanes][kc] f32), then transposed from there.
void PackPanelsDequantised(const MatMulArgs& a, int64_t n0, int64_t nc, int64_t k0, int64_t kc, float* bp,
                           float* stage) {
  for (int64_t p = 0; p * kNr < nc; ++p) {
    float* panel = bp + p * kc * kNr;
    for (int h = 0; h < kNr / kLanes; ++h) {
      const int64_t row0 = p * kNr + h * kLanes;
      const int valid = static_cast<int>(Max<int64_t>(0, Min<int64_t>(kLanes, nc - row0)));
      for (int i = 0; i < valid; ++i)
        DequantizeRange(a.w_dtype, a.w + static_cast<size_t>(n0 + row0 + i) * a.w_row_bytes, k0, kc,
                        stage + i * kc);
      for (int64_t kk = 0; kk < kc; kk += kLanes) {  // kc is whole blocks, a multiple of kLanes
        VF r[kLanes];
        for (int i = 0; i < kLanes; ++i) r[i] = i < valid ? Load(stage + i * kc + kk) : Zero();
        TransposeSquare(r);
        for (int i = 0; i < kLanes; ++i) Store(panel + (kk + i) * kNr + h * kLanes, r[i]);
      }
    }
  }
}

// c[m, 0:n_valid] (+)= x[m, 0:kc] . panel for m < kMrT; x rows x_stride apart, c rows c_stride apart.
// accumulate: add to what c holds (a previous input block); scale multiplies the final sum.
template <int kMrT>
void MicroKernel(const float* x, int64_t x_stride, const float* panel, int64_t kc, float* c, int64_t c_stride,
                 int n_valid, bool accumulate, float scale) {
  VF acc[kMrT][2];
  for (int m = 0; m < kMrT; ++m) acc[m][0] = acc[m][1] = Zero();
  for (int64_t kk = 0; kk < kc; ++kk) {
    const VF b0 = Load(panel + kk * kNr);
    const VF b1 = Load(panel + kk * kNr + kLanes);
    for (int m = 0; m < kMrT; ++m) {
      const VF xa = Set1(x[m * x_stride + kk]);
      acc[m][0] = Fma(xa, b0, acc[m][0]);
      acc[m][1] = Fma(xa, b1, acc[m][1]);
    }
  }
  const VF vscale = Set1(scale);
  for (int m = 0; m < kMrT; ++m) {
    float* cm = c + m * c_stride;
    for (int h = 0; h < 2; ++h) {
      const int n_h = Min(kLanes, n_valid - h * kLanes);
      if (n_h <= 0) break;
      VF v = acc[m][h];
      if (n_h == kLanes) {
        if (accumulate) v = Add(v, Load(cm + h * kLanes));
        Store(cm + h * kLanes, Mul(v, vscale));
      } else {
        if (accumulate) v = Add(v, LoadPartial(cm + h * kLanes, n_h));
        StorePartial(cm + h * kLanes, Mul(v, vscale), n_h);
      }
    }
  }
}

using MicroKernelFn = void (*)(const float*, int64_t, const float*, int64_t, float*, int64_t, int, bool,
                               float);

// The microkernel for mr = 1..kMr tokens (the last tile of a call may be partial). A plain array, not
// std::array: kernel files keep away from shared template instantiations (simd.h).
template <int... kMs>
MicroKernelFn PickMicroKernel(int mr, std::integer_sequence<int, kMs...>) {
  static constexpr MicroKernelFn kKernels[] = {&MicroKernel<kMs + 1>...};
  return kKernels[mr - 1];
}

// The blocked loops around the microkernel; pack(n0, nc, k0, kc, bp) fills the panels of one block.
template <typename Pack>
void GemmLoops(const MatMulArgs& a, int64_t n_begin, int64_t n_end, float scale, float* bp, Pack pack) {
  // Token tiles of balanced sizes (64 tokens: 6 tiles of 10-11, not 5 of 12 and one of 4).
  const int64_t n_tiles = (a.n_tokens + kMr - 1) / kMr;
  for (int64_t nb = n_begin; nb < n_end; nb += kNc) {
    const int64_t nc = Min(kNc, n_end - nb);
    for (int64_t kb = 0; kb < a.k; kb += kKc) {
      const int64_t kc = Min(kKc, a.k - kb);
      const bool first = kb == 0, last = kb + kc == a.k;
      pack(nb, nc, kb, kc, bp);
      for (int64_t tile = 0, t = 0; tile < n_tiles; ++tile) {
        const int mr = static_cast<int>(a.n_tokens / n_tiles + (tile < a.n_tokens % n_tiles ? 1 : 0));
        const MicroKernelFn kernel = PickMicroKernel(mr, std::make_integer_sequence<int, kMr>{});
        for (int64_t p = 0; p * kNr < nc; ++p) {
          const int n_valid = static_cast<int>(Min<int64_t>(kNr, nc - p * kNr));
          kernel(a.x + t * a.x_stride + kb, a.x_stride, bp + p * kc * kNr, kc,
                 a.out + t * a.out_stride + nb + p * kNr, a.out_stride, n_valid, !first, last ? scale : 1.0f);
        }
        t += mr;
      }
    }
  }
}

template <DType T>
void GemmFloat(const MatMulArgs& a, int64_t n_begin, int64_t n_end, float* bp) {
  GemmLoops(a, n_begin, n_end, EffectiveScale<T>(a.scale), bp,
            [&](int64_t n0, int64_t nc, int64_t k0, int64_t kc, float* panels) {
              PackPanels<T>(a, n0, nc, k0, kc, panels);
            });
}

template <DType T>
void GemvTyped(const MatMulArgs& a, int64_t n_begin, int64_t n_end) {
  switch (a.n_tokens) {
    case 1:
      return Gemv<T, 1>(a, n_begin, n_end);
    case 2:
      return Gemv<T, 2>(a, n_begin, n_end);
    case 3:
      return Gemv<T, 3>(a, n_begin, n_end);
    default:
      return Gemv<T, 4>(a, n_begin, n_end);
  }
}
static_assert(kGemvMaxTokens == 4, "GemvTyped instantiates GEMV for 1..kGemvMaxTokens tokens");

}  // namespace

void GemvFloat(const MatMulArgs& a, int64_t n_begin, int64_t n_end) {
  switch (a.w_dtype) {
    case DType::kF32:
      return GemvTyped<DType::kF32>(a, n_begin, n_end);
    case DType::kF16:
      return GemvTyped<DType::kF16>(a, n_begin, n_end);
    case DType::kBF16:
      return GemvTyped<DType::kBF16>(a, n_begin, n_end);
    case DType::kF8E4M3:
      return GemvTyped<DType::kF8E4M3>(a, n_begin, n_end);
    default:
      return;  // the launcher routes only these here
  }
}

void Gemm(const MatMulArgs& a, int64_t n_begin, int64_t n_end, void* scratch) {
  float* bp = static_cast<float*>(scratch);
  switch (a.w_dtype) {
    case DType::kF32:
      return GemmFloat<DType::kF32>(a, n_begin, n_end, bp);
    case DType::kF16:
      return GemmFloat<DType::kF16>(a, n_begin, n_end, bp);
    case DType::kBF16:
      return GemmFloat<DType::kBF16>(a, n_begin, n_end, bp);
    case DType::kF8E4M3:
      return GemmFloat<DType::kF8E4M3>(a, n_begin, n_end, bp);
    default: {
      float* stage = bp + kKc * kNc;
      return GemmLoops(a, n_begin, n_end, a.scale, bp,
                       [&](int64_t n0, int64_t nc, int64_t k0, int64_t kc, float* panels) {
                         PackPanelsDequantised(a, n0, nc, k0, kc, panels, stage);
                       });
    }
  }
}

}  // namespace hymt::cpu::HYMT_ISA
