// The memory planner: decides, before anything is allocated, where every weight lives, how many KV
// pages exist, and how large each step may be, within the user's budgets.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "model/config.h"

namespace hymt {

enum class LayerHome { kCpu, kGpu, kStreamed };

struct PlanInput {
  ModelConfig config;
  std::vector<int64_t> layer_bytes;   // stored bytes of each layer's weights (in the chosen format)
  int64_t embed_bytes = 0;            // token embedding
  int64_t head_bytes = 0;             // untied output head (0 when tied)
  DType weight_type = DType::kBF16;   // the dominant stored type (for display and speed estimates)
  bool have_gpu = false;
  uint64_t gpu_free = 0;              // what the device reports free (bytes)
  uint64_t gpu_budget = 0;            // user budget (0: gpu_free minus a margin)
  uint64_t cpu_available = 0;         // host memory available
  uint64_t cpu_budget = 0;            // user budget (0: available minus a margin)
  std::string device = "auto";        // auto | cpu | cuda
  int max_seqs = 0;                   // 0: choose
  int max_context = 0;                // 0: choose
  DType cpu_kv_type = DType::kF32;    // KV type on each kind of device
  DType gpu_kv_type = DType::kBF16;
};

struct Plan {
  std::string mode;                   // "cpu" | "resident" | "partial" | "streamed"
  std::vector<LayerHome> layers;
  bool embed_on_gpu = false;
  bool head_on_gpu = false;
  int max_seqs = 0;
  int max_context = 0;
  int max_step_tokens = 0;
  int page_size = 16;
  int64_t kv_pages = 0;
  DType kv_type = DType::kF32;
  uint64_t gpu_weight_bytes = 0, gpu_kv_bytes = 0, gpu_scratch_bytes = 0, gpu_overhead_bytes = 0;
  uint64_t cpu_weight_bytes = 0, cpu_kv_bytes = 0, cpu_scratch_bytes = 0;
  double predicted_decode_tok_s = 0;  // batch-1 estimate from bytes per token and a bandwidth guess
  std::vector<std::string> notes;     // why choices were made

  uint64_t gpu_total() const { return gpu_weight_bytes + gpu_kv_bytes + gpu_scratch_bytes + gpu_overhead_bytes; }
  uint64_t cpu_total() const { return cpu_weight_bytes + cpu_kv_bytes + cpu_scratch_bytes; }
  // A human-readable table (for `hymt plan` and the server's start-up log).
  std::string Table(const ModelConfig& config) const;
};

// Throws Error(kResourceExhausted) naming the smallest budget that would work when nothing fits.
Plan MakePlan(const PlanInput& input);

}  // namespace hymt
