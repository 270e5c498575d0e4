// Internals shared by the GGUF reader, writer and value code. Not part of the public API.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "formats/gguf.h"

namespace hymt::gguf_internal {

// One ggml tensor type: its id in files, ggml's name, and the DType hymt reads it as.
struct GgmlType {
  uint32_t id;
  const char* name;
  bool readable;  // hymt runs it; dtype is valid
  DType dtype;
};

// The entry for a ggml type id, or nullptr when the id is unknown.
const GgmlType* FindGgmlType(uint32_t id);

inline constexpr uint32_t kMaxValueType = static_cast<uint32_t>(GgufType::kF64);

// Bytes of one element of a fixed-size type; for a string or an array, the least it can occupy
// (its length or type-and-count prefix), which bounds counts read from a file.
size_t MinValueBytes(GgufType t);
inline bool IsFixedSize(GgufType t) {
  return t != GgufType::kString && t != GgufType::kArray;
}
inline bool IsPowerOfTwo(uint64_t v) {
  return v != 0 && (v & (v - 1)) == 0;
}
// Requires alignment > 0 and v + alignment not to overflow.
inline uint64_t AlignUp(uint64_t v, uint64_t alignment) {
  return (v + alignment - 1) / alignment * alignment;
}
// Sign- or zero-extends a fixed-size little-endian element at p to GgufValue's 64-bit scalar bits.
uint64_t LoadScalarBits(GgufType t, const uint8_t* p);

}  // namespace hymt::gguf_internal
