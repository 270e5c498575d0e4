#include "runtime/kv_cache.h"

#include "core/status.h"

namespace hymt {

PagePool::PagePool(int64_t n_pages, int page_size) : n_pages_(n_pages), page_size_(page_size) {
  HYMT_CHECK(n_pages >= 0 && n_pages < (int64_t{1} << 31) && page_size > 0);
  free_.reserve(static_cast<size_t>(n_pages));
  for (int64_t p = n_pages - 1; p >= 0; --p) free_.push_back(static_cast<int32_t>(p));
}

bool PagePool::Reserve(std::vector<int32_t>& table, int64_t n_tokens) {
  int64_t need = PagesFor(n_tokens) - static_cast<int64_t>(table.size());
  if (need <= 0) return true;
  if (need > free()) return false;
  for (int64_t i = 0; i < need; ++i) {
    table.push_back(free_.back());
    free_.pop_back();
  }
  return true;
}

void PagePool::Release(std::vector<int32_t>& table) {
  for (auto it = table.rbegin(); it != table.rend(); ++it) free_.push_back(*it);
  table.clear();
}

size_t KvCache::PageBytesPerLayer(const ModelConfig& c, int page_size, DType kv_dtype) {
  return 2 * DTypeBytes(kv_dtype, c.head_dim) * static_cast<size_t>(page_size) * static_cast<size_t>(c.n_kv_heads);
}

KvCache::KvCache(const ModelConfig& c, int64_t n_pages, int page_size, DType kv_dtype,
                 const std::vector<Ops*>& layer_ops)
    : pool_(n_pages, page_size), dtype_(kv_dtype) {
  HYMT_CHECK(static_cast<int>(layer_ops.size()) == c.n_layers);
  if (GetDTypeInfo(kv_dtype).quantized && c.head_dim % GetDTypeInfo(kv_dtype).block_size != 0)
    Fail(ErrorCode::kInvalidArgument, "KV type ", DTypeName(kv_dtype), " needs head_dim to be a multiple of ",
         GetDTypeInfo(kv_dtype).block_size, "; this model has ", c.head_dim);
  const size_t half = PageBytesPerLayer(c, page_size, kv_dtype) / 2 * static_cast<size_t>(n_pages);
  for (int i = 0; i < c.n_layers; ++i) {
    auto buf = layer_ops[i]->Allocate(2 * half, StrCat("the KV cache of layer ", i));
    KvLayerView v;
    v.k = buf->data();
    v.v = static_cast<char*>(buf->data()) + half;
    v.dtype = kv_dtype;
    v.n_kv_heads = c.n_kv_heads;
    v.head_dim = c.head_dim;
    v.page_size = page_size;
    v.n_pages = n_pages;
    views_.push_back(v);
    bytes_ += 2 * half;
    buffers_.push_back(std::move(buf));
  }
}

}  // namespace hymt
