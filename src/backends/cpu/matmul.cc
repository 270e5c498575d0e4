// MatMul launcher: shape checks, the GEMV / GEMM choice, the split over threads, and the activation
// quantisation of the block formats' integer kernels. Kernels: kernels/matmul_packed.cc (weights
// PrepareWeight packed: q8_0, q4_k, q6_k on AVX-512; matmul_packed_avx2.cc on AVX2; every token count), kernels/matmul_float.cc (GEMV
// of f32, f16, bf16, f8_e4m3; the GEMM of every other weight) and kernels/matmul_quant.cc (GEMV of
// q4_0, q4_1, q5_0, q5_1, q8_0, q4_k, q5_k, q6_k in their stored layout with int8 activations; their
// dequantisation for the GEMM).
#include "backends/cpu/cpu_ops_impl.h"
#include "backends/cpu/packed.h"
#include "core/status.h"

namespace hymt::cpu {
namespace {

bool IsFloatWeight(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16 || t == DType::kF8E4M3;
}
bool IsQuantWeight(DType t) {
  switch (t) {
    case DType::kQ4_0:
    case DType::kQ4_1:
    case DType::kQ5_0:
    case DType::kQ5_1:
    case DType::kQ8_0:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
      return true;
    default:
      return false;
  }
}

// Below this many multiply-adds a matmul runs on the calling thread (waking the pool costs a few us).
constexpr int64_t kSerialMacs = int64_t{1} << 16;
// From this many token rows the activations of a packed matmul are quantised on every thread.
constexpr int64_t kParallelQuantRows = 16;
static_assert(kMatMulRowAlign % kPackRows == 0, "threads split packed weights at group boundaries");

}  // namespace

MatMulArgs CpuOps::MatMulArgsFor(const Tensor& x, const Weight& w, Tensor out) const {
  HYMT_CHECK(x.cols == w.cols && out.cols == w.rows && out.rows == x.rows, "matmul shapes x[", x.rows, ",",
             x.cols, "] w[", w.rows, ",", w.cols, "] out[", out.rows, ",", out.cols, "] for ", w.name);
  HYMT_CHECK(x.dtype == DType::kF32 && out.dtype == DType::kF32, "the CPU backend computes in f32");
  MatMulArgs a;
  a.x = x.As<const float>();
  a.x_stride = x.stride;
  a.n_tokens = x.rows;
  a.k = w.cols;
  a.w = static_cast<const uint8_t*>(IsPacked(w) ? w.prepared : w.data);
  a.w_row_bytes = DTypeBytes(w.dtype, w.cols);
  a.w_dtype = w.dtype;
  a.scale = w.scale;
  a.out = out.As<float>();
  a.out_stride = out.stride;
  return a;
}

const uint8_t* CpuOps::QuantizeActRows(const MatMulArgs& a, size_t* xq_row) {
  *xq_row = k_.quant_act_row_bytes(a.w_dtype, a.k);
  const size_t row = *xq_row;
  uint8_t* xq = static_cast<uint8_t*>(act_scratch_.Get(row * static_cast<size_t>(a.n_tokens)));
  auto quantize = [&](int64_t begin, int64_t end, int) {
    for (int64_t t = begin; t < end; ++t)
      k_.quantize_act_row(a.w_dtype, a.x + t * a.x_stride, a.k, xq + static_cast<size_t>(t) * row);
  };
  if (a.n_tokens < kParallelQuantRows) {
    quantize(0, a.n_tokens, 0);
  } else {
    ParallelChunks(DefaultThreadPool(), a.n_tokens, 1, quantize);
  }
  return xq;
}

void CpuOps::RunPacked(const MatMulArgs& a, const uint8_t* xq, size_t xq_row, int64_t n_rows) {
  auto run = [&](int64_t begin, int64_t end, int) { k_.matmul_packed(a, xq, xq_row, begin, end); };
  if (a.n_tokens * n_rows * a.k < kSerialMacs) {
    run(0, n_rows, 0);
  } else {
    ParallelChunks(DefaultThreadPool(), n_rows, kMatMulRowAlign, run);
  }
}

void CpuOps::MatMul(const Tensor& x, const Weight& w, Tensor out) {
  const MatMulArgs a = MatMulArgsFor(x, w, out);
  if (x.rows == 0 || w.rows == 0) return;

  const bool is_float = IsFloatWeight(w.dtype);
  if (!is_float && !IsQuantWeight(w.dtype))
    Fail(ErrorCode::kUnsupported, "the CPU backend cannot multiply by ", DTypeName(w.dtype), " weights (",
         w.name, ")");
  const int64_t block = GetDTypeInfo(w.dtype).block_size;
  HYMT_CHECK(w.cols % block == 0, w.name, ": ", w.cols, " inputs is not a whole number of ",
             DTypeName(w.dtype), " blocks");

  ThreadPool& pool = DefaultThreadPool();
  const bool serial = x.rows * w.rows * w.cols < kSerialMacs;
  if (IsPacked(w)) {  // decode and prefill: int8 activations against the packed weight (packed.h)
    size_t xq_row = 0;
    const uint8_t* xq = QuantizeActRows(a, &xq_row);
    RunPacked(a, xq, xq_row, w.rows);
    return;
  }
  auto split_rows = [&](const std::function<void(int64_t, int64_t, int)>& fn) {
    if (serial) {
      fn(0, w.rows, 0);
    } else {
      ParallelChunks(pool, w.rows, kMatMulRowAlign, fn);
    }
  };

  if (x.rows > kGemvMaxTokens) {  // GEMM: every weight type, packed f32 panels
    size_t stride = 0;
    uint8_t* scratch = gemm_scratch_.PerThread(serial ? 1 : pool.size(), kGemmScratchBytes, &stride);
    split_rows(
        [&](int64_t begin, int64_t end, int thread) { k_.gemm(a, begin, end, scratch + stride * thread); });
    return;
  }
  if (is_float) {
    split_rows([&](int64_t begin, int64_t end, int) { k_.gemv_float(a, begin, end); });
    return;
  }
  // Block formats: quantise each token's row once (int8 with a scale per block), then every thread
  // reads them all.
  const size_t xq_row = k_.quant_act_row_bytes(w.dtype, w.cols);
  uint8_t* xq = static_cast<uint8_t*>(act_scratch_.Get(xq_row * static_cast<size_t>(x.rows)));
  for (int64_t t = 0; t < x.rows; ++t)
    k_.quantize_act_row(w.dtype, a.x + t * a.x_stride, a.k, xq + static_cast<size_t>(t) * xq_row);
  split_rows([&](int64_t begin, int64_t end, int) { k_.gemv_quant(a, xq, xq_row, begin, end); });
}

// Products that read the same x (q, k and v; gate and up): when every weight is packed and their
// activation rows have one format (q8_0's, or the K formats' shared by q4_k and q6_k), x is quantised once
// for all of them instead of once a product; each product is then what MatMul computes, bit for bit.
bool CpuOps::SharesActRows(std::span<const Weight* const> ws) const {
  for (const Weight* w : ws)
    if (!IsPacked(*w) || (w->dtype == DType::kQ8_0) != (ws[0]->dtype == DType::kQ8_0)) return false;
  return !ws.empty();
}

void CpuOps::MatMulGroup(const Tensor& x, std::span<const Weight* const> ws, std::span<const Tensor> outs) {
  HYMT_CHECK(ws.size() == outs.size(), ws.size(), " weights for ", outs.size(), " outputs");
  if (x.rows == 0 || !SharesActRows(ws)) return Ops::MatMulGroup(x, ws, outs);
  size_t xq_row = 0;
  const uint8_t* xq = nullptr;
  for (size_t i = 0; i < ws.size(); ++i) {
    const MatMulArgs a = MatMulArgsFor(x, *ws[i], outs[i]);
    if (xq == nullptr) xq = QuantizeActRows(a, &xq_row);  // the first product's format is every one's
    if (ws[i]->rows > 0) RunPacked(a, xq, xq_row, ws[i]->rows);
  }
}

void CpuOps::MatMulSwiGlu(const Tensor& x, const Weight& gate, const Weight& up, Tensor up_scratch, Tensor out) {
  const Weight* ws[] = {&gate, &up};
  const Tensor outs[] = {out, up_scratch};
  MatMulGroup(x, ws, outs);
  SwiGlu(out, up_scratch, out);
}

}  // namespace hymt::cpu
