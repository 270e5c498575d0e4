#include "quant/quant.h"

#include <vector>

#include "quant/quant_internal.h"

namespace hymt {

namespace qi = quant_internal;

void DequantizeRow(DType t, const void* src, float* dst, int64_t n) {
  HYMT_CHECK(n % GetDTypeInfo(t).block_size == 0, n, " values of ", DTypeName(t));
  switch (t) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
    case DType::kF8E4M3:
      qi::DequantizeFloat(t, src, dst, n);
      return;
    case DType::kQ4_0:
      qi::DequantizeQ4_0(static_cast<const BlockQ4_0*>(src), dst, n);
      return;
    case DType::kQ4_1:
      qi::DequantizeQ4_1(static_cast<const BlockQ4_1*>(src), dst, n);
      return;
    case DType::kQ5_0:
      qi::DequantizeQ5_0(static_cast<const BlockQ5_0*>(src), dst, n);
      return;
    case DType::kQ5_1:
      qi::DequantizeQ5_1(static_cast<const BlockQ5_1*>(src), dst, n);
      return;
    case DType::kQ8_0:
      qi::DequantizeQ8_0(static_cast<const BlockQ8_0*>(src), dst, n);
      return;
    case DType::kQ4_K:
      qi::DequantizeQ4_K(static_cast<const BlockQ4_K*>(src), dst, n);
      return;
    case DType::kQ5_K:
      qi::DequantizeQ5_K(static_cast<const BlockQ5_K*>(src), dst, n);
      return;
    case DType::kQ6_K:
      qi::DequantizeQ6_K(static_cast<const BlockQ6_K*>(src), dst, n);
      return;
    case DType::kQ8_K:
      qi::DequantizeQ8_K(static_cast<const BlockQ8_K*>(src), dst, n);
      return;
    case DType::kI32:
      break;
  }
  Fail(ErrorCode::kUnsupported, "dequantising ", DTypeName(t), " is not implemented");
}

bool CanQuantizeTo(DType t) {
  return t != DType::kF8E4M3 && t != DType::kI32;
}

void QuantizeRow(DType t, const float* src, void* dst, int64_t n) {
  HYMT_CHECK(n % GetDTypeInfo(t).block_size == 0, n, " values to ", DTypeName(t));
  switch (t) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
      qi::QuantizeFloat(t, src, dst, n);
      return;
    case DType::kQ4_0:
      qi::QuantizeQ4_0(src, static_cast<BlockQ4_0*>(dst), n);
      return;
    case DType::kQ4_1:
      qi::QuantizeQ4_1(src, static_cast<BlockQ4_1*>(dst), n);
      return;
    case DType::kQ5_0:
      qi::QuantizeQ5_0(src, static_cast<BlockQ5_0*>(dst), n);
      return;
    case DType::kQ5_1:
      qi::QuantizeQ5_1(src, static_cast<BlockQ5_1*>(dst), n);
      return;
    case DType::kQ8_0:
      qi::QuantizeQ8_0(src, static_cast<BlockQ8_0*>(dst), n);
      return;
    case DType::kQ4_K:
      qi::QuantizeQ4_K(src, static_cast<BlockQ4_K*>(dst), n);
      return;
    case DType::kQ5_K:
      qi::QuantizeQ5_K(src, static_cast<BlockQ5_K*>(dst), n);
      return;
    case DType::kQ6_K:
      qi::QuantizeQ6_K(src, static_cast<BlockQ6_K*>(dst), n);
      return;
    case DType::kQ8_K:
      qi::QuantizeQ8_K(src, static_cast<BlockQ8_K*>(dst), n);
      return;
    case DType::kF8E4M3:
    case DType::kI32:
      break;
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
