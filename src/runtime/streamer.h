// Layer streaming: layers whose weights do not fit on the device are copied to it every step.
//
// The streamed layers' weights stay in host memory that the device copies from at full speed
// (Ops::AllocateStreamHost: pinned on CUDA), already in the device's layout, one contiguous block per
// layer. A ring of `depth` device slots, each as large as the largest block, receives the blocks in
// execution order, one copy per layer. The order wraps around from the last streamed layer of a step to
// the first of the next, so the next step's first layers copy while this step finishes and samples.
//
// The engine thread uses it per step, in layer order:
//   const LayerWeights& w = streamer.Acquire(i);   // later ops wait for layer i's copy
//   model.ForwardLayer(w, device, ...);             // enqueued on the device
//   streamer.Release(i);                            // starts the copy that reuses i's slot
//
// Ordering: a slot's next copy is issued by Release of the layer that used it, and UploadAsync starts a
// copy only after the device has finished every op enqueued before it, so no layer reads a slot while
// it is overwritten. Acquire orders the layer's ops after its copy (WaitUpload). With depth d, the copies
// of the next d - 1 layers run while a layer computes (prefetch); depth 1 copies and computes in turn.
// Each step moves every streamed byte once, whatever its batch.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "model/weights.h"
#include "ops/ops.h"

namespace hymt {

class LayerStreamer {
 public:
  // layers: the streamed layers' indices in execution order; host: the weights of every layer of the
  // model (readable host memory, as loaded or quantised; only the streamed layers' are read, and only
  // here: they may be freed afterwards); device_rope: the RoPE table as placed on `device`.
  // Allocates the host blocks and `depth` slots, and starts the first `depth` copies.
  LayerStreamer(Ops& device, std::vector<int> layers, const std::vector<LayerWeights>& host,
                const Weight& device_rope, int depth);
  ~LayerStreamer();
  LayerStreamer(const LayerStreamer&) = delete;
  LayerStreamer& operator=(const LayerStreamer&) = delete;

  bool Streams(int layer) const;
  // The layer's weights in its slot, valid until its Release. Layers come in the order given at
  // construction, cycling; a layer out of that order, or an Acquire without the previous Release (after
  // a step failed half-way), restarts the cycle there, waiting for the device first.
  const LayerWeights& Acquire(int layer);
  // Ends the use of the layer acquired last; its slot receives the layer `depth` places later.
  void Release(int layer);

  // The streamed layer's weights as staged in host memory (device layout, host addresses).
  const LayerWeights& staged(int layer) const;
  int depth() const { return static_cast<int>(slots_.size()); }
  size_t slot_bytes() const { return slot_bytes_; }
  size_t host_bytes() const { return host_ ? host_->size() : 0; }
  int64_t uploads() const { return uploads_; }  // copies started since construction

 private:
  // Starts the copy of the layer at sequence number `seq` (position seq % layers, slot seq % depth).
  void Issue(int64_t seq);

  Ops& device_;
  Weight rope_;
  std::vector<int> layers_;           // [positions] layer index, execution order
  std::vector<int> position_of_;      // [n_layers] position in layers_, -1 if not streamed
  std::unique_ptr<Buffer> host_;      // every streamed layer's block
  std::vector<size_t> block_offset_;  // [positions] where each block starts in host_
  std::vector<size_t> block_bytes_;   // [positions]
  std::vector<LayerWeights> staged_;  // [positions] weights inside host_
  size_t slot_bytes_ = 0;
  std::vector<std::unique_ptr<Buffer>> slots_;  // [depth]
  std::vector<LayerWeights> slot_weights_;      // [depth] the weights of the layer each slot holds
  std::vector<uint64_t> slot_ticket_;           // [depth] the copy into each slot
  int64_t next_ = 0;                            // sequence number of the next Acquire
  int64_t uploads_ = 0;
  bool acquired_ = false;
};

}  // namespace hymt
