// RMSNorm of activation rows, RoPE fused with the per-head q/k RMSNorm, and (for decode steps) that fused
// with the KV write too.
//
// Bytes (bf16): RmsNorm reads x (the vectorised kernel once, the scalar one twice) and writes out: ~4 * rows *
// cols. RopeNorm reads and writes x once: 4 * rows * n_heads * head_dim. Both are a few microseconds at
// the 7B shapes, far below the matmuls; they are written for clarity (scalar, coalesced accesses).
#include "backends/cuda/cuda_device.cuh"

namespace hymt::cuda {
namespace {

constexpr int kNormThreads = 256;
constexpr int kMaxHeadDim = 256;  // RopeNorm: a warp holds a head, 4 pairs per lane

// One block per row. out = bf16(bf16(x * inv) * w): the normalised value is rounded to bf16 before the
// multiply by the weight, as HF does. Each thread writes only elements it read itself, so x and out may
// alias.
__global__ __launch_bounds__(kNormThreads) void RmsNormKernel(MatView x, WeightView w, float eps, MatView out,
                                                              bool pdl_early) {
  PdlTriggerIf(pdl_early);
  PdlWait();
  PdlTriggerIf(!pdl_early);
  __shared__ float scratch[32];
  const uint16_t* xr = static_cast<const uint16_t*>(x.data) + blockIdx.x * x.stride;
  uint16_t* o = static_cast<uint16_t*>(out.data) + blockIdx.x * out.stride;
  float ss = 0.0f;
  for (int64_t c = threadIdx.x; c < x.cols; c += kNormThreads) {
    const float v = Bf16ToF32(xr[c]);
    ss = fmaf(v, v, ss);
  }
  ss = BlockSum(ss, scratch);
  const float inv = rsqrtf(ss / static_cast<float>(x.cols) + eps);
  for (int64_t c = threadIdx.x; c < x.cols; c += kNormThreads) {
    const float normed = Bf16ToF32(F32ToBf16(Bf16ToF32(xr[c]) * inv));
    o[c] = F32ToBf16(normed * VectorElement(w, c));
  }
}

// The same with 16-byte loads and stores: thread t holds the 8-element chunks t, t + 256, ... (at most
// kChunks, so cols <= 2048 kChunks) in registers between the two passes. At one token row a decode step
// waits for this kernel twice a layer: 8 elements per load cut its latency.
template <int kChunks>
__global__ __launch_bounds__(kNormThreads) void RmsNormVecKernel(MatView x, WeightView w, float eps,
                                                                 MatView out, bool pdl_early) {
  PdlTriggerIf(pdl_early);
  __shared__ float scratch[32];
  const uint16_t* xr = static_cast<const uint16_t*>(x.data) + blockIdx.x * x.stride;
  uint16_t* o = static_cast<uint16_t*>(out.data) + blockIdx.x * out.stride;
  const int64_t n8 = x.cols / 8;
  // The weights before the wait: their loads overlap the previous kernel's tail.
  float g[kChunks][8];
#pragma unroll
  for (int i = 0; i < kChunks; ++i) {
    const int64_t c8 = threadIdx.x + static_cast<int64_t>(i) * kNormThreads;
    if (c8 < n8) {
      if (w.dtype == DType::kBF16) {
        LoadBf16x8(static_cast<const uint16_t*>(w.data) + 8 * c8, g[i]);
      } else {
#pragma unroll
        for (int j = 0; j < 8; ++j) g[i][j] = VectorElement(w, 8 * c8 + j);
      }
    }
  }
  PdlWait();
  PdlTriggerIf(!pdl_early);
  // The sum of squares as RowRmsInv (the GEMV's fused norm) takes it: chunk by chunk, in order.
  float v[kChunks][8];
  float ss = 0.0f;
#pragma unroll
  for (int i = 0; i < kChunks; ++i) {
    const int64_t c8 = threadIdx.x + static_cast<int64_t>(i) * kNormThreads;
    if (c8 < n8) {
      LoadBf16x8(xr + 8 * c8, v[i]);
#pragma unroll
      for (int j = 0; j < 8; ++j) ss = fmaf(v[i][j], v[i][j], ss);
    }
  }
  ss = BlockSum(ss, scratch);
  const float inv = rsqrtf(ss / static_cast<float>(x.cols) + eps);
#pragma unroll
  for (int i = 0; i < kChunks; ++i) {
    const int64_t c8 = threadIdx.x + static_cast<int64_t>(i) * kNormThreads;
    if (c8 < n8) {
      float r[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) r[j] = RmsNormValue(v[i][j], inv, g[i][j]);
      St16(o + 8 * c8, make_uint4(PackBf16(r[0], r[1]), PackBf16(r[2], r[3]), PackBf16(r[4], r[5]),
                                  PackBf16(r[6], r[7])));
    }
  }
}

// One warp per (row, head).
__global__ __launch_bounds__(128) void RopeNormKernel(MatView x, int n_heads, int head_dim,
                                                      WeightView inv_freq, WeightView norm, bool has_norm,
                                                      float eps, const int32_t* positions) {
  const int64_t item = static_cast<int64_t>(blockIdx.x) * 4 + (threadIdx.x >> 5);
  if (item >= x.rows * n_heads) return;  // whole warps leave together
  const int64_t row = item / n_heads;
  const int h = static_cast<int>(item % n_heads);
  uint16_t* v = static_cast<uint16_t*>(x.data) + row * x.stride + static_cast<int64_t>(h) * head_dim;
  const RopeLane r = RopeLanePrepare(head_dim, static_cast<float>(positions[row]), inv_freq, norm, has_norm);
  RopeNormApply<DType::kBF16>(v, v, head_dim, r, has_norm, eps, nullptr, 0);
}

// The decode step's RoPE, q/k norm and KV write in one launch: one warp per (row, item), items [0, H)
// the q heads, [H, H + Hk) the k heads (then stored into the cache), [H + Hk, H + 2 Hk) the v heads
// (copied into the cache). The same arithmetic as RopeNormKernel and KvWriteKernel.
template <DType C>
__global__ __launch_bounds__(128) void RopeNormKvKernel(MatView q, MatView k, MatView v, int n_heads,
                                                        WeightView inv_freq, WeightView q_norm,
                                                        bool has_q_norm, WeightView k_norm, bool has_k_norm,
                                                        float eps, KvView kv, BatchView batch,
                                                        bool pdl_early) {
  PdlTriggerIf(pdl_early);
  // Before the wait: the position, the cache slot and the lane's RoPE constants (none from an earlier
  // kernel); after it, the head's values from the q/k/v products.
  const int items = n_heads + 2 * kv.n_kv_heads;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * 4 + (threadIdx.x >> 5);
  if (item >= q.rows * items) return;  // whole warps leave together
  const int64_t row = item / items;
  const int h = static_cast<int>(item % items);
  const int pos = batch.positions[row];
  const int hd = kv.head_dim;
  if (h < n_heads) {
    const RopeLane r = RopeLanePrepare(hd, static_cast<float>(pos), inv_freq, q_norm, has_q_norm);
    PdlWait();
    PdlTriggerIf(!pdl_early);
    uint16_t* p = static_cast<uint16_t*>(q.data) + row * q.stride + static_cast<int64_t>(h) * hd;
    RopeNormApply<C>(p, p, hd, r, has_q_norm, eps, nullptr, 0);
    return;
  }
  const DevSeq seq = batch.seqs[batch.row_seq[row]];
  const int64_t page = batch.pages[seq.first_page + pos / kv.page_size];
  const int hk = (h - n_heads) % kv.n_kv_heads;
  const int64_t base = ((page * kv.n_kv_heads + hk) * kv.page_size + pos % kv.page_size) * hd;
  if (h < n_heads + kv.n_kv_heads) {
    const RopeLane r = RopeLanePrepare(hd, static_cast<float>(pos), inv_freq, k_norm, has_k_norm);
    PdlWait();
    PdlTriggerIf(!pdl_early);
    uint16_t* p = static_cast<uint16_t*>(k.data) + row * k.stride + static_cast<int64_t>(hk) * hd;
    RopeNormApply<C>(p, p, hd, r, has_k_norm, eps, kv.k, base);
    return;
  }
  PdlWait();
  PdlTriggerIf(!pdl_early);
  const uint16_t* p = static_cast<const uint16_t*>(v.data) + row * v.stride + static_cast<int64_t>(hk) * hd;
  for (int d = threadIdx.x & 31; d < hd; d += 32) StoreKv<C>(kv.v, base + d, p[d]);
}

}  // namespace

void LaunchRmsNorm(MatView x, const WeightView& w, float eps, MatView out, cudaStream_t stream) {
  if (x.rows == 0) return;
  const unsigned rows = static_cast<unsigned>(x.rows);
  const bool pdl = PdlEnabled();
  const bool early = PdlEarly(kPdlEarlySmall);
  auto aligned = [](const void* p, int64_t stride) {
    return reinterpret_cast<uintptr_t>(p) % 16 == 0 && stride % 8 == 0;
  };
  const bool vec = x.cols % 8 == 0 && x.cols <= 4 * 2048 && aligned(x.data, x.stride) &&
                   aligned(out.data, out.stride) &&
                   (w.dtype != DType::kBF16 || reinterpret_cast<uintptr_t>(w.data) % 16 == 0);
  if (vec && x.cols <= 2048)
    Launch(pdl, RmsNormVecKernel<1>, rows, kNormThreads, 0, stream, x, w, eps, out, early);
  else if (vec && x.cols <= 4096)
    Launch(pdl, RmsNormVecKernel<2>, rows, kNormThreads, 0, stream, x, w, eps, out, early);
  else if (vec)
    Launch(pdl, RmsNormVecKernel<4>, rows, kNormThreads, 0, stream, x, w, eps, out, early);
  else
    Launch(pdl, RmsNormKernel, rows, kNormThreads, 0, stream, x, w, eps, out, early);
}

void LaunchRopeNorm(MatView x, int n_heads, int head_dim, const WeightView& inv_freq, const WeightView* norm,
                    float eps, const int32_t* positions, cudaStream_t stream) {
  HYMT_CUDA_EXPECT(head_dim % 2 == 0 && head_dim <= kMaxHeadDim, "head_dim ", head_dim);
  const int64_t items = x.rows * n_heads;
  if (items == 0) return;
  RopeNormKernel<<<static_cast<unsigned>((items + 3) / 4), 128, 0, stream>>>(
      x, n_heads, head_dim, inv_freq, norm != nullptr ? *norm : WeightView{}, norm != nullptr, eps,
      positions);
  HYMT_CUDA_CHECK_LAUNCH();
}

void LaunchRopeNormKv(MatView q, MatView k, MatView v, int n_heads, const WeightView& inv_freq,
                      const WeightView* q_norm, const WeightView* k_norm, float eps, const KvView& kv,
                      BatchView batch, cudaStream_t stream) {
  HYMT_CUDA_EXPECT(kv.head_dim % 2 == 0 && kv.head_dim <= kMaxHeadDim, "head_dim ", kv.head_dim);
  const int64_t items = q.rows * (n_heads + 2 * kv.n_kv_heads);
  if (items == 0) return;
  const unsigned blocks = static_cast<unsigned>((items + 3) / 4);
  const WeightView qn = q_norm != nullptr ? *q_norm : WeightView{}, kn = k_norm != nullptr ? *k_norm : WeightView{};
  const bool has_q = q_norm != nullptr, has_k = k_norm != nullptr;
  const bool pdl = PdlEnabled();
  const bool early = PdlEarly(kPdlEarlySmall);
  switch (kv.dtype) {
    case DType::kBF16:
      Launch(pdl, RopeNormKvKernel<DType::kBF16>, blocks, 128, 0, stream, q, k, v, n_heads, inv_freq, qn,
             has_q, kn, has_k, eps, kv, batch, early);
      break;
    case DType::kF16:
      Launch(pdl, RopeNormKvKernel<DType::kF16>, blocks, 128, 0, stream, q, k, v, n_heads, inv_freq, qn,
             has_q, kn, has_k, eps, kv, batch, early);
      break;
    case DType::kF32:
      Launch(pdl, RopeNormKvKernel<DType::kF32>, blocks, 128, 0, stream, q, k, v, n_heads, inv_freq, qn,
             has_q, kn, has_k, eps, kv, batch, early);
      break;
    default:
      Fail(ErrorCode::kUnsupported, "cuda: KV cache type ", DTypeName(kv.dtype), " (bf16, f16 or f32)");
  }
  HYMT_CUDA_CHECK_LAUNCH();
}

}  // namespace hymt::cuda
