// A common read interface over weight files (safetensors, GGUF). formats/ knows no architecture: a
// source is a list of named tensors with a stored type, a shape and a pointer into the file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"

namespace hymt {

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  // Row-major, outermost dimension first, as safetensors and PyTorch write it: a linear weight is
  // [out_features, in_features]. GGUF stores its dims innermost first; the GGUF reader reverses them.
  // Block formats are blocked along the last (innermost) dimension.
  std::vector<int64_t> shape;
  // Points into a memory-mapped file owned by the source; valid while the source lives. Only byte
  // alignment is guaranteed (safetensors does not align its data; GGUF aligns to general.alignment).
  const uint8_t* data = nullptr;
  size_t bytes = 0;  // exactly DTypeBytes(dtype, element count)
  std::string file;  // the file it lives in, for error messages
};

// Returns the number of elements of `info` (1 for a scalar of shape []).
int64_t ElementCount(const TensorInfo& info);

class TensorSource {
 public:
  virtual ~TensorSource() = default;

  // Returns the tensor called `name`, or nullptr when there is none.
  virtual const TensorInfo* Find(std::string_view name) const = 0;
  // All tensors, in file order (shard by shard for a sharded checkpoint).
  virtual const std::vector<TensorInfo>& tensors() const = 0;

  // Returns the tensor called `name`; throws Error(kNotFound) naming it when there is none.
  const TensorInfo& Get(std::string_view name) const;
};

// A name index over a list of tensors, shared by the readers. Keeps insertion order.
class TensorTable {
 public:
  // Appends a tensor; returns false (and adds nothing) when a tensor of that name is already present.
  bool Add(TensorInfo info);
  // Returns the tensor called `name`, or nullptr.
  const TensorInfo* Find(std::string_view name) const;
  const std::vector<TensorInfo>& tensors() const { return tensors_; }

 private:
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> index_;  // name -> position in tensors_
};

}  // namespace hymt
