// Launchers of the row-wise ops: Embed, SwiGlu, Add, GatherRows (kernels/elementwise.cc, kernels/convert.cc).
#include <cstring>

#include "backends/cpu/cpu_ops_impl.h"
#include "core/status.h"
#include "quant/quant.h"

namespace hymt::cpu {
namespace {

// Element-wise work below this many values stays on the calling thread.
constexpr int64_t kParallelValues = int64_t{1} << 16;

void CheckF32(const Tensor& t, const char* what) {
  HYMT_CHECK(t.dtype == DType::kF32, what, ": the CPU backend computes in f32, got ", DTypeName(t.dtype));
}

void ForRows(int64_t rows, int64_t cols, const std::function<void(int64_t, int64_t, int)>& fn) {
  if (rows > 1 && rows * cols >= kParallelValues) {
    ParallelChunks(DefaultThreadPool(), rows, 1, fn);
  } else {
    fn(0, rows, 0);
  }
}

}  // namespace

void CpuOps::Embed(const Weight& table, std::span<const int32_t> ids, Tensor out) {
  HYMT_CHECK(static_cast<int64_t>(ids.size()) == out.rows && out.cols == table.cols, "embed shapes for ",
             table.name);
  CheckF32(out, "embed");
  for (int64_t i = 0; i < out.rows; ++i)
    if (ids[i] < 0 || ids[i] >= table.rows)
      Fail(ErrorCode::kInvalidArgument, "token id ", ids[i], " outside the embedding ", table.name, " of ",
           table.rows, " rows");
  const size_t row_bytes = DTypeBytes(table.dtype, table.cols);
  const bool plain = table.dtype == DType::kF32 || table.dtype == DType::kF16 ||
                     table.dtype == DType::kBF16 || table.dtype == DType::kF8E4M3;
  for (int64_t i = 0; i < out.rows; ++i) {
    const void* src = static_cast<const uint8_t*>(table.data) + row_bytes * static_cast<size_t>(ids[i]);
    float* dst = out.As<float>() + i * out.stride;
    if (plain) {
      k_.convert_to_f32(table.dtype, src, dst, table.cols, table.scale);
    } else {
      // Block formats: quant/'s row dequantiser (a few rows per step; not worth a kernel of its own).
      DequantizeRow(table.dtype, src, dst, table.cols);
      if (table.scale != 1.0f)
        for (int64_t c = 0; c < table.cols; ++c) dst[c] *= table.scale;
    }
  }
}

void CpuOps::SwiGlu(const Tensor& gate, const Tensor& up, Tensor out) {
  HYMT_CHECK(gate.rows == up.rows && gate.cols == up.cols && out.rows == gate.rows && out.cols == gate.cols,
             "swiglu shapes");
  CheckF32(gate, "swiglu");
  CheckF32(up, "swiglu");
  CheckF32(out, "swiglu");
  ForRows(gate.rows, gate.cols, [&](int64_t begin, int64_t end, int) {
    for (int64_t r = begin; r < end; ++r)
      k_.swiglu(gate.As<const float>() + r * gate.stride, up.As<const float>() + r * up.stride,
                out.As<float>() + r * out.stride, gate.cols);
  });
}

void CpuOps::Add(Tensor x, const Tensor& y) {
  HYMT_CHECK(x.rows == y.rows && x.cols == y.cols, "add shapes [", x.rows, ",", x.cols, "] + [", y.rows, ",",
             y.cols, "]");
  CheckF32(x, "add");
  CheckF32(y, "add");
  ForRows(x.rows, x.cols, [&](int64_t begin, int64_t end, int) {
    for (int64_t r = begin; r < end; ++r)
      k_.add(x.As<float>() + r * x.stride, y.As<const float>() + r * y.stride, x.cols);
  });
}

void CpuOps::GatherRows(const Tensor& x, std::span<const int32_t> rows, Tensor out) {
  HYMT_CHECK(static_cast<int64_t>(rows.size()) == out.rows && out.cols == x.cols && out.dtype == x.dtype,
             "gather shapes");
  const size_t row_bytes = DTypeBytes(x.dtype, x.cols);
  for (int64_t i = 0; i < out.rows; ++i) {
    HYMT_CHECK(rows[i] >= 0 && rows[i] < x.rows, "gather row ", rows[i], " of ", x.rows);
    std::memcpy(static_cast<char*>(out.data) + i * out.RowBytes(),
                static_cast<const char*>(x.data) + rows[i] * x.RowBytes(), row_bytes);
  }
}

}  // namespace hymt::cpu
