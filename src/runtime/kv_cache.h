// The paged KV cache: fixed-size pages shared by all sequences, a page table per sequence.
//
// The pools themselves (one K and one V pool per layer, on that layer's device) are allocated once at
// start-up from the memory plan; PagePool only hands out page numbers, which are the same for every
// layer. Nothing grows while serving.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "model/config.h"
#include "ops/ops.h"

namespace hymt {

class PagePool {
 public:
  PagePool(int64_t n_pages, int page_size);

  int page_size() const { return page_size_; }
  int64_t total() const { return n_pages_; }
  int64_t free() const { return static_cast<int64_t>(free_.size()); }
  int64_t used() const { return n_pages_ - free(); }
  // Pages needed to hold n tokens.
  int64_t PagesFor(int64_t n_tokens) const { return (n_tokens + page_size_ - 1) / page_size_; }

  // Grows `table` so it covers n_tokens positions. Returns false (and changes nothing) when there are
  // not enough free pages.
  bool Reserve(std::vector<int32_t>& table, int64_t n_tokens);
  // Returns all pages of `table` to the pool and clears it.
  void Release(std::vector<int32_t>& table);

 private:
  int64_t n_pages_;
  int page_size_;
  std::vector<int32_t> free_;  // a stack: recently freed pages are reused first (warm in cache)
};

// The K and V pools of every layer, allocated on each layer's device.
class KvCache {
 public:
  // devices[i] holds layer i's pools; kv_dtype is the stored type of keys and values.
  KvCache(const ModelConfig& config, int64_t n_pages, int page_size, DType kv_dtype,
          const std::vector<Ops*>& layer_ops);

  // Bytes of one page for one layer, K and V together.
  static size_t PageBytesPerLayer(const ModelConfig& config, int page_size, DType kv_dtype);

  const KvLayerView& layer(int i) const { return views_[i]; }
  PagePool& pages() { return pool_; }
  const PagePool& pages() const { return pool_; }
  DType dtype() const { return dtype_; }
  // Total bytes held by the pools.
  size_t bytes() const { return bytes_; }

 private:
  PagePool pool_;
  DType dtype_;
  size_t bytes_ = 0;
  std::vector<std::unique_ptr<Buffer>> buffers_;
  std::vector<KvLayerView> views_;
};

}  // namespace hymt
