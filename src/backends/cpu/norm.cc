// RmsNorm and RopeNorm launchers (kernels/norm.cc).
#include <cmath>

#include "backends/cpu/cpu_ops_impl.h"
#include "core/status.h"
#include "quant/quant.h"

namespace hymt::cpu {
namespace {

// Rows of this many values or more are normalised in parallel.
constexpr int64_t kParallelValues = int64_t{1} << 15;

bool IsFloatType(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16 || t == DType::kF8E4M3;
}

}  // namespace

const float* CpuOps::VectorAsF32(const Weight& w, ScratchBuffer* buffer) {
  HYMT_CHECK(w.rows == 1, w.name, " should be a vector, has ", w.rows, " rows");
  if (w.dtype == DType::kF32 && w.scale == 1.0f) return static_cast<const float*>(w.data);
  float* out = static_cast<float*>(buffer->Get(static_cast<size_t>(w.cols) * sizeof(float)));
  if (IsFloatType(w.dtype)) {
    k_.convert_to_f32(w.dtype, w.data, out, w.cols, w.scale);
  } else {
    DequantizeRow(w.dtype, w.data, out, w.cols);
    for (int64_t i = 0; i < w.cols; ++i) out[i] *= w.scale;
  }
  return out;
}

void CpuOps::RmsNorm(const Tensor& x, const Weight& w, float eps, Tensor out) {
  HYMT_CHECK(x.cols == w.cols && out.cols == x.cols && out.rows == x.rows, "rmsnorm shapes for ", w.name);
  HYMT_CHECK(x.dtype == DType::kF32 && out.dtype == DType::kF32, "the CPU backend computes in f32");
  const float* wf = VectorAsF32(w, &vector_scratch_);
  auto run = [&](int64_t begin, int64_t end, int) {
    for (int64_t r = begin; r < end; ++r)
      k_.rms_norm_row(x.As<const float>() + r * x.stride, x.cols, wf, eps, out.As<float>() + r * out.stride);
  };
  if (x.rows > 1 && x.rows * x.cols >= kParallelValues) {
    ParallelChunks(DefaultThreadPool(), x.rows, 1, run);
  } else {
    run(0, x.rows, 0);
  }
}

// The angles are float(pos) * inv_freq[j] in f32, as HF computes them; cos and sin in double, rounded
// to f32 (the reference does the same). One table per step serves every layer's q and k.
void CpuOps::RopeTables(const Weight& inv_freq, int half) {
  if (rope_key_ == inv_freq.data && rope_half_ == half) return;
  HYMT_CHECK(inv_freq.cols == half, "inv_freq has ", inv_freq.cols, " values, head_dim/2 is ", half);
  ScratchBuffer freq_buffer;
  const float* freq = VectorAsF32(inv_freq, &freq_buffer);
  const int64_t n_rows = batch_.n_rows();
  float* table =
      static_cast<float*>(rope_tables_.Get(static_cast<size_t>(2 * n_rows * half) * sizeof(float)));
  for (int64_t r = 0; r < n_rows; ++r) {
    const float pos = static_cast<float>(batch_.positions[r]);
    float* c = table + r * half;
    float* s = table + (n_rows + r) * half;
    for (int j = 0; j < half; ++j) {
      const float angle = pos * freq[j];
      c[j] = static_cast<float>(std::cos(static_cast<double>(angle)));
      s[j] = static_cast<float>(std::sin(static_cast<double>(angle)));
    }
  }
  rope_key_ = inv_freq.data;
  rope_half_ = half;
}

void CpuOps::RopeNorm(Tensor x, int n_heads, int head_dim, const Weight& inv_freq, const Weight* norm,
                      float eps) {
  HYMT_CHECK(x.cols == static_cast<int64_t>(n_heads) * head_dim && x.rows == batch_.n_rows(),
             "rope shapes: x[", x.rows, ",", x.cols, "] for ", n_heads, " heads of ", head_dim, " and ",
             batch_.n_rows(), " rows in the step");
  HYMT_CHECK(head_dim % 2 == 0 && x.dtype == DType::kF32);
  const int half = head_dim / 2;
  RopeTables(inv_freq, half);
  const float* norm_w = nullptr;
  if (norm != nullptr) {
    HYMT_CHECK(norm->cols == head_dim, norm->name, " has ", norm->cols, " values for head_dim ", head_dim);
    norm_w = VectorAsF32(*norm, &vector_scratch_);
  }
  const int64_t n_rows = x.rows;
  const float* table = static_cast<const float*>(rope_tables_.Get(0));
  auto run = [&](int64_t begin, int64_t end, int) {
    for (int64_t r = begin; r < end; ++r)
      k_.rope_norm_row(x.As<float>() + r * x.stride, n_heads, head_dim, table + r * half,
                       table + (n_rows + r) * half, norm_w, eps);
  };
  if (x.rows > 1 && x.rows * x.cols >= kParallelValues) {
    ParallelChunks(DefaultThreadPool(), x.rows, 1, run);
  } else {
    run(0, x.rows, 0);
  }
}

}  // namespace hymt::cpu
