#include "backends/cpu/standin.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "backends/cpu/cpu_ops.h"
#include "core/status.h"
#include "core/strings.h"

namespace hymt {
namespace {

// Device bytes in use; shared with the buffers, which may be freed after their Ops.
struct Usage {
  uint64_t capacity = 0;
  std::atomic<uint64_t> allocated{0};
  std::atomic<uint64_t> peak{0};

  void Take(uint64_t bytes, const std::string& what) {
    const uint64_t now = allocated.fetch_add(bytes) + bytes;
    if (capacity > 0 && now > capacity) {
      allocated.fetch_sub(bytes);
      Fail(ErrorCode::kResourceExhausted, "standin device: cannot allocate ", FormatBytes(bytes), " for ",
           what, " (", FormatBytes(now - bytes), " of ", FormatBytes(capacity), " in use)");
    }
    uint64_t p = peak.load();
    while (now > p && !peak.compare_exchange_weak(p, now)) {
    }
  }
};

class DeviceBuffer final : public Buffer {
 public:
  DeviceBuffer(std::unique_ptr<Buffer> host, std::shared_ptr<Usage> usage)
      : host_(std::move(host)), usage_(std::move(usage)) {}
  ~DeviceBuffer() override { usage_->allocated.fetch_sub(host_->size()); }
  void* data() override { return host_->data(); }
  size_t size() const override { return host_->size(); }

 private:
  std::unique_ptr<Buffer> host_;
  std::shared_ptr<Usage> usage_;
};

// Copies in submission order on one helper thread, as a GPU's copy engine does; ticket n is the n-th copy.
class Copier {
 public:
  Copier() : thread_([this] { Run(); }) {}
  ~Copier() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  uint64_t Submit(const void* src, void* dst, size_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(Job{src, dst, bytes});
    cv_.notify_all();
    return ++submitted_;
  }
  void Wait(uint64_t ticket) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return done_ >= ticket; });
  }
  void WaitAll() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return done_ >= submitted_; });
  }

 private:
  struct Job {
    const void* src;
    void* dst;
    size_t bytes;
  };
  void Run() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, nothing left
      const Job job = queue_.front();
      queue_.pop_front();
      lock.unlock();
      std::memcpy(job.dst, job.src, job.bytes);
      lock.lock();
      ++done_;
      cv_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;
  uint64_t submitted_ = 0, done_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

class StandinImpl final : public StandinOps {
 public:
  explicit StandinImpl(const StandinOptions& o) : cpu_(CreateCpuOps()), usage_(std::make_shared<Usage>()) {
    usage_->capacity = o.capacity;
    usage_->Take(o.fixed_bytes, "the fixed part (a context's stand-in)");
  }
  ~StandinImpl() override { copier_.WaitAll(); }

  std::string name() const override { return "standin"; }
  DeviceId device() const override { return kStandinDevice; }
  DType activation_dtype() const override { return cpu_->activation_dtype(); }
  uint64_t allocated_bytes() const override { return usage_->allocated.load(); }
  uint64_t peak_bytes() const override { return usage_->peak.load(); }

  std::unique_ptr<Buffer> Allocate(size_t bytes, const std::string& what) override {
    usage_->Take(bytes, what);
    try {
      return std::make_unique<DeviceBuffer>(cpu_->Allocate(bytes, what), usage_);
    } catch (...) {
      usage_->allocated.fetch_sub(bytes);
      throw;
    }
  }
  // An upload, as on a GPU: the weight's bytes move into device memory.
  Weight PrepareWeight(const Weight& host) override {
    if (host.device == kStandinDevice) return host;
    HYMT_CHECK(host.device.kind == DeviceKind::kCpu && host.data != nullptr, "standin: weight ", host.name);
    auto buf = Allocate(host.bytes(), "weight " + host.name);
    std::memcpy(buf->data(), host.data, host.bytes());
    Weight w = host;
    w.data = w.prepared = buf->data();
    w.device = kStandinDevice;
    weights_.push_back(std::move(buf));
    return w;
  }
  void CopyFromHost(const void* src, Tensor dst) override { cpu_->CopyFromHost(src, dst); }
  void CopyToHost(const Tensor& src, void* dst) override { cpu_->CopyToHost(src, dst); }
  void Sync() override {
    copier_.WaitAll();
    cpu_->Sync();
  }

  void BeginStep(const StepBatch& batch) override { cpu_->BeginStep(batch); }
  void Embed(const Weight& table, std::span<const int32_t> ids, Tensor out) override {
    cpu_->Embed(table, ids, out);
  }
  void RmsNorm(const Tensor& x, const Weight& w, float eps, Tensor out) override {
    cpu_->RmsNorm(x, w, eps, out);
  }
  void MatMul(const Tensor& x, const Weight& w, Tensor out) override { cpu_->MatMul(x, w, out); }
  void RopeNorm(Tensor x, int n_heads, int head_dim, const Weight& inv_freq, const Weight* norm,
                float eps) override {
    cpu_->RopeNorm(x, n_heads, head_dim, inv_freq, norm, eps);
  }
  void KvWrite(const Tensor& k, const Tensor& v, const KvLayerView& kv) override { cpu_->KvWrite(k, v, kv); }
  void Attention(const Tensor& q, const KvLayerView& kv, int n_heads, float scale, Tensor out) override {
    cpu_->Attention(q, kv, n_heads, scale, out);
  }
  void SwiGlu(const Tensor& gate, const Tensor& up, Tensor out) override { cpu_->SwiGlu(gate, up, out); }
  void Add(Tensor x, const Tensor& y) override { cpu_->Add(x, y); }
  void GatherRows(const Tensor& x, std::span<const int32_t> rows, Tensor out) override {
    cpu_->GatherRows(x, rows, out);
  }
  void SampleTokens(const Tensor& logits, std::span<const SampleSpec> specs, int32_t n_valid,
                    std::span<int32_t> out) override {
    cpu_->SampleTokens(logits, specs, n_valid, out);
  }

  // ---- streaming: the host layout is the device layout; the ops run synchronously, so every op
  // enqueued before an UploadAsync has finished when it is called, and WaitUpload blocks the host.
  bool CanStream() const override { return true; }
  std::unique_ptr<Buffer> AllocateStreamHost(size_t bytes, const std::string& what) override {
    return cpu_->Allocate(bytes, what);
  }
  size_t StreamWeightBytes(const Weight& host) override { return host.bytes(); }
  Weight StageStreamWeight(const Weight& host, void* dst) override {
    std::memcpy(dst, host.data, host.bytes());
    Weight w = host;
    w.data = dst;
    w.prepared = nullptr;
    return w;
  }
  uint64_t UploadAsync(const void* host, void* device_dst, size_t bytes) override {
    return copier_.Submit(host, device_dst, bytes);
  }
  void WaitUpload(uint64_t ticket) override { copier_.Wait(ticket); }

 private:
  std::unique_ptr<Ops> cpu_;
  std::shared_ptr<Usage> usage_;
  std::vector<std::unique_ptr<Buffer>> weights_;
  Copier copier_;
};

}  // namespace

std::unique_ptr<StandinOps> CreateStandinOps(const StandinOptions& options) {
  return std::make_unique<StandinImpl>(options);
}

}  // namespace hymt
