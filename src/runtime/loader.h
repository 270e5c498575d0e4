// Opening a model: a Hugging Face folder (config.json, safetensors shards, tokenizer) or a GGUF file.
// The weights stay memory-mapped; nothing is placed on a device here (that is the planner's job).
#pragma once

#include <cstdint>

#include <memory>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace hymt {

struct LoadedModel {
  std::string path;            // what the user gave
  std::string name;            // display name: hymt.json "name", config _name_or_path, GGUF general.name, folder
  std::string format;          // "safetensors" | "gguf"
  ModelConfig config;
  GenerationDefaults generation;
  std::shared_ptr<const Tokenizer> tokenizer;
  std::vector<int32_t> stop_ids;           // resolved: generation config, else <|eos|>/<|endoftext|> by name
  std::vector<std::string> languages;      // declared by the model (hymt.json); empty: all 38
  std::string prompt_style;                // declared by the model or ""; the translate layer decides
  std::string description;                 // hymt.json "description" or ""
  bool is_demo = false;                    // the bundled demo model
  // Weights as stored (host memory: mapped files or owned buffers). Norm weights and the RoPE table
  // are f32 copies owned here.
  std::shared_ptr<HunyuanModel> model;
  // Keeps the mapped files and owned buffers alive as long as any copy of this struct exists.
  std::shared_ptr<void> storage;

  // Per stored type: how many tensors and bytes ("bf16: 226 tensors, 14.0 GiB").
  std::vector<std::pair<std::string, std::pair<int64_t, int64_t>>> TypeSummary() const;
  int64_t WeightBytes() const;
};

struct LoadOptions {
  std::string normalize;  // "" (the tokenizer's own rule), "none" or "nfc"
};

// Loads a model folder or GGUF file. Throws Error naming the file, tensor or field on any problem
// (missing files, unsupported architecture, a tensor of the wrong shape or type).
LoadedModel LoadModel(const std::string& path, const LoadOptions& options = {});

// Where the demo model is: $HYMT_DEMO_MODEL, else <dir of the executable>/../models/demo, else
// ./models/demo, else the source tree's models/demo. Empty when none is found.
std::string FindDemoModel();

}  // namespace hymt
