// KvWrite: each row's k and v into the paged cache at its position.
// Cache layout per pool: [n_pages][n_kv_heads][page_size][head_dim] in the cache type.
//
// Bytes: reads 2 * rows * n_kv_heads * head_dim bf16 and writes the same count in the cache type
// (4 KB per token per layer for the 7B in bf16).
#include "backends/cuda/cuda_device.cuh"

namespace hymt::cuda {
namespace {

constexpr int kThreads = 256;

// One block per row; threads over the row's n_kv_heads * head_dim values.
template <DType T>
__global__ __launch_bounds__(kThreads) void KvWriteKernel(MatView k, MatView v, KvView kv, BatchView batch) {
  const int row = blockIdx.x;
  const int pos = batch.positions[row];
  const DevSeq seq = batch.seqs[batch.row_seq[row]];
  const int64_t page = batch.pages[seq.first_page + pos / kv.page_size];
  const int slot = pos % kv.page_size;
  const uint16_t* kr = static_cast<const uint16_t*>(k.data) + static_cast<int64_t>(row) * k.stride;
  const uint16_t* vr = static_cast<const uint16_t*>(v.data) + static_cast<int64_t>(row) * v.stride;
  const int width = kv.n_kv_heads * kv.head_dim;
  for (int e = threadIdx.x; e < width; e += kThreads) {
    const int hk = e / kv.head_dim, d = e % kv.head_dim;
    const int64_t i = ((page * kv.n_kv_heads + hk) * kv.page_size + slot) * kv.head_dim + d;
    StoreKv<T>(kv.k, i, kr[e]);
    StoreKv<T>(kv.v, i, vr[e]);
  }
}

}  // namespace

void LaunchKvWrite(MatView k, MatView v, const KvView& kv, BatchView batch, cudaStream_t stream) {
  if (k.rows == 0) return;
  const unsigned blocks = static_cast<unsigned>(k.rows);
  switch (kv.dtype) {
    case DType::kBF16:
      KvWriteKernel<DType::kBF16><<<blocks, kThreads, 0, stream>>>(k, v, kv, batch);
      break;
    case DType::kF16:
      KvWriteKernel<DType::kF16><<<blocks, kThreads, 0, stream>>>(k, v, kv, batch);
      break;
    case DType::kF32:
      KvWriteKernel<DType::kF32><<<blocks, kThreads, 0, stream>>>(k, v, kv, batch);
      break;
    default:
      Fail(ErrorCode::kUnsupported, "cuda: KV cache type ", DTypeName(kv.dtype), " (bf16, f16 or f32)");
  }
  HYMT_CUDA_CHECK_LAUNCH();
}

}  // namespace hymt::cuda
