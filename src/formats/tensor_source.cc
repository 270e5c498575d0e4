#include "formats/tensor_source.h"

#include <utility>

#include "core/status.h"

namespace hymt {

int64_t ElementCount(const TensorInfo& info) {
  int64_t n = 1;
  for (int64_t d : info.shape) n *= d;  // readers reject shapes whose product overflows
  return n;
}

const TensorInfo& TensorSource::Get(std::string_view name) const {
  const TensorInfo* info = Find(name);
  if (info == nullptr) {
    const std::vector<TensorInfo>& all = tensors();
    Fail(ErrorCode::kNotFound, "tensor '", name, "' not found (", all.size(), " tensors",
         all.empty() ? std::string() : StrCat(", e.g. in ", all.front().file), ")");
  }
  return *info;
}

bool TensorTable::Add(TensorInfo info) {
  auto [it, inserted] = index_.emplace(info.name, tensors_.size());
  if (!inserted) return false;
  tensors_.push_back(std::move(info));
  return true;
}

const TensorInfo* TensorTable::Find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace hymt
