// Writing .safetensors files (used by `hymt make-random` to produce checkpoints of real shapes).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace hymt {

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::kF32;          // f32, f16, bf16, f8_e4m3, i32
  std::vector<int64_t> shape;         // outermost first
  // Fills `bytes` bytes of the tensor's data at `dst` (called once, in file order).
  std::function<void(uint8_t* dst, size_t bytes)> fill;
};

// Writes one file (via a temporary file renamed at the end). Throws Error(kInternal) on I/O failure.
void WriteSafetensors(const std::string& path, const std::vector<SafetensorsEntry>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Safetensors dtype string ("BF16", "F32", ...) of a DType; throws Error(kUnsupported) for others.
const char* SafetensorsDTypeName(DType t);

}  // namespace hymt
