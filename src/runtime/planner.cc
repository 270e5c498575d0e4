#include "runtime/planner.h"

#include <algorithm>
#include <cstdio>
#include <numeric>

#include "core/status.h"
#include "core/strings.h"
#include "model/model.h"
#include "runtime/kv_cache.h"

namespace hymt {
namespace {

constexpr int kPageSize = 16;
constexpr int kDefaultMaxSeqs = 16;
constexpr int kDefaultMaxContext = 2048;
constexpr int kCpuStepTokens = 512;
constexpr int kGpuStepTokens = 2048;
// Typical translation sequences are short; the pool holds this many tokens per running sequence on
// average (longer ones borrow from shorter ones; preemption handles the rest).
constexpr int kAverageTokensPerSeq = 768;
// Kept free on the device for the CUDA context, cuBLAS workspaces and allocator slack.
constexpr uint64_t kGpuOverhead = 900ull << 20;
constexpr uint64_t kGpuMargin = 512ull << 20;
constexpr uint64_t kCpuMargin = 1ull << 30;
// Rough decode bandwidths for the estimate (the benchmarks measure the real ones).
constexpr double kCpuBandwidth = 20e9;
constexpr double kGpuBandwidth = 3.0e12;

uint64_t LogitsBytes(const ModelConfig& c, int rows, DType t) { return DTypeBytes(t, c.vocab_rows * rows); }

}  // namespace

Plan MakePlan(const PlanInput& in) {
  const ModelConfig& c = in.config;
  Plan p;
  p.page_size = kPageSize;
  p.max_seqs = in.max_seqs > 0 ? in.max_seqs : kDefaultMaxSeqs;
  int model_ctx = c.max_positions > 0 ? c.max_positions : kDefaultMaxContext;
  p.max_context = in.max_context > 0 ? in.max_context : std::min(kDefaultMaxContext, model_ctx);
  if (in.max_context > 0 && c.max_positions > 0 && in.max_context > c.max_positions)
    p.notes.push_back(StrCat("context ", in.max_context, " exceeds the model's trained ", c.max_positions, " positions"));

  const int64_t layer_total = std::accumulate(in.layer_bytes.begin(), in.layer_bytes.end(), int64_t{0});
  const uint64_t weights_total = static_cast<uint64_t>(layer_total + in.embed_bytes + in.head_bytes);
  const bool want_gpu = in.have_gpu && in.device != "cpu";
  if (in.device == "cuda" && !in.have_gpu)
    Fail(ErrorCode::kUnavailable, "--device cuda was asked for, but no CUDA device is available");

  auto kv_tokens_for = [&](int seqs) {
    return std::max<int64_t>(p.max_context, int64_t{seqs} * std::min(p.max_context, kAverageTokensPerSeq));
  };

  if (want_gpu) {
    const uint64_t budget = in.gpu_budget > 0 ? in.gpu_budget : (in.gpu_free > kGpuMargin ? in.gpu_free - kGpuMargin : 0);
    p.kv_type = in.gpu_kv_type;
    p.max_step_tokens = std::max(kGpuStepTokens, p.max_seqs);
    const uint64_t scratch = Activations::Bytes(c, p.max_step_tokens, DType::kBF16) +
                             LogitsBytes(c, p.max_seqs, DType::kBF16);
    const uint64_t page_bytes = KvCache::PageBytesPerLayer(c, p.page_size, p.kv_type) * c.n_layers;
    const int64_t min_pages = (p.max_context + p.page_size - 1) / p.page_size;
    const uint64_t fixed = weights_total + scratch + kGpuOverhead;
    if (fixed + page_bytes * min_pages <= budget) {
      p.mode = "resident";
      p.layers.assign(c.n_layers, LayerHome::kGpu);
      p.embed_on_gpu = p.head_on_gpu = true;
      const int64_t want_pages = (kv_tokens_for(p.max_seqs) + p.page_size - 1) / p.page_size;
      const int64_t fit_pages = static_cast<int64_t>((budget - fixed) / page_bytes);
      p.kv_pages = std::min(want_pages, fit_pages);
      p.gpu_weight_bytes = weights_total;
      p.gpu_kv_bytes = page_bytes * p.kv_pages;
      p.gpu_scratch_bytes = scratch;
      p.gpu_overhead_bytes = kGpuOverhead;
      p.predicted_decode_tok_s = kGpuBandwidth / static_cast<double>(layer_total + in.head_bytes + (in.head_bytes ? 0 : in.embed_bytes));
      return p;
    }
    if (in.device == "cuda")
      Fail(ErrorCode::kResourceExhausted, "the model needs ", FormatBytes(fixed + page_bytes * min_pages),
           " on the GPU for a resident plan; the budget is ", FormatBytes(budget),
           " (partial offload and streaming are chosen with --device auto)");
    p.notes.push_back(StrCat("the GPU budget of ", FormatBytes(budget), " is too small for a resident plan (needs ",
                             FormatBytes(fixed + page_bytes * min_pages), "); running on the CPU"));
  }

  // Everything on the CPU, weights memory-mapped.
  p.mode = "cpu";
  p.layers.assign(c.n_layers, LayerHome::kCpu);
  p.kv_type = in.cpu_kv_type;
  p.max_step_tokens = std::max(kCpuStepTokens, p.max_seqs);
  const uint64_t scratch = Activations::Bytes(c, p.max_step_tokens, DType::kF32) + LogitsBytes(c, p.max_seqs, DType::kF32) * 2;
  const uint64_t page_bytes = KvCache::PageBytesPerLayer(c, p.page_size, p.kv_type) * c.n_layers;
  const int64_t min_pages = (p.max_context + p.page_size - 1) / p.page_size;
  const uint64_t budget = in.cpu_budget > 0 ? in.cpu_budget
                                            : (in.cpu_available > kCpuMargin ? in.cpu_available - kCpuMargin : in.cpu_available);
  const uint64_t fixed = weights_total + scratch;
  if (budget > 0 && fixed + page_bytes * min_pages > budget)
    Fail(ErrorCode::kResourceExhausted, "the model needs at least ", FormatBytes(fixed + page_bytes * min_pages),
         " of host memory (weights ", FormatBytes(weights_total), ", one ", p.max_context, "-token sequence of KV ",
         FormatBytes(page_bytes * min_pages), ", scratch ", FormatBytes(scratch), "); the budget is ", FormatBytes(budget));
  const int64_t want_pages = (kv_tokens_for(p.max_seqs) + p.page_size - 1) / p.page_size;
  const int64_t fit_pages = budget > 0 ? static_cast<int64_t>((budget - fixed) / page_bytes) : want_pages;
  p.kv_pages = std::max(min_pages, std::min(want_pages, fit_pages));
  p.cpu_weight_bytes = weights_total;
  p.cpu_kv_bytes = page_bytes * p.kv_pages;
  p.cpu_scratch_bytes = scratch;
  p.predicted_decode_tok_s = kCpuBandwidth / static_cast<double>(layer_total + (in.head_bytes ? in.head_bytes : in.embed_bytes));
  return p;
}

std::string Plan::Table(const ModelConfig& c) const {
  std::string out;
  char line[256];
  auto row = [&](const char* what, const std::string& gpu, const std::string& cpu) {
    std::snprintf(line, sizeof line, "  %-22s %16s %16s\n", what, gpu.c_str(), cpu.c_str());
    out += line;
  };
  int gpu_layers = static_cast<int>(std::count(layers.begin(), layers.end(), LayerHome::kGpu));
  int streamed = static_cast<int>(std::count(layers.begin(), layers.end(), LayerHome::kStreamed));
  out += StrCat("plan: ", mode, " — ", gpu_layers, " of ", c.n_layers, " layers on the GPU",
                streamed ? StrCat(", ", streamed, " streamed") : "", "\n");
  row("", "GPU", "CPU");
  row("weights", FormatBytes(gpu_weight_bytes), FormatBytes(cpu_weight_bytes));
  row("KV cache", FormatBytes(gpu_kv_bytes), FormatBytes(cpu_kv_bytes));
  row("activations, logits", FormatBytes(gpu_scratch_bytes), FormatBytes(cpu_scratch_bytes));
  row("context, workspaces", FormatBytes(gpu_overhead_bytes), "-");
  row("total", FormatBytes(gpu_total()), FormatBytes(cpu_total()));
  out += StrCat("  KV: ", kv_pages, " pages of ", page_size, " tokens (", kv_pages * page_size, " tokens) in ",
                DTypeName(kv_type), "; up to ", max_seqs, " sequences of ", max_context, " tokens; ", max_step_tokens,
                " tokens per step\n");
  std::snprintf(line, sizeof line, "  predicted batch-1 decode: %.1f tokens/s\n", predicted_decode_tok_s);
  out += line;
  for (const std::string& n : notes) out += "  note: " + n + "\n";
  return out;
}

}  // namespace hymt
