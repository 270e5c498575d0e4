// Token selection on the GPU: the argmax of each row of logits (greedy decoding), so a step copies back
// one id per sequence instead of rows x vocab logits. Sampling with temperature / top-k / top-p or a
// repetition penalty uses the host path (Ops::SampleTokens).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cfloat>
#include <vector>

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

void LaunchArgmaxRows(const void* logits, bool f32, int64_t rows, int64_t row_stride, int32_t n_valid, int32_t* out,
                      cudaStream_t stream) {
  if (rows == 0) return;
  ArgmaxRowsKernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
      static_cast<const char*>(logits), f32, row_stride * (f32 ? 4 : 2), n_valid, out);
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
