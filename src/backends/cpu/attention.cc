// KvWrite and Attention launchers (kernels/attention.cc, kernels/convert.cc for the cache encodings).
#include "backends/cpu/cpu_ops_impl.h"
#include "core/status.h"

namespace hymt::cpu {
namespace {

void CheckKv(const KvLayerView& kv, const StepBatch& batch) {
  HYMT_CHECK(kv.dtype == DType::kF32 || kv.dtype == DType::kF16 || kv.dtype == DType::kBF16 ||
                 kv.dtype == DType::kQ8_0,
             "KV cache type ", DTypeName(kv.dtype), " (the CPU backend takes f32, f16, bf16 and q8_0)");
  HYMT_CHECK(kv.dtype != DType::kQ8_0 || kv.head_dim % 32 == 0,
             "a q8_0 KV cache needs head_dim % 32 == 0, got ", kv.head_dim);
  HYMT_CHECK(kv.page_size == batch.page_size, "KV pages of ", kv.page_size, " positions, the step says ",
             batch.page_size);
}

}  // namespace

void CpuOps::KvWrite(const Tensor& k, const Tensor& v, const KvLayerView& kv) {
  CheckKv(kv, batch_);
  const int64_t width = static_cast<int64_t>(kv.n_kv_heads) * kv.head_dim;
  HYMT_CHECK(k.cols == width && v.cols == width && k.rows == batch_.n_rows() && v.rows == k.rows,
             "kv write shapes k[", k.rows, ",", k.cols, "] v[", v.rows, ",", v.cols, "] for ", kv.n_kv_heads,
             " heads of ", kv.head_dim, " and ", batch_.n_rows(), " rows");
  const size_t position_bytes = DTypeBytes(kv.dtype, kv.head_dim);
  const size_t head_bytes = position_bytes * static_cast<size_t>(kv.page_size);
  for (int64_t r = 0; r < k.rows; ++r) {
    const StepBatch::Seq& s = batch_.seqs[batch_.row_seq[r]];
    const int32_t pos = batch_.positions[r];
    HYMT_CHECK(pos / kv.page_size < s.n_pages, "position ", pos, " past the sequence's ", s.n_pages,
               " pages");
    const int32_t page = batch_.pages[s.first_page + pos / kv.page_size];
    HYMT_CHECK(page >= 0 && page < kv.n_pages, "page ", page, " of ", kv.n_pages);
    const size_t offset =
        static_cast<size_t>(page) * kv.PageBytes() + static_cast<size_t>(pos % kv.page_size) * position_bytes;
    for (int hk = 0; hk < kv.n_kv_heads; ++hk) {
      const size_t slot = offset + static_cast<size_t>(hk) * head_bytes;
      k_.convert_from_f32(kv.dtype, k.As<const float>() + r * k.stride + hk * kv.head_dim,
                          static_cast<uint8_t*>(kv.k) + slot, kv.head_dim);
      k_.convert_from_f32(kv.dtype, v.As<const float>() + r * v.stride + hk * kv.head_dim,
                          static_cast<uint8_t*>(kv.v) + slot, kv.head_dim);
    }
  }
}

void CpuOps::Attention(const Tensor& q, const KvLayerView& kv, int n_heads, float scale, Tensor out) {
  CheckKv(kv, batch_);
  HYMT_CHECK(kv.n_kv_heads > 0 && n_heads % kv.n_kv_heads == 0, n_heads, " query heads over ", kv.n_kv_heads,
             " kv heads");
  const int64_t width = static_cast<int64_t>(n_heads) * kv.head_dim;
  HYMT_CHECK(q.cols == width && out.cols == width && q.rows == batch_.n_rows() && out.rows == q.rows,
             "attention shapes q[", q.rows, ",", q.cols, "] out[", out.rows, ",", out.cols, "]");
  HYMT_CHECK(q.dtype == DType::kF32 && out.dtype == DType::kF32);
  const int group = n_heads / kv.n_kv_heads;
  for (int64_t r = 0; r < q.rows; ++r) {
    const StepBatch::Seq& s = batch_.seqs[batch_.row_seq[r]];
    HYMT_CHECK(batch_.positions[r] / kv.page_size < s.n_pages, "position ", batch_.positions[r],
               " past the pages");
    for (int32_t p = 0; p <= batch_.positions[r] / kv.page_size; ++p) {
      const int32_t page = batch_.pages[s.first_page + p];
      HYMT_CHECK(page >= 0 && page < kv.n_pages, "page ", page, " of ", kv.n_pages);
    }
  }

  AttentionTask base;
  base.group = group;
  base.head_dim = kv.head_dim;
  base.scale = scale;
  base.page_size = kv.page_size;
  base.k_pool = static_cast<const uint8_t*>(kv.k);
  base.v_pool = static_cast<const uint8_t*>(kv.v);
  base.page_bytes = kv.PageBytes();
  base.position_bytes = DTypeBytes(kv.dtype, kv.head_dim);
  base.head_bytes = base.position_bytes * static_cast<size_t>(kv.page_size);
  base.kv_dtype = kv.dtype;

  ThreadPool& pool = DefaultThreadPool();
  size_t stride = 0;
  uint8_t* scratch = attn_scratch_.PerThread(
      pool.size(), AttentionScratchFloats(group, kv.head_dim, kv.page_size) * sizeof(float), &stride);
  // One task per (row, kv head); handed out dynamically since a row's cost grows with its position.
  const int64_t n_tasks = q.rows * kv.n_kv_heads;
  ParallelDynamic(pool, n_tasks, 1, [&](int64_t begin, int64_t end, int thread) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t r = i / kv.n_kv_heads;
      const int hk = static_cast<int>(i % kv.n_kv_heads);
      const StepBatch::Seq& s = batch_.seqs[batch_.row_seq[r]];
      AttentionTask t = base;
      t.q = q.As<const float>() + r * q.stride + static_cast<int64_t>(hk) * group * kv.head_dim;
      t.out = out.As<float>() + r * out.stride + static_cast<int64_t>(hk) * group * kv.head_dim;
      t.n_positions = batch_.positions[r] + 1;
      t.pages = batch_.pages.data() + s.first_page;
      t.kv_head = hk;
      k_.attention(t, reinterpret_cast<float*>(scratch + stride * thread));
    }
  });
}

}  // namespace hymt::cpu
