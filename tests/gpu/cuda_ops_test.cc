// The CUDA backend against the scalar reference backend (CreateReferenceOps), op by op.
//
// Every test draws fresh random inputs (never zeros), rounds them to bf16 so that both backends see the
// same values, fills every device output with NaN first (and checks that every element was written and
// that row padding was not), and runs the fast kernels and the simple ones (SetSimpleKernels), each
// against the reference. Without a GPU every test that needs one skips (GTEST_SKIP).
//
// Tolerances, derived from the arithmetic (u = 2^-8 is bf16's unit roundoff: 8 significant bits, round
// to nearest, so |bf16(y) - y| <= u |y|; u32 = 2^-24 the same for f32):
//   - a bf16 output of an exactly known value: u |ref|.
//   - dot products of length K accumulated in f32 in another order than the reference's double sum:
//     |error| <= K u32 sum_k |x_k w_k| (gamma_K); we allow 4x that for the tensor cores' accumulation.
//   - the GEMM path of non-bf16 weights rounds each weight to bf16 first: an independent error of at
//     most u |w_k| per term, whose sum has standard deviation <= u sqrt(sum (x_k w_k)^2 / 3); we allow
//     4 u sqrt(sum (x_k w_k)^2), about 7 standard deviations.
//   - the Q4_K, Q6_K and Q8_0 GEMVs round activations to int8 (dx = max|x|/127 per 16 values): errors uniform in
//     +-dx/2, so the sum has variance sum_k w_k^2 dx_k^2 / 12; we allow 6 standard deviations.
//   - RMSNorm: two bf16 roundings (the normalised value, then the product) plus the f32 sum of squares
//     and rsqrtf: (2u + 2u^2 + (K + 16) u32) |ref|.
//   - Embed: one bf16 rounding of a value the device may compute with one FMA less rounding than the
//     host: (u + 4 u32) |ref|.
//   - RopeNorm and SwiGlu compute as HF's bf16 forward does, op by op (bf16 cos and sin, each product
//     and sum rounded; silu rounded before the product): the tests build that on the host and allow
//     nothing where the host and the device must round identically, one bf16 ulp of a factor where an
//     f32 value lies so near a bf16 tie that the device's and the host's cos/sin/exp may round apart,
//     and for the q/k norm 4.5u |ref| as RMSNorm.
//   - attention: the f32 score error e <= HD u32 scale max_j sum_d |q_d k_jd| (plus exp2's 2 ulp) moves
//     the output by at most 2 e max|v| (softmax weights change by a factor within e^±e); plus u |ref|.
//     The tensor-core prefill kernel accumulates scores on tensor cores (4e, as for the GEMMs) and
//     rounds each softmax weight p_j to bf16 before P V while its sum l stays f32: the output moves by
//     sum_j w_j d_j v_jd with |d_j| <= u (w the exact weights), so it gets u (1 + u) sum_j w_j |v_jd| more
//     (the existing budget cannot hold it: the output's own rounding already takes u |ref|).
#include "backends/cuda/cuda_ops.h"
#include "backends/cuda/cuda_internal.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/half.h"
#include "core/status.h"
#include "ops/ops.h"
#include "quant/blocks.h"
#include "quant/quant.h"

namespace hymt {
namespace {

constexpr float kU = 1.0f / 256.0f;         // bf16 unit roundoff
constexpr float kU32 = 1.0f / 16777216.0f;  // f32 unit roundoff
constexpr uint16_t kNaNBf16 = 0x7fc0;       // the poison: a quiet NaN as bf16 (and, doubled, as f32)

// ---- host dequantisers for the block formats, from the GGUF/ggml format definition ----
// quant/'s DequantizeRow covers only the plain float types until the quant branch lands, so the tests
// carry their own; QuantLibraryAgrees checks them against DequantizeRow once it supports a format.

// Q8_0: 32 values x = d * qs[i].
void HostDequantQ8_0(const void* src, float* dst, int64_t n) {
  const BlockQ8_0* b = static_cast<const BlockQ8_0*>(src);
  for (int64_t i = 0; i < n / kQK; ++i)
    for (int j = 0; j < kQK; ++j) dst[i * kQK + j] = F16ToF32(b[i].d) * static_cast<float>(b[i].qs[j]);
}

// Q4_K (ggml get_scale_min_k4 and dequantize_row_q4_K): 256 values in 8 sub-blocks of 32 with 6-bit
// scales and mins packed in 12 bytes; x = d * sc_j * q - dmin * m_j.
void Q4KScaleMin(int j, const uint8_t* q, uint8_t* d, uint8_t* m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4);
  }
}
void HostDequantQ4_K(const void* src, float* dst, int64_t n) {
  const BlockQ4_K* b = static_cast<const BlockQ4_K*>(src);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float d = F16ToF32(b[i].d), dmin = F16ToF32(b[i].dmin);
    const uint8_t* q = b[i].qs;
    float* y = dst + i * kQKK;
    int is = 0;
    for (int j = 0; j < kQKK; j += 64) {
      uint8_t sc, m;
      Q4KScaleMin(is + 0, b[i].scales, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      Q4KScaleMin(is + 1, b[i].scales, &sc, &m);
      const float d2 = d * sc, m2 = dmin * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * (q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * (q[l] >> 4) - m2;
      q += 32;
      is += 2;
    }
  }
}

// Q6_K (ggml dequantize_row_q6_K): 256 values in 16 sub-blocks of 16 with int8 scales; 4 low bits in
// ql, 2 high bits in qh; x = d * sc * (q - 32).
void HostDequantQ6_K(const void* src, float* dst, int64_t n) {
  const BlockQ6_K* b = static_cast<const BlockQ6_K*>(src);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float d = F16ToF32(b[i].d);
    const uint8_t* ql = b[i].ql;
    const uint8_t* qh = b[i].qh;
    const int8_t* sc = b[i].scales;
    float* y = dst + i * kQKK;
    for (int half = 0; half < 2; ++half) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = static_cast<int8_t>((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = static_cast<int8_t>((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = static_cast<int8_t>((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = static_cast<int8_t>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l + 0] = d * sc[is + 0] * q1;
        y[l + 32] = d * sc[is + 2] * q2;
        y[l + 64] = d * sc[is + 4] * q3;
        y[l + 96] = d * sc[is + 6] * q4;
      }
      y += 128;
      ql += 64;
      qh += 32;
      sc += 8;
    }
  }
}

void HostDequant(DType t, const void* src, float* dst, int64_t n) {
  switch (t) {
    case DType::kQ8_0:
      HostDequantQ8_0(src, dst, n);
      return;
    case DType::kQ4_K:
      HostDequantQ4_K(src, dst, n);
      return;
    case DType::kQ6_K:
      HostDequantQ6_K(src, dst, n);
      return;
    default:
      DequantizeRow(t, src, dst, n);
      return;
  }
}

// ---- random data ----
class Rng {
 public:
  explicit Rng(uint64_t seed) : gen_(seed) {}
  float Normal() { return normal_(gen_); }
  float Uniform(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(gen_); }
  int Int(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(gen_); }  // inclusive
  double Uniform() { return std::uniform_real_distribution<double>(0.0, 1.0)(gen_); }
  uint8_t Byte() { return static_cast<uint8_t>(gen_() & 0xff); }
  std::mt19937_64& gen() { return gen_; }

 private:
  std::mt19937_64 gen_;
  std::normal_distribution<float> normal_{0.0f, 1.0f};
};

// A fresh seed per call, so every check draws new data; printed on failure through SCOPED_TRACE.
// HYMT_TEST_SEED=S makes every call return S, to replay a failure's case.
uint64_t NextSeed() {
  static const char* fixed = std::getenv("HYMT_TEST_SEED");
  if (fixed != nullptr && *fixed != '\0') return std::strtoull(fixed, nullptr, 10);
  static uint64_t counter = std::random_device{}();
  return counter += 0x9e3779b97f4a7c15ull;
}

float RoundBf16(float f) {
  return Bf16ToF32(F32ToBf16(f));
}

// Normal values rounded to bf16 (what both backends then see exactly).
std::vector<float> RandomBf16(Rng& rng, size_t n, float scale = 1.0f) {
  std::vector<float> v(n);
  for (float& x : v) x = RoundBf16(rng.Normal() * scale);
  return v;
}

// A weight's bytes in its stored type, with valid random content: plain floats from a normal
// distribution; block formats with random quants and small positive f16 scales.
std::vector<uint8_t> RandomWeightBytes(Rng& rng, DType t, int64_t rows, int64_t cols) {
  std::vector<uint8_t> bytes(DTypeBytes(t, cols) * static_cast<size_t>(rows));
  const int64_t n = rows * cols;
  auto f16 = [&](float lo, float hi) { return F32ToF16(rng.Uniform(lo, hi)); };
  switch (t) {
    case DType::kF32: {
      float* p = reinterpret_cast<float*>(bytes.data());
      for (int64_t i = 0; i < n; ++i) p[i] = rng.Normal() * 0.5f;
      break;
    }
    case DType::kF16:
    case DType::kBF16: {
      uint16_t* p = reinterpret_cast<uint16_t*>(bytes.data());
      for (int64_t i = 0; i < n; ++i)
        p[i] = t == DType::kF16 ? F32ToF16(rng.Normal() * 0.5f) : F32ToBf16(rng.Normal() * 0.5f);
      break;
    }
    case DType::kF8E4M3:
      for (uint8_t& b : bytes) {
        do b = rng.Byte();
        while ((b & 0x7f) == 0x7f);  // no NaN encodings
      }
      break;
    case DType::kQ8_0: {
      BlockQ8_0* b = reinterpret_cast<BlockQ8_0*>(bytes.data());
      for (int64_t i = 0; i < n / kQK; ++i) {
        b[i].d = f16(0.002f, 0.02f);
        for (int8_t& q : b[i].qs) q = static_cast<int8_t>(rng.Byte());
      }
      break;
    }
    case DType::kQ4_K: {
      BlockQ4_K* b = reinterpret_cast<BlockQ4_K*>(bytes.data());
      for (int64_t i = 0; i < n / kQKK; ++i) {
        b[i].d = f16(0.0005f, 0.004f);
        b[i].dmin = f16(0.0005f, 0.004f);
        for (uint8_t& s : b[i].scales) s = rng.Byte();
        for (uint8_t& q : b[i].qs) q = rng.Byte();
      }
      break;
    }
    case DType::kQ6_K: {
      BlockQ6_K* b = reinterpret_cast<BlockQ6_K*>(bytes.data());
      for (int64_t i = 0; i < n / kQKK; ++i) {
        for (uint8_t& q : b[i].ql) q = rng.Byte();
        for (uint8_t& q : b[i].qh) q = rng.Byte();
        for (int8_t& s : b[i].scales) s = static_cast<int8_t>(rng.Byte());
        b[i].d = f16(0.0001f, 0.001f);
      }
      break;
    }
    default:
      ADD_FAILURE() << "no random data for " << DTypeName(t);
  }
  return bytes;
}

// The weight as f32 rows (scale not applied), through the host dequantisers.
std::vector<float> HostWeightF32(DType t, const std::vector<uint8_t>& bytes, int64_t rows, int64_t cols) {
  std::vector<float> out(static_cast<size_t>(rows * cols));
  const size_t row_bytes = DTypeBytes(t, cols);
  for (int64_t r = 0; r < rows; ++r)
    HostDequant(t, bytes.data() + r * row_bytes, out.data() + r * cols, cols);
  return out;
}

Tensor HostTensor(std::vector<float>& v, int64_t rows, int64_t cols) {
  Tensor t;
  t.data = v.data();
  t.dtype = DType::kF32;
  t.rows = rows;
  t.cols = cols;
  t.stride = cols;
  return t;
}

Weight HostWeight(const std::string& name, DType t, int64_t rows, int64_t cols, const void* data,
                  float scale = 1.0f) {
  Weight w;
  w.name = name;
  w.dtype = t;
  w.rows = rows;
  w.cols = cols;
  w.data = data;
  w.scale = scale;
  return w;
}

// Element-wise comparison; prints the first few mismatches. tol[i] < 0 means "use tol_all".
::testing::AssertionResult Close(const std::vector<float>& got, const std::vector<float>& want,
                                 const std::vector<float>& tol) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "sizes " << got.size() << " vs " << want.size();
  size_t bad = 0;
  std::string first;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const float err = std::fabs(got[i] - want[i]);
    if (!(err <= tol[i])) {  // NaN fails
      if (bad < 5) first += StrCat("\n  [", i, "] got ", got[i], " want ", want[i], " tol ", tol[i]);
      ++bad;
    }
    if (tol[i] > 0) worst = std::max(worst, static_cast<double>(err / tol[i]));
  }
  if (bad == 0) return ::testing::AssertionSuccess() << "worst error / tolerance " << worst;
  return ::testing::AssertionFailure() << bad << " of " << got.size() << " outside tolerance" << first;
}

// Whether an f32 value lies within `ulps` f32 ulp of a bf16 rounding boundary: two computations of it that
// differ by that much may round to different bf16 values.
bool NearBf16Tie(float v, float ulps) {
  return RoundBf16(v * (1 + ulps * kU32)) != RoundBf16(v * (1 - ulps * kU32));
}

std::vector<float> RelTol(const std::vector<float>& want, float rel, float abs = 0.0f) {
  std::vector<float> t(want.size());
  for (size_t i = 0; i < want.size(); ++i) t[i] = rel * std::fabs(want[i]) + abs;
  return t;
}

// ---- the fixture: a CUDA backend, the reference, and device tensor helpers ----
class CudaOpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
    ops_ = CreateCudaOps(0);
    cuda_ = AsCudaOps(ops_.get());
    ASSERT_NE(cuda_, nullptr);
    ref_ = CreateReferenceOps();
  }

  struct DevTensor {
    std::unique_ptr<Buffer> buf;
    Tensor t;
  };

  // A device tensor of [rows, cols] with the given row stride, every byte (padding included) poisoned.
  DevTensor NewTensor(int64_t rows, int64_t cols, DType dtype = DType::kBF16, int64_t stride = -1) {
    DevTensor d;
    if (stride < 0) stride = cols;
    const size_t bytes = std::max<size_t>(DTypeBytes(dtype, stride) * static_cast<size_t>(rows), 16);
    d.buf = ops_->Allocate(bytes, "test tensor");
    cuda_->Fill16(d.buf->data(), bytes / 2, kNaNBf16);
    d.t.data = d.buf->data();
    d.t.dtype = dtype;
    d.t.rows = rows;
    d.t.cols = cols;
    d.t.stride = stride;
    d.t.device = ops_->device();
    return d;
  }

  // A paged KV cache on the device, every byte poisoned.
  struct DevKv {
    std::unique_ptr<Buffer> k, v;
    KvLayerView kv;
  };
  DevKv NewKv(DType dtype, int n_kv_heads, int head_dim, int page_size, int64_t n_pages) {
    DevKv d;
    d.kv.dtype = dtype;
    d.kv.n_kv_heads = n_kv_heads;
    d.kv.head_dim = head_dim;
    d.kv.page_size = page_size;
    d.kv.n_pages = n_pages;
    const size_t bytes = d.kv.PageBytes() * static_cast<size_t>(n_pages);
    d.k = ops_->Allocate(bytes, "k pool");
    d.v = ops_->Allocate(bytes, "v pool");
    cuda_->Fill16(d.k->data(), bytes / 2, kNaNBf16);
    cuda_->Fill16(d.v->data(), bytes / 2, kNaNBf16);
    d.kv.k = d.k->data();
    d.kv.v = d.v->data();
    return d;
  }

  void Upload(const std::vector<float>& v, const Tensor& t) {
    ASSERT_EQ(v.size(), static_cast<size_t>(t.rows * t.cols));
    if (t.dtype == DType::kF32) {
      ops_->CopyFromHost(v.data(), t);
      return;
    }
    std::vector<uint16_t> h(v.size());
    for (size_t i = 0; i < v.size(); ++i) h[i] = F32ToBf16(v[i]);
    ops_->CopyFromHost(h.data(), t);
  }

  DevTensor Input(const std::vector<float>& v, int64_t rows, int64_t cols, int64_t stride = -1) {
    DevTensor d = NewTensor(rows, cols, DType::kBF16, stride);
    Upload(v, d.t);
    return d;
  }

  // The tensor's values as f32 (row-major, no padding).
  std::vector<float> Download(const Tensor& t) {
    std::vector<float> out(static_cast<size_t>(t.rows * t.cols));
    if (t.dtype == DType::kF32) {
      ops_->CopyToHost(t, out.data());
    } else {
      std::vector<uint16_t> h(out.size());
      ops_->CopyToHost(t, h.data());
      for (size_t i = 0; i < h.size(); ++i) out[i] = Bf16ToF32(h[i]);
    }
    return out;
  }

  // True when every padding element (columns cols..stride of each row) still holds the poison.
  ::testing::AssertionResult PaddingIntact(const Tensor& t) {
    if (t.stride == t.cols) return ::testing::AssertionSuccess();
    Tensor whole = t;
    whole.cols = t.stride;
    std::vector<uint16_t> raw(DTypeBytes(t.dtype, t.stride) / 2 * static_cast<size_t>(t.rows));
    ops_->CopyToHost(whole, raw.data());
    const int64_t units = static_cast<int64_t>(DTypeBytes(t.dtype, 1) / 2);
    for (int64_t r = 0; r < t.rows; ++r)
      for (int64_t c = t.cols * units; c < t.stride * units; ++c)
        if (raw[static_cast<size_t>(r * t.stride * units + c)] != kNaNBf16)
          return ::testing::AssertionFailure() << "padding of row " << r << " overwritten at unit " << c;
    return ::testing::AssertionSuccess();
  }

  // Runs `body` once with the fast kernels and once with the simple ones. HYMT_TEST_FAST_ONLY=1 skips
  // the simple ones (they take hours on the large cases under the CPU emulator, tools/cuda_emu).
  template <typename F>
  void BothPaths(F&& body) {
    static const bool fast_only = std::getenv("HYMT_TEST_FAST_ONLY") != nullptr;
    for (bool simple : {false, true}) {
      if (simple && fast_only) break;
      SCOPED_TRACE(simple ? "simple kernels" : "fast kernels");
      cuda_->SetSimpleKernels(simple);
      simple_now_ = simple;
      body();
    }
    cuda_->SetSimpleKernels(false);
    simple_now_ = false;
  }
  bool simple_now_ = false;  // BothPaths: the simple kernels are on

  // MatMulGroup over three weights of these types against the separate MatMuls (defined below).
  void CheckMixedGroup(const DType (&types)[3], const int64_t (&n)[3], int64_t k, int64_t rows, int64_t pad,
                       int64_t two_type_launches);

  std::unique_ptr<Ops> ops_;
  CudaOps* cuda_ = nullptr;
  std::unique_ptr<Ops> ref_;
};

// ---- tests that need no GPU ----

TEST(CudaHostTest, DeviceQueriesNeverThrow) {
  const int n = CudaDeviceCount();
  EXPECT_GE(n, 0);
  if (n == 0) {
    size_t f = 0, t = 0;
    EXPECT_FALSE(CudaMemoryInfo(0, &f, &t));
    EXPECT_EQ(CudaDeviceName(0), "");
    EXPECT_THROW(CreateCudaOps(0), Error);
  }
}

TEST(CudaHostTest, PreparedWeightBytes) {
  // Split layouts keep the stored size; formats without kernels become bf16.
  for (DType t : {DType::kF32, DType::kBF16, DType::kF8E4M3, DType::kQ8_0, DType::kQ4_K, DType::kQ6_K})
    EXPECT_EQ(CudaPreparedWeightBytes(t, 7, 512), DTypeBytes(t, 512) * 7) << DTypeName(t);
  EXPECT_EQ(CudaPreparedWeightBytes(DType::kQ4_0, 7, 512), size_t{7} * 512 * 2);
  // Scratch: the fixed areas, plus the sampling area (the repetition-penalty history, 4 bytes a token,
  // and the per-row top-k tables, under 1 MiB at the default batch).
  CudaOpsOptions o;
  const size_t fixed = o.cublas_workspace_bytes + o.dequant_scratch_bytes + o.attention_scratch_bytes +
                       2 * o.staging_bytes + o.activation_scratch_bytes;
  ASSERT_GT(CudaOpsScratchBytes(o), fixed);
  const size_t sampling = CudaOpsScratchBytes(o) - fixed;
  EXPECT_GE(sampling, sizeof(int32_t) * o.sampling_history_tokens);
  EXPECT_LT(sampling, sizeof(int32_t) * o.sampling_history_tokens + (size_t{1} << 20));
  CudaOpsOptions longer = o;
  longer.sampling_history_tokens *= 2;
  EXPECT_GE(CudaOpsScratchBytes(longer) - CudaOpsScratchBytes(o), sizeof(int32_t) * o.sampling_history_tokens);
  CudaOpsOptions f32_activations = o;
  f32_activations.int8_activations = false;
  EXPECT_EQ(CudaOpsScratchBytes(o) - CudaOpsScratchBytes(f32_activations), o.activation_scratch_bytes);
}

// The test's dequantisers against quant/'s, for each format quant/ already supports.
TEST(CudaHostTest, QuantLibraryAgrees) {
  Rng rng(NextSeed());
  for (DType t : {DType::kQ8_0, DType::kQ4_K, DType::kQ6_K}) {
    const std::vector<uint8_t> bytes = RandomWeightBytes(rng, t, 1, 512);
    std::vector<float> mine(512), theirs(512);
    HostDequant(t, bytes.data(), mine.data(), 512);
    try {
      DequantizeRow(t, bytes.data(), theirs.data(), 512);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
      continue;  // not implemented in quant/ yet
    }
    for (int i = 0; i < 512; ++i) EXPECT_EQ(mine[i], theirs[i]) << DTypeName(t) << " element " << i;
  }
}

// ---- device basics ----

TEST_F(CudaOpsTest, DeviceInfoAndScratch) {
  EXPECT_FALSE(CudaDeviceName(0).empty());
  size_t free_bytes = 0, total = 0;
  ASSERT_TRUE(CudaMemoryInfo(0, &free_bytes, &total));
  EXPECT_GT(total, 0u);
  EXPECT_LE(free_bytes, total);
  EXPECT_EQ(cuda_->ScratchBytes(), CudaOpsScratchBytes(CudaOpsOptions{}));
  EXPECT_EQ(ops_->activation_dtype(), DType::kBF16);
  EXPECT_EQ(ops_->device(), (DeviceId{DeviceKind::kCuda, 0}));
}

TEST_F(CudaOpsTest, OutOfMemoryIsAnError) {
  try {
    ops_->Allocate(size_t{1} << 52, "a test buffer");
    FAIL() << "4 PiB allocated";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kResourceExhausted);
    EXPECT_NE(std::string(e.what()).find("needs"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("a test buffer"), std::string::npos) << e.what();
  }
  // The backend still works afterwards.
  DevTensor t = NewTensor(2, 8);
  std::vector<float> v = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  Upload(v, t.t);
  EXPECT_EQ(Download(t.t), v);
}

TEST_F(CudaOpsTest, BadArgumentsThrow) {
  Rng rng(NextSeed());
  std::vector<uint8_t> bytes = RandomWeightBytes(rng, DType::kBF16, 4, 16);
  const Weight host = HostWeight("w", DType::kBF16, 4, 16, bytes.data());
  DevTensor x = Input(RandomBf16(rng, 16), 1, 16);
  DevTensor out = NewTensor(1, 4);
  EXPECT_THROW(ops_->MatMul(x.t, host, out.t), Error);  // not prepared
  const Weight w = ops_->PrepareWeight(host);
  DevTensor wrong = NewTensor(1, 5);
  EXPECT_THROW(ops_->MatMul(x.t, w, wrong.t), Error);
  const int32_t bad_id = 4;
  DevTensor e = NewTensor(1, 16);
  EXPECT_THROW(ops_->Embed(w, std::span<const int32_t>(&bad_id, 1), e.t), Error);
  DevTensor f32 = NewTensor(1, 16, DType::kF32);
  EXPECT_THROW(ops_->Add(f32.t, f32.t), Error);  // activations are bf16
  ops_->MatMul(x.t, w, out.t);                   // still fine
  ops_->Sync();
}

TEST_F(CudaOpsTest, CopiesRoundTrip) {
  Rng rng(NextSeed());
  for (int64_t rows : {1, 3, 17}) {
    for (int64_t cols : {1, 7, 64}) {
      const std::vector<float> v = RandomBf16(rng, static_cast<size_t>(rows * cols));
      DevTensor t = Input(v, rows, cols, cols + 5);
      EXPECT_EQ(Download(t.t), v);
      EXPECT_TRUE(PaddingIntact(t.t));
      DevTensor f = NewTensor(rows, cols, DType::kF32, cols + 2);
      Upload(v, f.t);
      EXPECT_EQ(Download(f.t), v);
      EXPECT_TRUE(PaddingIntact(f.t));
    }
  }
  // A copy larger than the staging path (synchronous, straight from the caller's memory).
  const std::vector<float> big = RandomBf16(rng, size_t{1} << 20);
  DevTensor b = NewTensor(1024, 1024, DType::kF32);
  Upload(big, b.t);
  EXPECT_EQ(Download(b.t), big);
}

// ---- Embed ----

TEST_F(CudaOpsTest, EmbedEveryFormat) {
  struct Case {
    DType t;
    int64_t cols;
  };
  const Case cases[] = {{DType::kF32, 64},   {DType::kF16, 64},    {DType::kBF16, 64},
                        {DType::kBF16, 36},  {DType::kF8E4M3, 96}, {DType::kF8E4M3, 40},
                        {DType::kQ8_0, 96},  {DType::kQ4_K, 512},  {DType::kQ6_K, 256},
                        {DType::kQ6_K, 768}, {DType::kF32, 4096},  {DType::kQ4_K, 4096}};
  for (const Case& c : cases) {
    const uint64_t seed = NextSeed();
    SCOPED_TRACE(StrCat(DTypeName(c.t), " cols ", c.cols, " seed ", seed));
    Rng rng(seed);
    const int64_t rows = 37;
    const std::vector<uint8_t> bytes = RandomWeightBytes(rng, c.t, rows, c.cols);
    std::vector<float> wf = HostWeightF32(c.t, bytes, rows, c.cols);
    const Weight w = ops_->PrepareWeight(HostWeight("embed", c.t, rows, c.cols, bytes.data()));
    const std::vector<int32_t> ids = {0, 36, 5, 5, 17, 1, 36, 0, 22};
    const int64_t n = static_cast<int64_t>(ids.size());
    std::vector<float> want(static_cast<size_t>(n * c.cols));
    ref_->Embed(HostWeight("embed", DType::kF32, rows, c.cols, wf.data()), ids, HostTensor(want, n, c.cols));
    BothPaths([&] {
      DevTensor out = NewTensor(n, c.cols, DType::kBF16, c.cols + 8);
      ops_->Embed(w, ids, out.t);
      // One bf16 rounding; the device may fuse d * q - m into one FMA where the host rounds twice (a few
      // u32 apart before the rounding).
      EXPECT_TRUE(Close(Download(out.t), want, RelTol(want, kU + 4 * kU32, 1e-30f)));
      EXPECT_TRUE(PaddingIntact(out.t));
    });
  }
}

// ---- RmsNorm ----

TEST_F(CudaOpsTest, RmsNorm) {
  for (int64_t rows : {1, 3, 17, 64}) {
    // 16-byte chunks of 1, 2 and 4 per thread (64 .. 5000), and the scalar kernel (36: not a multiple of 8;
    // 10000: more than 4 chunks per thread).
    for (int64_t cols : {36, 64, 200, 4096, 5000, 10000}) {
      for (DType wt : {DType::kF32, DType::kBF16}) {
        const uint64_t seed = NextSeed();
        SCOPED_TRACE(StrCat("rows ", rows, " cols ", cols, " weight ", DTypeName(wt), " seed ", seed));
        Rng rng(seed);
        std::vector<float> x = RandomBf16(rng, static_cast<size_t>(rows * cols), 3.0f);
        std::vector<uint8_t> wb = RandomWeightBytes(rng, wt, 1, cols);
        std::vector<float> wf = HostWeightF32(wt, wb, 1, cols);
        const Weight w = ops_->PrepareWeight(HostWeight("norm", wt, 1, cols, wb.data()));
        std::vector<float> want(x.size());
        std::vector<float> xc = x;
        ref_->RmsNorm(HostTensor(xc, rows, cols), HostWeight("norm", DType::kF32, 1, cols, wf.data()), 1e-5f,
                      HostTensor(want, rows, cols));
        // Two bf16 roundings (2u + u^2), the f32 sum of squares (cols u32), rsqrtf (2 ulp) and the
        // reference's own f32 roundings.
        const std::vector<float> tol = RelTol(want, 2 * kU + 2 * kU * kU + (cols + 16) * kU32, 1e-30f);
        DevTensor dx = Input(x, rows, cols, cols + 8);
        DevTensor dout = NewTensor(rows, cols, DType::kBF16, cols + 16);
        ops_->RmsNorm(dx.t, w, 1e-5f, dout.t);
        EXPECT_TRUE(Close(Download(dout.t), want, tol));
        EXPECT_TRUE(PaddingIntact(dout.t));
        ops_->RmsNorm(dx.t, w, 1e-5f, dx.t);  // in place
        EXPECT_TRUE(Close(Download(dx.t), want, tol));
      }
    }
  }
}

// ---- MatMul ----

// Raw bf16 (or f32) contents of a device tensor, for exact comparisons.
std::vector<uint16_t> RawUnits(Ops& ops, const Tensor& t) {
  std::vector<uint16_t> raw(DTypeBytes(t.dtype, t.cols) / 2 * static_cast<size_t>(t.rows));
  ops.CopyToHost(t, raw.data());
  return raw;
}

// Both pools of two device caches of the same shape hold the same bytes.
void ExpectSameCaches(Ops& ops, const KvLayerView& a, const KvLayerView& b) {
  const int64_t units = static_cast<int64_t>(a.PageBytes() * static_cast<size_t>(a.n_pages) / 2);
  for (int which = 0; which < 2; ++which) {
    Tensor ra{which == 0 ? a.k : a.v, DType::kBF16, 1, units, units, ops.device()};
    Tensor rb = ra;
    rb.data = which == 0 ? b.k : b.v;
    EXPECT_EQ(RawUnits(ops, ra), RawUnits(ops, rb)) << (which == 0 ? "K cache" : "V cache");
  }
}


struct MatMulCase {
  DType t;
  int64_t n, k;
};

class CudaMatMulTest : public CudaOpsTest {
 protected:
  // out = x W^T for one weight at several row counts, fast and simple kernels, bf16 and f32 outputs.
  void Check(const MatMulCase& c, std::initializer_list<int64_t> row_counts, float scale = 1.0f) {
    const uint64_t seed = NextSeed();
    SCOPED_TRACE(StrCat(DTypeName(c.t), " [", c.n, ",", c.k, "] scale ", scale, " seed ", seed));
    Rng rng(seed);
    const std::vector<uint8_t> bytes = RandomWeightBytes(rng, c.t, c.n, c.k);
    std::vector<float> wf = HostWeightF32(c.t, bytes, c.n, c.k);
    const Weight w = ops_->PrepareWeight(HostWeight("w", c.t, c.n, c.k, bytes.data(), scale));
    const Weight wref = HostWeight("w", DType::kF32, c.n, c.k, wf.data(), scale);
    for (int64_t rows : row_counts) {
      SCOPED_TRACE(StrCat("rows ", rows));
      std::vector<float> x = RandomBf16(rng, static_cast<size_t>(rows * c.k));
      std::vector<float> want(static_cast<size_t>(rows * c.n));
      ref_->MatMul(HostTensor(x, rows, c.k), wref, HostTensor(want, rows, c.n));
      // Per-element bounds from sum |x w|, sum (x w)^2 and, for the int8-activation path of Q4_K, Q6_K and Q8_0, the
      // variance of the activation rounding: x is rounded to dx q with dx = max|x| / 127 per 16 values, an
      // error uniform in +-dx/2 (variance dx^2 / 12) per value.
      const bool rounds_weights = c.t != DType::kBF16 && rows > 32;  // the dequantised-slab GEMM path
      const bool rounds_x =  // int8 activations
          (c.t == DType::kQ4_K || c.t == DType::kQ6_K || c.t == DType::kQ8_0) && rows <= 32;
      const int64_t groups = (c.k + 15) / 16;                        // per row (K % 256 == 0 for Q4_K)
      std::vector<float> act_scale(static_cast<size_t>(rows * groups), 0.0f);
      if (rounds_x)
        for (int64_t t = 0; t < rows; ++t)
          for (int64_t k = 0; k < c.k; ++k) {
            float& d = act_scale[static_cast<size_t>(t * groups + k / 16)];
            d = std::max(d, std::fabs(x[t * c.k + k]) / 127.0f);
          }
      std::vector<float> abs_sum(want.size()), sq_sum(want.size()), act_var(want.size());
      for (int64_t t = 0; t < rows; ++t)
        for (int64_t n = 0; n < c.n; ++n) {
          double a = 0, s = 0, v = 0;
          for (int64_t k = 0; k < c.k; ++k) {
            const double wk = static_cast<double>(wf[n * c.k + k]) * scale;
            const double p = static_cast<double>(x[t * c.k + k]) * wk;
            a += std::fabs(p);
            s += p * p;
            const double d = act_scale[static_cast<size_t>(t * groups + k / 16)];
            v += wk * wk * d * d / 12;
          }
          abs_sum[t * c.n + n] = static_cast<float>(a);
          sq_sum[t * c.n + n] = static_cast<float>(s);
          act_var[t * c.n + n] = static_cast<float>(v);
        }
      for (bool out_f32 : {false, true}) {
        std::vector<float> tol(want.size());
        for (size_t i = 0; i < want.size(); ++i)
          tol[i] = (out_f32 ? 0.0f : kU * std::fabs(want[i])) + 4 * c.k * kU32 * abs_sum[i] +
                   (rounds_weights ? 4 * kU * std::sqrt(sq_sum[i]) : 0.0f) +
                   (rounds_x ? 6 * std::sqrt(act_var[i]) : 0.0f) + 1e-30f;
        for (int64_t pad : {0, 8, 3}) {  // pad 3 breaks 16-byte alignment: the simple kernel must take it
          DevTensor dx = Input(x, rows, c.k, c.k + pad);
          BothPaths([&] {
            SCOPED_TRACE(StrCat(out_f32 ? "f32 out" : "bf16 out", " x pad ", pad));
            DevTensor out = NewTensor(rows, c.n, out_f32 ? DType::kF32 : DType::kBF16, c.n + 4);
            ops_->MatMul(dx.t, w, out.t);
            EXPECT_TRUE(Close(Download(out.t), want, tol));
            EXPECT_TRUE(PaddingIntact(out.t));
          });
          if (rows > 8 && pad != 0) break;  // misaligned inputs matter for the GEMV path only
        }
      }
    }
  }
};

TEST_F(CudaMatMulTest, FloatFormats) {
  for (DType t : {DType::kBF16, DType::kF16, DType::kF32}) {
    Check({t, 96, 64}, {1, 2, 3, 5, 8, 17, 64});
    Check({t, 33, 40}, {1, 3, 9});  // 40 columns: 16-byte units, odd row count
    Check({t, 1, 8}, {1, 4});
  }
}

TEST_F(CudaMatMulTest, Fp8WithScale) {
  Check({DType::kF8E4M3, 96, 64}, {1, 3, 8, 17, 64}, 0.0123f);
  Check({DType::kF8E4M3, 33, 40}, {1, 5}, 2.5f);  // 40 columns: not a multiple of the 16-value unit
}

TEST_F(CudaMatMulTest, QuantFormats) {
  for (DType t : {DType::kQ8_0, DType::kQ4_K, DType::kQ6_K}) {
    Check({t, 31, 256}, {1, 2, 3, 5, 8, 17, 33, 64});
    Check({t, 130, 768}, {1, 4, 8, 40});
    Check({t, 1, 512}, {1, 3});
    Check({t, 40, 2560}, {1, 2, 9});  // 10 super-blocks: a full span of Q4_K's layout and a short one
  }
  Check({DType::kQ8_0, 17, 96}, {1, 7, 33});
}

// Q4_K, Q6_K and Q8_0 decode with the weights decoded to f32 (CudaOpsOptions::int8_activations off).
TEST_F(CudaMatMulTest, QuantWithF32Activations) {
  CudaOpsOptions o;
  o.int8_activations = false;
  ops_ = CreateCudaOps(0, o);
  cuda_ = AsCudaOps(ops_.get());
  for (DType t : {DType::kQ4_K, DType::kQ6_K, DType::kQ8_0}) {
    Check({t, 31, 256}, {1, 2, 3, 8});
    Check({t, 40, 4096}, {1, 5});
  }
}

// The 7B row lengths: K = 4096 and 14336 select the group sizes that reduce through shared memory.
TEST_F(CudaMatMulTest, LongRows) {
  for (DType t : {DType::kBF16, DType::kQ8_0, DType::kQ4_K, DType::kQ6_K, DType::kF8E4M3}) {
    Check({t, 40, 4096}, {1, 2, 8, 48});
    Check({t, 24, 14336}, {1, 3, 8});
  }
}

// GEMVs with fewer blocks than row blocks (each block loops over several, the next one's first weights
// loading while the current one's sums are reduced), one part and three: the int8 kernel, and the float
// kernel with the fused norm (the only case in which it loops), against the unfused sequence.
TEST_F(CudaMatMulTest, PersistentBlocks) {
  struct Reset {
    ~Reset() {
      cuda::SetGemvBlocksPerSm(-1);
      cuda::SetGemvFuseNorm(-1);
    }
  } reset;
  for (int per_sm : {1, 0}) {
    SCOPED_TRACE(StrCat(per_sm, " blocks per SM"));
    cuda::SetGemvBlocksPerSm(per_sm);
    for (DType t : {DType::kQ4_K, DType::kQ6_K, DType::kQ8_0, DType::kBF16}) {
      if (t != DType::kBF16) Check({t, 4100, 256}, {1, 2});  // hundreds of row blocks, a partial last one
      const uint64_t seed = NextSeed();
      SCOPED_TRACE(StrCat(DTypeName(t), " group, seed ", seed));
      Rng rng(seed);
      const int64_t k = 512, n[3] = {2600, 900, 700};
      std::vector<Weight> ws;
      for (int64_t rows : n) {
        const std::vector<uint8_t> b = RandomWeightBytes(rng, t, rows, k);
        ws.push_back(ops_->PrepareWeight(HostWeight("w", t, rows, k, b.data())));
      }
      const std::vector<float> x = RandomBf16(rng, static_cast<size_t>(k));
      DevTensor dx = Input(x, 1, k, k);
      std::vector<DevTensor> grouped, single;
      for (int64_t rows : n) {
        grouped.push_back(NewTensor(1, rows));
        single.push_back(NewTensor(1, rows));
      }
      const Weight* wp[] = {&ws[0], &ws[1], &ws[2]};
      const Tensor outs[] = {grouped[0].t, grouped[1].t, grouped[2].t};
      const std::vector<uint8_t> nb = RandomWeightBytes(rng, DType::kBF16, 1, k);
      const Weight nw = ops_->PrepareWeight(HostWeight("norm", DType::kBF16, 1, k, nb.data()));
      DevTensor h = NewTensor(1, k);
      for (bool norm : {false, true}) {
        SCOPED_TRACE(norm ? "fused norm" : "no norm");
        cuda::SetGemvFuseNorm(norm ? 1 : 0);
        Tensor in = dx.t;
        if (norm) {
          ops_->NormMatMulGroup(dx.t, nw, 1e-5f, h.t, wp, outs);
          cuda::SetGemvFuseNorm(0);
          ops_->RmsNorm(dx.t, nw, 1e-5f, h.t);
          in = h.t;
        } else {
          ops_->MatMulGroup(dx.t, wp, outs);
        }
        for (int i = 0; i < 3; ++i) {
          ops_->MatMul(in, ws[static_cast<size_t>(i)], single[static_cast<size_t>(i)].t);
          EXPECT_EQ(RawUnits(*ops_, grouped[static_cast<size_t>(i)].t), RawUnits(*ops_, single[static_cast<size_t>(i)].t))
              << "part " << i;
        }
      }
    }
  }
}

// The int8 GEMVs with their rows in shared memory, rows quantised by a separate launch (in shared memory's
// order; SetGemvPrequantMinK) against every block quantising them itself: identical bits for one weight,
// three parts and the SwiGLU pair, at widths whose group sizes differ (256, the 7B's 4096 and 14336).
TEST_F(CudaMatMulTest, PrequantisedRowsEqualInBlock) {
  struct Reset {
    ~Reset() { cuda::SetGemvPrequantMinK(-1); }
  } reset;
  for (DType t : {DType::kQ4_K, DType::kQ6_K, DType::kQ8_0}) {
    for (int64_t k : {256, 4096, 14336}) {
      for (int64_t rows : {1, 2}) {
        const uint64_t seed = NextSeed();
        SCOPED_TRACE(StrCat(DTypeName(t), " k ", k, " rows ", rows, " seed ", seed));
        Rng rng(seed);
        const int64_t n[3] = {300, 72, 40};
        std::vector<Weight> ws;
        for (int64_t r : n) {
          const std::vector<uint8_t> b = RandomWeightBytes(rng, t, r, k);
          ws.push_back(ops_->PrepareWeight(HostWeight("w", t, r, k, b.data())));
        }
        const std::vector<float> x = RandomBf16(rng, static_cast<size_t>(rows * k), 3.0f);
        DevTensor dx = Input(x, rows, k, k + 8);
        const Weight* wp[] = {&ws[0], &ws[1], &ws[2]};
        std::vector<std::vector<uint16_t>> got[2];
        for (int pre : {0, 1}) {
          cuda::SetGemvPrequantMinK(pre ? 0 : INT64_MAX);
          DevTensor one = NewTensor(rows, n[0]);
          ops_->MatMul(dx.t, ws[0], one.t);
          got[pre].push_back(RawUnits(*ops_, one.t));
          DevTensor a = NewTensor(rows, n[0]), b = NewTensor(rows, n[1]), c = NewTensor(rows, n[2]);
          const Tensor outs[] = {a.t, b.t, c.t};
          ops_->MatMulGroup(dx.t, wp, outs);
          for (const Tensor& o : outs) got[pre].push_back(RawUnits(*ops_, o));
          if (rows == 1) {
            DevTensor g = NewTensor(rows, n[1]), u = NewTensor(rows, n[1]);
            ops_->MatMulSwiGlu(dx.t, ws[1], ws[1], u.t, g.t);
            got[pre].push_back(RawUnits(*ops_, g.t));
          }
        }
        ASSERT_EQ(got[0].size(), got[1].size());
        for (size_t i = 0; i < got[0].size(); ++i) EXPECT_EQ(got[0][i], got[1][i]) << "product " << i;
      }
    }
  }
  // And against the reference, with the separate launch for every width.
  cuda::SetGemvPrequantMinK(0);
  for (DType t : {DType::kQ4_K, DType::kQ6_K, DType::kQ8_0}) {
    Check({t, 40, 4096}, {1, 2});
    Check({t, 24, 14336}, {1});
  }
}

// One token row of Q4_K, Q6_K and Q8_0 on both int8 kernels: the bulk-copy one (sm_90+, off by default,
// weights streamed through shared-memory stages) and the register one (the default), against
// the reference, at widths that choose 8, 4, 2 and 1 rows per row block and a row count that leaves a
// partial last one; more row blocks than the grid's blocks, so that stages are refilled.
TEST_F(CudaMatMulTest, BulkAndRegisterKernels) {
  struct Reset {
    ~Reset() { cuda::SetGemvBulk(-1); }
  } reset;
  for (int bulk : {1, 0}) {
    SCOPED_TRACE(bulk ? "bulk-copy kernel" : "register kernel");
    cuda::SetGemvBulk(bulk);
    for (DType t : {DType::kQ4_K, DType::kQ6_K, DType::kQ8_0}) {
      Check({t, 1027, 256}, {1});
      Check({t, 61, 4096}, {1});
      Check({t, 13, 14336}, {1});
      Check({t, 3, 29952}, {1});
    }
  }
}

// A weight larger than one 16 MiB upload chunk, and the slab loop of the GEMM path (several slabs).
TEST_F(CudaMatMulTest, LargeWeights) {
  Check({DType::kBF16, 4100, 2048}, {1, 9});
  Check({DType::kQ6_K, 5000, 4096}, {1});
  Check({DType::kQ8_0, 9000, 2048}, {40});  // 32 MiB slab holds 8192 rows of 2048: two slabs
}

// ---- RopeNorm ----

TEST_F(CudaOpsTest, RopeNorm) {
  struct Case {
    int n_heads, head_dim;
    double base;
  };
  for (const Case& c :
       {Case{3, 16, 10000.0}, Case{1, 64, 10000.0}, Case{8, 128, 11158839.92507748}, Case{2, 256, 1e6}}) {
    for (bool with_norm : {false, true}) {
      const uint64_t seed = NextSeed();
      SCOPED_TRACE(
          StrCat("heads ", c.n_heads, " head_dim ", c.head_dim, " norm ", with_norm, " seed ", seed));
      Rng rng(seed);
      StepBatch batch;
      std::vector<int32_t> pages(1200);
      std::iota(pages.begin(), pages.end(), 0);
      batch.AddSeq(3, 9000, std::span<const int32_t>(pages.data(), 600));  // large angles
      batch.AddSeq(1, 0, std::span<const int32_t>(pages.data() + 600, 1));
      batch.AddSeq(17, 40, std::span<const int32_t>(pages.data() + 601, 4));
      const int64_t rows = batch.n_rows(), cols = static_cast<int64_t>(c.n_heads) * c.head_dim;
      std::vector<float> inv(c.head_dim / 2);
      for (int i = 0; i < c.head_dim / 2; ++i)
        inv[i] = static_cast<float>(std::pow(c.base, -2.0 * i / c.head_dim));
      std::vector<uint8_t> nb = RandomWeightBytes(rng, DType::kBF16, 1, c.head_dim);
      std::vector<float> nf = HostWeightF32(DType::kBF16, nb, 1, c.head_dim);
      const Weight inv_w =
          ops_->PrepareWeight(HostWeight("inv_freq", DType::kF32, 1, c.head_dim / 2, inv.data()));
      const Weight norm_w = ops_->PrepareWeight(HostWeight("q_norm", DType::kBF16, 1, c.head_dim, nb.data()));

      std::vector<float> x = RandomBf16(rng, static_cast<size_t>(rows * cols), 2.0f);
      // The expected values: HF's bf16 forward op by op (cos and sin of the f32 angle rounded to bf16, each
      // product and the sum rounded), then the norm in double. Where the device's sincosf (2 ulp) and the
      // host's cos/sin could round to different bf16 values (the f32 value within 4 ulp of a bf16 tie),
      // that factor may be one bf16 ulp (<= 2u of it) apart, so the products that use it move by up to
      // 2u |x c| (or |x s|), their rounding by one more ulp of the product (2u |x c|), and the rounding of
      // the sum by one ulp of the result (2u |ref|). Elsewhere the rotation is exact (the same roundings of
      // exact f32 products and sums); the norm adds its two roundings and its f32 sum (4.5u |ref|, as
      // RmsNorm).
      std::vector<float> want(x.size()), tol(x.size());
      const int half = c.head_dim / 2;
      for (int64_t r = 0; r < rows; ++r)
        for (int h = 0; h < c.n_heads; ++h) {
          const float* xh = x.data() + r * cols + h * c.head_dim;
          std::vector<float> rot(c.head_dim), slack(c.head_dim);
          double ss = 0;
          for (int j = 0; j < half; ++j) {
            const float angle = static_cast<float>(batch.positions[r]) * inv[j];
            const float co = static_cast<float>(std::cos(static_cast<double>(angle)));
            const float si = static_cast<float>(std::sin(static_cast<double>(angle)));
            const float cb = RoundBf16(co), sb = RoundBf16(si);
            const float x1 = xh[j], x2 = xh[j + half];
            rot[j] = RoundBf16(RoundBf16(x1 * cb) - RoundBf16(x2 * sb));
            rot[j + half] = RoundBf16(RoundBf16(x2 * cb) + RoundBf16(x1 * sb));
            const float flip = (NearBf16Tie(co, 4) ? 4 * kU * std::fabs(cb) : 0.0f) +
                               (NearBf16Tie(si, 4) ? 4 * kU * std::fabs(sb) : 0.0f);
            const float moved = flip * (std::fabs(x1) + std::fabs(x2)) * (1 + 2 * kU);
            slack[j] = moved > 0 ? moved + 2 * kU * (std::fabs(rot[j]) + moved) : 0.0f;
            slack[j + half] = moved > 0 ? moved + 2 * kU * (std::fabs(rot[j + half]) + moved) : 0.0f;
            ss += static_cast<double>(rot[j]) * rot[j] + static_cast<double>(rot[j + half]) * rot[j + half];
          }
          const double inv_norm = with_norm ? 1.0 / std::sqrt(ss / c.head_dim + 1e-5) : 1.0;
          for (int d = 0; d < c.head_dim; ++d) {
            const size_t i = static_cast<size_t>(r * cols + h * c.head_dim + d);
            if (with_norm) {
              want[i] = RoundBf16(RoundBf16(static_cast<float>(rot[d] * inv_norm)) * nf[d]);
              tol[i] = 4.5f * kU * std::fabs(want[i]) +
                       slack[d] * static_cast<float>(inv_norm) * std::fabs(nf[d]) * (1 + 4 * kU);
            } else {
              want[i] = rot[d];
              tol[i] = slack[d];
            }
          }
        }
      DevTensor dx = Input(x, rows, cols, cols + 8);
      ops_->BeginStep(batch);
      ops_->RopeNorm(dx.t, c.n_heads, c.head_dim, inv_w, with_norm ? &norm_w : nullptr, 1e-5f);
      EXPECT_TRUE(Close(Download(dx.t), want, tol));
      EXPECT_TRUE(PaddingIntact(dx.t));
    }
  }
}

// ---- KvWrite and Attention ----

struct SeqSpec {
  int32_t n_rows, n_past;
};

struct AttnCase {
  int n_kv_heads, group, head_dim, page_size;
  DType kv_type;
  std::vector<SeqSpec> seqs;
  float q_gain = 1.0f;  // > 1 makes the softmax peaky, so that each key matters
  // Decode contexts short enough (<= 128) that clusters of 8 or 16 take the splits the combine launch
  // does: their outputs must then have the same bits.
  bool same_splits = false;
};

// The prefill kernel a CudaAttentionTest runs (CudaOpsOptions::prefill_attention_tensor_cores). Decode
// rows take the same kernel either way; the simple kernels run with kCudaCores only.
enum class PrefillKernel { kCudaCores, kTensorCores };

class CudaAttentionTest : public CudaOpsTest, public ::testing::WithParamInterface<PrefillKernel> {
 protected:
  void SetUp() override {
    CudaOpsTest::SetUp();
    if (IsSkipped()) return;
    tensor_cores_ = GetParam() == PrefillKernel::kTensorCores;
    if (tensor_cores_) {
#ifdef HYMT_CUDA_EMU
      GTEST_SKIP() << "tensor-core prefill kernel: the CPU emulator has no tensor cores";
#else
      cudaDeviceProp prop;
      ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
      if (prop.major < 8)
        GTEST_SKIP() << "tensor-core prefill kernel: needs sm_80 (bf16 mma), " << prop.name << " is sm_"
                     << prop.major << prop.minor;
#endif
    }
    CudaOpsOptions options;
    options.prefill_attention_tensor_cores = tensor_cores_;
    ops_ = CreateCudaOps(0, options);
    cuda_ = AsCudaOps(ops_.get());
#ifndef HYMT_CUDA_EMU
    cudaDeviceProp prop;
    ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
    clusters_ = prop.major >= 9;
#endif
  }

  struct Pools {
    std::unique_ptr<Buffer> k, v;
    KvLayerView view;
  };
  Pools MakePools(Ops& ops, const AttnCase& c, int64_t n_pages, bool device) {
    Pools p;
    p.view.dtype = c.kv_type;
    p.view.n_kv_heads = c.n_kv_heads;
    p.view.head_dim = c.head_dim;
    p.view.page_size = c.page_size;
    p.view.n_pages = n_pages;
    const size_t bytes = p.view.PageBytes() * static_cast<size_t>(n_pages);
    p.k = ops.Allocate(bytes, "k pool");
    p.v = ops.Allocate(bytes, "v pool");
    // Poison: any read of a position nobody wrote turns the output into NaN.
    if (device) {
      cuda_->Fill16(p.k->data(), bytes / 2, kNaNBf16);
      cuda_->Fill16(p.v->data(), bytes / 2, kNaNBf16);
    } else {
      std::vector<uint16_t> nan(bytes / 2, kNaNBf16);
      std::memcpy(p.k->data(), nan.data(), bytes);
      std::memcpy(p.v->data(), nan.data(), bytes);
    }
    p.view.k = p.k->data();
    p.view.v = p.v->data();
    return p;
  }

  void Run(const AttnCase& c) {
    const uint64_t seed = NextSeed();
    SCOPED_TRACE(StrCat("kv heads ", c.n_kv_heads, " group ", c.group, " head_dim ", c.head_dim, " page ",
                        c.page_size, " kv ", DTypeName(c.kv_type), " seed ", seed));
    Rng rng(seed);
    const int n_heads = c.n_kv_heads * c.group, hd = c.head_dim;
    const int64_t kv_width = static_cast<int64_t>(c.n_kv_heads) * hd,
                  q_width = static_cast<int64_t>(n_heads) * hd;

    // Page tables: a random permutation of the pool, so that sequences' pages interleave.
    std::vector<int32_t> table_sizes;
    int64_t n_pages = 3;  // spare pages nobody uses
    for (const SeqSpec& s : c.seqs) {
      table_sizes.push_back((s.n_past + s.n_rows + c.page_size - 1) / c.page_size);
      n_pages += table_sizes.back();
    }
    std::vector<int32_t> perm(static_cast<size_t>(n_pages));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng.gen());
    std::vector<std::vector<int32_t>> tables;
    size_t next = 0;
    for (int32_t n : table_sizes) {
      tables.emplace_back(perm.begin() + static_cast<int64_t>(next),
                          perm.begin() + static_cast<int64_t>(next + n));
      next += static_cast<size_t>(n);
    }

    Pools dev = MakePools(*ops_, c, n_pages, true);
    Pools host = MakePools(*ref_, c, n_pages, false);

    // History: positions [0, n_past) of every sequence, written in one step.
    StepBatch hist;
    hist.page_size = c.page_size;
    for (size_t s = 0; s < c.seqs.size(); ++s)
      if (c.seqs[s].n_past > 0) hist.AddSeq(c.seqs[s].n_past, 0, tables[s]);
    if (hist.n_rows() > 0) {
      std::vector<float> hk = RandomBf16(rng, static_cast<size_t>(hist.n_rows() * kv_width));
      std::vector<float> hv = RandomBf16(rng, hk.size());
      ref_->BeginStep(hist);
      ref_->KvWrite(HostTensor(hk, hist.n_rows(), kv_width), HostTensor(hv, hist.n_rows(), kv_width),
                    host.view);
      DevTensor dk = Input(hk, hist.n_rows(), kv_width), dv = Input(hv, hist.n_rows(), kv_width);
      ops_->BeginStep(hist);
      ops_->KvWrite(dk.t, dv.t, dev.view);
    }

    // The step: new rows of every sequence.
    StepBatch batch;
    batch.page_size = c.page_size;
    for (size_t s = 0; s < c.seqs.size(); ++s) batch.AddSeq(c.seqs[s].n_rows, c.seqs[s].n_past, tables[s]);
    const int64_t rows = batch.n_rows();
    std::vector<float> k = RandomBf16(rng, static_cast<size_t>(rows * kv_width));
    std::vector<float> v = RandomBf16(rng, k.size());
    std::vector<float> q = RandomBf16(rng, static_cast<size_t>(rows * q_width), c.q_gain);
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    std::vector<float> want(q.size());
    ref_->BeginStep(batch);
    ref_->KvWrite(HostTensor(k, rows, kv_width), HostTensor(v, rows, kv_width), host.view);
    ref_->Attention(HostTensor(q, rows, q_width), host.view, n_heads, scale, HostTensor(want, rows, q_width));

    DevTensor dk = Input(k, rows, kv_width, kv_width + 8), dv = Input(v, rows, kv_width);
    ops_->BeginStep(batch);
    ops_->KvWrite(dk.t, dv.t, dev.view);

    // The caches must agree bit for bit (positions nobody wrote keep the poison in both).
    const size_t pool_bytes = dev.view.PageBytes() * static_cast<size_t>(n_pages);
    std::vector<uint8_t> got_k(pool_bytes), got_v(pool_bytes);
    Tensor kraw{dev.view.k,
                DType::kBF16,
                1,
                static_cast<int64_t>(pool_bytes / 2),
                static_cast<int64_t>(pool_bytes / 2),
                ops_->device()};
    ops_->CopyToHost(kraw, got_k.data());
    kraw.data = dev.view.v;
    ops_->CopyToHost(kraw, got_v.data());
    EXPECT_EQ(std::memcmp(got_k.data(), host.view.k, pool_bytes), 0) << "K cache differs";
    EXPECT_EQ(std::memcmp(got_v.data(), host.view.v, pool_bytes), 0) << "V cache differs";

    // Tolerance per (row, head, dim), from the worst score error of that (row, head); with tensor cores
    // also from the exact softmax weights w_j (double).
    std::vector<float> kvals(static_cast<size_t>(hd)), vvals(static_cast<size_t>(hd));
    std::vector<double> scores, wv(static_cast<size_t>(hd));
    std::vector<float> tol(want.size());
    for (int64_t r = 0; r < rows; ++r) {
      const StepBatch::Seq& s = batch.seqs[static_cast<size_t>(batch.row_seq[r])];
      const int32_t pos = batch.positions[r];
      for (int h = 0; h < n_heads; ++h) {
        const int hk = h / c.group;
        const float* qr = &q[static_cast<size_t>(r * q_width + h * hd)];
        auto load_kv = [&](int32_t j) {  // position j of the sequence into kvals, vvals
          const int32_t page = batch.pages[static_cast<size_t>(s.first_page + j / c.page_size)];
          const size_t off =
              static_cast<size_t>(page) * host.view.PageBytes() +
              (static_cast<size_t>(hk) * c.page_size + j % c.page_size) * DTypeBytes(c.kv_type, hd);
          DequantizeRow(c.kv_type, static_cast<char*>(host.view.k) + off, kvals.data(), hd);
          DequantizeRow(c.kv_type, static_cast<char*>(host.view.v) + off, vvals.data(), hd);
        };
        float max_qk = 0, max_v = 0;
        scores.assign(static_cast<size_t>(pos) + 1, 0.0);
        for (int32_t j = 0; j <= pos; ++j) {
          load_kv(j);
          float qk = 0;
          for (int d = 0; d < hd; ++d) {
            qk += std::fabs(qr[d] * kvals[d]);
            scores[static_cast<size_t>(j)] += static_cast<double>(qr[d]) * kvals[d] * scale;
            max_v = std::max(max_v, std::fabs(vvals[d]));
          }
          max_qk = std::max(max_qk, qk);
        }
        // sum_j w_j |v_jd|: what rounding the weights to bf16 can move the output by (tensor cores).
        std::fill(wv.begin(), wv.end(), 0.0);
        if (tensor_cores_) {
          const double mx = *std::max_element(scores.begin(), scores.end());
          double z = 0;
          for (double& x : scores) z += (x = std::exp(x - mx));
          for (int32_t j = 0; j <= pos; ++j) {
            load_kv(j);
            for (int d = 0; d < hd; ++d)
              wv[static_cast<size_t>(d)] += scores[static_cast<size_t>(j)] / z * std::fabs(vvals[d]);
          }
        }
        const float gamma = tensor_cores_ ? 4.0f * hd + 4 : hd + 4.0f;
        const float e = gamma * kU32 * scale * max_qk * 1.4427f + 4 * kU32;  // in log2 units
        for (int d = 0; d < hd; ++d) {
          const size_t i = static_cast<size_t>(r * q_width + h * hd + d);
          tol[i] = kU * std::fabs(want[i]) + (2 * e + 8 * kU32) * max_v +
                   kU * (1 + kU) * static_cast<float>(wv[static_cast<size_t>(d)]);
        }
      }
    }
    // Decode splits merged by the combine launch (clusters off), and inside clusters of 16 and 8 blocks and
    // of the size the step's longest context takes (the default) where the device has them (sm_90+;
    // AttnClusterSplits).
    auto check = [&] {
      DevTensor dq = Input(q, rows, q_width, q_width + 16);
      std::vector<std::vector<float>> outs;
      for (int cluster : {0, 16, 8, cuda::kAttnClusterByContext}) {
        SCOPED_TRACE(StrCat("decode attention in clusters of ", cluster));
        cuda::SetAttnCluster(cluster);
        const int64_t launches = cuda::AttnClusterLaunches();
        DevTensor out = NewTensor(rows, q_width, DType::kBF16, q_width + 8);
        ops_->Attention(dq.t, dev.view, n_heads, scale, out.t);
        cuda::SetAttnCluster(-1);
        outs.push_back(Download(out.t));
        EXPECT_TRUE(Close(outs.back(), want, tol));
        EXPECT_TRUE(PaddingIntact(out.t));
        if (cluster > 0 && expect_clusters_ && !simple_now_) {
          EXPECT_GT(cuda::AttnClusterLaunches(), launches) << "no decode attention ran in clusters";
        }
        if (c.same_splits && outs.size() > 1) {
          EXPECT_EQ(std::memcmp(outs.back().data(), outs[0].data(), outs[0].size() * sizeof(float)), 0)
              << "clusters of " << cluster << " against the combine launch";
        }
      }
    };
    if (tensor_cores_) {
      SCOPED_TRACE("tensor-core prefill");
      check();
    } else {
      BothPaths(check);
    }
  }

  bool tensor_cores_ = false;
  bool clusters_ = false;         // the device runs decode attention in clusters (sm_90+)
  bool expect_clusters_ = false;  // the case's decode rows must take them there (few rows, fast kernels)
};

// Decode rows (1..4 per sequence) and prefill chunks (more) in one batch, different n_past each.
std::vector<SeqSpec> MixedSeqs() {
  return {{1, 0}, {1, 37}, {3, 100}, {17, 0}, {64, 200}, {1, 700}, {4, 15}, {9, 33}};
}

TEST_P(CudaAttentionTest, Gqa1) {
  Run({4, 1, 128, 16, DType::kBF16, MixedSeqs()});
}
TEST_P(CudaAttentionTest, Gqa2) {
  Run({2, 2, 128, 16, DType::kBF16, MixedSeqs()});
}
TEST_P(CudaAttentionTest, Gqa4) {
  Run({2, 4, 128, 16, DType::kBF16, MixedSeqs()});
}
TEST_P(CudaAttentionTest, Gqa8HeadDim64) {
  Run({1, 8, 64, 16, DType::kBF16, MixedSeqs()});
}
TEST_P(CudaAttentionTest, Gqa3) {
  Run({2, 3, 64, 8, DType::kBF16, MixedSeqs()});
}
TEST_P(CudaAttentionTest, F16Cache) {
  Run({2, 4, 128, 16, DType::kF16, MixedSeqs()});
}
TEST_P(CudaAttentionTest, PeakySoftmax) {
  Run({2, 4, 128, 16, DType::kBF16, MixedSeqs(), 6.0f});
}
TEST_P(CudaAttentionTest, OddPageSize) {
  Run({2, 2, 64, 5, DType::kBF16, {{1, 3}, {2, 70}, {12, 9}}});
}
// Shapes only the simple kernel takes: head_dim 32 (the tiny fixtures), group 16, an f32 cache.
TEST_P(CudaAttentionTest, SimpleOnlyShapes) {
  Run({1, 4, 32, 16, DType::kBF16, MixedSeqs()});
  Run({1, 16, 64, 16, DType::kBF16, {{1, 50}, {7, 3}}});
  Run({2, 2, 64, 16, DType::kF32, {{1, 50}, {7, 3}}});
}
// Long contexts: the decode path with many splits, and a prefill chunk late in a long sequence.
TEST_P(CudaAttentionTest, LongContext) {
  Run({2, 4, 128, 16, DType::kBF16, {{1, 8191}, {2, 4000}, {16, 8100}, {1, 2047}}});
}
// Decode rows only, few of them (so their splits merge in clusters on sm_90+), every context at most 128
// positions: clusters of 8 and 16 blocks give the combine launch's bits. The second case has a context of
// 1,500 positions, which clusters split otherwise than the combine launch's grid (within the tolerance).
TEST_P(CudaAttentionTest, DecodeSplitsInClusters) {
  if (GetParam() == PrefillKernel::kTensorCores)
    GTEST_SKIP() << "decode rows only: one prefill kernel is enough";
  expect_clusters_ = clusters_;
  AttnCase c{2, 4, 128, 16, DType::kBF16, {{1, 0}, {1, 15}, {1, 16}, {1, 63}, {1, 100}, {1, 127}}};
  c.same_splits = true;
  Run(c);
  Run({8, 4, 128, 16, DType::kBF16, {{1, 1499}, {1, 40}}, 4.0f});
  Run({1, 8, 64, 16, DType::kF16, {{1, 0}, {1, 70}, {1, 127}}, 1.0f, true});
  expect_clusters_ = false;
  // The default's size: 8 up to kAttnClusterSmallCtx positions, then what 16 gives.
  if (clusters_ && std::getenv("HYMT_ATTN_CLUSTER_CTX") == nullptr) {
    cuda::SetAttnCluster(16);
    const int sixteen = cuda::AttnClusterSplits(2, 9, 0);
    cuda::SetAttnCluster(cuda::kAttnClusterByContext);
    EXPECT_EQ(cuda::AttnClusterSplits(2, 9, 1), 8);
    EXPECT_EQ(cuda::AttnClusterSplits(2, 9, cuda::kAttnClusterSmallCtx), 8);
    EXPECT_EQ(cuda::AttnClusterSplits(2, 9, cuda::kAttnClusterSmallCtx + 1), sixteen);
    EXPECT_EQ(cuda::AttnClusterSplits(1, 9, 5000), 0) << "one split: nothing to merge";
    cuda::SetAttnCluster(-1);
  }
}
// Many decode rows: 96 rows x 8 kv heads fill the GPU, so decode attention runs without splits.
TEST_P(CudaAttentionTest, ManyDecodeRows) {
  std::vector<SeqSpec> seqs;
  for (int i = 0; i < 96; ++i) seqs.push_back({1, 60 + 7 * i});
  Run({8, 4, 128, 16, DType::kBF16, seqs});
}
// Prefill chunks at GQA groups 1, 4 and 8: tiles shorter than the tile height (5, 6, 70 = 64 + 6 rows
// at group 1), chunks that start mid-page and mid-K/V-tile (n_past 61, 90) and cross a 64-key boundary.
TEST_P(CudaAttentionTest, PrefillChunks) {
  const std::vector<SeqSpec> seqs = {{70, 0}, {5, 0}, {33, 90}, {6, 61}};
  Run({2, 1, 128, 16, DType::kBF16, seqs});
  Run({1, 4, 128, 16, DType::kBF16, seqs});
  Run({1, 8, 128, 16, DType::kBF16, seqs});
}

INSTANTIATE_TEST_SUITE_P(, CudaAttentionTest,
                         ::testing::Values(PrefillKernel::kCudaCores, PrefillKernel::kTensorCores),
                         [](const ::testing::TestParamInfo<PrefillKernel>& info) {
                           return info.param == PrefillKernel::kTensorCores ? "TensorCores" : "CudaCores";
                         });

// ---- SwiGlu, Add, GatherRows ----

TEST_F(CudaOpsTest, SwiGluAndAdd) {
  for (int64_t rows : {1, 3, 17, 64}) {
    for (int64_t cols : {1, 7, 64, 4096}) {
      const uint64_t seed = NextSeed();
      SCOPED_TRACE(StrCat("rows ", rows, " cols ", cols, " seed ", seed));
      Rng rng(seed);
      const size_t n = static_cast<size_t>(rows * cols);
      std::vector<float> g = RandomBf16(rng, n, 4.0f), u = RandomBf16(rng, n, 2.0f);
      // bf16(bf16(silu(g)) * u), silu in f32 as the device computes it. The host's expf and the device's
      // (2 ulp) may differ by a few ulp: where silu(g) lies within 16 f32 ulp of a bf16 tie its rounding
      // may differ by one bf16 ulp (2u), and the product's rounding with it; elsewhere the bits agree.
      std::vector<float> sw(n), tol(n);
      for (size_t i = 0; i < n; ++i) {
        const float si = g[i] / (1.0f + std::exp(-g[i]));
        sw[i] = RoundBf16(RoundBf16(si) * u[i]);
        tol[i] = NearBf16Tie(si, 16) ? 4 * kU * std::fabs(sw[i]) + 1e-30f : 0.0f;
      }
      DevTensor dg = Input(g, rows, cols, cols + 3), du = Input(u, rows, cols, cols + 8);
      DevTensor out = NewTensor(rows, cols, DType::kBF16, cols + 1);
      ops_->SwiGlu(dg.t, du.t, out.t);
      EXPECT_TRUE(Close(Download(out.t), sw, tol));
      EXPECT_TRUE(PaddingIntact(out.t));
      ops_->SwiGlu(dg.t, du.t, dg.t);  // out aliasing gate
      EXPECT_TRUE(Close(Download(dg.t), sw, tol));

      std::vector<float> a = RandomBf16(rng, n), b = RandomBf16(rng, n), sum = a;
      std::vector<float> bc = b;
      ref_->Add(HostTensor(sum, rows, cols), HostTensor(bc, rows, cols));
      DevTensor da = Input(a, rows, cols, cols + 2), db = Input(b, rows, cols);
      ops_->Add(da.t, db.t);
      EXPECT_TRUE(Close(Download(da.t), sum, RelTol(sum, kU, 1e-30f)));
      EXPECT_TRUE(PaddingIntact(da.t));
    }
  }
}

// ---- sampling ----

// Greedy rows of 16-byte-aligned logits take the vectorised argmax (16-byte loads, the last n_valid % 4
// or % 8 logits one at a time), split over several blocks a row (50,048 and the real 128,256 entries; up
// to 64 rows) or one block a row (more rows); rows of other widths the scalar kernel. All against the host
// path, for bf16 and f32: ties (the lowest id, also across the split's parts), a best logit in the last
// part or one past n_valid, a best logit in a thread's second pass, rows holding NaN, an infinity, nothing
// but -inf, or nothing but the lowest finite value. The split's per-row counters are reused by every call.
TEST_F(CudaOpsTest, GreedyMatchesTheHostPath) {
  for (DType dt : {DType::kBF16, DType::kF32}) {
    for (const int64_t vocab : {int64_t{50048}, int64_t{5003}, int64_t{128256}}) {
      const uint64_t seed = NextSeed();
      SCOPED_TRACE(StrCat(DTypeName(dt), " vocab ", vocab, " seed ", seed));
      Rng rng(seed);
      const int64_t rows = 10;
      const int32_t n_valid = static_cast<int32_t>(vocab - 5);
      std::vector<float> v = RandomBf16(rng, static_cast<size_t>(rows * vocab), 3.0f);
      auto at = [&](int64_t r, int64_t i) -> float& { return v[static_cast<size_t>(r * vocab + i)]; };
      at(0, vocab / 2) = at(0, vocab - 50) = at(0, 17) = 50.0f;
      at(1, n_valid - 1) = 50.0f;
      at(2, n_valid + 2) = 1000.0f;
      at(3, 0) = 50.0f;
      at(4, vocab / 3) = std::nanf("");
      at(5, 12) = INFINITY;
      for (int64_t i = 0; i < vocab; ++i) at(6, i) = -INFINITY;
      // the lowest finite value of the type (the kernels' starting value in f32; -FLT_MAX rounds to -inf in bf16)
      const float lowest = dt == DType::kF32 ? -FLT_MAX : Bf16ToF32(0xff7f);
      for (int64_t i = 0; i < vocab; ++i) at(7, i) = lowest;
      const int64_t second_pass = std::min<int64_t>(4 * 1024 * 4 + 3, n_valid - 1);
      at(8, second_pass) = 50.0f;
      if (vocab > 8192)
        at(9, 8192) = at(9, 8191) = at(9, 4096) = at(9, 4095) =
            50.0f;  // the parts' edges (4,096 f32 or 8,192 bf16 logits)
      DevTensor d = NewTensor(rows, vocab, dt);
      Upload(v, d.t);
      std::vector<SampleSpec> specs(static_cast<size_t>(rows));
      std::vector<int32_t> device_ids(static_cast<size_t>(rows)), host_ids(static_cast<size_t>(rows));
      ops_->SampleTokens(d.t, specs, n_valid, device_ids);
      ops_->Ops::SampleTokens(d.t, specs, n_valid, host_ids);
      EXPECT_EQ(device_ids, host_ids);
      EXPECT_EQ(device_ids[0], 17);
      EXPECT_EQ(device_ids[1], n_valid - 1);
      EXPECT_NE(device_ids[2], n_valid + 2);
      EXPECT_EQ(device_ids[3], 0);
      EXPECT_EQ(device_ids[4], kNonFiniteLogits);
      EXPECT_EQ(device_ids[5], kNonFiniteLogits);
      EXPECT_EQ(device_ids[6], kNonFiniteLogits);
      EXPECT_EQ(device_ids[7], 0);
      EXPECT_EQ(device_ids[8], second_pass);
      if (vocab > 8192) {
        EXPECT_EQ(device_ids[9], 4095);
      }
    }
  }
  // More rows than the split takes (64): one block a row, then the split again.
  const uint64_t seed = NextSeed();
  SCOPED_TRACE(StrCat("70 rows, seed ", seed));
  Rng rng(seed);
  const int64_t rows = 70, vocab = 50048;
  const int32_t n_valid = 50000;
  std::vector<float> v = RandomBf16(rng, static_cast<size_t>(rows * vocab), 3.0f);
  DevTensor d = NewTensor(rows, vocab, DType::kF32);
  Upload(v, d.t);
  for (const int64_t n : {rows, int64_t{64}}) {
    std::vector<SampleSpec> specs(static_cast<size_t>(n));
    std::vector<int32_t> device_ids(static_cast<size_t>(n)), host_ids(static_cast<size_t>(n));
    ops_->SampleTokens(d.t.Rows(0, n), specs, n_valid, device_ids);
    ops_->Ops::SampleTokens(d.t.Rows(0, n), specs, n_valid, host_ids);
    EXPECT_EQ(device_ids, host_ids) << n << " rows";
  }
}

// Top-k sampling on the device (the k best found there, top-p and the draw on the host) chooses exactly
// the tokens the host path chooses: penalties with repeated and out-of-range history tokens, greedy rows
// with a penalty, ties at the k-th score (a few, and more than the device collects), -0 and +0, a row
// with a NaN, bf16 and f32 logits.
TEST_F(CudaOpsTest, TopKSamplingMatchesTheHostPath) {
  for (DType dt : {DType::kBF16, DType::kF32}) {
    const uint64_t seed = NextSeed();
    SCOPED_TRACE(StrCat(DTypeName(dt), " seed ", seed));
    Rng rng(seed);
    const int64_t rows = 24, vocab = 5003;
    const int32_t n_valid = 4990;
    std::vector<float> v = RandomBf16(rng, static_cast<size_t>(rows * vocab), 3.0f);
    auto at = [&](int64_t r, int64_t i) -> float& { return v[static_cast<size_t>(r * vocab + i)]; };
    for (int i = 0; i < 100; ++i) at(1, 37 * i + 5) = 40.0f;   // 100 ties at the top: top-20 takes the lowest ids
    for (int i = 0; i < 300; ++i) at(2, 13 * i + 1) = 40.0f;   // 300 ties: more than the device collects
    for (int64_t i = 0; i < vocab; ++i) at(3, i) = -std::fabs(at(3, i)) - 1.0f;
    for (int i = 0; i < 30; ++i) at(3, 7 * i + 3) = (i % 2) ? 0.0f : -0.0f;  // ties of -0 and +0
    at(4, 77) = std::nanf("");
    at(5, n_valid + 3) = 1000.0f;  // past n_valid: never chosen
    std::vector<std::vector<int32_t>> hist(static_cast<size_t>(rows));
    std::vector<SampleSpec> specs(static_cast<size_t>(rows));
    const int ks[] = {1, 2, 5, 20, 64};
    for (int64_t r = 0; r < rows; ++r) {
      SampleSpec& sp = specs[static_cast<size_t>(r)];
      sp.temperature = r % 7 == 6 ? 0.0f : (r % 3 == 0 ? 0.7f : 1.3f);
      sp.top_k = ks[r % 5];
      sp.top_p = r % 4 == 0 ? 1.0f : (r % 4 == 1 ? 0.6f : 0.95f);
      sp.repetition_penalty = r % 3 == 2 ? 1.0f : (r % 2 ? 1.05f : 1.3f);
      sp.uniform = rng.Uniform();
      auto& h = hist[static_cast<size_t>(r)];
      for (int j = 0; j < 40; ++j) h.push_back(rng.Int(0, vocab - 1));
      h.push_back(h[0]);        // repeated
      h.push_back(-3);          // outside the vocabulary
      h.push_back(n_valid + 1); // past n_valid
      // the row's best tokens too, so that the penalty moves the top
      int64_t best = 0;
      for (int64_t i = 0; i < n_valid; ++i)
        if (at(r, i) > at(r, best)) best = i;
      h.push_back(static_cast<int32_t>(best));
      sp.history = h;
    }
    specs[1].top_k = 20, specs[1].temperature = 0.7f, specs[1].repetition_penalty = 1.0f;
    specs[2].top_k = 20, specs[2].temperature = 0.7f, specs[2].repetition_penalty = 1.0f;
    specs[3].top_k = 64, specs[3].temperature = 1.0f, specs[3].repetition_penalty = 1.0f;
    DevTensor d = NewTensor(rows, vocab, dt);
    Upload(v, d.t);
    std::vector<int32_t> device_ids(static_cast<size_t>(rows)), host_ids(static_cast<size_t>(rows));
    ops_->SampleTokens(d.t, specs, n_valid, device_ids);
    ops_->Ops::SampleTokens(d.t, specs, n_valid, host_ids);
    EXPECT_EQ(device_ids, host_ids);
    EXPECT_EQ(device_ids[4], kNonFiniteLogits);
    for (int64_t r = 0; r < rows; ++r) {
      const int32_t id = device_ids[static_cast<size_t>(r)];
      if (r != 4) {
        EXPECT_TRUE(id >= 0 && id < n_valid) << r;
      }
    }
  }
}

// ---- fused ops: bit for bit the sequence of ops they replace ----

// MatMulGroup, MatMulAdd and MatMulSwiGlu against MatMul, Add and SwiGlu on the same device: the
// fused GEMV launches (decode row counts) and the default sequences (more rows) give identical bits.
TEST_F(CudaOpsTest, FusedMatMulsEqualTheirSequence) {
  for (DType t : {DType::kBF16, DType::kF16, DType::kF8E4M3, DType::kQ8_0, DType::kQ4_K, DType::kQ6_K}) {
    for (int64_t k : {256, 4096}) {
      for (int64_t rows : {1, 2, 5, 8, 11, 40}) {
        const uint64_t seed = NextSeed();
        SCOPED_TRACE(StrCat(DTypeName(t), " k ", k, " rows ", rows, " seed ", seed));
        Rng rng(seed);
        const int64_t n_q = 96, n_kv = 40, n_ffn = 72;
        auto weight = [&](const char* name, int64_t n, int64_t cols) {
          const std::vector<uint8_t> b = RandomWeightBytes(rng, t, n, cols);
          return ops_->PrepareWeight(HostWeight(name, t, n, cols, b.data(), t == DType::kF8E4M3 ? 0.37f : 1.0f));
        };
        const Weight wq = weight("q", n_q, k), wk = weight("k", n_kv, k), wv = weight("v", n_kv, k);
        const Weight wg = weight("gate", n_ffn, k), wu = weight("up", n_ffn, k), wd = weight("down", 48, k);
        const std::vector<float> x = RandomBf16(rng, static_cast<size_t>(rows * k));
        DevTensor dx = Input(x, rows, k, k + 8);

        // q, k, v in one launch.
        DevTensor q1 = NewTensor(rows, n_q, DType::kBF16, n_q + 4), k1 = NewTensor(rows, n_kv), v1 = NewTensor(rows, n_kv);
        // The same strides on both sides: cuBLAS (the GEMM path of larger row counts) may pick another
        // kernel, with another summation order, for another output stride.
        DevTensor q2 = NewTensor(rows, n_q, DType::kBF16, n_q + 4), k2 = NewTensor(rows, n_kv), v2 = NewTensor(rows, n_kv);
        const Weight* ws[] = {&wq, &wk, &wv};
        const Tensor outs[] = {q1.t, k1.t, v1.t};
        ops_->MatMulGroup(dx.t, ws, outs);
        ops_->MatMul(dx.t, wq, q2.t);
        ops_->MatMul(dx.t, wk, k2.t);
        ops_->MatMul(dx.t, wv, v2.t);
        EXPECT_EQ(RawUnits(*ops_, q1.t), RawUnits(*ops_, q2.t)) << "q";
        EXPECT_EQ(RawUnits(*ops_, k1.t), RawUnits(*ops_, k2.t)) << "k";
        EXPECT_EQ(RawUnits(*ops_, v1.t), RawUnits(*ops_, v2.t)) << "v";
        EXPECT_TRUE(PaddingIntact(q1.t));

        // silu(gate) * up.
        DevTensor g1 = NewTensor(rows, n_ffn, DType::kBF16, n_ffn + 2), up1 = NewTensor(rows, n_ffn);
        DevTensor g2 = NewTensor(rows, n_ffn, DType::kBF16, n_ffn + 2), up2 = NewTensor(rows, n_ffn);
        ops_->MatMulSwiGlu(dx.t, wg, wu, up1.t, g1.t);
        ops_->MatMul(dx.t, wg, g2.t);
        ops_->MatMul(dx.t, wu, up2.t);
        ops_->SwiGlu(g2.t, up2.t, g2.t);
        EXPECT_EQ(RawUnits(*ops_, g1.t), RawUnits(*ops_, g2.t)) << "swiglu";
        EXPECT_TRUE(PaddingIntact(g1.t));

        // RMSNorm, then q, k, v and then gate and up, with the fusion turned on: the GEMVs normalise x
        // themselves (h is then not written at all) and must give the bits of RmsNorm followed by the products.
        struct FuseNorm {
          FuseNorm() { cuda::SetGemvFuseNorm(1); }
          ~FuseNorm() { cuda::SetGemvFuseNorm(-1); }
        } fuse_norm;
        const DType nt = k == 256 ? DType::kF32 : DType::kBF16;
        const std::vector<uint8_t> nb = RandomWeightBytes(rng, nt, 1, k);
        const Weight nw = ops_->PrepareWeight(HostWeight("norm", nt, 1, k, nb.data()));
        DevTensor h1 = NewTensor(rows, k), h2 = NewTensor(rows, k);
        const std::vector<uint16_t> poison = RawUnits(*ops_, h1.t);
        ops_->NormMatMulGroup(dx.t, nw, 1e-5f, h1.t, ws, outs);
        ops_->RmsNorm(dx.t, nw, 1e-5f, h2.t);
        ops_->MatMulGroup(h2.t, ws, std::span<const Tensor>({q2.t, k2.t, v2.t}));
        EXPECT_EQ(RawUnits(*ops_, q1.t), RawUnits(*ops_, q2.t)) << "norm q";
        EXPECT_EQ(RawUnits(*ops_, k1.t), RawUnits(*ops_, k2.t)) << "norm k";
        EXPECT_EQ(RawUnits(*ops_, v1.t), RawUnits(*ops_, v2.t)) << "norm v";
        // Fused where the products run as GEMV passes (up to 8 rows for bf16, 32 for the others; 8 rows a
        // pass) whose normalised rows fit in 46 KiB of shared memory: int8 rows of 1.5 k bytes, bf16 of 2 k.
        const bool int8 = t == DType::kQ8_0 || t == DType::kQ4_K || t == DType::kQ6_K;
        const int64_t pass = std::min<int64_t>(rows, 8);
        const bool fits = rows <= (t == DType::kBF16 ? 8 : 32) && pass * k * (int8 ? 3 : 4) / 2 <= 46 * 1024;
        if (fits) {
          EXPECT_EQ(RawUnits(*ops_, h1.t), poison) << "the norm was not fused";
        }
        ops_->NormMatMulSwiGlu(dx.t, nw, 1e-5f, h1.t, wg, wu, up1.t, g1.t);
        ops_->RmsNorm(dx.t, nw, 1e-5f, h2.t);
        ops_->MatMulSwiGlu(h2.t, wg, wu, up2.t, g2.t);
        EXPECT_EQ(RawUnits(*ops_, g1.t), RawUnits(*ops_, g2.t)) << "norm swiglu";
        if (fits && rows == 1) {
          EXPECT_EQ(RawUnits(*ops_, h1.t), poison) << "the norm was not fused (swiglu)";
        }

        // residual += x * down^T.
        const std::vector<float> res = RandomBf16(rng, static_cast<size_t>(rows * 48), 3.0f);
        DevTensor r1 = Input(res, rows, 48, 48 + 16), r2 = Input(res, rows, 48, 48 + 16);
        DevTensor scratch = NewTensor(rows, 48);
        ops_->MatMulAdd(dx.t, wd, scratch.t, r1.t);
        ops_->MatMul(dx.t, wd, scratch.t);
        ops_->Add(r2.t, scratch.t);
        EXPECT_EQ(RawUnits(*ops_, r1.t), RawUnits(*ops_, r2.t)) << "residual";
        EXPECT_TRUE(PaddingIntact(r1.t));
      }
    }
  }
}

// Two outputs of the same products whose normalised inputs differ only by the sum order of the norm's sum of
// squares: an element's bf16 rounding may flip (1 ulp), which moves an int8 group by a step and every output
// by ~1e-4 of its scale, so a few outputs cross a bf16 rounding. A wrong sum (a part missing or counted
// twice:
// >= 0.4% on every element) moves nearly all of them. So: at least 80% of the outputs bit for bit, and each
// within 2^-7 of max(|want|, 5% of the largest |want|).
void ExpectNearlyTheSameBits(const std::vector<float>& got, const std::vector<float>& want,
                             const char* what) {
  ASSERT_EQ(got.size(), want.size());
  float scale = 0.0f;
  for (float w : want) scale = std::max(scale, std::fabs(w));
  size_t same = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    same += got[i] == want[i];
    const float tol = 0x1p-7f * std::max(std::fabs(want[i]), 0.05f * scale);
    EXPECT_LE(std::fabs(got[i] - want[i]), tol) << what << " " << i << ": " << got[i] << " vs " << want[i];
  }
  EXPECT_GE(same * 5, got.size() * 4) << what << ": " << same << " of " << got.size() << " the same";
}

// One token row: MatMulAdd (int8 GEMV) writes the new residual's sum of squares in parts, and a
// NormMatMulGroup or NormMatMulSwiGlu right after it over that residual normalises from them inside its GEMV
// (h is not written) instead of an RmsNorm launch; q4_k groups take a q6_k v, so the two-type launch
// normalises too. Against MatMulAdd, RmsNorm and the products: the residual bit for bit, the products to the
// rounding of the sum's order (ExpectNearlyTheSameBits). With another op between the two, or the switch off,
// RmsNorm runs (h written) and the products are bit for bit the sequence's. Widths 4,096 and 256 (the latter
// with a producer of K = 8,192, whose int8 rows come from the separate quantising launch).
TEST_F(CudaOpsTest, NormFromTheSumsOfSquares) {
  struct Case {
    DType t;
    int64_t k, kin;
  };
  for (const Case c :
       {Case{DType::kQ8_0, 4096, 512}, Case{DType::kQ4_K, 4096, 512}, Case{DType::kQ6_K, 4096, 512},
        Case{DType::kQ4_K, 256, 8192}, Case{DType::kQ8_0, 256, 8192}}) {
    const uint64_t seed = NextSeed();
    SCOPED_TRACE(StrCat(DTypeName(c.t), " k ", c.k, " producer k ", c.kin, " seed ", seed));
    Rng rng(seed);
    auto weight = [&](const char* name, DType t, int64_t n, int64_t cols) {
      const std::vector<uint8_t> b = RandomWeightBytes(rng, t, n, cols);
      return ops_->PrepareWeight(HostWeight(name, t, n, cols, b.data()));
    };
    const int64_t k = c.k;
    const Weight wo = weight("o", c.t, k, c.kin);
    const Weight wq = weight("q", c.t, 96, k), wk = weight("k", c.t, 40, k);
    const Weight wv = weight("v", c.t == DType::kQ4_K ? DType::kQ6_K : c.t, 40, k);
    const Weight wg = weight("gate", c.t, 72, k), wu = weight("up", c.t, 72, k);
    const DType nt = k == 256 ? DType::kF32 : DType::kBF16;
    const std::vector<uint8_t> nb = RandomWeightBytes(rng, nt, 1, k);
    const Weight nw = ops_->PrepareWeight(HostWeight("norm", nt, 1, k, nb.data()));
    const std::vector<float> a = RandomBf16(rng, static_cast<size_t>(c.kin));
    const std::vector<float> res = RandomBf16(rng, static_cast<size_t>(k), 3.0f);
    DevTensor da = Input(a, 1, c.kin), r1 = Input(res, 1, k), r2 = Input(res, 1, k);
    DevTensor scratch = NewTensor(1, k), h2 = NewTensor(1, k);
    const Weight* ws[] = {&wq, &wk, &wv};
    DevTensor q1 = NewTensor(1, 96), k1 = NewTensor(1, 40), v1 = NewTensor(1, 40);
    DevTensor q2 = NewTensor(1, 96), k2 = NewTensor(1, 40), v2 = NewTensor(1, 40);
    const Tensor outs1[] = {q1.t, k1.t, v1.t}, outs2[] = {q2.t, k2.t, v2.t};
    DevTensor g1 = NewTensor(1, 72), up1 = NewTensor(1, 72), g2 = NewTensor(1, 72), up2 = NewTensor(1, 72);
    const int64_t two_type = cuda::GemvTwoTypeLaunches();

    // Each case adds the same product to r1 and r2 (so they stay equal), then normalises r1 one way and r2
    // through RmsNorm. `between` runs an op in between on r1's side.
    enum class Way { kSums, kOpBetween, kSwitchOff };
    for (const Way way : {Way::kSums, Way::kOpBetween, Way::kSwitchOff}) {
      for (const bool swiglu : {false, true}) {
        SCOPED_TRACE(StrCat("way ", static_cast<int>(way), swiglu ? " swiglu" : " q, k, v"));
        DevTensor h1 = NewTensor(1, k);
        const std::vector<uint16_t> poison = RawUnits(*ops_, h1.t);
        cuda::SetGemvNormSums(way == Way::kSwitchOff ? 0 : 1);  // off by default
        ops_->MatMulAdd(da.t, wo, scratch.t, r1.t);
        if (way == Way::kOpBetween) ops_->MatMul(da.t, wo, scratch.t);
        if (swiglu) {
          ops_->NormMatMulSwiGlu(r1.t, nw, 1e-5f, h1.t, wg, wu, up1.t, g1.t);
        } else {
          ops_->NormMatMulGroup(r1.t, nw, 1e-5f, h1.t, ws, outs1);
        }
        cuda::SetGemvNormSums(-1);
        ops_->MatMulAdd(da.t, wo, scratch.t, r2.t);
        ops_->RmsNorm(r2.t, nw, 1e-5f, h2.t);
        if (swiglu) {
          ops_->MatMulSwiGlu(h2.t, wg, wu, up2.t, g2.t);
        } else {
          ops_->MatMulGroup(h2.t, ws, outs2);
        }
        ASSERT_EQ(RawUnits(*ops_, r1.t), RawUnits(*ops_, r2.t)) << "residual";
        const std::vector<std::pair<const DevTensor*, const DevTensor*>> pairs =
            swiglu ? std::vector<std::pair<const DevTensor*, const DevTensor*>>{{&g1, &g2}}
                   : std::vector<std::pair<const DevTensor*, const DevTensor*>>{
                         {&q1, &q2}, {&k1, &k2}, {&v1, &v2}};
        if (way == Way::kSums) {
          EXPECT_EQ(RawUnits(*ops_, h1.t), poison) << "RmsNorm ran";
          for (const auto& [got, want] : pairs)
            ExpectNearlyTheSameBits(Download(got->t), Download(want->t), "output");
        } else {
          EXPECT_EQ(RawUnits(*ops_, h1.t), RawUnits(*ops_, h2.t)) << "RmsNorm did not run";
          for (const auto& [got, want] : pairs) EXPECT_EQ(RawUnits(*ops_, got->t), RawUnits(*ops_, want->t));
        }
      }
    }
    // q4_k's group (q4_k q and k, q6_k v) is one two-type launch on either side in each way: normalised
    // from the sums in the first, after RmsNorm otherwise.
    if (c.t == DType::kQ4_K) {
      EXPECT_EQ(cuda::GemvTwoTypeLaunches() - two_type, 6);
    }
  }
}

// MatMulGroup over three weights of the given types (n[i] rows of width k) and `rows` token rows (x's stride
// k + pad): bit for bit the separate MatMuls, with `two_type_launches` launches of the two-type kernel.
void CudaOpsTest::CheckMixedGroup(const DType (&types)[3], const int64_t (&n)[3], int64_t k, int64_t rows,
                                  int64_t pad, int64_t two_type_launches) {
  Ops& ops = *ops_;
  const uint64_t seed = NextSeed();
  SCOPED_TRACE(StrCat(DTypeName(types[0]), ",", DTypeName(types[1]), ",", DTypeName(types[2]), " k ", k,
                      " rows ", rows, " seed ", seed));
  const int64_t launches = cuda::GemvTwoTypeLaunches();
  Rng rng(seed);
  std::vector<Weight> w;
  for (int i = 0; i < 3; ++i) {
    const std::vector<uint8_t> b = RandomWeightBytes(rng, types[i], n[i], k);
    w.push_back(ops.PrepareWeight(HostWeight("w", types[i], n[i], k, b.data())));
  }
  const std::vector<float> x = RandomBf16(rng, static_cast<size_t>(rows * k));
  DevTensor dx = Input(x, rows, k, k + pad);
  std::vector<DevTensor> fused, single;
  for (int i = 0; i < 3; ++i) {
    fused.push_back(NewTensor(rows, n[i]));
    single.push_back(NewTensor(rows, n[i]));
  }
  const Weight* ws[] = {&w[0], &w[1], &w[2]};
  const Tensor outs[] = {fused[0].t, fused[1].t, fused[2].t};
  ops.MatMulGroup(dx.t, ws, outs);
  EXPECT_EQ(cuda::GemvTwoTypeLaunches() - launches, two_type_launches);
  for (int i = 0; i < 3; ++i) ops.MatMul(dx.t, w[static_cast<size_t>(i)], single[static_cast<size_t>(i)].t);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(RawUnits(ops, fused[i].t), RawUnits(ops, single[i].t)) << i;
}

// A group of weights of two types (a _K_M file's layers with q6_k attn_v beside q4_k q and k) runs one
// fused launch per type (mode 1), or at one token row of q4_k and q6_k one launch for both (mode 2,
// GemvInt8TwoKernel): bit for bit the separate products either way.
TEST_F(CudaOpsTest, MixedTypeGroupEqualsItsSequence) {
  struct Reset {
    ~Reset() { cuda::SetGemvMixedGroups(-1); }
  } reset;
  const DType mixes[][3] = {{DType::kQ4_K, DType::kQ4_K, DType::kQ6_K},
                            {DType::kQ6_K, DType::kQ4_K, DType::kQ6_K},
                            {DType::kQ8_0, DType::kBF16, DType::kQ8_0}};
  for (int mode : {1, 2}) {
    SCOPED_TRACE(StrCat("mode ", mode));
    cuda::SetGemvMixedGroups(mode);
    for (const auto& types : mixes) {
      // q4_k and q6_k, unless bulk copies take the one-row int8 products (tests/gpu/run.sh's bulk run)
      const bool two = mode == 2 && types[0] != DType::kQ8_0 && !cuda::GemvBulkEnabled();
      for (int64_t k : {256, 4096})
        for (int64_t rows : {1, 2, 5})
          CheckMixedGroup(types, {96, 40, 40}, k, rows, 8, two && rows == 1 ? 1 : 0);
    }
  }
}

// The two-type launch with fewer blocks than row blocks (one block per SM): each side's blocks work
// through several of its type's row blocks, a partial last one among them; bit for bit the separate
// products.
TEST_F(CudaOpsTest, TwoTypeGroupWithFewerBlocks) {
  struct Reset {
    ~Reset() {
      cuda::SetGemvMixedGroups(-1);
      cuda::SetGemvBlocksPerSm(-1);
      cuda::SetGemvBulk(-1);
    }
  } reset;
  cuda::SetGemvMixedGroups(2);
  cuda::SetGemvBlocksPerSm(1);
  cuda::SetGemvBulk(0);  // the two-type launch is the register kernel's
  const DType mixes[][3] = {{DType::kQ4_K, DType::kQ4_K, DType::kQ6_K},
                            {DType::kQ6_K, DType::kQ4_K, DType::kQ6_K}};
  for (const auto& types : mixes) CheckMixedGroup(types, {2600, 900, 700}, 256, 1, 0, 1);
}

// RopeNormKvWrite against RopeNorm, RopeNorm and KvWrite: the same q and k activations and caches, bit for
// bit, for every cache type, decode rows and a prefill chunk in one batch.
TEST_F(CudaOpsTest, RopeNormKvWriteEqualsItsSequence) {
  for (DType cache : {DType::kBF16, DType::kF16, DType::kF32}) {
    for (bool norms : {true, false}) {
      const uint64_t seed = NextSeed();
      SCOPED_TRACE(StrCat("cache ", DTypeName(cache), " norms ", norms, " seed ", seed));
      Rng rng(seed);
      const int n_heads = 8, n_kv = 2, hd = 128, page = 16;
      const int64_t n_pages = 40;
      StepBatch batch;
      batch.page_size = page;
      std::vector<int32_t> perm(static_cast<size_t>(n_pages));
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), rng.gen());
      batch.AddSeq(1, 37, std::span<const int32_t>(perm.data(), 3));
      batch.AddSeq(1, 0, std::span<const int32_t>(perm.data() + 3, 1));
      batch.AddSeq(21, 5, std::span<const int32_t>(perm.data() + 4, 2));
      batch.AddSeq(1, 300, std::span<const int32_t>(perm.data() + 6, 19));
      const int64_t rows = batch.n_rows(), qw = n_heads * hd, kw = n_kv * hd;
      std::vector<float> inv(hd / 2);
      for (int i = 0; i < hd / 2; ++i) inv[i] = static_cast<float>(std::pow(1e6, -2.0 * i / hd));
      const Weight inv_w = ops_->PrepareWeight(HostWeight("inv_freq", DType::kF32, 1, hd / 2, inv.data()));
      const std::vector<uint8_t> qnb = RandomWeightBytes(rng, DType::kBF16, 1, hd);
      const std::vector<uint8_t> knb = RandomWeightBytes(rng, DType::kBF16, 1, hd);
      const Weight qn = ops_->PrepareWeight(HostWeight("q_norm", DType::kBF16, 1, hd, qnb.data()));
      const Weight kn = ops_->PrepareWeight(HostWeight("k_norm", DType::kBF16, 1, hd, knb.data()));
      const std::vector<float> q = RandomBf16(rng, static_cast<size_t>(rows * qw), 2.0f);
      const std::vector<float> k = RandomBf16(rng, static_cast<size_t>(rows * kw), 2.0f);
      const std::vector<float> v = RandomBf16(rng, static_cast<size_t>(rows * kw));

      DevKv a = NewKv(cache, n_kv, hd, page, n_pages), b = NewKv(cache, n_kv, hd, page, n_pages);
      DevTensor qa = Input(q, rows, qw, qw + 8), ka = Input(k, rows, kw), va = Input(v, rows, kw, kw + 8);
      DevTensor qb = Input(q, rows, qw), kb = Input(k, rows, kw), vb = Input(v, rows, kw);
      ops_->BeginStep(batch);
      ops_->RopeNormKvWrite(qa.t, ka.t, va.t, n_heads, inv_w, norms ? &qn : nullptr, norms ? &kn : nullptr, 1e-5f,
                            a.kv);
      ops_->RopeNorm(qb.t, n_heads, hd, inv_w, norms ? &qn : nullptr, 1e-5f);
      ops_->RopeNorm(kb.t, n_kv, hd, inv_w, norms ? &kn : nullptr, 1e-5f);
      ops_->KvWrite(kb.t, vb.t, b.kv);
      EXPECT_EQ(RawUnits(*ops_, qa.t), RawUnits(*ops_, qb.t)) << "q";
      EXPECT_EQ(RawUnits(*ops_, ka.t), RawUnits(*ops_, kb.t)) << "k";
      EXPECT_TRUE(PaddingIntact(qa.t));
      ExpectSameCaches(*ops_, a.kv, b.kv);
    }
  }
}

// RopeNormKvAttention against RopeNormKvWrite then Attention: the same attention output and caches, bit for
// bit. Steps whose every sequence decodes one row take the fused decode kernel (RoPE and the KV write
// inside the attention block; it leaves q as it was, which shows that it ran); a step with a sequence of
// several rows, and an f32 cache, take the two ops.
TEST_F(CudaOpsTest, RopeNormKvAttentionEqualsItsSequence) {
  const char* fuse_env = std::getenv("HYMT_FUSE_ROPE_ATTN");
  const bool fused_on = fuse_env != nullptr && std::string(fuse_env) == "1";
  struct Case {
    int n_kv, group, hd, page;
    DType cache;
    std::vector<std::pair<int32_t, int32_t>> seqs;  // (n_rows, n_past)
  };
  const std::vector<std::pair<int32_t, int32_t>> decode = {{1, 0},  {1, 37},  {1, 15},
                                                           {1, 16}, {1, 300}, {1, 2047}};
  const std::vector<Case> cases = {
      {2, 4, 128, 16, DType::kBF16, decode},
      {2, 4, 128, 16, DType::kF16, decode},
      {4, 1, 128, 16, DType::kBF16, {{1, 5}, {1, 129}}},
      {1, 8, 64, 16, DType::kBF16, {{1, 70}, {1, 1}}},
      {2, 3, 64, 8, DType::kBF16, {{1, 33}, {1, 8}}},
      {2, 4, 128, 16, DType::kBF16, {{1, 40}, {3, 12}, {1, 7}}},  // several rows: the two ops
      {2, 4, 128, 16, DType::kF32, {{1, 40}, {1, 7}}},            // f32 cache: the two ops
  };
  for (const Case& c : cases) {
    for (bool norms : {true, false}) {
      const uint64_t seed = NextSeed();
      SCOPED_TRACE(StrCat("kv heads ", c.n_kv, " group ", c.group, " head_dim ", c.hd, " cache ",
                          DTypeName(c.cache), " norms ", norms, " seed ", seed));
      Rng rng(seed);
      const int n_heads = c.n_kv * c.group, hd = c.hd;
      const int64_t qw = static_cast<int64_t>(n_heads) * hd, kw = static_cast<int64_t>(c.n_kv) * hd;
      std::vector<std::vector<int32_t>> tables;
      int64_t n_pages = 2;
      for (const auto& [n_rows, n_past] : c.seqs) n_pages += (n_past + n_rows + c.page - 1) / c.page;
      std::vector<int32_t> perm(static_cast<size_t>(n_pages));
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), rng.gen());
      size_t next = 0;
      for (const auto& [n_rows, n_past] : c.seqs) {
        const size_t n = static_cast<size_t>((n_past + n_rows + c.page - 1) / c.page);
        tables.emplace_back(perm.begin() + static_cast<int64_t>(next),
                            perm.begin() + static_cast<int64_t>(next + n));
        next += n;
      }
      std::vector<float> inv(static_cast<size_t>(hd / 2));
      for (int i = 0; i < hd / 2; ++i)
        inv[static_cast<size_t>(i)] = static_cast<float>(std::pow(1e6, -2.0 * i / hd));
      const Weight inv_w = ops_->PrepareWeight(HostWeight("inv_freq", DType::kF32, 1, hd / 2, inv.data()));
      const std::vector<uint8_t> qnb = RandomWeightBytes(rng, DType::kBF16, 1, hd);
      const std::vector<uint8_t> knb = RandomWeightBytes(rng, DType::kBF16, 1, hd);
      const Weight qn = ops_->PrepareWeight(HostWeight("q_norm", DType::kBF16, 1, hd, qnb.data()));
      const Weight kn = ops_->PrepareWeight(HostWeight("k_norm", DType::kBF16, 1, hd, knb.data()));

      // Two caches with the same history (positions below n_past), poison elsewhere.
      StepBatch hist;
      hist.page_size = c.page;
      for (size_t s = 0; s < c.seqs.size(); ++s)
        if (c.seqs[s].second > 0) hist.AddSeq(c.seqs[s].second, 0, tables[s]);
      const std::vector<float> hk = RandomBf16(rng, static_cast<size_t>(hist.n_rows() * kw));
      const std::vector<float> hv = RandomBf16(rng, hk.size());
      auto side = [&] {
        DevKv sd = NewKv(c.cache, c.n_kv, hd, c.page, n_pages);
        if (hist.n_rows() > 0) {
          DevTensor dk = Input(hk, hist.n_rows(), kw), dv = Input(hv, hist.n_rows(), kw);
          ops_->BeginStep(hist);
          ops_->KvWrite(dk.t, dv.t, sd.kv);
        }
        return sd;
      };
      DevKv a = side(), b = side();

      StepBatch batch;
      batch.page_size = c.page;
      bool one_row_each = true;
      for (size_t s = 0; s < c.seqs.size(); ++s) {
        batch.AddSeq(c.seqs[s].first, c.seqs[s].second, tables[s]);
        one_row_each = one_row_each && c.seqs[s].first == 1;
      }
      const int64_t rows = batch.n_rows();
      const std::vector<float> q = RandomBf16(rng, static_cast<size_t>(rows * qw), 2.0f);
      const std::vector<float> k = RandomBf16(rng, static_cast<size_t>(rows * kw), 2.0f);
      const std::vector<float> v = RandomBf16(rng, static_cast<size_t>(rows * kw));
      const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
      DevTensor qa = Input(q, rows, qw, qw + 8), ka = Input(k, rows, kw), va = Input(v, rows, kw, kw + 8);
      DevTensor qb = Input(q, rows, qw), kb = Input(k, rows, kw), vb = Input(v, rows, kw);
      DevTensor oa = NewTensor(rows, qw, DType::kBF16, qw + 8), ob = NewTensor(rows, qw);
      ops_->BeginStep(batch);
      const std::vector<uint16_t> q_before = RawUnits(*ops_, qa.t);
      ops_->RopeNormKvAttention(qa.t, ka.t, va.t, n_heads, inv_w, norms ? &qn : nullptr,
                                norms ? &kn : nullptr, 1e-5f, a.kv, scale, oa.t);
      ops_->RopeNormKvWrite(qb.t, kb.t, vb.t, n_heads, inv_w, norms ? &qn : nullptr, norms ? &kn : nullptr,
                            1e-5f, b.kv);
      ops_->Attention(qb.t, b.kv, n_heads, scale, ob.t);
      EXPECT_EQ(RawUnits(*ops_, oa.t), RawUnits(*ops_, ob.t)) << "attention output";
      EXPECT_TRUE(PaddingIntact(oa.t));
      const bool fused = fused_on && one_row_each && c.cache != DType::kF32;
      if (fused) {
        EXPECT_EQ(RawUnits(*ops_, qa.t), q_before) << "the fused kernel leaves q as it was";
      } else {
        EXPECT_NE(RawUnits(*ops_, qa.t), q_before) << "the two ops rotate q in place";
      }
      ExpectSameCaches(*ops_, a.kv, b.kv);
    }
  }
}

TEST_F(CudaOpsTest, GatherRows) {
  Rng rng(NextSeed());
  for (DType t : {DType::kBF16, DType::kF32}) {
    for (int64_t cols : {1, 5, 4096}) {
      const int64_t rows = 17;
      std::vector<float> x = RandomBf16(rng, static_cast<size_t>(rows * cols));
      DevTensor dx = NewTensor(rows, cols, t, cols + 4);
      Upload(x, dx.t);
      const std::vector<int32_t> pick = {16, 0, 3, 3, 9};
      DevTensor out = NewTensor(static_cast<int64_t>(pick.size()), cols, t, cols + 2);
      ops_->GatherRows(dx.t, pick, out.t);
      std::vector<float> want;
      for (int32_t r : pick) want.insert(want.end(), x.begin() + r * cols, x.begin() + (r + 1) * cols);
      EXPECT_EQ(Download(out.t), want) << DTypeName(t) << " cols " << cols;
      EXPECT_TRUE(PaddingIntact(out.t));
    }
  }
}

// ---- CUDA graphs: replayed steps equal eager steps ----

// A small decoder layer over the ops: the shape of one decode step of the model, then the model's fused
// ops over int8 weights (*2: MatMulAdd, whose one-row GEMV writes, with HYMT_NORM_SUMS=1, the sums of
// squares that the NormMatMul op after it normalises from; tests/gpu/run.sh reruns the graph tests so).
struct MiniLayer {
  static constexpr int kHidden = 256, kHeads = 4, kKvHeads = 2, kHeadDim = 64, kFfn = 512, kVocab = 300;
  Weight embed, norm, wq, wk, wv, wo, gate, up, down, inv_freq, qnorm;
  Weight wo2, gate2, up2, down2, wq2, wk2, wv2;
};

class CudaGraphTest : public CudaOpsTest {
 protected:
  struct Buffers {
    DevTensor x, h, q, k, v, att, o, g, u, logits_rows, logits;
    DevKv cache;
  };

  void MakeWeights(Rng& rng) {
    auto prep = [&](const char* name, DType t, int64_t rows, int64_t cols) {
      host_bytes_.push_back(RandomWeightBytes(rng, t, rows, cols));
      return ops_->PrepareWeight(HostWeight(name, t, rows, cols, host_bytes_.back().data()));
    };
    using L = MiniLayer;
    layer_.embed = prep("embed", DType::kQ8_0, L::kVocab, L::kHidden);
    layer_.norm = prep("norm", DType::kBF16, 1, L::kHidden);
    layer_.wq = prep("wq", DType::kBF16, L::kHeads * L::kHeadDim, L::kHidden);
    layer_.wk = prep("wk", DType::kQ4_K, L::kKvHeads * L::kHeadDim, L::kHidden);
    layer_.wv = prep("wv", DType::kQ6_K, L::kKvHeads * L::kHeadDim, L::kHidden);
    layer_.wo = prep("wo", DType::kBF16, L::kHidden, L::kHeads * L::kHeadDim);
    layer_.gate = prep("gate", DType::kQ8_0, L::kFfn, L::kHidden);
    layer_.up = prep("up", DType::kBF16, L::kFfn, L::kHidden);
    layer_.down = prep("down", DType::kBF16, L::kHidden, L::kFfn);
    layer_.qnorm = prep("qnorm", DType::kBF16, 1, L::kHeadDim);
    layer_.wo2 = prep("wo2", DType::kQ4_K, L::kHidden, L::kHidden);
    layer_.gate2 = prep("gate2", DType::kQ8_0, L::kFfn, L::kHidden);
    layer_.up2 = prep("up2", DType::kQ8_0, L::kFfn, L::kHidden);
    layer_.down2 = prep("down2", DType::kQ6_K, L::kHidden, L::kFfn);
    layer_.wq2 = prep("wq2", DType::kQ4_K, L::kHidden, L::kHidden);
    layer_.wk2 = prep("wk2", DType::kQ4_K, L::kKvHeads * L::kHeadDim, L::kHidden);
    layer_.wv2 = prep("wv2", DType::kQ6_K, L::kKvHeads * L::kHeadDim, L::kHidden);
    inv_.resize(L::kHeadDim / 2);
    for (int i = 0; i < L::kHeadDim / 2; ++i)
      inv_[i] = static_cast<float>(std::pow(10000.0, -2.0 * i / L::kHeadDim));
    layer_.inv_freq =
        ops_->PrepareWeight(HostWeight("inv_freq", DType::kF32, 1, L::kHeadDim / 2, inv_.data()));
  }

  Buffers MakeBuffers(int rows, int64_t n_pages) {
    using L = MiniLayer;
    Buffers b;
    b.x = NewTensor(rows, L::kHidden);
    b.h = NewTensor(rows, L::kHidden);
    b.q = NewTensor(rows, L::kHeads * L::kHeadDim);
    b.k = NewTensor(rows, L::kKvHeads * L::kHeadDim);
    b.v = NewTensor(rows, L::kKvHeads * L::kHeadDim);
    b.att = NewTensor(rows, L::kHeads * L::kHeadDim);
    b.o = NewTensor(rows, L::kHidden);
    b.g = NewTensor(rows, L::kFfn);
    b.u = NewTensor(rows, L::kFfn);
    b.logits_rows = NewTensor(rows, L::kHidden);
    b.logits = NewTensor(rows, L::kVocab, DType::kF32);
    b.cache = NewKv(DType::kBF16, L::kKvHeads, L::kHeadDim, 16, n_pages);
    return b;
  }

  // One step: everything a decode step of the model does, ending in f32 logits of every row.
  void Step(const StepBatch& batch, const std::vector<int32_t>& ids, Buffers& b) {
    using L = MiniLayer;
    const MiniLayer& w = layer_;
    ops_->BeginStep(batch);
    ops_->Embed(w.embed, ids, b.x.t);
    ops_->RmsNorm(b.x.t, w.norm, 1e-5f, b.h.t);
    ops_->MatMul(b.h.t, w.wq, b.q.t);
    ops_->MatMul(b.h.t, w.wk, b.k.t);
    ops_->MatMul(b.h.t, w.wv, b.v.t);
    ops_->RopeNorm(b.q.t, L::kHeads, L::kHeadDim, w.inv_freq, &w.qnorm, 1e-5f);
    ops_->RopeNorm(b.k.t, L::kKvHeads, L::kHeadDim, w.inv_freq, &w.qnorm, 1e-5f);
    ops_->KvWrite(b.k.t, b.v.t, b.cache.kv);
    ops_->Attention(b.q.t, b.cache.kv, L::kHeads, 0.125f, b.att.t);
    ops_->MatMul(b.att.t, w.wo, b.o.t);
    ops_->Add(b.x.t, b.o.t);
    ops_->RmsNorm(b.x.t, w.norm, 1e-5f, b.h.t);
    ops_->MatMul(b.h.t, w.gate, b.g.t);
    ops_->MatMul(b.h.t, w.up, b.u.t);
    ops_->SwiGlu(b.g.t, b.u.t, b.g.t);
    ops_->MatMul(b.g.t, w.down, b.o.t);
    ops_->Add(b.x.t, b.o.t);
    ops_->MatMulAdd(b.h.t, w.wo2, b.o.t, b.x.t);
    ops_->NormMatMulSwiGlu(b.x.t, w.norm, 1e-5f, b.h.t, w.gate2, w.up2, b.u.t, b.g.t);
    ops_->MatMulAdd(b.g.t, w.down2, b.o.t, b.x.t);
    const Weight* qkv[] = {&w.wq2, &w.wk2, &w.wv2};
    ops_->NormMatMulGroup(b.x.t, w.norm, 1e-5f, b.h.t, qkv, std::span<const Tensor>({b.q.t, b.k.t, b.v.t}));
    ops_->Add(b.x.t, b.q.t);  // q is as wide as x
    std::vector<int32_t> all(static_cast<size_t>(batch.n_rows()));
    std::iota(all.begin(), all.end(), 0);
    std::reverse(all.begin(), all.end());
    ops_->GatherRows(b.x.t, all, b.logits_rows.t);
    ops_->MatMul(b.logits_rows.t, w.embed, b.logits.t);
  }

  // Writes a history of n_past positions per sequence into both buffer sets (identical data).
  void History(const std::vector<int32_t>& n_past, const std::vector<std::vector<int32_t>>& tables, Rng& rng,
               Buffers& a, Buffers& b) {
    StepBatch hist;
    for (size_t s = 0; s < n_past.size(); ++s) hist.AddSeq(n_past[s], 0, tables[s]);
    const int64_t width = MiniLayer::kKvHeads * MiniLayer::kHeadDim;
    std::vector<float> k = RandomBf16(rng, static_cast<size_t>(hist.n_rows() * width));
    std::vector<float> v = RandomBf16(rng, k.size());
    DevTensor dk = Input(k, hist.n_rows(), width), dv = Input(v, hist.n_rows(), width);
    ops_->BeginStep(hist);
    ops_->KvWrite(dk.t, dv.t, a.cache.kv);
    ops_->KvWrite(dk.t, dv.t, b.cache.kv);
  }

  struct Replays {
    int fast = 0, walked = 0, captures = 0;
  };
  // One step run eagerly into `eager` and through `graph` into `graphed`: a fast replay (FastReplay with the
  // ids and the gathered rows), else a replay through the ops, else a new capture into `graph`; the logits
  // must agree bit for bit.
  void StepBoth(const StepBatch& batch, const std::vector<int32_t>& ids, const std::vector<int32_t>& gather,
                Buffers& eager, Buffers& graphed, std::unique_ptr<CudaGraph>& graph, Replays& n) {
    Step(batch, ids, eager);
    bool ran = false;
    if (graph != nullptr) {
      const std::span<const int32_t> args[] = {ids, gather};
      ran = cuda_->FastReplay(*graph, batch, args);
      n.fast += ran;
      if (!ran) {
        cuda_->BeginReplay(*graph);
        Step(batch, ids, graphed);
        ran = cuda_->EndReplay();
        n.walked += ran;
      }
    }
    if (!ran) {
      cuda_->BeginCapture();
      Step(batch, ids, graphed);
      graph = cuda_->EndCapture();
      ++n.captures;
    }
    const std::vector<float> a = Download(eager.logits.t), b = Download(graphed.logits.t);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      ASSERT_TRUE(std::isfinite(a[i])) << i;
      ASSERT_EQ(a[i], b[i]) << "logit " << i;
    }
  }

  MiniLayer layer_;
  std::vector<std::vector<uint8_t>> host_bytes_;
  std::vector<float> inv_;
};

TEST_F(CudaGraphTest, ReplayEqualsEager) {
  const uint64_t seed = NextSeed();
  SCOPED_TRACE(StrCat("seed ", seed));
  Rng rng(seed);
  MakeWeights(rng);
  // Three decode sequences (one row each) and one 2-row chunk.
  const std::vector<int32_t> rows_per_seq = {1, 1, 2, 1};
  std::vector<int32_t> n_past = {5, 30, 12, 60};
  std::vector<std::vector<int32_t>> tables = {{0, 1, 2, 3, 4, 5, 6, 7},
                                              {9, 8, 10, 11, 12, 13, 14, 15},
                                              {20, 17, 18, 19, 16, 21, 22, 23},
                                              {31, 30, 29, 28, 27, 26, 25, 24}};
  const int rows = 5;
  Buffers eager = MakeBuffers(rows, 32), graphed = MakeBuffers(rows, 32);
  History(n_past, tables, rng, eager, graphed);

  std::unique_ptr<CudaGraph> graph;
  int replays = 0, recaptures = 0;
  for (int step = 0; step < 8; ++step) {
    SCOPED_TRACE(StrCat("step ", step));
    StepBatch batch;
    for (size_t s = 0; s < n_past.size(); ++s) batch.AddSeq(rows_per_seq[s], n_past[s], tables[s]);
    std::vector<int32_t> ids(rows);
    for (int32_t& id : ids) id = rng.Int(0, MiniLayer::kVocab - 1);

    Step(batch, ids, eager);
    bool ran = false;
    if (graph != nullptr) {
      cuda_->BeginReplay(*graph);
      Step(batch, ids, graphed);
      ran = cuda_->EndReplay();
      replays += ran;
    }
    if (!ran) {
      cuda_->BeginCapture();
      Step(batch, ids, graphed);
      graph = cuda_->EndCapture();
      ++recaptures;
    }
    const std::vector<float> a = Download(eager.logits.t), b = Download(graphed.logits.t);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      ASSERT_TRUE(std::isfinite(a[i])) << i;
      ASSERT_EQ(a[i], b[i]) << "logit " << i;  // same kernels, same launches: bit-identical
    }
    EXPECT_EQ(Download(eager.x.t), Download(graphed.x.t));
    for (int32_t& p : n_past) p += 1;
  }
  // The longest context grows from 61 to 68 positions: from step 4 (65) its row takes 8 splits of the
  // attention grid instead of 4 (AttnRowSplits, worked out on the device), and the graph captured at step
  // 0 still replays, with the eager step's bits.
  EXPECT_EQ(replays, 7);
  EXPECT_EQ(recaptures, 1);
}

// FastReplay: after one replay through the ops, the graph replays from the step's host data alone, with
// the same results; it declines (false) before that and when the batch's shapes moved on, and rejects ids
// outside the embedding.
TEST_F(CudaGraphTest, FastReplayEqualsEager) {
  const uint64_t seed = NextSeed();
  SCOPED_TRACE(StrCat("seed ", seed));
  Rng rng(seed);
  MakeWeights(rng);
  std::vector<int32_t> n_past = {5, 30, 60};
  std::vector<std::vector<int32_t>> tables = {{0, 1, 2, 3, 4, 5, 6, 7},
                                              {9, 8, 10, 11, 12, 13, 14, 15},
                                              {31, 30, 29, 28, 27, 26, 25, 24}};
  const int rows = 3;
  Buffers eager = MakeBuffers(rows, 32), graphed = MakeBuffers(rows, 32);
  History(n_past, tables, rng, eager, graphed);
  std::vector<int32_t> gather(rows);
  std::iota(gather.begin(), gather.end(), 0);
  std::reverse(gather.begin(), gather.end());  // what Step gathers

  std::unique_ptr<CudaGraph> graph;
  Replays n;
  for (int step = 0; step < 8; ++step) {
    SCOPED_TRACE(StrCat("step ", step));
    StepBatch batch;
    for (size_t s = 0; s < n_past.size(); ++s) batch.AddSeq(1, n_past[s], tables[s]);
    std::vector<int32_t> ids(rows);
    for (int32_t& id : ids) id = rng.Int(0, MiniLayer::kVocab - 1);
    if (graph != nullptr) {
      const std::span<const int32_t> wrong[] = {ids};
      EXPECT_FALSE(cuda_->FastReplay(*graph, batch, wrong));  // one argument list short
    }
    StepBoth(batch, ids, gather, eager, graphed, graph, n);
    if (HasFatalFailure()) return;
    EXPECT_EQ(Download(eager.x.t), Download(graphed.x.t));
    for (int32_t& p : n_past) p += 1;
  }
  // Step 0 captures, step 1 walks the ops once, the other six replay fast, across step 4 where the longest
  // context reaches 65 and its row takes more splits.
  EXPECT_EQ(n.captures, 1);
  EXPECT_EQ(n.walked, 1);
  EXPECT_EQ(n.fast, 6);

  // An id outside the embedding is an error, not a launch; eager work goes on.
  StepBatch batch;
  for (size_t s = 0; s < n_past.size(); ++s) batch.AddSeq(1, n_past[s], tables[s]);
  const std::vector<int32_t> bad = {1, MiniLayer::kVocab, 2};
  const std::span<const int32_t> args[] = {bad, gather};
  EXPECT_THROW(cuda_->FastReplay(*graph, batch, args), Error);
  // So is a page outside the KV pool (32 pages).
  StepBatch bad_pages;
  std::vector<std::vector<int32_t>> bad_tables = tables;
  bad_tables[1][0] = 999;
  for (size_t s = 0; s < n_past.size(); ++s) bad_pages.AddSeq(1, n_past[s], bad_tables[s]);
  const std::vector<int32_t> ok_ids = {1, 2, 3};
  const std::span<const int32_t> args2[] = {ok_ids, gather};
  EXPECT_THROW(cuda_->FastReplay(*graph, bad_pages, args2), Error);
  const std::vector<int32_t> ids = {3, 4, 5};
  Step(batch, ids, eager);
  for (float f : Download(eager.logits.t)) ASSERT_TRUE(std::isfinite(f));
}

// A decode whose longest context crosses kAttnClusterSmallCtx: where the cluster size changes with it
// (sm_90+, the default), the step's graph declines to replay and is captured again, and every step keeps the
// eager step's bits.
TEST_F(CudaGraphTest, ClusterSizeFollowsTheContext) {
  const uint64_t seed = NextSeed();
  SCOPED_TRACE(StrCat("seed ", seed));
  Rng rng(seed);
  MakeWeights(rng);
  std::vector<int32_t> n_past = {cuda::kAttnClusterSmallCtx - 4, 40};
  std::vector<std::vector<int32_t>> tables(2);
  for (int32_t p = 0; p < 20; ++p) tables[0].push_back(19 - p);
  for (int32_t p = 20; p < 24; ++p) tables[1].push_back(p);
  const int rows = 2;
  Buffers eager = MakeBuffers(rows, 32), graphed = MakeBuffers(rows, 32);
  History(n_past, tables, rng, eager, graphed);
  std::vector<int32_t> gather(rows);
  std::iota(gather.begin(), gather.end(), 0);
  std::reverse(gather.begin(), gather.end());

  int cc_major = 0;
#ifndef HYMT_CUDA_EMU
  cudaDeviceProp prop;
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
  cc_major = prop.major;
#endif
  const int before = cuda::AttnClusterSplits(2, cc_major, cuda::kAttnClusterSmallCtx);
  const int after = cuda::AttnClusterSplits(2, cc_major, cuda::kAttnClusterSmallCtx + 1);
  std::unique_ptr<CudaGraph> graph;
  Replays n;
  for (int step = 0; step < 8; ++step) {  // longest context 253 ... 260
    SCOPED_TRACE(StrCat("step ", step));
    StepBatch batch;
    for (size_t s = 0; s < n_past.size(); ++s) batch.AddSeq(1, n_past[s], tables[s]);
    std::vector<int32_t> ids(rows);
    for (int32_t& id : ids) id = rng.Int(0, MiniLayer::kVocab - 1);
    StepBoth(batch, ids, gather, eager, graphed, graph, n);
    if (HasFatalFailure()) return;
    for (int32_t& p : n_past) p += 1;
  }
  // Step 0 captures; where the size changes, the step reaching 257 positions (step 4) captures again.
  EXPECT_EQ(n.captures, before == after ? 1 : 2) << "cluster sizes " << before << " then " << after;
  EXPECT_EQ(n.fast, before == after ? 6 : 4);
}

// A fed replay (FastReplay with a LaunchGreedy ticket): the Embed ids come on the device from the argmax
// of earlier logits that the host has not read yet, with the same results as an eager step given those
// ids; a row whose logits hold a NaN feeds row 0 of the embedding (the host reads kNonFiniteLogits and
// discards such a step).
TEST_F(CudaGraphTest, FedReplayEqualsEager) {
  const uint64_t seed = NextSeed();
  SCOPED_TRACE(StrCat("seed ", seed));
  Rng rng(seed);
  MakeWeights(rng);
  std::vector<int32_t> n_past = {5, 40};  // the longest context stays at 41-46
  std::vector<std::vector<int32_t>> tables = {{0, 1, 2, 3, 4, 5, 6, 7}, {9, 8, 10, 11, 12, 13, 14, 15}};
  const int rows = 2;
  Buffers eager = MakeBuffers(rows, 32), graphed = MakeBuffers(rows, 32);
  History(n_past, tables, rng, eager, graphed);
  std::vector<int32_t> gather(rows);
  std::iota(gather.begin(), gather.end(), 0);
  std::reverse(gather.begin(), gather.end());
  auto batch_now = [&] {
    StepBatch b;
    for (size_t s = 0; s < n_past.size(); ++s) b.AddSeq(1, n_past[s], tables[s]);
    return b;
  };
  auto expect_same = [&] {
    const std::vector<float> a = Download(eager.logits.t), b = Download(graphed.logits.t);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      ASSERT_TRUE(std::isfinite(a[i])) << i;
      ASSERT_EQ(a[i], b[i]) << "logit " << i;
    }
  };
  // Step 0 captures, step 1 walks the ops once: the graph may then replay fast.
  std::unique_ptr<CudaGraph> graph;
  for (int step = 0; step < 2; ++step) {
    const std::vector<int32_t> ids = {rng.Int(0, MiniLayer::kVocab - 1), rng.Int(0, MiniLayer::kVocab - 1)};
    const StepBatch batch = batch_now();
    Step(batch, ids, eager);
    if (step == 0) {
      cuda_->BeginCapture();
      Step(batch, ids, graphed);
      graph = cuda_->EndCapture();
    } else {
      cuda_->BeginReplay(*graph);
      Step(batch, ids, graphed);
      ASSERT_TRUE(cuda_->EndReplay());
    }
    expect_same();
    for (int32_t& p : n_past) p += 1;
  }
  // Selector logits whose argmax is the wanted id of each row (NaN everywhere in row 1 at step 4).
  DevTensor select = NewTensor(rows, MiniLayer::kVocab);
  const std::vector<int32_t> placeholder = {0, 0};
  for (int step = 2; step < 6; ++step) {
    SCOPED_TRACE(StrCat("step ", step));
    std::vector<int32_t> want = {rng.Int(0, MiniLayer::kVocab - 1), rng.Int(0, MiniLayer::kVocab - 1)};
    std::vector<float> v(static_cast<size_t>(rows * MiniLayer::kVocab), 0.0f);
    for (int r = 0; r < rows; ++r) v[static_cast<size_t>(r * MiniLayer::kVocab + want[r])] = 1.0f;
    const bool nan_row = step == 4;
    if (nan_row) std::fill(v.begin() + MiniLayer::kVocab, v.end(), std::nanf(""));
    Upload(v, select.t);
    const int ticket = cuda_->LaunchGreedy(select.t, MiniLayer::kVocab);
    const StepBatch batch = batch_now();
    const std::span<const int32_t> args[] = {placeholder, gather};
    ASSERT_TRUE(cuda_->FastReplay(*graph, batch, args, ticket));
    for (int32_t& p : n_past) p += 1;
    const int second = cuda_->LaunchGreedy(select.t, MiniLayer::kVocab);  // two tickets outstanding
    std::vector<int32_t> got(rows), again(rows);
    cuda_->CollectGreedy(ticket, got);
    cuda_->CollectGreedy(second, again);
    EXPECT_EQ(got, again);
    if (nan_row) {
      EXPECT_EQ(got[1], kNonFiniteLogits);
      want[1] = 0;  // what the embedding read
    }
    EXPECT_EQ(got[0], want[0]);
    if (!nan_row) {
      EXPECT_EQ(got, want);
    }
    Step(batch, want, eager);
    expect_same();
  }
  // Misuse is an error: a ticket collected twice, a third launch while two are outstanding.
  std::vector<int32_t> out(rows);
  const int a = cuda_->LaunchGreedy(select.t, MiniLayer::kVocab);
  cuda_->CollectGreedy(a, out);
  EXPECT_THROW(cuda_->CollectGreedy(a, out), Error);
  const int b = cuda_->LaunchGreedy(select.t, MiniLayer::kVocab);
  const int c = cuda_->LaunchGreedy(select.t, MiniLayer::kVocab);
  EXPECT_THROW(cuda_->LaunchGreedy(select.t, MiniLayer::kVocab), Error);
  cuda_->CollectGreedy(b, out);
  cuda_->CollectGreedy(c, out);
}

TEST_F(CudaGraphTest, MisuseInsideCaptureSpoilsTheGraph) {
  Rng rng(NextSeed());
  MakeWeights(rng);
  Buffers b = MakeBuffers(1, 8);
  StepBatch batch;
  const std::vector<int32_t> table = {0, 1};
  batch.AddSeq(1, 0, table);
  cuda_->BeginCapture();
  ops_->BeginStep(batch);
  EXPECT_THROW(ops_->Sync(), Error);
  EXPECT_THROW(cuda_->EndCapture(), Error);
  // Eager work goes on.
  const std::vector<int32_t> ids = {7};
  Step(batch, ids, b);
  for (float f : Download(b.logits.t)) ASSERT_TRUE(std::isfinite(f));
}

}  // namespace
}  // namespace hymt
