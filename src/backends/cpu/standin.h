// A host-memory stand-in for a GPU, for CI (which has none): the CPU backend's kernels behind an Ops of
// its own, whose "device" memory is plain host memory counted against a capacity, and whose streaming
// ops copy with memcpy on a helper thread. The runtime's partial and streamed paths (two distinct Ops,
// cross-device activation copies, a ring of slots filled while layers compute) run on it exactly as on a
// GPU, with the same kernels as the CPU path, so their output must be bit-identical to it.
#pragma once

#include <cstdint>
#include <memory>

#include "ops/ops.h"

namespace hymt {

struct StandinOptions {
  uint64_t capacity = 0;     // bytes the "device" may hold; Allocate beyond it throws kResourceExhausted
                             // (0: no limit)
  uint64_t fixed_bytes = 0;  // held from creation on, as a CUDA context and the backend's scratch are
};

class StandinOps : public Ops {
 public:
  // Device bytes held now and at most so far (fixed bytes included), for the budget tests.
  virtual uint64_t allocated_bytes() const = 0;
  virtual uint64_t peak_bytes() const = 0;
};

// The device id a stand-in reports: a CPU device other than the host's own (index 0).
constexpr DeviceId kStandinDevice{DeviceKind::kCpu, 1};

std::unique_ptr<StandinOps> CreateStandinOps(const StandinOptions& options);

}  // namespace hymt
