// Element and block types of tensors, shared by file formats, quantisation and kernels.
//
// Stored type (on disk, in a weight) and compute type (activations) are separate concepts: a weight
// may be Q4_K while activations are f32 on the CPU or bf16 on a GPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace hymt {

enum class DType : uint8_t {
  kF32,
  kF16,
  kBF16,
  kF8E4M3,  // float8 e4m3fn, with a per-tensor scale kept beside the weight
  kI32,
  // ggml block formats (bit layouts as defined by GGUF/ggml; see quant/).
  kQ4_0,
  kQ4_1,
  kQ5_0,
  kQ5_1,
  kQ8_0,
  kQ4_K,
  kQ5_K,
  kQ6_K,
  kQ8_K,  // activations for the K-quant dot products; never stored in files by hymt
  // Plain integer types, for index and metadata tensors that checkpoints may carry.
  kI8,
  kI16,
  kI64,
  kU8,
};

struct DTypeInfo {
  const char* name;   // "f32", "q4_k", ...
  int block_size;     // elements per block (1 for plain types)
  int block_bytes;    // bytes per block
  bool quantized;     // a block format
};

const DTypeInfo& GetDTypeInfo(DType t);
inline const char* DTypeName(DType t) { return GetDTypeInfo(t).name; }

// Parses a name as printed by DTypeName ("bf16", "q8_0", ...). Returns false when unknown.
bool ParseDType(std::string_view name, DType* out);

// Bytes of `n` elements; n must be a multiple of the block size (checked by callers that read files).
inline size_t DTypeBytes(DType t, int64_t n) {
  const DTypeInfo& info = GetDTypeInfo(t);
  return static_cast<size_t>(n / info.block_size) * static_cast<size_t>(info.block_bytes);
}

}  // namespace hymt
