// The vector vocabulary of the CPU kernels, one definition per instruction set.
//
// Every kernels/*.cc is compiled three times (CMakeLists.txt): with HYMT_ISA = generic (no -m flags,
// scalar code; the oracle of the fast paths), avx2 (AVX2 + FMA + F16C) and avx512 (F/BW/VL/DQ + VNNI +
// BF16). Everything here lives in namespace hymt::cpu::HYMT_ISA, so the three copies never meet at link
// time. Kernel files must not odr-use inline functions with external linkage from shared headers (the
// linker keeps one copy of each, possibly the AVX-512 one, for every caller); that is why this file
// re-implements the few scalar helpers the kernels need (half floats, min/max).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(HYMT_ISA_IS_avx512) || defined(HYMT_ISA_IS_avx2)
// GCC 12 warns about the deliberately undefined registers inside its own AVX-512 headers
// (_mm512_undefined_*); the warnings point into the header, so they are silenced there only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#else
#include <immintrin.h>
#endif
#endif

#if !defined(HYMT_ISA)
#error "kernels are compiled once per ISA with -DHYMT_ISA=generic|avx2|avxvnni|avx512 (see CMakeLists.txt)"
#endif

namespace hymt::cpu::HYMT_ISA {

template <typename T>
constexpr T Min(T a, T b) {
  return a < b ? a : b;
}
template <typename T>
constexpr T Max(T a, T b) {
  return a < b ? b : a;
}

// Scalar maths through compiler builtins rather than the inline std:: overloads (see above).
inline float Sqrt(float v) {
  return __builtin_sqrtf(v);
}
inline float Exp(float v) {
  return __builtin_expf(v);
}

// Decode GEMVs read every weight byte once, from memory. On a Zen 5 host the hardware prefetchers fell
// behind the packed GEMVs' single stream per thread (matmul_packed.cc): a q4_k GEMV read about half of
// what a plain read loop reads. Asking for the lines kPrefetchAhead bytes ahead of the block being read
// brought it close to that loop in a temporary test program, where 6-16 KiB ahead measured alike, 2-4 and
// 32 KiB less, into L1 or non-temporal alike; 7B q4_k_m decode became 1.3-2.2x faster (docs/BENCHMARKS.md,
// "Software prefetch in the packed GEMVs"). The float GEMV, 4 rows at a time, measured no faster with it.
// The lines go to L2 (prefetcht1), not L1: on an Intel Xeon host a prefetch into L1 waits for one of L1's
// few fill buffers, and the kernel lab's decode sweep (`build/bench/kernels --sweep`) read 59-75% of the
// read probe into L1 against 73-90% into L2 (q4_k and q8_0), 35-38% non-temporal; 4-32 KiB ahead measured
// alike there. Callers ask for a few lines at a time between their products (matmul_packed.cc): a burst of
// a few dozen stalls the loop on that host.
constexpr size_t kPrefetchAhead = 8192;
// Asks for the cache line holding p, into L2. A prefetch never faults, so p may lie past the end of a buffer.
inline void PrefetchLine(const void* p) {
  __builtin_prefetch(p, 0, 2);
}

inline float BitsAsF32(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
inline uint32_t F32AsBits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return bits;
}

// bf16 <-> f32, round to nearest even (the same rounding as core/half.h; NaN is not expected in
// activations and is not special-cased).
inline float Bf16ToF32(uint16_t h) {
  return BitsAsF32(static_cast<uint32_t>(h) << 16);
}
inline uint16_t F32ToBf16(float f) {
  uint32_t bits = F32AsBits(f);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

#if defined(HYMT_ISA_IS_generic)
// IEEE binary16 -> f32, exact (subnormals included).
inline float F16ToF32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    float f = static_cast<float>(mant) * (1.0f / 16777216.0f);  // mant * 2^-24
    return sign ? -f : f;
  }
  if (exp == 0x1f) return BitsAsF32(sign | 0x7f800000u | (mant << 13));
  return BitsAsF32(sign | ((exp + 112) << 23) | (mant << 13));
}
// f32 -> binary16, round to nearest even (the KV cache and the q8 block scales use it).
inline uint16_t F32ToF16(float f) {
  uint32_t bits = F32AsBits(f);
  uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
  if (abs < 0x38800000u) {
    if (abs < 0x33000000u) return sign;
    uint32_t exp = abs >> 23;
    uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - exp;
    uint32_t q = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (q & 1u))) ++q;
    return static_cast<uint16_t>(sign | q);
  }
  uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);
  return static_cast<uint16_t>(sign | ((rounded - (112u << 23)) >> 13));
}
#else
inline float F16ToF32(uint16_t h) {
  return _cvtsh_ss(h);
}
inline uint16_t F32ToF16(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
}
#endif

// float8 e4m3fn -> f32 / 256: the 7 magnitude bits shifted into a binary16 (exponent bias 15 instead of
// 7) give the value times 2^8 for normals and subnormals alike; callers fold 256 into the tensor
// scale. NaN (0x7f) is not special-cased: checkpoints do not contain it.
inline float F8ToF32Div256(uint8_t v) {
  uint16_t h = static_cast<uint16_t>(((v & 0x80u) << 8) | ((v & 0x7fu) << 7));
  return F16ToF32(h);
}
constexpr float kF8Unscale = 256.0f;

// ---- f32 vectors -----------------------------------------------------------------------------------
// VF is the widest float vector; kLanes its width. Load* convert a stored type to f32 lanes; *Partial
// variants read only n < kLanes elements (zero-filling the rest) for row tails.
#if defined(HYMT_ISA_IS_avx512)
constexpr int kLanes = 16;
constexpr int kVectorRegisters = 32;
using VF = __m512;
inline VF Zero() {
  return _mm512_setzero_ps();
}
inline VF Set1(float v) {
  return _mm512_set1_ps(v);
}
inline VF Load(const float* p) {
  return _mm512_loadu_ps(p);
}
inline void Store(float* p, VF v) {
  _mm512_storeu_ps(p, v);
}
inline __mmask16 TailMask(int n) {
  return static_cast<__mmask16>((1u << n) - 1u);
}
inline VF LoadPartial(const float* p, int n) {
  return _mm512_maskz_loadu_ps(TailMask(n), p);
}
inline void StorePartial(float* p, VF v, int n) {
  _mm512_mask_storeu_ps(p, TailMask(n), v);
}
inline VF Bf16Widen(__m256i h) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
inline VF LoadBf16(const uint16_t* p) {
  return Bf16Widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
inline VF LoadBf16Partial(const uint16_t* p, int n) {
  return Bf16Widen(_mm256_maskz_loadu_epi16(TailMask(n), p));
}
inline VF LoadF16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
inline VF LoadF16Partial(const uint16_t* p, int n) {
  return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(TailMask(n), p));
}
// Sign-extending the byte puts the sign in bits 8..15; shifted left by 7, the magnitude lands in bits
// 7..13 and copies of the sign in bits 14 and 15; clearing bit 14 leaves the binary16 code.
inline VF F8Widen(__m128i b) {
  return _mm512_cvtph_ps(
      _mm256_and_si256(_mm256_slli_epi16(_mm256_cvtepi8_epi16(b), 7), _mm256_set1_epi16(-16385)));
}
inline VF LoadF8(const uint8_t* p) {
  return F8Widen(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline VF LoadF8Partial(const uint8_t* p, int n) {
  return F8Widen(_mm_maskz_loadu_epi8(TailMask(n), p));
}
inline VF Add(VF a, VF b) {
  return _mm512_add_ps(a, b);
}
inline VF Sub(VF a, VF b) {
  return _mm512_sub_ps(a, b);
}
inline VF Mul(VF a, VF b) {
  return _mm512_mul_ps(a, b);
}
inline VF Fma(VF a, VF b, VF c) {
  return _mm512_fmadd_ps(a, b, c);
}  // a * b + c
inline VF Fnma(VF a, VF b, VF c) {
  return _mm512_fnmadd_ps(a, b, c);
}  // c - a * b
inline VF MaxV(VF a, VF b) {
  return _mm512_max_ps(a, b);
}
inline float ReduceAdd(VF v) {
  return _mm512_reduce_add_ps(v);
}
inline float ReduceMax(VF v) {
  return _mm512_reduce_max_ps(v);
}
inline VF AbsV(VF v) {
  return _mm512_abs_ps(v);
}
#elif defined(HYMT_ISA_IS_avx2)
constexpr int kLanes = 8;
constexpr int kVectorRegisters = 16;
using VF = __m256;
inline VF Zero() {
  return _mm256_setzero_ps();
}
inline VF Set1(float v) {
  return _mm256_set1_ps(v);
}
inline VF Load(const float* p) {
  return _mm256_loadu_ps(p);
}
inline void Store(float* p, VF v) {
  _mm256_storeu_ps(p, v);
}
inline __m256i TailMaskI(int n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
inline VF LoadPartial(const float* p, int n) {
  return _mm256_maskload_ps(p, TailMaskI(n));
}
inline void StorePartial(float* p, VF v, int n) {
  _mm256_maskstore_ps(p, TailMaskI(n), v);
}
inline VF Bf16Widen(__m128i h) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
inline VF LoadBf16(const uint16_t* p) {
  return Bf16Widen(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline __m128i LoadU16Partial(const uint16_t* p, int n) {
  alignas(16) uint16_t tmp[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int i = 0; i < n; ++i) tmp[i] = p[i];
  return _mm_load_si128(reinterpret_cast<const __m128i*>(tmp));
}
inline VF LoadBf16Partial(const uint16_t* p, int n) {
  return Bf16Widen(LoadU16Partial(p, n));
}
inline VF LoadF16(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline VF LoadF16Partial(const uint16_t* p, int n) {
  return _mm256_cvtph_ps(LoadU16Partial(p, n));
}
inline VF F8Widen(__m128i b) {  // as in the AVX-512 version
  return _mm256_cvtph_ps(_mm_and_si128(_mm_slli_epi16(_mm_cvtepi8_epi16(b), 7), _mm_set1_epi16(-16385)));
}
inline VF LoadF8(const uint8_t* p) {
  return F8Widen(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}
inline VF LoadF8Partial(const uint8_t* p, int n) {
  alignas(16) uint8_t tmp[16] = {};
  for (int i = 0; i < n; ++i) tmp[i] = p[i];
  return F8Widen(_mm_load_si128(reinterpret_cast<const __m128i*>(tmp)));
}
inline VF Add(VF a, VF b) {
  return _mm256_add_ps(a, b);
}
inline VF Sub(VF a, VF b) {
  return _mm256_sub_ps(a, b);
}
inline VF Mul(VF a, VF b) {
  return _mm256_mul_ps(a, b);
}
inline VF Fma(VF a, VF b, VF c) {
  return _mm256_fmadd_ps(a, b, c);
}
inline VF Fnma(VF a, VF b, VF c) {
  return _mm256_fnmadd_ps(a, b, c);
}
inline VF MaxV(VF a, VF b) {
  return _mm256_max_ps(a, b);
}
inline float ReduceAdd(VF v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
inline float ReduceMax(VF v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
inline VF AbsV(VF v) {
  return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v);
}
#else
// The scalar "vector" of the generic build: one lane. The kernels written over VF stay readable and
// the compiler is free to auto-vectorise them with the baseline SSE2.
constexpr int kLanes = 1;
constexpr int kVectorRegisters = 16;
using VF = float;
inline VF Zero() {
  return 0.0f;
}
inline VF Set1(float v) {
  return v;
}
inline VF Load(const float* p) {
  return *p;
}
inline void Store(float* p, VF v) {
  *p = v;
}
inline VF LoadPartial(const float* p, int) {
  return *p;
}
inline void StorePartial(float* p, VF v, int) {
  *p = v;
}
inline VF LoadBf16(const uint16_t* p) {
  return Bf16ToF32(*p);
}
inline VF LoadBf16Partial(const uint16_t* p, int) {
  return Bf16ToF32(*p);
}
inline VF LoadF16(const uint16_t* p) {
  return F16ToF32(*p);
}
inline VF LoadF16Partial(const uint16_t* p, int) {
  return F16ToF32(*p);
}
inline VF LoadF8(const uint8_t* p) {
  return F8ToF32Div256(*p);
}
inline VF LoadF8Partial(const uint8_t* p, int) {
  return F8ToF32Div256(*p);
}
inline VF Add(VF a, VF b) {
  return a + b;
}
inline VF Sub(VF a, VF b) {
  return a - b;
}
inline VF Mul(VF a, VF b) {
  return a * b;
}
// Without an FMA instruction a fused multiply-add is a slow libm call; two roundings instead of one
// stay inside every tolerance the tests derive (they count one rounding per product and per add).
inline VF Fma(VF a, VF b, VF c) {
  return a * b + c;
}
inline VF Fnma(VF a, VF b, VF c) {
  return c - a * b;
}
inline VF MaxV(VF a, VF b) {
  return a < b ? b : a;
}
inline float ReduceAdd(VF v) {
  return v;
}
inline float ReduceMax(VF v) {
  return v;
}
inline VF AbsV(VF v) {
  return __builtin_fabsf(v);
}
#endif

// exp(x) for f32 lanes: Cody-Waite range reduction x = n ln2 + r, |r| <= ln2/2, then a degree-7
// polynomial for e^r (relative error a few ulp, measured < 4e-7 in cpu_ops_test); the result is
// scaled by 2^n through the exponent bits. Inputs below -87.3 give 0 (softmax tails), above 88.7
// are clamped (callers subtract the running max, so they never pass large positive values).
inline VF ExpV(VF x) {
#if defined(HYMT_ISA_IS_generic)
  return __builtin_expf(x);
#else
  const VF kLog2e = Set1(1.44269504088896341f);
  const VF kLn2Hi = Set1(0.693359375f);
  const VF kLn2Lo = Set1(-2.12194440e-4f);
  x = MaxV(x, Set1(-87.3f));
#if defined(HYMT_ISA_IS_avx512)
  x = _mm512_min_ps(x, Set1(88.7f));
  VF n = _mm512_roundscale_ps(Mul(x, kLog2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
#else
  x = _mm256_min_ps(x, Set1(88.7f));
  VF n = _mm256_round_ps(Mul(x, kLog2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
#endif
  VF r = Fnma(n, kLn2Hi, x);
  r = Fnma(n, kLn2Lo, r);
  // Taylor coefficients 1/k! (k = 7..2), Horner form; truncating at degree 7 over |r| <= 0.347
  // costs < 1e-8 relative, so the f32 rounding of the steps dominates.
  VF p = Set1(1.0f / 5040.0f);
  p = Fma(p, r, Set1(1.0f / 720.0f));
  p = Fma(p, r, Set1(1.0f / 120.0f));
  p = Fma(p, r, Set1(1.0f / 24.0f));
  p = Fma(p, r, Set1(1.0f / 6.0f));
  p = Fma(p, r, Set1(0.5f));
  p = Fma(p, r, Set1(1.0f));
  p = Fma(p, r, Set1(1.0f));
#if defined(HYMT_ISA_IS_avx512)
  // 2^n by building the exponent field; n in [-126, 128] after the clamps (2^128 only for inputs
  // the callers never pass), and the scalef form handles the lower end exactly.
  return _mm512_scalef_ps(p, n);
#else
  // n >= -126 (x >= -87.3), so 2^n is a normal float; n <= 128 only for x near 88.7, not used.
  __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return Mul(p, _mm256_castsi256_ps(e));
#endif
#endif
}

}  // namespace hymt::cpu::HYMT_ISA
