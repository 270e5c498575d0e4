// The Hunyuan dense decoder's weights, and the one visitor that names every tensor.
//
// ForEachTensor is the single list of what the architecture needs: loading (HF or GGUF names), shape
// validation, placement on devices, quantisation and `hymt info` all walk it.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/config.h"
#include "ops/ops.h"

namespace hymt {

struct LayerWeights {
  Weight attn_norm;  // [1, hidden]
  Weight wq;         // [n_heads * head_dim, hidden]
  Weight wk;         // [n_kv_heads * head_dim, hidden]
  Weight wv;         // [n_kv_heads * head_dim, hidden]
  Weight wo;         // [hidden, n_heads * head_dim]
  Weight q_norm;     // [1, head_dim]  (applied after RoPE)
  Weight k_norm;     // [1, head_dim]
  Weight ffn_norm;   // [1, hidden]
  Weight gate;       // [ffn, hidden]
  Weight up;         // [ffn, hidden]
  Weight down;       // [hidden, ffn]
  // [1, head_dim / 2] f32: the RoPE table (derived from the config, not stored), on this layer's device;
  // every layer holds the same values, so layers on different devices each read their own copy.
  Weight rope_inv_freq;

  // The stored tensors (not the derived RoPE table), for code that treats them alike (placement,
  // streaming).
  std::array<Weight*, 11> Stored() {
    return {&attn_norm, &wq, &wk, &wv, &wo, &q_norm, &k_norm, &ffn_norm, &gate, &up, &down};
  }
  std::array<const Weight*, 11> Stored() const {
    return {&attn_norm, &wq, &wk, &wv, &wo, &q_norm, &k_norm, &ffn_norm, &gate, &up, &down};
  }
};

struct ModelWeights {
  Weight embed;                      // [vocab_rows, hidden]
  std::vector<LayerWeights> layers;  // [n_layers]
  Weight final_norm;                 // [1, hidden]
  Weight output;                     // [vocab_rows, hidden]; empty when tied (the embedding is used)

  // The output head actually used for logits.
  const Weight& head() const { return output.empty() ? embed : output; }
};

// What one tensor of the architecture is.
struct TensorSpec {
  std::string hf_name;    // e.g. "model.layers.3.self_attn.q_proj.weight"
  std::string gguf_name;  // e.g. "blk.3.attn_q.weight"
  std::string role;       // e.g. "attn_q", "ffn_down", "token_embd", "output", "norm"
  int layer = -1;         // -1 for tensors outside the layers
  int64_t rows = 0;       // expected shape [rows, cols] (rows = 1 for vectors)
  int64_t cols = 0;
  bool is_norm = false;   // a 1-D weight (always kept in f32)
};

// Calls fn(spec, weight) for every stored tensor of the architecture, in file order (embedding, layers,
// final norm, then the untied output head when config.tied_output is false).
void ForEachTensor(const ModelConfig& config, ModelWeights& weights,
                   const std::function<void(const TensorSpec&, Weight&)>& fn);

// Read-only walk over the specs alone.
void ForEachTensorSpec(const ModelConfig& config, const std::function<void(const TensorSpec&)>& fn);

}  // namespace hymt
