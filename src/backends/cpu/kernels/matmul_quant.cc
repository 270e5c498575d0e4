// GEMV kernels for the ggml block formats with int8 activations, and the block formats' dequantisation
// for the GEMM's packed panels (matmul_float.cc). The launcher is matmul.cc.
//
// x is quantised once per call, per token row, bit for bit as quant/'s QuantizeRow: BlockQ8_0 (32 inputs,
// f16 scale, plus side arrays, see Q8ActRow) for the simple formats, BlockQ8_K (256 inputs) for the
// K formats. A weight block is expanded to 32 unsigned bytes per 32 inputs in registers (nibbles, plus
// the fifth / sixth bits) and multiplied with the int8 activations:
//   simple formats: vpdpbusd (AVX-512 VNNI) / maddubs + madd (AVX2) to eight int32 lanes per block,
//     converted and scaled by d_w * d_x in f32. q4_0/q5_0 weights are stored with an offset (q - 8,
//     q - 16) and q4_1/q5_1 with a min; both become one term c_w * (d_x * sum(qx)) per block, the
//     activation's sum coming precomputed in Q8ActRow::s. q8_0 weights are signed: |w| times
//     sign(w) * x, as the unsigned x signed instruction wants.
//   K formats: maddubs to int16 pairs, then vpdpwssd (AVX-512 VNNI, two 32-input sub-blocks per 512-bit
//     instruction) / madd (AVX2) with the 6- or 8-bit sub-block scale, all in int32 per super-block (no
//     overflow: see the bounds at each format), one f32 multiply per super-block; mins (q4_K, q5_K) and
//     q6_K's offset 32 use the activation's bsums.
// The generic build computes the same integer sums with scalar loops; the tests compare all of them
// with quant/'s integer Dot.
//
// One loop serves any number of tokens: each weight block is expanded once and dotted with up to
// kTokenGroup tokens; with more tokens the row is walked again per group (it stays in L1, x in L2). The
// launcher uses it up to kGemvMaxTokens tokens; above that the GEMM is faster.
#include <cstring>
#include <type_traits>

#include "backends/cpu/kernels/kernels.h"
#include "quant/blocks.h"

namespace hymt::cpu::HYMT_ISA {
namespace {

constexpr int kTokenGroup = 4;

// The encoders of quant/ (quant_simple.cc, quant_k.cc), reproduced bit for bit: d = max|x| / 127 (for
// Q8_0 saturated to the f16 range and rounded to f16 first), q = x * (1 / d) rounded to nearest even and
// clamped to [-127, 127]. The clamp matters only when the f16 scale saturates.
constexpr float kF16Max = 65504.0f;
constexpr float kQ8KMinAmax = 1e-30f;  // below it 1 / d overflows: quant/ encodes such blocks as zeros

inline int RoundCode(float t) {
  t = Min(Max(t, -127.0f), 127.0f);
  return static_cast<int>(__builtin_nearbyintf(t));  // ties to even under the default rounding mode
}

// ---- activation quantisation -----------------------------------------------------------------------

void QuantizeQ8_0Act(const float* x, int64_t k, void* dst) {
  const int64_t nb = k / 32;
  auto* blocks = static_cast<BlockQ8_0*>(dst);
  float* ds = reinterpret_cast<float*>(static_cast<uint8_t*>(dst) + Q8ActFloatsOffset(k));
  float* ss = ds + nb;
  auto* cs = reinterpret_cast<int32_t*>(ss + nb);
  for (int64_t b = 0; b < nb; ++b) {
    const float* xb = x + b * 32;
#if defined(HYMT_ISA_IS_avx512)
    const __m512 v0 = _mm512_loadu_ps(xb), v1 = _mm512_loadu_ps(xb + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
#else
    VF m = Zero();
    for (int i = 0; i < 32; i += kLanes) m = MaxV(m, AbsV(Load(xb + i)));
    const float amax = ReduceMax(m);
#endif
    const uint16_t d16 = F32ToF16(Min(amax / 127.0f, kF16Max));
    const float d = F16ToF32(d16);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ8_0& o = blocks[b];
    o.d = d16;
#if defined(HYMT_ISA_IS_avx512)
    const __m512 lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f), vid = _mm512_set1_ps(id);
    const __m512i q0 = _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(v0, vid), lo), hi));
    const __m512i q1 = _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(v1, vid), lo), hi));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o.qs), _mm512_cvtepi32_epi8(q0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o.qs + 16), _mm512_cvtepi32_epi8(q1));
    const int sum = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
#else
    int sum = 0;
    for (int i = 0; i < 32; ++i) {
      const int q = RoundCode(xb[i] * id);
      o.qs[i] = static_cast<int8_t>(q);
      sum += q;
    }
#endif
    ds[b] = d;
    ss[b] = d * static_cast<float>(sum);
    cs[b] = -128 * sum;
  }
}

void QuantizeQ8K(const float* x, int64_t k, BlockQ8_K* out) {
  auto* bsum32 = reinterpret_cast<int16_t*>(out + k / kQKK);
  auto* off16 = reinterpret_cast<int32_t*>(bsum32 + 8 * (k / kQKK));
  for (int64_t b = 0; b < k / kQKK; ++b) {
    const float* xb = x + b * kQKK;
    VF m = Zero();
    for (int i = 0; i < kQKK; i += kLanes) m = MaxV(m, AbsV(Load(xb + i)));
    float amax = ReduceMax(m);
    if (amax < kQ8KMinAmax) amax = 0.0f;
    BlockQ8_K& o = out[b];
    o.d = amax / 127.0f;
    const float id = amax != 0.0f ? 1.0f / o.d : 0.0f;
    for (int j = 0; j < kQKK / 16; ++j) {
      int sum = 0;
      for (int i = 0; i < 16; ++i) {
        const int q = RoundCode(xb[16 * j + i] * id);
        o.qs[16 * j + i] = static_cast<int8_t>(q);
        sum += q;
      }
      o.bsums[j] = static_cast<int16_t>(sum);
    }
    for (int j = 0; j < 8; ++j) bsum32[8 * b + j] = static_cast<int16_t>(o.bsums[2 * j] + o.bsums[2 * j + 1]);
    for (int j = 0; j < 16; ++j) off16[16 * b + j] = -32 * o.bsums[j];
  }
}

// ---- 32-byte integer vectors -------------------------------------------------------------------------

#if defined(HYMT_ISA_IS_avx512) || defined(HYMT_ISA_IS_avx2)
using I8x32 = __m256i;  // 32 bytes in element order
using I32x8 = __m256i;  // 8 partial sums
using F32x8 = __m256;

inline I8x32 LoadBytes(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}
inline I8x32 Splat8(int v) {
  return _mm256_set1_epi8(static_cast<char>(v));
}

// 16 bytes of packed nibbles -> 32 bytes: the low nibbles, then the high nibbles (q4_0 .. q5_1 order).
inline I8x32 Nibbles32(const uint8_t* qs) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m256i both = _mm256_inserti128_si256(_mm256_castsi128_si256(v), _mm_srli_epi16(v, 4), 1);
  return _mm256_and_si256(both, Splat8(0x0f));
}

// 0x10 in byte j where bit j of bits is set (the fifth bit of q5_0 / q5_1).
inline I8x32 FifthBits(uint32_t bits) {
#if defined(HYMT_ISA_IS_avx512)
  return _mm256_maskz_mov_epi8(static_cast<__mmask32>(bits), Splat8(0x10));
#else
  // Byte j gets byte j / 8 of bits, then all its other bits are set so that only bit j % 8 decides.
  __m256i b =
      _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)),
                          _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0));
  b = _mm256_or_si256(b, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
  return _mm256_and_si256(_mm256_cmpeq_epi8(b, _mm256_set1_epi64x(-1)), Splat8(0x10));
#endif
}

// Eight int32 partial sums of u[i] * s[i], u unsigned (< 128 for the AVX2 form, where a pair of products
// must fit int16: 2 * 127 * 127 < 32768), s signed.
inline I32x8 DotU8S8(I8x32 u, I8x32 s) {
#if defined(HYMT_ISA_IS_avx512)
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
#else
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
#endif
}
#if defined(HYMT_ISA_IS_avx2)
// acc + sum over pairs of (u[2i] s[2i] + u[2i+1] s[2i+1]) * scale16[i]: the K formats' scaled sub-block dot
// (AVX-512 has its own 64-input version of the K-format dots).
inline I32x8 DotU8S8ScaledAcc(I32x8 acc, I8x32 u, I8x32 s, __m256i scale16) {
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), scale16));
}
inline I32x8 ZeroI8() {
  return _mm256_setzero_si256();
}
#endif
inline F32x8 ToF32(I32x8 v) {
  return _mm256_cvtepi32_ps(v);
}
inline F32x8 FmaF8(F32x8 a, F32x8 b, F32x8 c) {
  return _mm256_fmadd_ps(a, b, c);
}
inline F32x8 SplatF8(float v) {
  return _mm256_set1_ps(v);
}
inline F32x8 ZeroF8() {
  return _mm256_setzero_ps();
}
inline float ReduceF8(F32x8 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
#else
// The generic build: the same operations over plain arrays, reduced to one lane.
struct I8x32 {
  int8_t v[32];  // unsigned quants are < 128, so int8 holds them
};
using I32x8 = int32_t;
using F32x8 = float;
inline I8x32 LoadBytes(const void* p) {
  I8x32 r;
  std::memcpy(r.v, p, 32);
  return r;
}
inline I8x32 Nibbles32(const uint8_t* qs) {
  I8x32 r;
  for (int i = 0; i < 16; ++i) {
    r.v[i] = static_cast<int8_t>(qs[i] & 0x0f);
    r.v[i + 16] = static_cast<int8_t>(qs[i] >> 4);
  }
  return r;
}
inline I8x32 FifthBits(uint32_t bits) {
  I8x32 r;
  for (int i = 0; i < 32; ++i) r.v[i] = static_cast<int8_t>(((bits >> i) & 1u) << 4);
  return r;
}
inline I32x8 DotU8S8(const I8x32& u, const I8x32& s) {
  int32_t sum = 0;
  for (int i = 0; i < 32; ++i) sum += static_cast<int32_t>(u.v[i]) * s.v[i];
  return sum;
}
inline I32x8 DotU8S8ScaledAcc(I32x8 acc, const I8x32& u, const I8x32& s, int scale_lo, int scale_hi) {
  int32_t lo = 0, hi = 0;
  for (int i = 0; i < 16; ++i) lo += static_cast<int32_t>(u.v[i]) * s.v[i];
  for (int i = 16; i < 32; ++i) hi += static_cast<int32_t>(u.v[i]) * s.v[i];
  return acc + lo * scale_lo + hi * scale_hi;
}
inline F32x8 ToF32(I32x8 v) {
  return static_cast<float>(v);
}
inline F32x8 FmaF8(F32x8 a, F32x8 b, F32x8 c) {
  return a * b + c;
}
inline F32x8 SplatF8(float v) {
  return v;
}
inline F32x8 ZeroF8() {
  return 0.0f;
}
inline I32x8 ZeroI8() {
  return 0;
}
inline float ReduceF8(F32x8 v) {
  return v;
}
#endif

// ---- the simple formats ------------------------------------------------------------------------------

// A weight block expanded for the dot: unsigned quants u (q8_0: |w|), its scale d and the coefficient c
// of the activation's d_x * sum(qx) (-offset * d, or the min).
struct SimpleBlock {
  I8x32 u;
  float d;
  float c;
};

inline uint32_t LoadU32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline I8x32 Or(const I8x32& a, const I8x32& b) {
#if defined(HYMT_ISA_IS_generic)
  I8x32 r;
  for (int i = 0; i < 32; ++i) r.v[i] = static_cast<int8_t>(a.v[i] | b.v[i]);
  return r;
#else
  return _mm256_or_si256(a, b);
#endif
}

template <DType T>
struct SimpleFormat;
template <>
struct SimpleFormat<DType::kQ4_0> {
  using Block = BlockQ4_0;
  static SimpleBlock Expand(const Block& b) {
    const float d = F16ToF32(b.d);
    return {Nibbles32(b.qs), d, -8.0f * d};
  }
};
template <>
struct SimpleFormat<DType::kQ4_1> {
  using Block = BlockQ4_1;
  static SimpleBlock Expand(const Block& b) { return {Nibbles32(b.qs), F16ToF32(b.d), F16ToF32(b.m)}; }
};
template <>
struct SimpleFormat<DType::kQ5_0> {
  using Block = BlockQ5_0;
  static SimpleBlock Expand(const Block& b) {
    const float d = F16ToF32(b.d);
    return {Or(Nibbles32(b.qs), FifthBits(LoadU32(b.qh))), d, -16.0f * d};
  }
};
template <>
struct SimpleFormat<DType::kQ5_1> {
  using Block = BlockQ5_1;
  static SimpleBlock Expand(const Block& b) {
    return {Or(Nibbles32(b.qs), FifthBits(LoadU32(b.qh))), F16ToF32(b.d), F16ToF32(b.m)};
  }
};

// Sum over blocks of d_w * d_x * isum + c_w * s_x for one weight row and kTokens token rows.
template <DType T, int kTokens>
void SimpleRowDot(const uint8_t* w_row, const Q8ActRow* xq, int64_t n_blocks, float* sums) {
  using F = SimpleFormat<T>;
  const auto* wb = reinterpret_cast<const typename F::Block*>(w_row);
  F32x8 acc[kTokens];
  float corr[kTokens];
  for (int t = 0; t < kTokens; ++t) {
    acc[t] = ZeroF8();
    corr[t] = 0.0f;
  }
  for (int64_t b = 0; b < n_blocks; ++b) {
    const SimpleBlock e = F::Expand(wb[b]);
    for (int t = 0; t < kTokens; ++t) {
      const Q8ActRow& x = xq[t];
      acc[t] = FmaF8(ToF32(DotU8S8(e.u, LoadBytes(x.blocks[b].qs))), SplatF8(e.d * x.d[b]), acc[t]);
      corr[t] += e.c * x.s[b];
    }
  }
  for (int t = 0; t < kTokens; ++t) sums[t] = ReduceF8(acc[t]) + corr[t];
}

// q8_0: signed weights; the product is formed as |w| * (sign(w) x).
template <int kTokens>
void Q8RowDot(const uint8_t* w_row, const Q8ActRow* xq, int64_t n_blocks, float* sums) {
  const auto* wb = reinterpret_cast<const BlockQ8_0*>(w_row);
  F32x8 acc[kTokens];
  for (int t = 0; t < kTokens; ++t) acc[t] = ZeroF8();
  for (int64_t b = 0; b < n_blocks; ++b) {
    const float d = F16ToF32(wb[b].d);
#if defined(HYMT_ISA_IS_generic)
    for (int t = 0; t < kTokens; ++t) {
      const BlockQ8_0& xb = xq[t].blocks[b];
      int32_t sum = 0;
      for (int i = 0; i < 32; ++i) sum += static_cast<int32_t>(wb[b].qs[i]) * xb.qs[i];
      acc[t] += static_cast<float>(sum) * (d * xq[t].d[b]);
    }
#else
    const __m256i w = LoadBytes(wb[b].qs);
    const __m256i abs_w = _mm256_abs_epi8(w);
    for (int t = 0; t < kTokens; ++t) {
      // |w| <= 128 and |x| <= 127: a maddubs pair stays below 2 * 128 * 127 < 32768.
      const __m256i sx = _mm256_sign_epi8(LoadBytes(xq[t].blocks[b].qs), w);
      acc[t] = FmaF8(ToF32(DotU8S8(abs_w, sx)), SplatF8(d * xq[t].d[b]), acc[t]);
    }
#endif
  }
  for (int t = 0; t < kTokens; ++t) sums[t] = ReduceF8(acc[t]);
}

// ---- the K formats -------------------------------------------------------------------------------------

// The 6-bit scales and mins of q4_K / q5_K, unpacked: sc[0..7] then m[0..7] (ggml's get_scale_min_k4).
struct ScalesMins {
  uint8_t sc[8];
  uint8_t m[8];
};
inline ScalesMins UnpackScalesMins(const uint8_t* s) {
  // ggml's packing, unpacked four at a time in 32-bit words: sc[0..3] and m[0..3] are the low 6 bits of
  // s[0..3] and s[4..7]; sc[4..7] / m[4..7] are the low / high nibbles of s[8..11] with the top two
  // bits of s[0..3] / s[4..7] above them.
  constexpr uint32_t kLow6 = 0x3f3f3f3f, kLow4 = 0x0f0f0f0f, kLow2 = 0x03030303;
  uint32_t w[3];
  std::memcpy(w, s, 12);
  uint32_t out[4];
  out[0] = w[0] & kLow6;
  out[1] = (w[2] & kLow4) | (((w[0] >> 6) & kLow2) << 4);
  out[2] = w[1] & kLow6;
  out[3] = ((w[2] >> 4) & kLow4) | (((w[1] >> 6) & kLow2) << 4);
  ScalesMins r;
  std::memcpy(&r, out, sizeof r);
  return r;
}
static_assert(sizeof(ScalesMins) == 16);

#if !defined(HYMT_ISA_IS_generic)
// UnpackScalesMins in a register: bytes 0..7 the scales, 8..15 the mins. (Done in scalar code, the four
// 32-bit stores re-read by a vector load stall store forwarding: a third of q4_K's GEMV time.) Reads 16
// bytes from `s`, 12 of which are the scales; the 4 after them are the block's quants.
inline __m128i UnpackScalesMinsV(const uint8_t* s) {
  const __m128i w = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));  // w0 w1 w2 (w3 unused)
  const __m128i p = _mm_srlv_epi32(_mm_shuffle_epi32(w, 0x98), _mm_setr_epi32(0, 0, 0, 4));  // w0 w2 w1 w2>>4
  const __m128i lo = _mm_and_si128(p, _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f));
  const __m128i q = _mm_srli_epi32(_mm_shuffle_epi32(w, 0x50), 2);  // (w0 w0 w1 w1) >> 2: top 2 bits at 4-5
  const __m128i hi = _mm_and_si128(q, _mm_setr_epi32(0, 0x30303030, 0, 0x30303030));
  return _mm_or_si128(lo, hi);
}
#endif

#if defined(HYMT_ISA_IS_avx2)
// Shuffle masks that broadcast int16 lane j of each 128-bit half to the whole half: bytes 2j, 2j + 1
// repeated. Plain constant data (a table of __m256i would be built by a static initializer running
// AVX2 instructions at program start, on every CPU).
struct Broadcast16Masks {
  alignas(32) uint8_t bytes[8][32];
  constexpr Broadcast16Masks() : bytes{} {
    for (int j = 0; j < 8; ++j)
      for (int i = 0; i < 32; ++i) bytes[j][i] = static_cast<uint8_t>(2 * j + (i & 1));
  }
};
constexpr Broadcast16Masks kBroadcast16;
inline __m256i Broadcast16Mask(int j) {
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(kBroadcast16.bytes[j]));
}

// Two int16 scales, the first for bytes 0..15 of a 32-byte sub-block, the second for bytes 16..31
// (maddubs pairs 0..7 sit in the low 128 bits).
inline __m256i Scale16(int lo, int hi) {
  return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi16(static_cast<short>(lo))),
                                 _mm_set1_epi16(static_cast<short>(hi)), 1);
}
#endif

// One q4_K / q5_K super-block expanded: 8 sub-blocks of 32 unsigned quants (< 32).
struct KBlock {
  I8x32 u[8];
};

inline void ExpandQ4K(const BlockQ4_K& b, KBlock* e) {
  for (int j = 0; j < 4; ++j) {
#if defined(HYMT_ISA_IS_generic)
    for (int l = 0; l < 32; ++l) {
      e->u[2 * j].v[l] = static_cast<int8_t>(b.qs[32 * j + l] & 0x0f);
      e->u[2 * j + 1].v[l] = static_cast<int8_t>(b.qs[32 * j + l] >> 4);
    }
#else
    const __m256i v = LoadBytes(b.qs + 32 * j);
    e->u[2 * j] = _mm256_and_si256(v, Splat8(0x0f));
    e->u[2 * j + 1] = _mm256_and_si256(_mm256_srli_epi16(v, 4), Splat8(0x0f));
#endif
  }
}

// q5_K: as q4_K, with bit 2j (2j + 1) of qh[l] the fifth bit of element l of sub-block 2j (2j + 1).
inline void ExpandQ5K(const BlockQ5_K& b, KBlock* e) {
#if defined(HYMT_ISA_IS_generic)
  for (int j = 0; j < 4; ++j) {
    for (int l = 0; l < 32; ++l) {
      const int q = b.qs[32 * j + l], h = b.qh[l];
      e->u[2 * j].v[l] = static_cast<int8_t>((q & 0x0f) | (((h >> (2 * j)) & 1) << 4));
      e->u[2 * j + 1].v[l] = static_cast<int8_t>((q >> 4) | (((h >> (2 * j + 1)) & 1) << 4));
    }
  }
#else
  const __m256i qh = LoadBytes(b.qh);
  const __m256i zero = _mm256_setzero_si256();
  for (int j = 0; j < 4; ++j) {
    const __m256i v = LoadBytes(b.qs + 32 * j);
    const __m256i h_lo = _mm256_andnot_si256(
        _mm256_cmpeq_epi8(_mm256_and_si256(qh, Splat8(1 << (2 * j))), zero), Splat8(0x10));
    const __m256i h_hi = _mm256_andnot_si256(
        _mm256_cmpeq_epi8(_mm256_and_si256(qh, Splat8(1 << (2 * j + 1))), zero), Splat8(0x10));
    e->u[2 * j] = _mm256_or_si256(_mm256_and_si256(v, Splat8(0x0f)), h_lo);
    e->u[2 * j + 1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), Splat8(0x0f)), h_hi);
  }
#endif
}

#if !defined(HYMT_ISA_IS_avx512)  // AVX-512: Q45KRowDot512 and Q6KRowDot512 below
// q4_K / q5_K against q8_K: d * d_x * sum_j sc_j * isum_j - dmin * d_x * sum_j m_j * bsum_j.
// |isum_j| <= 32 * 31 * 127 and sc_j <= 63, so the int32 sum over 8 sub-blocks stays below 2^24.
template <DType T, int kTokens>
void Q45KRowDot(const uint8_t* w_row, const BlockQ8_K* const* xq, int64_t n_blocks, float* sums) {
  using Block = std::conditional_t<T == DType::kQ4_K, BlockQ4_K, BlockQ5_K>;
  const auto* wb = reinterpret_cast<const Block*>(w_row);
  F32x8 acc[kTokens];
  for (int t = 0; t < kTokens; ++t) acc[t] = ZeroF8();
  KBlock e;
  for (int64_t b = 0; b < n_blocks; ++b) {
    const Block& w = wb[b];
    if constexpr (T == DType::kQ4_K) {
      ExpandQ4K(w, &e);
    } else {
      ExpandQ5K(w, &e);
    }
    const float d = F16ToF32(w.d), dmin = F16ToF32(w.dmin);
#if defined(HYMT_ISA_IS_generic)
    const ScalesMins sm = UnpackScalesMins(w.scales);
#else
    const __m128i sm = UnpackScalesMinsV(w.scales);
    // The 8 scales as int16, in both 128-bit halves; sub-block j's scale is broadcast from it by a shuffle.
    const __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm));
    // The mins once per pair of bsums (16 inputs each): [m0 m0 m1 m1 ... m7 m7] as int16.
    const __m128i m8 = _mm_cvtepu8_epi16(_mm_srli_si128(sm, 8));
    const __m256i mins16 = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_unpacklo_epi16(m8, m8)),
                                                   _mm_unpackhi_epi16(m8, m8), 1);
#endif
    for (int t = 0; t < kTokens; ++t) {
      const BlockQ8_K& x = xq[t][b];
      I32x8 isum = ZeroI8();
      for (int j = 0; j < 8; ++j) {
#if defined(HYMT_ISA_IS_generic)
        isum = DotU8S8ScaledAcc(isum, e.u[j], LoadBytes(x.qs + 32 * j), sm.sc[j], sm.sc[j]);
#else
        isum = DotU8S8ScaledAcc(isum, e.u[j], LoadBytes(x.qs + 32 * j),
                                _mm256_shuffle_epi8(sc16, Broadcast16Mask(j)));
#endif
      }
#if defined(HYMT_ISA_IS_generic)
      int32_t min_sum = 0;
      for (int j = 0; j < 8; ++j) min_sum += sm.m[j] * (x.bsums[2 * j] + x.bsums[2 * j + 1]);
#else
      const __m256i min_sum = _mm256_madd_epi16(LoadBytes(x.bsums), mins16);
#endif
      acc[t] = FmaF8(ToF32(isum), SplatF8(d * x.d), acc[t]);
      acc[t] = FmaF8(ToF32(min_sum), SplatF8(-dmin * x.d), acc[t]);
    }
  }
  for (int t = 0; t < kTokens; ++t) sums[t] = ReduceF8(acc[t]);
}

#endif

// q6_K's quants (0..63, offset 32) as 8 chunks of 32 bytes; chunk 4h + c covers elements 128h + 32c..+31.
inline void ExpandQ6K(const BlockQ6_K& w, I8x32* u) {
  for (int h = 0; h < 2; ++h) {
    const uint8_t* ql = w.ql + 64 * h;
    const uint8_t* qh = w.qh + 32 * h;
#if defined(HYMT_ISA_IS_generic)
    for (int l = 0; l < 32; ++l) {
      u[4 * h + 0].v[l] = static_cast<int8_t>((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4));
      u[4 * h + 1].v[l] = static_cast<int8_t>((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4));
      u[4 * h + 2].v[l] = static_cast<int8_t>((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
      u[4 * h + 3].v[l] = static_cast<int8_t>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
    }
#else
    const __m256i l0 = LoadBytes(ql), l1 = LoadBytes(ql + 32), hb = LoadBytes(qh);
    const __m256i m4 = Splat8(0x0f);
    u[4 * h + 0] =
        _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_slli_epi16(_mm256_and_si256(hb, Splat8(0x03)), 4));
    u[4 * h + 1] =
        _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_slli_epi16(_mm256_and_si256(hb, Splat8(0x0c)), 2));
    u[4 * h + 2] =
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(hb, Splat8(0x30)));
    u[4 * h + 3] =
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                        _mm256_srli_epi16(_mm256_and_si256(hb, Splat8(static_cast<int>(0xc0))), 2));
#endif
  }
}

#if !defined(HYMT_ISA_IS_avx512)
// q6_K against q8_K: d * d_x * sum_j sc_j * (sum_{i in j} q_i qx_i - 32 * bsum_j), sub-blocks of 16.
// |sum q qx| <= 16 * 63 * 127 per sub-block, |sc| <= 128: the int32 sums stay below 2^29.
template <int kTokens>
void Q6KRowDot(const uint8_t* w_row, const BlockQ8_K* const* xq, int64_t n_blocks, float* sums) {
  const auto* wb = reinterpret_cast<const BlockQ6_K*>(w_row);
  F32x8 acc[kTokens];
  for (int t = 0; t < kTokens; ++t) acc[t] = ZeroF8();
  I8x32 u[8];
  for (int64_t b = 0; b < n_blocks; ++b) {
    const BlockQ6_K& w = wb[b];
    ExpandQ6K(w, u);
    const float d = F16ToF32(w.d);
#if !defined(HYMT_ISA_IS_generic)
    const __m256i scales16 =
        _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w.scales)));
#endif
    for (int t = 0; t < kTokens; ++t) {
      const BlockQ8_K& x = xq[t][b];
      I32x8 isum = ZeroI8();
      for (int c = 0; c < 8; ++c) {
#if defined(HYMT_ISA_IS_generic)
        isum = DotU8S8ScaledAcc(isum, u[c], LoadBytes(x.qs + 32 * c), w.scales[2 * c], w.scales[2 * c + 1]);
#else
        isum = DotU8S8ScaledAcc(isum, u[c], LoadBytes(x.qs + 32 * c),
                                Scale16(w.scales[2 * c], w.scales[2 * c + 1]));
#endif
      }
      // The offset 32 of every quant: 32 * sum_j sc_j * bsum_j (element e is in sub-block e / 16 of both).
#if defined(HYMT_ISA_IS_generic)
      int32_t offset = 0;
      for (int j = 0; j < 16; ++j) offset += w.scales[j] * x.bsums[j];
      isum -= 32 * offset;
#else
      isum = _mm256_sub_epi32(isum, _mm256_slli_epi32(_mm256_madd_epi16(LoadBytes(x.bsums), scales16), 5));
#endif
      acc[t] = FmaF8(ToF32(isum), SplatF8(d * x.d), acc[t]);
    }
  }
  for (int t = 0; t < kTokens; ++t) sums[t] = ReduceF8(acc[t]);
}
#endif

#if defined(HYMT_ISA_IS_avx512)
// ---- the K formats on AVX-512: two 32-input sub-blocks per instruction -----------------------------------
// A 64-byte x vector covers inputs 64c .. 64c+63 of a super-block: sub-blocks 2c and 2c+1 of q4_K / q5_K
// (one scale per 256-bit half), sub-blocks 4c .. 4c+3 of q6_K (one scale per 128-bit lane). The weights
// are expanded into the same order with per-half variable shifts, and each scale is placed in its lanes
// by one shuffle, so a 64-input step is one maddubs and one vpdpwssd.

// Shuffle masks (within 128-bit lanes) that broadcast int16 word w_lo to lanes 0-1 and w_hi to lanes 2-3.
struct HalfScaleMasks {
  alignas(64) uint8_t bytes[4][64];
  constexpr HalfScaleMasks() : bytes{} {
    for (int c = 0; c < 4; ++c)
      for (int i = 0; i < 64; ++i)
        bytes[c][i] = static_cast<uint8_t>(2 * (2 * c + (i >= 32 ? 1 : 0)) + (i & 1));
  }
};
constexpr HalfScaleMasks kHalfScaleMasks;

// vpermw indices that put int16 word 4c + L in 128-bit lane L (q6_K's 16 scales, 4 per 64 inputs).
struct LaneScaleIndex {
  alignas(64) uint16_t words[4][32];
  constexpr LaneScaleIndex() : words{} {
    for (int c = 0; c < 4; ++c)
      for (int i = 0; i < 32; ++i) words[c][i] = static_cast<uint16_t>(4 * c + i / 8);
  }
};
constexpr LaneScaleIndex kLaneScaleIndex;

inline __m512i Load512(const void* p) {
  return _mm512_loadu_si512(p);
}
inline __m512i Broadcast256(const void* p) {
  return _mm512_broadcast_i64x4(_mm256_loadu_si256(static_cast<const __m256i*>(p)));
}
// Per-half word shift counts (a, b): [a x16 | b x16].
inline __m512i HalfShifts(int a, int b) {
  return _mm512_inserti64x4(_mm512_set1_epi16(static_cast<short>(a)),
                            _mm256_set1_epi16(static_cast<short>(b)), 1);
}
// (a & b) | c in one instruction.
inline __m512i AndOr(__m512i a, __m512i b, __m512i c) {
  return _mm512_ternarylogic_epi32(a, b, c, 0xea);
}

template <DType T, int kTokens>
void Q45KRowDot512(const uint8_t* w_row, const BlockQ8_K* const* xq, int64_t n_blocks, float* sums) {
  using Block = std::conditional_t<T == DType::kQ4_K, BlockQ4_K, BlockQ5_K>;
  const auto* wb = reinterpret_cast<const Block*>(w_row);
  const __m512i nibble = _mm512_set1_epi8(0x0f), one = _mm512_set1_epi8(1), lo_hi = HalfShifts(0, 4);
  __m512 acc[kTokens];
  __m256 acc_min[kTokens];
  for (int t = 0; t < kTokens; ++t) {
    acc[t] = _mm512_setzero_ps();
    acc_min[t] = _mm256_setzero_ps();
  }
  for (int64_t b = 0; b < n_blocks; ++b) {
    const Block& w = wb[b];
    const __m128i sm = UnpackScalesMinsV(w.scales);
    const float d = F16ToF32(w.d), dmin = F16ToF32(w.dmin);
    const __m512i sc16 = _mm512_broadcast_i32x4(_mm_cvtepu8_epi16(sm));
    const __m128i m8 = _mm_cvtepu8_epi16(_mm_srli_si128(sm, 8));
    const __m256i mins16 = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_unpacklo_epi16(m8, m8)),
                                                   _mm_unpackhi_epi16(m8, m8), 1);
    __m512i u[4], scale[4];
    for (int c = 0; c < 4; ++c) {
      u[c] = _mm512_and_si512(_mm512_srlv_epi16(Broadcast256(w.qs + 32 * c), lo_hi), nibble);
      if constexpr (T == DType::kQ5_K) {  // fifth bits: bit 2c (lower half) / 2c + 1 (upper half) of qh[l]
        const __m512i h =
            _mm512_and_si512(_mm512_srlv_epi16(Broadcast256(w.qh), HalfShifts(2 * c, 2 * c + 1)), one);
        u[c] = _mm512_or_si512(u[c], _mm512_slli_epi16(h, 4));
      }
      scale[c] = _mm512_shuffle_epi8(sc16, Load512(kHalfScaleMasks.bytes[c]));
    }
    for (int t = 0; t < kTokens; ++t) {
      const BlockQ8_K& x = xq[t][b];
      __m512i isum = _mm512_setzero_si512();
      for (int c = 0; c < 4; ++c)
        isum = _mm512_dpwssd_epi32(isum, _mm512_maddubs_epi16(u[c], Load512(x.qs + 64 * c)), scale[c]);
      const __m256i min_sum = _mm256_madd_epi16(LoadBytes(x.bsums), mins16);
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(d * x.d), acc[t]);
      acc_min[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(min_sum), _mm256_set1_ps(-dmin * x.d), acc_min[t]);
    }
  }
  for (int t = 0; t < kTokens; ++t) sums[t] = _mm512_reduce_add_ps(acc[t]) + ReduceF8(acc_min[t]);
}

template <int kTokens>
void Q6KRowDot512(const uint8_t* w_row, const BlockQ8_K* const* xq, int64_t n_blocks, float* sums) {
  const auto* wb = reinterpret_cast<const BlockQ6_K*>(w_row);
  const __m512i nibble = _mm512_set1_epi8(0x0f), two_bits = _mm512_set1_epi8(0x03);
  const __m512i shifts_a = HalfShifts(0, 2), shifts_b = HalfShifts(4, 6);
  __m512 acc[kTokens];
  __m256 acc_off[kTokens];
  for (int t = 0; t < kTokens; ++t) {
    acc[t] = _mm512_setzero_ps();
    acc_off[t] = _mm256_setzero_ps();
  }
  for (int64_t b = 0; b < n_blocks; ++b) {
    const BlockQ6_K& w = wb[b];
    const float d = F16ToF32(w.d);
    const __m256i s16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w.scales)));
    const __m512i s16z = _mm512_castsi256_si512(s16);
    // u[2h + p] covers inputs 128h + 64p .. +63: p = 0 takes the low nibbles of ql[64h .. 64h+63] and
    // bits 0-1 / 2-3 of qh; p = 1 the high nibbles and bits 4-5 / 6-7 (ggml's q6_K layout).
    __m512i u[4], scale[4];
    for (int h = 0; h < 2; ++h) {
      const __m512i l = Load512(w.ql + 64 * h), hb = Broadcast256(w.qh + 32 * h);
      const __m512i ha = _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(hb, shifts_a), two_bits), 4);
      const __m512i hh = _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(hb, shifts_b), two_bits), 4);
      u[2 * h] = AndOr(l, nibble, ha);
      u[2 * h + 1] = AndOr(_mm512_srli_epi16(l, 4), nibble, hh);
    }
    for (int c = 0; c < 4; ++c) scale[c] = _mm512_permutexvar_epi16(Load512(kLaneScaleIndex.words[c]), s16z);
    for (int t = 0; t < kTokens; ++t) {
      const BlockQ8_K& x = xq[t][b];
      __m512i isum = _mm512_setzero_si512();
      for (int c = 0; c < 4; ++c)
        isum = _mm512_dpwssd_epi32(isum, _mm512_maddubs_epi16(u[c], Load512(x.qs + 64 * c)), scale[c]);
      // The offset 32 of every code: -32 * sum_j sc_j * bsum_j.
      const __m256i off = _mm256_slli_epi32(_mm256_madd_epi16(LoadBytes(x.bsums), s16), 5);
      const __m512 dx = _mm512_set1_ps(d * x.d);
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), dx, acc[t]);
      acc_off[t] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(off), _mm512_castps512_ps256(dx), acc_off[t]);
    }
  }
  for (int t = 0; t < kTokens; ++t) sums[t] = _mm512_reduce_add_ps(acc[t]) + ReduceF8(acc_off[t]);
}
#endif

// ---- dequantisation to f32 (the GEMM packs weight panels with it) ------------------------------------

// out[i] = u[i] * scale + bias for 32 bytes, (s_lo, b_lo) for bytes 0..15 and (s_hi, b_hi) for 16..31;
// the bytes are unsigned quants, or signed ones (q8_0) when kSigned.
template <bool kSigned>
inline void StoreAsF32(const I8x32& u, float s_lo, float b_lo, float s_hi, float b_hi, float* out) {
#if defined(HYMT_ISA_IS_avx512)
  const __m128i halves[2] = {_mm256_castsi256_si128(u), _mm256_extracti128_si256(u, 1)};
  for (int h = 0; h < 2; ++h) {
    const __m512i w = kSigned ? _mm512_cvtepi8_epi32(halves[h]) : _mm512_cvtepu8_epi32(halves[h]);
    _mm512_storeu_ps(out + 16 * h, _mm512_fmadd_ps(_mm512_cvtepi32_ps(w), _mm512_set1_ps(h ? s_hi : s_lo),
                                                   _mm512_set1_ps(h ? b_hi : b_lo)));
  }
#elif defined(HYMT_ISA_IS_avx2)
  const __m128i halves[2] = {_mm256_castsi256_si128(u), _mm256_extracti128_si256(u, 1)};
  for (int h = 0; h < 2; ++h) {
    for (int q = 0; q < 2; ++q) {
      const __m128i bytes = q == 0 ? halves[h] : _mm_srli_si128(halves[h], 8);
      const __m256i w = kSigned ? _mm256_cvtepi8_epi32(bytes) : _mm256_cvtepu8_epi32(bytes);
      _mm256_storeu_ps(out + 16 * h + 8 * q,
                       _mm256_fmadd_ps(_mm256_cvtepi32_ps(w), _mm256_set1_ps(h ? s_hi : s_lo),
                                       _mm256_set1_ps(h ? b_hi : b_lo)));
    }
  }
#else
  for (int i = 0; i < 32; ++i) {
    const int q = kSigned ? u.v[i] : static_cast<uint8_t>(u.v[i]);
    out[i] = static_cast<float>(q) * (i < 16 ? s_lo : s_hi) + (i < 16 ? b_lo : b_hi);
  }
#endif
}

template <DType T>
void DequantizeSimple(const uint8_t* row, int64_t first, int64_t n_blocks, float* out) {
  using F = SimpleFormat<T>;
  const auto* wb = reinterpret_cast<const typename F::Block*>(row) + first;
  for (int64_t b = 0; b < n_blocks; ++b) {
    const SimpleBlock e = F::Expand(wb[b]);
    StoreAsF32<false>(e.u, e.d, e.c, e.d, e.c, out + 32 * b);
  }
}

void DequantizeQ8_0(const uint8_t* row, int64_t first, int64_t n_blocks, float* out) {
  const auto* wb = reinterpret_cast<const BlockQ8_0*>(row) + first;
  for (int64_t b = 0; b < n_blocks; ++b) {
    const float d = F16ToF32(wb[b].d);
    StoreAsF32<true>(LoadBytes(wb[b].qs), d, 0.0f, d, 0.0f, out + 32 * b);
  }
}

template <DType T>
void DequantizeQ45K(const uint8_t* row, int64_t first, int64_t n_blocks, float* out) {
  using Block = std::conditional_t<T == DType::kQ4_K, BlockQ4_K, BlockQ5_K>;
  const auto* wb = reinterpret_cast<const Block*>(row) + first;
  KBlock e;
  for (int64_t b = 0; b < n_blocks; ++b) {
    if constexpr (T == DType::kQ4_K) {
      ExpandQ4K(wb[b], &e);
    } else {
      ExpandQ5K(wb[b], &e);
    }
    const ScalesMins sm = UnpackScalesMins(wb[b].scales);
    const float d = F16ToF32(wb[b].d), dmin = F16ToF32(wb[b].dmin);
    for (int j = 0; j < 8; ++j) {
      const float s = d * sm.sc[j], m = -dmin * sm.m[j];
      StoreAsF32<false>(e.u[j], s, m, s, m, out + kQKK * b + 32 * j);
    }
  }
}

void DequantizeQ6K(const uint8_t* row, int64_t first, int64_t n_blocks, float* out) {
  const auto* wb = reinterpret_cast<const BlockQ6_K*>(row) + first;
  I8x32 u[8];
  for (int64_t b = 0; b < n_blocks; ++b) {
    ExpandQ6K(wb[b], u);
    const float d = F16ToF32(wb[b].d);
    for (int c = 0; c < 8; ++c) {
      const float s_lo = d * wb[b].scales[2 * c], s_hi = d * wb[b].scales[2 * c + 1];
      StoreAsF32<false>(u[c], s_lo, -32.0f * s_lo, s_hi, -32.0f * s_hi, out + kQKK * b + 32 * c);
    }
  }
}

// ---- the row loop ----------------------------------------------------------------------------------------

bool IsKFormat(DType w) {
  return w == DType::kQ4_K || w == DType::kQ5_K || w == DType::kQ6_K;
}

template <int kTokens>
void RowDot(DType w, const uint8_t* w_row, const void* const* xq, int64_t k, float* sums) {
  if (IsKFormat(w)) {
    const BlockQ8_K* kx[kTokens];
    for (int t = 0; t < kTokens; ++t) kx[t] = static_cast<const BlockQ8_K*>(xq[t]);
#if defined(HYMT_ISA_IS_avx512)
    switch (w) {
      case DType::kQ4_K:
        return Q45KRowDot512<DType::kQ4_K, kTokens>(w_row, kx, k / kQKK, sums);
      case DType::kQ5_K:
        return Q45KRowDot512<DType::kQ5_K, kTokens>(w_row, kx, k / kQKK, sums);
      default:
        return Q6KRowDot512<kTokens>(w_row, kx, k / kQKK, sums);
    }
#else
    switch (w) {
      case DType::kQ4_K:
        return Q45KRowDot<DType::kQ4_K, kTokens>(w_row, kx, k / kQKK, sums);
      case DType::kQ5_K:
        return Q45KRowDot<DType::kQ5_K, kTokens>(w_row, kx, k / kQKK, sums);
      default:
        return Q6KRowDot<kTokens>(w_row, kx, k / kQKK, sums);
    }
#endif
  }
  Q8ActRow rows[kTokens];
  for (int t = 0; t < kTokens; ++t) rows[t] = ViewQ8ActRow(xq[t], k);
  switch (w) {
    case DType::kQ4_0:
      return SimpleRowDot<DType::kQ4_0, kTokens>(w_row, rows, k / 32, sums);
    case DType::kQ4_1:
      return SimpleRowDot<DType::kQ4_1, kTokens>(w_row, rows, k / 32, sums);
    case DType::kQ5_0:
      return SimpleRowDot<DType::kQ5_0, kTokens>(w_row, rows, k / 32, sums);
    case DType::kQ5_1:
      return SimpleRowDot<DType::kQ5_1, kTokens>(w_row, rows, k / 32, sums);
    case DType::kQ8_0:
      return Q8RowDot<kTokens>(w_row, rows, k / 32, sums);
    default:
      return;  // the launcher routes only block formats here
  }
}

}  // namespace

size_t QuantActRowBytes(DType w, int64_t k) {
  static_assert(sizeof(BlockQ8_K) % alignof(float) == 0);
  return IsKFormat(w)
             ? static_cast<size_t>(k / kQKK) * (sizeof(BlockQ8_K) + 8 * sizeof(int16_t) + 16 * sizeof(int32_t))
             : Q8ActFloatsOffset(k) + static_cast<size_t>(k / 32) * (2 * sizeof(float) + sizeof(int32_t));
}

void QuantizeActRow(DType w, const float* x, int64_t k, void* dst) {
  if (IsKFormat(w)) {
    QuantizeQ8K(x, k, static_cast<BlockQ8_K*>(dst));
  } else {
    QuantizeQ8_0Act(x, k, dst);
  }
}

void DequantizeRange(DType t, const uint8_t* row, int64_t k0, int64_t n, float* out) {
  const int64_t bs = IsKFormat(t) ? kQKK : 32, first = k0 / bs, count = n / bs;
  switch (t) {
    case DType::kQ4_0:
      return DequantizeSimple<DType::kQ4_0>(row, first, count, out);
    case DType::kQ4_1:
      return DequantizeSimple<DType::kQ4_1>(row, first, count, out);
    case DType::kQ5_0:
      return DequantizeSimple<DType::kQ5_0>(row, first, count, out);
    case DType::kQ5_1:
      return DequantizeSimple<DType::kQ5_1>(row, first, count, out);
    case DType::kQ8_0:
      return DequantizeQ8_0(row, first, count, out);
    case DType::kQ4_K:
      return DequantizeQ45K<DType::kQ4_K>(row, first, count, out);
    case DType::kQ5_K:
      return DequantizeQ45K<DType::kQ5_K>(row, first, count, out);
    case DType::kQ6_K:
      return DequantizeQ6K(row, first, count, out);
    default:
      return;
  }
}

// Weight rows prefetched ahead of the one being computed (into L2). Measured on the 4096 x 4096 GEMV,
// one thread, weights in memory: q4_0 4.4 -> 7.4 GB/s, q4_k 6.7 -> 8.8 GB/s with 2 rows (1 row: 7.2 and
// 8.0; 4 rows: 6.7 and 8.1).
constexpr int64_t kPrefetchRows = 2;

void GemvQuant(const MatMulArgs& a, const void* xq, size_t xq_row_bytes, int64_t n_begin, int64_t n_end) {
  // Rows in blocks of kRowBlock (a few tens of KiB: they stay in L1/L2 while every token group walks
  // them), so that the weights come from memory once however many tokens there are.
  constexpr int64_t kRowBlock = 16;
  for (int64_t nb = n_begin; nb < n_end; nb += kRowBlock) {
    const int64_t ne = Min(n_end, nb + kRowBlock);
    for (int64_t t0 = 0; t0 < a.n_tokens; t0 += kTokenGroup) {
      const int nt = static_cast<int>(Min<int64_t>(kTokenGroup, a.n_tokens - t0));
      const void* rows[kTokenGroup];
      for (int t = 0; t < nt; ++t) rows[t] = static_cast<const uint8_t*>(xq) + (t0 + t) * xq_row_bytes;
      float sums[kTokenGroup];
      for (int64_t n = nb; n < ne; ++n) {
        const uint8_t* w_row = a.w + static_cast<size_t>(n) * a.w_row_bytes;
        // A later row into L2 while this one is computed: the block kernels consume memory more slowly
        // than the float ones, and the hardware prefetcher alone does not run far enough ahead of them
        // to hide the memory latency.
        if (n + kPrefetchRows < n_end)
          for (size_t off = 0; off < a.w_row_bytes; off += 64)
            __builtin_prefetch(w_row + kPrefetchRows * a.w_row_bytes + off, 0, 2);
        switch (nt) {
          case 1:
            RowDot<1>(a.w_dtype, w_row, rows, a.k, sums);
            break;
          case 2:
            RowDot<2>(a.w_dtype, w_row, rows, a.k, sums);
            break;
          case 3:
            RowDot<3>(a.w_dtype, w_row, rows, a.k, sums);
            break;
          default:
            RowDot<kTokenGroup>(a.w_dtype, w_row, rows, a.k, sums);
            break;
        }
        for (int t = 0; t < nt; ++t) a.out[(t0 + t) * a.out_stride + n] = sums[t] * a.scale;
      }
    }
  }
}

}  // namespace hymt::cpu::HYMT_ISA
