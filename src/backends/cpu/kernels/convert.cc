// Row conversions between f32 and the stored types: embedding rows and norm weights to f32, and the
// KV cache writes (f32 -> f16, bf16, q8_0). The launchers are embed / kv_write in cpu_ops.cc and
// attention.cc.
#include "backends/cpu/kernels/kernels.h"
#include "quant/blocks.h"

namespace hymt::cpu::HYMT_ISA {
namespace {

template <typename LoadFull, typename LoadTail>
void ConvertLoop(int64_t n, float* dst, float scale, LoadFull load, LoadTail load_tail) {
  const VF vs = Set1(scale);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) Store(dst + i, Mul(load(i), vs));
  if (i < n) StorePartial(dst + i, Mul(load_tail(i, static_cast<int>(n - i)), vs), static_cast<int>(n - i));
}

// quant/'s Q8_0 encoder, bit for bit (the reference backend writes the cache with it): d = max|x| / 127
// saturated to the f16 range and rounded to f16; q = x * (1 / d) rounded to nearest even in [-127, 127].
void QuantizeQ8_0(const float* x, int64_t n, BlockQ8_0* out) {
  for (int64_t b = 0; b < n / kQK; ++b) {
    const float* xb = x + b * kQK;
    float amax = 0.0f;
    for (int i = 0; i < kQK; ++i) amax = Max(amax, __builtin_fabsf(xb[i]));
    out[b].d = F32ToF16(Min(amax / 127.0f, 65504.0f));
    const float d = F16ToF32(out[b].d);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int i = 0; i < kQK; ++i) {
      const float t = Min(Max(xb[i] * id, -127.0f), 127.0f);
      out[b].qs[i] = static_cast<int8_t>(__builtin_nearbyintf(t));
    }
  }
}

}  // namespace

void ConvertToF32(DType t, const void* src, float* dst, int64_t n, float scale) {
  switch (t) {
    case DType::kF32: {
      const float* s = static_cast<const float*>(src);
      return ConvertLoop(
          n, dst, scale, [&](int64_t i) { return Load(s + i); },
          [&](int64_t i, int m) { return LoadPartial(s + i, m); });
    }
    case DType::kF16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      return ConvertLoop(
          n, dst, scale, [&](int64_t i) { return LoadF16(s + i); },
          [&](int64_t i, int m) { return LoadF16Partial(s + i, m); });
    }
    case DType::kBF16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      return ConvertLoop(
          n, dst, scale, [&](int64_t i) { return LoadBf16(s + i); },
          [&](int64_t i, int m) { return LoadBf16Partial(s + i, m); });
    }
    case DType::kF8E4M3: {
      const uint8_t* s = static_cast<const uint8_t*>(src);
      return ConvertLoop(
          n, dst, scale * kF8Unscale, [&](int64_t i) { return LoadF8(s + i); },
          [&](int64_t i, int m) { return LoadF8Partial(s + i, m); });
    }
    default:
      return;  // the launchers route only these here
  }
}

void ConvertFromF32(DType t, const float* src, void* dst, int64_t n) {
  switch (t) {
    case DType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::kF16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      int64_t i = 0;
#if defined(HYMT_ISA_IS_avx512)
      for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i),
                            _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
#elif defined(HYMT_ISA_IS_avx2)
      for (; i + 8 <= n; i += 8)
        _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
#endif
      for (; i < n; ++i) d[i] = F32ToF16(src[i]);
      return;
    }
    case DType::kBF16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = F32ToBf16(src[i]);
      return;
    }
    case DType::kQ8_0:
      QuantizeQ8_0(src, n, static_cast<BlockQ8_0*>(dst));
      return;
    default:
      return;
  }
}

}  // namespace hymt::cpu::HYMT_ISA
