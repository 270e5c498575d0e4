// Layer streaming on CUDA (ops.h's streaming ops; runtime/streamer.h drives
// them): pinned host memory for the staged layers, and an uploader that copies
// on a stream of its own, ordered against the compute stream with events. No
// CUDA C++ here (only the runtime API types), so cuda_ops.cc includes it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ops/ops.h"

namespace hymt::cuda {

// cudaMallocHost memory (copies from it run at full PCIe speed, ~54 GB/s on the
// H200 host against ~6 GB/s from pageable memory). Throws
// Error(kResourceExhausted) when the host cannot pin it.
std::unique_ptr<Buffer> AllocatePinnedHost(size_t bytes, const std::string& what);

// Host -> device copies on their own stream, so they overlap the compute
// stream's kernels.
//   Upload: the copy starts once the compute stream has passed everything
//   enqueued on it so far (an
//           event recorded there, waited on by the copy stream), then records
//           the ticket's event.
//   Wait:   the compute stream waits for the ticket's event; the host does not
//   block.
// The device must be current on the calling thread. Tickets count from 1; the
// last Ops::kUploadTicketWindow tickets can be waited for (their events are
// reused after that).
class Uploader {
 public:
  Uploader() = default;
  ~Uploader();
  Uploader(const Uploader&) = delete;
  Uploader& operator=(const Uploader&) = delete;

  uint64_t Upload(cudaStream_t compute, const void* host, void* device_dst, size_t bytes);
  void Wait(cudaStream_t compute, uint64_t ticket);
  // Blocks the host until every copy has landed (before the slots they write
  // are freed).
  void Sync();

 private:
  cudaStream_t copy_ = nullptr;           // created by the first Upload
  cudaEvent_t compute_passed_ = nullptr;  // re-recorded on the compute stream by each Upload
  std::vector<cudaEvent_t> done_;         // [kUploadTicketWindow] one per ticket, reused cyclically
  uint64_t issued_ = 0;
};

}  // namespace hymt::cuda
