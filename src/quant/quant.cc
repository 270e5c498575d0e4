#include "quant/quant.h"

#include <vector>

#include "quant/quant_internal.h"

namespace hymt {

void DequantizeRow(DType t, const void* src, float* dst, int64_t n) {
  HYMT_CHECK(n % GetDTypeInfo(t).block_size == 0, n, " values of ", DTypeName(t));
  switch (t) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
    case DType::kF8E4M3: quant_internal::DequantizeFloat(t, src, dst, n); return;
    default: break;
  }
  Fail(ErrorCode::kUnsupported, "dequantising ", DTypeName(t), " is not implemented");
}

bool CanQuantizeTo(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }

void QuantizeRow(DType t, const float* src, void* dst, int64_t n) {
  HYMT_CHECK(n % GetDTypeInfo(t).block_size == 0, n, " values to ", DTypeName(t));
  if (t == DType::kF32 || t == DType::kF16 || t == DType::kBF16) {
    quant_internal::QuantizeFloat(t, src, dst, n);
    return;
  }
  Fail(ErrorCode::kUnsupported, "quantising to ", DTypeName(t), " is not implemented");
}

double DotRef(DType t, const void* row, const float* x, int64_t n) {
  std::vector<float> w(static_cast<size_t>(n));
  DequantizeRow(t, row, w.data(), n);
  double acc = 0;
  for (int64_t i = 0; i < n; ++i) acc += static_cast<double>(w[i]) * static_cast<double>(x[i]);
  return acc;
}

}  // namespace hymt
