// Attention of one (row, kv head) over a paged KV cache. The launcher is attention.cc one level up.
//
// The `group` query heads that share a kv head are processed together, so each K and V position is
// read once per row (GQA group 4 on the 7B: 4x less cache traffic). Softmax is online, page by page:
// the scores of a page are computed, the running max and sum updated (rescaling the accumulators when
// the max grows), and the page's V rows added with their weights; nothing is O(context) in memory.
#include "backends/cpu/kernel_table.h"
#include "backends/cpu/kernels/simd.h"
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

template <DType T>
inline VF LoadKvAt(const uint8_t* row, int i, int hd) {
  return i + kLanes <= hd ? LoadKv<T>(row, i) : LoadKvPartial<T>(row, i, hd - i);
}

// Scratch layout: scores [group][page_size], acc [group][head_dim], max [group], sum [group].
template <DType T, int kGroup>
void AttendTyped(const AttentionTask& t, float* scratch) {
  const int group = kGroup > 0 ? kGroup : t.group;
  const int hd = t.head_dim, ps = t.page_size;
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
    const uint8_t* k_page = t.k_pool + page_offset;
    const uint8_t* v_page = t.v_pool + page_offset;
    const int np = Min(ps, t.n_positions - pi * ps);

    // Scores of this page: q_g . k_j * scale, each K row loaded once for all g.
    for (int j = 0; j < np; ++j) {
      const uint8_t* k_row = k_page + static_cast<size_t>(j) * t.position_bytes;
      VF dot[kGroup > 0 ? kGroup : 8];
      for (int g = 0; g < group; ++g) dot[g] = Zero();
      for (int i = 0; i < hd; i += kLanes) {
        const VF kv = LoadKvAt<T>(k_row, i, hd);
        for (int g = 0; g < group; ++g) {
          const float* qg = t.q + static_cast<size_t>(g) * hd;
          const VF qv = i + kLanes <= hd ? Load(qg + i) : LoadPartial(qg + i, hd - i);
          dot[g] = Fma(kv, qv, dot[g]);
        }
      }
      for (int g = 0; g < group; ++g) scores[g * ps + j] = ReduceAdd(dot[g]) * t.scale;
    }

    // Online softmax: new max, rescale what was accumulated, turn the scores into weights.
    for (int g = 0; g < group; ++g) {
      float* s = scores + g * ps;
      float page_max = s[0];
      for (int j = 1; j < np; ++j) page_max = Max(page_max, s[j]);
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

    // acc_g += sum_j p_gj * v_j, each V row loaded once for all g.
    for (int j = 0; j < np; ++j) {
      const uint8_t* v_row = v_page + static_cast<size_t>(j) * t.position_bytes;
      for (int i = 0; i < hd; i += kLanes) {
        const VF vv = LoadKvAt<T>(v_row, i, hd);
        const int m = Min(kLanes, hd - i);
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
