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
//   - G is chosen so that each thread runs about GemvIters() loop iterations, within 32..256: for bf16 one,
//     which the cap raises at one token row (4 rows of one unit per iteration: K = 4096 gives G = 256 and
//     two iterations, one row group of 4 rows per 256-thread block; K = 14336 seven iterations).
// The partial sums of a group are reduced with warp shuffles and, when G > 32, shared memory.
//
// One launch can do more than one product over the same x (GemvPart, GemvEpilogue), which saves the
// launches and small kernels of a decode step:
//   - up to kGemvMaxParts weights of equal type and width (q, k and v): the blocks are split between
//     them;
//   - kAdd: out += the product, rounded to bf16 first (the residual add after o_proj and down_proj);
//   - kSwiGlu: two weights (gate and up) row by row in the same group, out = silu(gate) * up, each
//     product rounded to bf16 first (the MLP's activation); one token row (batch-1 decode), where the
//     launches matter most and the doubled rows still fit in few registers.
// Every epilogue rounds exactly as the separate ops do (MatMul to bf16, then SwiGlu or Add), so fused
// and unfused steps agree bit for bit.
//
// Q4_K, Q6_K and Q8_0 with int8 activations (GemvInt8Kernel, the default): decoding 4- to 8-bit weights to f32
// costs several instructions per weight, which at 4.6 TB/s of weights (~29 Q4_K weights per clock per
// SM) exceeds what an SM issues. As in llama.cpp, the activation rows are first quantised to int8 (one
// scale per 16 values, QuantizeActKernel), and the dot products run on dp4a (4 multiply-adds per
// instruction):
//   Q4_K: sum_i x_i (d1 n_i - m1) = d1 (dx sum_i q_i n_i) - m1 (dx sum_i q_i),  x_i ~ dx q_i;
//   Q6_K: sum_i x_i d s (n_i - 32) = d s (dx sum_i q_i n_i - 32 dx sum_i q_i);
//   Q8_0: sum_i x_i d w_i = d dx sum_i q_i w_i.
// The activation rounding (|x - dx q| <= dx / 2, dx = max|x| / 127 over 16 values) is the only change
// in the result; the tests bound it. The dp4a sums become floats by a subtraction (DotToFloat,
// cuda_device.cuh), not the quarter-rate conversion unit, and Q4_K's high nibbles are summed in place as
// 16 x code, the 1/16 in the scale; both give the conversion's results bit for bit (H100: q4_k_m's decode
// graph 0.4% shorter, q8_0's unchanged; docs/BENCHMARKS.md). Up to two token rows of the 7B's widths the
// rows sit in shared memory (kSmemX): at K = 4096 each block quantises them itself (no separate launch),
// from K = 8192 (the down projection) QuantizeActKernel writes them once in shared memory's order and each
// block copies them (GemvPrequantMinK); above two rows, QuantizeActKernel writes them once and the blocks
// read them from global memory.
// Q4_K and Q6_K read split layouts (cuda_internal.h): a warp's 32 threads load 512 contiguous quant bytes per
// load. Q6_K's 8 threads of a super-block read 128 contiguous activation bytes; a Q4_K thread takes a wide
// unit (64 weights of two sub-blocks that share a scale/min pair, so the header is decoded once per 64) and,
// from shared memory, activations stored in the order the units read them (ActSlot). Neither the weight nor
// the activation loads waste L1 wavefronts.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>

#include "backends/cuda/cuda_device.cuh"

namespace hymt::cuda {
int EnvInt(const char* name, int fallback) {
  const char* s = std::getenv(name);
  return s != nullptr ? std::atoi(s) : fallback;
}
bool EnvEquals(const char* name, const char* value) {
  const char* s = std::getenv(name);
  return s != nullptr && std::strcmp(s, value) == 0;
}

namespace {

constexpr int kThreads = 256;

// Per-thread loop iterations the group size aims at (see the file comment) for `rows` token rows: 1 for the
// 16-bit and f32 weights; for the others 4 (kernel lab, cuda_kernels --gemv), and 8 at one token row. At
// the 7B shape 8 changes only the down projection (K = 14336): q4_k and q6_k take one warp per row group
// (G = 32: 16-row blocks, a warp-only reduction) instead of 64 threads, q8_0 64 instead of 128. Batch-1
// decode on an H200, same calls: q4_k_m graph 2.076-2.079 ms a step against 2.128-2.132, q8_0 2.802-2.803
// against 2.833-2.839 (docs/BENCHMARKS.md). HYMT_GEMV_ITERS overrides every case.
int GemvIters(DType t, int64_t rows) {
  static const int env = [] {
    const int v = EnvInt("HYMT_GEMV_ITERS", 0);
    return v >= 1 && v <= 64 ? v : 0;
  }();
  if (env > 0) return env;
  if (t == DType::kBF16 || t == DType::kF16 || t == DType::kF32) return 1;
  return rows == 1 ? 8 : 4;
}

struct GemvSeg {
  WeightView w;
  void* out;
  int64_t out_stride;
  int64_t first_block;  // the segment's blocks are [first_block, next segment's first_block)
};

struct GemvArgs {
  GemvSeg seg[kGemvMaxParts];
  int n_seg;
  WeightView up;  // kSwiGlu: the up weight, rows paired with seg[0].w's
  const uint16_t* x;  // bf16 [n_tok, K]
  int64_t x_stride;
  int n_tok;  // <= R
  int group;  // G: threads per row group
  int64_t n_blocks;  // row blocks over all segments (GemvInt8Kernel's blocks loop over them)
  WeightView norm;    // norm.data set: x is first normalised as RmsNorm(x, norm, norm_eps) would
  float norm_eps;
  // With norm, one token row: x's sum of squares in sums_parts parts, sums_in[0 .. sums_parts), as a kAdd
  // launch with sums_out wrote them (the block sums them instead of reading x twice).
  const float* sums_in;
  int sums_parts;
  // kAdd, one token row (GemvInt8Kernel): each block writes the sum of squares of the values it stored.
  float* sums_out;
  // kSmemX: set when QuantizeActKernel<T, true> has already written the rows' int8 values and scales in shared
  // memory's layout (and order) here; the block then copies them instead of quantising the rows itself.
  const int8_t* pre;
  bool out_f32;
  GemvEpilogue epi;
  bool pdl_early;  // PdlTriggerIf: trigger after the first weight loads, before the wait
};

// The segment row block b (blockIdx.x, or a persistent block's current one) belongs to, and its index
// within the segment.
__device__ __forceinline__ const GemvSeg& BlockSeg(const GemvArgs& a, int64_t b, int64_t* block) {
  const int s = (a.n_seg > 2 && b >= a.seg[2].first_block) ? 2 : (a.n_seg > 1 && b >= a.seg[1].first_block ? 1 : 0);
  const GemvSeg& sg = s == 0 ? a.seg[0] : (s == 1 ? a.seg[1] : a.seg[2]);
  *block = b - sg.first_block;
  return sg;
}

// Rows of one group for R token rows: more rows per thread as R grows, so that the activation loads
// (R per piece) are shared by more weight rows.
// Q4_K and Q6_K (units of a header and 16 quant bytes or more) keep at most 2 (4 not measured since their
// split layouts).
constexpr int RowsPerThread(DType t, int r) {
  const int rpt = r >= 8 ? 4 : (r >= 2 ? 2 : 1);
  return (t == DType::kQ6_K || t == DType::kQ4_K) && rpt > 2 ? 2 : rpt;
}
constexpr int UnitsInFlight(int rpt) {
  return rpt >= 4 ? 1 : 4 / rpt;
}
// The same for format T: Q4_K's wide units are two 16-byte quant loads (and one header), so half as many.
// Twice as many at one token row (q4_k 2 wide units, q8_0 4 units a row) took registers for fewer blocks per
// SM (q4_k 79 -> 114, q8_0 63 -> 80) and made the decode graphs 1.6% and 2.1% longer on an H100
// (docs/BENCHMARKS.md, "Addresses once per row block").
template <DType T>
constexpr int UnitsInFlightT(int rpt) {
  return T == DType::kQ4_K && UnitsInFlight(rpt) > 1 ? UnitsInFlight(rpt) / 2 : UnitsInFlight(rpt);
}

// Writes one output element through the epilogue. v (and vu, the up product of kSwiGlu) are raw sums.
// Returns the value stored under kAdd (the new bf16 residual, as a float), else 0.
__device__ __forceinline__ float StoreOut(const GemvArgs& a, const GemvSeg& sg, int64_t row, int t, float v,
                                          float vu) {
  if (row >= sg.w.rows || t >= a.n_tok) return 0.0f;
  v *= sg.w.scale;
  if (a.out_f32) {
    static_cast<float*>(sg.out)[t * sg.out_stride + row] = v;
    return 0.0f;
  }
  uint16_t* o = static_cast<uint16_t*>(sg.out) + t * sg.out_stride + row;
  switch (a.epi) {
    case GemvEpilogue::kStore:
      *o = F32ToBf16(v);
      break;
    case GemvEpilogue::kAdd: {
      const uint16_t sum = F32ToBf16(Bf16ToF32(*o) + Bf16ToF32(F32ToBf16(v)));
      *o = sum;
      return Bf16ToF32(sum);
    }
    case GemvEpilogue::kSwiGlu: {
      // As SwiGluKernel, from the bf16-rounded products.
      *o = F32ToBf16(SiluBf16(RoundBf16(v)) * RoundBf16(vu * a.up.scale));
      break;
    }
  }
  return 0.0f;
}

// Sums each (row, token) accumulator over the group's G threads and stores it through the epilogue.
// acc holds RPT rows, then (kPair) the RPT up rows. Every thread of the block must call it (it may
// synchronise the block). With ss, a storing thread adds the squares of what kAdd stored (one token row).
template <int RPT, int R, bool kPair>
__device__ __forceinline__ void ReduceAndStore(float (&acc)[kPair ? 2 * RPT : RPT][R], const GemvArgs& a,
                                               const GemvSeg& sg, int lane_g, int grp, int64_t row0,
                                               float* ss = nullptr) {
  constexpr int kRows = kPair ? 2 * RPT : RPT;
  const int G = a.group;
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int t = 0; t < R; ++t) acc[r][t] = WarpSum(acc[r][t]);

  if (G == 32) {
    // Every lane holds every sum; lane r * R + t stores (compile-time indices into acc).
#pragma unroll
    for (int r = 0; r < RPT; ++r)
#pragma unroll
      for (int t = 0; t < R; ++t)
        if (lane_g == r * R + t) {
          const float v = StoreOut(a, sg, row0 + r, t, acc[r][t], kPair ? acc[kPair ? RPT + r : r][t] : 0.0f);
          if (ss != nullptr) *ss = fmaf(v, v, *ss);
        }
  } else {
    __shared__ float red[kThreads / 32][kRows * R];
    const int warp = threadIdx.x >> 5;
    if ((threadIdx.x & 31) == 0) {
#pragma unroll
      for (int r = 0; r < kRows; ++r)
#pragma unroll
        for (int t = 0; t < R; ++t) red[warp][r * R + t] = acc[r][t];
    }
    __syncthreads();         // G is the same for the whole block, so every thread reaches this
    if (lane_g < RPT * R) {  // the group's first warp: one lane per (row, token)
      const int first = grp * (G / 32);
      float s = 0.0f, su = 0.0f;
      for (int wi = 0; wi < G / 32; ++wi) {
        s += red[first + wi][lane_g];
        if (kPair) su += red[first + wi][RPT * R + lane_g];
      }
      const float v = StoreOut(a, sg, row0 + lane_g / R, lane_g % R, s, su);
      if (ss != nullptr) *ss = fmaf(v, v, *ss);
    }
  }
}

// Loads a thread's weight units u0, u0 + G, ... (kUnroll of them, clamped to the last unit) for its rows:
// rows[0, RPT) of w and, in a SwiGLU pair kernel (kRows = 2 RPT), the same rows of up.
template <typename F, int kUnroll, int kRows, int RPT>
__device__ __forceinline__ void LoadUnits(typename F::Raw (&raw)[kUnroll][kRows], const WeightView& w,
                                          const WeightView& up, const int64_t (&rows)[RPT], int u0, int G,
                                          int units) {
#pragma unroll
  for (int k = 0; k < kUnroll; ++k) {
    const int u = min(u0 + k * G, units - 1);
#pragma unroll
    for (int r = 0; r < kRows; ++r) raw[k][r] = F::Load(r < RPT ? w : up, rows[r % RPT], u);
  }
}

// The int8 kernel's loads (GemvInt8Kernel): per row, pointers into the weight's arrays set once per row block
// (F::Row), and per unit 32-bit offsets from them (F::LoadRow). LoadUnits (F::Load) works each row's address
// out again per unit in 64-bit arithmetic, which in the one-row loop of a q4_k GEMV was about a fifth of the
// PTX instructions.
template <typename F, int kRows, int RPT>
__device__ __forceinline__ void RowPtrs(typename F::RowPtr (&rp)[kRows], const WeightView& w, const WeightView& up,
                                        const int64_t (&rows)[RPT]) {
#pragma unroll
  for (int r = 0; r < kRows; ++r) rp[r] = F::Row(r < RPT ? w : up, rows[r % RPT]);
}
template <typename F, int kUnroll, int kRows>
__device__ __forceinline__ void LoadUnitsAt(typename F::Raw (&raw)[kUnroll][kRows],
                                            const typename F::RowPtr (&rp)[kRows], int u0, int G, int units) {
#pragma unroll
  for (int k = 0; k < kUnroll; ++k) {
    const int u = min(u0 + k * G, units - 1);
#pragma unroll
    for (int r = 0; r < kRows; ++r) raw[k][r] = F::LoadRow(rp[r], u);
  }
}

// The row blocks a GEMV block works through: first, + step, ... below a.n_blocks (blockIdx.x and
// gridDim.x, but for the blocks of GemvInt8TwoKernel; one, when the grid has a block per row block). For
// the current one: its segment, the group's first row and its RPT rows, clamped (rows past N read valid
// memory and are not stored).
template <int RPT>
struct RowBlocks {
  const GemvArgs& a;
  int G, grp;
  int64_t vb, step;
  const GemvSeg* sg = nullptr;
  int64_t row0 = 0;
  int64_t rows[RPT];
  __device__ __forceinline__ RowBlocks(const GemvArgs& args, int group, int group_index, int64_t first,
                                       int64_t stride)
      : a(args), G(group), grp(group_index), vb(first), step(stride) {
    Enter();
  }
  __device__ __forceinline__ void Enter() {
    int64_t block = 0;
    sg = &BlockSeg(a, vb, &block);
    row0 = (block * (kThreads / G) + grp) * RPT;
#pragma unroll
    for (int r = 0; r < RPT; ++r) rows[r] = min(row0 + r, sg->w.rows - 1);
  }
};

// Stores the current row block's sums and moves to the next row block, whose first weight units start
// loading before the reduction. Returns false after the last one. Every thread of the block calls it.
// load_first() loads the next row block's first units (rb already entered it).
template <int RPT, int R, bool kPair, int kRows, typename LoadFirst>
__device__ __forceinline__ bool NextRowBlock(RowBlocks<RPT>& rb, float (&acc)[kRows][R], int lane_g,
                                             LoadFirst&& load_first, float* ss = nullptr) {
  const GemvSeg* done = rb.sg;
  const int64_t done_row0 = rb.row0;
  rb.vb += rb.step;
  const bool more = rb.vb < rb.a.n_blocks;
  if (more) {
    rb.Enter();
    load_first();
  }
  ReduceAndStore<RPT, R, kPair>(acc, rb.a, *done, lane_g, rb.grp, done_row0, ss);
  if (more) __syncthreads();  // ReduceAndStore's shared array is written again by the next row block
  return more;
}

// kNorm: the activation rows are first normalised as RmsNorm would (a.norm; identical bits) into shared
// memory, n_tok * K bf16, by every block; the grid is then smaller than a.n_blocks (GemvGrid) and each
// block works through row blocks blockIdx.x, + gridDim.x, ..., so that its prologue serves several. Without
// it there is one block per row block and the loop below runs once.
template <DType T, int R, bool kPair, int RPT, bool kNorm>
__global__ __launch_bounds__(kThreads) void GemvKernel(GemvArgs a) {
  using F = Fmt<T>;
  constexpr int kRows = kPair ? 2 * RPT : RPT;
  constexpr int kUnroll = UnitsInFlightT<T>(RPT);
  const int G = a.group;
  const int lane_g = threadIdx.x & (G - 1);
  const int grp = threadIdx.x / G;
  const int64_t K = a.seg[0].w.cols;  // every segment's (LaunchGemvParts checks)
  const int units = static_cast<int>(K / F::kUnitElems);

  // Tokens past n_tok, like rows past N, read valid memory and are not stored.
  RowBlocks<RPT> rb(a, G, grp, blockIdx.x, gridDim.x);

  // The first units' weights load before PdlWait: no kernel writes weights, so they stream in while the
  // kernel before this one finishes.
  typename F::Raw raw[kUnroll][kRows];
  LoadUnits<F>(raw, rb.sg->w, a.up, rb.rows, lane_g, G, units);
  PdlTriggerIf(a.pdl_early);
  PdlWait();
  PdlTriggerIf(!a.pdl_early);
  const uint16_t* x = a.x;
  int64_t x_stride = a.x_stride;
  if constexpr (kNorm) {
    uint16_t* sh = reinterpret_cast<uint16_t*>(DynamicSmem());
    __shared__ float norm_scratch[32];
    for (int t = 0; t < a.n_tok; ++t) {
      const uint16_t* xt = a.x + t * a.x_stride;
      const float inv = RowRmsInv(xt, K, a.norm_eps, norm_scratch);
      for (int64_t c8 = threadIdx.x; c8 < K / 8; c8 += kThreads) {
        float v[8];
        LoadBf16x8(xt + 8 * c8, v);
#pragma unroll
        for (int j = 0; j < 8; ++j) v[j] = RmsNormValue(v[j], inv, VectorElement(a.norm, 8 * c8 + j));
        St16(sh + t * K + 8 * c8, make_uint4(PackBf16(v[0], v[1]), PackBf16(v[2], v[3]), PackBf16(v[4], v[5]),
                                             PackBf16(v[6], v[7])));
      }
    }
    __syncthreads();
    x = sh;
    x_stride = K;
  }
  const uint16_t* xr[R];
#pragma unroll
  for (int t = 0; t < R; ++t) xr[t] = x + static_cast<int64_t>(min(t, a.n_tok - 1)) * x_stride;

  while (true) {
    float acc[kRows][R];
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int t = 0; t < R; ++t) acc[r][t] = 0.0f;
    for (int u0 = lane_g; u0 < units; u0 += G * kUnroll) {
      if (u0 != lane_g) LoadUnits<F>(raw, rb.sg->w, a.up, rb.rows, u0, G, units);
#pragma unroll
      for (int k = 0; k < kUnroll; ++k) {
        const int u = u0 + k * G;
        if (u < units) {
          typename F::Ctx ctx[kRows];
#pragma unroll
          for (int r = 0; r < kRows; ++r) ctx[r] = F::MakeCtx(raw[k][r], u);
          StaticFor<0, F::kPieces>([&](auto pc) {
            constexpr int p = decltype(pc)::value;
            const int col = F::PieceCol(u, p);
            float wv[kRows][8];
#pragma unroll
            for (int r = 0; r < kRows; ++r) F::template Dequant<p>(raw[k][r], ctx[r], u, wv[r]);
#pragma unroll
            for (int t = 0; t < R; ++t) {
              float xv[8];
              LoadBf16x8(xr[t] + col, xv);
#pragma unroll
              for (int r = 0; r < kRows; ++r)
#pragma unroll
                for (int i = 0; i < 8; ++i) acc[r][t] = fmaf(wv[r][i], xv[i], acc[r][t]);
            }
          });
        }
      }
    }
    if (!NextRowBlock<RPT, R, kPair>(rb, acc, lane_g,
                                     [&] { LoadUnits<F>(raw, rb.sg->w, a.up, rb.rows, lane_g, G, units); }))
      break;
  }
}

// One group of 16 activations for the int8 path: v[0..16) -> int8 q[0..16) and {dx, dx * sum q} with
// dx = max|v| / 127 and q = rint(v * (127 / max|v|)), which lies in [-127, 127] without a clamp.
// Every block of a batch-1 GEMV runs this over the whole row (kSmemX), so it is written for few issue
// slots: a tree for the maximum; rint as (v * inv) + 1.5 * 2^23, whose low byte is q in two's complement
// (the same rounding as __float2int_rn of the rounded product, without the conversion unit's quarter
// rate); bytes packed with byte permutes, and sum q by dp4a against ones.
__device__ __forceinline__ void QuantizeValues(const float (&v)[16], int8_t* q, float2* ds) {
  float m[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) m[i] = fmaxf(fabsf(v[2 * i]), fabsf(v[2 * i + 1]));
#pragma unroll
  for (int w = 4; w >= 1; w /= 2)
#pragma unroll
    for (int i = 0; i < w; ++i) m[i] = fmaxf(m[i], m[i + w]);
  const float amax = m[0];
  const float dx = amax / 127.0f, inv = amax > 0.0f ? 127.0f / amax : 0.0f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds |p| < 2^22 to an integer, ties to even
  uint32_t words[4];
  int sum = kDotInit;
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    uint32_t b[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) b[i] = __float_as_uint(__fadd_rn(__fmul_rn(v[4 * w + i], inv), kRound));
    words[w] = __byte_perm(__byte_perm(b[0], b[1], 0x0040), __byte_perm(b[2], b[3], 0x4000), 0x7610);
    sum = __dp4a(static_cast<int>(words[w]), 0x01010101, sum);
  }
  St16(q, make_uint4(words[0], words[1], words[2], words[3]));
  *ds = make_float2(dx, dx * DotToFloat(sum));
}
// The same for bf16 x[0..16).
__device__ __forceinline__ void QuantizeGroup(const uint16_t* x, int8_t* q, float2* ds) {
  float v[16];
  LoadBf16x8(x, v);
  LoadBf16x8(x + 8, v + 8);
  QuantizeValues(v, q, ds);
}

// The dot products of 16 int8 weights (unsigned bytes for Dot16US) with 16 int8 activations, started at
// kDotInit (DotToFloat turns the sum into its float).
__device__ __forceinline__ int Dot16(const uint4& w, const uint4& x) {
  int s = __dp4a(static_cast<int>(w.x), static_cast<int>(x.x), kDotInit);
  s = __dp4a(static_cast<int>(w.y), static_cast<int>(x.y), s);
  s = __dp4a(static_cast<int>(w.z), static_cast<int>(x.z), s);
  return __dp4a(static_cast<int>(w.w), static_cast<int>(x.w), s);
}
__device__ __forceinline__ int Dot16US(const uint4& w, const uint4& x) {
  int s = Dp4aUS(w.x, static_cast<int>(x.x), kDotInit);
  s = Dp4aUS(w.y, static_cast<int>(x.y), s);
  s = Dp4aUS(w.z, static_cast<int>(x.z), s);
  return Dp4aUS(w.w, static_cast<int>(x.w), s);
}

// Where the int8 path keeps the activations of 16-value group g (columns 16 g .. 16 g + 15) of a row of K:
// slot s, the int8 values at 16 s and {dx, dx sum q} at s. Natural order (s = g) everywhere but in the
// shared memory of the Q4_K kernel (kSmem), which stores each row in four planes by the wide unit that reads
// the group (plane 0: columns 32 j .. 32 j + 15 of super-block b, 1: the next 16, 2 and 3: the same + 128;
// s = plane * K / 64 + 4 b + j): the 32 threads of a warp, on consecutive units, then read 512 contiguous
// bytes per load, with no bank conflicts.
template <DType T, bool kSmem>
__device__ __forceinline__ int ActSlot(int g, int K) {
  if constexpr (T == DType::kQ4_K && kSmem) {
    const unsigned b = static_cast<unsigned>(g) / 16, gi = static_cast<unsigned>(g) % 16;
    return static_cast<int>((2 * (gi / 8) + gi % 2) * (static_cast<unsigned>(K) / 64) + 4 * b + (gi % 8) / 2);
  } else {
    return g;
  }
}

// Activation rows for the int8 path: x bf16 [n_tok, K] -> q int8 [n_tok, K] and, per 16 values,
// {dx, dx * sum q} (QuantizeGroup), group g at slot ActSlot<T, kSmem>(g): natural order for the kernels
// that read them from global memory, shared memory's order for those that copy them there (GemvArgs::pre).
// One thread per group, blockIdx.y the token row.
template <DType T, bool kSmem>
__global__ __launch_bounds__(kThreads) void QuantizeActKernel(const uint16_t* x, int64_t x_stride, int K,
                                                              int8_t* xq, float2* xds, bool pdl_early) {
  PdlTriggerIf(pdl_early);
  PdlWait();
  PdlTriggerIf(!pdl_early);
  const int groups = K / 16;
  const int g = static_cast<int>(blockIdx.x) * kThreads + static_cast<int>(threadIdx.x);
  if (g >= groups) return;
  const int64_t t = blockIdx.y;
  const int s = ActSlot<T, kSmem>(g, K);
  QuantizeGroup(x + t * x_stride + 16 * g, xq + t * K + 16 * s, xds + t * groups + s);
}

// The int8 path loads the same units as the f32 path (Fmt<T>; for Q6_K 32 elements, two runs of 16 at c and
// c + 128; for Q4_K 64, two runs of 32) and takes their dot products with int8 activations.
// LoadAct: the activations unit u multiplies, from one int8 activation row (xq: the row's int8 values, xds:
// its per-16 {dx, dx * sum q}); Dot: their dot product with one row's unit.
template <DType T>
struct Int8Dot;

template <>
struct Int8Dot<DType::kQ4_K> {
  using F = Fmt<DType::kQ4_K>;
  static __device__ __forceinline__ uint4 Lo(const uint4& q) {
    return make_uint4(q.x & 0x0f0f0f0fu, q.y & 0x0f0f0f0fu, q.z & 0x0f0f0f0fu, q.w & 0x0f0f0f0fu);
  }
  // The high nibbles in place: 16 x code, unsigned bytes (Dot16US).
  static __device__ __forceinline__ uint4 Hi16(const uint4& q) {
    return make_uint4(q.x & 0xf0f0f0f0u, q.y & 0xf0f0f0f0u, q.z & 0xf0f0f0f0u, q.w & 0xf0f0f0f0u);
  }
  // The activations a wide unit u multiplies: groups s0..s3 (Slot) of one token row, int8 values and {dx, dx
  // sum q}. Loaded once per unit and token row and shared by the rows a thread holds.
  struct Act {
    uint4 q[4];
    float2 ds[4];
  };
  template <bool kSmem>
  static __device__ __forceinline__ Act LoadAct(int u, const int8_t* xq, const float2* xds, int64_t K) {
    Act a;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int s = Slot<kSmem>(u, i, K);
      a.q[i] = Ld16(xq + 16 * s);
      a.ds[i] = xds[s];
    }
    return a;
  }
  // Wide unit u: the low nibbles of qa and qb are sub-block 1's 32 values (two activation groups), the high
  // nibbles sub-block 2's: d1 dx sum q n - m1 dx sum q over each group, the same for sub-block 2.
  static __device__ __forceinline__ float Dot(const F::Raw& raw, const F::Ctx& ctx, const Act& x) {
    const int a0 = Dot16(Lo(raw.qa), x.q[0]), a1 = Dot16(Lo(raw.qb), x.q[1]);
    // The high nibbles' sums are 16 x theirs (|16 sum| <= 16 * 16 * 15 * 127 < 2^22, so DotToFloat holds);
    // the 1/16 goes into the scale. Scaling by a power of two is exact, so every rounding below is the one
    // the unscaled sums would give.
    const int b0 = Dot16US(Hi16(raw.qa), x.q[2]), b1 = Dot16US(Hi16(raw.qb), x.q[3]);
    const float d2 = ctx.d2 * 0.0625f;
    const float2 x0 = x.ds[0], x1 = x.ds[1], x2 = x.ds[2], x3 = x.ds[3];
    const float v = fmaf(ctx.d1, fmaf(x0.x, DotToFloat(a0), x1.x * DotToFloat(a1)), -ctx.m1 * (x0.y + x1.y));
    return fmaf(d2, fmaf(x2.x, DotToFloat(b0), x3.x * DotToFloat(b1)), fmaf(-ctx.m2, x2.y + x3.y, v));
  }
  // ActSlot of group i (0, 1: columns 32 j and 32 j + 16 of super-block u / 4, j = u % 4; 2, 3: the same
  // + 128) of wide unit u: plane i at unit u in shared memory, else groups g, g + 1, g + 8, g + 9.
  template <bool kSmem>
  static __device__ __forceinline__ int Slot(int u, int i, int64_t K) {
    if constexpr (kSmem)
      return u + i * static_cast<int>(K / 64);  // 32-bit: slots of one row (K / 16 of them)
    else
      return (u / 4) * 16 + (u % 4) * 2 + i % 2 + 8 * (i / 2);
  }
};

// Q6_K: split layout, two runs of 16 six-bit values q (0..63) at c and c + 128, each with its
// scale: d sc dx sum (q - 32) qx = d sc (dx sum q qx - 32 dx sum qx).
template <>
struct Int8Dot<DType::kQ6_K> {
  using F = Fmt<DType::kQ6_K>;
  template <int h>
  static __device__ __forceinline__ uint4 Run(const F::Raw& r) {
    return make_uint4(F::Values<h>(r, 0, r.ql.x), F::Values<h>(r, 1, r.ql.y), F::Values<h>(r, 2, r.ql.z),
                      F::Values<h>(r, 3, r.ql.w));
  }
  // The activations unit u multiplies (columns c and c + 128, 16 each), as Int8Dot<Q4_K>::Act.
  struct Act {
    uint4 q[2];
    float2 ds[2];
  };
  template <bool kSmem>
  static __device__ __forceinline__ Act LoadAct(int u, const int8_t* xq, const float2* xds, int64_t) {
    const int c = (u >> 3) * 256 + (u & 7) * 16;  // u >= 0
    return {{Ld16(xq + c), Ld16(xq + c + 128)}, {xds[c / 16], xds[c / 16 + 8]}};
  }
  static __device__ __forceinline__ float Dot(const F::Raw& raw, const F::Ctx& ctx, const Act& x) {
    const int s1 = Dot16(Run<0>(raw), x.q[0]), s2 = Dot16(Run<1>(raw), x.q[1]);
    const float2 x1 = x.ds[0], x2 = x.ds[1];
    const float v = ctx.d1 * fmaf(x1.x, DotToFloat(s1), -32.0f * x1.y);
    return fmaf(ctx.d2, fmaf(x2.x, DotToFloat(s2), -32.0f * x2.y), v);
  }
};

// Q8_0: unit u is 16 int8 weights at column 16u with their block's scale d.
template <>
struct Int8Dot<DType::kQ8_0> {
  using F = Fmt<DType::kQ8_0>;
  struct Act {
    uint4 q;
    float dx;
  };
  template <bool kSmem>
  static __device__ __forceinline__ Act LoadAct(int u, const int8_t* xq, const float2* xds, int64_t) {
    return {Ld16(xq + 16 * u), xds[u].x};
  }
  static __device__ __forceinline__ float Dot(const F::Raw& raw, const F::Ctx& ctx, const Act& x) {
    return ctx.d * (x.dx * DotToFloat(Dot16(raw.q, x.q)));
  }
};

// A block's part of a kAdd launch's sums of squares (GemvArgs::sums_out; one token row): the sum of its
// threads' ss into sums[part]. Every thread calls it.
__device__ __forceinline__ void WriteSums(float* sums, float ss, int64_t part) {
  __shared__ float warp_ss[kThreads / 32];
  ss = WarpSum(ss);
  if ((threadIdx.x & 31) == 0) warp_ss[threadIdx.x >> 5] = ss;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0.0f;
#pragma unroll
    for (int w = 0; w < kThreads / 32; ++w) total += warp_ss[w];
    sums[part] = total;
  }
}

// The one-token-row sum of squares from a kAdd launch's parts (a.sums_in, a.sums_parts): every warp sums
// them in the same order (the same bits in every block), the first 256 asked for at once; returns
// RmsNorm's 1 / rms.
__device__ __forceinline__ float InvRmsFromSums(const GemvArgs& a, int64_t K) {
  const int lane = static_cast<int>(threadIdx.x & 31);
  constexpr int kFirst = 8;  // parts a lane asks for at once (256 a warp)
  float ps[kFirst];
#pragma unroll
  for (int i = 0; i < kFirst; ++i) ps[i] = lane + 32 * i < a.sums_parts ? a.sums_in[lane + 32 * i] : 0.0f;
  float ss = 0.0f;
#pragma unroll
  for (int i = 0; i < kFirst; ++i) ss += ps[i];
  for (int k = lane + 32 * kFirst; k < a.sums_parts; k += 32) ss += a.sums_in[k];
  ss = WarpSum(ss);
  return rsqrtf(ss / static_cast<float>(K) + a.norm_eps);
}

// The kSmemX prologue: the activation rows into shared memory (sq: n_tok * K int8, sd: their per-16
// {dx, dx sum q}, slots in ActSlot<T, true> order), copied from a.pre or quantised here (normalised first
// when a.norm is set). Every thread of the block calls it; it ends with a barrier.
template <DType T>
__device__ __forceinline__ void SmemActivations(const GemvArgs& a, int64_t K, int8_t* sq, float2* sd) {
  const int64_t groups = K / 16;
  __shared__ float norm_scratch[32], norm_inv[kGemvMaxRows];
  float sums_inv = 0.0f;
  if (a.pre != nullptr) {
    const int n16 = static_cast<int>((a.n_tok * K + a.n_tok * groups * 8) / 16);
    for (int i = threadIdx.x; i < n16; i += kThreads) CopyAsync16(sq + 16 * i, a.pre + 16 * i);
    CopyAsyncWait();
  } else if (a.norm.data != nullptr && a.sums_in != nullptr) {
    sums_inv = InvRmsFromSums(a, K);  // one token row
  } else if (a.norm.data != nullptr) {
    for (int t = 0; t < a.n_tok; ++t) {
      const float inv = RowRmsInv(a.x + t * a.x_stride, K, a.norm_eps, norm_scratch);
      if (threadIdx.x == 0) norm_inv[t] = inv;
    }
    __syncthreads();
  }
  // 32-bit indices, tokens outer: a 64-bit division per group costs more than the group's quantisation.
  const int groups32 = static_cast<int>(groups);
  for (int t = 0; a.pre == nullptr && t < a.n_tok; ++t) {
    const uint16_t* xt = a.x + t * a.x_stride;
    int8_t* sqt = sq + t * K;
    float2* sdt = sd + t * groups;
    for (int g = threadIdx.x; g < groups32; g += kThreads) {
      const int slot = ActSlot<T, true>(g, static_cast<int>(K));
      if (a.norm.data != nullptr) {
        float v[16];
        LoadBf16x8(xt + 16 * g, v);
        LoadBf16x8(xt + 16 * g + 8, v + 8);
        const float inv = a.sums_in != nullptr ? sums_inv : norm_inv[t];
#pragma unroll
        for (int j = 0; j < 16; ++j) v[j] = RmsNormValue(v[j], inv, VectorElement(a.norm, 16 * g + j));
        QuantizeValues(v, sqt + 16 * slot, sdt + slot);
      } else {
        QuantizeGroup(xt + 16 * g, sqt + 16 * slot, sdt + slot);
      }
    }
  }
  __syncthreads();
}

// The int8-activation GEMV: the grid, groups, segments and reduction of GemvKernel.
//
// kSmemX: the activation rows are in shared memory, n_tok * K * 1.5 bytes: the block quantises them itself
// (QuantizeGroup, as QuantizeActKernel does; one launch fewer per product) or, with a.pre, copies what
// QuantizeActKernel<T, true> wrote; the activation reads are then shared-memory loads. xq and xds are
// unused.
// The grid may be smaller than a.n_blocks (GemvGrid): each block then works through row blocks
// blockIdx.x, + gridDim.x, ..., so that its activation prologue serves several of them; the next row
// block's first weights load before the current one's sums are reduced.
// GemvInt8Body is the kernel's body for a block that works through row blocks first, + step, ...; the
// kernel's blocks are first = blockIdx.x, step = gridDim.x.
template <DType T, int R, bool kPair, int RPT, bool kSmemX>
__device__ __forceinline__ void GemvInt8Body(const GemvArgs& a, const int8_t* xq, const float2* xds,
                                             int64_t first, int64_t step) {
  using F = Fmt<T>;
  constexpr int kRows = kPair ? 2 * RPT : RPT;
  constexpr int kUnroll = UnitsInFlightT<T>(RPT);  // as many 16-byte weight loads in flight as the f32 path
  const int G = a.group;
  const int lane_g = threadIdx.x & (G - 1);
  const int grp = threadIdx.x / G;
  const int64_t K = a.seg[0].w.cols;  // every segment's (LaunchGemvParts checks)
  const int units = static_cast<int>(K / F::kUnitElems);

  // Tokens past n_tok, like rows past N, read valid memory and are not stored.
  RowBlocks<RPT> rb(a, G, grp, first, step);

  // The first units' weights load before PdlWait: no kernel writes weights, so they stream in while the
  // kernel before this one finishes.
  typename F::RowPtr rp[kRows];
  RowPtrs<F>(rp, rb.sg->w, a.up, rb.rows);
  typename F::Raw raw[kUnroll][kRows];
  LoadUnitsAt<F>(raw, rp, lane_g, G, units);
  PdlTriggerIf(a.pdl_early);
  PdlWait();
  PdlTriggerIf(!a.pdl_early);
  if constexpr (kSmemX) {
    int8_t* sq = reinterpret_cast<int8_t*>(DynamicSmem());
    float2* sd = reinterpret_cast<float2*>(sq + a.n_tok * K);  // K % 32 == 0: 16-byte aligned
    SmemActivations<T>(a, K, sq, sd);
    xq = sq;
    xds = sd;
  }
  const int8_t* xqr[R];
  const float2* xdr[R];
#pragma unroll
  for (int t = 0; t < R; ++t) {
    const int64_t tt = min(t, a.n_tok - 1);
    xqr[t] = xq + tt * K;
    xdr[t] = xds + tt * (K / 16);
  }
  float ss = 0.0f;  // sums_out: the squares of the values this thread stored
  while (true) {
    float acc[kRows][R];
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int t = 0; t < R; ++t) acc[r][t] = 0.0f;
    for (int u0 = lane_g; u0 < units; u0 += G * kUnroll) {
      if (u0 != lane_g) LoadUnitsAt<F>(raw, rp, u0, G, units);
#pragma unroll
      for (int k = 0; k < kUnroll; ++k) {
        const int u = u0 + k * G;
        if (u < units) {
          // Each token row's activations are loaded once for all the thread's rows.
          typename Int8Dot<T>::Act act[R];
#pragma unroll
          for (int t = 0; t < R; ++t) act[t] = Int8Dot<T>::template LoadAct<kSmemX>(u, xqr[t], xdr[t], K);
#pragma unroll
          for (int r = 0; r < kRows; ++r) {
            const typename F::Ctx ctx = F::MakeCtx(raw[k][r], u);
#pragma unroll
            for (int t = 0; t < R; ++t) acc[r][t] += Int8Dot<T>::Dot(raw[k][r], ctx, act[t]);
          }
        }
      }
    }
    const auto load_first = [&] {
      RowPtrs<F>(rp, rb.sg->w, a.up, rb.rows);
      LoadUnitsAt<F>(raw, rp, lane_g, G, units);
    };
    if (!NextRowBlock<RPT, R, kPair>(rb, acc, lane_g, load_first, &ss)) break;
  }
  if (a.sums_out != nullptr) WriteSums(a.sums_out, ss, first);
}
template <DType T, int R, bool kPair, int RPT, bool kSmemX>
__global__ __launch_bounds__(kThreads) void GemvInt8Kernel(GemvArgs a, const int8_t* xq, const float2* xds) {
  GemvInt8Body<T, R, kPair, RPT, kSmemX>(a, xq, xds, blockIdx.x, gridDim.x);
}

// Two weight types over one token row in one launch (a _K_M file's q4_k q and k beside a q6_k v): blocks
// [0, grid_a) work through a's row blocks as GemvInt8Kernel<TA, 1, false, 2, true> would, the others
// through b's as the TB kernel would, each with its own activation pass in its type's slot order, so every
// output has the bits of the per-type launches. The kernel takes the larger type's registers (q6_k's).
template <DType TA, DType TB>
__global__ __launch_bounds__(kThreads) void GemvInt8TwoKernel(GemvArgs a, GemvArgs b, int grid_a) {
  const int block = static_cast<int>(blockIdx.x);
  if (block < grid_a)
    GemvInt8Body<TA, 1, false, 2, true>(a, nullptr, nullptr, block, grid_a);
  else
    GemvInt8Body<TB, 1, false, 2, true>(b, nullptr, nullptr, block - grid_a,
                                        static_cast<int>(gridDim.x) - grid_a);
}

// ---- the bulk-copy GEMV (sm_90+, one token row, q4_k / q6_k / q8_0) ----
// GemvInt8Kernel keeps a thread's next weights in its registers, a few units at a time, so the bytes in
// flight per SM are bounded by registers and the loads stop while the thread computes. Here the copy engine
// streams each row block into a ring of shared-memory stages (cp.async.bulk, one thread issuing, an
// mbarrier per stage), several row blocks ahead of the computing threads, which then read the weights
// from shared memory with the same decoders (Fmt<T>::Load<false>) and dot products (Int8Dot, activations
// in shared memory as in kSmemX). A row block is S rows (kThreads / G threads per row) of one segment,
// copied as the weight's arrays for those rows (BulkArrays), laid out in the stage as a weight of S rows,
// so a WeightView of the stage addresses it. The first stages are asked for before PdlWait (no kernel
// writes weights); a stage is refilled after the block's barrier at the end of the row block that read it.
// Measured slower than GemvInt8Kernel, so off by default (HYMT_GEMV_BULK=1 turns it on): batch-1 decode at
// the 7B shape on an H100, q4_k_m 375 tok/s at best (HYMT_GEMV_BULK_SMEM_KB=56, HYMT_GEMV_BULK_KB=32, the
// defaults below) against 390-396 for the register kernel, q8_0 248 against 270-273; more shared memory a
// block was slower still (100 KiB: 305, 200 KiB: 255), and so were smaller stages (docs/BENCHMARKS.md,
// "Weights through shared memory by bulk copies"). What it shows: bytes in flight are not what the register
// kernel lacks at these sizes; a block's barrier per row block and the large shared-memory footprint (the
// next kernel's blocks cannot start beside it) cost more than the deeper stream gains.

constexpr int kBulkMaxStages = 8;

// The arrays of a split weight of width K (cuda_internal.h): bytes per row of each, in their order (array
// i starts at rows * the sum of the earlier ones). Returns how many.
__host__ __device__ inline int BulkArrays(DType t, int64_t K, int64_t (&bpr)[4]) {
  switch (t) {
    case DType::kQ4_K:
      bpr[0] = K / 2, bpr[1] = K / 16;
      return 2;
    case DType::kQ8_0:
      bpr[0] = K, bpr[1] = K / 16;
      return 2;
    case DType::kQ6_K:
      bpr[0] = K / 2, bpr[1] = K / 4, bpr[2] = K / 16, bpr[3] = K / 128;
      return 4;
    default:
      return 0;
  }
}

// Bytes of one row over all of BulkArrays' arrays (the weight's stored row size).
__host__ __device__ inline int64_t BulkRowBytes(DType t, int64_t K) {
  int64_t bpr[4];
  const int arrays = BulkArrays(t, K, bpr);
  int64_t bytes = 0;
  for (int i = 0; i < arrays; ++i) bytes += bpr[i];
  return bytes;
}

// Thread 0: asks for row block b (S rows) of a's weights (and, kPair, the same rows of a.up after them)
// in the stage at dst, completing the phase of bar.
template <DType T, bool kPair>
__device__ __forceinline__ void BulkLoadRowBlock(const GemvArgs& a, int64_t b, int S, uint8_t* dst,
                                                 uint64_t* bar) {
  int64_t block = 0;
  const GemvSeg& sg = BlockSeg(a, b, &block);
  const int64_t K = sg.w.cols, r0 = block * S;
  const int64_t n = min(static_cast<int64_t>(S), sg.w.rows - r0);
  int64_t bpr[4];
  const int arrays = BulkArrays(T, K, bpr);
  const int64_t row_bytes = BulkRowBytes(T, K);
  MbarExpect(bar, static_cast<uint32_t>(n * row_bytes * (kPair ? 2 : 1)));
  for (int w = 0; w < (kPair ? 2 : 1); ++w) {
    const WeightView& src = w == 0 ? sg.w : a.up;
    const uint8_t* base = static_cast<const uint8_t*>(src.data);
    uint8_t* out = dst + w * S * row_bytes;
    int64_t cum = 0;
    for (int i = 0; i < arrays; ++i) {
      BulkCopy(out + S * cum, base + src.rows * cum + r0 * bpr[i], static_cast<uint32_t>(n * bpr[i]), bar);
      cum += bpr[i];
    }
  }
  MbarIssued(bar);
}

// a.group = G threads per row, S = kThreads / G rows per row block; `stages` stages of stage_bytes each
// after act_bytes of activations in dynamic shared memory.
template <DType T, bool kPair>
__global__ __launch_bounds__(kThreads) void GemvBulkKernel(GemvArgs a, int stages, uint32_t stage_bytes,
                                                           uint32_t act_bytes) {
  using F = Fmt<T>;
  constexpr int kRows = kPair ? 2 : 1;
  constexpr int kUnroll = 2;  // units a thread loads from shared memory before it uses them
  const int G = a.group, S = kThreads / G;
  const int lane_g = threadIdx.x & (G - 1);
  const int grp = threadIdx.x / G;
  const int64_t K = a.seg[0].w.cols;
  const int units = static_cast<int>(K / F::kUnitElems);
  uint8_t* smem = reinterpret_cast<uint8_t*>(DynamicSmem());
  uint8_t* ring = smem + act_bytes;
  __shared__ uint64_t full[kBulkMaxStages];
  const int64_t first = blockIdx.x, step = gridDim.x;
  if (threadIdx.x == 0) {
    for (int i = 0; i < stages; ++i) MbarInit(&full[i]);
    for (int i = 0; i < stages && first + i * step < a.n_blocks; ++i)
      BulkLoadRowBlock<T, kPair>(a, first + i * step, S, ring + i * stage_bytes, &full[i]);
  }
  PdlWait();
  PdlTrigger();
  int8_t* sq = reinterpret_cast<int8_t*>(smem);
  float2* sd = reinterpret_cast<float2*>(sq + K);
  SmemActivations<T>(a, K, sq, sd);  // ends with a barrier, after which the barriers' init is visible
  const int64_t row_bytes = BulkRowBytes(T, K);
  int i = 0;
  for (int64_t b = first; b < a.n_blocks; b += step, ++i) {
    const int slot = i % stages;
    uint8_t* stage = ring + slot * stage_bytes;
    MbarWait(&full[slot], static_cast<uint32_t>(i / stages) & 1u);
    int64_t block = 0;
    const GemvSeg& sg = BlockSeg(a, b, &block);
    WeightView ws = sg.w;
    ws.data = stage;
    ws.rows = S;
    WeightView us = ws;
    us.data = stage + S * row_bytes;
    float acc[kRows][1] = {};
    for (int u0 = lane_g; u0 < units; u0 += G * kUnroll) {
      typename F::Raw raw[kUnroll][kRows];
#pragma unroll
      for (int k = 0; k < kUnroll; ++k) {
        const int u = min(u0 + k * G, units - 1);
#pragma unroll
        for (int r = 0; r < kRows; ++r) raw[k][r] = F::template Load<false>(r == 0 ? ws : us, grp, u);
      }
#pragma unroll
      for (int k = 0; k < kUnroll; ++k) {
        const int u = u0 + k * G;
        if (u < units) {
          const typename Int8Dot<T>::Act act = Int8Dot<T>::template LoadAct<true>(u, sq, sd, K);
#pragma unroll
          for (int r = 0; r < kRows; ++r) acc[r][0] += Int8Dot<T>::Dot(raw[k][r], F::MakeCtx(raw[k][r], u), act);
        }
      }
    }
    ReduceAndStore<1, 1, kPair>(acc, a, sg, lane_g, grp, block * S + grp);
    __syncthreads();  // every thread is done with the stage (and ReduceAndStore's shared array)
    if (threadIdx.x == 0 && b + stages * step < a.n_blocks)
      BulkLoadRowBlock<T, kPair>(a, b + stages * step, S, stage, &full[slot]);
  }
}

// Blocks per SM of the int8 kernel's grid, set by SetGemvBlocksPerSm (-1: HYMT_GEMV_BLOCKS_PER_SM, or 4).
std::atomic<int> g_blocks_per_sm{-1};

// How many blocks of `kernel` (kThreads threads, smem bytes of dynamic shared memory) one SM of the current
// device holds at once (its registers and shared memory allow), asked once per kernel, device and size;
// 0 when the runtime cannot say.
int ResidentBlocksPerSm(const void* kernel, size_t smem) {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return 0;
  static std::mutex mu;
  static std::map<std::tuple<const void*, int, size_t>, int> known;
  const std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_tuple(kernel, dev, smem);
  auto it = known.find(key);
  if (it == known.end()) {
    int n = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, kThreads, smem) != cudaSuccess) {
      (void)cudaGetLastError();  // not sticky; the launch itself reports real failures
      n = 0;
    }
    it = known.emplace(key, n).first;
  }
  return it->second;
}

// The grid of a kernel whose blocks loop over row blocks: at most that many blocks per SM (0: one block per
// row block), and no more than the SM holds at once (`resident`, when known and HYMT_GEMV_OCC is not 0):
// a block that only starts when another finishes would repeat the activation prologue and leave the
// last row blocks to fewer SMs.
int64_t GemvGrid(int64_t n_blocks, int resident) {
  static const int env_per_sm = [] {
    const int v = EnvInt("HYMT_GEMV_BLOCKS_PER_SM", 4);
    return v >= 0 && v <= 64 ? v : 4;
  }();
  static const bool occ = !EnvEquals("HYMT_GEMV_OCC", "0");
  const int set = g_blocks_per_sm.load(std::memory_order_relaxed);
  int per_sm = set >= 0 ? set : env_per_sm;
  const int sms = SmCount();
  if (per_sm == 0 || sms <= 0) return n_blocks;
  if (occ && resident > 0) per_sm = std::min(per_sm, resident);
  return std::min<int64_t>(n_blocks, static_cast<int64_t>(sms) * per_sm);
}

// At most this many blocks per SM in the one-token-row SwiGLU pair's grid (HYMT_GEMV_PAIR_BLOCKS_PER_SM,
// default 2; 0: as many as GemvGrid gives every int8 GEMV). Fewer than fit leave room on each SM for the
// blocks of the down projection after it, which start early (programmatic dependent launch) and ask for their
// first weights while the pair's last row blocks run. It changes only q8_0's pair at the 7B shape (80
// registers, three blocks fit; q4_k's and q6_k's registers allow two and one): on an H100 its decode graph
// went from 3.499-3.501 to 3.456-3.457 ms a step with two, and to 3.543 with one (docs/BENCHMARKS.md, "The
// SwiGLU pair's blocks per SM").
int PairBlocksPerSm() {
  static const int v = std::clamp(EnvInt("HYMT_GEMV_PAIR_BLOCKS_PER_SM", 2), 0, 64);
  return v;
}

// G for a row of `units` units, kUnroll of them a loop iteration: about GemvIters() iterations per thread,
// a power of two in 32..kThreads.
int GroupSize(DType t, int64_t rows, int units, int unroll) {
  const int want = units / (GemvIters(t, rows) * unroll);
  int group = 32;
  while (group < kThreads && group < want) group *= 2;
  return group;
}

// The launch shape: G threads per row group (GroupSize) and, per part, its blocks.
// fixed_group > 0 sets G instead.
template <int RPT, int kUnitElems, int kUnroll>
GemvArgs Shape(std::span<const GemvPart> parts, MatView x, bool out_f32, GemvEpilogue epi, const WeightView* up,
               int64_t* blocks, int fixed_group = 0) {
  const int units = static_cast<int>(parts[0].w.cols / kUnitElems);
  const int group = fixed_group > 0 ? fixed_group : GroupSize(parts[0].w.dtype, x.rows, units, kUnroll);
  const int64_t rows_per_block = static_cast<int64_t>(kThreads / group) * RPT;
  GemvArgs a{};
  a.pdl_early = PdlEarly(kPdlEarlyGemv);
  a.n_seg = static_cast<int>(parts.size());
  int64_t total = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    a.seg[i] = GemvSeg{parts[i].w, parts[i].out.data, parts[i].out.stride, total};
    total += (parts[i].w.rows + rows_per_block - 1) / rows_per_block;
  }
  if (up != nullptr) a.up = *up;
  a.x = static_cast<const uint16_t*>(x.data);
  a.x_stride = x.stride;
  a.n_tok = static_cast<int>(x.rows);
  a.group = group;
  a.out_f32 = out_f32;
  a.epi = epi;
  a.n_blocks = total;
  *blocks = total;
  return a;
}

// A launch's fused RMSNorm (none where norm is null) into its arguments.
void SetNorm(GemvArgs& a, const GemvNorm* norm) {
  if (norm == nullptr) return;
  a.norm = norm->w;
  a.norm_eps = norm->eps;
  a.sums_in = norm->sums;
  a.sums_parts = norm->sum_parts;
}

// Weight rows per thread for one token row (1, 2 or 4): rows of a thread share each activation load, which
// cuts the L1 traffic per weight byte at the cost of registers. Chosen by batch-1 decode at the 7B shape on
// an H200 (hymt bench, docs/BENCHMARKS.md): 16-bit and f32 weights 4 (bf16 1 -> 2 -> 4: 194, 202, 206
// tok/s), q8_0 and q4_k 2 (q8_0 262 -> 276, q4_k 244 -> 275), q6_k (int8 path as q4_k's) 2 as q4_k; f8,
// not measured, keeps 1.
// HYMT_GEMV_RPT1=1|2|4 overrides it for every type (q6_k takes at most 2).
int GemvRpt1(DType t) {
  static const int env = [] {
    const int v = EnvInt("HYMT_GEMV_RPT1", 0);
    return v == 1 || v == 2 || v == 4 ? v : 0;
  }();
  if (env != 0) return env;
  switch (t) {
    case DType::kBF16:
    case DType::kF16:
    case DType::kF32:
      return 4;
    case DType::kQ8_0:
    case DType::kQ4_K:
    case DType::kQ6_K:
      return 2;
    default:
      return 1;
  }
}

// Rows per thread of a one-token product, as LaunchFloat and (int8) LaunchInt8Rows launch it: GemvRpt1,
// of which the float path's q6_k takes at most 2.
int OneRowRpt(DType t, bool int8) {
  const int rpt = GemvRpt1(t);
  return !int8 && t == DType::kQ6_K && rpt > 2 ? 2 : rpt;
}

// G of the one-token product of a T weight with K inputs. A SwiGLU pair launch takes this G too: a thread
// sums its units in the order u = lane, lane + G, ... and the group's threads are then reduced, so the
// group size alone fixes the summation order, and with the single product's G the pair's gate and up sums
// are bit for bit those of two MatMul calls.
template <DType T>
int SingleGroup(int64_t K, bool int8) {
  return GroupSize(T, 1, static_cast<int>(K / Fmt<T>::kUnitElems), UnitsInFlightT<T>(OneRowRpt(T, int8)));
}

// Shared memory of the float kernel's fused norm (bf16 rows), or 0 where it would exceed 46 KiB (see
// SmemXBytes).
size_t SmemNormBytes(int64_t rows, int64_t K) {
  const size_t bytes = static_cast<size_t>(rows * K * 2);
  return bytes <= 46 * 1024 ? bytes : 0;
}

template <DType T, int R, bool kPair, int RPT>
void LaunchT(std::span<const GemvPart> parts, MatView x, bool out_f32, GemvEpilogue epi, const WeightView* up,
             cudaStream_t stream, const GemvNorm* norm) {
  int64_t blocks = 0;
  GemvArgs a = Shape<RPT, Fmt<T>::kUnitElems, UnitsInFlightT<T>(RPT)>(
      parts, x, out_f32, epi, up, &blocks, kPair ? SingleGroup<T>(parts[0].w.cols, false) : 0);
  if (norm == nullptr) {
    Launch(PdlEnabled(), GemvKernel<T, R, kPair, RPT, false>, static_cast<unsigned>(blocks), kThreads, 0, stream, a);
    return;
  }
  const size_t smem = SmemNormBytes(x.rows, parts[0].w.cols);
  HYMT_CUDA_EXPECT(smem > 0, "a fused RMSNorm over ", x.rows, " rows of ", parts[0].w.cols);
  SetNorm(a, norm);
  const auto kernel = GemvKernel<T, R, kPair, RPT, true>;
  const int64_t grid = GemvGrid(blocks, ResidentBlocksPerSm(reinterpret_cast<const void*>(kernel), smem));
  Launch(PdlEnabled(), kernel, static_cast<unsigned>(grid), kThreads, smem, stream, a);
}

// Shared memory the int8 kernel's own activation quantisation (kSmemX) takes; it is used while this stays
// within 46 KiB, which with the reduction's static array fits the 48 KiB a block gets without opting in
// (the 7B's widths at one and two token rows), unless HYMT_GEMV_SMEM_X=0.
size_t SmemXBytes(int64_t rows, int64_t K) {
  static const bool on = !EnvEquals("HYMT_GEMV_SMEM_X", "0");
  const size_t bytes = static_cast<size_t>(rows * K + rows * (K / 16) * 8);
  return on && bytes <= 46 * 1024 ? bytes : 0;
}

// The int8 kernels whose rows fit in shared memory quantise them themselves, every block over the whole
// row; from this width up a separate launch quantises them once into the scratch in shared memory's order
// and the blocks copy them. Set by SetGemvPrequantMinK (-1: HYMT_GEMV_PREQUANT_K, or 8192). On an H200 at
// the 7B shape this pays for the launch at K = 14336 (the down projection: each of ~400 blocks would
// quantise 896 groups of 16) but not at 4096 (kernel lab, a decode layer's q4_k GEMVs: 46.5 us with it for
// K >= 8192, 47.7 without, 51.0 for every K; docs/BENCHMARKS.md).
std::atomic<int64_t> g_prequant_min_k{-1};

int64_t GemvPrequantMinK() {
  static const int64_t env = [] {
    const int e = EnvInt("HYMT_GEMV_PREQUANT_K", 8192);
    return e >= 0 ? static_cast<int64_t>(e) : INT64_MAX;
  }();
  const int64_t set = g_prequant_min_k.load(std::memory_order_relaxed);
  return set >= 0 ? set : env;
}

// The largest dynamic shared memory set for a kernel on the current device (cudaFuncSetAttribute, once per
// kernel, device and larger size).
void AllowDynamicSmem(const void* kernel, size_t bytes) {
  int dev = 0;
  HYMT_CUDA_CHECK(cudaGetDevice(&dev));
  static std::mutex mu;
  static std::map<std::pair<const void*, int>, size_t> allowed;
  const std::lock_guard<std::mutex> lock(mu);
  size_t& have = allowed[std::make_pair(kernel, dev)];
  if (bytes <= have) return;
  HYMT_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  have = bytes;
}

// GemvBulkKernel's shape (none, stages == 0, where an array's row is not a multiple of 16 bytes or the
// stages do not fit): rows per row block S (a power of two up to 8) with S rows of one weight within
// HYMT_GEMV_BULK_KB (32 KiB by default; the SwiGLU pair's stage holds twice that, so that its G, and with it
// the summation order, is the single product's), and as many stages (2 to kBulkMaxStages) as fit in
// HYMT_GEMV_BULK_SMEM_KB (56 KiB by default) beside the activations.
struct BulkShape {
  int rows = 0, stages = 0;
  uint32_t stage_bytes = 0, act_bytes = 0;
};
BulkShape ChooseBulkShape(DType t, int64_t K, bool pair) {
  static const int64_t target = int64_t{1024} * std::clamp(EnvInt("HYMT_GEMV_BULK_KB", 32), 1, 256);
  static const int64_t budget = int64_t{1024} * std::clamp(EnvInt("HYMT_GEMV_BULK_SMEM_KB", 56), 16, 220);
  int64_t bpr[4];
  const int arrays = BulkArrays(t, K, bpr);
  BulkShape b;
  for (int i = 0; i < arrays; ++i)
    if (bpr[i] % 16 != 0) return b;  // bulk copies move multiples of 16 bytes (q6_k's scales: K % 2048 == 0)
  const int64_t row_bytes = BulkRowBytes(t, K);
  if (row_bytes == 0) return b;
  b.rows = 8;
  while (b.rows > 1 && b.rows * row_bytes > target) b.rows /= 2;
  const auto round128 = [](int64_t v) { return (v + 127) / 128 * 128; };
  const int64_t act = round128(K + (K / 16) * 8), stage = round128(b.rows * row_bytes * (pair ? 2 : 1));
  const int64_t stages = std::min<int64_t>(kBulkMaxStages, (budget - act) / stage);
  if (stages < 2) return BulkShape{};
  b.stages = static_cast<int>(stages);
  b.stage_bytes = static_cast<uint32_t>(stage);
  b.act_bytes = static_cast<uint32_t>(act);
  return b;
}

// One token row of an int8 GEMV through GemvBulkKernel; false (nothing launched) where its stages do not
// fit.
template <DType T, bool kPair>
bool LaunchBulk(std::span<const GemvPart> parts, MatView x, bool out_f32, GemvEpilogue epi,
                const WeightView* up, void* scratch, cudaStream_t stream, const GemvNorm* norm) {
  const int64_t K = parts[0].w.cols;
  const BulkShape shape = ChooseBulkShape(T, K, kPair);
  if (shape.stages == 0) return false;
  int64_t blocks = 0;
  GemvArgs a = Shape<1, Fmt<T>::kUnitElems, 1>(parts, x, out_f32, epi, up, &blocks, kThreads / shape.rows);
  SetNorm(a, norm);
  const bool pdl = PdlEnabled();
  if (norm == nullptr && K >= GemvPrequantMinK()) {
    int8_t* xq = static_cast<int8_t*>(scratch);
    float2* xds = reinterpret_cast<float2*>(xq + K);
    const dim3 qgrid(static_cast<unsigned>((K / 16 + kThreads - 1) / kThreads), 1);
    Launch(pdl, QuantizeActKernel<T, true>, qgrid, dim3(kThreads), 0, stream,
           static_cast<const uint16_t*>(x.data), x.stride, static_cast<int>(K), xq, xds,
           PdlEarly(kPdlEarlySmall));
    a.pre = xq;
  }
  const auto kernel = GemvBulkKernel<T, kPair>;
  const size_t smem = shape.act_bytes + static_cast<size_t>(shape.stages) * shape.stage_bytes;
  AllowDynamicSmem(reinterpret_cast<const void*>(kernel), smem);
  const int64_t grid = GemvGrid(blocks, ResidentBlocksPerSm(reinterpret_cast<const void*>(kernel), smem));
  Launch(pdl, kernel, static_cast<unsigned>(grid), kThreads, smem, stream, a, shape.stages, shape.stage_bytes,
         shape.act_bytes);
  return true;
}

// Returns the number of sums-of-squares parts written (the grid; 0 without sums_out).
template <DType T, int R, bool kPair, int RPT>
int64_t LaunchInt8(std::span<const GemvPart> parts, MatView x, bool out_f32, GemvEpilogue epi,
                   const WeightView* up, void* scratch, cudaStream_t stream, const GemvNorm* norm,
                   float* sums_out = nullptr) {
  const bool sums = sums_out != nullptr || (norm != nullptr && norm->sums != nullptr);
  if constexpr (R == 1) {
    if (!sums && GemvBulkEnabled() && LaunchBulk<T, kPair>(parts, x, out_f32, epi, up, scratch, stream, norm))
      return 0;
  }
  const int64_t K = parts[0].w.cols;
  int8_t* xq = static_cast<int8_t*>(scratch);
  float2* xds = reinterpret_cast<float2*>(xq + x.rows * K);  // K % 32 == 0: 16-byte aligned
  const bool pdl = PdlEnabled();
  int64_t blocks = 0;
  GemvArgs a = Shape<RPT, Fmt<T>::kUnitElems, UnitsInFlightT<T>(RPT)>(
      parts, x, out_f32, epi, up, &blocks, kPair ? SingleGroup<T>(K, true) : 0);
  SetNorm(a, norm);
  a.sums_out = sums_out;
  const size_t smem = SmemXBytes(x.rows, K);
  HYMT_CUDA_EXPECT(!sums || (R == 1 && x.rows == 1 && smem > 0), "sums of squares for one token row only");
  HYMT_CUDA_EXPECT(norm == nullptr || smem > 0, "a fused RMSNorm needs the kernel's own activation pass");
  const dim3 qgrid(static_cast<unsigned>((K / 16 + kThreads - 1) / kThreads), static_cast<unsigned>(x.rows));
  if (smem > 0) {
    if (norm == nullptr && K >= GemvPrequantMinK()) {
      Launch(pdl, QuantizeActKernel<T, true>, qgrid, dim3(kThreads), 0, stream,
             static_cast<const uint16_t*>(x.data), x.stride, static_cast<int>(K), xq, xds,
             PdlEarly(kPdlEarlySmall));
      a.pre = xq;
    }
    const auto kernel = GemvInt8Kernel<T, R, kPair, RPT, true>;
    int resident = ResidentBlocksPerSm(reinterpret_cast<const void*>(kernel), smem);
    if (kPair && PairBlocksPerSm() > 0)
      resident = resident > 0 ? std::min(resident, PairBlocksPerSm()) : PairBlocksPerSm();
    const int64_t grid = GemvGrid(blocks, resident);
    HYMT_CUDA_EXPECT(sums_out == nullptr || grid < kGemvSumsFloats, grid, " blocks' sums of squares");
    Launch(pdl, kernel, static_cast<unsigned>(grid), kThreads, smem, stream, a, static_cast<const int8_t*>(nullptr),
           static_cast<const float2*>(nullptr));
    return sums_out != nullptr ? grid : 0;
  }
  Launch(pdl, QuantizeActKernel<T, false>, qgrid, dim3(kThreads), 0, stream,
         static_cast<const uint16_t*>(x.data), x.stride, static_cast<int>(K), xq, xds,
         PdlEarly(kPdlEarlySmall));
  const auto kernel = GemvInt8Kernel<T, R, kPair, RPT, false>;
  const int64_t grid = GemvGrid(blocks, ResidentBlocksPerSm(reinterpret_cast<const void*>(kernel), 0));
  Launch(pdl, kernel, static_cast<unsigned>(grid), kThreads, 0, stream, a, static_cast<const int8_t*>(xq),
         static_cast<const float2*>(xds));
  return 0;
}

// One launch of GemvInt8TwoKernel<TA, TB> for a's and b's parts over one token row (LaunchGemvTwoTypes has
// checked the shape). The grid, as GemvGrid gives for all the row blocks, is split between the types by
// their weight bytes, each side no larger than its row blocks.
template <DType TA, DType TB>
void LaunchTwo(std::span<const GemvPart> pa, std::span<const GemvPart> pb, MatView x, cudaStream_t stream,
               const GemvNorm* norm) {
  int64_t blocks_a = 0, blocks_b = 0;
  GemvArgs ga = Shape<2, Fmt<TA>::kUnitElems, UnitsInFlightT<TA>(2)>(pa, x, false, GemvEpilogue::kStore,
                                                                     nullptr, &blocks_a);
  GemvArgs gb = Shape<2, Fmt<TB>::kUnitElems, UnitsInFlightT<TB>(2)>(pb, x, false, GemvEpilogue::kStore,
                                                                     nullptr, &blocks_b);
  SetNorm(ga, norm);
  SetNorm(gb, norm);
  const size_t smem = SmemXBytes(1, pa[0].w.cols);
  const auto kernel = GemvInt8TwoKernel<TA, TB>;
  const int64_t grid = std::max<int64_t>(
      2, GemvGrid(blocks_a + blocks_b, ResidentBlocksPerSm(reinterpret_cast<const void*>(kernel), smem)));
  const auto bytes = [](std::span<const GemvPart> parts) {
    double b = 0;
    for (const GemvPart& p : parts)
      b += static_cast<double>(p.w.rows) * static_cast<double>(DTypeBytes(p.w.dtype, p.w.cols));
    return b;
  };
  const double wa = bytes(pa), wb = bytes(pb);
  int64_t grid_a = std::llround(static_cast<double>(grid) * wa / (wa + wb));
  grid_a = std::clamp<int64_t>(grid_a, std::max<int64_t>(1, grid - blocks_b), std::min(blocks_a, grid - 1));
  const int64_t grid_b = std::min(blocks_b, grid - grid_a);
  Launch(PdlEnabled(), kernel, static_cast<unsigned>(grid_a + grid_b), kThreads, smem, stream, ga, gb,
         static_cast<int>(grid_a));
}

// The kernel for R token rows: RowsPerThread rows per thread, or at one token row OneRowRpt.
template <DType T, int R>
void LaunchFloat(std::span<const GemvPart> parts, MatView x, bool out_f32, GemvEpilogue epi, cudaStream_t stream,
                 const GemvNorm* norm) {
  const int rpt = R == 1 ? OneRowRpt(T, false) : 0;
  if (rpt == 2)
    LaunchT<T, R, false, 2>(parts, x, out_f32, epi, nullptr, stream, norm);
  else if (rpt == 4)  // never q6_k (OneRowRpt); the clamp only keeps its 4-row kernel from being built
    LaunchT<T, R, false, (T == DType::kQ6_K ? 2 : 4)>(parts, x, out_f32, epi, nullptr, stream, norm);
  else
    LaunchT<T, R, false, RowsPerThread(T, R)>(parts, x, out_f32, epi, nullptr, stream, norm);
}
template <DType T, int R>
int64_t LaunchInt8Rows(std::span<const GemvPart> parts, MatView x, bool out_f32, GemvEpilogue epi,
                       void* scratch, cudaStream_t stream, const GemvNorm* norm, float* sums_out) {
  const int rpt = R == 1 ? OneRowRpt(T, true) : 0;
  if (rpt == 2)
    return LaunchInt8<T, R, false, 2>(parts, x, out_f32, epi, nullptr, scratch, stream, norm, sums_out);
  if (rpt == 4)
    return LaunchInt8<T, R, false, 4>(parts, x, out_f32, epi, nullptr, scratch, stream, norm, sums_out);
  return LaunchInt8<T, R, false, RowsPerThread(T, R)>(parts, x, out_f32, epi, nullptr, scratch, stream, norm,
                                                      sums_out);
}

// Calls f.template operator()<R>() with R the kernel's token rows for n rows (1, 2, 4 or 8).
template <typename F>
void DispatchRows(int64_t n, F&& f) {
  if (n == 1)
    f.template operator()<1>();
  else if (n == 2)
    f.template operator()<2>();
  else if (n <= 4)
    f.template operator()<4>();
  else
    f.template operator()<8>();
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

// The current device's compute capability (major) and SM count, asked once per device (-1: unknown).
struct DeviceTraits {
  int cc_major, sms;
};
DeviceTraits CurrentDeviceTraits() {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return {-1, -1};
  static std::atomic<int> cc_major[64], sm_count[64];  // 0: not asked yet
  int cc = cc_major[dev].load(std::memory_order_acquire);
  if (cc == 0) {
    cudaDeviceProp prop;
    const bool ok = cudaGetDeviceProperties(&prop, dev) == cudaSuccess;
    sm_count[dev].store(ok ? prop.multiProcessorCount : -1, std::memory_order_relaxed);
    cc = ok ? prop.major : -1;
    cc_major[dev].store(cc, std::memory_order_release);
  }
  return {cc, sm_count[dev].load(std::memory_order_relaxed)};
}

bool PdlEnabled() {
  static const bool env_on = !EnvEquals("HYMT_PDL", "0");
  return env_on && CurrentDeviceTraits().cc_major >= 9;
}

bool PdlEarly(int level) {
  static const int env = EnvInt("HYMT_PDL_EARLY", kPdlEarlySmall);
  return env >= level && PdlEnabled();
}

// Whether one-token-row int8 GEMVs take the bulk-copy kernel, set by SetGemvBulk (-1: HYMT_GEMV_BULK=1 turns
// it on; off by default, slower than the register kernel: see GemvBulkKernel); sm_90+ only.
std::atomic<int> g_gemv_bulk{-1};

void SetGemvBulk(int on) {
  g_gemv_bulk.store(on, std::memory_order_relaxed);
}

bool GemvBulkEnabled() {
  static const bool env_on = EnvEquals("HYMT_GEMV_BULK", "1");
  const int set = g_gemv_bulk.load(std::memory_order_relaxed);
  return (set >= 0 ? set != 0 : env_on) && CurrentDeviceTraits().cc_major >= 9;
}

int SmCount() {
  return CurrentDeviceTraits().sms;
}

bool GemvFastSupported(const WeightView& w, MatView x) {
  const int unit = FmtUnitElems(w.dtype);
  return unit > 0 && w.cols % unit == 0 && x.stride % 8 == 0 &&
         reinterpret_cast<uintptr_t>(x.data) % 16 == 0 && reinterpret_cast<uintptr_t>(w.data) % 16 == 0;
}

void SetGemvBlocksPerSm(int n) {
  g_blocks_per_sm.store(n, std::memory_order_relaxed);
}

void SetGemvPrequantMinK(int64_t k) {
  g_prequant_min_k.store(k, std::memory_order_relaxed);
}

bool GemvInt8Supported(DType t) {
  return t == DType::kQ4_K || t == DType::kQ6_K || t == DType::kQ8_0;
}

size_t GemvActScratchBytes(int64_t rows, int64_t cols) {
  return static_cast<size_t>(rows * cols) + static_cast<size_t>(rows * (cols / 16)) * sizeof(float2);
}

// Whether GEMVs fuse the RMSNorm before them, set by SetGemvFuseNorm (-1: HYMT_FUSE_NORM=1 turns it on;
// off by default, see cuda_internal.h).
std::atomic<int> g_fuse_norm{-1};

void SetGemvFuseNorm(int on) {
  g_fuse_norm.store(on, std::memory_order_relaxed);
}

bool GemvNormFusable(DType t, int64_t rows, int64_t cols, size_t act_scratch_bytes) {
  static const bool env_on = EnvEquals("HYMT_FUSE_NORM", "1");
  const int set = g_fuse_norm.load(std::memory_order_relaxed);
  const bool on = set >= 0 ? set != 0 : env_on;
  if (!on || rows < 1 || rows > kGemvMaxRows || cols % 8 != 0 || FmtUnitElems(t) == 0) return false;
  const bool int8 = GemvInt8Supported(t) && act_scratch_bytes >= GemvActScratchBytes(rows, cols);
  return int8 ? SmemXBytes(rows, cols) > 0 : SmemNormBytes(rows, cols) > 0;
}

// Whether RMSNorms take their sums of squares from the GEMV before them (cuda_internal.h); -1: the
// environment's choice.
std::atomic<int> g_norm_sums{-1};

void SetGemvNormSums(int on) {
  g_norm_sums.store(on, std::memory_order_relaxed);
}

namespace {
bool NormSumsOn() {
  static const bool env_on = EnvEquals("HYMT_NORM_SUMS", "1") || EnvEquals("HYMT_NORM_SUMS", "2");
  const int set = g_norm_sums.load(std::memory_order_relaxed);
  return set >= 0 ? set != 0 : env_on;
}
}  // namespace

bool GemvSumsFusable(DType t, int64_t rows, int64_t cols, size_t act_scratch_bytes) {
  return NormSumsOn() && rows == 1 && cols % 16 == 0 && GemvInt8Supported(t) && !GemvBulkEnabled() &&
         FmtUnitElems(t) > 0 && act_scratch_bytes >= GemvActScratchBytes(rows, cols) &&
         SmemXBytes(rows, cols) > 0;
}

bool GemvSumsWritable(DType t, int64_t rows, int64_t n, int64_t cols, size_t act_scratch_bytes) {
  // At most one block a row block of one row: fewer parts than kGemvSumsFloats - 1 when n is.
  return GemvSumsFusable(t, rows, cols, act_scratch_bytes) && n < kGemvSumsFloats - 1;
}

// Whether a launch can take this fused norm: from sums of squares (GemvSumsFusable) or computing them
// itself (GemvNormFusable).
namespace {
bool NormFits(const GemvNorm& norm, DType t, int64_t rows, int64_t cols, size_t act_scratch_bytes) {
  return norm.sums != nullptr ? GemvSumsFusable(t, rows, cols, act_scratch_bytes)
                              : GemvNormFusable(t, rows, cols, act_scratch_bytes);
}
}  // namespace

int64_t LaunchGemvParts(std::span<const GemvPart> parts, MatView x, bool out_f32, GemvEpilogue epi,
                        const WeightView* up, void* act_scratch, size_t act_scratch_bytes,
                        cudaStream_t stream, const GemvNorm* norm, float* sums_out) {
  HYMT_CUDA_EXPECT(x.rows >= 1 && x.rows <= kGemvMaxRows, x.rows, " rows");
  HYMT_CUDA_EXPECT(!parts.empty() && parts.size() <= static_cast<size_t>(kGemvMaxParts), parts.size(), " parts");
  HYMT_CUDA_EXPECT(!out_f32 || epi == GemvEpilogue::kStore, "an f32 output takes no epilogue");
  const bool pair = epi == GemvEpilogue::kSwiGlu;
  HYMT_CUDA_EXPECT(!pair || (up != nullptr && parts.size() == 1 && up->dtype == parts[0].w.dtype &&
                             up->rows == parts[0].w.rows && up->cols == parts[0].w.cols),
                   "SwiGLU takes one gate and an up weight of its shape");
  for (const GemvPart& p : parts) {
    HYMT_CUDA_EXPECT(p.w.dtype == parts[0].w.dtype && p.w.cols == parts[0].w.cols, "parts of one type and width");
    HYMT_CUDA_EXPECT(GemvFastSupported(p.w, x));
  }
  if (pair) HYMT_CUDA_EXPECT(GemvFastSupported(*up, x));
  const DType t = parts[0].w.dtype;
  const bool int8 = GemvInt8Supported(t) && act_scratch != nullptr &&
                    GemvActScratchBytes(x.rows, parts[0].w.cols) <= act_scratch_bytes;
  const size_t act_bytes = act_scratch != nullptr ? act_scratch_bytes : 0;
  HYMT_CUDA_EXPECT(norm == nullptr || NormFits(*norm, t, x.rows, parts[0].w.cols, act_bytes),
                   "no fused RMSNorm for ", x.rows, " rows of ", parts[0].w.cols, " ", DTypeName(t));
  int64_t n_out = 0;
  for (const GemvPart& p : parts) n_out += p.w.rows;
  HYMT_CUDA_EXPECT(sums_out == nullptr || (epi == GemvEpilogue::kAdd && !out_f32 &&
                                           GemvSumsWritable(t, x.rows, n_out, parts[0].w.cols, act_bytes)),
                   "no sums of squares from this launch");
  if (pair) {
    // One token row only: a group holding gate and up rows for more tokens needs more registers than
    // keep the SM occupied (over 100 at two rows).
    HYMT_CUDA_EXPECT(x.rows == 1, "the SwiGLU GEMV takes one token row, not ", x.rows);
    if (int8 && t == DType::kQ4_K)
      LaunchInt8<DType::kQ4_K, 1, true, 1>(parts, x, out_f32, epi, up, act_scratch, stream, norm);
    else if (int8 && t == DType::kQ6_K)
      LaunchInt8<DType::kQ6_K, 1, true, 1>(parts, x, out_f32, epi, up, act_scratch, stream, norm);
    else if (int8)
      LaunchInt8<DType::kQ8_0, 1, true, 1>(parts, x, out_f32, epi, up, act_scratch, stream, norm);
    const bool ok =
        int8 || DispatchFmt(t, [&]<DType T>() { LaunchT<T, 1, true, 1>(parts, x, out_f32, epi, up, stream, norm); });
    HYMT_CUDA_EXPECT(ok, "no GEMV kernel for ", DTypeName(t));
    return 0;
  }
  if (int8) {
    int64_t sum_parts = 0;
    DispatchRows(x.rows, [&]<int R>() {
      if (t == DType::kQ4_K)
        sum_parts =
            LaunchInt8Rows<DType::kQ4_K, R>(parts, x, out_f32, epi, act_scratch, stream, norm, sums_out);
      else if (t == DType::kQ6_K)
        sum_parts =
            LaunchInt8Rows<DType::kQ6_K, R>(parts, x, out_f32, epi, act_scratch, stream, norm, sums_out);
      else
        sum_parts =
            LaunchInt8Rows<DType::kQ8_0, R>(parts, x, out_f32, epi, act_scratch, stream, norm, sums_out);
    });
    return sum_parts;
  }
  const bool ok = DispatchFmt(t, [&]<DType T>() {
    DispatchRows(x.rows, [&]<int R>() { LaunchFloat<T, R>(parts, x, out_f32, epi, stream, norm); });
  });
  HYMT_CUDA_EXPECT(ok, "no GEMV kernel for ", DTypeName(t));
  return 0;
}

void LaunchGemv(const WeightView& w, MatView x, MatView out, bool out_f32, void* act_scratch,
                size_t act_scratch_bytes, cudaStream_t stream) {
  const GemvPart part{w, out};
  LaunchGemvParts(std::span<const GemvPart>(&part, 1), x, out_f32, GemvEpilogue::kStore, nullptr, act_scratch,
                  act_scratch_bytes, stream);
}

// How a group of weights of two types launches, set by SetGemvMixedGroups (-1: HYMT_GEMV_MIXED_GROUPS, 2 by
// default). One launch for the two types shortened a q4_k_m decode step on an H100 by 0.8-1.3% against one
// per type (graph 2.377-2.385 against 2.403-2.408 ms; docs/BENCHMARKS.md, "One launch for a q4_k and q6_k group").
std::atomic<int> g_mixed_groups{-1};
std::atomic<int64_t> g_two_type_launches{0};

void SetGemvMixedGroups(int mode) {
  g_mixed_groups.store(mode, std::memory_order_relaxed);
}

int GemvMixedGroups() {
  static const int env = [] {
    const int v = EnvInt("HYMT_GEMV_MIXED_GROUPS", 2);
    return v >= 0 && v <= 2 ? v : 2;
  }();
  const int set = g_mixed_groups.load(std::memory_order_relaxed);
  return set >= 0 && set <= 2 ? set : env;
}

int64_t GemvTwoTypeLaunches() {
  return g_two_type_launches.load(std::memory_order_relaxed);
}

bool LaunchGemvTwoTypes(std::span<const GemvPart> a, std::span<const GemvPart> b, MatView x,
                        void* act_scratch, size_t act_scratch_bytes, cudaStream_t stream,
                        const GemvNorm* norm) {
  if (GemvMixedGroups() != 2 || x.rows != 1 || a.empty() || b.empty() || act_scratch == nullptr) return false;
  if (a.size() > static_cast<size_t>(kGemvMaxParts) || b.size() > static_cast<size_t>(kGemvMaxParts))
    return false;
  const int64_t K = a[0].w.cols;
  for (std::span<const GemvPart> parts : {a, b})
    for (const GemvPart& p : parts)
      if (p.w.dtype != parts[0].w.dtype || p.w.cols != K || !GemvFastSupported(p.w, x)) return false;
  if (a[0].w.dtype == DType::kQ6_K) std::swap(a, b);
  // Only the pair a _K_M file has, on the path its separate launches would take: int8 activations
  // quantised by each block into shared memory (no separate quantising launch), two rows a thread, no
  // bulk copies.
  if (a[0].w.dtype != DType::kQ4_K || b[0].w.dtype != DType::kQ6_K ||
      GemvActScratchBytes(1, K) > act_scratch_bytes || SmemXBytes(1, K) == 0 || K >= GemvPrequantMinK() ||
      OneRowRpt(DType::kQ4_K, true) != 2 || OneRowRpt(DType::kQ6_K, true) != 2 || GemvBulkEnabled())
    return false;
  if (norm != nullptr && !(NormFits(*norm, DType::kQ4_K, 1, K, act_scratch_bytes) &&
                           NormFits(*norm, DType::kQ6_K, 1, K, act_scratch_bytes)))
    return false;
  LaunchTwo<DType::kQ4_K, DType::kQ6_K>(a, b, x, stream, norm);
  g_two_type_launches.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void LaunchGemvSimple(const WeightView& w, MatView x, MatView out, bool out_f32, cudaStream_t stream) {
  if (x.rows == 0 || w.rows == 0) return;
  HYMT_CUDA_EXPECT(x.rows <= 65535, x.rows, " rows for the simple kernel");
  const dim3 grid(static_cast<unsigned>(w.rows), static_cast<unsigned>(x.rows));
  GemvSimpleKernel<<<grid, 128, 0, stream>>>(w, x, out.data, out.stride, out_f32);
  HYMT_CUDA_CHECK_LAUNCH();
}

}  // namespace hymt::cuda
