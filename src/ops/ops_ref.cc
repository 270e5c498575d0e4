// The scalar reference backend: host memory, f32 activations, double accumulation, no threads and no
// tricks. It is the oracle every fast backend is compared with, so it favours the obvious over speed.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/status.h"
#include "ops/ops.h"
#include "quant/quant.h"

namespace hymt {
namespace {

class HostBuffer : public Buffer {
 public:
  HostBuffer(size_t bytes, const std::string& what) : size_(bytes) {
    size_t rounded = (bytes + 63) / 64 * 64;
    data_ = rounded == 0 ? nullptr : std::aligned_alloc(64, rounded);
    if (rounded != 0 && data_ == nullptr)
      Fail(ErrorCode::kResourceExhausted, "cannot allocate ", FormatBytes(bytes), " of host memory for ", what);
  }
  ~HostBuffer() override { std::free(data_); }
  void* data() override { return data_; }
  size_t size() const override { return size_; }

 private:
  void* data_;
  size_t size_;
};

float* RowF32(const Tensor& t, int64_t r) {
  HYMT_CHECK(t.dtype == DType::kF32, "the reference backend computes in f32, got ", DTypeName(t.dtype));
  return t.As<float>() + r * t.stride;
}

// One weight row as f32 (scale applied).
std::vector<float> WeightRow(const Weight& w, int64_t r) {
  std::vector<float> out(static_cast<size_t>(w.cols));
  const uint8_t* base = static_cast<const uint8_t*>(w.data) + DTypeBytes(w.dtype, w.cols) * r;
  DequantizeRow(w.dtype, base, out.data(), w.cols);
  if (w.scale != 1.0f)
    for (float& v : out) v *= w.scale;
  return out;
}

class ReferenceOps : public Ops {
 public:
  std::string name() const override { return "reference"; }
  DeviceId device() const override { return DeviceId{}; }
  DType activation_dtype() const override { return DType::kF32; }

  std::unique_ptr<Buffer> Allocate(size_t bytes, const std::string& what) override {
    return std::make_unique<HostBuffer>(bytes, what);
  }
  Weight PrepareWeight(const Weight& host) override { return host; }
  void CopyFromHost(const void* src, Tensor dst) override {
    size_t row = DTypeBytes(dst.dtype, dst.cols);
    for (int64_t r = 0; r < dst.rows; ++r)
      std::memcpy(static_cast<char*>(dst.data) + r * dst.RowBytes(), static_cast<const char*>(src) + r * row, row);
  }
  void CopyToHost(const Tensor& src, void* dst) override {
    size_t row = DTypeBytes(src.dtype, src.cols);
    for (int64_t r = 0; r < src.rows; ++r)
      std::memcpy(static_cast<char*>(dst) + r * row, static_cast<const char*>(src.data) + r * src.RowBytes(), row);
  }
  void Sync() override {}

  void BeginStep(const StepBatch& batch) override { batch_ = batch; }

  void Embed(const Weight& table, std::span<const int32_t> ids, Tensor out) override {
    HYMT_CHECK(static_cast<int64_t>(ids.size()) == out.rows && out.cols == table.cols);
    for (int64_t i = 0; i < out.rows; ++i) {
      HYMT_CHECK(ids[i] >= 0 && ids[i] < table.rows, "token id ", ids[i], " outside the embedding");
      std::vector<float> row = WeightRow(table, ids[i]);
      std::memcpy(RowF32(out, i), row.data(), row.size() * sizeof(float));
    }
  }

  void RmsNorm(const Tensor& x, const Weight& w, float eps, Tensor out) override {
    std::vector<float> wv = WeightRow(w, 0);
    for (int64_t r = 0; r < x.rows; ++r) {
      const float* xr = RowF32(x, r);
      double ss = 0;
      for (int64_t i = 0; i < x.cols; ++i) ss += static_cast<double>(xr[i]) * xr[i];
      double inv = 1.0 / std::sqrt(ss / static_cast<double>(x.cols) + eps);
      float* o = RowF32(out, r);
      for (int64_t i = 0; i < x.cols; ++i) o[i] = static_cast<float>(static_cast<float>(xr[i] * inv) * wv[i]);
    }
  }

  void MatMul(const Tensor& x, const Weight& w, Tensor out) override {
    HYMT_CHECK(x.cols == w.cols && out.cols == w.rows && out.rows == x.rows, "matmul shapes x[", x.rows, ",",
               x.cols, "] w[", w.rows, ",", w.cols, "] out[", out.rows, ",", out.cols, "]");
    for (int64_t n = 0; n < w.rows; ++n) {
      std::vector<float> wr = WeightRow(w, n);
      for (int64_t t = 0; t < x.rows; ++t) {
        const float* xr = RowF32(x, t);
        double acc = 0;
        for (int64_t k = 0; k < w.cols; ++k) acc += static_cast<double>(xr[k]) * wr[k];
        RowF32(out, t)[n] = static_cast<float>(acc);
      }
    }
  }

  void RopeNorm(Tensor x, int n_heads, int head_dim, const Weight& inv_freq, const Weight* norm,
                float eps) override {
    HYMT_CHECK(x.cols == static_cast<int64_t>(n_heads) * head_dim && x.rows == batch_.n_rows());
    const int half = head_dim / 2;
    std::vector<float> freq = WeightRow(inv_freq, 0);
    std::vector<float> nw;
    if (norm != nullptr) nw = WeightRow(*norm, 0);
    for (int64_t r = 0; r < x.rows; ++r) {
      float pos = static_cast<float>(batch_.positions[r]);
      float* row = RowF32(x, r);
      for (int h = 0; h < n_heads; ++h) {
        float* v = row + h * head_dim;
        for (int j = 0; j < half; ++j) {
          float angle = pos * freq[j];  // f32 product, as HF computes it
          double c = std::cos(static_cast<double>(angle)), s = std::sin(static_cast<double>(angle));
          double x1 = v[j], x2 = v[j + half];
          v[j] = static_cast<float>(x1 * static_cast<float>(c) - x2 * static_cast<float>(s));
          v[j + half] = static_cast<float>(x2 * static_cast<float>(c) + x1 * static_cast<float>(s));
        }
        if (norm != nullptr) {
          double ss = 0;
          for (int j = 0; j < head_dim; ++j) ss += static_cast<double>(v[j]) * v[j];
          double inv = 1.0 / std::sqrt(ss / head_dim + eps);
          for (int j = 0; j < head_dim; ++j) v[j] = static_cast<float>(v[j] * inv) * nw[j];
        }
      }
    }
  }

  void KvWrite(const Tensor& k, const Tensor& v, const KvLayerView& kv) override {
    for (int64_t r = 0; r < k.rows; ++r) {
      for (int hk = 0; hk < kv.n_kv_heads; ++hk) {
        QuantizeRow(kv.dtype, RowF32(k, r) + hk * kv.head_dim, Slot(kv, kv.k, r, hk), kv.head_dim);
        QuantizeRow(kv.dtype, RowF32(v, r) + hk * kv.head_dim, Slot(kv, kv.v, r, hk), kv.head_dim);
      }
    }
  }

  void Attention(const Tensor& q, const KvLayerView& kv, int n_heads, float scale, Tensor out) override {
    const int group = n_heads / kv.n_kv_heads;
    const int hd = kv.head_dim;
    std::vector<float> kr(hd), vr(hd);
    for (int64_t r = 0; r < q.rows; ++r) {
      const StepBatch::Seq& s = batch_.seqs[batch_.row_seq[r]];
      const int32_t pos = batch_.positions[r];
      for (int h = 0; h < n_heads; ++h) {
        const int hk = h / group;
        const float* qh = RowF32(q, r) + h * hd;
        std::vector<double> scores(pos + 1);
        double mx = -INFINITY;
        for (int32_t j = 0; j <= pos; ++j) {
          DequantizeRow(kv.dtype, PositionSlot(kv, kv.k, s, j, hk), kr.data(), hd);
          double dot = 0;
          for (int d = 0; d < hd; ++d) dot += static_cast<double>(qh[d]) * kr[d];
          scores[j] = dot * scale;
          mx = std::max(mx, scores[j]);
        }
        double sum = 0;
        for (double& sc : scores) {
          sc = std::exp(sc - mx);
          sum += sc;
        }
        std::vector<double> acc(hd, 0.0);
        for (int32_t j = 0; j <= pos; ++j) {
          DequantizeRow(kv.dtype, PositionSlot(kv, kv.v, s, j, hk), vr.data(), hd);
          for (int d = 0; d < hd; ++d) acc[d] += scores[j] / sum * vr[d];
        }
        float* o = RowF32(out, r) + h * hd;
        for (int d = 0; d < hd; ++d) o[d] = static_cast<float>(acc[d]);
      }
    }
  }

  void SwiGlu(const Tensor& gate, const Tensor& up, Tensor out) override {
    for (int64_t r = 0; r < gate.rows; ++r) {
      const float* g = RowF32(gate, r);
      const float* u = RowF32(up, r);
      float* o = RowF32(out, r);
      for (int64_t i = 0; i < gate.cols; ++i) {
        double gv = g[i];
        o[i] = static_cast<float>(gv / (1.0 + std::exp(-gv)) * u[i]);
      }
    }
  }

  void Add(Tensor x, const Tensor& y) override {
    for (int64_t r = 0; r < x.rows; ++r) {
      float* a = RowF32(x, r);
      const float* b = RowF32(y, r);
      for (int64_t i = 0; i < x.cols; ++i) a[i] += b[i];
    }
  }

  void GatherRows(const Tensor& x, std::span<const int32_t> rows, Tensor out) override {
    for (int64_t i = 0; i < out.rows; ++i)
      std::memcpy(RowF32(out, i), RowF32(x, rows[i]), static_cast<size_t>(x.cols) * sizeof(float));
  }

 private:
  // Address of (kv head hk, position j) of sequence s in a K or V pool.
  void* PositionSlot(const KvLayerView& kv, void* pool, const StepBatch::Seq& s, int32_t j, int hk) const {
    int32_t page = batch_.pages[s.first_page + j / kv.page_size];
    HYMT_CHECK(page >= 0 && page < kv.n_pages, "page ", page, " of ", kv.n_pages);
    size_t offset = static_cast<size_t>(page) * kv.PageBytes() +
                    (static_cast<size_t>(hk) * kv.page_size + j % kv.page_size) * DTypeBytes(kv.dtype, kv.head_dim);
    return static_cast<char*>(pool) + offset;
  }
  void* Slot(const KvLayerView& kv, void* pool, int64_t row, int hk) const {
    return PositionSlot(kv, pool, batch_.seqs[batch_.row_seq[row]], batch_.positions[row], hk);
  }

  StepBatch batch_;
};

}  // namespace

std::unique_ptr<Ops> CreateReferenceOps() { return std::make_unique<ReferenceOps>(); }

}  // namespace hymt
