// The matmul of packed block weights (backends/cpu/packed.h: q8_0, q4_k, q6_k in groups of 16 rows) for
// the avx2 and avxvnni builds: the layout matmul_packed.cc reads, taken as two halves of 8 rows (bytes 0-31 and
// 32-63 of each 64-byte stretch of 4 inputs x 16 rows; scales 0-7 and 8-15), one 256-bit register each.
//
// AVX2 has no vpdpbusd. Its int8 product, vpmaddubsw, multiplies unsigned by signed bytes and adds each
// adjacent pair into an int16 that saturates, so every operand pair is kept below 2^15:
//   q8_0: the packed codes are stored plus 128; flipping the top bit gives the signed code w. The
//     products are |w| (unsigned, at most 128) times x carrying w's sign (vpsignb; |x| <= 127, so the
//     negation is exact): each pair |w x + w' x'| <= 2 x 128 x 127 = 32,512, widened to int32 at once by
//     vpmaddwd with ones. The block's int32 sum starts at zero (w is signed; no offset to remove).
//   q4_k: codes 0..15 times x, a pair at most 2 x 15 x 127 = 3,810, so the 8 pair sums a lane gets over a
//     32-input sub-block (both nibbles of 4 packed bytes, 4 steps) add up in int16 (<= 30,480) before
//     vpmaddwd.
//   q6_k: codes 0..63 times x, a pair at most 16,002; two add in int16 (<= 32,004), so a 16-input
//     sub-block takes 2 vpmaddwd. Its int32 sum starts at -32 x (sum of x), the codes' offset (as in
//     matmul_packed.cc).
// Every integer sum is exact, and the f32 work per sub-block and block is the AVX-512 kernel's (the same
// multiplications in the same order), so both agree with the scalar oracle within the same bound.
// The avxvnni build (AVX2 plus AVX-VNNI, __AVXVNNI__) has the 256-bit vpdpbusd, and uses it as the AVX-512
// kernel does: the q8_0 codes plus 128 from c = -128 x (sum of x), int32 sums for q4_k and q6_k, and
// vpdpwssd for q4_k's mins.
// Registers: AVX2 has 16. A decode GEMV (one token) walks both halves of a group in one pass (each weight
// byte read once, from memory); more tokens walk one half at a time, in tiles of up to kTokenTile tokens,
// the second half and later tiles finding the group's weights in cache. As in the AVX-512 kernel, the first
// tile of a half can also store what it unpacked (the codes as bytes, the scales as floats) for the later
// tiles to read (ExpandMinTokens says where that pays).
#include "backends/cpu/kernels/kernels.h"

#if defined(HYMT_ISA_IS_avx2)
#include <utility>

#include "backends/cpu/kernels/packed_common.h"
#include "backends/cpu/packed.h"

namespace hymt::cpu::HYMT_ISA {
namespace {

constexpr int kTokenTile = 4;
constexpr int kHalfRows = 8;
static_assert(kPackRows == 2 * kHalfRows, "a 16-row group is two 256-bit halves");

inline __m256i Load256(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}
inline __m256 LoadF16x8(const uint8_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline __m256i Bcast32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}
// int16 pairs summed into int32 lanes.
inline __m256i PairSums(__m256i p16) {
  return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
}
#if defined(__AVXVNNI__)
// The avxvnni build (AVX2 plus AVX-VNNI): acc + the products of the unsigned bytes u with the 4 signed
// bytes at p broadcast to every lane, per 32-bit lane (vpdpbusd, exact in int32, as the AVX-512 kernel).
inline __m256i DotBcast(__m256i acc, __m256i u, const void* p) {
  return _mm256_dpbusd_avx_epi32(acc, u, Bcast32(p));
}
#endif

// acc[h][t] (8 rows of half h0 + h) += the group's blocks for tokens t < kT, halves h < kH.
template <int kT, int kH, bool kStream>
void Q8_0Half(const uint8_t* g, int h0, const Q8ActRow* x, int64_t nb, __m256 (*acc)[kT]) {
  constexpr size_t kBlock = 16 * 34;
  const __m256i top = _mm256_set1_epi8(static_cast<char>(0x80));
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = g + b * kBlock;
    PrefetchAhead<kStream>(blk, kBlock);
    __m256i isum[kH][kT];
#if defined(__AVXVNNI__)
    // The stored codes plus 128 against x, from c = -128 * sum(x) (as matmul_packed.cc's Q8_0Group).
    (void)top;
    for (int h = 0; h < kH; ++h)
      for (int t = 0; t < kT; ++t) isum[h][t] = _mm256_set1_epi32(x[t].c[b]);
    for (int s = 0; s < 8; ++s) {
      for (int h = 0; h < kH; ++h) {
        const __m256i u = Load256(blk + 32 + 64 * s + 32 * (h0 + h));
        for (int t = 0; t < kT; ++t) isum[h][t] = DotBcast(isum[h][t], u, x[t].blocks[b].qs + 4 * s);
      }
    }
#else
    for (int h = 0; h < kH; ++h)
      for (int t = 0; t < kT; ++t) isum[h][t] = _mm256_setzero_si256();
    for (int s = 0; s < 8; ++s) {
      for (int h = 0; h < kH; ++h) {
        const __m256i w = _mm256_xor_si256(Load256(blk + 32 + 64 * s + 32 * (h0 + h)), top);
        const __m256i mag = _mm256_abs_epi8(w);
        for (int t = 0; t < kT; ++t) {
          const __m256i xs = _mm256_sign_epi8(Bcast32(x[t].blocks[b].qs + 4 * s), w);
          isum[h][t] = _mm256_add_epi32(isum[h][t], PairSums(_mm256_maddubs_epi16(mag, xs)));
        }
      }
    }
#endif
    for (int h = 0; h < kH; ++h) {
      const __m256 dw = LoadF16x8(blk + 16 * (h0 + h));
      for (int t = 0; t < kT; ++t)
        acc[h][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[h][t]),
                                    _mm256_mul_ps(dw, _mm256_set1_ps(x[t].d[b])), acc[h][t]);
    }
  }
}

// A group's weights expanded for the token tiles after its first (as matmul_packed.cc's kQ4KExpBlock and
// kQ6KExpBlock, the same sizes, so packed.h's ExpandedGroupBytes sizes both), per super-block and half of
// 8 rows, 32-byte records: q4_k the 8 sub-blocks' f32 scales d x scale, the 4 min pairs (int16), dmin, then
// per 4-input step the low and the high nibbles as bytes (unshifted: vpmaddubsw's int16 pairs would saturate
// on 16 x code); q6_k per sub-block d x scale, then its 4 registers of 6-bit codes. Half h of super-block b
// starts at b x kQ4KExpBlock + h x kQ4KExpBlock / 2.
constexpr size_t kQ4KExpHalfHeader = 8 * 32 + 4 * 32 + 32;
constexpr size_t kQ4KExpBlock = 2 * (kQ4KExpHalfHeader + 32 * 2 * 32);
constexpr size_t kQ6KExpSub = 32 + 4 * 32;
constexpr size_t kQ6KExpBlock = 2 * 16 * kQ6KExpSub;
static_assert(kQ4KExpBlock == kExpandedQ4KBlockBytes && kQ6KExpBlock == kExpandedQ6KBlockBytes,
              "packed.h sizes the scratch (ExpandScratchBytes)");

inline void Store256(uint8_t* p, __m256i v) {
  _mm256_store_si256(reinterpret_cast<__m256i*>(p), v);
}
inline void Store256(uint8_t* p, __m256 v) {
  _mm256_store_ps(reinterpret_cast<float*>(p), v);
}
inline __m256i LoadA256(const uint8_t* p) {
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(p));
}

// One 4-input step s of q4_k sub-block j for tokens t < kT (one half): p16[t] += the low nibbles lo times
// inputs 8 s .. 8 s + 3 and the high nibbles hi times 8 s + 4 .. 8 s + 7 (int16 pairs, or with AVX-VNNI
// int32 sums).
template <int kT>
inline void Q4KStep(__m256i lo, __m256i hi, const Q8KActRow* x, int64_t b, int j, int s, __m256i* p16) {
  for (int t = 0; t < kT; ++t) {
    const int8_t* xs = x[t].blocks[b].qs + 32 * j + 8 * s;
#if defined(__AVXVNNI__)
    p16[t] = DotBcast(DotBcast(p16[t], lo, xs), hi, xs + 4);
#else
    p16[t] = _mm256_add_epi16(p16[t], _mm256_maddubs_epi16(lo, Bcast32(xs)));
    p16[t] = _mm256_add_epi16(p16[t], _mm256_maddubs_epi16(hi, Bcast32(xs + 4)));
#endif
  }
}
// The end of q4_k sub-block j (one half): f[t] += the sum p16[t] times fs = d x scale.
template <int kT>
inline void Q4KSubEnd(const __m256i* p16, __m256 fs, __m256* f) {
  for (int t = 0; t < kT; ++t) {
#if defined(__AVXVNNI__)
    const __m256i isum = p16[t];
#else
    const __m256i isum = PairSums(p16[t]);
#endif
    f[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), fs, f[t]);
  }
}
// The end of q4_k super-block b (one half): f[t] less the mins (dmin x sum_p m_pair[p] . the pair sums of
// x), times d_x, into acc[t].
template <int kT>
inline void Q4KFinish(const __m256i* m_pair, __m256 dmin, const Q8KActRow* x, int64_t b, __m256* f,
                      __m256* acc) {
  for (int t = 0; t < kT; ++t) {
    __m256i mins = _mm256_setzero_si256();
    for (int p = 0; p < 4; ++p)
#if defined(__AVXVNNI__)
      mins = _mm256_dpwssd_avx_epi32(mins, m_pair[p], Bcast32(x[t].bsum32 + 8 * b + 2 * p));
#else
      mins = _mm256_add_epi32(mins, _mm256_madd_epi16(m_pair[p], Bcast32(x[t].bsum32 + 8 * b + 2 * p)));
#endif
    f[t] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(mins), dmin, f[t]);
    acc[t] = _mm256_fmadd_ps(f[t], _mm256_set1_ps(x[t].blocks[b].d), acc[t]);
  }
}

// kStore (one half, kH = 1): also writes the half's expanded copy to e (the record of super-block 0's half
// h0; kQ4KExpBlock per super-block), for Q4KHalfExpanded.
template <int kT, int kH, bool kStream, bool kStore = false>
void Q4KHalf(const uint8_t* g, int h0, const Q8KActRow* x, int64_t nb, __m256 (*acc)[kT],
             uint8_t* e = nullptr) {
  static_assert(!kStore || kH == 1, "a copy is written one half at a time");
  constexpr size_t kBlock = 64 + 192 + 2048;
  const __m256i nibble = _mm256_set1_epi8(0x0f), low6 = _mm256_set1_epi8(0x3f),
                bits45 = _mm256_set1_epi8(0x30);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = g + b * kBlock;
    const uint8_t* q = blk + 64 + 192;
    uint8_t* eb = kStore ? e + b * kQ4KExpBlock : nullptr;
    // The scales; each sub-block asks for its quants (matmul_packed.cc).
    PrefetchAhead<kStream>(blk, 64 + 192);
    // The 6-bit scales (as matmul_packed.cc's Q4KGroup; the mins below): bytes j of sc03 / sc47 are
    // scale j / 4 + j.
    __m256i sc03[kH], sc47[kH];
    __m256 d[kH];
    for (int h = 0; h < kH; ++h) {
      const int off = 32 * (h0 + h);
      const __m256i w0 = Load256(blk + 64 + off), w2 = Load256(blk + 192 + off);
      sc03[h] = _mm256_and_si256(w0, low6);
      sc47[h] =
          _mm256_or_si256(_mm256_and_si256(w2, nibble), _mm256_and_si256(_mm256_srli_epi32(w0, 2), bits45));
      d[h] = LoadF16x8(blk + 16 * (h0 + h));
    }
    __m256 f[kH][kT];  // this super-block's sum over the sub-blocks, in units of d_x
    for (int h = 0; h < kH; ++h)
      for (int t = 0; t < kT; ++t) f[h][t] = _mm256_setzero_ps();
    for (int j = 0; j < 8; ++j) {
      PrefetchAhead<kStream>(q + 256 * j, 256);
      __m256i p16[kH][kT];  // int16 pairs, or with AVX-VNNI int32 sums
      for (int h = 0; h < kH; ++h)
        for (int t = 0; t < kT; ++t) p16[h][t] = _mm256_setzero_si256();
      for (int s = 0; s < 4; ++s) {
        for (int h = 0; h < kH; ++h) {
          const __m256i w = Load256(q + 64 * (4 * j + s) + 32 * (h0 + h));
          const __m256i lo = _mm256_and_si256(w, nibble),
                        hi = _mm256_and_si256(_mm256_srli_epi16(w, 4), nibble);
          if constexpr (kStore) {
            Store256(eb + kQ4KExpHalfHeader + 64 * (4 * j + s), lo);
            Store256(eb + kQ4KExpHalfHeader + 64 * (4 * j + s) + 32, hi);
          }
          Q4KStep<kT>(lo, hi, x, b, j, s, p16[h]);
        }
      }
      for (int h = 0; h < kH; ++h) {
        const __m256i sc =
            _mm256_shuffle_epi8(j < 4 ? sc03[h] : sc47[h], Load256(kScaleShuffles.byte[j % 4]));
        const __m256 fs = _mm256_mul_ps(d[h], _mm256_cvtepi32_ps(sc));
        if constexpr (kStore) Store256(eb + 32 * j, fs);
        Q4KSubEnd<kT>(p16[h], fs, f[h]);
      }
    }
    for (int h = 0; h < kH; ++h) {
      // The mins: bytes j of m03 / m47 are min j / 4 + j.
      const int off = 32 * (h0 + h);
      const __m256i w1 = Load256(blk + 128 + off), w2 = Load256(blk + 192 + off);
      const __m256i m03 = _mm256_and_si256(w1, low6);
      const __m256i m47 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(w2, 4), nibble),
                                          _mm256_and_si256(_mm256_srli_epi32(w1, 2), bits45));
      __m256i m_pair[4];
      for (int p = 0; p < 4; ++p)
        m_pair[p] = _mm256_shuffle_epi8(p < 2 ? m03 : m47, Load256(kScaleShuffles.pair[p % 2]));
      const __m256 dmin = LoadF16x8(blk + 32 + 16 * (h0 + h));
      if constexpr (kStore) {
        for (int p = 0; p < 4; ++p) Store256(eb + 256 + 32 * p, m_pair[p]);
        Store256(eb + 384, dmin);
      }
      Q4KFinish<kT>(m_pair, dmin, x, b, f[h], acc[h]);
    }
  }
}

// q4_k super-block b of an expanded half for tokens t < kT (the same sums in the same order as Q4KHalf).
template <int kT>
void Q4KHalfExpandedBlock(const uint8_t* eb, const Q8KActRow* x, int64_t b, __m256* acc) {
  __m256 f[kT];
  for (int t = 0; t < kT; ++t) f[t] = _mm256_setzero_ps();
  for (int j = 0; j < 8; ++j) {
    __m256i p16[kT];
    for (int t = 0; t < kT; ++t) p16[t] = _mm256_setzero_si256();
    // AVX2: a rolled loop. Unrolled, GCC loads all four steps' codes first and keeps some of the sums on the
    // stack (16 registers), and the copy read slower than unpacking (kernel lab, 64 tokens: 0.94-1.01x against
    // 1.10-1.19x rolled). With AVX-VNNI the unrolled loop is the faster (1.03-1.09x against 0.90-1.04x).
#if !defined(__AVXVNNI__)
#pragma GCC unroll 1
#endif
    for (int s = 0; s < 4; ++s) {
      const uint8_t* eq = eb + kQ4KExpHalfHeader + 64 * (4 * j + s);
      Q4KStep<kT>(LoadA256(eq), LoadA256(eq + 32), x, b, j, s, p16);
    }
    Q4KSubEnd<kT>(p16, _mm256_load_ps(reinterpret_cast<const float*>(eb + 32 * j)), f);
  }
  __m256i m_pair[4];
  for (int p = 0; p < 4; ++p) m_pair[p] = LoadA256(eb + 256 + 32 * p);
  Q4KFinish<kT>(m_pair, _mm256_load_ps(reinterpret_cast<const float*>(eb + 384)), x, b, f, acc);
}

// Q4KHalf<kT, 1> for a half that Q4KHalf<.., kStore> expanded to e: the same sums in the same order, so the
// same results bit for bit, without unpacking the nibbles and scales again.
template <int kT>
void Q4KHalfExpanded(const uint8_t* e, const Q8KActRow* x, int64_t nb, __m256* acc) {
  for (int64_t b = 0; b < nb; ++b) Q4KHalfExpandedBlock<kT>(e + b * kQ4KExpBlock, x, b, acc);
}

// The 6-bit codes of one packed q6_k sub-block's half h (8 rows x 16 inputs; packed.h) as four registers
// of 4 inputs x 8 rows.
inline void ExpandQ6KHalf(const uint8_t* q, int h, __m256i* u) {
  const __m256i nibble = _mm256_set1_epi8(0x0f), high2 = _mm256_set1_epi8(0x30);
  const __m256i l0 = Load256(q + 32 * h), l1 = Load256(q + 64 + 32 * h), hb = Load256(q + 128 + 32 * h);
  u[0] = _mm256_or_si256(_mm256_and_si256(l0, nibble), _mm256_and_si256(_mm256_slli_epi16(hb, 4), high2));
  u[1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), nibble),
                         _mm256_and_si256(_mm256_slli_epi16(hb, 2), high2));
  u[2] = _mm256_or_si256(_mm256_and_si256(l1, nibble), _mm256_and_si256(hb, high2));
  u[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), nibble),
                         _mm256_and_si256(_mm256_srli_epi16(hb, 2), high2));
}

// q6_k sub-block j of one half (its codes u, its scale fs = d x scale) for tokens t < kT, into f[t]. Each sum
// starts at -32 x (sum of the sub-block's x), which folds the codes' offset 32 into it.
template <int kT>
inline void Q6KSubBlock(const __m256i* u, __m256 fs, const Q8KActRow* x, int64_t b, int j, __m256* f) {
  for (int t = 0; t < kT; ++t) {
    const int8_t* xs = x[t].blocks[b].qs + 16 * j;
#if defined(__AVXVNNI__)
    __m256i isum = _mm256_set1_epi32(x[t].off16[16 * b + j]);
    for (int c = 0; c < 4; ++c) isum = DotBcast(isum, u[c], xs + 4 * c);
#else
    const __m256i p01 = _mm256_add_epi16(_mm256_maddubs_epi16(u[0], Bcast32(xs)),
                                         _mm256_maddubs_epi16(u[1], Bcast32(xs + 4)));
    const __m256i p23 = _mm256_add_epi16(_mm256_maddubs_epi16(u[2], Bcast32(xs + 8)),
                                         _mm256_maddubs_epi16(u[3], Bcast32(xs + 12)));
    const __m256i isum = _mm256_add_epi32(_mm256_set1_epi32(x[t].off16[16 * b + j]),
                                          _mm256_add_epi32(PairSums(p01), PairSums(p23)));
#endif
    f[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), fs, f[t]);
  }
}

// kStore (kH = 1): also writes the half's expanded copy to ex (as Q4KHalf), for Q6KHalfExpanded.
template <int kT, int kH, bool kStream, bool kStore = false>
void Q6KHalf(const uint8_t* g, int h0, const Q8KActRow* x, int64_t nb, __m256 (*acc)[kT],
             uint8_t* ex = nullptr) {
  static_assert(!kStore || kH == 1, "a copy is written one half at a time");
  constexpr size_t kBlock = 32 + 256 + 2048 + 1024;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = g + b * kBlock;
    PrefetchAhead<kStream>(blk, 32);  // d; each pair of sub-blocks asks for its own bytes below
    const uint8_t* pairs = blk + 32;  // per pair of sub-blocks (416 bytes): scales, then 2 x (ql, qh)
    __m256 f[kH][kT];
    for (int h = 0; h < kH; ++h)
      for (int t = 0; t < kT; ++t) f[h][t] = _mm256_setzero_ps();
    for (int p = 0; p < 8; ++p) {
      PrefetchAhead<kStream>(pairs + 416 * p, 416);
      for (int h = 0; h < kH; ++h) {
        // Scales of the half's 8 rows, both sub-blocks of the pair: an int16 pair per 32-bit lane.
        const __m256i sc_pair = _mm256_cvtepi8_epi16(
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(pairs + 416 * p + 16 * (h0 + h))));
        const __m256 d = LoadF16x8(blk + 16 * (h0 + h));
        for (int e = 0; e < 2; ++e) {
          const int j = 2 * p + e;  // inputs 16 j .. 16 j + 15
          const __m256i sc =
              e == 0 ? _mm256_srai_epi32(_mm256_slli_epi32(sc_pair, 16), 16) : _mm256_srai_epi32(sc_pair, 16);
          const __m256 fs = _mm256_mul_ps(d, _mm256_cvtepi32_ps(sc));
          __m256i u[4];
          ExpandQ6KHalf(pairs + 416 * p + 32 + 192 * e, h0 + h, u);
          if constexpr (kStore) {
            uint8_t* es = ex + b * kQ6KExpBlock + kQ6KExpSub * j;
            Store256(es, fs);
            for (int c = 0; c < 4; ++c) Store256(es + 32 * (c + 1), u[c]);
          }
          Q6KSubBlock<kT>(u, fs, x, b, j, f[h]);
        }
      }
    }
    for (int h = 0; h < kH; ++h)
      for (int t = 0; t < kT; ++t)
        acc[h][t] = _mm256_fmadd_ps(f[h][t], _mm256_set1_ps(x[t].blocks[b].d), acc[h][t]);
  }
}

// q6_k super-block b of an expanded half for tokens t < kT (the same sums in the same order as Q6KHalf).
template <int kT>
void Q6KHalfExpandedBlock(const uint8_t* eb, const Q8KActRow* x, int64_t b, __m256* acc) {
  __m256 f[kT];
  for (int t = 0; t < kT; ++t) f[t] = _mm256_setzero_ps();
  for (int j = 0; j < 16; ++j) {
    const uint8_t* es = eb + kQ6KExpSub * j;
    __m256i u[4];
    for (int c = 0; c < 4; ++c) u[c] = LoadA256(es + 32 * (c + 1));
    Q6KSubBlock<kT>(u, _mm256_load_ps(reinterpret_cast<const float*>(es)), x, b, j, f);
  }
  for (int t = 0; t < kT; ++t) acc[t] = _mm256_fmadd_ps(f[t], _mm256_set1_ps(x[t].blocks[b].d), acc[t]);
}
// Q6KHalf<kT, 1> for a half that Q6KHalf<.., kStore> expanded to e (the same results bit for bit).
template <int kT>
void Q6KHalfExpanded(const uint8_t* e, const Q8KActRow* x, int64_t nb, __m256* acc) {
  for (int64_t b = 0; b < nb; ++b) Q6KHalfExpandedBlock<kT>(e + b * kQ6KExpBlock, x, b, acc);
}

// Halves [h0, h0 + kH) of one group (rows n0 + 8 h0 ..) against tokens [t0, t0 + kT); `valid` rows of the
// group exist (the last group may be partial). kStream: the tile reads the group from memory (the first of
// the first half). e (q4_k and q6_k, kH = 1): where half h0's expanded copy goes (kStore: the half's first
// tile) or is (later tiles), or null.
template <int kT, int kH, bool kStream, bool kStore = false>
void HalfTile(const MatMulArgs& a, const uint8_t* g, int h0, const uint8_t* xq, size_t xq_row_bytes,
              int64_t t0, int64_t n0, int64_t valid, uint8_t* e) {
  __m256 acc[kH][kT];
  for (int h = 0; h < kH; ++h)
    for (int t = 0; t < kT; ++t) acc[h][t] = _mm256_setzero_ps();
  if (a.w_dtype == DType::kQ8_0) {
    Q8ActRow x[kT];
    for (int t = 0; t < kT; ++t) x[t] = ViewQ8ActRow(xq + (t0 + t) * xq_row_bytes, a.k);
    Q8_0Half<kT, kH, kStream>(g, h0, x, a.k / 32, acc);
  } else {
    Q8KActRow x[kT];
    for (int t = 0; t < kT; ++t) x[t] = ViewQ8KActRow(xq + (t0 + t) * xq_row_bytes, a.k);
    const int64_t nb = a.k / 256;
    // Unpack the packed half; or, with a copy: the first tile unpacks and stores it, later tiles read it.
    const auto run = [&](auto unpack, auto unpack_and_store, auto read_copy) {
      if constexpr (kH == 1) {
        if (e == nullptr) {
          unpack(g, h0, x, nb, acc, nullptr);
        } else if constexpr (kStore) {
          unpack_and_store(g, h0, x, nb, acc, e);
        } else {
          read_copy(e, x, nb, acc[0]);
        }
      } else {
        unpack(g, h0, x, nb, acc, nullptr);
      }
    };
    if (a.w_dtype == DType::kQ4_K) {
      run(Q4KHalf<kT, kH, kStream>, Q4KHalf<kT, 1, kStream, true>, Q4KHalfExpanded<kT>);
    } else {
      run(Q6KHalf<kT, kH, kStream>, Q6KHalf<kT, 1, kStream, true>, Q6KHalfExpanded<kT>);
    }
  }
  const __m256 scale = _mm256_set1_ps(a.scale);
  for (int h = 0; h < kH; ++h) {
    const int64_t r0 = kHalfRows * (h0 + h), rows = Min<int64_t>(kHalfRows, valid - r0);
    for (int t = 0; t < kT; ++t) {
      float* out = a.out + (t0 + t) * a.out_stride + n0 + r0;
      const __m256 v = _mm256_mul_ps(acc[h][t], scale);
      if (rows == kHalfRows) {
        _mm256_storeu_ps(out, v);
      } else {
        alignas(32) float tmp[kHalfRows];
        _mm256_store_ps(tmp, v);
        for (int64_t r = 0; r < rows; ++r) out[r] = tmp[r];
      }
    }
  }
}

using HalfTileFn = void (*)(const MatMulArgs&, const uint8_t*, int, const uint8_t*, size_t, int64_t, int64_t,
                            int64_t, uint8_t*);
// HalfTile of one half for 1..kTokenTile tokens: the first tile of the first half (stream), the first tile
// of the second (store: it writes the half's copy, when there is one), or a later tile. A plain array, not
// std::array (see simd.h).
template <int... kTs>
HalfTileFn PickHalfTile(int tile, bool stream, bool store, std::integer_sequence<int, kTs...>) {
  static constexpr HalfTileFn kTiles[] = {&HalfTile<kTs + 1, 1, false>...};
  static constexpr HalfTileFn kStreamTiles[] = {&HalfTile<kTs + 1, 1, true, true>...};
  static constexpr HalfTileFn kStoreTiles[] = {&HalfTile<kTs + 1, 1, false, true>...};
  return (stream ? kStreamTiles : store ? kStoreTiles : kTiles)[tile - 1];
}

// Expanded halves pay for the first tile's stores when enough later tiles read them. The kernel lab's on/off
// A/B on an Intel Xeon (`build/bench/kernels --isa avx2|avxvnni --ab-expand 16 --types q4_k,q6_k --tokens T`,
// the medians of the paired ratios at the 7B and 1.8B shapes; docs/BENCHMARKS.md, "Expanded row groups"):
//   q6_k, AVX2: 1.06-1.10x at 5 tokens, 1.09-1.14x at 8, 1.17-1.20x at 9, 1.31-1.36x at 64;
//   q6_k, AVX-VNNI: 0.94-1.04x at 5 and 8, 1.08-1.11x at 9, 1.21-1.28x at 64;
//   q4_k, AVX-VNNI: 0.95-1.01x at 9, 0.99-1.04x at 17, 1.03-1.09x at 64;
//   q4_k, AVX2: 0.90-0.99x at 17, 1.04-1.08x at 33, 1.07-1.13x at 48, 1.10-1.19x at 64.
int64_t ExpandMinTokens(DType t) {
#if defined(__AVXVNNI__)
  return t == DType::kQ6_K ? 2 * kTokenTile : 4 * kTokenTile;
#else
  return t == DType::kQ6_K ? kTokenTile : 8 * kTokenTile;
#endif
}

}  // namespace

void MatMulPacked(const MatMulArgs& a, const void* xq, size_t xq_row_bytes, int64_t n_begin, int64_t n_end) {
  const size_t group_bytes = PackedGroupBytes(a.w_dtype, a.k);
  const auto* x = static_cast<const uint8_t*>(xq);
  if (a.n_tokens == 1) {  // decode: both halves in one pass over the group, which comes from memory
    for (int64_t n0 = n_begin; n0 < n_end; n0 += kPackRows) {
      const uint8_t* g = a.w + static_cast<size_t>(n0 / kPackRows) * group_bytes;
      HalfTile<1, 2, true>(a, g, 0, x, xq_row_bytes, 0, n0, Min<int64_t>(kPackRows, n_end - n0), nullptr);
    }
    return;
  }
  // Several token tiles: each half's first expands its q4_k / q6_k groups for the others (ExpandedGroupBytes;
  // a group's copy holds both halves).
  const size_t exp_bytes = a.n_tokens > ExpandMinTokens(a.w_dtype) && ExpandPackedGroups()
                               ? ExpandedGroupBytes(a.w_dtype, a.k)
                               : 0;
  uint8_t* exp = exp_bytes > 0 ? ExpandScratch(ExpandScratchBytes(a.w_dtype, a.k)) : nullptr;
  // A half's record of each super-block (the group's copy is exp_bytes: a.k / 256 records of two halves).
  const size_t half_bytes = exp_bytes > 0 ? exp_bytes / static_cast<size_t>(a.k / 256) / 2 : 0;
  const int64_t block_rows = PackedBlockGroups(a, group_bytes, kTokenTile) * kPackRows;
  for (int64_t b0 = n_begin; b0 < n_end; b0 += block_rows) {
    const int64_t b1 = Min(b0 + block_rows, n_end);
    for (int h = 0; h < 2; ++h) {
      for (int64_t t0 = 0; t0 < a.n_tokens; t0 += kTokenTile) {
        const int tile = static_cast<int>(Min<int64_t>(kTokenTile, a.n_tokens - t0));
        const auto fn = PickHalfTile(tile, h == 0 && t0 == 0, t0 == 0 && exp != nullptr,
                                     std::make_integer_sequence<int, kTokenTile>{});
        for (int64_t n0 = b0; n0 < b1; n0 += kPackRows) {
          const int64_t valid = Min<int64_t>(kPackRows, n_end - n0);
          uint8_t* e = exp != nullptr
                           ? exp + static_cast<size_t>((n0 - b0) / kPackRows) * exp_bytes + h * half_bytes
                           : nullptr;
          if (kHalfRows * h < valid)
            fn(a, a.w + static_cast<size_t>(n0 / kPackRows) * group_bytes, h, x, xq_row_bytes, t0, n0, valid,
               e);
        }
      }
    }
  }
}

}  // namespace hymt::cpu::HYMT_ISA
#endif
