// Attention of one (row, kv head) over a paged KV cache. The launcher is attention.cc one level up.
//
// The `group` query heads that share a kv head are processed together, so each K and V position is
// read once per row (GQA group 4 on the 7B: 4x less cache traffic). Softmax is online, page by page:
// the scores of a page are computed, the running max and sum updated (rescaling the accumulators when
// the max grows), and the page's V rows added with their weights; nothing is O(context) in memory.
#include "backends/cpu/kernels/kernels.h"
#include "quant/blocks.h"

namespace hymt::cpu::HYMT_ISA {
namespace {

// kLanes values of a cached row starting at element i (i a multiple of kLanes; for q8_0, kLanes divides
// the 32 of a block, so a load never straddles two blocks).
template <DType T>
inline VF LoadKv(const uint8_t* row, int i) {
  if constexpr (T == DType::kF32) return Load(reinterpret_cast<const float*>(row) + i);
  if constexpr (T == DType::kF16) return LoadF16(reinterpret_cast<const uint16_t*>(row) + i);
  if constexpr (T == DType::kBF16) return LoadBf16(reinterpret_cast<const uint16_t*>(row) + i);
  if constexpr (T == DType::kQ8_0) {
    const BlockQ8_0& b = reinterpret_cast<const BlockQ8_0*>(row)[i / kQK];
    const int8_t* q = b.qs + i % kQK;
    const VF d = Set1(F16ToF32(b.d));
#if defined(HYMT_ISA_IS_avx512)
    return Mul(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q)))),
               d);
#elif defined(HYMT_ISA_IS_avx2)
    return Mul(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q)))),
               d);
#else
    return static_cast<float>(*q) * d;
#endif
  }
}

// Row tails (head_dim not a multiple of kLanes; never for q8_0, whose head_dim is a multiple of 32).
template <DType T>
inline VF LoadKvPartial(const uint8_t* row, int i, int n) {
  if constexpr (T == DType::kF32) return LoadPartial(reinterpret_cast<const float*>(row) + i, n);
  if constexpr (T == DType::kF16) return LoadF16Partial(reinterpret_cast<const uint16_t*>(row) + i, n);
  if constexpr (T == DType::kBF16) return LoadBf16Partial(reinterpret_cast<const uint16_t*>(row) + i, n);
  if constexpr (T == DType::kQ8_0) return LoadKv<T>(row, i);
}

// The positions of one page of one head: kLanes values of position j from element i, as f32.
template <DType S>
struct PageRows {
  const uint8_t* base;
  size_t stride;  // bytes from one position to the next
  VF At(int j, int i) const { return LoadKv<S>(base + static_cast<size_t>(j) * stride, i); }
  VF AtPartial(int j, int i, int n) const {
    return LoadKvPartial<S>(base + static_cast<size_t>(j) * stride, i, n);
  }
};

// out[i] = sum of the lanes of v[i], for kLanes vectors at once: a transpose-and-add tree (~3 ops per
// vector instead of ~8 for a lone horizontal sum).
inline void ReduceEach(const VF* v, float* out) {
#if defined(HYMT_ISA_IS_avx512)
  __m512 u[8], w[4];
  for (int i = 0; i < 8; ++i)  // 128-bit lane: [a0+a2, b0+b2, a1+a3, b1+b3] for a = v[2i], b = v[2i+1]
    u[i] =
        _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]), _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
  for (int m = 0; m < 4; ++m)  // 128-bit lane L: the lane-L sums of v[4m .. 4m+3]
    w[m] = _mm512_add_ps(_mm512_shuffle_ps(u[2 * m], u[2 * m + 1], 0x44),
                         _mm512_shuffle_ps(u[2 * m], u[2 * m + 1], 0xee));
  const __m512 y01 =
      _mm512_add_ps(_mm512_shuffle_f32x4(w[0], w[1], 0x44), _mm512_shuffle_f32x4(w[0], w[1], 0xee));
  const __m512 y23 =
      _mm512_add_ps(_mm512_shuffle_f32x4(w[2], w[3], 0x44), _mm512_shuffle_f32x4(w[2], w[3], 0xee));
  _mm512_storeu_ps(out,
                   _mm512_add_ps(_mm512_shuffle_f32x4(y01, y23, 0x88), _mm512_shuffle_f32x4(y01, y23, 0xdd)));
#elif defined(HYMT_ISA_IS_avx2)
  const __m256 g0 = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
  const __m256 g1 = _mm256_hadd_ps(_mm256_hadd_ps(v[4], v[5]), _mm256_hadd_ps(v[6], v[7]));
  _mm256_storeu_ps(out,
                   _mm256_add_ps(_mm256_permute2f128_ps(g0, g1, 0x20), _mm256_permute2f128_ps(g0, g1, 0x31)));
#else
  out[0] = v[0];
#endif
}

// Scratch layout: scores [group][page_size], acc [group][head_dim], max [group], sum [group].
template <DType T, int kGroup>
void AttendTyped(const AttentionTask& t, float* scratch) {
  const int group = kGroup > 0 ? kGroup : t.group;
  const int hd = t.head_dim, ps = t.page_size;
  // Register budget of the V accumulators: half the vector registers, at most 8 vectors per head.
  constexpr int kG = kGroup > 0 ? kGroup : 8;
  constexpr int kSlice = Max(1, Min(8, kVectorRegisters / 2 / kG));
  // Positions per score tile (0: no tile); the tile's kLanes accumulators are kGroup heads x kTileP.
  // Not for f32 rows: there is nothing to widen, and from memory the untiled walk read them 4-5% faster.
  constexpr int kTileP = T != DType::kF32 && kGroup > 0 && kLanes % kGroup == 0 ? kLanes / kGroup : 0;
  float* scores = scratch;
  float* acc = scores + static_cast<size_t>(group) * ps;
  float* run_max = acc + static_cast<size_t>(group) * hd;
  float* run_sum = run_max + group;
  for (int g = 0; g < group; ++g) {
    run_max[g] = -__builtin_inff();
    run_sum[g] = 0.0f;
  }
  for (int i = 0; i < group * hd; ++i) acc[i] = 0.0f;

  const int n_pages = (t.n_positions + ps - 1) / ps;
  for (int pi = 0; pi < n_pages; ++pi) {
    const size_t page_offset =
        static_cast<size_t>(t.pages[pi]) * t.page_bytes + static_cast<size_t>(t.kv_head) * t.head_bytes;
    const int np = Min(ps, t.n_positions - pi * ps);
    // This page's K and V into L1 (tiled walks) and the next page's into L2 while this one is computed
    // (pages are scattered, so the hardware prefetcher cannot guess them). The score tiles below walk a
    // few rows at a time, fewer lines in flight than one row per lane; asking for the whole page first
    // keeps its misses overlapped (from memory, f16 and bf16 ran 10-20% faster with it).
    if constexpr (kTileP > 0)
      for (size_t off = 0; off < t.head_bytes; off += 64) {
        __builtin_prefetch(t.k_pool + page_offset + off, 0, 3);
        __builtin_prefetch(t.v_pool + page_offset + off, 0, 3);
      }
    if (pi + 1 < n_pages) {
      const size_t next =
          static_cast<size_t>(t.pages[pi + 1]) * t.page_bytes + static_cast<size_t>(t.kv_head) * t.head_bytes;
      for (size_t off = 0; off < t.head_bytes; off += 64) {
        __builtin_prefetch(t.k_pool + next + off, 0, 2);
        __builtin_prefetch(t.v_pool + next + off, 0, 2);
      }
    }
    // Rows are widened to f32 as they are loaded (q8_0: times the block's scale), each once per tile.
    const PageRows<T> kr{t.k_pool + page_offset, t.position_bytes}, vr{t.v_pool + page_offset, t.position_bytes};
    // Scores of this page, q_g . k_j * scale. With a fixed group that divides kLanes (4 of 16 on the 7B
    // and 1.8B with AVX-512), kTileP positions x the group's heads at a time: each K vector is loaded (and
    // widened) once for every head, and the kLanes dot-product vectors are reduced together (ReduceEach).
    // Otherwise kLanes positions of one head at a time. Either way each score is the same FMA chain over
    // head_dim and the same reduction tree.
    int j_tiled = 0;
    if constexpr (kTileP > 0) {
      if (hd % kLanes == 0) {
        for (; j_tiled + kTileP <= np; j_tiled += kTileP) {
          VF dot[kLanes];  // dot[g * kTileP + p]: head g against position j_tiled + p
          for (int d = 0; d < kLanes; ++d) dot[d] = Zero();
          for (int i = 0; i < hd; i += kLanes) {
            VF kv[kTileP];
            for (int p = 0; p < kTileP; ++p) kv[p] = kr.At(j_tiled + p, i);
            for (int g = 0; g < kGroup; ++g) {
              const VF qv = Load(t.q + static_cast<size_t>(g) * hd + i);
              for (int p = 0; p < kTileP; ++p) dot[g * kTileP + p] = Fma(kv[p], qv, dot[g * kTileP + p]);
            }
          }
          alignas(64) float sums[kLanes];
          ReduceEach(dot, sums);
          Store(sums, Mul(Load(sums), Set1(t.scale)));
          for (int g = 0; g < kGroup; ++g)
            for (int p = 0; p < kTileP; ++p) scores[g * ps + j_tiled + p] = sums[g * kTileP + p];
        }
      }
    }
    for (int g = 0; g < group; ++g) {
      const float* qg = t.q + static_cast<size_t>(g) * hd;
      float* sg = scores + g * ps;
      int j = j_tiled;
      if (kTileP == 0 && hd % kLanes == 0) {
        for (; j + kLanes <= np; j += kLanes) {
          VF dot[kLanes];
          for (int jj = 0; jj < kLanes; ++jj) dot[jj] = Zero();
          for (int i = 0; i < hd; i += kLanes) {
            const VF qv = Load(qg + i);
            for (int jj = 0; jj < kLanes; ++jj) dot[jj] = Fma(kr.At(j + jj, i), qv, dot[jj]);
          }
          ReduceEach(dot, sg + j);
          Store(sg + j, Mul(Load(sg + j), Set1(t.scale)));
        }
      }
      for (; j < np; ++j) {  // the page's last positions, and head_dim tails
        VF dot = Zero();
        for (int i = 0; i < hd; i += kLanes) {
          const bool full = i + kLanes <= hd;
          dot = Fma(full ? kr.At(j, i) : kr.AtPartial(j, i, hd - i),
                    full ? Load(qg + i) : LoadPartial(qg + i, hd - i), dot);
        }
        sg[j] = ReduceAdd(dot) * t.scale;
      }
    }

    // Online softmax: new max, rescale what was accumulated, turn the scores into weights.
    for (int g = 0; g < group; ++g) {
      float* s = scores + g * ps;
      float page_max = s[0];
      if (np % kLanes == 0) {
        VF m = Load(s);
        for (int j = kLanes; j < np; j += kLanes) m = MaxV(m, Load(s + j));
        page_max = ReduceMax(m);
      } else {
        for (int j = 1; j < np; ++j) page_max = Max(page_max, s[j]);
      }
      const float new_max = Max(run_max[g], page_max);
      const float correction = Exp(run_max[g] - new_max);  // 0 on the first page (exp(-inf))
      run_max[g] = new_max;
      float* a = acc + static_cast<size_t>(g) * hd;
      if (correction != 1.0f) {
        const VF c = Set1(correction);
        for (int i = 0; i < hd; i += kLanes) {
          const int m = Min(kLanes, hd - i);
          if (m == kLanes) {
            Store(a + i, Mul(Load(a + i), c));
          } else {
            StorePartial(a + i, Mul(LoadPartial(a + i, m), c), m);
          }
        }
      }
      const VF vmax = Set1(new_max);
      VF page_sum = Zero();
      int j = 0;
      for (; j + kLanes <= np; j += kLanes) {
        const VF p = ExpV(Sub(Load(s + j), vmax));
        Store(s + j, p);
        page_sum = Add(page_sum, p);
      }
      float tail_sum = 0.0f;
      for (; j < np; ++j) {
        s[j] = Exp(s[j] - new_max);
        tail_sum += s[j];
      }
      run_sum[g] = run_sum[g] * correction + ReduceAdd(page_sum) + tail_sum;
    }

    // acc_g += sum_j p_gj v_j. head_dim in slices of kSlice vectors whose group x kSlice accumulators
    // stay in registers over the page's positions; each V vector is loaded once for all g.
    int i0 = 0;
    for (; i0 + kSlice * kLanes <= hd; i0 += kSlice * kLanes) {
      VF va[kG][kSlice];
      for (int g = 0; g < group; ++g)
        for (int v = 0; v < kSlice; ++v) va[g][v] = Load(acc + static_cast<size_t>(g) * hd + i0 + v * kLanes);
      for (int j = 0; j < np; ++j) {
        VF vv[kSlice];
        for (int v = 0; v < kSlice; ++v) vv[v] = vr.At(j, i0 + v * kLanes);
        for (int g = 0; g < group; ++g) {
          const VF p = Set1(scores[g * ps + j]);
          for (int v = 0; v < kSlice; ++v) va[g][v] = Fma(p, vv[v], va[g][v]);
        }
      }
      for (int g = 0; g < group; ++g)
        for (int v = 0; v < kSlice; ++v) Store(acc + static_cast<size_t>(g) * hd + i0 + v * kLanes, va[g][v]);
    }
    for (int j = 0; j < np && i0 < hd; ++j) {  // head_dim not a multiple of a slice: vector by vector
      for (int i = i0; i < hd; i += kLanes) {
        const int m = Min(kLanes, hd - i);
        const VF vv = m == kLanes ? vr.At(j, i) : vr.AtPartial(j, i, m);
        for (int g = 0; g < group; ++g) {
          float* a = acc + static_cast<size_t>(g) * hd + i;
          const VF p = Set1(scores[g * ps + j]);
          if (m == kLanes) {
            Store(a, Fma(p, vv, Load(a)));
          } else {
            StorePartial(a, Fma(p, vv, LoadPartial(a, m)), m);
          }
        }
      }
    }
  }

  for (int g = 0; g < group; ++g) {
    const float inv = 1.0f / run_sum[g];
    for (int i = 0; i < hd; ++i)
      t.out[static_cast<size_t>(g) * hd + i] = acc[static_cast<size_t>(g) * hd + i] * inv;
  }
}

// Groups of 1, 2, 4 and 8 get their own instantiation (fixed register counts); other sizes are split
// into chunks of up to 8 heads by the loop below.
template <DType T>
void AttendGroups(const AttentionTask& t, float* scratch) {
  switch (t.group) {
    case 1:
      return AttendTyped<T, 1>(t, scratch);
    case 2:
      return AttendTyped<T, 2>(t, scratch);
    case 4:
      return AttendTyped<T, 4>(t, scratch);
    case 8:
      return AttendTyped<T, 8>(t, scratch);
    default:
      break;
  }
  constexpr int kChunk = 8;
  for (int g0 = 0; g0 < t.group; g0 += kChunk) {
    AttentionTask part = t;
    part.group = Min(kChunk, t.group - g0);
    part.q = t.q + static_cast<size_t>(g0) * t.head_dim;
    part.out = t.out + static_cast<size_t>(g0) * t.head_dim;
    AttendTyped<T, 0>(part, scratch);
  }
}

}  // namespace

void Attention(const AttentionTask& t, float* scratch) {
  switch (t.kv_dtype) {
    case DType::kF32:
      return AttendGroups<DType::kF32>(t, scratch);
    case DType::kF16:
      return AttendGroups<DType::kF16>(t, scratch);
    case DType::kBF16:
      return AttendGroups<DType::kBF16>(t, scratch);
    case DType::kQ8_0:
      return AttendGroups<DType::kQ8_0>(t, scratch);
    default:
      return;  // the launcher checks the KV type
  }
}

}  // namespace hymt::cpu::HYMT_ISA
