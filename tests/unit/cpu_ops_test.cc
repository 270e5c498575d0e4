// The CPU backend against the scalar reference backend (CreateReferenceOps, double accumulation), and
// each ISA's kernels against the generic ones, on fresh random data of odd sizes, strided and
// misaligned views, every weight type and every KV cache type.
//
// Tolerances are derived, not tuned. u = 2^-24 is the unit roundoff of f32. The standard bound for a
// floating-point sum of n terms in any order is |fl(sum) - sum| <= gamma_n * sum|terms|, gamma_n =
// n u / (1 - n u) ~ n u; a product adds one rounding (none with FMA). Each test states which n it uses.
#include "backends/cpu/cpu_ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <random>
#include <vector>

#include "backends/cpu/dispatch.h"  // the kernel tables (kGemvMaxTokens, the activation encoders)
#include "backends/cpu/packed.h"
#include "core/half.h"
#include "core/status.h"
#include "core/strings.h"
#include "ops/ops.h"
#include "quant/blocks.h"
#include "quant/quant.h"
#include "quant/quant_dot.h"

namespace hymt {
namespace {

constexpr double kU = 1.0 / (1 << 24);  // unit roundoff of f32

using cpu::Isa;

std::vector<Isa> AllIsas() {
  return {Isa::kGeneric, Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512};
}

// ---- test data -------------------------------------------------------------------------------------------

// A host tensor with a padded row stride and a start that is deliberately not 64-byte aligned.
struct HostTensor {
  std::vector<float> storage;
  Tensor t;
  HostTensor(int64_t rows, int64_t cols, int64_t pad = 3, int64_t offset = 1) {
    storage.assign(static_cast<size_t>(rows * (cols + pad) + offset + 16), 0.0f);
    t.data = storage.data() + offset;
    t.dtype = DType::kF32;
    t.rows = rows;
    t.cols = cols;
    t.stride = cols + pad;
  }
  float* Row(int64_t r) { return t.As<float>() + r * t.stride; }
  float& At(int64_t r, int64_t c) { return Row(r)[c]; }
};

void FillNormal(HostTensor& h, std::mt19937& rng, float sigma = 1.0f, float mean = 0.0f) {
  std::normal_distribution<float> dist(mean, sigma);
  for (int64_t r = 0; r < h.t.rows; ++r)
    for (int64_t c = 0; c < h.t.cols; ++c) h.At(r, c) = dist(rng);
}

HostTensor Copy(const HostTensor& h) {
  HostTensor c(h.t.rows, h.t.cols, h.t.stride - h.t.cols);
  for (int64_t r = 0; r < h.t.rows; ++r)
    std::memcpy(c.Row(r), static_cast<const float*>(h.t.data) + r * h.t.stride, h.t.cols * sizeof(float));
  return c;
}

void SetF16(uint8_t* p, float v) {
  uint16_t h = F32ToF16(v);
  std::memcpy(p, &h, 2);
}
float GetF16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return F16ToF32(h);
}

// Random weight bytes of any stored type: random quants and sane block scales for the block formats,
// random non-NaN codes for f8, normal values for the plain floats.
std::vector<uint8_t> RandomWeightBytes(DType t, int64_t rows, int64_t cols, std::mt19937& rng) {
  const size_t row_bytes = DTypeBytes(t, cols);
  std::vector<uint8_t> bytes(row_bytes * rows + 64);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  if (t == DType::kF32 || t == DType::kF16 || t == DType::kBF16) {
    std::vector<float> row(cols);
    for (int64_t r = 0; r < rows; ++r) {
      for (float& v : row) v = normal(rng) * 0.1f;
      QuantizeRow(t, row.data(), bytes.data() + r * row_bytes, cols);
    }
    return bytes;
  }
  for (auto& b : bytes) b = static_cast<uint8_t>(byte(rng));
  if (t == DType::kF8E4M3) {
    for (auto& b : bytes)
      if ((b & 0x7f) == 0x7f) b = 0x3f;  // no NaN codes
    return bytes;
  }
  const int block_bytes = GetDTypeInfo(t).block_bytes;
  const int64_t n_blocks = static_cast<int64_t>(row_bytes * rows) / block_bytes;
  for (int64_t b = 0; b < n_blocks; ++b) {
    uint8_t* p = bytes.data() + b * block_bytes;
    switch (t) {
      case DType::kQ4_0:
      case DType::kQ5_0:
      case DType::kQ8_0:
        SetF16(p, unit(rng) * 0.02f);
        break;
      case DType::kQ4_1:
      case DType::kQ5_1:
        SetF16(p, unit(rng) * 0.02f);
        SetF16(p + 2, unit(rng) * 0.1f);
        break;
      case DType::kQ4_K:
      case DType::kQ5_K:
        SetF16(p + offsetof(BlockQ4_K, d), std::fabs(unit(rng)) * 0.002f);
        SetF16(p + offsetof(BlockQ4_K, dmin), std::fabs(unit(rng)) * 0.002f);
        break;
      case DType::kQ6_K:
        SetF16(p + offsetof(BlockQ6_K, d), unit(rng) * 0.0005f);
        break;
      default:
        ADD_FAILURE() << "no random blocks for " << DTypeName(t);
    }
  }
  return bytes;
}

// ---- a scalar dequantiser for the block formats, written from the definitions in quant/blocks.h ----
// An independent reading of the formats (TestDequantizerMatchesQuant checks it against quant/'s
// DequantizeRow, the project's definition, which the tests otherwise use for values). It also gives
// mag[i] = |scale part| + |offset-or-min part| of each weight's formula, which bounds the size of the
// terms a kernel adds for it: a kernel's f32 error is relative to that, not to |w|.

void TestDequantize(DType t, const uint8_t* src, int64_t n, float* out, float* mag) {
  auto put = [&](int64_t i, double a, double b) {
    out[i] = static_cast<float>(a + b);
    mag[i] = static_cast<float>(std::fabs(a) + std::fabs(b));
  };
  switch (t) {
    case DType::kQ4_0:
    case DType::kQ4_1:
    case DType::kQ5_0:
    case DType::kQ5_1: {
      const int bb = GetDTypeInfo(t).block_bytes;
      for (int64_t b = 0; b < n / 32; ++b) {
        const uint8_t* p = src + b * bb;
        const double d = GetF16(p);
        const bool has_min = t == DType::kQ4_1 || t == DType::kQ5_1;
        const bool five = t == DType::kQ5_0 || t == DType::kQ5_1;
        const double m = has_min ? GetF16(p + 2) : 0.0;
        const uint8_t* qh_p = p + (has_min ? 4 : 2);
        uint32_t qh = 0;
        if (five) std::memcpy(&qh, qh_p, 4);
        const uint8_t* qs = five ? qh_p + 4 : qh_p;
        for (int j = 0; j < 32; ++j) {
          int q = j < 16 ? (qs[j] & 0xf) : (qs[j - 16] >> 4);
          if (five) q |= ((qh >> j) & 1) << 4;
          if (has_min) {
            put(b * 32 + j, d * q, m);
          } else {
            const int offset = five ? 16 : 8;
            put(b * 32 + j, d * q, -d * offset);
          }
        }
      }
      return;
    }
    case DType::kQ8_0: {
      for (int64_t b = 0; b < n / 32; ++b) {
        const auto* blk = reinterpret_cast<const BlockQ8_0*>(src) + b;
        const double d = F16ToF32(blk->d);
        for (int j = 0; j < 32; ++j) put(b * 32 + j, d * blk->qs[j], 0.0);
      }
      return;
    }
    case DType::kQ4_K:
    case DType::kQ5_K: {
      const bool five = t == DType::kQ5_K;
      const int bb = GetDTypeInfo(t).block_bytes;
      for (int64_t b = 0; b < n / 256; ++b) {
        const uint8_t* p = src + b * bb;
        const double d = GetF16(p), dmin = GetF16(p + 2);
        const uint8_t* sc = p + 4;
        const uint8_t* qh = five ? p + 16 : nullptr;
        const uint8_t* qs = five ? p + 48 : p + 16;
        for (int s = 0; s < 8; ++s) {
          int scale, min;
          if (s < 4) {
            scale = sc[s] & 63;
            min = sc[s + 4] & 63;
          } else {
            scale = (sc[s + 4] & 0xf) | ((sc[s - 4] >> 6) << 4);
            min = (sc[s + 4] >> 4) | ((sc[s] >> 6) << 4);
          }
          for (int l = 0; l < 32; ++l) {
            const uint8_t byte = qs[32 * (s / 2) + l];
            int q = (s % 2 == 0) ? (byte & 0xf) : (byte >> 4);
            if (five) q |= ((qh[l] >> s) & 1) << 4;
            put(b * 256 + 32 * s + l, d * scale * q, -dmin * min);
          }
        }
      }
      return;
    }
    case DType::kQ6_K: {
      for (int64_t b = 0; b < n / 256; ++b) {
        const auto* blk = reinterpret_cast<const BlockQ6_K*>(src) + b;
        const double d = F16ToF32(blk->d);
        for (int e = 0; e < 256; ++e) {
          const int h = e / 128, c = (e % 128) / 32, l = e % 32;
          const uint8_t ql = blk->ql[64 * h + l + (c % 2) * 32];
          const int low = c < 2 ? (ql & 0xf) : (ql >> 4);
          const int high = (blk->qh[32 * h + l] >> (2 * c)) & 3;
          const int q = low | (high << 4);
          const double s = blk->scales[e / 16];
          put(b * 256 + e, d * s * q, -d * s * 32);
        }
      }
      return;
    }
    default:
      FAIL() << "TestDequantize: " << DTypeName(t);
  }
}

bool IsBlockFormat(DType t) {
  return GetDTypeInfo(t).quantized;
}

// A weight for the CPU backend (in its stored type) and the same weight as f32 for the reference.
struct TestWeight {
  std::vector<uint8_t> bytes;
  std::vector<float> dequant;    // [rows, cols] as quant/ decodes it (scale not applied)
  std::vector<float> magnitude;  // see TestDequantize (plain floats: |w|)
  Weight w;
};

TestWeight MakeWeight(DType t, int64_t rows, int64_t cols, std::mt19937& rng, float scale = 1.0f) {
  TestWeight tw;
  tw.bytes = RandomWeightBytes(t, rows, cols, rng);
  tw.dequant.resize(rows * cols);
  tw.magnitude.resize(rows * cols);
  const size_t row_bytes = DTypeBytes(t, cols);
  for (int64_t r = 0; r < rows; ++r) {
    float* out = tw.dequant.data() + r * cols;
    DequantizeRow(t, tw.bytes.data() + r * row_bytes, out, cols);
    if (IsBlockFormat(t)) {
      std::vector<float> mine(cols);
      TestDequantize(t, tw.bytes.data() + r * row_bytes, cols, mine.data(), tw.magnitude.data() + r * cols);
    } else {
      for (int64_t c = 0; c < cols; ++c) tw.magnitude[r * cols + c] = std::fabs(out[c]);
    }
  }
  tw.w.name = "test";
  tw.w.dtype = t;
  tw.w.rows = rows;
  tw.w.cols = cols;
  tw.w.data = tw.bytes.data();
  tw.w.scale = scale;
  return tw;
}

// ---- MatMul -----------------------------------------------------------------------------------------------

// The activations of the integer path are defined by quant/ (quant_dot.h): QuantizeRow to Q8_0 for the
// simple formats, Q8_K for the K formats (the kernels reproduce it bit for bit:
// ActivationsMatchQuantizeRow). x_hat = the decoded codes; |x - x_hat| <= d/2 plus an ulp of x/d
// (< d * 2^-17, |x/d| <= 127), d the block's scale.
DType ActivationType(DType w) {
  return w == DType::kQ4_K || w == DType::kQ5_K || w == DType::kQ6_K ? DType::kQ8_K : DType::kQ8_0;
}
struct QuantizedAct {
  std::vector<uint8_t> bytes;  // QuantizeRow's output
  std::vector<double> x_hat;
  std::vector<double> half_step;
};
QuantizedAct QuantizeAct(DType w, const float* x, int64_t k) {
  const DType a = ActivationType(w);
  QuantizedAct q;
  q.bytes.resize(DTypeBytes(a, k));
  QuantizeRow(a, x, q.bytes.data(), k);
  std::vector<float> decoded(k);
  DequantizeRow(a, q.bytes.data(), decoded.data(), k);
  q.x_hat.assign(decoded.begin(), decoded.end());
  q.half_step.resize(k);
  const int block = GetDTypeInfo(a).block_size;
  for (int64_t b = 0; b < k / block; ++b) {
    const double d = a == DType::kQ8_K ? reinterpret_cast<const BlockQ8_K*>(q.bytes.data())[b].d
                                       : F16ToF32(reinterpret_cast<const BlockQ8_0*>(q.bytes.data())[b].d);
    for (int i = 0; i < block; ++i) q.half_step[b * block + i] = d * (0.5 + 1.0 / (1 << 17));
  }
  return q;
}

struct MatMulCase {
  DType dtype;
  int64_t tokens, n, k;
  float scale;
};

// Error bounds of out[t, n]. Up to kGemvMaxTokens tokens the block formats take the integer GEMV path
// (activations quantised to int8); with more, the GEMM path dequantises the weights to f32.
//  Against the reference (exact sum over x and the dequantised weights; the reference itself is within
//  u |out| of it, added by the caller):
//   plain floats: gamma_{k + 4} * sum_k |x w| * |scale| - k products and adds, the scale multiply, and
//     for f8 the reference's own rounding of w * scale.
//   block formats, integer path: in addition the activation error sum_k |w_k| * half_step_k (see
//     QuantizeAct).
//   block formats, GEMM path: in addition the kernels' f32 dequantisation, q * (d * sc) + bias, two
//     roundings: 2u * sum_k mag_k |x_k| (mag from TestDequantize).
//  Against the exact sum over the quantised activations x_hat (integer path; a much tighter check):
//   the kernels' integer block sums are exact, so only the f32 work remains - one rounding per scale
//   product and per accumulation step over the blocks and lanes (nb + 16 steps), relative to
//   sum_k mag_k |x_hat_k| (mag bounds every term a kernel adds), plus the test's own rounding of each
//   dequantised weight to f32 (u relative).
double FloatBound(const TestWeight& tw, const float* x, int64_t n, int64_t k) {
  const float* w = tw.dequant.data() + n * k;
  double sum_abs = 0;
  for (int64_t i = 0; i < k; ++i) sum_abs += std::fabs(static_cast<double>(x[i]) * w[i]);
  return (k + 4) * kU * sum_abs * std::fabs(tw.w.scale) + 1e-30;
}
double DequantBound(const TestWeight& tw, const float* x, int64_t n, int64_t k) {
  const float* mag = tw.magnitude.data() + n * k;
  double big = 0;
  for (int64_t i = 0; i < k; ++i) big += mag[i] * std::fabs(x[i]);
  return 2 * kU * big * std::fabs(tw.w.scale);
}
double ActQuantBound(const TestWeight& tw, const QuantizedAct& a, int64_t n, int64_t k) {
  const float* w = tw.dequant.data() + n * k;
  double act = 0;
  for (int64_t i = 0; i < k; ++i) act += std::fabs(w[i]) * a.half_step[i];
  return act * std::fabs(tw.w.scale);
}
double IntegerPathBound(const TestWeight& tw, DType t, const QuantizedAct& a, int64_t n, int64_t k) {
  const float* mag = tw.magnitude.data() + n * k;
  double big = 0;
  for (int64_t i = 0; i < k; ++i) big += mag[i] * std::fabs(a.x_hat[i]);
  const int64_t nb = k / GetDTypeInfo(t).block_size;
  return (4.0 * (nb + 16) + 2) * kU * big * std::fabs(tw.w.scale) + 1e-30;
}

// prepare: multiply by ops.PrepareWeight(w) (a packed layout where the ISA has one: then the integer
// path serves every token count). Returns whether the weight was packed.
bool CheckMatMul(Ops& ops, const MatMulCase& c, std::mt19937& rng, bool prepare = false) {
  SCOPED_TRACE(testing::Message() << DTypeName(c.dtype) << " tokens " << c.tokens << " n " << c.n << " k "
                                  << c.k << (prepare ? " prepared" : ""));
  TestWeight tw = MakeWeight(c.dtype, c.n, c.k, rng, c.scale);
  HostTensor x(c.tokens, c.k, 5, 3);
  FillNormal(x, rng, 1.0f, 0.3f);  // a mean, so the offset and min terms (times sum x) do not cancel out
  HostTensor out(c.tokens, c.n, 7, 1), ref(c.tokens, c.n);
  const Weight w = prepare ? ops.PrepareWeight(tw.w) : tw.w;
  const bool packed = w.prepared != nullptr;
  ops.MatMul(x.t, w, out.t);
  CreateReferenceOps()->MatMul(x.t, tw.w, ref.t);
  const bool blocks = IsBlockFormat(c.dtype);
  const bool integer_path = blocks && (packed || c.tokens <= cpu::kGemvMaxTokens);
  DType dot_activation;
  const bool has_dot = integer_path && DotActivationType(c.dtype, &dot_activation);
  int failures = 0;
  auto check = [&](double got, double want, double bound, const char* oracle, int64_t t, int64_t n) {
    if (std::fabs(got - want) <= bound) return;
    ++failures;
    ADD_FAILURE() << "out[" << t << "," << n << "] = " << got << ", " << oracle << " " << want << ", error "
                  << std::fabs(got - want) << " > bound " << bound;
  };
  for (int64_t t = 0; t < c.tokens && failures < 5; ++t) {
    QuantizedAct qa;
    if (integer_path) qa = QuantizeAct(c.dtype, x.Row(t), c.k);
    for (int64_t n = 0; n < c.n && failures < 5; ++n) {
      double bound = FloatBound(tw, x.Row(t), n, c.k) + kU * std::fabs(ref.At(t, n));
      if (integer_path) bound += ActQuantBound(tw, qa, n, c.k);
      if (blocks && !integer_path) bound += DequantBound(tw, x.Row(t), n, c.k);
      check(out.At(t, n), ref.At(t, n), bound, "reference", t, n);
      if (integer_path) {
        double exact = 0;
        for (int64_t i = 0; i < c.k; ++i) exact += static_cast<double>(tw.dequant[n * c.k + i]) * qa.x_hat[i];
        const double bound = IntegerPathBound(tw, c.dtype, qa, n, c.k);
        check(out.At(t, n), exact * tw.w.scale, bound, "sum w x_hat", t, n);
        if (has_dot) {  // quant/'s integer reference, over the same activation bytes
          const double dot =
              Dot(c.dtype, tw.bytes.data() + n * DTypeBytes(c.dtype, c.k), qa.bytes.data(), c.k);
          check(out.At(t, n), dot * tw.w.scale, bound, "quant Dot", t, n);
        }
      }
    }
  }
  // The padding between rows is untouched.
  for (int64_t t = 0; t < c.tokens; ++t)
    for (int64_t p = c.n; p < out.t.stride; ++p) EXPECT_EQ(out.Row(t)[p], 0.0f) << "wrote past row " << t;
  return packed;
}

class CpuOpsTest : public testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (!cpu::IsaSupported(GetParam())) GTEST_SKIP() << "this CPU cannot run " << cpu::IsaName(GetParam());
    ops_ = CreateCpuOps(GetParam());
  }
  std::unique_ptr<Ops> ops_;
  std::mt19937 rng_{1234};
};

std::string IsaParamName(const testing::TestParamInfo<Isa>& info) {
  return cpu::IsaName(info.param);
}

TEST_P(CpuOpsTest, MatMulPlainFloats) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kF8E4M3}) {
    for (int64_t tokens : {1, 2, 3, 4, 5, 17, 64}) {
      for (int64_t n : {1, 3, 17, 64, 130}) {
        for (int64_t k : {1, 7, 16, 33, 100, 261}) {
          const float scale = t == DType::kF8E4M3 ? 0.0123f : 1.0f;
          CheckMatMul(*ops_, {t, tokens, n, k, scale}, rng_);
        }
      }
    }
  }
}

TEST_P(CpuOpsTest, MatMulGemmLargerThanOneBlock) {
  // Several packed blocks in both directions (kNc = kKc = 256) and a multi-threaded split.
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) CheckMatMul(*ops_, {t, 29, 600, 700, 1.0f}, rng_);
}

TEST_P(CpuOpsTest, MatMulBlockFormats) {
  for (DType t : {DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ8_0}) {
    for (int64_t tokens : {1, 2, 3, 4, 5, 17, 64}) {
      for (int64_t n : {1, 3, 17, 64, 130}) {
        for (int64_t k : {32, 96, 288}) CheckMatMul(*ops_, {t, tokens, n, k, 1.0f}, rng_);
      }
    }
  }
  for (DType t : {DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    for (int64_t tokens : {1, 2, 3, 4, 5, 17, 64}) {
      for (int64_t n : {1, 3, 17, 64, 130}) {
        for (int64_t k : {256, 768}) CheckMatMul(*ops_, {t, tokens, n, k, 1.0f}, rng_);
      }
    }
  }
}

// Weights PrepareWeight packs (q8_0, q4_k, q6_k on AVX2 and AVX-512: backends/cpu/packed.h) against the same
// bounds as the integer GEMV, for every token count (decode and prefill run the same kernel): odd row
// counts (a partial group of 16), several groups per thread, and token counts around the tiles (AVX-512 8 and
// 6, AVX2 4).
TEST_P(CpuOpsTest, MatMulPackedWeights) {
  const bool packs = GetParam() != Isa::kGeneric;
  for (DType t : {DType::kQ8_0, DType::kQ4_K, DType::kQ6_K}) {
    const std::vector<int64_t> ks =
        t == DType::kQ8_0 ? std::vector<int64_t>{32, 96, 288} : std::vector<int64_t>{256, 768};
    for (int64_t tokens : {1, 2, 3, 4, 5, 7, 17, 64}) {
      for (int64_t n : {1, 3, 17, 64, 130}) {
        for (int64_t k : ks) EXPECT_EQ(packs, CheckMatMul(*ops_, {t, tokens, n, k, 1.0f}, rng_, true));
      }
    }
  }
  // A weight scale and a larger, multi-threaded shape.
  EXPECT_EQ(packs, CheckMatMul(*ops_, {DType::kQ8_0, 9, 200, 1024, 0.37f}, rng_, true));
  EXPECT_EQ(packs, CheckMatMul(*ops_, {DType::kQ4_K, 33, 272, 1024, 1.0f}, rng_, true));
  EXPECT_EQ(packs, CheckMatMul(*ops_, {DType::kQ6_K, 2, 272, 1024, 1.0f}, rng_, true));
  // Prefill runs its token tiles over blocks of groups (PackedBlockGroups): at K = 4096 several blocks a
  // thread, a partial last one, and (q8_0, q6_k) pairs of groups beside a single one.
  EXPECT_EQ(packs, CheckMatMul(*ops_, {DType::kQ4_K, 21, 400, 4096, 1.0f}, rng_, true));
  EXPECT_EQ(packs, CheckMatMul(*ops_, {DType::kQ8_0, 13, 208, 4096, 1.0f}, rng_, true));
  EXPECT_EQ(packs, CheckMatMul(*ops_, {DType::kQ6_K, 13, 208, 4096, 1.0f}, rng_, true));
}

// MatMul(x, w) with a kernel switch on (set(1)) and off (set(0)), then back to its default (set(-1)): the
// outputs must be the same bits.
void ExpectSameBitsEitherWay(Ops& ops, void (*set)(int), const HostTensor& x, const Weight& w) {
  HostTensor on(x.t.rows, w.rows), off(x.t.rows, w.rows);
  set(1);
  ops.MatMul(x.t, w, on.t);
  set(0);
  ops.MatMul(x.t, w, off.t);
  set(-1);
  EXPECT_EQ(0, std::memcmp(on.storage.data(), off.storage.data(), on.storage.size() * 4));
}

// The AVX-512 packed GEMM runs q6_k row groups in pairs or one at a time by CPU vendor
// (PairQ6KRowGroups): both give each group's sums in the same order, so the same bits, within the bound.
TEST_P(CpuOpsTest, MatMulQ6KPairedOrSingleGroups) {
  const bool packs = GetParam() != Isa::kGeneric;
  for (int64_t tokens : {2, 5, 6, 7, 13, 64}) {
    for (int64_t n : {16, 48, 130}) {
      SCOPED_TRACE(testing::Message() << "tokens " << tokens << " rows " << n);
      TestWeight tw = MakeWeight(DType::kQ6_K, n, 512, rng_, 1.0f);
      const Weight w = ops_->PrepareWeight(tw.w);
      HostTensor x(tokens, 512, 3, 1);
      FillNormal(x, rng_, 1.0f, 0.3f);
      ExpectSameBitsEitherWay(*ops_, &cpu::SetPairQ6KRowGroups, x, w);
    }
  }
  for (int on : {1, 0}) {
    cpu::SetPairQ6KRowGroups(on);
    EXPECT_EQ(packs, CheckMatMul(*ops_, {DType::kQ6_K, 13, 208, 4096, 1.0f}, rng_, true)) << "pairs " << on;
    EXPECT_EQ(packs, CheckMatMul(*ops_, {DType::kQ6_K, 64, 130, 768, 1.0f}, rng_, true)) << "pairs " << on;
  }
  cpu::SetPairQ6KRowGroups(-1);
}

// The packed GEMMs' later token tiles read a copy of each q4_k / q6_k row group (AVX2: half group) that
// their first tile expanded (kernel_table.h, ExpandPackedGroups): the same sums in the same order, so the
// same bits as unpacking the group again per tile. Token counts around the tiles (8 for AVX-512, 4 for AVX2)
// and the thresholds (AVX-512 and avxvnni: q6_k above 8, q4_k above 16; avx2: q6_k above 4, q4_k above 32),
// odd row counts (a partial last group), K over one and several super-blocks and a block of several groups.
TEST_P(CpuOpsTest, MatMulExpandedGroupsSameBits) {
  const bool packs = GetParam() != Isa::kGeneric;
  struct ResetPairs {
    ~ResetPairs() { cpu::SetPairQ6KRowGroups(-1); }
  } reset_pairs;
  // q6_k both ways: one group at a time, and two at once (the AVX-512 pair kernel, on where
  // PairQ6KRowGroups picks it).
  for (int q6k_pairs : {0, 1}) {
    cpu::SetPairQ6KRowGroups(q6k_pairs);
    for (DType t : {DType::kQ4_K, DType::kQ6_K}) {
      if (q6k_pairs == 1 && t != DType::kQ6_K) continue;
      for (int64_t k : {256, 2048}) {
        for (int64_t tokens : {5, 8, 9, 16, 17, 33, 64}) {
          for (int64_t n : {16, 130}) {
            SCOPED_TRACE(testing::Message() << DTypeName(t) << " k " << k << " tokens " << tokens << " rows "
                                            << n << " q6_k pairs " << q6k_pairs);
            TestWeight tw = MakeWeight(t, n, k, rng_, 1.0f);
            const Weight w = ops_->PrepareWeight(tw.w);
            HostTensor x(tokens, k, 3, 1);
            FillNormal(x, rng_, 1.0f, 0.3f);
            ExpectSameBitsEitherWay(*ops_, &cpu::SetExpandPackedGroups, x, w);
            if (HasFailure()) return;
          }
        }
      }
    }
    for (int on : {1, 0}) {
      cpu::SetExpandPackedGroups(on);
      for (DType t : {DType::kQ4_K, DType::kQ6_K})
        EXPECT_EQ(packs, CheckMatMul(*ops_, {t, 40, 130, 1024, 1.0f}, rng_, true))
            << DTypeName(t) << " " << on << " q6_k pairs " << q6k_pairs;
    }
    cpu::SetExpandPackedGroups(-1);
  }
}

// MatMulGroup and MatMulSwiGlu quantise x once for products whose packed weights share an activation
// format (q4_k with q6_k; q8_0 with q8_0), and fall back to one MatMul a weight otherwise: either way every
// output is the separate MatMul's, bit for bit (and SwiGlu's of them). Decode (1 token), a GEMV batch and
// prefill tiles; odd row counts; a group that mixes q8_0 with q4_k, and one holding an unpacked weight.
TEST_P(CpuOpsTest, MatMulGroupsSameAsSeparateProducts) {
  const int64_t k = 512;
  const std::vector<std::vector<DType>> groups = {{DType::kQ4_K, DType::kQ4_K, DType::kQ6_K},
                                                  {DType::kQ8_0, DType::kQ8_0, DType::kQ8_0},
                                                  {DType::kQ8_0, DType::kQ4_K, DType::kQ6_K},
                                                  {DType::kQ4_K, DType::kBF16, DType::kQ4_K}};
  const int64_t rows[] = {96, 17, 33};
  for (const auto& types : groups) {
    for (int64_t tokens : {1, 3, 9, 40}) {
      SCOPED_TRACE(testing::Message() << DTypeName(types[0]) << "/" << DTypeName(types[1]) << "/"
                                      << DTypeName(types[2]) << " tokens " << tokens);
      std::vector<TestWeight> tws;
      std::vector<Weight> ws;
      for (size_t i = 0; i < types.size(); ++i) tws.push_back(MakeWeight(types[i], rows[i], k, rng_, 1.0f));
      for (auto& tw : tws) ws.push_back(ops_->PrepareWeight(tw.w));
      HostTensor x(tokens, k, 5, 3);
      FillNormal(x, rng_, 1.0f, 0.3f);
      std::vector<HostTensor> sep, grp;
      for (size_t i = 0; i < ws.size(); ++i) {
        sep.emplace_back(tokens, rows[i], 7, 1);
        grp.emplace_back(tokens, rows[i], 7, 1);
        ops_->MatMul(x.t, ws[i], sep[i].t);
      }
      const Weight* wp[] = {&ws[0], &ws[1], &ws[2]};
      const Tensor outs[] = {grp[0].t, grp[1].t, grp[2].t};
      ops_->MatMulGroup(x.t, wp, outs);
      for (size_t i = 0; i < ws.size(); ++i)
        EXPECT_EQ(0, std::memcmp(sep[i].storage.data(), grp[i].storage.data(), sep[i].storage.size() * 4))
            << "product " << i;
      // The SwiGLU pair: the first weight as gate, a fresh weight of the third one's type as up.
      const Weight& gate = ws[0];
      TestWeight up_tw = MakeWeight(types[2], rows[0], k, rng_, 1.0f);
      const Weight up = ops_->PrepareWeight(up_tw.w);
      HostTensor g(tokens, rows[0]), u(tokens, rows[0]), want(tokens, rows[0]), got(tokens, rows[0]),
          scratch(tokens, rows[0]);
      ops_->MatMul(x.t, gate, g.t);
      ops_->MatMul(x.t, up, u.t);
      ops_->SwiGlu(g.t, u.t, want.t);
      ops_->MatMulSwiGlu(x.t, gate, up, scratch.t, got.t);
      for (int64_t t = 0; t < tokens; ++t)
        EXPECT_EQ(0, std::memcmp(want.Row(t), got.Row(t), rows[0] * sizeof(float))) << "SwiGLU row " << t;
    }
  }
}

TEST_P(CpuOpsTest, MatMulSameAsGenericKernels) {
  // Both sides are within a derived bound of the exact result, so they are within the sum of the two
  // bounds of each other. GEMV path (3 tokens): every ISA quantises activations identically, so for the
  // block formats only the f32 work differs (the integer-path bound of CheckMatMul); for plain floats
  // gamma_{k + 4} sum|x w|. GEMM path (9 tokens): gamma_{k + 4} sum|x w| plus, for the block formats,
  // the dequantisation's 2u sum mag |x|.
  auto generic = CreateCpuOps(Isa::kGeneric);
  for (DType t : {DType::kF32, DType::kBF16, DType::kF8E4M3, DType::kQ4_0, DType::kQ5_1, DType::kQ8_0,
                  DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    for (int64_t tokens : {3, 9}) {
      SCOPED_TRACE(testing::Message() << DTypeName(t) << " tokens " << tokens);
      const int64_t n = 70, k = 512;
      TestWeight tw = MakeWeight(t, n, k, rng_);
      HostTensor x(tokens, k);
      FillNormal(x, rng_, 1.0f, 0.3f);
      HostTensor a(tokens, n), b(tokens, n);
      ops_->MatMul(x.t, tw.w, a.t);
      generic->MatMul(x.t, tw.w, b.t);
      const bool integer_path = IsBlockFormat(t) && tokens <= cpu::kGemvMaxTokens;
      for (int64_t r = 0; r < tokens; ++r) {
        QuantizedAct qa;
        if (integer_path) qa = QuantizeAct(t, x.Row(r), k);
        for (int64_t c = 0; c < n; ++c) {
          double big = 0, sum_abs = 0;
          for (int64_t i = 0; i < k; ++i) {
            const double xi = integer_path ? std::fabs(qa.x_hat[i]) : std::fabs(x.At(r, i));
            big += tw.magnitude[c * k + i] * xi;
            sum_abs += std::fabs(static_cast<double>(tw.dequant[c * k + i]) * x.At(r, i));
          }
          double bound;
          if (integer_path) {
            const int64_t nb = k / GetDTypeInfo(t).block_size;
            bound = 2 * 4.0 * (nb + 16) * kU * big;
          } else {
            bound = 2 * ((k + 4) * kU * sum_abs + (IsBlockFormat(t) ? 2 * kU * big : 0.0));
          }
          ASSERT_LE(std::fabs(static_cast<double>(a.At(r, c)) - b.At(r, c)), bound + 1e-30) << r << "," << c;
        }
      }
    }
  }
}

// ---- norms, rope, element-wise ---------------------------------------------------------------------------

TEST_P(CpuOpsTest, RmsNorm) {
  auto ref_ops = CreateReferenceOps();
  for (DType wt : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (int64_t rows : {1, 3, 17}) {
      for (int64_t cols : {1, 7, 64, 4099}) {
        SCOPED_TRACE(testing::Message() << DTypeName(wt) << " " << rows << "x" << cols);
        HostTensor x(rows, cols);
        FillNormal(x, rng_, 3.0f);
        TestWeight w = MakeWeight(wt, 1, cols, rng_);
        HostTensor out(rows, cols, 1, 2), ref(rows, cols);
        ops_->RmsNorm(x.t, w.w, 1e-5f, out.t);
        ref_ops->RmsNorm(x.t, w.w, 1e-5f, ref.t);
        // sum x^2 of positive terms in f32: relative error gamma_cols; the inverse square root adds a
        // few roundings and halves the relative error; rounding x * inv and the weight multiply add
        // one each: |err| <= (cols / 2 + 8) u |out|, doubled for the reference's own rounding.
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < cols; ++c)
            ASSERT_NEAR(out.At(r, c), ref.At(r, c), (cols + 16) * kU * std::fabs(ref.At(r, c)) + 1e-30)
                << r << "," << c;
        // In place (x and out alias).
        HostTensor inplace = Copy(x);
        ops_->RmsNorm(inplace.t, w.w, 1e-5f, inplace.t);
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < cols; ++c) ASSERT_EQ(inplace.At(r, c), out.At(r, c));
      }
    }
  }
}

StepBatch MixedBatch(int page_size, std::vector<std::pair<int, int>> seqs /* (n_rows, n_past) */,
                     int32_t* n_pages_total, std::mt19937& rng) {
  StepBatch batch;
  batch.page_size = page_size;
  int32_t total = 0;
  std::vector<std::vector<int32_t>> tables;
  for (auto [rows, past] : seqs) {
    const int32_t pages = (rows + past + page_size - 1) / page_size;
    tables.emplace_back(pages);
    total += pages;
  }
  // Pages scattered over the pool, with a spare at the end.
  std::vector<int32_t> ids(total + 1);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  int32_t next = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    for (auto& p : tables[i]) p = ids[next++];
    batch.AddSeq(seqs[i].first, seqs[i].second, tables[i]);
  }
  *n_pages_total = total + 1;
  return batch;
}

TEST_P(CpuOpsTest, RopeNorm) {
  auto ref_ops = CreateReferenceOps();
  for (int head_dim : {8, 36, 128}) {
    for (bool with_norm : {false, true}) {
      SCOPED_TRACE(testing::Message() << "head_dim " << head_dim << (with_norm ? " +norm" : ""));
      const int n_heads = 3, half = head_dim / 2;
      int32_t n_pages = 0;
      StepBatch batch = MixedBatch(16, {{5, 0}, {1, 4000}, {3, 77}}, &n_pages, rng_);
      ops_->BeginStep(batch);
      ref_ops->BeginStep(batch);
      std::vector<float> freq(half);
      for (int i = 0; i < half; ++i) freq[i] = static_cast<float>(std::pow(11158839.9, -2.0 * i / head_dim));
      Weight inv_freq;
      inv_freq.rows = 1;
      inv_freq.cols = half;
      inv_freq.data = freq.data();
      TestWeight norm = MakeWeight(DType::kBF16, 1, head_dim, rng_);
      HostTensor x(batch.n_rows(), n_heads * head_dim);
      FillNormal(x, rng_);
      HostTensor a = Copy(x), b = Copy(x);
      ops_->RopeNorm(a.t, n_heads, head_dim, inv_freq, with_norm ? &norm.w : nullptr, 1e-5f);
      ref_ops->RopeNorm(b.t, n_heads, head_dim, inv_freq, with_norm ? &norm.w : nullptr, 1e-5f);
      // The cos/sin tables are computed as the reference does (identical f32 values). The rotation
      // x1 c - x2 s in f32 costs two roundings: 2u (|x1| + |x2|) (|c|, |s| <= 1). With the norm, that
      // error is scaled by inv * |w| (inv <= 1/rms of the rotated head, recomputed here), plus the
      // RMSNorm error of the RmsNorm test over head_dim values.
      for (int64_t r = 0; r < batch.n_rows(); ++r) {
        for (int h = 0; h < n_heads; ++h) {
          const float* xin = x.Row(r) + h * head_dim;
          const float* ref = b.Row(r) + h * head_dim;
          const float* got = a.Row(r) + h * head_dim;
          double ss = 0;
          for (int j = 0; j < head_dim; ++j)
            ss += static_cast<double>(xin[j]) * xin[j];  // rotation keeps the norm
          const double inv = with_norm ? 1.0 / std::sqrt(ss / head_dim + 1e-5) : 1.0;
          for (int j = 0; j < head_dim; ++j) {
            const int p = j < half ? j + half : j - half;
            const double w = with_norm ? std::fabs(norm.dequant[j]) : 1.0;
            const double rot = 2 * kU * (std::fabs(xin[j]) + std::fabs(xin[p])) * inv * w;
            const double bound = rot + (head_dim + 16) * kU * std::fabs(ref[j]) + 1e-30;
            ASSERT_NEAR(got[j], ref[j], bound) << "row " << r << " head " << h << " dim " << j;
          }
        }
      }
    }
  }
}

TEST_P(CpuOpsTest, SwiGluAddGather) {
  auto ref_ops = CreateReferenceOps();
  for (int64_t rows : {1, 3, 17}) {
    for (int64_t cols : {1, 15, 64, 1000, 5000}) {
      SCOPED_TRACE(testing::Message() << rows << "x" << cols);
      HostTensor g(rows, cols), u(rows, cols);
      FillNormal(g, rng_, 6.0f);
      FillNormal(u, rng_);
      HostTensor out(rows, cols, 2, 0), ref(rows, cols);
      ops_->SwiGlu(g.t, u.t, out.t);
      ref_ops->SwiGlu(g.t, u.t, ref.t);
      // exp to a few ulp (simd.h's polynomial, < 8u), then 1 + e, the products and the division: one
      // rounding each: |err| <= 16 u |out|.
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c)
          ASSERT_NEAR(out.At(r, c), ref.At(r, c), 16 * kU * std::fabs(ref.At(r, c)) + 1e-37) << r << "," << c;
      // out aliasing gate.
      HostTensor alias = Copy(g);
      ops_->SwiGlu(alias.t, u.t, alias.t);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) ASSERT_EQ(alias.At(r, c), out.At(r, c));

      // Add is one f32 rounding in both backends: exact equality.
      HostTensor a = Copy(g), b = Copy(g);
      ops_->Add(a.t, u.t);
      ref_ops->Add(b.t, u.t);
      for (int64_t r = 0; r < rows; ++r) ASSERT_EQ(0, std::memcmp(a.Row(r), b.Row(r), cols * sizeof(float)));

      std::vector<int32_t> idx = {static_cast<int32_t>(rows - 1), 0, static_cast<int32_t>(rows / 2)};
      HostTensor ga(3, cols), gb(3, cols);
      ops_->GatherRows(g.t, idx, ga.t);
      ref_ops->GatherRows(g.t, idx, gb.t);
      for (int r = 0; r < 3; ++r) ASSERT_EQ(0, std::memcmp(ga.Row(r), gb.Row(r), cols * sizeof(float)));
    }
  }
}

TEST_P(CpuOpsTest, EmbedAndCopies) {
  auto ref_ops = CreateReferenceOps();
  const std::vector<int32_t> ids = {5, 0, 41, 5, 17};
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kF8E4M3, DType::kQ8_0, DType::kQ4_K}) {
    SCOPED_TRACE(DTypeName(t));
    const int64_t cols = IsBlockFormat(t) ? 512 : 77;
    TestWeight tw = MakeWeight(t, 42, cols, rng_, t == DType::kF8E4M3 ? 0.37f : 1.0f);
    HostTensor out(5, cols), ref(5, cols);
    ops_->Embed(tw.w, ids, out.t);
    ref_ops->Embed(tw.w, ids, ref.t);
    // Conversion and the scale multiply are exact or one identical rounding (block formats: both use
    // quant/'s DequantizeRow): equal bits.
    for (int i = 0; i < 5; ++i) ASSERT_EQ(0, std::memcmp(out.Row(i), ref.Row(i), cols * sizeof(float))) << i;
  }
  // Copies of strided tensors.
  HostTensor x(4, 9);
  FillNormal(x, rng_);
  std::vector<float> host(36), back(36);
  ops_->CopyToHost(x.t, host.data());
  HostTensor y(4, 9, 2, 0);
  ops_->CopyFromHost(host.data(), y.t);
  for (int r = 0; r < 4; ++r) ASSERT_EQ(0, std::memcmp(x.Row(r), y.Row(r), 9 * sizeof(float)));
}

// ---- KV cache and attention -----------------------------------------------------------------------------

// A paged KV pool for one layer, owned.
struct TestKv {
  std::vector<uint8_t> k, v;
  KvLayerView view;
  TestKv(DType t, int n_kv_heads, int head_dim, int page_size, int64_t n_pages) {
    view.dtype = t;
    view.n_kv_heads = n_kv_heads;
    view.head_dim = head_dim;
    view.page_size = page_size;
    view.n_pages = n_pages;
    k.assign(view.PageBytes() * n_pages, 0);
    v.assign(view.PageBytes() * n_pages, 0);
    view.k = k.data();
    view.v = v.data();
  }
};

struct AttentionCase {
  DType kv_dtype;
  int n_kv_heads, group, head_dim, page_size;
};

void CheckAttention(Ops& ops, const AttentionCase& c, std::mt19937& rng) {
  SCOPED_TRACE(testing::Message() << "kv " << DTypeName(c.kv_dtype) << " kv_heads " << c.n_kv_heads
                                  << " group " << c.group << " head_dim " << c.head_dim << " page "
                                  << c.page_size);
  auto ref_ops = CreateReferenceOps();
  const int n_heads = c.n_kv_heads * c.group;
  const int kv_width = c.n_kv_heads * c.head_dim;
  // Sequences: a prompt chunk after nothing, decodes at several depths, a chunk after a long past.
  const std::vector<std::pair<int, int>> seqs = {{6, 0}, {1, 9}, {1, 300}, {4, 37}, {1, 0}};
  int32_t n_pages = 0;
  std::mt19937 rng_batch(rng());
  StepBatch step = MixedBatch(c.page_size, seqs, &n_pages, rng_batch);

  // The past: one earlier step writes positions [0, n_past) of each sequence, with the same pages.
  StepBatch past;
  past.page_size = c.page_size;
  for (const auto& s : step.seqs)
    if (s.n_past > 0)
      past.AddSeq(s.n_past, 0, std::span<const int32_t>(step.pages.data() + s.first_page, s.n_pages));

  TestKv mine(c.kv_dtype, c.n_kv_heads, c.head_dim, c.page_size, n_pages);
  TestKv theirs(c.kv_dtype, c.n_kv_heads, c.head_dim, c.page_size, n_pages);
  for (const StepBatch* b : {&past, &step}) {
    if (b->n_rows() == 0) continue;
    HostTensor k(b->n_rows(), kv_width), v(b->n_rows(), kv_width);
    FillNormal(k, rng, 2.0f);
    FillNormal(v, rng);
    ops.BeginStep(*b);
    ops.KvWrite(k.t, v.t, mine.view);
    ref_ops->BeginStep(*b);
    ref_ops->KvWrite(k.t, v.t, theirs.view);
  }
  // The same encodings (nearest even; for q8_0 quant/'s encoder, reproduced bit for bit): identical bytes.
  ASSERT_EQ(mine.k, theirs.k);
  ASSERT_EQ(mine.v, theirs.v);

  HostTensor q(step.n_rows(), n_heads * c.head_dim);
  FillNormal(q, rng);
  HostTensor out(step.n_rows(), n_heads * c.head_dim, 4, 2), ref(step.n_rows(), n_heads * c.head_dim);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  ops.BeginStep(step);
  ops.Attention(q.t, mine.view, n_heads, scale, out.t);
  ref_ops->BeginStep(step);
  ref_ops->Attention(q.t, theirs.view, n_heads, scale, ref.t);

  // Bound: a score s_j = scale * q.k_j has error D_j <= (head_dim + 2) u scale sum|q k_j| (a dot
  // product plus the scale multiply); the softmax weights p_j then have relative error at most
  // 2 max_j D_j + 8u (exp to a few ulp, the max subtraction) + n u (the running sum over n positions,
  // and its rescaling per page); the output sum_j p_j v_j adds gamma_n relative to sum_j p_j |v_j|
  // <= max_j |v_j|. So |err_d| <= (2 max_j D_j + (2n + 16) u) max_j |v_jd|. Both read the same cache
  // bytes (checked above).
  int failures = 0;
  for (int64_t r = 0; r < step.n_rows() && failures < 5; ++r) {
    const auto& s = step.seqs[step.row_seq[r]];
    const int32_t n = step.positions[r] + 1;
    for (int h = 0; h < n_heads && failures < 5; ++h) {
      const int hk = h / c.group;
      std::vector<float> kr(c.head_dim), vr(c.head_dim);
      double max_d = 0;
      std::vector<double> max_v(c.head_dim, 0.0);
      for (int32_t j = 0; j < n; ++j) {
        const int32_t page = step.pages[s.first_page + j / c.page_size];
        const size_t off =
            page * theirs.view.PageBytes() + (static_cast<size_t>(hk) * c.page_size + j % c.page_size) *
                                                 DTypeBytes(theirs.view.dtype, c.head_dim);
        DequantizeRow(theirs.view.dtype, theirs.k.data() + off, kr.data(), c.head_dim);
        DequantizeRow(theirs.view.dtype, theirs.v.data() + off, vr.data(), c.head_dim);
        double dot_abs = 0;
        for (int d = 0; d < c.head_dim; ++d) {
          dot_abs += std::fabs(static_cast<double>(q.At(r, h * c.head_dim + d)) * kr[d]);
          max_v[d] = std::max(max_v[d], std::fabs(static_cast<double>(vr[d])));
        }
        max_d = std::max(max_d, (c.head_dim + 2) * kU * scale * dot_abs);
      }
      for (int d = 0; d < c.head_dim; ++d) {
        const double bound = (2 * max_d + (2.0 * n + 16) * kU) * max_v[d] + 1e-30;
        const double got = out.At(r, h * c.head_dim + d), want = ref.At(r, h * c.head_dim + d);
        if (!(std::fabs(got - want) <= bound)) {
          ++failures;
          ADD_FAILURE() << "row " << r << " head " << h << " dim " << d << ": " << got << " vs " << want
                        << " (bound " << bound << ")";
        }
      }
    }
  }
}

TEST_P(CpuOpsTest, KvWriteAndAttention) {
  for (DType kv : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0}) {
    for (int group : {1, 2, 4, 8}) {
      for (int head_dim : {32, 40, 128}) {
        if (kv == DType::kQ8_0 && head_dim % 32 != 0) continue;
        for (int page_size : {16, 5}) CheckAttention(*ops_, {kv, 2, group, head_dim, page_size}, rng_);
      }
    }
  }
}

TEST_P(CpuOpsTest, AttentionUnusualGroups) {
  // Groups without their own instantiation (3, 12) and the 7B shape (8 kv heads, group 4, head_dim 128).
  CheckAttention(*ops_, {DType::kF32, 1, 3, 64, 16}, rng_);
  CheckAttention(*ops_, {DType::kF16, 1, 12, 32, 16}, rng_);
  CheckAttention(*ops_, {DType::kBF16, 8, 4, 128, 16}, rng_);
}

INSTANTIATE_TEST_SUITE_P(Isa, CpuOpsTest, testing::ValuesIn(AllIsas()), IsaParamName);

// ---- the test's own dequantiser against quant/, and the kernels' activation encoders ------------------

TEST(CpuOpsTestOracle, TestDequantizerMatchesQuant) {
  std::mt19937 rng(7);
  for (DType t : {DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ8_0, DType::kQ4_K,
                  DType::kQ5_K, DType::kQ6_K}) {
    SCOPED_TRACE(DTypeName(t));
    const int64_t n = 512;
    auto bytes = RandomWeightBytes(t, 1, n, rng);
    std::vector<float> mine(n), mag(n), theirs(n);
    TestDequantize(t, bytes.data(), n, mine.data(), mag.data());
    DequantizeRow(t, bytes.data(), theirs.data(), n);
    // ggml's dequantisers compute in f32 (d * sc, then * q, then - min): a few roundings.
    for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(mine[i], theirs[i], 4 * kU * mag[i]) << i;
  }
}

TEST(CpuOpsTestOracle, ActivationsMatchQuantizeRow) {
  // The integer GEMV's activations are quant/'s Q8_0 / Q8_K encodings, bit for bit, on every ISA:
  // ordinary values, a block of zeros, tiny blocks (below Q8_K's 1e-30 cut-off) and huge ones (the f16
  // scale of Q8_0 saturates and codes clamp at +-127).
  std::mt19937 rng(11);
  const int64_t k = 512;
  std::vector<float> x(k);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t i = 0; i < k; ++i) x[i] = normal(rng);
  for (int i = 0; i < 32; ++i) x[32 + i] = 0.0f;
  for (int i = 0; i < 32; ++i) x[64 + i] = normal(rng) * 1e-33f;
  for (int i = 0; i < 32; ++i) x[96 + i] = normal(rng) * 3e7f;
  for (int i = 0; i < 256; ++i) x[256 + i] = normal(rng) * 1e-32f;  // a whole Q8_K block below the cut-off
  for (Isa isa : AllIsas()) {
    if (!cpu::IsaSupported(isa)) continue;
    const cpu::KernelTable& kt = cpu::GetKernels(isa);
    for (DType w : {DType::kQ4_0, DType::kQ8_0, DType::kQ4_K, DType::kQ6_K}) {
      SCOPED_TRACE(testing::Message() << cpu::IsaName(isa) << " " << DTypeName(w));
      const DType a = ActivationType(w);
      std::vector<uint8_t> theirs(DTypeBytes(a, k)), mine(kt.quant_act_row_bytes(w, k));
      QuantizeRow(a, x.data(), theirs.data(), k);
      kt.quantize_act_row(w, x.data(), k, mine.data());
      ASSERT_GE(mine.size(), theirs.size());
      ASSERT_EQ(0, std::memcmp(mine.data(), theirs.data(), theirs.size()));
      // The side arrays the packed kernels read: -128 * sum(qs) per 32 (simple formats); the sums of 32
      // consecutive codes and -32 * the sums of 16 per 256 (K formats).
      if (a == DType::kQ8_0) {
        const cpu::Q8ActRow row = cpu::ViewQ8ActRow(mine.data(), k);
        for (int64_t b = 0; b < k / 32; ++b) {
          int sum = 0;
          for (int i = 0; i < 32; ++i) sum += row.blocks[b].qs[i];
          ASSERT_EQ(row.c[b], -128 * sum) << "block " << b;
        }
      } else {
        const cpu::Q8KActRow row = cpu::ViewQ8KActRow(mine.data(), k);
        for (int64_t b = 0; b < k / 256; ++b) {
          for (int j = 0; j < 8; ++j) {
            int sum = 0;
            for (int i = 0; i < 32; ++i) sum += row.blocks[b].qs[32 * j + i];
            ASSERT_EQ(row.bsum32[8 * b + j], sum) << "block " << b << " sub-block " << j;
          }
          for (int j = 0; j < 16; ++j) {
            int sum = 0;
            for (int i = 0; i < 16; ++i) sum += row.blocks[b].qs[16 * j + i];
            ASSERT_EQ(row.off16[16 * b + j], -32 * sum) << "block " << b << " sub-block of 16 " << j;
          }
        }
      }
    }
  }
}

// ---- the per-ISA objects keep to their own namespace
// --------------------------------------------------------

// Every kernel file is compiled three times with different -m flags. An inline function with external
// linkage defined in such an object (a std:: template, a helper from a shared header) would be merged by
// the linker with the other ISAs' copies, and the AVX-512 one could end up called on any CPU; a static
// initializer would run AVX code at start-up. So each ISA object may define symbols in its own namespace
// hymt::cpu::<isa> only, and no initialisers (checked with nm; skipped where the objects or nm are absent).
// The planner counts cpu::CpuOpsScratchBytes for the CPU backend's buffers: every ISA's quantised
// activation row fits its per-token bound, and the per-thread bound holds the expanded groups of either
// format at every width up to k_max (MatMulPacked allocates ExpandScratchBytes).
TEST(CpuIsaObjects, ScratchBoundsHoldTheirBuffers) {
  for (int64_t k : {256, 2048, 4096, 6144, 14336}) {
    const cpu::CpuScratch bound = cpu::CpuOpsScratchBytes(k, 128);
    for (Isa isa : AllIsas()) {
      if (!cpu::IsaSupported(isa)) continue;
      const cpu::KernelTable& kt = cpu::GetKernels(isa);
      for (DType w : {DType::kQ8_0, DType::kQ4_K, DType::kQ6_K})
        EXPECT_LE(kt.quant_act_row_bytes(w, k) + 128 * sizeof(float), bound.per_token)
            << cpu::IsaName(isa) << " " << DTypeName(w) << " k " << k;
    }
    for (DType w : {DType::kQ4_K, DType::kQ6_K}) {
      for (int64_t kk = 256; kk <= k; kk += 256) {
        const size_t group = cpu::PackedGroupBytes(w, kk);
        const size_t groups = group >= cpu::kPackedBlockBytes ? 1 : cpu::kPackedBlockBytes / group;
        ASSERT_GE(cpu::ExpandScratchBytes(w, kk), groups * cpu::ExpandedGroupBytes(w, kk) + 64);
        ASSERT_LE(cpu::kGemmScratchBytes + cpu::ExpandScratchBytes(w, kk), bound.per_thread)
            << DTypeName(w) << " k " << kk << " under k_max " << k;
      }
    }
  }
}

TEST(CpuIsaObjects, DefineOnlyTheirOwnNamespace) {
  namespace fs = std::filesystem;
  int checked = 0;
  for (const char* isa : {"generic", "avx2", "avxvnni", "avx512"}) {
    const fs::path dir = fs::path(HYMT_BINARY_DIR) / "CMakeFiles" / (std::string("hymt_cpu_") + isa + ".dir");
    if (!fs::is_directory(dir)) continue;
    for (const auto& entry : fs::recursive_directory_iterator(dir)) {
      if (entry.path().extension() != ".o") continue;
      const std::string cmd = "nm -C --defined-only '" + entry.path().string() + "' 2>/dev/null";
      FILE* pipe = popen(cmd.c_str(), "r");
      if (pipe == nullptr) GTEST_SKIP() << "cannot run nm";
      char line[4096];
      int symbols = 0;
      while (std::fgets(line, sizeof line, pipe) != nullptr) {
        std::string l(line);
        if (l.size() < 20) continue;
        EXPECT_EQ(l.find("_GLOBAL__sub_I"), std::string::npos) << "static initialiser in " << entry.path();
        // Local symbols (lower-case kinds) never meet other objects; global, weak and unique ones do.
        const char kind = l[17];
        const bool external = (kind >= 'A' && kind <= 'Z' && kind != 'U' && kind != 'A') || kind == 'u';
        if (!external) continue;
        // clang's -fsanitize=function (UBSan) gives every function the type info of its signature
        // ("typeinfo for void (float const*, long)"), as weak data: no code, the same bytes in every
        // object, so merging the ISAs' copies is harmless.
        const std::string name = l.substr(19, l.find_last_not_of('\n') - 18);
        if (kind == 'V' && (StartsWith(name, "typeinfo for ") || StartsWith(name, "typeinfo name for ")) &&
            EndsWith(name, ")"))
          continue;
        ++symbols;
        EXPECT_NE(l.find(std::string("hymt::cpu::") + isa + "::"), std::string::npos)
            << entry.path().filename() << " (" << isa << ") defines a symbol outside hymt::cpu::" << isa
            << ": " << l;
      }
      pclose(pipe);
      if (symbols > 0) ++checked;
    }
  }
  if (checked == 0) GTEST_SKIP() << "no ISA objects found under " << HYMT_BINARY_DIR << " (or nm missing)";
}

}  // namespace
}  // namespace hymt
