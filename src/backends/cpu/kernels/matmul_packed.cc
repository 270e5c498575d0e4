// The matmul of packed block weights (backends/cpu/packed.h: q8_0, q4_k, q6_k in groups of 16 rows)
// with int8 activations (Q8ActRow / Q8KActRow), for decode and prefill alike. AVX-512 VNNI; AVX2
// has its own (matmul_packed_avx2.cc), and the generic kernels keep the stored layout (matmul_quant.cc),
// whose generic build is the scalar oracle.
//
// One 512-bit register holds 4 consecutive inputs of 16 rows (a row per 32-bit lane); vpdpbusd with 4
// activation bytes broadcast to every lane adds those 4 products into each row's int32 sum. Per block:
//   q8_0: weights are stored plus 128 (unsigned); the int32 sum starts at c = -128 * sum(x) (from the
//     activation row), so it ends exact; then one f32 multiply-add by d_w * d_x.
//   q4_k: per 32-input sub-block an int32 sum (8 vpdpbusd over both nibbles as 16 x code: the high ones
//     in place, the low ones shifted up), converted to f32 and multiplied by d / 16 * scale (one vector
//     per sub-block, shared by the tokens); the mins are sum_j m_j * (sum of the sub-block's x), by vpdpwssd
//     over pairs of sub-blocks (int32, < 2^21), times dmin; then one multiply-add by d_x per 256 inputs.
//   q6_k: per 16-input sub-block an int32 sum (4 vpdpbusd over the 6-bit codes) that starts at
//     -32 x (sum of the sub-block's x), so the codes' offset 32 is folded in; times d * scale in f32; one
//     multiply-add by d_x per 256.
// Integer sums are exact (|q4_k sub-block sum| <= 16 * 32 * 15 * 127, q6_k 16 * 63 * 127 + 32 * 16 * 127);
// the f32 work is a few roundings per sub-block, within the bound the tests derive for the integer paths.
// Several tokens (up to kTokenTile) share each expanded weight register; with more tokens the group's weights
// (16 rows, at most a few hundred KiB) are walked again per tile from cache. For q4_k and q6_k the first tile
// also stores what it expanded (kQ4KExpBlock / kQ6KExpBlock below: codes as bytes, scales as floats), and the
// later tiles read that copy instead of unpacking again: in the kernel lab the 64-token GEMMs ran 1.06-1.13x
// (q4_k) and 1.17-1.23x (q6_k) as fast on an Intel Xeon (docs/BENCHMARKS.md, "Expanded row groups"). q6_k's
// pair kernel (Q6KGroup2, the default where PairQ6KRowGroups, i.e. off Intel) stores and reads the same
// copies, one per group: forced on the Intel Xeon, 1.35-1.43x at 64 tokens.
// What bounds the prefill: on Zen 4, f32 multiplies and FMAs (like vpmulld, vpmaddwd and vpdpwssd) issue
// on the same two pipes as vpdpbusd, one 512-bit instruction a cycle between them, while integer logic,
// shifts, shuffles, conversions and loads issue beside them. Per token the f32 work is 2 slots per 8
// vpdpbusd for q8_0 (multiply the scales, multiply-add), ~15 per 64 for q4_k and ~19 per 64 for q6_k
// (one multiply-add per sub-block, the mins, the final scale), so the kernel can reach at most 80%,
// ~81% and ~77% of the vpdpbusd peak there; the rest of the instruction stream must stay off those pipes.
// Software prefetch (simd.h, kPrefetchAhead): the first token tile of each group, the one that reads the
// weights from memory, asks for the lines ahead of the bytes it is about to read; later tiles find the group
// in cache. q4_k and q6_k ask a sub-block (or pair) at a time, 4-7 lines between products, not a whole
// 36-53-line block at its start: on an Intel Xeon host the burst stalled the loop (cpu-clock samples piled
// on the instruction after the prefetches, 39% of a q6_k decode's), and spread out the decode sweep read
// 89-93% of the read probe instead of 84-89% (q4_k) and 85-89% instead of 74-82% (q6_k).
// q8_0's blocks are 9 lines a group, already spread.
#include "backends/cpu/kernels/kernels.h"

#if defined(HYMT_ISA_IS_avx512)
#include <utility>

#include "backends/cpu/kernels/packed_common.h"
#include "backends/cpu/packed.h"

namespace hymt::cpu::HYMT_ISA {
namespace {

constexpr int kTokenTile = 8;
static_assert(kPackRows == 16, "one 32-bit lane of a 512-bit register per row");

inline __m512i Bcast32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}
// acc + the products of w (unsigned) with the 4 signed bytes at p broadcast to every lane. Written as
// vpdpbusd with an embedded broadcast operand: the compiler otherwise issues a separate vpbroadcastd.
inline __m512i DpbusdBcast(__m512i acc, __m512i w, const void* p) {
  asm("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*static_cast<const int32_t*>(p)));
  return acc;
}
inline __m512 LoadF16x16(const uint8_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
inline __m512i Load512(const uint8_t* p) {
  return _mm512_loadu_si512(p);
}
inline __m512i Load256AsU16(const uint8_t* p) {
  return _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
inline __m512i Load256AsI16(const uint8_t* p) {
  return _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// acc[t] (16 rows) += sum over the group's blocks for tokens t < kT. `g` is the packed group.
template <int kT, bool kStream>
void Q8_0Group(const uint8_t* g, const Q8ActRow* x, int64_t nb, __m512* acc) {
  constexpr size_t kBlock = 16 * 34;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = g + b * kBlock;
    PrefetchAhead<kStream>(blk, kBlock);
    const __m512 dw = LoadF16x16(blk);
    __m512i isum[kT];
    for (int t = 0; t < kT; ++t) isum[t] = _mm512_set1_epi32(x[t].c[b]);
    for (int s = 0; s < 8; ++s) {
      const __m512i w = Load512(blk + 32 + 64 * s);
      for (int t = 0; t < kT; ++t) isum[t] = DpbusdBcast(isum[t], w, x[t].blocks[b].qs + 4 * s);
    }
    for (int t = 0; t < kT; ++t)
      acc[t] =
          _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), _mm512_mul_ps(dw, _mm512_set1_ps(x[t].d[b])), acc[t]);
  }
}

// Two groups (32 rows) at once for tokens t < kT: each activation broadcast feeds two vpdpbusd, so a
// block takes 2 weight loads + kT broadcasts per 2 kT vpdpbusd instead of 1 + kT per kT. On a Zen 5
// host (two 512-bit vpdpbusd a cycle) the 64-token GEMM at the 7B shapes went from 45-52% to 57-70%
// of the vpdpbusd peak with 6-token tiles (7 and 8 were slower: the sums no longer fit the registers).
// q6_k pairs the same way (Q6KGroup2: about 40% -> 45-52%); for q4_k it measured no faster, so q4_k
// keeps one group per pass. On an Intel Xeon (every 512-bit op on the two vpdpbusd ports) q6_k's single
// groups with 8-token tiles read faster in the kernel lab, so q6_k pairs only where PairQ6KRowGroups says.
template <int kT, bool kStream>
void Q8_0Group2(const uint8_t* g0, const uint8_t* g1, const Q8ActRow* x, int64_t nb, __m512* acc0,
                __m512* acc1) {
  constexpr size_t kBlock = 16 * 34;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* b0 = g0 + b * kBlock;
    const uint8_t* b1 = g1 + b * kBlock;
    PrefetchAhead<kStream>(b0, kBlock);
    PrefetchAhead<kStream>(b1, kBlock);
    __m512i s0[kT], s1[kT];
    for (int t = 0; t < kT; ++t) s0[t] = s1[t] = _mm512_set1_epi32(x[t].c[b]);
    for (int s = 0; s < 8; ++s) {
      const __m512i w0 = Load512(b0 + 32 + 64 * s), w1 = Load512(b1 + 32 + 64 * s);
      for (int t = 0; t < kT; ++t) {
        const __m512i xb = Bcast32(x[t].blocks[b].qs + 4 * s);
        s0[t] = _mm512_dpbusd_epi32(s0[t], w0, xb);
        s1[t] = _mm512_dpbusd_epi32(s1[t], w1, xb);
      }
    }
    const __m512 dw0 = LoadF16x16(b0), dw1 = LoadF16x16(b1);
    for (int t = 0; t < kT; ++t) {
      const __m512 dx = _mm512_set1_ps(x[t].d[b]);
      acc0[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s0[t]), _mm512_mul_ps(dw0, dx), acc0[t]);
      acc1[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s1[t]), _mm512_mul_ps(dw1, dx), acc1[t]);
    }
  }
}

// kG groups (16 kG rows) of a q8_0 weight at one token row (decode), each activation broadcast feeding
// kG vpdpbusd; decode takes kDecodeGroups. On a Zen 5 host the one-group loop (Q8_0Group<1>) read about a
// third less per second from memory than the q4_k and q6_k loops (`build/bench/kernels --sweep`,
// docs/BENCHMARKS.md "Paired ceilings"); in a standalone loop of its shape the activation broadcasts were
// what held it back, and four groups sharing each broadcast read as fast as the read probe (two gained
// less; three and six measured alike in the kernel lab, within its noise). Each group's sums are
// Q8_0Group<1>'s in the same order, so the results are identical.
constexpr int kDecodeGroups = 4;
template <int kG>
void Q8_0GroupN(const uint8_t* g, size_t group_bytes, const Q8ActRow& x, int64_t nb, __m512* acc) {
  constexpr size_t kBlock = 16 * 34;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk[kG];
    __m512i sum[kG];
    for (int i = 0; i < kG; ++i) {
      blk[i] = g + i * group_bytes + b * kBlock;
      PrefetchAhead<true>(blk[i], kBlock);
      sum[i] = _mm512_set1_epi32(x.c[b]);
    }
    for (int s = 0; s < 8; ++s) {
      const __m512i xb = Bcast32(x.blocks[b].qs + 4 * s);
      for (int i = 0; i < kG; ++i) sum[i] = _mm512_dpbusd_epi32(sum[i], Load512(blk[i] + 32 + 64 * s), xb);
    }
    const __m512 dx = _mm512_set1_ps(x.d[b]);
    for (int i = 0; i < kG; ++i)
      acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[i]), _mm512_mul_ps(LoadF16x16(blk[i]), dx), acc[i]);
  }
}

// A group's weights expanded for the token tiles after its first: per super-block
// what every tile would otherwise rebuild from the packed bytes with 512-bit ops, which on an Intel Xeon
// share the two vpdpbusd ports (the file comment). q4_k: the 8 sub-blocks' f32 scales d / 16 x
// scale, the 4 min pairs (int16), dmin, then per sub-block 4 x (low nibbles x 16, high nibbles in place);
// q6_k: per sub-block d x scale, then its 4 registers of 6-bit codes. 64-byte aligned records.
constexpr size_t kQ4KExpHeader = 8 * 64 + 4 * 64 + 64;
constexpr size_t kQ4KExpBlock = kQ4KExpHeader + 8 * 4 * 2 * 64;
constexpr size_t kQ6KExpSub = 64 + 4 * 64;
constexpr size_t kQ6KExpBlock = 16 * kQ6KExpSub;
static_assert(kQ4KExpBlock == kExpandedQ4KBlockBytes && kQ6KExpBlock == kExpandedQ6KBlockBytes,
              "packed.h sizes the scratch (ExpandScratchBytes)");

inline void Store512(uint8_t* p, __m512i v) {
  _mm512_store_si512(p, v);
}
inline void Store512(uint8_t* p, __m512 v) {
  _mm512_store_ps(p, v);
}

// One 4-input step s of q4_k sub-block j for tokens t < kT: isum[t] += the low nibbles (x 16) times inputs
// 8 s .. 8 s + 3 and the high nibbles (in place) times 8 s + 4 .. 8 s + 7.
template <int kT>
inline void Q4KStep(__m512i lo16, __m512i hi16, const Q8KActRow* x, int64_t b, int j, int s, __m512i* isum) {
  for (int t = 0; t < kT; ++t) {
    const int8_t* xs = x[t].blocks[b].qs + 32 * j + 8 * s;
    isum[t] = DpbusdBcast(isum[t], lo16, xs);
    isum[t] = DpbusdBcast(isum[t], hi16, xs + 4);
  }
}
// The end of q4_k super-block b for tokens t < kT: f[t] less the mins (dmin x sum_p m_pair[p] . the pair
// sums of x), times d_x, into acc[t].
template <int kT>
inline void Q4KFinish(const __m512i* m_pair, __m512 dmin, const Q8KActRow* x, int64_t b, __m512* f,
                      __m512* acc) {
  for (int t = 0; t < kT; ++t) {
    __m512i mins = _mm512_setzero_si512();
    for (int p = 0; p < 4; ++p)
      mins = _mm512_dpwssd_epi32(mins, m_pair[p], Bcast32(x[t].bsum32 + 8 * b + 2 * p));
    f[t] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(mins), dmin, f[t]);
    acc[t] = _mm512_fmadd_ps(f[t], _mm512_set1_ps(x[t].blocks[b].d), acc[t]);
  }
}

// kStore: also writes the expanded group to e (kQ4KExpBlock per super-block), for Q4KGroupExpanded.
template <int kT, bool kStream, bool kStore = false>
void Q4KGroup(const uint8_t* g, const Q8KActRow* x, int64_t nb, __m512* acc, uint8_t* e = nullptr) {
  constexpr size_t kBlock = 64 + 192 + 2048;
  const __m512i nibble = _mm512_set1_epi8(0x0f), low6 = _mm512_set1_epi8(0x3f),
                bits45 = _mm512_set1_epi8(0x30);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = g + b * kBlock;
    const uint8_t* q = blk + 64 + 192;
    PrefetchAhead<kStream>(blk, 64 + 192);  // the scales; each sub-block asks for its own quants below
    // The 6-bit scales and mins of the 16 rows, from the stored 12 bytes (words w0 w1 w2) per row
    // (blocks.h, GetKScaleMin): bytes j of sc03 / sc47 / m03 / m47 are scale j / 4 + j, min j / 4 + j.
    const __m512i w0 = Load512(blk + 64), w1 = Load512(blk + 128), w2 = Load512(blk + 192);
    const __m512i sc03 = _mm512_and_si512(w0, low6), m03 = _mm512_and_si512(w1, low6);
    const __m512i sc47 =
        _mm512_ternarylogic_epi32(w2, nibble, _mm512_and_si512(_mm512_srli_epi32(w0, 2), bits45), 0xea);
    const __m512i m47 = _mm512_ternarylogic_epi32(_mm512_srli_epi32(w2, 4), nibble,
                                                  _mm512_and_si512(_mm512_srli_epi32(w1, 2), bits45), 0xea);
    // Both nibbles are used as 16 x code (the low ones shifted up, the high ones in place; |sum| <= 16 * 15
    // * 127 * 32 fits int32 and converts exactly), so one sum per sub-block takes all 8 vpdpbusd; the
    // scale carries the 1/16 (exact).
    const __m512 d16 = _mm512_mul_ps(LoadF16x16(blk), _mm512_set1_ps(1.0f / 16));
    __m512 f[kT];  // this super-block's sum over the sub-blocks, in units of d_x
    for (int t = 0; t < kT; ++t) f[t] = _mm512_setzero_ps();
    for (int j = 0; j < 8; ++j) {
      PrefetchAhead<kStream>(q + 256 * j, 256);
      const __m512i sc = _mm512_shuffle_epi8(j < 4 ? sc03 : sc47, Load512(kScaleShuffles.byte[j % 4]));
      const __m512 fs = _mm512_mul_ps(d16, _mm512_cvtepi32_ps(sc));
      if constexpr (kStore) Store512(e + b * kQ4KExpBlock + 64 * j, fs);
      __m512i isum[kT];
      for (int t = 0; t < kT; ++t) isum[t] = _mm512_setzero_si512();
      if constexpr (kT == 1 && !kStore) {
        // One token: the low nibbles go unshifted into a second sum, joined as 16 x low + high at the
        // end (the same integer), which saves a shift a weight register where nothing amortises it.
        __m512i lo_sum = _mm512_setzero_si512();
        for (int s = 0; s < 4; ++s) {
          const __m512i w = Load512(q + 64 * (4 * j + s));
          const int8_t* xs = x[0].blocks[b].qs + 32 * j + 8 * s;
          lo_sum = DpbusdBcast(lo_sum, _mm512_and_si512(w, nibble), xs);
          isum[0] = DpbusdBcast(isum[0], _mm512_andnot_si512(nibble, w), xs + 4);
        }
        isum[0] = _mm512_add_epi32(isum[0], _mm512_slli_epi32(lo_sum, 4));
      } else {
        for (int s = 0; s < 4; ++s) {
          const __m512i w = Load512(q + 64 * (4 * j + s));
          const __m512i lo16 = _mm512_andnot_si512(nibble, _mm512_slli_epi16(w, 4)),
                        hi16 = _mm512_andnot_si512(nibble, w);
          if constexpr (kStore) {
            uint8_t* eq = e + b * kQ4KExpBlock + kQ4KExpHeader + 128 * (4 * j + s);
            Store512(eq, lo16);
            Store512(eq + 64, hi16);
          }
          Q4KStep<kT>(lo16, hi16, x, b, j, s, isum);
        }
      }
      for (int t = 0; t < kT; ++t) f[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), fs, f[t]);
    }
    __m512i m_pair[4];
    for (int p = 0; p < 4; ++p)
      m_pair[p] = _mm512_shuffle_epi8(p < 2 ? m03 : m47, Load512(kScaleShuffles.pair[p % 2]));
    const __m512 dmin = LoadF16x16(blk + 32);
    if constexpr (kStore) {
      for (int p = 0; p < 4; ++p) Store512(e + b * kQ4KExpBlock + 512 + 64 * p, m_pair[p]);
      Store512(e + b * kQ4KExpBlock + 768, dmin);
    }
    Q4KFinish<kT>(m_pair, dmin, x, b, f, acc);
  }
}

// Q4KGroup<kT> for a group that Q4KGroup<.., kStore> expanded to e: the same sums in the same order, so the
// same results bit for bit, without the per-tile unpacking of the nibbles and scales.
template <int kT>
void Q4KGroupExpanded(const uint8_t* e, const Q8KActRow* x, int64_t nb, __m512* acc) {
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* eb = e + b * kQ4KExpBlock;
    __m512 f[kT];
    for (int t = 0; t < kT; ++t) f[t] = _mm512_setzero_ps();
    for (int j = 0; j < 8; ++j) {
      const __m512 fs = _mm512_load_ps(eb + 64 * j);
      __m512i isum[kT];
      for (int t = 0; t < kT; ++t) isum[t] = _mm512_setzero_si512();
      for (int s = 0; s < 4; ++s) {
        const uint8_t* eq = eb + kQ4KExpHeader + 128 * (4 * j + s);
        Q4KStep<kT>(_mm512_load_si512(eq), _mm512_load_si512(eq + 64), x, b, j, s, isum);
      }
      for (int t = 0; t < kT; ++t) f[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), fs, f[t]);
    }
    __m512i m_pair[4];
    for (int p = 0; p < 4; ++p) m_pair[p] = _mm512_load_si512(eb + 512 + 64 * p);
    Q4KFinish<kT>(m_pair, _mm512_load_ps(eb + 768), x, b, f, acc);
  }
}

// The 6-bit codes of one packed q6_k sub-block (16 rows x 16 inputs at q: ql[2][16][4], qh[16][4]) as
// four registers of 4 inputs x 16 rows (packed.h).
inline void ExpandQ6KSubBlock(const uint8_t* q, __m512i* u) {
  const __m512i nibble = _mm512_set1_epi8(0x0f), high2 = _mm512_set1_epi8(0x30);
  const __m512i l0 = Load512(q), l1 = Load512(q + 64), h = Load512(q + 128);
  u[0] = _mm512_ternarylogic_epi32(l0, nibble, _mm512_and_si512(_mm512_slli_epi16(h, 4), high2), 0xea);
  u[1] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(l0, 4), nibble,
                                   _mm512_and_si512(_mm512_slli_epi16(h, 2), high2), 0xea);
  u[2] = _mm512_ternarylogic_epi32(l1, nibble, _mm512_and_si512(h, high2), 0xea);
  u[3] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(l1, 4), nibble,
                                   _mm512_and_si512(_mm512_srli_epi16(h, 2), high2), 0xea);
}
// d x the scale of sub-block e (0 or 1) of a pair, from the pair's scales widened to int16 (sc_pair).
inline __m512 Q6KSubScale(__m512 d, __m512i sc_pair, int e) {
  const __m512i sc =
      e == 0 ? _mm512_srai_epi32(_mm512_slli_epi32(sc_pair, 16), 16) : _mm512_srai_epi32(sc_pair, 16);
  return _mm512_mul_ps(d, _mm512_cvtepi32_ps(sc));
}

// q6_k sub-block j (its codes u, its scale fs = d x scale) for tokens t < kT, into f[t]. Each sum starts at
// -32 x (sum of the sub-block's x), which folds the codes' offset 32 into it.
template <int kT>
inline void Q6KSubBlock(const __m512i* u, __m512 fs, const Q8KActRow* x, int64_t b, int j, __m512* f) {
  for (int t = 0; t < kT; ++t) {
    const int8_t* xs = x[t].blocks[b].qs + 16 * j;
    __m512i isum = _mm512_set1_epi32(x[t].off16[16 * b + j]);
    for (int c = 0; c < 4; ++c) isum = DpbusdBcast(isum, u[c], xs + 4 * c);
    f[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), fs, f[t]);
  }
}

// kStore: also writes the expanded group to ex (kQ6KExpBlock per super-block), for Q6KGroupExpanded.
template <int kT, bool kStream, bool kStore = false>
void Q6KGroup(const uint8_t* g, const Q8KActRow* x, int64_t nb, __m512* acc, uint8_t* ex = nullptr) {
  constexpr size_t kBlock = 32 + 256 + 2048 + 1024;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = g + b * kBlock;
    PrefetchAhead<kStream>(blk, 32);  // d; each pair of sub-blocks asks for its own bytes below
    const uint8_t* pairs = blk + 32;  // per pair of sub-blocks (416 bytes): scales, then 2 x (ql, qh)
    const __m512 d = LoadF16x16(blk);
    __m512 f[kT];  // this super-block's sum over the sub-blocks, in units of d_x
    for (int t = 0; t < kT; ++t) f[t] = _mm512_setzero_ps();
    for (int p = 0; p < 8; ++p) {
      PrefetchAhead<kStream>(pairs + 416 * p, 416);
      const __m512i sc_pair = Load256AsI16(pairs + 416 * p);
      const __m512 fs[2] = {Q6KSubScale(d, sc_pair, 0), Q6KSubScale(d, sc_pair, 1)};
      for (int e = 0; e < 2; ++e) {
        const int j = 2 * p + e;  // inputs 16 j .. 16 j + 15
        __m512i u[4];
        ExpandQ6KSubBlock(pairs + 416 * p + 32 + 192 * e, u);
        if constexpr (kStore) {
          uint8_t* es = ex + b * kQ6KExpBlock + kQ6KExpSub * j;
          Store512(es, fs[e]);
          for (int c = 0; c < 4; ++c) Store512(es + 64 * (c + 1), u[c]);
        }
        Q6KSubBlock<kT>(u, fs[e], x, b, j, f);
      }
    }
    for (int t = 0; t < kT; ++t) acc[t] = _mm512_fmadd_ps(f[t], _mm512_set1_ps(x[t].blocks[b].d), acc[t]);
  }
}

// Q6KGroup<kT> for a group that Q6KGroup<.., kStore> expanded to e (the same results bit for bit).
template <int kT>
void Q6KGroupExpanded(const uint8_t* e, const Q8KActRow* x, int64_t nb, __m512* acc) {
  for (int64_t b = 0; b < nb; ++b) {
    __m512 f[kT];
    for (int t = 0; t < kT; ++t) f[t] = _mm512_setzero_ps();
    for (int j = 0; j < 16; ++j) {
      const uint8_t* es = e + b * kQ6KExpBlock + kQ6KExpSub * j;
      __m512i u[4];
      for (int c = 0; c < 4; ++c) u[c] = _mm512_load_si512(es + 64 * (c + 1));
      Q6KSubBlock<kT>(u, _mm512_load_ps(es), x, b, j, f);
    }
    for (int t = 0; t < kT; ++t) acc[t] = _mm512_fmadd_ps(f[t], _mm512_set1_ps(x[t].blocks[b].d), acc[t]);
  }
}

// A q6_k sub-block j of two groups (codes u0, u1; scales fs0, fs1) for tokens t < kT, into f0[t] and f1[t],
// each activation broadcast feeding both groups' vpdpbusd; each sum as Q6KSubBlock's.
template <int kT>
inline void Q6KSubBlock2(const __m512i* u0, const __m512i* u1, __m512 fs0, __m512 fs1, const Q8KActRow* x,
                         int64_t b, int j, __m512* f0, __m512* f1) {
  for (int t = 0; t < kT; ++t) {
    const int8_t* xs = x[t].blocks[b].qs + 16 * j;
    __m512i i0 = _mm512_set1_epi32(x[t].off16[16 * b + j]), i1 = i0;
    for (int c = 0; c < 4; ++c) {
      const __m512i xb = Bcast32(xs + 4 * c);
      i0 = _mm512_dpbusd_epi32(i0, u0[c], xb);
      i1 = _mm512_dpbusd_epi32(i1, u1[c], xb);
    }
    f0[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i0), fs0, f0[t]);
    f1[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i1), fs1, f1[t]);
  }
}

// The end of q6_k super-block b for two groups: their sums f0[t], f1[t] times d_x, into acc0[t], acc1[t].
template <int kT>
inline void Q6KFinish2(const __m512* f0, const __m512* f1, const Q8KActRow* x, int64_t b, __m512* acc0,
                       __m512* acc1) {
  for (int t = 0; t < kT; ++t) {
    const __m512 dx = _mm512_set1_ps(x[t].blocks[b].d);
    acc0[t] = _mm512_fmadd_ps(f0[t], dx, acc0[t]);
    acc1[t] = _mm512_fmadd_ps(f1[t], dx, acc1[t]);
  }
}

// Q6KGroup for two groups (32 rows) at once, sharing each activation broadcast (as Q8_0Group2). kStore: also
// writes each group's expanded copy (Q6KGroup's records) to e0 and e1, for Q6KGroup2Expanded.
template <int kT, bool kStream, bool kStore = false>
void Q6KGroup2(const uint8_t* g0, const uint8_t* g1, const Q8KActRow* x, int64_t nb, __m512* acc0,
               __m512* acc1, uint8_t* e0 = nullptr, uint8_t* e1 = nullptr) {
  constexpr size_t kBlock = 32 + 256 + 2048 + 1024;
  for (int64_t b = 0; b < nb; ++b) {
    PrefetchAhead<kStream>(g0 + b * kBlock, 32);
    PrefetchAhead<kStream>(g1 + b * kBlock, 32);
    const uint8_t* p0 = g0 + b * kBlock + 32;
    const uint8_t* p1 = g1 + b * kBlock + 32;
    const __m512 d0 = LoadF16x16(g0 + b * kBlock), d1 = LoadF16x16(g1 + b * kBlock);
    __m512 f0[kT], f1[kT];
    for (int t = 0; t < kT; ++t) f0[t] = f1[t] = _mm512_setzero_ps();
    for (int p = 0; p < 8; ++p) {
      PrefetchAhead<kStream>(p0 + 416 * p, 416);
      PrefetchAhead<kStream>(p1 + 416 * p, 416);
      const __m512i sp0 = Load256AsI16(p0 + 416 * p), sp1 = Load256AsI16(p1 + 416 * p);
      for (int e = 0; e < 2; ++e) {
        const __m512 fs0 = Q6KSubScale(d0, sp0, e), fs1 = Q6KSubScale(d1, sp1, e);
        const int j = 2 * p + e;
        __m512i u0[4], u1[4];
        ExpandQ6KSubBlock(p0 + 416 * p + 32 + 192 * e, u0);
        ExpandQ6KSubBlock(p1 + 416 * p + 32 + 192 * e, u1);
        if constexpr (kStore) {
          uint8_t* es0 = e0 + b * kQ6KExpBlock + kQ6KExpSub * j;
          uint8_t* es1 = e1 + b * kQ6KExpBlock + kQ6KExpSub * j;
          Store512(es0, fs0);
          Store512(es1, fs1);
          for (int c = 0; c < 4; ++c) {
            Store512(es0 + 64 * (c + 1), u0[c]);
            Store512(es1 + 64 * (c + 1), u1[c]);
          }
        }
        Q6KSubBlock2<kT>(u0, u1, fs0, fs1, x, b, j, f0, f1);
      }
    }
    Q6KFinish2<kT>(f0, f1, x, b, acc0, acc1);
  }
}

// Q6KGroup2<kT> for two groups that Q6KGroup2<.., kStore> expanded to e0 and e1 (the same results bit for
// bit).
template <int kT>
void Q6KGroup2Expanded(const uint8_t* e0, const uint8_t* e1, const Q8KActRow* x, int64_t nb, __m512* acc0,
                       __m512* acc1) {
  for (int64_t b = 0; b < nb; ++b) {
    __m512 f0[kT], f1[kT];
    for (int t = 0; t < kT; ++t) f0[t] = f1[t] = _mm512_setzero_ps();
    for (int j = 0; j < 16; ++j) {
      const uint8_t* es0 = e0 + b * kQ6KExpBlock + kQ6KExpSub * j;
      const uint8_t* es1 = e1 + b * kQ6KExpBlock + kQ6KExpSub * j;
      __m512i u0[4], u1[4];
      for (int c = 0; c < 4; ++c) {
        u0[c] = _mm512_load_si512(es0 + 64 * (c + 1));
        u1[c] = _mm512_load_si512(es1 + 64 * (c + 1));
      }
      Q6KSubBlock2<kT>(u0, u1, _mm512_load_ps(es0), _mm512_load_ps(es1), x, b, j, f0, f1);
    }
    Q6KFinish2<kT>(f0, f1, x, b, acc0, acc1);
  }
}

// One group of 16 rows against tokens [t0, t0 + kT): out rows of those tokens, columns [n0, n0 + valid).
// kStream: the group's first tile, which reads its weights from memory (the later tiles find them in cache).
// e: where the group's expanded copy goes (written by its first tile, kStream) or is (later tiles), or null
// (q4_k and q6_k only; ExpandedGroupBytes).
template <int kT, bool kStream>
void GroupTile(const MatMulArgs& a, const uint8_t* g, const uint8_t* xq, size_t xq_row_bytes, int64_t t0,
               int64_t n0, __mmask16 valid, uint8_t* e) {
  __m512 acc[kT];
  for (int t = 0; t < kT; ++t) acc[t] = _mm512_setzero_ps();
  if (a.w_dtype == DType::kQ8_0) {
    Q8ActRow x[kT];
    for (int t = 0; t < kT; ++t) x[t] = ViewQ8ActRow(xq + (t0 + t) * xq_row_bytes, a.k);
    Q8_0Group<kT, kStream>(g, x, a.k / 32, acc);
  } else {
    Q8KActRow x[kT];
    for (int t = 0; t < kT; ++t) x[t] = ViewQ8KActRow(xq + (t0 + t) * xq_row_bytes, a.k);
    const int64_t nb = a.k / 256;
    // Unpack the packed group; or, with a copy: the first tile unpacks and stores it, later tiles read it.
    const auto run = [&](auto unpack, auto unpack_and_store, auto read_copy) {
      if (e == nullptr) {
        unpack(g, x, nb, acc, nullptr);
      } else if constexpr (kStream) {
        unpack_and_store(g, x, nb, acc, e);
      } else {
        read_copy(e, x, nb, acc);
      }
    };
    if (a.w_dtype == DType::kQ4_K) {
      run(Q4KGroup<kT, kStream>, Q4KGroup<kT, true, true>, Q4KGroupExpanded<kT>);
    } else {
      run(Q6KGroup<kT, kStream>, Q6KGroup<kT, true, true>, Q6KGroupExpanded<kT>);
    }
  }
  const __m512 scale = _mm512_set1_ps(a.scale);
  for (int t = 0; t < kT; ++t)
    _mm512_mask_storeu_ps(a.out + (t0 + t) * a.out_stride + n0, valid, _mm512_mul_ps(acc[t], scale));
}

// Rows n0 .. n0 + 16 kG - 1 (all valid) of a q8_0 weight against the one token row (Q8_0GroupN).
template <int kG>
void MultiTile(const MatMulArgs& a, const uint8_t* g0, size_t group_bytes, const uint8_t* xq, int64_t n0) {
  __m512 acc[kG];
  for (int i = 0; i < kG; ++i) acc[i] = _mm512_setzero_ps();
  Q8_0GroupN<kG>(g0, group_bytes, ViewQ8ActRow(xq, a.k), a.k / 32, acc);
  const __m512 scale = _mm512_set1_ps(a.scale);
  for (int i = 0; i < kG; ++i) _mm512_storeu_ps(a.out + n0 + i * kPackRows, _mm512_mul_ps(acc[i], scale));
}

constexpr int kPairTokenTile = 6;
// Two groups (rows n0 .. n0 + 31, all valid) of a q8_0 or q6_k weight against tokens [t0, t0 + kT).
// e: for q6_k, where the two groups' expanded copies go (the first tile, kStream) or are (later tiles), one
// after the other, or null (as GroupTile's e).
template <int kT, bool kStream>
void PairTile(const MatMulArgs& a, const uint8_t* g0, const uint8_t* g1, const uint8_t* xq,
              size_t xq_row_bytes, int64_t t0, int64_t n0, uint8_t* e) {
  __m512 acc0[kT], acc1[kT];
  for (int t = 0; t < kT; ++t) acc0[t] = acc1[t] = _mm512_setzero_ps();
  if (a.w_dtype == DType::kQ8_0) {
    Q8ActRow x[kT];
    for (int t = 0; t < kT; ++t) x[t] = ViewQ8ActRow(xq + (t0 + t) * xq_row_bytes, a.k);
    Q8_0Group2<kT, kStream>(g0, g1, x, a.k / 32, acc0, acc1);
  } else {
    Q8KActRow x[kT];
    for (int t = 0; t < kT; ++t) x[t] = ViewQ8KActRow(xq + (t0 + t) * xq_row_bytes, a.k);
    const int64_t nb = a.k / 256;
    uint8_t* e1 = e != nullptr ? e + ExpandedGroupBytes(a.w_dtype, a.k) : nullptr;
    if (e == nullptr) {
      Q6KGroup2<kT, kStream>(g0, g1, x, nb, acc0, acc1);
    } else if constexpr (kStream) {
      Q6KGroup2<kT, true, true>(g0, g1, x, nb, acc0, acc1, e, e1);
    } else {
      Q6KGroup2Expanded<kT>(e, e1, x, nb, acc0, acc1);
    }
  }
  const __m512 scale = _mm512_set1_ps(a.scale);
  for (int t = 0; t < kT; ++t) {
    float* out = a.out + (t0 + t) * a.out_stride + n0;
    _mm512_storeu_ps(out, _mm512_mul_ps(acc0[t], scale));
    _mm512_storeu_ps(out + kPackRows, _mm512_mul_ps(acc1[t], scale));
  }
}
using PairTileFn = void (*)(const MatMulArgs&, const uint8_t*, const uint8_t*, const uint8_t*, size_t,
                            int64_t, int64_t, uint8_t*);
template <int... kTs>
PairTileFn PickPairTile(int tile, bool stream, std::integer_sequence<int, kTs...>) {
  static constexpr PairTileFn kTiles[] = {&PairTile<kTs + 1, false>...};
  static constexpr PairTileFn kStreamTiles[] = {&PairTile<kTs + 1, true>...};
  return (stream ? kStreamTiles : kTiles)[tile - 1];
}

using GroupTileFn = void (*)(const MatMulArgs&, const uint8_t*, const uint8_t*, size_t, int64_t, int64_t,
                             __mmask16, uint8_t*);
// GroupTile for 1..kTokenTile tokens. A plain array, not std::array (see simd.h).
template <int... kTs>
GroupTileFn PickGroupTile(int tile, bool stream, std::integer_sequence<int, kTs...>) {
  static constexpr GroupTileFn kTiles[] = {&GroupTile<kTs + 1, false>...};
  static constexpr GroupTileFn kStreamTiles[] = {&GroupTile<kTs + 1, true>...};
  return (stream ? kStreamTiles : kTiles)[tile - 1];
}

// Expanded groups pay for the first tile's stores when enough later tiles read them. The kernel lab's
// on/off A/B on an Intel Xeon (the paired ratios at the 7B and 1.8B shapes; docs/BENCHMARKS.md, "Expanded
// row groups"): q4_k 0.93-1.01x at 9 tokens, 0.95-1.02x at 16, 1.02-1.06x at 24 and 32, 1.06-1.13x at 64;
// q6_k (unpacking its 6-bit codes costs more) 1.02-1.05x at 9, 1.05-1.10x at 16, 1.17-1.23x at 64.
int64_t ExpandMinTokens(DType t) {
  return t == DType::kQ4_K ? 2 * kTokenTile : kTokenTile;
}

}  // namespace

void MatMulPacked(const MatMulArgs& a, const void* xq, size_t xq_row_bytes, int64_t n_begin, int64_t n_end) {
  const size_t group_bytes = PackedGroupBytes(a.w_dtype, a.k);
  const auto* x = static_cast<const uint8_t*>(xq);
  const int64_t block_rows = PackedBlockGroups(a, group_bytes, kPairTokenTile) * kPackRows;
  int64_t n_multi_end = n_begin;
  if (a.w_dtype == DType::kQ8_0 && a.n_tokens == 1) {  // decode: kDecodeGroups groups at a time
    n_multi_end = n_begin + (n_end - n_begin) / (kDecodeGroups * kPackRows) * (kDecodeGroups * kPackRows);
    for (int64_t n0 = n_begin; n0 < n_multi_end; n0 += kDecodeGroups * kPackRows)
      MultiTile<kDecodeGroups>(a, a.w + static_cast<size_t>(n0 / kPackRows) * group_bytes, group_bytes, x,
                               n0);
  }
  // Several token tiles: the first expands each q4_k / q6_k group for the others (ExpandedGroupBytes).
  const size_t exp_bytes = a.n_tokens > ExpandMinTokens(a.w_dtype) && ExpandPackedGroups()
                               ? ExpandedGroupBytes(a.w_dtype, a.k)
                               : 0;
  uint8_t* exp = exp_bytes > 0 ? ExpandScratch(ExpandScratchBytes(a.w_dtype, a.k)) : nullptr;
  int64_t n_pairs_end = n_multi_end;
  const bool pairs = a.w_dtype == DType::kQ8_0 || (a.w_dtype == DType::kQ6_K && PairQ6KRowGroups());
  if (pairs && a.n_tokens > 1) {  // one token (decode): q6_k is bound by memory either way
    n_pairs_end = n_begin + (n_end - n_begin) / (2 * kPackRows) * (2 * kPackRows);
    const int64_t pair_block_rows =
        Max<int64_t>(2 * kPackRows, block_rows / (2 * kPackRows) * (2 * kPackRows));
    for (int64_t b0 = n_begin; b0 < n_pairs_end; b0 += pair_block_rows) {
      const int64_t b1 = Min(b0 + pair_block_rows, n_pairs_end);
      for (int64_t t0 = 0; t0 < a.n_tokens; t0 += kPairTokenTile) {
        const int tile = static_cast<int>(Min<int64_t>(kPairTokenTile, a.n_tokens - t0));
        const PairTileFn fn = PickPairTile(tile, t0 == 0, std::make_integer_sequence<int, kPairTokenTile>{});
        for (int64_t n0 = b0; n0 < b1; n0 += 2 * kPackRows) {
          const uint8_t* g0 = a.w + static_cast<size_t>(n0 / kPackRows) * group_bytes;
          fn(a, g0, g0 + group_bytes, x, xq_row_bytes, t0, n0,
             exp != nullptr ? exp + static_cast<size_t>((n0 - b0) / kPackRows) * exp_bytes : nullptr);
        }
      }
    }
  }
  for (int64_t b0 = n_pairs_end; b0 < n_end; b0 += block_rows) {
    const int64_t b1 = Min(b0 + block_rows, n_end);
    for (int64_t t0 = 0; t0 < a.n_tokens; t0 += kTokenTile) {
      const int tile = static_cast<int>(Min<int64_t>(kTokenTile, a.n_tokens - t0));
      const GroupTileFn fn = PickGroupTile(tile, t0 == 0, std::make_integer_sequence<int, kTokenTile>{});
      for (int64_t n0 = b0; n0 < b1; n0 += kPackRows) {
        const uint8_t* g = a.w + static_cast<size_t>(n0 / kPackRows) * group_bytes;
        const __mmask16 valid = static_cast<__mmask16>((1u << Min<int64_t>(kPackRows, n_end - n0)) - 1);
        fn(a, g, x, xq_row_bytes, t0, n0, valid,
           exp != nullptr ? exp + static_cast<size_t>((n0 - b0) / kPackRows) * exp_bytes : nullptr);
      }
    }
  }
}

}  // namespace hymt::cpu::HYMT_ISA
#endif
