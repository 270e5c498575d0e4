// Hugging Face config.json and generation_config.json as typed, architecture-agnostic structs.
// The model layer decides what a field means for its architecture and what an absent optional
// field defaults to; this layer only checks types and ranges.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/json.h"

namespace hymt {

// Rotary position embedding parameters, from either spelling:
//   - top-level "rope_theta" plus "rope_scaling": {"type" or "rope_type", "alpha", "factor", ...}
//     (the published Hunyuan-MT-7B config, transformers 4);
//   - "rope_parameters": {"rope_type", "rope_theta", "alpha", "factor"} (transformers 5).
// When both appear, "rope_parameters" wins field by field.
struct RopeConfig {
  std::optional<double> theta;   // base frequency
  std::string type;              // "dynamic", "default", "linear", ...; empty when not given
  std::optional<double> alpha;   // NTK-aware alpha (Hunyuan's "dynamic" scaling)
  std::optional<double> factor;  // scaling factor
};

// One quantisation argument set of a compressed-tensors config group ("weights", "input_activations").
struct QuantArgs {
  std::optional<int64_t> num_bits;  // absent: the library default (8 in compressed-tensors)
  std::string type;                 // "float" or "int"
  std::string strategy;             // "tensor", "channel", "group", "block", "token"
  std::optional<bool> dynamic;
  std::optional<bool> symmetric;
  std::optional<int64_t> group_size;
};

// A compressed-tensors config group: the modules it targets and how they are quantised.
struct QuantGroup {
  std::string name;                  // the key in "config_groups", e.g. "group_0"
  std::vector<std::string> targets;  // e.g. ["Linear"]
  std::optional<QuantArgs> weights;
  std::optional<QuantArgs> input_activations;
};

// "quantization_config" of a pre-quantised checkpoint (e.g. compressed-tensors FP8).
struct QuantizationConfig {
  std::string quant_method;                 // "compressed-tensors", "fp8", "gptq", ...
  std::string format;                       // "naive-quantized", "float-quantized", ...; may be empty
  std::vector<std::string> ignored_layers;  // from "ignored_layers" or "ignore" (both merged)
  std::vector<QuantGroup> groups;           // from "config_groups", in file order
};

struct HfConfig {
  std::string model_type;                  // required
  std::vector<std::string> architectures;  // e.g. ["HunYuanDenseV1ForCausalLM"]
  std::string name_or_path;                // "_name_or_path"; empty when absent

  // Required positive sizes.
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;  // defaults to num_attention_heads when absent (the HF convention)
  std::optional<int64_t> head_dim;

  std::optional<double> rms_norm_eps;
  std::optional<int64_t> max_position_embeddings;
  std::optional<bool> tie_word_embeddings;

  // Token ids; each may be written as an integer or a list. Empty when absent or null.
  std::vector<int64_t> bos_token_ids;
  std::vector<int64_t> eos_token_ids;
  std::vector<int64_t> pad_token_ids;

  RopeConfig rope;
  std::optional<QuantizationConfig> quantization;

  Json raw;  // the whole document, for fields this struct does not name
};

// Parses config.json text; `file` names it in errors. Throws Error(kInvalidArgument) naming the file
// and field, with expected vs found, when the text is not a JSON object, a required field is missing,
// or a field has the wrong type or an out-of-range value. Unknown fields are kept only in `raw`.
HfConfig ParseHfConfig(std::string_view text, const std::string& file);
// Reads and parses a config.json file. Also throws Error(kNotFound) when it cannot be read.
HfConfig LoadHfConfig(const std::string& path);

// generation_config.json: every field optional; null counts as absent.
struct GenerationConfig {
  std::vector<int64_t> bos_token_ids;
  std::vector<int64_t> eos_token_ids;
  std::vector<int64_t> pad_token_ids;
  std::optional<bool> do_sample;
  std::optional<double> temperature;
  std::optional<int64_t> top_k;
  std::optional<double> top_p;
  std::optional<double> repetition_penalty;
  std::optional<int64_t> max_new_tokens;
};

// Parses generation_config.json text; throws as ParseHfConfig.
GenerationConfig ParseGenerationConfig(std::string_view text, const std::string& file);
// Reads and parses a generation_config.json file. Also throws Error(kNotFound) when it cannot be read.
GenerationConfig LoadGenerationConfig(const std::string& path);

}  // namespace hymt
