// The Hunyuan dense decoder (HF model_type hunyuan_v1_dense), written once over the op interface.
//
// The runtime drives it one layer at a time (ForwardLayer), so layers may live on different devices
// or be streamed in; each call receives the ops of the device that holds that layer's weights and
// activations.
#pragma once

#include <cstdint>

#include <memory>
#include <span>
#include <vector>

#include "model/config.h"
#include "model/weights.h"
#include "ops/ops.h"

namespace hymt {

// Activations of one step on one device, sized for up to max_rows tokens; a step uses the first
// n_rows rows of each tensor.
struct Activations {
  int64_t max_rows = 0;
  Tensor x;     // [max_rows, hidden]  the residual stream
  Tensor h;     // [max_rows, hidden]  normalised input of a block
  Tensor q;     // [max_rows, n_heads * head_dim]
  Tensor k;     // [max_rows, n_kv_heads * head_dim]
  Tensor v;     // [max_rows, n_kv_heads * head_dim]
  Tensor attn;  // [max_rows, n_heads * head_dim]  attention output before o_proj
  Tensor gate;  // [max_rows, ffn]
  Tensor up;    // [max_rows, ffn]
  Tensor proj;  // [max_rows, hidden]  o_proj / down_proj output before the residual add

  // Bytes needed for max_rows rows in `dtype`.
  static size_t Bytes(const ModelConfig& c, int64_t max_rows, DType dtype);
  // Lays the tensors out in one buffer of at least Bytes() bytes.
  static Activations Carve(const ModelConfig& c, int64_t max_rows, DType dtype, DeviceId device, void* memory);
};

class HunyuanModel {
 public:
  HunyuanModel(ModelConfig config, ModelWeights weights);

  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }
  ModelWeights& mutable_weights() { return weights_; }

  // x[0, n) = embedding rows of ids (n = ids.size()).
  void Embed(Ops& ops, std::span<const int32_t> ids, Activations& a) const;

  // One decoder layer over the step's first n_rows rows: x updated in place. `w` is the layer's weights
  // as placed for `ops` (usually layer(i); a streamed layer passes its just-uploaded copy). The ops must
  // have seen BeginStep for this step; kv is this layer's cache.
  void ForwardLayer(const LayerWeights& w, Ops& ops, const KvLayerView& kv, Activations& a, int64_t n_rows) const;
  const LayerWeights& layer(int i) const { return weights_.layers[i]; }

  // logits[i, :] = head(final_norm(x[rows[i]])). logits: [rows.size(), vocab_rows], f32 or the
  // activation type. Uses a.h as scratch.
  void Logits(Ops& ops, Activations& a, std::span<const int32_t> rows, Tensor logits) const;

 private:
  ModelConfig config_;
  ModelWeights weights_;
};

}  // namespace hymt
