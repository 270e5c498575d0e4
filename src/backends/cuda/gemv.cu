// Matrix-vector products for decode: out[t, n] = sum_k x[t, k] * W[n, k] * scale for up to 8 token rows
// t, reading each weight byte once per call.
//
// Memory-bound: bytes = N * DTypeBytes(W, K) (+ the tiny x), flops = 2 * T * N * K. At the 7B shapes one
// token is ~0.5 flop per weight byte for bf16 against ~180 flop per byte the H200 could do, so only the
// weight stream matters. The kernel is built to keep that stream saturated:
//   - a group of G threads (32..256, a power of two) owns RPT output rows; its threads stride over the
//     row's "units" (one or two 16-byte loads each, see Fmt<T> in cuda_device.cuh), so a warp's loads are
//     contiguous 512-byte runs;
//   - each thread issues all loads of kUnroll units x RPT rows before it uses any (several loads in flight);
//   - each activation row is read with 16-byte loads from L1/L2 and reused across the RPT rows held in
//     registers, which keeps L1 traffic below the DRAM stream when T grows;
//   - G is chosen so that each thread runs ~2 iterations: K = 4096 bf16 gives G = 64 (4 rows per
//     256-thread block), K = 14336 gives G = 256.
// The partial sums of a group are reduced with warp shuffles and, when G > 32, shared memory.
//
// Q4_K with int8 activations (GemvQ4KInt8Kernel, the default): decoding 4-bit weights to f32 costs
// ~5-6 instructions per weight, which at 4.6 TB/s of Q4_K (~29 weights per clock per SM) exceeds what an
// SM issues. As in llama.cpp, the activation rows are first quantised to int8 (one scale per 16 values,
// QuantizeActKernel), and the dot products of a sub-block run on dp4a (4 multiply-adds per instruction):
//   sum_i x_i (d1 n_i - m1) = d1 (dx sum_i q_i n_i) - m1 (dx sum_i q_i),  x_i ~ dx q_i.
// The activation rounding (|x - dx q| <= dx / 2, dx = max|x| / 127 over 16 values) is the only change
// in the result; the tests bound it.
#include "backends/cuda/cuda_device.cuh"

namespace hymt::cuda {
namespace {

constexpr int kThreads = 256;

struct GemvArgs {
  WeightView w;
  const uint16_t* x;  // bf16 [n_tok, K]
  int64_t x_stride;
  void* out;  // bf16 or f32 [n_tok, N]
  int64_t out_stride;
  int n_tok;  // <= R
  int group;  // G: threads per row group
  bool out_f32;
};

// Rows of one group for R token rows: more rows per thread as R grows, so that the activation loads
// (R per piece) are shared by more weight rows.
// Q6_K's units are large (3 x 16-byte loads): 4 rows of them do not fit in registers.
constexpr int RowsPerThread(DType t, int r) {
  const int rpt = r >= 8 ? 4 : (r >= 2 ? 2 : 1);
  return t == DType::kQ6_K && rpt > 2 ? 2 : rpt;
}
constexpr int UnitsInFlight(int rpt) {
  return rpt >= 4 ? 1 : 4 / rpt;
}

// Sums each (row, token) accumulator over the group's G threads and stores it (times the weight scale).
// Every thread of the block must call it (it may synchronise the block).
template <int RPT, int R>
__device__ __forceinline__ void ReduceAndStore(float (&acc)[RPT][R], const GemvArgs& a, int lane_g, int grp,
                                               int64_t row0) {
  const int G = a.group;
#pragma unroll
  for (int r = 0; r < RPT; ++r)
#pragma unroll
    for (int t = 0; t < R; ++t) acc[r][t] = WarpSum(acc[r][t]);

  auto store = [&](int r, int t, float v) {
    const int64_t row = row0 + r;
    if (row < a.w.rows && t < a.n_tok) {
      v *= a.w.scale;
      if (a.out_f32)
        static_cast<float*>(a.out)[t * a.out_stride + row] = v;
      else
        static_cast<uint16_t*>(a.out)[t * a.out_stride + row] = F32ToBf16(v);
    }
  };
  if (G == 32) {
    // Every lane holds every sum; lane r * R + t stores (compile-time indices into acc).
#pragma unroll
    for (int r = 0; r < RPT; ++r)
#pragma unroll
      for (int t = 0; t < R; ++t)
        if (lane_g == r * R + t) store(r, t, acc[r][t]);
  } else {
    __shared__ float red[kThreads / 32][RPT * R];
    const int warp = threadIdx.x >> 5;
    if ((threadIdx.x & 31) == 0) {
#pragma unroll
      for (int r = 0; r < RPT; ++r)
#pragma unroll
        for (int t = 0; t < R; ++t) red[warp][r * R + t] = acc[r][t];
    }
    __syncthreads();         // G is the same for the whole block, so every thread reaches this
    if (lane_g < RPT * R) {  // the group's first warp: one lane per (row, token)
      const int first = grp * (G / 32);
      float s = 0.0f;
      for (int wi = 0; wi < G / 32; ++wi) s += red[first + wi][lane_g];
      store(lane_g / R, lane_g % R, s);
    }
  }
}

template <DType T, int R>
__global__ __launch_bounds__(kThreads) void GemvKernel(GemvArgs a) {
  using F = Fmt<T>;
  constexpr int RPT = RowsPerThread(T, R);
  constexpr int kUnroll = UnitsInFlight(RPT);
  const int G = a.group;
  const int lane_g = threadIdx.x & (G - 1);
  const int grp = threadIdx.x / G;
  const int64_t N = a.w.rows;
  const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * (kThreads / G) + grp) * RPT;
  const int units = static_cast<int>(a.w.cols / F::kUnitElems);

  // Rows past N and tokens past n_tok read valid memory (clamped) and are not stored.
  int64_t rows[RPT];
#pragma unroll
  for (int r = 0; r < RPT; ++r) rows[r] = min(row0 + r, N - 1);
  const uint16_t* xr[R];
#pragma unroll
  for (int t = 0; t < R; ++t) xr[t] = a.x + static_cast<int64_t>(min(t, a.n_tok - 1)) * a.x_stride;

  float acc[RPT][R];
#pragma unroll
  for (int r = 0; r < RPT; ++r)
#pragma unroll
    for (int t = 0; t < R; ++t) acc[r][t] = 0.0f;

  for (int u0 = lane_g; u0 < units; u0 += G * kUnroll) {
    typename F::Raw raw[kUnroll][RPT];
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      const int u = min(u0 + k * G, units - 1);
#pragma unroll
      for (int r = 0; r < RPT; ++r) raw[k][r] = F::Load(a.w, rows[r], u);
    }
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      const int u = u0 + k * G;
      if (u < units) {
        typename F::Ctx ctx[RPT];
#pragma unroll
        for (int r = 0; r < RPT; ++r) ctx[r] = F::MakeCtx(raw[k][r], u);
        StaticFor<0, F::kPieces>([&](auto pc) {
          constexpr int p = decltype(pc)::value;
          const int col = F::PieceCol(u, p);
          float wv[RPT][8];
#pragma unroll
          for (int r = 0; r < RPT; ++r) F::template Dequant<p>(raw[k][r], ctx[r], u, wv[r]);
#pragma unroll
          for (int t = 0; t < R; ++t) {
            float xv[8];
            LoadBf16x8(xr[t] + col, xv);
#pragma unroll
            for (int r = 0; r < RPT; ++r)
#pragma unroll
              for (int i = 0; i < 8; ++i) acc[r][t] = fmaf(wv[r][i], xv[i], acc[r][t]);
          }
        });
      }
    }
  }

  ReduceAndStore<RPT, R>(acc, a, lane_g, grp, row0);
}

// Activation rows for the int8 path: x bf16 [n_tok, K] -> q int8 [n_tok, K] and, per 16 values,
// {dx, dx * sum q} with dx = max|x| / 127. One block per row.
__global__ __launch_bounds__(kThreads) void QuantizeActKernel(const uint16_t* x, int64_t x_stride, int64_t K,
                                                              int8_t* xq, float2* xds) {
  const int64_t t = blockIdx.x;
  const uint16_t* xr = x + t * x_stride;
  for (int64_t g = threadIdx.x; g < K / 16; g += kThreads) {
    float v[16];
    LoadBf16x8(xr + 16 * g, v);
    LoadBf16x8(xr + 16 * g + 8, v + 8);
    float amax = 0.0f;
#pragma unroll
    for (int i = 0; i < 16; ++i) amax = fmaxf(amax, fabsf(v[i]));
    const float dx = amax / 127.0f, inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    uint32_t words[4] = {0, 0, 0, 0};
    int sum = 0;
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const int q = max(-127, min(127, __float2int_rn(v[i] * inv)));
      sum += q;
      words[i / 4] |= static_cast<uint32_t>(q & 0xff) << (8 * (i % 4));
    }
    St16(xq + t * K + 16 * g, make_uint4(words[0], words[1], words[2], words[3]));
    xds[t * (K / 16) + g] = make_float2(dx, dx * static_cast<float>(sum));
  }
}

// Q4_K x int8 activations (see the file comment). Same grid, groups and reduction as GemvKernel; unit u
// is the 16 quant bytes of Fmt<kQ4_K> (low nibbles: 16 values of sub-block 2j at column c, high nibbles:
// 16 values of sub-block 2j+1 at c + 32), each half dotted with 16 int8 activations by 4 dp4a.
template <int R>
__global__ __launch_bounds__(kThreads) void GemvQ4KInt8Kernel(GemvArgs a, const int8_t* xq,
                                                              const float2* xds) {
  using F = Fmt<DType::kQ4_K>;
  constexpr int RPT = RowsPerThread(DType::kQ4_K, R);
  constexpr int kUnroll = UnitsInFlight(RPT);
  const int G = a.group;
  const int lane_g = threadIdx.x & (G - 1);
  const int grp = threadIdx.x / G;
  const int64_t N = a.w.rows, K = a.w.cols;
  const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * (kThreads / G) + grp) * RPT;
  const int units = static_cast<int>(K / F::kUnitElems);

  int64_t rows[RPT];
#pragma unroll
  for (int r = 0; r < RPT; ++r) rows[r] = min(row0 + r, N - 1);
  const int8_t* xqr[R];
  const float2* xdr[R];
#pragma unroll
  for (int t = 0; t < R; ++t) {
    const int64_t tt = min(t, a.n_tok - 1);
    xqr[t] = xq + tt * K;
    xdr[t] = xds + tt * (K / 16);
  }
  float acc[RPT][R];
#pragma unroll
  for (int r = 0; r < RPT; ++r)
#pragma unroll
    for (int t = 0; t < R; ++t) acc[r][t] = 0.0f;

  for (int u0 = lane_g; u0 < units; u0 += G * kUnroll) {
    typename F::Raw raw[kUnroll][RPT];
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      const int u = min(u0 + k * G, units - 1);
#pragma unroll
      for (int r = 0; r < RPT; ++r) raw[k][r] = F::Load(a.w, rows[r], u);
    }
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      const int u = u0 + k * G;
      if (u < units) {
        const int c_lo = F::PieceCol(u, 0), c_hi = c_lo + 32;
        typename F::Ctx ctx[RPT];
        int lo[RPT][4], hi[RPT][4];
#pragma unroll
        for (int r = 0; r < RPT; ++r) {
          ctx[r] = F::MakeCtx(raw[k][r], u);
          const uint32_t w[4] = {raw[k][r].qs.x, raw[k][r].qs.y, raw[k][r].qs.z, raw[k][r].qs.w};
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            lo[r][i] = static_cast<int>(w[i] & 0x0f0f0f0fu);
            hi[r][i] = static_cast<int>((w[i] >> 4) & 0x0f0f0f0fu);
          }
        }
#pragma unroll
        for (int t = 0; t < R; ++t) {
          const uint4 ql = Ld16(xqr[t] + c_lo), qh = Ld16(xqr[t] + c_hi);
          const float2 dl = xdr[t][c_lo / 16], dh = xdr[t][c_hi / 16];
#pragma unroll
          for (int r = 0; r < RPT; ++r) {
            int sl = __dp4a(lo[r][0], static_cast<int>(ql.x), 0);
            sl = __dp4a(lo[r][1], static_cast<int>(ql.y), sl);
            sl = __dp4a(lo[r][2], static_cast<int>(ql.z), sl);
            sl = __dp4a(lo[r][3], static_cast<int>(ql.w), sl);
            int sh = __dp4a(hi[r][0], static_cast<int>(qh.x), 0);
            sh = __dp4a(hi[r][1], static_cast<int>(qh.y), sh);
            sh = __dp4a(hi[r][2], static_cast<int>(qh.z), sh);
            sh = __dp4a(hi[r][3], static_cast<int>(qh.w), sh);
            float v = fmaf(ctx[r].d1, dl.x * static_cast<float>(sl), -ctx[r].m1 * dl.y);
            v = fmaf(ctx[r].d2, dh.x * static_cast<float>(sh), fmaf(-ctx[r].m2, dh.y, v));
            acc[r][t] += v;
          }
        }
      }
    }
  }
  ReduceAndStore<RPT, R>(acc, a, lane_g, grp, row0);
}

// The launch shape: G threads per row group (about two loop iterations per thread) and the blocks.
template <DType T, int R>
GemvArgs Shape(const WeightView& w, MatView x, MatView out, bool out_f32, int64_t* blocks) {
  constexpr int RPT = RowsPerThread(T, R);
  const int units = static_cast<int>(w.cols / Fmt<T>::kUnitElems);
  const int want = units / (2 * UnitsInFlight(RPT));
  int group = 32;
  while (group < kThreads && group < want) group *= 2;
  const int64_t rows_per_block = static_cast<int64_t>(kThreads / group) * RPT;
  *blocks = (w.rows + rows_per_block - 1) / rows_per_block;
  return GemvArgs{w,          static_cast<const uint16_t*>(x.data),
                  x.stride,   out.data,
                  out.stride, static_cast<int>(x.rows),
                  group,      out_f32};
}

template <DType T, int R>
void LaunchT(const WeightView& w, MatView x, MatView out, bool out_f32, cudaStream_t stream) {
  int64_t blocks = 0;
  const GemvArgs a = Shape<T, R>(w, x, out, out_f32, &blocks);
  GemvKernel<T, R><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(a);
  HYMT_CUDA_CHECK_LAUNCH();
}

template <int R>
void LaunchQ4KInt8(const WeightView& w, MatView x, MatView out, bool out_f32, void* scratch,
                   cudaStream_t stream) {
  const int64_t K = w.cols;
  int8_t* xq = static_cast<int8_t*>(scratch);
  float2* xds = reinterpret_cast<float2*>(xq + x.rows * K);  // K % 256 == 0: 16-byte aligned
  QuantizeActKernel<<<static_cast<unsigned>(x.rows), kThreads, 0, stream>>>(
      static_cast<const uint16_t*>(x.data), x.stride, K, xq, xds);
  HYMT_CUDA_CHECK_LAUNCH();
  int64_t blocks = 0;
  const GemvArgs a = Shape<DType::kQ4_K, R>(w, x, out, out_f32, &blocks);
  GemvQ4KInt8Kernel<R><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(a, xq, xds);
  HYMT_CUDA_CHECK_LAUNCH();
}

// One block per (n, t); threads over k. The oracle for the fast kernel and the path for odd shapes.
__global__ __launch_bounds__(128) void GemvSimpleKernel(WeightView w, MatView x, void* out,
                                                        int64_t out_stride, bool out_f32) {
  __shared__ float scratch[32];
  const int64_t n = blockIdx.x;
  const int64_t t = blockIdx.y;
  const uint16_t* xr = static_cast<const uint16_t*>(x.data) + t * x.stride;
  float s = 0.0f;
  for (int64_t k = threadIdx.x; k < w.cols; k += 128) s = fmaf(Bf16ToF32(xr[k]), WeightElement(w, n, k), s);
  s = BlockSum(s, scratch) * w.scale;
  if (threadIdx.x == 0) {
    if (out_f32)
      static_cast<float*>(out)[t * out_stride + n] = s;
    else
      static_cast<uint16_t*>(out)[t * out_stride + n] = F32ToBf16(s);
  }
}

}  // namespace

bool GemvFastSupported(const WeightView& w, MatView x) {
  const int unit = FmtUnitElems(w.dtype);
  return unit > 0 && w.cols % unit == 0 && x.stride % 8 == 0 &&
         reinterpret_cast<uintptr_t>(x.data) % 16 == 0 && reinterpret_cast<uintptr_t>(w.data) % 16 == 0;
}

size_t GemvActScratchBytes(int64_t rows, int64_t cols) {
  return static_cast<size_t>(rows * cols) + static_cast<size_t>(rows * (cols / 16)) * sizeof(float2);
}

void LaunchGemv(const WeightView& w, MatView x, MatView out, bool out_f32, void* act_scratch,
                size_t act_scratch_bytes, cudaStream_t stream) {
  HYMT_CUDA_EXPECT(x.rows >= 1 && x.rows <= kGemvMaxRows, x.rows, " rows");
  HYMT_CUDA_EXPECT(GemvFastSupported(w, x));
  if (w.dtype == DType::kQ4_K && act_scratch != nullptr &&
      GemvActScratchBytes(x.rows, w.cols) <= act_scratch_bytes) {
    if (x.rows == 1)
      LaunchQ4KInt8<1>(w, x, out, out_f32, act_scratch, stream);
    else if (x.rows == 2)
      LaunchQ4KInt8<2>(w, x, out, out_f32, act_scratch, stream);
    else if (x.rows <= 4)
      LaunchQ4KInt8<4>(w, x, out, out_f32, act_scratch, stream);
    else
      LaunchQ4KInt8<8>(w, x, out, out_f32, act_scratch, stream);
    return;
  }
  const bool ok = DispatchFmt(w.dtype, [&]<DType T>() {
    if (x.rows == 1)
      LaunchT<T, 1>(w, x, out, out_f32, stream);
    else if (x.rows == 2)
      LaunchT<T, 2>(w, x, out, out_f32, stream);
    else if (x.rows <= 4)
      LaunchT<T, 4>(w, x, out, out_f32, stream);
    else
      LaunchT<T, 8>(w, x, out, out_f32, stream);
  });
  HYMT_CUDA_EXPECT(ok, "no GEMV kernel for ", DTypeName(w.dtype));
}

void LaunchGemvSimple(const WeightView& w, MatView x, MatView out, bool out_f32, cudaStream_t stream) {
  if (x.rows == 0 || w.rows == 0) return;
  HYMT_CUDA_EXPECT(x.rows <= 65535, x.rows, " rows for the simple kernel");
  const dim3 grid(static_cast<unsigned>(w.rows), static_cast<unsigned>(x.rows));
  GemvSimpleKernel<<<grid, 128, 0, stream>>>(w, x, out.data, out.stride, out_f32);
  HYMT_CUDA_CHECK_LAUNCH();
}

}  // namespace hymt::cuda
