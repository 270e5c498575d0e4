#include "core/status.h"
#include "ops/ops.h"

namespace hymt {

std::string DeviceName(DeviceId d) {
  return d.kind == DeviceKind::kCpu ? std::string("cpu") : StrCat("cuda:", d.index);
}

Tensor Tensor::Rows(int64_t begin, int64_t n) const {
  HYMT_CHECK(begin >= 0 && n >= 0 && begin + n <= rows, "rows ", begin, "+", n, " of ", rows);
  Tensor t = *this;
  t.data = static_cast<char*>(data) + static_cast<size_t>(begin) * RowBytes();
  t.rows = n;
  return t;
}

Tensor Tensor::Reshaped(int64_t new_rows, int64_t new_cols) const {
  HYMT_CHECK(stride == cols && new_rows * new_cols == rows * cols, "reshape of a non-contiguous tensor");
  Tensor t = *this;
  t.rows = new_rows;
  t.cols = new_cols;
  t.stride = new_cols;
  return t;
}

std::unique_ptr<Buffer> Ops::AllocateStreamHost(size_t, const std::string& what) {
  Fail(ErrorCode::kUnsupported, name(), " cannot stream layers (", what, ")");
}
size_t Ops::StreamWeightBytes(const Weight& host) {
  Fail(ErrorCode::kUnsupported, name(), " cannot stream layers (", host.name, ")");
}
Weight Ops::StageStreamWeight(const Weight& host, void*) {
  Fail(ErrorCode::kUnsupported, name(), " cannot stream layers (", host.name, ")");
}
uint64_t Ops::UploadAsync(const void*, void*, size_t) {
  Fail(ErrorCode::kUnsupported, name(), " cannot stream layers");
}
void Ops::WaitUpload(uint64_t) {
  Fail(ErrorCode::kUnsupported, name(), " cannot stream layers");
}

void Ops::MatMulGroup(const Tensor& x, std::span<const Weight* const> ws, std::span<const Tensor> outs) {
  HYMT_CHECK(ws.size() == outs.size(), ws.size(), " weights for ", outs.size(), " outputs");
  for (size_t i = 0; i < ws.size(); ++i) MatMul(x, *ws[i], outs[i]);
}
void Ops::MatMulAdd(const Tensor& x, const Weight& w, Tensor scratch, Tensor residual) {
  MatMul(x, w, scratch);
  Add(residual, scratch);
}
void Ops::MatMulSwiGlu(const Tensor& x, const Weight& gate, const Weight& up, Tensor up_scratch, Tensor out) {
  MatMul(x, gate, out);
  MatMul(x, up, up_scratch);
  SwiGlu(out, up_scratch, out);
}
void Ops::NormMatMulGroup(const Tensor& x, const Weight& norm, float eps, Tensor h, std::span<const Weight* const> ws,
                          std::span<const Tensor> outs) {
  RmsNorm(x, norm, eps, h);
  MatMulGroup(h, ws, outs);
}
void Ops::NormMatMulSwiGlu(const Tensor& x, const Weight& norm, float eps, Tensor h, const Weight& gate,
                           const Weight& up, Tensor up_scratch, Tensor out) {
  RmsNorm(x, norm, eps, h);
  MatMulSwiGlu(h, gate, up, up_scratch, out);
}
void Ops::RopeNormKvWrite(Tensor q, Tensor k, const Tensor& v, int n_heads, const Weight& inv_freq,
                          const Weight* q_norm, const Weight* k_norm, float eps, const KvLayerView& kv) {
  RopeNorm(q, n_heads, kv.head_dim, inv_freq, q_norm, eps);
  RopeNorm(k, kv.n_kv_heads, kv.head_dim, inv_freq, k_norm, eps);
  KvWrite(k, v, kv);
}
void Ops::RopeNormKvAttention(Tensor q, Tensor k, const Tensor& v, int n_heads, const Weight& inv_freq,
                              const Weight* q_norm, const Weight* k_norm, float eps, const KvLayerView& kv,
                              float scale, Tensor out) {
  RopeNormKvWrite(q, k, v, n_heads, inv_freq, q_norm, k_norm, eps, kv);
  Attention(q, kv, n_heads, scale, out);
}

void StepBatch::AddSeq(int32_t n_rows, int32_t n_past, std::span<const int32_t> page_table) {
  Seq s;
  s.first_row = this->n_rows();
  s.n_rows = n_rows;
  s.n_past = n_past;
  s.first_page = static_cast<int32_t>(pages.size());
  s.n_pages = static_cast<int32_t>(page_table.size());
  HYMT_CHECK(static_cast<int64_t>(s.n_pages) * page_size >= n_past + n_rows, "page table too short");
  pages.insert(pages.end(), page_table.begin(), page_table.end());
  int32_t index = static_cast<int32_t>(seqs.size());
  for (int32_t i = 0; i < n_rows; ++i) {
    positions.push_back(n_past + i);
    row_seq.push_back(index);
  }
  seqs.push_back(s);
}

}  // namespace hymt
