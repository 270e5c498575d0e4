// The Hunyuan dense decoder's hyper-parameters, from config.json or GGUF metadata.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hymt {

// How the RoPE base is derived (MODEL.md): Hunyuan uses a static "dynamic alpha" base
// rope_theta * alpha^(head_dim / (head_dim - 2)); GGUF files store the resulting base directly.
struct RopeSpec {
  double theta = 10000.0;
  double alpha = 0.0;  // 0: no alpha scaling
  // The effective base for a given head size.
  double Base(int head_dim) const;
};

// Validate's bounds: larger values are reported as corrupt (no Hunyuan model comes near them; they
// keep every product of sizes far from overflowing an int).
inline constexpr int kMaxLayers = 1024;
inline constexpr int kMaxHidden = 65536;
inline constexpr int kMaxFfn = 1 << 20;
inline constexpr int kMaxHeads = 1024;
inline constexpr int kMaxHeadDim = 1024;

struct ModelConfig {
  std::string name;           // model name (for prompt style and display), e.g. "Hunyuan-MT-7B"
  std::string architecture;   // "hunyuan_v1_dense"
  int64_t vocab_rows = 0;     // rows of the embedding (may exceed the tokenizer's tokens; from the tensor)
  int hidden = 0;             // model width
  int ffn = 0;                // MLP inner width
  int n_layers = 0;
  int n_heads = 0;            // query heads
  int n_kv_heads = 0;         // key/value heads (GQA)
  int head_dim = 0;
  float rms_eps = 1e-5f;
  RopeSpec rope;
  bool tied_output = true;    // logits use the embedding (any lm_head in the file is ignored)
  int max_positions = 0;      // from the config; 0 if unknown

  int q_dim() const { return n_heads * head_dim; }
  int kv_dim() const { return n_kv_heads * head_dim; }
  // inv_freq[i] = base^(-2i/head_dim), i < head_dim/2, computed in double then rounded to f32.
  std::vector<float> RopeInvFreq() const;
  // Parameters counted as the checkpoint holds them (embedding rows x hidden, plus an untied head).
  int64_t ParameterCount() const;
  // Throws Error(kCorruptData) naming `where` when the numbers are inconsistent (zero sizes, heads not
  // dividing, odd head_dim, sizes past the kMax* bounds, a RoPE base that is not finite, ...).
  void Validate(const std::string& where) const;
};

// Stop tokens and sampling defaults a checkpoint ships (generation_config.json or GGUF).
struct GenerationDefaults {
  std::vector<int32_t> stop_ids;  // empty: look up <|eos|> and <|endoftext|> by name
  bool do_sample = true;
  float temperature = 0.7f;       // official Hunyuan-MT settings unless the file says otherwise
  int top_k = 20;
  float top_p = 0.6f;
  float repetition_penalty = 1.05f;
  int max_new_tokens = 2048;
};

}  // namespace hymt
