// Causal attention over the paged KV cache (layout [n_pages][n_kv_heads][page_size][head_dim]).
//
// Three kernels:
//   - decode (flash decoding): a block per (kv head, query row, context split). Its 128 threads form
//     sub-groups of head_dim / 8 lanes, one cache position per sub-group at a time (16-byte K and V loads
//     per lane); all q heads of the GQA group are scored against each K row while it is in registers, with
//     an online softmax per sub-group. Sub-groups, then splits (AttnCombineKernel), are merged with the
//     log-sum-exp rule. Bytes per row: ctx * n_kv_heads * head_dim * 2 (K + V) * 2 bytes.
//   - prefill: a block per (tile of query rows of one sequence, kv head) holds 64 (row, q head) pairs, 4
//     threads each (each a quarter of head_dim); 64-position K/V tiles are staged in shared memory and
//     shared by all pairs; online softmax over 16 keys at a time. CUDA cores, f32: flops 4 * rows * ctx/2 *
//     head_dim * n_heads (causal), about a tenth of the step's matmul flops at 2k tokens.
//   - simple: a warp per (row, q head), one position at a time. The oracle and the path for shapes the
//     fast kernels do not take (head_dim other than 64/128, groups above 8, f32 caches).
// Scores use exp2 with q pre-scaled by scale * log2(e); softmax and sums are f32.
#include "backends/cuda/cuda_device.cuh"

namespace hymt::cuda {
namespace {

constexpr float kLog2e = 1.4426950408889634f;
constexpr int kDecodeThreads = 128;
constexpr int kPrefillThreads = 256;
constexpr int kPrefillPairs = 64;  // (row, head) pairs per prefill block: 4 threads each
constexpr int kPrefillKeys = 64;   // positions per shared-memory K/V tile
constexpr int kPrefillBatch = 16;  // keys scored before each softmax update

// 8 cache values (16 bytes) as floats; the cache is bf16 or f16.
template <bool kF16>
__device__ __forceinline__ void LoadKv8(const uint16_t* p, float o[8]) {
  if constexpr (kF16) {
    const uint4 v = Ld16(p);
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      __half2 h;
      memcpy(&h, &w[i], 4);
      const float2 f = __half22float2(h);
      o[2 * i] = f.x, o[2 * i + 1] = f.y;
    }
  } else {
    LoadBf16x8(p, o);
  }
}

__device__ __forceinline__ const uint16_t* QRow(const AttentionArgs& a, int row, int h, int head_dim) {
  return static_cast<const uint16_t*>(a.q.data) + static_cast<int64_t>(row) * a.q.stride +
         static_cast<int64_t>(h) * head_dim;
}
__device__ __forceinline__ uint16_t* OutRow(const AttentionArgs& a, int row, int h, int head_dim) {
  return static_cast<uint16_t*>(a.out.data) + static_cast<int64_t>(row) * a.out.stride +
         static_cast<int64_t>(h) * head_dim;
}

// grid (n_kv_heads, n_decode, n_splits). GMAX >= group; heads past the group are skipped.
template <bool kF16, int HD, int GMAX>
__global__ __launch_bounds__(kDecodeThreads) void AttnDecodeKernel(AttentionArgs a) {
  constexpr int LP = HD / 8;                 // lanes per position
  constexpr int SUBS = kDecodeThreads / LP;  // positions in flight per block
  const int hk = blockIdx.x, li = blockIdx.y, split = blockIdx.z;
  const int group = a.n_heads / a.kv.n_kv_heads;
  const int row = a.decode_rows[li];
  const int ctx = a.batch.positions[row] + 1;
  const DevSeq seq = a.batch.seqs[a.batch.row_seq[row]];
  const int per = (ctx + a.n_splits - 1) / a.n_splits;
  const int j_begin = split * per;
  const int j_end = min(ctx, j_begin + per);
  const int sub = threadIdx.x / LP, sl = threadIdx.x % LP;

  float q[GMAX][8];
#pragma unroll
  for (int g = 0; g < GMAX; ++g) {
    if (g < group) {
      LoadBf16x8(QRow(a, row, hk * group + g, HD) + sl * 8, q[g]);
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
  // The trip count is the same for the whole block (the shuffles need every lane); sub-groups past the
  // end load a valid position and skip the update.
  for (int jb = j_begin; jb < j_end; jb += SUBS) {
    const int j = jb + sub;
    const bool valid = j < j_end;
    const int jj = valid ? j : j_begin;
    const int64_t page = a.batch.pages[seq.first_page + jj / a.kv.page_size];
    const int64_t off = page * page_elems + static_cast<int64_t>(jj % a.kv.page_size) * HD;
    float kf[8], vf[8];
    LoadKv8<kF16>(kpool + off, kf);
    LoadKv8<kF16>(vpool + off, vf);
    float s[GMAX];
#pragma unroll
    for (int g = 0; g < GMAX; ++g) {
      s[g] = 0.0f;
#pragma unroll
      for (int i = 0; i < 8; ++i) s[g] = fmaf(q[g][i], kf[i], s[g]);
#pragma unroll
      for (int off2 = LP / 2; off2 > 0; off2 >>= 1) s[g] += __shfl_xor_sync(kFullMask, s[g], off2);
    }
    if (valid) {
#pragma unroll
      for (int g = 0; g < GMAX; ++g) {
        if (g < group) {
          const float m_new = fmaxf(m[g], s[g]);
          const float corr = exp2f(m[g] - m_new);  // 0 on the first position (m = -inf)
          const float p = exp2f(s[g] - m_new);
          l[g] = l[g] * corr + p;
#pragma unroll
          for (int i = 0; i < 8; ++i) o[g][i] = fmaf(o[g][i], corr, p * vf[i]);
          m[g] = m_new;
        }
      }
    }
  }

  // Merge the sub-groups: (m, l, o) of each through shared memory.
  __shared__ float sm_m[SUBS][GMAX], sm_l[SUBS][GMAX];
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
    if (a.n_splits == 1) {
      OutRow(a, row, h, HD)[d] = F32ToBf16(O / L);
    } else {
      const int64_t base = (static_cast<int64_t>(li) * a.n_heads + h) * a.n_splits + split;
      a.partial_o[base * HD + d] = O;
      if (d == 0) a.partial_ml[2 * base] = mx, a.partial_ml[2 * base + 1] = L;
    }
  }
}

// grid (n_decode, n_heads), max(32, head_dim) threads: merges the splits of one (row, head).
__global__ void AttnCombineKernel(AttentionArgs a) {
  const int li = blockIdx.x, h = blockIdx.y, d = threadIdx.x;
  const int hd = a.kv.head_dim;
  if (d >= hd) return;
  const int row = a.decode_rows[li];
  const int64_t base = (static_cast<int64_t>(li) * a.n_heads + h) * a.n_splits;
  float mx = -INFINITY;
  for (int s = 0; s < a.n_splits; ++s) mx = fmaxf(mx, a.partial_ml[2 * (base + s)]);
  float L = 0.0f, O = 0.0f;  // split 0 is never empty, so mx is finite
  for (int s = 0; s < a.n_splits; ++s) {
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

template <bool kF16, int HD>
void LaunchFastT(const AttentionArgs& a, cudaStream_t stream) {
  const int group = a.n_heads / a.kv.n_kv_heads;
  if (a.n_decode > 0) {
    const dim3 grid(a.kv.n_kv_heads, a.n_decode, a.n_splits);
    if (group == 1)
      AttnDecodeKernel<kF16, HD, 1><<<grid, kDecodeThreads, 0, stream>>>(a);
    else if (group == 2)
      AttnDecodeKernel<kF16, HD, 2><<<grid, kDecodeThreads, 0, stream>>>(a);
    else if (group <= 4)
      AttnDecodeKernel<kF16, HD, 4><<<grid, kDecodeThreads, 0, stream>>>(a);
    else
      AttnDecodeKernel<kF16, HD, 8><<<grid, kDecodeThreads, 0, stream>>>(a);
    HYMT_CUDA_CHECK_LAUNCH();
    if (a.n_splits > 1) {
      constexpr int kCombineThreads = HD > 32 ? HD : 32;
      AttnCombineKernel<<<dim3(a.n_decode, a.n_heads), kCombineThreads, 0, stream>>>(a);
      HYMT_CUDA_CHECK_LAUNCH();
    }
  }
  if (a.n_tiles > 0) {
    AttnPrefillKernel<kF16, HD><<<dim3(a.n_tiles, a.kv.n_kv_heads), kPrefillThreads, 0, stream>>>(a);
    HYMT_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace

bool AttentionFastSupported(const KvView& kv, int n_heads) {
  const int group = kv.n_kv_heads > 0 ? n_heads / kv.n_kv_heads : 0;
  return (kv.dtype == DType::kBF16 || kv.dtype == DType::kF16) && (kv.head_dim == 64 || kv.head_dim == 128) &&
         group >= 1 && group <= 8;
}

int PrefillTileRows(int group) {
  int g = 1;
  while (g < group) g *= 2;
  return kPrefillPairs / g;
}

void LaunchAttentionFast(const AttentionArgs& a, cudaStream_t stream) {
  HYMT_CUDA_EXPECT(AttentionFastSupported(a.kv, a.n_heads));
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
