// Layer streaming on CUDA: pinned host memory and the copy-stream uploader
// (streaming.h).
#include "backends/cuda/cuda_internal.h"
#include "backends/cuda/streaming.h"
#include "core/status.h"
#include "core/strings.h"

namespace hymt::cuda {
namespace {

class PinnedBuffer final : public Buffer {
 public:
  PinnedBuffer(size_t bytes, const std::string& what) : size_(bytes) {
    if (bytes == 0) return;
    const cudaError_t err = cudaMallocHost(&ptr_, bytes);
    if (err != cudaSuccess) {
      cudaGetLastError();
      ptr_ = nullptr;
      Fail(ErrorCode::kResourceExhausted, "cannot pin ", FormatBytes(bytes), " of host memory for ", what,
           ": ", cudaGetErrorString(err));
    }
  }
  ~PinnedBuffer() override {
    if (ptr_ != nullptr) cudaFreeHost(ptr_);
  }
  void* data() override { return ptr_; }
  size_t size() const override { return size_; }

 private:
  void* ptr_ = nullptr;
  size_t size_ = 0;
};

}  // namespace

std::unique_ptr<Buffer> AllocatePinnedHost(size_t bytes, const std::string& what) {
  return std::make_unique<PinnedBuffer>(bytes, what);
}

Uploader::~Uploader() {
  // Never throws: a failed device reports its error elsewhere.
  if (copy_ != nullptr) {
    cudaStreamSynchronize(copy_);
    cudaStreamDestroy(copy_);
  }
  if (compute_passed_ != nullptr) cudaEventDestroy(compute_passed_);
  for (cudaEvent_t e : done_) cudaEventDestroy(e);
  cudaGetLastError();
}

uint64_t Uploader::Upload(cudaStream_t compute, const void* host, void* device_dst, size_t bytes) {
  if (copy_ == nullptr) {
    HYMT_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking));
    HYMT_CUDA_CHECK(cudaEventCreateWithFlags(&compute_passed_, cudaEventDisableTiming));
    done_.assign(Ops::kUploadTicketWindow, nullptr);
    for (cudaEvent_t& e : done_) HYMT_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  }
  // The slot may still be read by kernels enqueued before now: the copy waits
  // for them.
  HYMT_CUDA_CHECK(cudaEventRecord(compute_passed_, compute));
  HYMT_CUDA_CHECK(cudaStreamWaitEvent(copy_, compute_passed_, 0));
  HYMT_CUDA_CHECK(cudaMemcpyAsync(device_dst, host, bytes, cudaMemcpyHostToDevice, copy_));
  const uint64_t ticket = ++issued_;
  HYMT_CUDA_CHECK(cudaEventRecord(done_[ticket % done_.size()], copy_));
  return ticket;
}

void Uploader::Wait(cudaStream_t compute, uint64_t ticket) {
  if (ticket == 0 || ticket > issued_ || issued_ - ticket >= done_.size())
    Fail(ErrorCode::kInvalidArgument, "cuda: upload ticket ", ticket, " is not among the last ", done_.size(),
         " of ", issued_);
  HYMT_CUDA_CHECK(cudaStreamWaitEvent(compute, done_[ticket % done_.size()], 0));
}

void Uploader::Sync() {
  if (copy_ != nullptr) HYMT_CUDA_CHECK(cudaStreamSynchronize(copy_));
}

}  // namespace hymt::cuda
