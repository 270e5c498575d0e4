// Causal attention over the paged KV cache (layout [n_pages][n_kv_heads][page_size][head_dim]).
//
// Four kernels:
//   - decode (flash decoding): a block per (kv head, query row, context split). Its 128 threads form
//     sub-groups of head_dim / 8 lanes, 4 cache positions per sub-group and trip, loaded together (16-byte
//     K and V loads per lane; HYMT_ATTN_TRIP=1: one, as before: 1.4-1.9x slower at 512-2,048 positions);
//     all q heads of the GQA group are scored against each K row while it is in registers, with an online
//     softmax per sub-group. Sub-groups, then splits (AttnCombineKernel), are merged with the
//     log-sum-exp rule. Bytes per row: ctx * n_kv_heads * head_dim * 2 (K + V) * 2 bytes.
//   - prefill: a block per (tile of query rows of one sequence, kv head) holds 64 (row, q head) pairs, 4
//     threads each (each a quarter of head_dim); 64-position K/V tiles are staged in shared memory and
//     shared by all pairs; online softmax over 16 keys at a time. CUDA cores, f32: flops 4 * rows * ctx/2 *
//     head_dim * n_heads (causal), about a tenth of the step's matmul flops at 2k tokens.
//   - prefill on tensor cores (sm_80+, bf16 cache; CudaOpsOptions::prefill_attention_tensor_cores): the
//     same tiles and grid of (tile, kv head) blocks, FlashAttention-2 style with mma.sync m16n8k16 (bf16
//     in, f32 accumulation): 4 warps of 16 (row, head) pairs each, K/V tiles of 64 positions in shared
//     memory (double-buffered, cp.async). S, the online softmax and O stay in registers; P is rounded to
//     bf16 for P V (the sum l is taken before rounding). bench/cuda_kernels prints both prefill kernels.
//   - simple: a warp per (row, q head), one position at a time. The oracle and the path for shapes the
//     fast kernels do not take (head_dim other than 64/128, groups above 8, f32 caches).
// Scores use exp2 with q pre-scaled by scale * log2(e) (the tensor-core kernel scales S instead, so that Q
// enters the mma exact); softmax and sums are f32.
#include <atomic>
#include <map>
#include <mutex>
#include <set>
#include <utility>

#include "backends/cuda/cuda_device.cuh"

#if !defined(HYMT_CUDA_EMU)
#include <cooperative_groups.h>
#endif

namespace hymt::cuda {
namespace {

constexpr float kLog2e = 1.4426950408889634f;
constexpr int kDecodeThreads = 128;
constexpr int kPrefillThreads = 256;
constexpr int kPrefillPairs = 64;  // (row, head) pairs per prefill block: 4 threads each
constexpr int kPrefillKeys = 64;   // positions per shared-memory K/V tile
constexpr int kPrefillBatch = 16;  // keys scored before each softmax update

// 8 cache values (16 bytes, already loaded) as floats; the cache is bf16 or f16.
template <bool kF16>
__device__ __forceinline__ void Kv8(const uint4& v, float o[8]) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (kF16) {
      __half2 h;
      memcpy(&h, &w[i], 4);
      const float2 f = __half22float2(h);
      o[2 * i] = f.x, o[2 * i + 1] = f.y;
    } else {
      o[2 * i] = Bf16Lo(w[i]), o[2 * i + 1] = Bf16Hi(w[i]);
    }
  }
}
// The same from memory (16-byte aligned).
template <bool kF16>
__device__ __forceinline__ void LoadKv8(const uint16_t* p, float o[8]) {
  Kv8<kF16>(Ld16(p), o);
}

__device__ __forceinline__ const uint16_t* QRow(const AttentionArgs& a, int row, int h, int head_dim) {
  return static_cast<const uint16_t*>(a.q.data) + static_cast<int64_t>(row) * a.q.stride +
         static_cast<int64_t>(h) * head_dim;
}
__device__ __forceinline__ uint16_t* OutRow(const AttentionArgs& a, int row, int h, int head_dim) {
  return static_cast<uint16_t*>(a.out.data) + static_cast<int64_t>(row) * a.out.stride +
         static_cast<int64_t>(h) * head_dim;
}

// The decode step's RoPE, q/k norm and KV write inside the attention block (kRope; AttentionArgs::Rope):
// the block's warps take items [0, group) (its q heads, rotated and normalised into sq as RopeNormKvKernel
// would write them in place) and, in the block whose split holds the row's own position (every other split
// reads only positions earlier steps wrote), items group (the k head: rotated, normalised, stored into the
// cache) and group + 1 (the v head, copied into the cache). The __syncthreads that follows makes sq and
// the cache stores visible to the whole block before the position loop reads them.
template <DType C, int HD>
__device__ __forceinline__ void DecodeRopeItems(const AttentionArgs& a, int row, int hk, int group, int pos,
                                                bool own, const RopeLane& rq, const RopeLane& rk,
                                                uint16_t (*sq)[HD]) {
  const AttentionArgs::Rope& r = a.rope;
  const int items = group + (own ? 2 : 0);
  const DevSeq seq = a.batch.seqs[a.batch.row_seq[row]];
  const int64_t page = own ? a.batch.pages[seq.first_page + pos / a.kv.page_size] : 0;
  const int64_t base = ((page * a.kv.n_kv_heads + hk) * a.kv.page_size + pos % a.kv.page_size) * HD;
  for (int it = threadIdx.x >> 5; it < items; it += kDecodeThreads / 32) {
    if (it < group) {
      RopeNormApply<C>(QRow(a, row, hk * group + it, HD), sq[it], HD, rq, r.has_q_norm, r.eps, nullptr, 0);
    } else if (it == group) {
      const uint16_t* k =
          static_cast<const uint16_t*>(r.k.data) + row * r.k.stride + static_cast<int64_t>(hk) * HD;
      RopeNormApply<C>(k, nullptr, HD, rk, r.has_k_norm, r.eps, a.kv.k, base);
    } else {
      const uint16_t* v =
          static_cast<const uint16_t*>(r.v.data) + row * r.v.stride + static_cast<int64_t>(hk) * HD;
      for (int d = threadIdx.x & 31; d < HD; d += 32) StoreKv<C>(a.kv.v, base + d, v[d]);
    }
  }
}

// kCluster (sm_90+): the n_splits blocks of a (kv head, row) form one thread-block cluster and merge
// their splits through distributed shared memory, instead of AttnCombineKernel: each block leaves its
// (m, l, o) in its own shared memory, and after a cluster barrier the blocks share out the (q head, dim)
// outputs, each reading every split's values in split order, as AttnCombineKernel does (the same bits); a
// second barrier keeps every block's shared memory until all have read it. Every block of the cluster
// takes part, those past the row's splits with an empty range (m = -inf, l = o = 0).
template <int HD, int GMAX>
__device__ __forceinline__ void ClusterCombine(const AttentionArgs& a, int row, int hk, int group,
                                               const float (&cl_o)[GMAX][HD], const float (&cl_ml)[GMAX][2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && !defined(HYMT_CUDA_EMU)
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();
  const int n = static_cast<int>(cluster.num_blocks());
  const int rank = static_cast<int>(cluster.block_rank());
  for (int idx = rank * kDecodeThreads + static_cast<int>(threadIdx.x); idx < group * HD;
       idx += n * kDecodeThreads) {
    const int g = idx / HD, d = idx % HD;
    float mx = -INFINITY;
    for (int s = 0; s < n; ++s) mx = fmaxf(mx, cluster.map_shared_rank(&cl_ml[g][0], s)[0]);
    float L = 0.0f, O = 0.0f;  // split 0 is never empty, so mx is finite
    for (int s = 0; s < n; ++s) {
      const float* ml = cluster.map_shared_rank(&cl_ml[g][0], s);
      const float f = exp2f(ml[0] - mx);
      L = fmaf(ml[1], f, L);
      O = fmaf(cluster.map_shared_rank(&cl_o[g][d], s)[0], f, O);
    }
    OutRow(a, row, hk * group + g, HD)[d] = F32ToBf16(O / L);
  }
  cluster.sync();
#elif defined(__CUDA_ARCH__)
  __trap();  // never launched: LaunchFastT takes clusters on sm_90+ only
#else
  (void)a, (void)row, (void)hk, (void)group, (void)cl_o, (void)cl_ml;  // the CPU emulator: never launched
#endif
}

// grid (n_kv_heads, n_decode, n_splits). GMAX >= group; heads past the group are skipped. kRope: see
// DecodeRopeItems; kCluster: see ClusterCombine (n_splits is the cluster's size).
template <bool kF16, int HD, int GMAX, int U, bool kRope, bool kCluster>
__global__ __launch_bounds__(kDecodeThreads) void AttnDecodeKernel(AttentionArgs a) {
  constexpr DType C = kF16 ? DType::kF16 : DType::kBF16;
  constexpr int LP = HD / 8;                 // lanes per position
  constexpr int SUBS = kDecodeThreads / LP;  // positions in flight per block
  PdlTriggerIf(a.pdl_early);
  const int hk = blockIdx.x, li = blockIdx.y, split = blockIdx.z;
  const int group = a.n_heads / a.kv.n_kv_heads;
  const int row = a.decode_rows[li];
  const int ctx = a.batch.positions[row] + 1;
  const int n_split = AttnRowSplits(ctx, a.split_min, a.n_splits);
  // The row's context takes fewer splits than the grid has: the others return at once, or in a cluster
  // take part in the merge with an empty range.
  if (!kCluster && split >= n_split) return;
  const DevSeq seq = a.batch.seqs[a.batch.row_seq[row]];
  const int per = (ctx + n_split - 1) / n_split;
  const int j_begin = split * per;
  const int j_end = min(ctx, j_begin + per);
  const int sub = threadIdx.x / LP, sl = threadIdx.x % LP;
  // Before the wait, L2 is asked for the first trip's cache rows that earlier steps wrote (positions below
  // the sequence's n_past), one 128-byte line per 8 lanes, so that the trip's loads after it come from L2
  // rather than DRAM. Prefetching into registers instead held them across the q loads (158 registers, 3
  // blocks per SM: the kernel lab's 2,048 positions x 16 sequences went from 65 to 74 us).
  if (sl % 8 == 0) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int j = j_begin + SUBS * u + sub;
      if (j < j_end && j < seq.n_past) {
        const int64_t off =
            (static_cast<int64_t>(a.batch.pages[seq.first_page + j / a.kv.page_size]) * a.kv.n_kv_heads + hk) *
                a.kv.page_size * HD +
            static_cast<int64_t>(j % a.kv.page_size) * HD + sl * 8;
        PrefetchL2(static_cast<const uint16_t*>(a.kv.k) + off);
        PrefetchL2(static_cast<const uint16_t*>(a.kv.v) + off);
      }
    }
  }
  // kRope: the block whose split holds the row's own position (ctx - 1) writes its k and v.
  const bool own = kRope && j_begin <= ctx - 1 && ctx - 1 < j_end;
  __shared__ __align__(16) uint16_t sq[kRope ? GMAX : 1][HD];
  if constexpr (kRope) {
    const float pos = static_cast<float>(ctx - 1);
    const RopeLane rq = RopeLanePrepare(HD, pos, a.rope.inv_freq, a.rope.q_norm, a.rope.has_q_norm);
    RopeLane rk = rq;  // the same angles, k's norm weights
    if (own && a.rope.has_k_norm) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int j = (threadIdx.x & 31) + 32 * i;
        if (j < HD / 2) {
          rk.g_lo[i] = VectorElement(a.rope.k_norm, j);
          rk.g_hi[i] = VectorElement(a.rope.k_norm, j + HD / 2);
        }
      }
    }
    PdlWait();
    PdlTriggerIf(!a.pdl_early);
    DecodeRopeItems<C, HD>(a, row, hk, group, ctx - 1, own, rq, rk, sq);
    __syncthreads();
  } else {
    PdlWait();
    PdlTriggerIf(!a.pdl_early);
  }

  float q[GMAX][8];
#pragma unroll
  for (int g = 0; g < GMAX; ++g) {
    if (g < group) {
      LoadBf16x8(kRope ? &sq[kRope ? g : 0][sl * 8] : QRow(a, row, hk * group + g, HD) + sl * 8, q[g]);
#pragma unroll
      for (int i = 0; i < 8; ++i) q[g][i] *= a.scale * kLog2e;
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) q[g][i] = 0.0f;
    }
  }
  float m[GMAX], l[GMAX], o[GMAX][8];
#pragma unroll
  for (int g = 0; g < GMAX; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) o[g][i] = 0.0f;
  }

  const int64_t head_elems = static_cast<int64_t>(a.kv.page_size) * HD;
  const int64_t page_elems = head_elems * a.kv.n_kv_heads;
  const uint16_t* kpool = static_cast<const uint16_t*>(a.kv.k) + hk * head_elems + sl * 8;
  const uint16_t* vpool = static_cast<const uint16_t*>(a.kv.v) + hk * head_elems + sl * 8;
  // Each sub-group takes U positions per trip (jb + sub + SUBS u): their page numbers, then their K and V
  // rows, are loaded together before any is used, so a trip waits on memory twice, not 2 U times; the
  // online softmax then takes the U scores in one update. The trip count is the same for the whole block
  // (the shuffles need every lane); positions past the end load a valid position and are left out.
  for (int jb = j_begin; jb < j_end; jb += SUBS * U) {
    bool valid[U];
    int64_t page[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int j = jb + SUBS * u + sub;
      valid[u] = j < j_end;
      const int jj = valid[u] ? j : j_begin;
      page[u] = a.batch.pages[seq.first_page + jj / a.kv.page_size] * page_elems +
                static_cast<int64_t>(jj % a.kv.page_size) * HD;
    }
    uint4 kr[U], vr[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      kr[u] = Ld16(kpool + page[u]);
      vr[u] = Ld16(vpool + page[u]);
    }
    float s[U][GMAX];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float kf[8];
      Kv8<kF16>(kr[u], kf);
#pragma unroll
      for (int g = 0; g < GMAX; ++g) {
        s[u][g] = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; ++i) s[u][g] = fmaf(q[g][i], kf[i], s[u][g]);
#pragma unroll
        for (int off2 = LP / 2; off2 > 0; off2 >>= 1) s[u][g] += __shfl_xor_sync(kFullMask, s[u][g], off2);
      }
    }
#pragma unroll
    for (int g = 0; g < GMAX; ++g) {
      if (g >= group) continue;
      float m_new = m[g];
#pragma unroll
      for (int u = 0; u < U; ++u)
        if (valid[u]) m_new = fmaxf(m_new, s[u][g]);
      if (m_new == -INFINITY) continue;  // no valid position in this trip (only when U > 1)
      const float corr = exp2f(m[g] - m_new);  // 0 on the first position (m = -inf)
      l[g] *= corr;
#pragma unroll
      for (int i = 0; i < 8; ++i) o[g][i] *= corr;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        if (!valid[u]) continue;
        const float p = exp2f(s[u][g] - m_new);
        float vf[8];
        Kv8<kF16>(vr[u], vf);
        l[g] += p;
#pragma unroll
        for (int i = 0; i < 8; ++i) o[g][i] = fmaf(p, vf[i], o[g][i]);
      }
      m[g] = m_new;
    }
  }

  // Merge the sub-groups: (m, l, o) of each through shared memory.
  __shared__ float sm_m[SUBS][GMAX], sm_l[SUBS][GMAX];
  __shared__ float cl_o[kCluster ? GMAX : 1][HD], cl_ml[kCluster ? GMAX : 1][2];
  __shared__ float sm_o[SUBS][GMAX][HD];
#pragma unroll
  for (int g = 0; g < GMAX; ++g) {
    if (sl == 0) sm_m[sub][g] = m[g], sm_l[sub][g] = l[g];
#pragma unroll
    for (int i = 0; i < 8; ++i) sm_o[sub][g][sl * 8 + i] = o[g][i];
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < group * HD; idx += kDecodeThreads) {
    const int g = idx / HD, d = idx % HD;
    float mx = -INFINITY;
    for (int s2 = 0; s2 < SUBS; ++s2) mx = fmaxf(mx, sm_m[s2][g]);
    float L = 0.0f, O = 0.0f;
    if (mx != -INFINITY) {  // an empty split (more splits than positions) keeps L = O = 0
      for (int s2 = 0; s2 < SUBS; ++s2) {
        const float f = exp2f(sm_m[s2][g] - mx);
        L = fmaf(sm_l[s2][g], f, L);
        O = fmaf(sm_o[s2][g][d], f, O);
      }
    }
    const int h = hk * group + g;
    if constexpr (kCluster) {
      cl_o[g][d] = O;
      if (d == 0) cl_ml[g][0] = mx, cl_ml[g][1] = L;
    } else if (a.n_splits == 1) {
      OutRow(a, row, h, HD)[d] = F32ToBf16(O / L);
    } else {
      const int64_t base = (static_cast<int64_t>(li) * a.n_heads + h) * a.n_splits + split;
      a.partial_o[base * HD + d] = O;
      if (d == 0) a.partial_ml[2 * base] = mx, a.partial_ml[2 * base + 1] = L;
    }
  }
  if constexpr (kCluster) ClusterCombine<HD, GMAX>(a, row, hk, group, cl_o, cl_ml);
}

// grid (n_decode, n_heads), max(32, head_dim) threads: merges the splits of one (row, head) (the row's
// AttnRowSplits, as AttnDecodeKernel took them).
__global__ void AttnCombineKernel(AttentionArgs a) {
  PdlTriggerIf(a.pdl_early);
  const int li = blockIdx.x, h = blockIdx.y, d = threadIdx.x;
  const int hd = a.kv.head_dim;
  if (d >= hd) return;
  const int row = a.decode_rows[li];  // the step's batch: before the wait
  const int n_split = AttnRowSplits(a.batch.positions[row] + 1, a.split_min, a.n_splits);
  PdlWait();
  PdlTriggerIf(!a.pdl_early);
  const int64_t base = (static_cast<int64_t>(li) * a.n_heads + h) * a.n_splits;
  float mx = -INFINITY;
  for (int s = 0; s < n_split; ++s) mx = fmaxf(mx, a.partial_ml[2 * (base + s)]);
  float L = 0.0f, O = 0.0f;  // split 0 is never empty, so mx is finite
  for (int s = 0; s < n_split; ++s) {
    const float f = exp2f(a.partial_ml[2 * (base + s)] - mx);
    L = fmaf(a.partial_ml[2 * (base + s) + 1], f, L);
    O = fmaf(a.partial_o[(base + s) * hd + d], f, O);
  }
  OutRow(a, row, h, hd)[d] = F32ToBf16(O / L);
}

// grid (n_tiles, n_kv_heads). Thread t serves pair t / 4 = (tile row, q head of the group) and the
// 16-byte chunks c = t % 4 + 4 i of the head vector (interleaved so that the 4 threads of a pair read
// 64 contiguous bytes of a shared-memory row: no bank conflicts, and the 8 pairs of a warp broadcast).
template <bool kF16, int HD>
__global__ __launch_bounds__(kPrefillThreads) void AttnPrefillKernel(AttentionArgs a) {
  constexpr int kChunks = HD / 8;
  constexpr int kMine = kChunks / 4;
  __shared__ __align__(16) uint16_t sk[kPrefillKeys][HD];
  __shared__ __align__(16) uint16_t sv[kPrefillKeys][HD];
  const PrefillTile tile = a.tiles[blockIdx.x];
  const int hk = blockIdx.y;
  const int group = a.n_heads / a.kv.n_kv_heads;
  const int pair = threadIdx.x / 4, part = threadIdx.x % 4;
  const int rr = pair / group, g = pair % group;
  const bool pair_valid = rr < tile.n_rows;
  const int row = tile.first_row + min(rr, tile.n_rows - 1);
  const int h = hk * group + g;
  const int pos = a.batch.positions[row];
  const DevSeq seq = a.batch.seqs[tile.seq];
  const int kv_end = a.batch.positions[tile.first_row + tile.n_rows - 1] + 1;

  float q[kMine][8], o[kMine][8];
#pragma unroll
  for (int i = 0; i < kMine; ++i) {
    LoadBf16x8(QRow(a, row, h, HD) + (part + 4 * i) * 8, q[i]);
#pragma unroll
    for (int e = 0; e < 8; ++e) q[i][e] *= a.scale * kLog2e, o[i][e] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;

  const int64_t head_elems = static_cast<int64_t>(a.kv.page_size) * HD;
  const int64_t page_elems = head_elems * a.kv.n_kv_heads;
  const uint16_t* kpool = static_cast<const uint16_t*>(a.kv.k) + hk * head_elems;
  const uint16_t* vpool = static_cast<const uint16_t*>(a.kv.v) + hk * head_elems;
  for (int k0 = 0; k0 < kv_end; k0 += kPrefillKeys) {
    __syncthreads();  // the previous tile is fully read
    for (int e = threadIdx.x; e < kPrefillKeys * kChunks; e += kPrefillThreads) {
      const int kk = e / kChunks, c = e % kChunks, j = k0 + kk;
      uint4 kv4 = make_uint4(0, 0, 0, 0), vv4 = make_uint4(0, 0, 0, 0);  // zeros past the end: 0 * p stays 0
      if (j < kv_end) {
        const int64_t page = a.batch.pages[seq.first_page + j / a.kv.page_size];
        const int64_t off = page * page_elems + static_cast<int64_t>(j % a.kv.page_size) * HD + c * 8;
        kv4 = Ld16(kpool + off);
        vv4 = Ld16(vpool + off);
      }
      St16(&sk[kk][c * 8], kv4);
      St16(&sv[kk][c * 8], vv4);
    }
    __syncthreads();
    const int n_keys = min(kPrefillKeys, kv_end - k0);
    for (int kb = 0; kb < n_keys; kb += kPrefillBatch) {
      float s[kPrefillBatch];
#pragma unroll
      for (int t = 0; t < kPrefillBatch; ++t) {
        float acc = 0.0f;
#pragma unroll
        for (int i = 0; i < kMine; ++i) {
          float kf[8];
          LoadKv8<kF16>(&sk[kb + t][(part + 4 * i) * 8], kf);
#pragma unroll
          for (int e = 0; e < 8; ++e) acc = fmaf(q[i][e], kf[e], acc);
        }
        acc += __shfl_xor_sync(kFullMask, acc, 1);
        acc += __shfl_xor_sync(kFullMask, acc, 2);
        const int j = k0 + kb + t;
        s[t] = (kb + t < n_keys && j <= pos) ? acc : -INFINITY;
      }
      float mx = m;
#pragma unroll
      for (int t = 0; t < kPrefillBatch; ++t) mx = fmaxf(mx, s[t]);
      const float mu = mx == -INFINITY ? 0.0f : mx;  // all masked so far: keep exp2 finite
      const float corr = exp2f(m - mu);
      l *= corr;
#pragma unroll
      for (int i = 0; i < kMine; ++i)
#pragma unroll
        for (int e = 0; e < 8; ++e) o[i][e] *= corr;
#pragma unroll
      for (int t = 0; t < kPrefillBatch; ++t) {
        const float p = exp2f(s[t] - mu);
        l += p;
#pragma unroll
        for (int i = 0; i < kMine; ++i) {
          float vf[8];
          LoadKv8<kF16>(&sv[kb + t][(part + 4 * i) * 8], vf);
#pragma unroll
          for (int e = 0; e < 8; ++e) o[i][e] = fmaf(p, vf[e], o[i][e]);
        }
      }
      m = mx;
    }
  }
  if (pair_valid) {
    const float inv = 1.0f / l;  // key 0 is always visible, so l > 0
    uint16_t* out = OutRow(a, row, h, HD);
#pragma unroll
    for (int i = 0; i < kMine; ++i) {
      const float* v = o[i];
      St16(out + (part + 4 * i) * 8,
           make_uint4(PackBf16(v[0] * inv, v[1] * inv), PackBf16(v[2] * inv, v[3] * inv),
                      PackBf16(v[4] * inv, v[5] * inv), PackBf16(v[6] * inv, v[7] * inv)));
    }
  }
}

// ---- prefill on tensor cores ----
// The CPU emulator (tools/cuda_emu) has no tensor cores: there, and on devices below sm_80 (no bf16
// mma), the CUDA-core kernel above serves. Fragment layouts below are those of the PTX ISA for
// mma.m16n8k16 with .bf16 ("Matrix Fragments for mma.m16n8k16"); lane = 4 gq + tq, and
//   A (16x16, row-major): reg 0 = (row gq, cols 2tq, 2tq+1), reg 1 = row gq+8, regs 2, 3 = cols + 8;
//   B (16x8, k x n):      reg 0 = (k 2tq, 2tq+1; n gq),     reg 1 = k + 8;
//   C (16x8, f32):        c0, c1 = (row gq, cols 2tq, 2tq+1), c2, c3 = row gq+8;
// the lower-indexed element of a pair sits in the low half of a register.
#ifndef HYMT_CUDA_EMU

constexpr int kTcWarps = 4;
constexpr int kTcThreads = 32 * kTcWarps;
constexpr int kTcPairs = 16 * kTcWarps;  // (row, head) pairs per block: one m16 tile per warp
static_assert(kTcPairs == kPrefillPairs, "the tensor-core kernel takes the CUDA-core kernel's tiles");
constexpr int kTcKeys = 64;  // positions per K/V tile
// Blocks per SM the registers must allow (at most 168 a thread): three fit an H100/H200's shared memory.
constexpr int kTcMinBlocks = 3;
constexpr int kTcPad = 8;  // shared rows padded by 16 bytes: the 8 rows an ldmatrix reads hit distinct banks

// Dynamic shared memory: 2 stages x (K, V) x kTcKeys rows of head_dim + kTcPad bf16.
constexpr size_t TcSmemBytes(int hd) {
  return size_t{2} * 2 * kTcKeys * (hd + kTcPad) * sizeof(uint16_t);
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
__device__ __forceinline__ uint32_t SmemAddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// 16 bytes global -> shared, asynchronously; zeros instead when !valid (src is then not read).
__device__ __forceinline__ void CpAsync16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(SmemAddr(dst)), "l"(src),
               "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void CpAsyncCommit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
// Waits until at most n of this thread's committed groups are still in flight.
template <int n>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(n) : "memory");
}
// Four 8x8 bf16 matrices; lanes 8i..8i+7 give the row addresses of matrix i, which lands in r[i].
__device__ __forceinline__ void LdMatrixX4(uint32_t r[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SmemAddr(p)));
}
// The same, each matrix transposed (rows in shared memory become columns of the fragment).
__device__ __forceinline__ void LdMatrixX4T(uint32_t r[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SmemAddr(p)));
}
// c += A B for a 16x16 A and a 16x8 B (bf16), f32 accumulators.
__device__ __forceinline__ void MmaBf16(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// Two floats as bf16 (round to nearest even) in one register, lo in the low half.
__device__ __forceinline__ uint32_t PackBf16x2(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  uint32_t r;
  memcpy(&r, &h, 4);
  return r;
}
#endif

// 1-D grid of n_tiles * n_kv_heads blocks, kTcThreads threads, TcSmemBytes(HD) of dynamic shared memory.
// Block b serves kv head b % n_kv_heads and tile n_tiles - 1 - b / n_kv_heads: a sequence's later tiles
// see more keys, so they start first and the short ones fill the tail. Warp w holds pairs 16w..16w+15
// (pair = tile row * group + head in group, as in AttnPrefillKernel); its lane owns pairs 16w + gq and
// 16w + gq + 8, i.e. rows gq and gq + 8 of the warp's S and O tiles.
template <int HD>
__global__ __launch_bounds__(kTcThreads, kTcMinBlocks) void AttnPrefillTcKernel(AttentionArgs a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  constexpr int kStride = HD + kTcPad;                // elements per shared row
  constexpr int kStage = 2 * kTcKeys * kStride;       // K then V
  constexpr int kChunks = HD / 8;                     // 16-byte chunks per row
  constexpr int kRowsPerPass = kTcThreads / kChunks;  // rows one pass of the block loads
  constexpr int kDimSteps = HD / 16;                  // k-steps of Q K^T (and pairs of O's n-tiles)
  constexpr int kKeyTiles = kTcKeys / 8;              // n-tiles of S
  extern __shared__ __align__(16) uint16_t tc_smem[];

  const int hk = static_cast<int>(blockIdx.x) % a.kv.n_kv_heads;
  const PrefillTile tile = a.tiles[a.n_tiles - 1 - static_cast<int>(blockIdx.x) / a.kv.n_kv_heads];
  const int group = a.n_heads / a.kv.n_kv_heads;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int gq = lane / 4, tq = lane % 4;
  const DevSeq seq = a.batch.seqs[tile.seq];
  const int kv_end = a.batch.positions[tile.first_row + tile.n_rows - 1] + 1;

  // This lane's two pairs. Pairs past the tile (short tiles, groups that are not powers of two) compute
  // the tile's last row and store nothing.
  int row[2], head[2], pos[2];
  bool valid[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int pair = 16 * warp + gq + 8 * i;
    const int rr = pair / group;
    valid[i] = rr < tile.n_rows;
    row[i] = tile.first_row + min(rr, tile.n_rows - 1);
    head[i] = hk * group + pair % group;
    pos[i] = a.batch.positions[row[i]];
  }
  // Q as A fragments, straight from global memory (read once): 4-byte words of 2 dims each.
  uint32_t qf[kDimSteps][4];
  {
    const uint32_t* q0 = reinterpret_cast<const uint32_t*>(QRow(a, row[0], head[0], HD)) + tq;
    const uint32_t* q1 = reinterpret_cast<const uint32_t*>(QRow(a, row[1], head[1], HD)) + tq;
#pragma unroll
    for (int ks = 0; ks < kDimSteps; ++ks) {
      qf[ks][0] = q0[8 * ks];
      qf[ks][1] = q1[8 * ks];
      qf[ks][2] = q0[8 * ks + 4];
      qf[ks][3] = q1[8 * ks + 4];
    }
  }
  const float scale_log2 = a.scale * kLog2e;

  // K/V tile kt (positions 64 kt ..) into stage `stage`: thread t copies chunk t % kChunks of rows
  // t / kChunks + kRowsPerPass i. Positions at or past kv_end become zeros (V must stay finite: P is 0
  // there, and 0 * NaN would not be).
  const int64_t head_elems = static_cast<int64_t>(a.kv.page_size) * HD;
  const int64_t page_elems = head_elems * a.kv.n_kv_heads;
  const uint16_t* kpool = static_cast<const uint16_t*>(a.kv.k) + hk * head_elems;
  const uint16_t* vpool = static_cast<const uint16_t*>(a.kv.v) + hk * head_elems;
  const int chunk = threadIdx.x % kChunks, row0 = threadIdx.x / kChunks;
  auto load_tile = [&](int kt, int stage) {
    uint16_t* sk = tc_smem + stage * kStage + chunk * 8;
    uint16_t* sv = sk + kTcKeys * kStride;
#pragma unroll
    for (int i = 0; i < kTcKeys / kRowsPerPass; ++i) {
      const int kk = row0 + kRowsPerPass * i, j = kt * kTcKeys + kk;
      const bool in = j < kv_end;
      int64_t off = chunk * 8;
      if (in)
        off += a.batch.pages[seq.first_page + j / a.kv.page_size] * page_elems +
               static_cast<int64_t>(j % a.kv.page_size) * HD;
      CpAsync16(sk + kk * kStride, kpool + off, in);
      CpAsync16(sv + kk * kStride, vpool + off, in);
    }
    CpAsyncCommit();
  };

  float o[HD / 8][4];  // O: n-tile n holds dims 8n..8n+7
#pragma unroll
  for (int n = 0; n < HD / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY};  // running max of each row (log2 units), the same in a quad
  float l[2] = {0.0f, 0.0f};            // this lane's part of each row's sum (its 2 columns per n-tile)
  // Lane offsets of the ldmatrix row addresses (see the calls).
  const int k_row = (lane & 7) + (lane >> 4) * 8, k_col = ((lane >> 3) & 1) * 8;
  const int v_row = (lane & 7) + ((lane >> 3) & 1) * 8, v_col = (lane >> 4) * 8;

  const int n_kv_tiles = (kv_end + kTcKeys - 1) / kTcKeys;
  load_tile(0, 0);
  for (int kt = 0; kt < n_kv_tiles; ++kt) {
    const int stage = kt & 1;
    if (kt + 1 < n_kv_tiles) {
      load_tile(kt + 1, stage ^ 1);  // its stage was last read in iteration kt - 1, before the barrier
      CpAsyncWait<1>();
    } else {
      CpAsyncWait<0>();
    }
    __syncthreads();  // tile kt is in shared memory, from every thread's copies
    const uint16_t* sk = tc_smem + stage * kStage;
    const uint16_t* sv = sk + kTcKeys * kStride;

    // S = Q K^T. One ldmatrix.x4 gives the B fragments of key n-tiles 2np, 2np + 1 for one k-step:
    // matrices (keys +0..7, dims +0..7), (+0..7, +8..15), (+8..15, +0..7), (+8..15, +8..15).
    float s[kKeyTiles][4];
#pragma unroll
    for (int n = 0; n < kKeyTiles; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < kDimSteps; ++ks) {
#pragma unroll
      for (int np = 0; np < kKeyTiles / 2; ++np) {
        uint32_t b[4];
        LdMatrixX4(b, sk + (16 * np + k_row) * kStride + 16 * ks + k_col);
        MmaBf16(s[2 * np], qf[ks], b[0], b[1]);
        MmaBf16(s[2 * np + 1], qf[ks], b[2], b[3]);
      }
    }

    // Scale to log2 units; mask keys past each row's position (only tiles that reach past a row).
    const int k0 = kt * kTcKeys;
    if (k0 + kTcKeys - 1 > min(pos[0], pos[1])) {
#pragma unroll
      for (int n = 0; n < kKeyTiles; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int j = k0 + 8 * n + 2 * tq + (e & 1);
          s[n][e] = j <= pos[e >> 1] ? s[n][e] * scale_log2 : -INFINITY;
        }
    } else {
#pragma unroll
      for (int n = 0; n < kKeyTiles; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[n][e] *= scale_log2;
    }

    // Online softmax per row: the max over the quad's 4 lanes (which hold the row's 64 keys).
    float corr[2], mu[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      float mx = m[i];
#pragma unroll
      for (int n = 0; n < kKeyTiles; ++n) mx = fmaxf(mx, fmaxf(s[n][2 * i], s[n][2 * i + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 2));
      mu[i] = mx == -INFINITY ? 0.0f : mx;  // all masked so far: keep exp2 finite
      corr[i] = exp2f(m[i] - mu[i]);        // 0 on the first tile (m = -inf)
      m[i] = mx;
      l[i] *= corr[i];
    }
#pragma unroll
    for (int n = 0; n < HD / 8; ++n) {
      o[n][0] *= corr[0], o[n][1] *= corr[0];
      o[n][2] *= corr[1], o[n][3] *= corr[1];
    }
#pragma unroll
    for (int n = 0; n < kKeyTiles; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[n][e] = exp2f(s[n][e] - mu[e >> 1]);
        l[e >> 1] += s[n][e];
      }
    }

    // O += P V, 16 keys per k-step. P's A fragment is S's C fragments of key n-tiles 2kk, 2kk + 1
    // (rounded to bf16); one ldmatrix.x4.trans gives the B fragments of dim n-tiles 2dp, 2dp + 1:
    // matrices (keys +0..7, dims +0..7), (+8..15, +0..7), (+0..7, +8..15), (+8..15, +8..15).
#pragma unroll
    for (int kk = 0; kk < kTcKeys / 16; ++kk) {
      const uint32_t pa[4] = {PackBf16x2(s[2 * kk][0], s[2 * kk][1]), PackBf16x2(s[2 * kk][2], s[2 * kk][3]),
                              PackBf16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                              PackBf16x2(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int dp = 0; dp < kDimSteps; ++dp) {
        uint32_t b[4];
        LdMatrixX4T(b, sv + (16 * kk + v_row) * kStride + 16 * dp + v_col);
        MmaBf16(o[2 * dp], pa, b[0], b[1]);
        MmaBf16(o[2 * dp + 1], pa, b[2], b[3]);
      }
    }
    __syncthreads();  // every warp is done with this stage before the next iteration refills it
  }

  // O / l, rounded to bf16: each lane writes 2 dims per n-tile of its two rows.
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    float sum = l[i];
    sum += __shfl_xor_sync(kFullMask, sum, 1);
    sum += __shfl_xor_sync(kFullMask, sum, 2);
    const float inv = 1.0f / sum;  // key 0 is always visible, so sum > 0
    if (valid[i]) {
      uint32_t* out = reinterpret_cast<uint32_t*>(OutRow(a, row[i], head[i], HD)) + tq;
#pragma unroll
      for (int n = 0; n < HD / 8; ++n) out[4 * n] = PackBf16(o[n][2 * i] * inv, o[n][2 * i + 1] * inv);
    }
  }
#endif
}

template <int HD>
void LaunchPrefillTensorCores(const AttentionArgs& a, cudaStream_t stream) {
  constexpr size_t smem = TcSmemBytes(HD);
  // Above 48 KB (head_dim 128) a kernel must opt in; cheap, and allowed inside a graph capture.
  HYMT_CUDA_CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(&AttnPrefillTcKernel<HD>),
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  const unsigned blocks = static_cast<unsigned>(a.n_tiles) * static_cast<unsigned>(a.kv.n_kv_heads);
  AttnPrefillTcKernel<HD><<<blocks, kTcThreads, smem, stream>>>(a);
  HYMT_CUDA_CHECK_LAUNCH();
}

#else  // HYMT_CUDA_EMU

template <int HD>
void LaunchPrefillTensorCores(const AttentionArgs&, cudaStream_t) {
  Fail(ErrorCode::kUnsupported, "cuda: the tensor-core prefill kernel is not built in the CPU emulator");
}

#endif  // HYMT_CUDA_EMU

__device__ __forceinline__ float KvElement(const void* pool, DType t, int64_t i) {
  switch (t) {
    case DType::kF32:
      return static_cast<const float*>(pool)[i];
    case DType::kF16:
      return F16ToF32(static_cast<const uint16_t*>(pool)[i]);
    default:
      return Bf16ToF32(static_cast<const uint16_t*>(pool)[i]);
  }
}

// grid (rows, n_heads), one warp. Lane holds dims lane + 32 i (head_dim <= 256).
__global__ __launch_bounds__(32) void AttnSimpleKernel(AttentionArgs a) {
  const int row = blockIdx.x, h = blockIdx.y, lane = threadIdx.x;
  const int hd = a.kv.head_dim;
  const int hk = h / (a.n_heads / a.kv.n_kv_heads);
  const int pos = a.batch.positions[row];
  const DevSeq seq = a.batch.seqs[a.batch.row_seq[row]];
  const uint16_t* qr = QRow(a, row, h, hd);
  float q[8], o[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int d = lane + 32 * i;
    q[i] = d < hd ? Bf16ToF32(qr[d]) : 0.0f;
    o[i] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  for (int j = 0; j <= pos; ++j) {
    const int64_t page = a.batch.pages[seq.first_page + j / a.kv.page_size];
    const int64_t base = ((page * a.kv.n_kv_heads + hk) * a.kv.page_size + j % a.kv.page_size) * hd;
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int d = lane + 32 * i;
      if (d < hd) s = fmaf(q[i], KvElement(a.kv.k, a.kv.dtype, base + d), s);
    }
    s = WarpSum(s) * a.scale;
    const float m_new = fmaxf(m, s);
    const float corr = expf(m - m_new), p = expf(s - m_new);
    l = l * corr + p;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int d = lane + 32 * i;
      if (d < hd) o[i] = o[i] * corr + p * KvElement(a.kv.v, a.kv.dtype, base + d);
    }
    m = m_new;
  }
  uint16_t* out = OutRow(a, row, h, hd);
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int d = lane + 32 * i;
    if (d < hd) out[d] = F32ToBf16(o[i] / l);
  }
}

// Positions a decode sub-group loads per trip (AttnDecodeKernel's U): 4, or 1 with HYMT_ATTN_TRIP=1.
int DecodePositionsPerTrip() {
  static const int v = EnvEquals("HYMT_ATTN_TRIP", "1") ? 1 : 4;
  return v;
}

// The largest cluster: 16 blocks, above the portable 8, which H100 and H200 allow per kernel.
constexpr int kMaxClusterSplits = 16;

// Lets a kernel launch in clusters above 8 blocks (once per kernel and device).
void AllowNonPortableClusters(const void* kernel) {
#ifndef HYMT_CUDA_EMU
  int dev = 0;
  HYMT_CUDA_CHECK(cudaGetDevice(&dev));
  static std::mutex mu;
  static std::set<std::pair<const void*, int>> allowed;
  const std::lock_guard<std::mutex> lock(mu);
  if (!allowed.insert(std::make_pair(kernel, dev)).second) return;
  HYMT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
#else
  (void)kernel;
#endif
}

#ifndef HYMT_CUDA_EMU
// Whether clusters of `size` decode attention blocks can run on the current device (a partitioned GPU may
// hold too few SMs in a GPC), asked once per device and size of the instantiation with the most shared
// memory; where they cannot, decode attention keeps the combine launch.
bool ClustersFit(int size) {
  int dev = 0;
  HYMT_CUDA_CHECK(cudaGetDevice(&dev));
  static std::mutex mu;
  static std::map<std::pair<int, int>, bool> fit;
  const std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_pair(dev, size);
  if (const auto it = fit.find(key); it != fit.end()) return it->second;
  const auto kernel = AttnDecodeKernel<false, 128, 8, 4, true, true>;
  if (size > 8) AllowNonPortableClusters(reinterpret_cast<const void*>(kernel));
  cudaLaunchAttribute attr[1] = {ClusterAttribute(static_cast<unsigned>(size))};
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(1, 1, static_cast<unsigned>(size));
  config.blockDim = dim3(kDecodeThreads);
  config.attrs = attr;
  config.numAttrs = 1;
  int clusters = 0;
  const cudaError_t err = cudaOccupancyMaxActiveClusters(&clusters, kernel, &config);
  if (err != cudaSuccess) (void)cudaGetLastError();  // not fatal: no clusters of this size
  return fit[key] = err == cudaSuccess && clusters > 0;
}
#endif

std::atomic<int> g_attn_cluster{-1};
std::atomic<int64_t> g_attn_cluster_launches{0};

template <bool kF16, int HD>
void LaunchFastT(const AttentionArgs& args, cudaStream_t stream) {
  const int group = args.n_heads / args.kv.n_kv_heads;
  AttentionArgs a = args;
  if (a.n_decode > 0) {
    const bool pdl = PdlEnabled();
    a.pdl_early = PdlEarly(kPdlEarlySmall);
    const dim3 grid(a.kv.n_kv_heads, a.n_decode, a.n_splits);
    auto launch = [&]<int U, bool kRope, bool kCluster>() {
      auto go = [&](auto kernel) {
        if constexpr (kCluster) {
          if (a.n_splits > 8) AllowNonPortableClusters(reinterpret_cast<const void*>(kernel));
          LaunchClusters(pdl, static_cast<unsigned>(a.n_splits), kernel, grid, kDecodeThreads, 0, stream, a);
        } else {
          Launch(pdl, kernel, grid, kDecodeThreads, 0, stream, a);
        }
      };
      if (group == 1)
        go(AttnDecodeKernel<kF16, HD, 1, U, kRope, kCluster>);
      else if (group == 2)
        go(AttnDecodeKernel<kF16, HD, 2, U, kRope, kCluster>);
      else if (group <= 4)
        go(AttnDecodeKernel<kF16, HD, 4, U, kRope, kCluster>);
      else
        go(AttnDecodeKernel<kF16, HD, 8, U, kRope, kCluster>);
    };
    HYMT_CUDA_EXPECT(!a.rope.on || a.n_tiles == 0, "RoPE inside decode attention: decode rows only");
    HYMT_CUDA_EXPECT(!a.cluster || (a.n_splits > 1 && a.n_splits <= kMaxClusterSplits),
                     "decode attention in clusters of ", a.n_splits, " blocks");
    if (DecodePositionsPerTrip() == 1) {
      a.cluster = false;  // a measurement switch: the one-position trips keep the combine launch
      a.rope.on ? launch.template operator()<1, true, false>()
                : launch.template operator()<1, false, false>();
    } else if (a.cluster) {
      a.rope.on ? launch.template operator()<4, true, true>() : launch.template operator()<4, false, true>();
      g_attn_cluster_launches.fetch_add(1, std::memory_order_relaxed);
    } else {
      a.rope.on ? launch.template operator()<4, true, false>()
                : launch.template operator()<4, false, false>();
    }
    HYMT_CUDA_CHECK_LAUNCH();
    if (a.n_splits > 1 && !a.cluster) {
      constexpr int kCombineThreads = HD > 32 ? HD : 32;
      Launch(pdl, AttnCombineKernel, dim3(a.n_decode, a.n_heads), kCombineThreads, 0, stream, a);
    }
  }
  if (a.n_tiles > 0 && a.prefill_tensor_cores) {
    LaunchPrefillTensorCores<HD>(a, stream);
  } else if (a.n_tiles > 0) {
    AttnPrefillKernel<kF16, HD><<<dim3(a.n_tiles, a.kv.n_kv_heads), kPrefillThreads, 0, stream>>>(a);
    HYMT_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace

int AttnClusterSplits(int want_splits, int cc_major, int longest_ctx) {
#ifdef HYMT_CUDA_EMU
  (void)want_splits, (void)cc_major, (void)longest_ctx;
  return 0;
#else
  static const int env = EnvInt("HYMT_ATTN_CLUSTER", kAttnClusterByContext);
  static const int small_ctx = EnvInt("HYMT_ATTN_CLUSTER_CTX", kAttnClusterSmallCtx);
  const int set = g_attn_cluster.load(std::memory_order_relaxed);
  int size = set >= 0 ? set : env;
  if (size <= 0 || cc_major < 9 || want_splits <= 1) return 0;
  if (size == kAttnClusterByContext) size = longest_ctx <= small_ctx ? 8 : kMaxClusterSplits;
  if (size >= kMaxClusterSplits && ClustersFit(kMaxClusterSplits)) return kMaxClusterSplits;
  return ClustersFit(8) ? 8 : 0;
#endif
}

void SetAttnCluster(int size) {
  g_attn_cluster.store(size, std::memory_order_relaxed);
}

int64_t AttnClusterLaunches() {
  return g_attn_cluster_launches.load(std::memory_order_relaxed);
}

bool AttentionFastSupported(const KvView& kv, int n_heads) {
  const int group = kv.n_kv_heads > 0 ? n_heads / kv.n_kv_heads : 0;
  return (kv.dtype == DType::kBF16 || kv.dtype == DType::kF16) && (kv.head_dim == 64 || kv.head_dim == 128) &&
         group >= 1 && group <= 8;
}

bool PrefillTensorCoresSupported(const KvView& kv, int n_heads, int cc_major) {
#ifdef HYMT_CUDA_EMU
  return false;
#else
  return cc_major >= 8 && kv.dtype == DType::kBF16 && AttentionFastSupported(kv, n_heads);
#endif
}

int PrefillTileRows(int group) {
  int g = 1;
  while (g < group) g *= 2;
  return kPrefillPairs / g;
}

void LaunchAttentionFast(const AttentionArgs& a, cudaStream_t stream) {
  HYMT_CUDA_EXPECT(AttentionFastSupported(a.kv, a.n_heads));
  HYMT_CUDA_EXPECT(!a.prefill_tensor_cores || a.kv.dtype == DType::kBF16,
                   "the tensor-core prefill kernel reads ", "bf16 caches, not ", DTypeName(a.kv.dtype));
  const bool f16 = a.kv.dtype == DType::kF16;
  if (a.kv.head_dim == 64)
    f16 ? LaunchFastT<true, 64>(a, stream) : LaunchFastT<false, 64>(a, stream);
  else
    f16 ? LaunchFastT<true, 128>(a, stream) : LaunchFastT<false, 128>(a, stream);
}

void LaunchAttentionSimple(const AttentionArgs& a, cudaStream_t stream) {
  HYMT_CUDA_EXPECT(a.kv.head_dim <= 256, "head_dim ", a.kv.head_dim);
  if (a.q.rows == 0) return;
  AttnSimpleKernel<<<dim3(static_cast<unsigned>(a.q.rows), a.n_heads), 32, 0, stream>>>(a);
  HYMT_CUDA_CHECK_LAUNCH();
}

}  // namespace hymt::cuda
