#include "runtime/streamer.h"

#include "core/status.h"
#include "core/strings.h"

namespace hymt {
namespace {

// Each tensor of a block starts on this boundary (the device kernels' vector loads need 16 bytes; 256
// matches cudaMalloc's own alignment, so a slot's weights are aligned as resident ones are).
constexpr size_t kTensorAlign = 256;

size_t AlignUp(size_t v) {
  return (v + kTensorAlign - 1) / kTensorAlign * kTensorAlign;
}

}  // namespace

LayerStreamer::LayerStreamer(Ops& device, std::vector<int> layers, const std::vector<LayerWeights>& host,
                             const Weight& device_rope, int depth)
    : device_(device), rope_(device_rope), layers_(std::move(layers)) {
  if (layers_.empty() || depth < 1 || depth > static_cast<int>(Ops::kUploadTicketWindow))
    Fail(ErrorCode::kInvalidArgument, "streaming needs layers and a ring depth in [1, ",
         Ops::kUploadTicketWindow, "], got ", depth);
  if (!device.CanStream()) Fail(ErrorCode::kUnsupported, device.name(), " cannot stream layers");
  position_of_.assign(host.size(), -1);
  for (size_t pos = 0; pos < layers_.size(); ++pos) {
    const int i = layers_[pos];
    HYMT_CHECK(i >= 0 && i < static_cast<int>(host.size()) && position_of_[i] < 0, "streamed layer ", i);
    position_of_[i] = static_cast<int>(pos);
  }

  // Lay out each layer's tensors in one block; a slot holds the largest block.
  std::vector<std::vector<size_t>> tensor_offset(layers_.size());
  size_t total = 0;
  for (size_t pos = 0; pos < layers_.size(); ++pos) {
    size_t off = 0;
    for (const Weight* w : host[layers_[pos]].Stored()) {
      tensor_offset[pos].push_back(off);
      off = AlignUp(off + device.StreamWeightBytes(*w));
    }
    block_offset_.push_back(total);
    block_bytes_.push_back(off);
    slot_bytes_ = std::max(slot_bytes_, off);
    total += off;
  }
  host_ = device.AllocateStreamHost(total, "streamed layers");
  char* base = static_cast<char*>(host_->data());
  for (size_t pos = 0; pos < layers_.size(); ++pos) {
    LayerWeights staged = host[layers_[pos]];
    auto dst = staged.Stored();
    auto src = host[layers_[pos]].Stored();
    for (size_t t = 0; t < dst.size(); ++t)
      *dst[t] = device.StageStreamWeight(*src[t], base + block_offset_[pos] + tensor_offset[pos][t]);
    staged.rope_inv_freq = Weight();
    staged_.push_back(std::move(staged));
  }

  depth = std::min<int>(depth, static_cast<int>(layers_.size()));
  for (int s = 0; s < depth; ++s)
    slots_.push_back(device.Allocate(slot_bytes_, StrCat("streaming ring slot ", s)));
  slot_weights_.resize(slots_.size());
  slot_ticket_.assign(slots_.size(), 0);
  for (int64_t seq = 0; seq < depth; ++seq) Issue(seq);
}

LayerStreamer::~LayerStreamer() {
  // Copies in flight write into the slots: let them land before the slots are freed.
  try {
    device_.Sync();
  } catch (const std::exception&) {
    // The device failed already; its memory goes with it.
  }
}

bool LayerStreamer::Streams(int layer) const {
  return layer >= 0 && layer < static_cast<int>(position_of_.size()) && position_of_[layer] >= 0;
}

const LayerWeights& LayerStreamer::staged(int layer) const {
  HYMT_CHECK(Streams(layer));
  return staged_[position_of_[layer]];
}

void LayerStreamer::Issue(int64_t seq) {
  const size_t n = layers_.size(), d = slots_.size();
  const size_t pos = static_cast<size_t>(seq) % n, slot = static_cast<size_t>(seq) % d;
  char* dev = static_cast<char*>(slots_[slot]->data());
  const char* block = static_cast<const char*>(host_->data()) + block_offset_[pos];
  slot_ticket_[slot] = device_.UploadAsync(block, dev, block_bytes_[pos]);
  // The slot's weights: the staged ones, moved to the slot.
  LayerWeights w = staged_[pos];
  for (Weight* t : w.Stored()) {
    if (t->data == nullptr) continue;
    t->data = dev + (static_cast<const char*>(t->data) - block);
    t->prepared = t->data;
    t->device = device_.device();
  }
  w.rope_inv_freq = rope_;
  slot_weights_[slot] = std::move(w);
  ++uploads_;
}

const LayerWeights& LayerStreamer::Acquire(int layer) {
  HYMT_CHECK(Streams(layer), "layer ", layer, " is not streamed");
  const int64_t n = static_cast<int64_t>(layers_.size());
  if (acquired_ || position_of_[layer] != next_ % n) {
    // Out of order: a step ended half-way. Start the cycle again at this layer once the device is idle.
    device_.Sync();
    acquired_ = false;
    next_ = position_of_[layer];
    for (int64_t seq = next_; seq < next_ + static_cast<int64_t>(slots_.size()); ++seq) Issue(seq);
  }
  const size_t slot = static_cast<size_t>(next_ % static_cast<int64_t>(slots_.size()));
  device_.WaitUpload(slot_ticket_[slot]);
  acquired_ = true;
  return slot_weights_[slot];
}

void LayerStreamer::Release(int layer) {
  const int64_t n = static_cast<int64_t>(layers_.size());
  HYMT_CHECK(acquired_ && Streams(layer) && position_of_[layer] == next_ % n, "Release of layer ", layer,
             " which was not acquired last");
  acquired_ = false;
  // The slot this layer used is next needed `depth` places later.
  Issue(next_ + static_cast<int64_t>(slots_.size()));
  ++next_;
}

}  // namespace hymt
