// Token selection on the GPU, so that a step copies back a few values per sequence instead of rows x vocab
// logits: the argmax of each row (greedy decoding), and for sampling the k best scores of each row after
// the repetition penalty and the temperature (TopKKernel); the host finishes with top-p and the draw over
// those k (SampleFromTopK), exactly as its own path does.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cfloat>
#include <vector>

#include "backends/cuda/cuda_device.cuh"
#include "backends/cuda/cuda_internal.h"
#include "ops/ops.h"

namespace hymt::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float LoadLogit(const void* row, bool f32, int64_t i) {
  return f32 ? static_cast<const float*>(row)[i] : __bfloat162float(static_cast<const __nv_bfloat16*>(row)[i]);
}

// Keeps the larger value; on equal values the lower index (torch.argmax and the host path agree).
__device__ __forceinline__ void Better(float& v, int& i, float v2, int i2) {
  if (v2 > v || (v2 == v && i2 < i)) {
    v = v2;
    i = i2;
  }
}

// The best (value, index) of a warp, in every lane.
__device__ __forceinline__ void WarpBest(float& best, int& best_i) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1)
    Better(best, best_i, __shfl_xor_sync(kFullMask, best, off), __shfl_xor_sync(kFullMask, best_i, off));
}

// The best of a block (blockDim.x a multiple of 32, at most 1,024), in thread 0. Every thread calls it.
__device__ __forceinline__ void BlockBest(float& best, int& best_i) {
  WarpBest(best, best_i);
  __shared__ float sv[32];
  __shared__ int si[32];
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int warps = static_cast<int>(blockDim.x) / 32;
  if (lane == 0) sv[warp] = best, si[warp] = best_i;
  __syncthreads();
  if (warp != 0) return;
  best = lane < warps ? sv[lane] : -FLT_MAX;
  best_i = lane < warps ? si[lane] : 0x7fffffff;
  WarpBest(best, best_i);
}

// One block per row: each thread scans a strided slice, then a shared-memory tree reduction. A row
// holding a NaN or an infinity gets kNonFiniteLogits (Ops::SampleTokens): an all-NaN row would
// otherwise leave the index at its sentinel, far outside the vocabulary.
__global__ void ArgmaxRowsKernel(const char* logits, bool f32, int64_t row_bytes, int n_valid, int32_t* out) {
  const void* row = logits + static_cast<int64_t>(blockIdx.x) * row_bytes;
  float best = -FLT_MAX;
  int best_i = 0x7fffffff;
  int non_finite = 0;
  for (int i = threadIdx.x; i < n_valid; i += kThreads) {
    const float v = LoadLogit(row, f32, i);
    non_finite |= !isfinite(v);
    Better(best, best_i, v, i);
  }
  non_finite = __syncthreads_or(non_finite);
  __shared__ float sv[kThreads];
  __shared__ int si[kThreads];
  sv[threadIdx.x] = best;
  si[threadIdx.x] = best_i;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) {
      float v = sv[threadIdx.x];
      int i = si[threadIdx.x];
      Better(v, i, sv[threadIdx.x + s], si[threadIdx.x + s]);
      sv[threadIdx.x] = v;
      si[threadIdx.x] = i;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = non_finite ? kNonFiniteLogits : si[0];
}

// The same with 1,024 threads and 16-byte loads, 4 in flight per thread: one block reads a 128k-entry row
// of f32 logits (513 KB) in 8 waits on memory instead of ~125 (the scalar kernel above, kept for rows that
// are not 16-byte aligned). Ties and non-finite values as above; the order (value, then lower index) is
// total over finite values, so any reduction order gives the same answer.
constexpr int kArgmaxThreads = 1024;
constexpr int kArgmaxUnroll = 4;
constexpr int kArgmaxPartThreads = 256;
constexpr int kArgmaxPartUnits = 4;
constexpr int kArgmaxPartVec = kArgmaxPartThreads * kArgmaxPartUnits;  // 16-byte pieces a part

// LaunchArgmaxRows's scratch (kArgmaxScratchBytes): counters, then each part's best.
struct ArgmaxScratch {
  unsigned* count;  // [kArgmaxSplitRows]
  float* value;     // [rows][parts]
  int* index;
  int* non_finite;
};

// One round of a thread's scan: the 16-byte pieces base, base + kStride, ... (kUnits of them, those below
// n_vec), all loaded before any is used, into the thread's best (value, index) and its non-finite flag.
template <bool kF32, int kUnits, int kStride>
__device__ __forceinline__ void ScanPieces(const uint4* rv, int base, int n_vec, float& best, int& best_i,
                                           int& non_finite) {
  constexpr int E = kF32 ? 4 : 8;  // logits per 16 bytes
  uint4 w[kUnits];
#pragma unroll
  for (int u = 0; u < kUnits; ++u) {
    const int i = base + u * kStride;
    if (i < n_vec) w[u] = Ld16(rv + i);
  }
#pragma unroll
  for (int u = 0; u < kUnits; ++u) {
    const int i = base + u * kStride;
    if (i >= n_vec) continue;
    const uint32_t ws[4] = {w[u].x, w[u].y, w[u].z, w[u].w};
    float f[E];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      if constexpr (kF32) {
        f[k] = __uint_as_float(ws[k]);
      } else {
        f[2 * k] = Bf16Lo(ws[k]);
        f[2 * k + 1] = Bf16Hi(ws[k]);
      }
    }
#pragma unroll
    for (int e = 0; e < E; ++e) {
      non_finite |= !isfinite(f[e]);
      Better(best, best_i, f[e], i * E + e);
    }
  }
}

template <bool kF32>
__global__ __launch_bounds__(kArgmaxThreads) void ArgmaxRowsVecKernel(const char* logits, int64_t row_bytes,
                                                                     int n_valid, int32_t* out) {
  constexpr int E = kF32 ? 4 : 8;  // logits per 16 bytes
  const char* row = logits + static_cast<int64_t>(blockIdx.x) * row_bytes;
  const uint4* rv = reinterpret_cast<const uint4*>(row);
  const int n_vec = n_valid / E;
  float best = -FLT_MAX;
  int best_i = 0x7fffffff;
  int non_finite = 0;
  for (int base = threadIdx.x; base < n_vec; base += kArgmaxThreads * kArgmaxUnroll)
    ScanPieces<kF32, kArgmaxUnroll, kArgmaxThreads>(rv, base, n_vec, best, best_i, non_finite);
  for (int i = n_vec * E + threadIdx.x; i < n_valid; i += kArgmaxThreads) {  // the last n_valid % E
    const float v = LoadLogit(row, kF32, i);
    non_finite |= !isfinite(v);
    Better(best, best_i, v, i);
  }
  non_finite = __syncthreads_or(non_finite);
  BlockBest(best, best_i);
  if (threadIdx.x == 0) out[blockIdx.x] = non_finite ? kNonFiniteLogits : best_i;
}

// A row split over parts: block (p, r) reads row r's 16-byte pieces p * kArgmaxPartVec ... (p + 1) *
// kArgmaxPartVec - 1, four loads in flight per thread (the last part also the last n_valid % E logits),
// and writes its best to the scratch; the row's last block to finish (a counter per row, left at 0 again)
// merges the parts. At a 128k vocabulary in f32 that is 32 blocks reading 16 KB each at once, against one
// block whose 1,024 threads wait on memory 8 times in turn (ArgmaxRowsVecKernel: 13 us of a batch-1 step).
template <bool kF32>
__global__ __launch_bounds__(kArgmaxPartThreads) void ArgmaxPartsKernel(const char* logits, int64_t row_bytes,
                                                                        int n_valid, int parts,
                                                                        ArgmaxScratch s, int32_t* out) {
  constexpr int E = kF32 ? 4 : 8;
  const int part = static_cast<int>(blockIdx.x), row = static_cast<int>(blockIdx.y);
  const char* rowp = logits + static_cast<int64_t>(row) * row_bytes;
  const uint4* rv = reinterpret_cast<const uint4*>(rowp);
  const int n_vec = n_valid / E;
  const int begin = part * kArgmaxPartVec + static_cast<int>(threadIdx.x);
  float best = -FLT_MAX;
  int best_i = 0x7fffffff;
  int non_finite = 0;
  ScanPieces<kF32, kArgmaxPartUnits, kArgmaxPartThreads>(rv, begin, n_vec, best, best_i, non_finite);
  if (part == parts - 1) {
    for (int i = n_vec * E + static_cast<int>(threadIdx.x); i < n_valid; i += kArgmaxPartThreads) {
      const float v = LoadLogit(rowp, kF32, i);
      non_finite |= !isfinite(v);
      Better(best, best_i, v, i);
    }
  }
  non_finite = __syncthreads_or(non_finite);
  BlockBest(best, best_i);
  __shared__ int last;
  if (threadIdx.x == 0) {
    const int k = row * parts + part;
    s.value[k] = best;
    s.index[k] = best_i;
    s.non_finite[k] = non_finite;
    __threadfence();  // the part is visible before the count says so
    last = atomicAdd(s.count + row, 1u) == static_cast<unsigned>(parts - 1);
  }
  __syncthreads();
  if (!last || threadIdx.x >= 32) return;
  __threadfence();
  const volatile float* pv = s.value + row * parts;
  const volatile int* pi = s.index + row * parts;
  const volatile int* pn = s.non_finite + row * parts;
  best = -FLT_MAX;
  best_i = 0x7fffffff;
  non_finite = 0;
  for (int k = static_cast<int>(threadIdx.x); k < parts; k += 32) {
    Better(best, best_i, pv[k], pi[k]);
    non_finite |= pn[k];
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) non_finite |= __shfl_xor_sync(kFullMask, non_finite, off);
  WarpBest(best, best_i);
  if (threadIdx.x == 0) {
    out[row] = non_finite ? kNonFiniteLogits : best_i;
    s.count[row] = 0;
  }
}

// ---- top-k for sampling ----
// A score's key: an unsigned integer in the order of the floats (larger float, larger key), -0 as +0 (the
// host orders by value, then by id).
__device__ __forceinline__ uint32_t ScoreKey(float v) {
  if (v == 0.0f) v = 0.0f;
  const uint32_t b = __float_as_uint(v);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// Row r's candidates: gt (keys above the k-th) in any order, eq (keys equal to it), up to kMaxTies.
constexpr int kTopKThreads = 1024;
constexpr int kMaxTies = 256;

// One block per row. The score of token i is s_i = logit_i (after the repetition penalty for the row's
// history tokens: / p if positive, * p if negative, in f32) * inv_t, as the host computes it. A radix
// select over the keys (four passes of 8 bits; history tokens counted with their penalised key) finds
// the k-th largest key T; the candidates are the tokens above T and the lowest-id ones equal to it,
// written best first (ties by id). Flags: 1 for a row with a NaN or an infinity among its n_valid
// logits, 2 for more than kMaxTies ties at T (the host then samples the row itself).
__global__ __launch_bounds__(kTopKThreads) void TopKKernel(const char* logits, bool f32, int64_t row_bytes,
                                                          int n_valid, const TopKRowSpec* specs,
                                                          const int32_t* history, float* out_scores,
                                                          int32_t* out_ids, int32_t* flags) {
  const int r = blockIdx.x;
  const TopKRowSpec spec = specs[r];
  const void* row = logits + static_cast<int64_t>(r) * row_bytes;
  const int32_t* hist = history + spec.history_begin;
  const int n_hist = spec.history_count;
  const int k = min(spec.k, n_valid);
  const float inv_t = spec.inv_temperature, pen = spec.penalty;
  auto penalised = [&](float v) { return v < 0 ? v * pen : v / pen; };

  __shared__ unsigned bins[256];
  __shared__ uint32_t s_prefix;
  __shared__ int s_need;
  __shared__ int n_gt, n_eq;
  __shared__ float gt_s[kMaxTopK];
  __shared__ int32_t gt_i[kMaxTopK];
  __shared__ int32_t eq_i[kMaxTies];
  __shared__ float eq_s[kMaxTies];
  __shared__ float cand_s[kMaxTopK];
  __shared__ int32_t cand_i[kMaxTopK];

  uint32_t prefix = 0, mask = 0;
  int need = k;  // how many of the keys matching prefix, from the top, are still wanted
  int non_finite = 0;
  for (int pass = 0; pass < 4; ++pass) {
    const int shift = 24 - 8 * pass;
    for (int b = threadIdx.x; b < 256; b += kTopKThreads) bins[b] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < n_valid; i += kTopKThreads) {
      const float v = LoadLogit(row, f32, i);
      if (pass == 0) non_finite |= !isfinite(v);
      const uint32_t key = ScoreKey(v * inv_t);
      if ((key & mask) == prefix) atomicAdd(&bins[(key >> shift) & 255u], 1u);
    }
    __syncthreads();
    // History tokens: move each from its plain key's bin to its penalised key's.
    for (int j = threadIdx.x; j < n_hist; j += kTopKThreads) {
      const float v = LoadLogit(row, f32, hist[j]);
      const uint32_t kp = ScoreKey(v * inv_t), kq = ScoreKey(penalised(v) * inv_t);
      if ((kp & mask) == prefix) atomicSub(&bins[(kp >> shift) & 255u], 1u);
      if ((kq & mask) == prefix) atomicAdd(&bins[(kq >> shift) & 255u], 1u);
    }
    if (pass == 0) non_finite = __syncthreads_or(non_finite);
    __syncthreads();
    if (non_finite) break;
    if (threadIdx.x == 0) {
      int cum = 0, digit = 0;
      for (int b = 255; b >= 0; --b) {
        if (cum + static_cast<int>(bins[b]) >= need) {
          digit = b;
          break;
        }
        cum += static_cast<int>(bins[b]);
      }
      s_prefix = prefix | (static_cast<uint32_t>(digit) << shift);
      s_need = need - cum;
    }
    __syncthreads();
    prefix = s_prefix;
    need = s_need;
    mask |= 255u << shift;
  }
  if (non_finite) {
    if (threadIdx.x == 0) flags[r] = 1;
    return;
  }
  // prefix = T, the k-th largest key; `need` of the keys equal to T are taken (lowest ids first).
  if (threadIdx.x == 0) n_gt = n_eq = 0;
  __syncthreads();
  auto in_history = [&](int32_t id) {  // hist is sorted
    int lo = 0, hi = n_hist;
    while (lo < hi) {
      const int mid = (lo + hi) / 2;
      if (hist[mid] < id) lo = mid + 1; else hi = mid;
    }
    return lo < n_hist && hist[lo] == id;
  };
  auto offer = [&](float score, int32_t id) {
    const uint32_t key = ScoreKey(score);
    if (key > prefix) {
      const int slot = atomicAdd(&n_gt, 1);
      if (slot < kMaxTopK) gt_s[slot] = score, gt_i[slot] = id;
    } else if (key == prefix) {
      const int slot = atomicAdd(&n_eq, 1);
      if (slot < kMaxTies) eq_s[slot] = score, eq_i[slot] = id;
    }
  };
  for (int i = threadIdx.x; i < n_valid; i += kTopKThreads) {
    const float score = LoadLogit(row, f32, i) * inv_t;
    if (ScoreKey(score) >= prefix && !in_history(i)) offer(score, i);
  }
  for (int j = threadIdx.x; j < n_hist; j += kTopKThreads) offer(penalised(LoadLogit(row, f32, hist[j])) * inv_t, hist[j]);
  __syncthreads();
  if (n_eq > kMaxTies) {
    if (threadIdx.x == 0) flags[r] = 2;
    return;
  }
  // The `need` lowest ids of the ties, then everything best first (ties by id).
  const int gt = n_gt;  // == k - need
  const int tid = threadIdx.x;
  if (tid < n_eq) {
    int rank = 0;
    for (int j = 0; j < n_eq; ++j) rank += eq_i[j] < eq_i[tid];
    if (rank < need) cand_s[gt + rank] = eq_s[tid], cand_i[gt + rank] = eq_i[tid];
  }
  if (tid < gt) cand_s[tid] = gt_s[tid], cand_i[tid] = gt_i[tid];
  __syncthreads();
  if (tid < k) {
    const float si = cand_s[tid];
    const int32_t ii = cand_i[tid];
    int rank = 0;
    for (int j = 0; j < k; ++j) rank += cand_s[j] > si || (cand_s[j] == si && cand_i[j] < ii);
    out_scores[static_cast<int64_t>(r) * kMaxTopK + rank] = si;
    out_ids[static_cast<int64_t>(r) * kMaxTopK + rank] = ii;
  }
  if (threadIdx.x == 0) flags[r] = 0;
}

// Sums 16-byte words with four loads in flight per thread: bound by the DRAM read rate.
__global__ void ReadKernel(const uint4* p, size_t n, unsigned* sink) {
  unsigned acc = 0;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    const uint4 a = p[i], b = p[i + stride], c = p[i + 2 * stride], d = p[i + 3 * stride];
    acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
  }
  for (; i < n; i += stride) acc ^= p[i].x ^ p[i].y ^ p[i].z ^ p[i].w;
  if (acc == 0x12345678u) *sink = acc;  // keeps the loads
}

__global__ void FillKernel(uint32_t* p, size_t n) {
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    p[i] = static_cast<uint32_t>(i) * 2654435761u | 1u;
}

}  // namespace

void LaunchTopKRows(const void* logits, bool f32, int64_t rows, int64_t row_stride, int32_t n_valid,
                    const TopKRowSpec* specs, const int32_t* history, float* out_scores, int32_t* out_ids,
                    int32_t* flags, cudaStream_t stream) {
  if (rows == 0) return;
  TopKKernel<<<static_cast<unsigned>(rows), kTopKThreads, 0, stream>>>(static_cast<const char*>(logits), f32,
                                                                      row_stride * (f32 ? 4 : 2), n_valid, specs,
                                                                      history, out_scores, out_ids, flags);
  HYMT_CUDA_CHECK_LAUNCH();
}

void LaunchArgmaxRows(const void* logits, bool f32, int64_t rows, int64_t row_stride, int32_t n_valid,
                      int32_t* out, void* scratch, cudaStream_t stream) {
  if (rows == 0) return;
  const int64_t row_bytes = row_stride * (f32 ? 4 : 2);
  const char* p = static_cast<const char*>(logits);
  if (reinterpret_cast<uintptr_t>(p) % 16 == 0 && row_bytes % 16 == 0) {
    static const bool split_off = EnvEquals("HYMT_ARGMAX_SPLIT", "0");
    const int64_t n_vec = n_valid / (f32 ? 4 : 8);
    const int64_t parts = (n_vec + kArgmaxPartVec - 1) / kArgmaxPartVec;
    if (scratch != nullptr && !split_off && rows <= kArgmaxSplitRows && parts >= 2 &&
        parts <= kArgmaxMaxParts) {
      char* b = static_cast<char*>(scratch);
      const size_t slots = static_cast<size_t>(kArgmaxSplitRows) * kArgmaxMaxParts;
      const ArgmaxScratch s{reinterpret_cast<unsigned*>(b),
                            reinterpret_cast<float*>(b + 4 * kArgmaxSplitRows),
                            reinterpret_cast<int*>(b + 4 * kArgmaxSplitRows + 4 * slots),
                            reinterpret_cast<int*>(b + 4 * kArgmaxSplitRows + 8 * slots)};
      const dim3 grid(static_cast<unsigned>(parts), static_cast<unsigned>(rows));
      const int n = static_cast<int>(parts);
      if (f32) {
        ArgmaxPartsKernel<true><<<grid, kArgmaxPartThreads, 0, stream>>>(p, row_bytes, n_valid, n, s, out);
      } else {
        ArgmaxPartsKernel<false><<<grid, kArgmaxPartThreads, 0, stream>>>(p, row_bytes, n_valid, n, s, out);
      }
    } else if (f32) {
      ArgmaxRowsVecKernel<true><<<static_cast<unsigned>(rows), kArgmaxThreads, 0, stream>>>(p, row_bytes, n_valid, out);
    } else {
      ArgmaxRowsVecKernel<false><<<static_cast<unsigned>(rows), kArgmaxThreads, 0, stream>>>(p, row_bytes, n_valid, out);
    }
  } else {
    ArgmaxRowsKernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(p, f32, row_bytes, n_valid, out);
  }
  HYMT_CUDA_CHECK_LAUNCH();
}

double MeasureReadBandwidth(int device, size_t bytes, int repeats) {
  HYMT_CUDA_CHECK(cudaSetDevice(device));
  void* buf = nullptr;
  unsigned* sink = nullptr;
  HYMT_CUDA_CHECK(cudaMalloc(&buf, bytes));
  HYMT_CUDA_CHECK(cudaMalloc(&sink, 64));
  cudaDeviceProp prop;
  HYMT_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  cudaEvent_t a, b;
  HYMT_CUDA_CHECK(cudaEventCreate(&a));
  HYMT_CUDA_CHECK(cudaEventCreate(&b));
  FillKernel<<<1024, 256>>>(static_cast<uint32_t*>(buf), bytes / 4);
  HYMT_CUDA_CHECK_LAUNCH();
  float best_ms = 1e30f;
  std::vector<float> times;
  for (int r = 0; r < repeats + 2; ++r) {
    HYMT_CUDA_CHECK(cudaEventRecord(a));
    ReadKernel<<<prop.multiProcessorCount * 16, 256>>>(static_cast<const uint4*>(buf), bytes / 16, sink);
    HYMT_CUDA_CHECK_LAUNCH();
    HYMT_CUDA_CHECK(cudaEventRecord(b));
    HYMT_CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    HYMT_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    if (r >= 2) times.push_back(ms);  // two warm-ups
    best_ms = std::min(best_ms, ms);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaFree(buf);
  cudaFree(sink);
  std::sort(times.begin(), times.end());
  return static_cast<double>(bytes) / (times[times.size() / 2] * 1e-3) / 1e9;
}

}  // namespace hymt::cuda
