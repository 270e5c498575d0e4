// The CUDA kernel lab: ceilings measured in the same run, then each kernel as a ratio of its ceiling.
//
//   cuda_kernels [--quick | --smoke | --gemv]
//
// --gemv: the ceilings, the batch-1 GEMVs and a decode layer's GEMVs only (for tuning: HYMT_GEMV_ITERS;
// HYMT_LAB_ONLY=bf16|q8_0|q4_k|... keeps one format).
// --quick: fewer repeats and row counts. --smoke: tiny shapes, for checking the program itself (for
// example under tools/cuda_emu); its numbers mean nothing.
// 1. Ceilings: device read bandwidth (a read-only reduction over 4 GiB: bytes read / time), device-to-
//    device copy (bytes read + written / time), cuBLAS bf16 GEMM 8192^3 (TFLOP/s).
// 2. GEMV (decode MatMul, 1..8 token rows) per weight format at the Hunyuan-MT-7B shapes: GB/s of weight
//    read and the fraction of the read bandwidth. Weights rotate over enough copies to exceed the L2 cache
//    several times, so every call streams from HBM as in a real decode step.
// 3. A decode layer's GEMVs at batch 1: one launch per weight against the fused ops (MatMulGroup,
//    MatMulAdd, MatMulSwiGlu).
// 4. Attention decode (flash decoding) at contexts 512 and 2048, 32 q / 8 kv heads, head_dim 128: GB/s of
//    K/V read; each call uses another layer's cache (32 layers), as the model does.
// 5. Prefill: MatMul with 512 rows (cuBLAS; quantised weights through bf16 slabs) and causal prefill
//    attention of one layer over prompts of 512 and 2,048 tokens, on tensor cores and on CUDA cores
//    (CudaOpsOptions::prefill_attention_tensor_cores), in TFLOP/s and as a fraction of the GEMM ceiling.
// 6. A decode-step estimate per format from the measured GEMVs.
// Timing: CUDA events around CUDA-graph replays of 16-32 calls (so that launch gaps are those of a
// graphed decode step), 3 warm-up replays, the median of 10 (5 with --quick).
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backends/cuda/cuda_ops.h"
#include "core/half.h"
#include "core/status.h"
#include "quant/blocks.h"

namespace hymt {
namespace {

#define CK(expr)                                                                           \
  do {                                                                                     \
    cudaError_t e_ = (expr);                                                               \
    if (e_ != cudaSuccess)                                                                 \
      Fail(ErrorCode::kInternal, #expr, ": ", cudaGetErrorString(e_), " line ", __LINE__); \
  } while (0)

int g_repeats = 10;
bool g_smoke = false;

// ---- ceilings ----

// Each thread sums 16-byte words in a grid-stride loop (4 independent loads in flight), so the loop is
// bound by the DRAM read rate; the sum is written so the loads cannot be dropped.
__global__ void ReadKernel(const uint4* p, size_t n, unsigned* sink) {
  unsigned acc = 0;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    const uint4 a = p[i], b = p[i + stride], c = p[i + 2 * stride], d = p[i + 3 * stride];
    acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
  }
  for (; i < n; i += stride) acc ^= p[i].x ^ p[i].y ^ p[i].z ^ p[i].w;
  if (acc == 0x12345678u) *sink = acc;  // practically never true; keeps the loads
}

// xorshift bits into n 32-bit words, masked to keep bf16 pairs finite (random data, never zeros).
__global__ void RandomFillKernel(uint32_t* p, size_t n, uint32_t seed, uint32_t and_mask, uint32_t or_mask) {
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    uint32_t x = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    x ^= x << 13, x ^= x >> 17, x ^= x << 5;
    p[i] = (x & and_mask) | or_mask;
  }
}
// bf16 pairs with exponent 120..127 (|x| in [2^-7, 1)) and random sign and mantissa.
constexpr uint32_t kBf16And = 0x83ff83ffu, kBf16Or = 0x3c003c00u;

void RandomFill(void* p, size_t bytes, uint32_t seed, cudaStream_t s) {
  RandomFillKernel<<<1024, 256, 0, s>>>(static_cast<uint32_t*>(p), bytes / 4, seed, kBf16And, kBf16Or);
  CK(cudaGetLastError());
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median milliseconds of `body` (enqueued on s) over g_repeats runs after 3 warm-ups.
double TimeMs(cudaStream_t s, const std::function<void()>& body) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  for (int i = 0; i < (g_smoke ? 1 : 3); ++i) body();
  std::vector<double> ms;
  for (int r = 0; r < g_repeats; ++r) {
    CK(cudaEventRecord(a, s));
    body();
    CK(cudaEventRecord(b, s));
    CK(cudaEventSynchronize(b));
    float t = 0;
    CK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return Median(ms);
}

struct Ceilings {
  double read_gbs = 0, copy_gbs = 0, gemm_tflops = 0;
};

Ceilings MeasureCeilings(Ops& ops, CudaOps& cuda) {
  Ceilings c;
  cudaStream_t s = static_cast<cudaStream_t>(cuda.stream());
  const size_t bytes = g_smoke ? size_t{1} << 20 : size_t{4} << 30;
  auto buf = ops.Allocate(bytes, "read-bandwidth buffer");
  auto dst = ops.Allocate(bytes / 2, "copy destination");
  auto sink = ops.Allocate(64, "sink");
  RandomFill(buf->data(), bytes, 1, s);
  const double ms_read = TimeMs(s, [&] {
    ReadKernel<<<g_smoke ? 4 : 132 * 16, 256, 0, s>>>(static_cast<const uint4*>(buf->data()), bytes / 16,
                                                      static_cast<unsigned*>(sink->data()));
  });
  c.read_gbs = bytes / ms_read / 1e6;
  const double ms_copy = TimeMs(
      s, [&] { CK(cudaMemcpyAsync(dst->data(), buf->data(), bytes / 2, cudaMemcpyDeviceToDevice, s)); });
  c.copy_gbs = bytes / ms_copy / 1e6;  // bytes/2 read + bytes/2 written

  const int n = g_smoke ? 64 : 8192;
  cublasHandle_t h;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) Fail(ErrorCode::kInternal, "cublasCreate");
  cublasSetStream(h, s);
  auto ws = ops.Allocate(size_t{32} << 20, "cublas workspace");
  cublasSetWorkspace(h, ws->data(), ws->size());
  const size_t mat = static_cast<size_t>(n) * n * 2;
  auto a = ops.Allocate(mat, "A"), b = ops.Allocate(mat, "B"), d = ops.Allocate(mat, "C");
  RandomFill(a->data(), mat, 2, s);
  RandomFill(b->data(), mat, 3, s);
  const float one = 1, zero = 0;
  const double ms_gemm = TimeMs(s, [&] {
    cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, n, n, n, &one, a->data(), CUDA_R_16BF, n, b->data(),
                 CUDA_R_16BF, n, &zero, d->data(), CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  });
  c.gemm_tflops = 2.0 * n * n * static_cast<double>(n) / ms_gemm / 1e9;
  cublasDestroy(h);
  CK(cudaStreamSynchronize(s));
  return c;
}

// ---- weights ----

// Host bytes of a weight with valid random content (scales fixed to small f16 values). Fast: a few
// hundred MB per second, enough for the 1 GB output head.
std::vector<uint8_t> HostWeight(DType t, int64_t rows, int64_t cols, uint64_t seed) {
  std::vector<uint8_t> bytes(DTypeBytes(t, cols) * static_cast<size_t>(rows));
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (size_t i = 0; i + 8 <= bytes.size(); i += 8) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    std::memcpy(&bytes[i], &x, 8);
  }
  const size_t n = bytes.size();
  auto f16 = [](float v) { return F32ToF16(v); };
  switch (t) {
    case DType::kBF16:
    case DType::kF16:
      for (size_t i = 0; i + 1 < n; i += 2) {
        uint16_t v;
        std::memcpy(&v, &bytes[i], 2);
        v = t == DType::kBF16 ? static_cast<uint16_t>((v & 0x83ff) | 0x3c00)
                              : static_cast<uint16_t>((v & 0x83ff) | 0x2000);
        std::memcpy(&bytes[i], &v, 2);
      }
      break;
    case DType::kF8E4M3:
      for (uint8_t& b : bytes) b &= 0xbf;  // clears an exponent bit: no NaN encodings
      break;
    case DType::kQ8_0:
      for (size_t i = 0; i < n; i += sizeof(BlockQ8_0))
        reinterpret_cast<BlockQ8_0*>(&bytes[i])->d = f16(0.01f);
      break;
    case DType::kQ4_K:
      for (size_t i = 0; i < n; i += sizeof(BlockQ4_K)) {
        reinterpret_cast<BlockQ4_K*>(&bytes[i])->d = f16(0.002f);
        reinterpret_cast<BlockQ4_K*>(&bytes[i])->dmin = f16(0.001f);
      }
      break;
    case DType::kQ6_K:
      for (size_t i = 0; i < n; i += sizeof(BlockQ6_K))
        reinterpret_cast<BlockQ6_K*>(&bytes[i])->d = f16(0.0005f);
      break;
    default:
      Fail(ErrorCode::kUnsupported, "bench: no random ", DTypeName(t));
  }
  return bytes;
}

// A prepared weight and copies of it (device-to-device), enough to stream `min_total` bytes per cycle.
struct WeightSet {
  std::vector<std::unique_ptr<Buffer>> copies;
  std::vector<Weight> w;
  size_t bytes = 0;
};

WeightSet MakeWeights(Ops& ops, DType t, int64_t rows, int64_t cols, size_t min_total) {
  WeightSet s;
  std::vector<uint8_t> host = HostWeight(t, rows, cols, static_cast<uint64_t>(rows * 31 + cols));
  Weight hw;
  hw.name = "bench";
  hw.dtype = t;
  hw.rows = rows;
  hw.cols = cols;
  hw.data = host.data();
  hw.scale = t == DType::kF8E4M3 ? 0.01f : 1.0f;
  const Weight first = ops.PrepareWeight(hw);
  ops.Sync();  // the upload runs on the backend's stream; cudaMemcpy below runs on the legacy stream
  s.bytes = CudaPreparedWeightBytes(t, rows, cols);
  s.w.push_back(first);
  const size_t n = std::max<size_t>(2, (min_total + s.bytes - 1) / s.bytes);
  for (size_t i = 1; i < n; ++i) {
    s.copies.push_back(ops.Allocate(s.bytes, "bench weight copy"));
    CK(cudaMemcpy(s.copies.back()->data(), first.data, s.bytes, cudaMemcpyDeviceToDevice));
    Weight w = first;
    w.data = w.prepared = s.copies.back()->data();
    s.w.push_back(w);
  }
  return s;
}

struct DevTensor {
  std::unique_ptr<Buffer> buf;
  Tensor t;
};
DevTensor NewTensor(Ops& ops, CudaOps& cuda, int64_t rows, int64_t cols, DType dt = DType::kBF16) {
  DevTensor d;
  d.buf = ops.Allocate(std::max<size_t>(DTypeBytes(dt, cols) * rows, 256), "bench tensor");
  RandomFill(d.buf->data(), d.buf->size(), static_cast<uint32_t>(rows * 7 + cols),
             static_cast<cudaStream_t>(cuda.stream()));
  d.t.data = d.buf->data();
  d.t.dtype = dt;
  d.t.rows = rows;
  d.t.cols = cols;
  d.t.stride = cols;
  d.t.device = ops.device();
  return d;
}

// Milliseconds per call of `calls` captured into one graph (calls(i) issues call i).
double GraphedMsPerCall(CudaOps& cuda, int n_calls, const std::function<void(int)>& calls) {
  cuda.BeginCapture();
  for (int i = 0; i < n_calls; ++i) calls(i);
  auto graph = cuda.EndCapture();
  cudaStream_t s = static_cast<cudaStream_t>(cuda.stream());
  const double ms = TimeMs(s, [&] {
    cuda.BeginReplay(*graph);
    for (int i = 0; i < n_calls; ++i) calls(i);
    if (!cuda.EndReplay()) Fail(ErrorCode::kInternal, "bench: replay did not match the capture");
  });
  return ms / n_calls;
}

struct Shape {
  const char* name;
  int64_t rows, cols;
  int per_layer;  // matrices of this shape per layer (0: the head, once per token)
};
// Hunyuan-MT-7B: q and o are 4096x4096, k and v 1024x4096, gate and up 14336x4096, down 4096x14336.
const Shape kSmokeShapes[] = {{"q,o", 256, 256, 2},
                              {"k,v", 64, 256, 2},
                              {"gate,up", 512, 256, 2},
                              {"down", 256, 512, 1},
                              {"head", 1000, 256, 0}};
const Shape kShapes[] = {{"q,o", 4096, 4096, 2},
                         {"k,v", 1024, 4096, 2},
                         {"gate,up", 14336, 4096, 2},
                         {"down", 4096, 14336, 1},
                         {"head", 128256, 4096, 0}};
constexpr int kLayers = 32;

// HYMT_LAB_ONLY=label limits the GEMV sections to one format (for a profiler run over one kernel).
bool LabWants(const char* label) {
  const char* only = std::getenv("HYMT_LAB_ONLY");
  return only == nullptr || std::strcmp(only, label) == 0;
}

void Run(bool quick, bool smoke, bool gemv_only) {
  if (CudaDeviceCount() == 0) Fail(ErrorCode::kUnavailable, "no CUDA device");
  g_smoke = smoke;
  g_repeats = smoke ? 1 : (quick ? 5 : 10);
  const int layers = smoke ? 2 : kLayers;
  std::unique_ptr<Ops> ops_owner = CreateCudaOps(0);
  Ops& ops = *ops_owner;
  CudaOps& cuda = *AsCudaOps(&ops);
  size_t free_b = 0, total_b = 0;
  CudaMemoryInfo(0, &free_b, &total_b);
  std::printf("device: %s, %.1f GiB free of %.1f\n", CudaDeviceName(0).c_str(), free_b / 1073741824.0,
              total_b / 1073741824.0);

  const Ceilings c = MeasureCeilings(ops, cuda);
  std::printf("\n== ceilings\n");
  std::printf("read bandwidth (reduction over 4 GiB)   %8.0f GB/s\n", c.read_gbs);
  std::printf("device-to-device copy (read + write)    %8.0f GB/s\n", c.copy_gbs);
  std::printf("cuBLAS bf16 GEMM 8192^3                 %8.1f TFLOP/s\n", c.gemm_tflops);

  // ---- GEMV ----
  std::printf("\n== GEMV (decode MatMul): weight bytes / time, against the read bandwidth\n");
  std::printf("%-8s %-8s %-14s %4s %9s %9s %9s %7s\n", "format", "matrix", "shape", "rows", "MB", "us",
              "GB/s", "of read");
  // q4_k runs twice: with int8 activations (dp4a, the default) and with the weights decoded to f32
  // (CudaOpsOptions::int8_activations off), on a second backend instance.
  CudaOpsOptions f32_act;
  f32_act.int8_activations = false;
  std::unique_ptr<Ops> ops_f32_owner = CreateCudaOps(0, f32_act);
  struct Format {
    const char* label;
    DType t;
    Ops* ops;
  };
  const Format formats[] = {{"bf16", DType::kBF16, &ops}, {"f8_e4m3", DType::kF8E4M3, &ops},
                            {"q8_0", DType::kQ8_0, &ops}, {"q6_k", DType::kQ6_K, &ops},
                            {"q4_k", DType::kQ4_K, &ops}, {"q4_k-f32", DType::kQ4_K, ops_f32_owner.get()}};
  const size_t rotate_bytes = smoke ? 0 : size_t{512} << 20;  // > 8x the 60 MB L2
  std::vector<double> step_ms(std::size(formats), 0.0);
  for (size_t fi = 0; fi < std::size(formats); ++fi) {
    const DType t = formats[fi].t;
    Ops& fops = *formats[fi].ops;
    if (gemv_only && formats[fi].ops != &ops) continue;
    if (!LabWants(formats[fi].label)) continue;
    CudaOps& fcuda = *AsCudaOps(&fops);
    for (const Shape& sh : smoke ? kSmokeShapes : kShapes) {
      WeightSet ws = MakeWeights(fops, t, sh.rows, sh.cols, rotate_bytes);
      for (int64_t rows : {1, 2, 4, 8}) {
        if ((quick && rows != 1 && rows != 8) || (gemv_only && rows != 1)) continue;
        DevTensor x = NewTensor(fops, fcuda, rows, sh.cols);
        DevTensor out = NewTensor(fops, fcuda, rows, sh.rows);
        const int n_calls = smoke ? 3 : 24;
        const double ms = GraphedMsPerCall(fcuda, n_calls, [&](int i) {
          fops.MatMul(x.t, ws.w[static_cast<size_t>(i) % ws.w.size()], out.t);
        });
        const double gbs = ws.bytes / ms / 1e6;
        std::printf("%-8s %-8s %6lldx%-7lld %4lld %9.1f %9.2f %9.0f %6.1f%%\n", formats[fi].label, sh.name,
                    static_cast<long long>(sh.rows), static_cast<long long>(sh.cols),
                    static_cast<long long>(rows), ws.bytes / 1e6, ms * 1e3, gbs, 100.0 * gbs / c.read_gbs);
        if (rows == 1) step_ms[fi] += ms * (sh.per_layer == 0 ? 1 : sh.per_layer * kLayers);
      }
    }
  }

  // ---- a decode layer's GEMVs: fused launches against one MatMul per weight ----
  std::printf(
      "\n== a decode layer's GEMVs at batch 1 (q, k, v, o, gate, up, down: 436 MB in bf16), one launch per\n"
      "   weight (MatMul, SwiGlu and Add as separate kernels) against the fused ops (MatMulGroup for q, k, v;\n"
      "   MatMulAdd for o and down; MatMulSwiGlu for gate and up): weight bytes / time\n");
  std::printf("%-8s %-8s %9s %9s %7s %10s\n", "format", "ops", "us/layer", "GB/s", "of read", "step (ms)");
  for (const Format& f : formats) {
    if (f.ops != &ops || f.t == DType::kQ6_K || !LabWants(f.label)) continue;
    const Shape* sh = smoke ? kSmokeShapes : kShapes;
    const Shape &qo = sh[0], &kv = sh[1], &gu = sh[2], &dn = sh[3];
    const size_t rot = smoke ? 0 : size_t{256} << 20;
    WeightSet wq = MakeWeights(ops, f.t, qo.rows, qo.cols, rot), wk = MakeWeights(ops, f.t, kv.rows, kv.cols, rot);
    WeightSet wv = MakeWeights(ops, f.t, kv.rows, kv.cols, rot), wo = MakeWeights(ops, f.t, qo.rows, qo.cols, rot);
    WeightSet wg = MakeWeights(ops, f.t, gu.rows, gu.cols, rot), wu = MakeWeights(ops, f.t, gu.rows, gu.cols, rot);
    WeightSet wd = MakeWeights(ops, f.t, dn.rows, dn.cols, rot);
    const double layer_bytes =
        static_cast<double>(wq.bytes + wk.bytes + wv.bytes + wo.bytes + wg.bytes + wu.bytes + wd.bytes);
    DevTensor h = NewTensor(ops, cuda, 1, qo.cols), q = NewTensor(ops, cuda, 1, qo.rows);
    DevTensor k = NewTensor(ops, cuda, 1, kv.rows), v = NewTensor(ops, cuda, 1, kv.rows);
    DevTensor x = NewTensor(ops, cuda, 1, qo.rows), proj = NewTensor(ops, cuda, 1, qo.rows);
    DevTensor g = NewTensor(ops, cuda, 1, gu.rows), u = NewTensor(ops, cuda, 1, gu.rows);
    for (bool fused : {false, true}) {
      const int n_layers = smoke ? 2 : 16;
      const double ms = GraphedMsPerCall(cuda, n_layers, [&](int i) {
        auto pick = [&](const WeightSet& s) -> const Weight& { return s.w[static_cast<size_t>(i) % s.w.size()]; };
        if (fused) {
          const Weight* ws[] = {&pick(wq), &pick(wk), &pick(wv)};
          const Tensor outs[] = {q.t, k.t, v.t};
          ops.MatMulGroup(h.t, ws, outs);
          ops.MatMulAdd(q.t, pick(wo), proj.t, x.t);
          ops.MatMulSwiGlu(h.t, pick(wg), pick(wu), u.t, g.t);
          ops.MatMulAdd(g.t, pick(wd), proj.t, x.t);
        } else {
          ops.MatMul(h.t, pick(wq), q.t);
          ops.MatMul(h.t, pick(wk), k.t);
          ops.MatMul(h.t, pick(wv), v.t);
          ops.MatMul(q.t, pick(wo), proj.t);
          ops.Add(x.t, proj.t);
          ops.MatMul(h.t, pick(wg), g.t);
          ops.MatMul(h.t, pick(wu), u.t);
          ops.SwiGlu(g.t, u.t, g.t);
          ops.MatMul(g.t, pick(wd), proj.t);
          ops.Add(x.t, proj.t);
        }
      });
      const double gbs = layer_bytes / ms / 1e6;
      std::printf("%-8s %-8s %9.1f %9.0f %6.1f%% %10.2f\n", f.label, fused ? "fused" : "separate", ms * 1e3, gbs,
                  100.0 * gbs / c.read_gbs, ms * kLayers);
    }
  }
  if (gemv_only) return;

  // ---- attention decode ----
  std::printf(
      "\n== attention decode (flash decoding): K/V bytes / time; 32 q heads, 8 kv heads, head_dim 128\n");
  std::printf("%-7s %-6s %9s %9s %9s %7s\n", "context", "seqs", "MB", "us", "GB/s", "of read");
  const int n_heads = 32, n_kv = 8, hd = 128, page = 16;
  for (int ctx : {128, 512, 2048}) {
    if (smoke) ctx /= 8;
    for (int seqs : {1, 16}) {
      if (smoke && seqs > 1) seqs = 3;
      const int pages_per_seq = (ctx + page - 1) / page;
      KvLayerView kv;
      kv.dtype = DType::kBF16;
      kv.n_kv_heads = n_kv;
      kv.head_dim = hd;
      kv.page_size = page;
      kv.n_pages = static_cast<int64_t>(pages_per_seq) * seqs;
      std::vector<std::unique_ptr<Buffer>> pools;
      std::vector<KvLayerView> caches;
      for (int l = 0; l < layers; ++l) {
        const size_t bytes = kv.PageBytes() * kv.n_pages;
        pools.push_back(ops.Allocate(bytes, "k"));
        pools.push_back(ops.Allocate(bytes, "v"));
        RandomFill(pools[pools.size() - 2]->data(), bytes, 10 + l, static_cast<cudaStream_t>(cuda.stream()));
        RandomFill(pools.back()->data(), bytes, 50 + l, static_cast<cudaStream_t>(cuda.stream()));
        KvLayerView v = kv;
        v.k = pools[pools.size() - 2]->data();
        v.v = pools.back()->data();
        caches.push_back(v);
      }
      StepBatch batch;
      batch.page_size = page;
      std::vector<int32_t> table(static_cast<size_t>(pages_per_seq));
      for (int s = 0; s < seqs; ++s) {
        for (int p = 0; p < pages_per_seq; ++p) table[static_cast<size_t>(p)] = s * pages_per_seq + p;
        batch.AddSeq(1, ctx - 1, table);
      }
      DevTensor q = NewTensor(ops, cuda, seqs, n_heads * hd);
      DevTensor out = NewTensor(ops, cuda, seqs, n_heads * hd);
      cuda.BeginCapture();
      ops.BeginStep(batch);
      for (int l = 0; l < layers; ++l)
        ops.Attention(q.t, caches[static_cast<size_t>(l)], n_heads, 0.0884f, out.t);
      auto graph = cuda.EndCapture();
      const double ms =
          TimeMs(static_cast<cudaStream_t>(cuda.stream()),
                 [&] {
                   cuda.BeginReplay(*graph);
                   ops.BeginStep(batch);
                   for (int l = 0; l < layers; ++l)
                     ops.Attention(q.t, caches[static_cast<size_t>(l)], n_heads, 0.0884f, out.t);
                   if (!cuda.EndReplay()) Fail(ErrorCode::kInternal, "bench: attention replay mismatch");
                 }) /
          layers;
      const double bytes = 2.0 * seqs * ctx * n_kv * hd * 2;
      std::printf("%-7d %-6d %9.2f %9.2f %9.0f %6.1f%%\n", ctx, seqs, bytes / 1e6, ms * 1e3, bytes / ms / 1e6,
                  100.0 * bytes / ms / 1e6 / c.read_gbs);
    }
  }

  // ---- prefill ----
  std::printf(
      "\n== prefill: MatMul of 512 rows (tensor cores) and causal attention over prompts of 512 and 2048 "
      "tokens\n");
  const int64_t pm = smoke ? 40 : 512, pn = smoke ? 320 : 14336, pk = smoke ? 256 : 4096;
  for (DType t : {DType::kBF16, DType::kQ8_0, DType::kQ4_K}) {
    WeightSet ws = MakeWeights(ops, t, pn, pk, 0);
    DevTensor x = NewTensor(ops, cuda, pm, pk);
    DevTensor out = NewTensor(ops, cuda, pm, pn);
    const double ms = GraphedMsPerCall(
        cuda, smoke ? 2 : 8, [&](int i) { ops.MatMul(x.t, ws.w[static_cast<size_t>(i) % 2], out.t); });
    const double flops = 2.0 * pm * pn * pk;
    std::printf("MatMul %-5s 512x4096 * 14336x4096^T %9.1f us %7.1f TFLOP/s (%.0f%% of the GEMM ceiling)\n",
                DTypeName(t), ms * 1e3, flops / ms / 1e9, 100.0 * flops / ms / 1e9 / c.gemm_tflops);
  }
  // Prefill attention: each prompt length on both kernels, the CUDA-core one on a second instance.
  // FLOPs: Q K^T and P V over the causal half, 2 x 2 x head_dim per (row, head, visible key).
  CudaOpsOptions cuda_cores;
  cuda_cores.prefill_attention_tensor_cores = false;
  std::unique_ptr<Ops> ops_cc_owner = CreateCudaOps(0, cuda_cores);
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
#ifdef HYMT_CUDA_EMU
  const bool have_tc = false;  // the CPU emulator runs the CUDA-core kernel for both
#else
  const bool have_tc = prop.major >= 8;
#endif
  const struct {
    const char* label;
    Ops* ops;
  } kernels[] = {{have_tc ? "tensor cores, bf16 P" : "no bf16 tensor cores: CUDA cores", &ops},
                 {"CUDA cores, f32", ops_cc_owner.get()}};
  for (int ctx : {512, 2048}) {
    const int tokens = ctx;
    if (smoke) ctx /= 8;
    KvLayerView kv;
    kv.dtype = DType::kBF16;
    kv.n_kv_heads = n_kv;
    kv.head_dim = hd;
    kv.page_size = page;
    kv.n_pages = (ctx + page - 1) / page;
    auto kb = ops.Allocate(kv.PageBytes() * kv.n_pages, "k"),
         vb = ops.Allocate(kv.PageBytes() * kv.n_pages, "v");
    RandomFill(kb->data(), kb->size(), 7, static_cast<cudaStream_t>(cuda.stream()));
    RandomFill(vb->data(), vb->size(), 8, static_cast<cudaStream_t>(cuda.stream()));
    kv.k = kb->data();
    kv.v = vb->data();
    std::vector<int32_t> table(static_cast<size_t>(kv.n_pages));
    for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int32_t>(i);
    StepBatch batch;
    batch.page_size = page;
    batch.AddSeq(ctx, 0, table);
    DevTensor q = NewTensor(ops, cuda, ctx, n_heads * hd), out = NewTensor(ops, cuda, ctx, n_heads * hd);
    ops.Sync();  // the fills ran on this instance's stream; the other instance has its own
    const double flops = 4.0 * ctx * (ctx + 1) / 2.0 * hd * n_heads;
    for (const auto& k : kernels) {
      k.ops->BeginStep(batch);
      const double ms = TimeMs(static_cast<cudaStream_t>(AsCudaOps(k.ops)->stream()),
                               [&] { k.ops->Attention(q.t, kv, n_heads, 0.0884f, out.t); });
      std::printf(
          "attention prefill %4d tokens, one layer %9.1f us %7.1f TFLOP/s (%.0f%% of the GEMM ceiling; %s)\n",
          tokens, ms * 1e3, flops / ms / 1e9, 100.0 * flops / ms / 1e9 / c.gemm_tflops, k.label);
    }
  }

  // ---- decode-step estimate ----
  std::printf(
      "\n== decode step of the 7B at batch 1 from the GEMVs above (32 layers + head; attention and\n"
      "   the small ops not included): predicted ms per token and tokens/s\n");
  for (size_t fi = 0; fi < std::size(formats); ++fi)
    std::printf("%-8s %8.2f ms  %7.0f tok/s\n", formats[fi].label, step_ms[fi], 1e3 / step_ms[fi]);
}

}  // namespace
}  // namespace hymt

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  const bool smoke = argc > 1 && std::strcmp(argv[1], "--smoke") == 0;
  const bool gemv_only = argc > 1 && std::strcmp(argv[1], "--gemv") == 0;
  try {
    hymt::Run(quick || gemv_only, smoke, gemv_only);
  } catch (const hymt::Error& e) {
    std::fprintf(stderr, "cuda_kernels: %s\n", e.what());
    return 1;
  }
  return 0;
}
