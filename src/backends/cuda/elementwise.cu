// Element-wise ops on bf16 activation rows: SwiGLU, the residual add, row gathers and buffer fills; and the
// copy of a replayed step's staged words.
//
// Bytes (bf16): SwiGlu reads 2 and writes 1 element per output (6 * rows * cols bytes), Add the same;
// GatherRows copies rows * row bytes. One block per row with coalesced scalar accesses: these are small
// next to the matmuls (14336 x 2 bytes x 3 = 86 KB per decode token for the 7B SwiGLU).
#include <algorithm>

#include "backends/cuda/cuda_device.cuh"

namespace hymt::cuda {
namespace {

constexpr int kThreads = 256;

// out = silu(gate) * up as HF's bf16 forward computes act_fn(gate) * up: silu in f32 rounded to bf16, then
// the product rounded. Each thread writes only what it read, so out may alias gate.
__global__ __launch_bounds__(kThreads) void SwiGluKernel(MatView gate, MatView up, MatView out) {
  const uint16_t* g = static_cast<const uint16_t*>(gate.data) + blockIdx.x * gate.stride;
  const uint16_t* u = static_cast<const uint16_t*>(up.data) + blockIdx.x * up.stride;
  uint16_t* o = static_cast<uint16_t*>(out.data) + blockIdx.x * out.stride;
  for (int64_t c = threadIdx.x; c < gate.cols; c += kThreads) {
    o[c] = F32ToBf16(SiluBf16(Bf16ToF32(g[c])) * Bf16ToF32(u[c]));
  }
}

__global__ __launch_bounds__(kThreads) void AddKernel(MatView x, MatView y) {
  uint16_t* a = static_cast<uint16_t*>(x.data) + blockIdx.x * x.stride;
  const uint16_t* b = static_cast<const uint16_t*>(y.data) + blockIdx.x * y.stride;
  for (int64_t c = threadIdx.x; c < x.cols; c += kThreads)
    a[c] = F32ToBf16(Bf16ToF32(a[c]) + Bf16ToF32(b[c]));
}

// Copies in 16-bit units (bf16 rows are one unit per element, f32 rows two).
__global__ __launch_bounds__(kThreads) void GatherRowsKernel(const uint16_t* x, int64_t x_stride_units,
                                                             const int32_t* rows, int64_t row_units,
                                                             uint16_t* out, int64_t out_stride_units) {
  const uint16_t* src = x + static_cast<int64_t>(rows[blockIdx.x]) * x_stride_units;
  uint16_t* dst = out + blockIdx.x * out_stride_units;
  for (int64_t c = threadIdx.x; c < row_units; c += kThreads) dst[c] = src[c];
}

__global__ void Fill16Kernel(uint16_t* p, int64_t n, uint16_t value) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    p[i] = value;
}

// One thread per word, blocks striding: the batch's words, then the ops area's (the fed ids over their slot).
__global__ __launch_bounds__(kThreads) void StageWordsKernel(StageWords batch, StageWords ops,
                                                             const int32_t* feed, int64_t feed_first,
                                                             int64_t feed_words) {
  const int64_t n = batch.words + ops.words;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    if (i < batch.words) {
      batch.dst[i] = batch.src[i];
      continue;
    }
    const int64_t j = i - batch.words;
    ops.dst[j] = j >= feed_first && j < feed_first + feed_words ? feed[j - feed_first] : ops.src[j];
  }
}

}  // namespace

void LaunchStageWords(StageWords batch, StageWords ops, const int32_t* feed, int64_t feed_first,
                      int64_t feed_words, cudaStream_t stream) {
  const int64_t n = batch.words + ops.words;
  if (n == 0) return;
  const int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, 256);
  StageWordsKernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(batch, ops, feed, feed_first,
                                                                           feed_words);
  HYMT_CUDA_CHECK_LAUNCH();
}

void LaunchSwiGlu(MatView gate, MatView up, MatView out, cudaStream_t stream) {
  if (gate.rows == 0) return;
  SwiGluKernel<<<static_cast<unsigned>(gate.rows), kThreads, 0, stream>>>(gate, up, out);
  HYMT_CUDA_CHECK_LAUNCH();
}

void LaunchAdd(MatView x, MatView y, cudaStream_t stream) {
  if (x.rows == 0) return;
  AddKernel<<<static_cast<unsigned>(x.rows), kThreads, 0, stream>>>(x, y);
  HYMT_CUDA_CHECK_LAUNCH();
}

void LaunchGatherRows(MatView x, int elem_bytes, const int32_t* rows, MatView out, cudaStream_t stream) {
  if (out.rows == 0) return;
  const int units = elem_bytes / 2;
  GatherRowsKernel<<<static_cast<unsigned>(out.rows), kThreads, 0, stream>>>(
      static_cast<const uint16_t*>(x.data), x.stride * units, rows, x.cols * units,
      static_cast<uint16_t*>(out.data), out.stride * units);
  HYMT_CUDA_CHECK_LAUNCH();
}

void LaunchFill16(void* p, int64_t n, uint16_t value, cudaStream_t stream) {
  if (n == 0) return;
  const int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, 65536);
  Fill16Kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(static_cast<uint16_t*>(p), n, value);
  HYMT_CUDA_CHECK_LAUNCH();
}

}  // namespace hymt::cuda
