// Whole-row dequantisation to bf16: the embedding gather (rows chosen by token ids) and the slabs of
// the quantised GEMM path (consecutive rows, dequantised into a scratch buffer that cuBLAS reads).
//
// Bytes: reads rows * DTypeBytes(w) and writes rows * cols * 2; no arithmetic worth counting.
#include "backends/cuda/cuda_device.cuh"

namespace hymt::cuda {
namespace {

constexpr int kThreads = 256;

// The host checks the ids it stages; ids fed on the device from a previous step's argmax are not
// checked there (kNonFiniteLogits is negative), so an id outside the table reads row 0, never past it.
__device__ __forceinline__ int64_t EmbedRow(int32_t id, int64_t rows) {
  return id >= 0 && id < rows ? id : 0;
}

// Row i of the output is weight row ids[i] (ids != null) or row0 + i. One block per output row; each
// thread decodes whole units and stores each 8-element piece with one 16-byte store.
template <DType T>
__global__ __launch_bounds__(kThreads) void DequantRowsKernel(WeightView w, const int32_t* ids, int64_t row0,
                                                              uint16_t* out, int64_t out_stride) {
  using F = Fmt<T>;
  const int64_t i = blockIdx.x;
  const int64_t row = ids != nullptr ? EmbedRow(ids[i], w.rows) : row0 + i;
  uint16_t* o = out + i * out_stride;
  const int units = static_cast<int>(w.cols / F::kUnitElems);
  for (int u = threadIdx.x; u < units; u += kThreads) {
    const typename F::Raw raw = F::Load(w, row, u);
    const typename F::Ctx ctx = F::MakeCtx(raw, u);
    StaticFor<0, F::kPieces>([&](auto pc) {
      constexpr int p = decltype(pc)::value;
      float v[8];
      F::template Dequant<p>(raw, ctx, u, v);
      St16(o + F::PieceCol(u, p), make_uint4(PackBf16(v[0], v[1]), PackBf16(v[2], v[3]), PackBf16(v[4], v[5]),
                                             PackBf16(v[6], v[7])));
    });
  }
}

// The simple version: one element at a time through WeightElement (any alignment, any cols).
__global__ __launch_bounds__(kThreads) void DequantRowsSimpleKernel(WeightView w, const int32_t* ids,
                                                                    int64_t row0, uint16_t* out,
                                                                    int64_t out_stride) {
  const int64_t i = blockIdx.x;
  const int64_t row = ids != nullptr ? EmbedRow(ids[i], w.rows) : row0 + i;
  for (int64_t c = threadIdx.x; c < w.cols; c += kThreads)
    out[i * out_stride + c] = F32ToBf16(WeightElement(w, row, c));
}

void Launch(const WeightView& w, const int32_t* ids, int64_t row0, int64_t n, uint16_t* out,
            int64_t out_stride, bool simple, cudaStream_t stream) {
  if (n == 0) return;
  const int unit = FmtUnitElems(w.dtype);
  const bool fast = !simple && unit > 0 && w.cols % unit == 0 && out_stride % 8 == 0 &&
                    reinterpret_cast<uintptr_t>(out) % 16 == 0 &&
                    reinterpret_cast<uintptr_t>(w.data) % 16 == 0;
  if (fast) {
    DispatchFmt(w.dtype, [&]<DType T>() {
      DequantRowsKernel<T><<<static_cast<unsigned>(n), kThreads, 0, stream>>>(w, ids, row0, out, out_stride);
    });
  } else {
    DequantRowsSimpleKernel<<<static_cast<unsigned>(n), kThreads, 0, stream>>>(w, ids, row0, out, out_stride);
  }
  HYMT_CUDA_CHECK_LAUNCH();
}

}  // namespace

void LaunchEmbed(const WeightView& table, const int32_t* ids, MatView out, bool simple, cudaStream_t stream) {
  Launch(table, ids, 0, out.rows, static_cast<uint16_t*>(out.data), out.stride, simple, stream);
}

void LaunchDequantRows(const WeightView& w, int64_t row0, int64_t n, uint16_t* out, cudaStream_t stream) {
  Launch(w, nullptr, row0, n, out, w.cols, false, stream);
}

}  // namespace hymt::cuda
