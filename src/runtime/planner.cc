#include "runtime/planner.h"

#include <algorithm>
#include <cstdio>
#include <optional>

#include "backends/cpu/packed.h"
#include "core/status.h"
#include "core/strings.h"
#include "model/model.h"
#include "quant/recipe.h"
#include "runtime/ceilings.h"
#include "runtime/kv_cache.h"

namespace hymt {
namespace {

constexpr int kPageSize = 16;
constexpr int kDefaultMaxContext = 2048;
// Sequences at once when the user gives no --max-seqs: a CPU step is slow, so fewer; a streamed step
// costs the same weight traffic whatever its batch, so more (rule 4).
constexpr int kCpuDefaultSeqs = 16;
constexpr int kGpuDefaultSeqs = 32;
constexpr int kStreamedDefaultSeqs = 64;
// Rows per step (prefill chunks plus decode tokens). GPU steps shrink, halving, when their activations
// would take more than 1/kActivationShare of the budget (better spent on KV pages), but not below
// kMinStepTokens.
constexpr int kCpuStepTokens = 512;
constexpr int kGpuStepTokens = 2048;
constexpr int kMinStepTokens = 256;
constexpr uint64_t kActivationShare = 16;
// Typical translation sequences are short; the pool holds this many tokens per running sequence on
// average (longer ones borrow from shorter ones; preemption handles the rest).
constexpr int kAverageTokensPerSeq = 768;
// The batch a plan's speed is predicted at: as many sequences as its KV pages hold at this size (a
// sentence and its translation in the prompt template: ~48 + 64 tokens, rounded up). Choosing between
// plans by this batch favours KV pages (and a GPU head) where a step's weight traffic is fixed.
constexpr int kPredictedSeqTokens = 256;
// Defaults when the user gives no budget: what the device or host reports free minus a margin for
// other processes.
constexpr uint64_t kGpuMargin = uint64_t{512} << 20;
constexpr uint64_t kCpuMargin = uint64_t{1} << 30;
// Two slots: one layer computes from one while the next copies into the other; the copy engine stays
// busy as long as a layer computes faster than it copies.
constexpr int kDefaultRingDepth = 2;
// The smallest-budget search stops at this resolution; the answer is rounded up to it.
constexpr uint64_t kBudgetResolution = uint64_t{16} << 20;

uint64_t RoundUp(uint64_t v, uint64_t a) {
  return (v + a - 1) / a * a;
}

uint64_t Sum(const std::vector<uint64_t>& v) {
  uint64_t s = 0;
  for (uint64_t x : v) s += x;
  return s;
}

// What a plan is made of before its KV pages are known.
struct Layout {
  std::string mode;
  std::vector<LayerHome> layers;
  bool embed_on_gpu = false, head_on_gpu = false;
  int ring_depth = 0;
  int max_seqs = 0;
  int step_tokens = 0;
  DType kv_type = DType::kF32;
};

class Planner {
 public:
  explicit Planner(const PlanInput& in) : in_(in), c_(in.config) {
    int model_ctx = c_.max_positions > 0 ? c_.max_positions : kDefaultMaxContext;
    max_context_ = in.max_context > 0 ? in.max_context : std::min(kDefaultMaxContext, model_ctx);
    min_pages_ = (max_context_ + kPageSize - 1) / kPageSize;
  }

  int max_context() const { return max_context_; }

  // The best GPU plan (resident, streamed or partial) within the budgets, if any fits.
  std::optional<Plan> Gpu(uint64_t gpu_budget, uint64_t cpu_budget) const {
    const bool any = in_.mode.empty();
    if (any || in_.mode == "resident")
      for (const WeightFormat& f : in_.formats)
        if (auto p = Resident(f, gpu_budget, cpu_budget)) return p;
    // Not resident: the smallest format moves the fewest bytes per step.
    const WeightFormat& f = in_.formats.back();
    std::optional<Plan> best;
    auto consider = [&](std::optional<Plan> p) {
      if (p && (!best || p->predicted_batch_tok_s > best->predicted_batch_tok_s)) best = std::move(p);
    };
    if ((any || in_.mode == "streamed") && in_.gpu_can_stream)
      consider(Offload(f, true, gpu_budget, cpu_budget));
    if (any || in_.mode == "partial") consider(Offload(f, false, gpu_budget, cpu_budget));
    return best;
  }

  // Every layer on the CPU: the first format that fits the host budget.
  std::optional<Plan> Cpu(uint64_t cpu_budget) const {
    if (!in_.mode.empty() && in_.mode != "cpu") return std::nullopt;
    for (const WeightFormat& f : in_.formats) {
      Layout l;
      l.mode = "cpu";
      l.layers.assign(c_.n_layers, LayerHome::kCpu);
      l.max_seqs = in_.max_seqs > 0 ? in_.max_seqs : kCpuDefaultSeqs;
      l.step_tokens = std::max(kCpuStepTokens, l.max_seqs);
      l.kv_type = in_.cpu_kv_type;
      if (auto p = Build(f, l, 0, cpu_budget)) return p;
    }
    return std::nullopt;
  }

 private:
  std::optional<Plan> Resident(const WeightFormat& f, uint64_t gpu_budget, uint64_t cpu_budget) const {
    Layout l;
    l.mode = "resident";
    l.layers.assign(c_.n_layers, LayerHome::kGpu);
    l.embed_on_gpu = l.head_on_gpu = true;
    l.max_seqs = in_.max_seqs > 0 ? in_.max_seqs : kGpuDefaultSeqs;
    return WithStepTokens(f, l, gpu_budget, cpu_budget);
  }

  // The first N layers resident on the GPU, the others streamed (or, for partial, on the CPU); the
  // head on whichever device predicts faster. N and the head's place are searched.
  std::optional<Plan> Offload(const WeightFormat& f, bool streamed, uint64_t gpu_budget,
                              uint64_t cpu_budget) const {
    std::optional<Plan> best;
    const int n = c_.n_layers;
    for (bool head_on_gpu : {true, false}) {
      // A partial plan has layers on both devices; a streamed one may stream them all.
      const int first = std::max(in_.gpu_layers >= 0 ? in_.gpu_layers : 0, streamed ? 0 : 1);
      const int last = in_.gpu_layers >= 0 ? in_.gpu_layers : n - 1;
      for (int resident = first; resident <= std::min(last, n - 1); ++resident) {
        Layout l;
        l.mode = streamed ? "streamed" : "partial";
        for (int i = 0; i < n; ++i)
          l.layers.push_back(i < resident ? LayerHome::kGpu
                                          : (streamed ? LayerHome::kStreamed : LayerHome::kCpu));
        l.head_on_gpu = head_on_gpu;
        // A tied head is the embedding table: it lives with the head. An untied model keeps its table on
        // the CPU and sends the looked-up rows up.
        l.embed_on_gpu = c_.tied_output && head_on_gpu;
        if (streamed)
          l.ring_depth = std::min(n - resident, in_.ring_depth > 0 ? in_.ring_depth : kDefaultRingDepth);
        l.max_seqs = in_.max_seqs > 0 ? in_.max_seqs : (streamed ? kStreamedDefaultSeqs : kGpuDefaultSeqs);
        auto p = WithStepTokens(f, l, gpu_budget, cpu_budget);
        // Ties go to more resident layers (faster at batch 1, fewer bytes over PCIe).
        if (p && (!best || p->predicted_batch_tok_s >= best->predicted_batch_tok_s)) best = std::move(p);
      }
    }
    return best;
  }

  // Tries the largest step size whose activations stay within their share of the budget, halving
  // down to the minimum until the plan fits.
  std::optional<Plan> WithStepTokens(const WeightFormat& f, Layout l, uint64_t gpu_budget,
                                     uint64_t cpu_budget) const {
    l.kv_type = in_.gpu_kv_type;
    const int floor = std::max(kMinStepTokens, l.max_seqs);
    int step = std::max(kGpuStepTokens, l.max_seqs);
    while (step / 2 >= floor &&
           Activations::Bytes(c_, step, in_.gpu_activation_type) * kActivationShare > gpu_budget)
      step /= 2;
    for (; step >= floor; step /= 2) {
      l.step_tokens = step;
      if (auto p = Build(f, l, gpu_budget, cpu_budget)) return p;
    }
    return std::nullopt;
  }

  // Sizes a layout; nullopt when one max_context sequence of KV does not fit next to everything else.
  std::optional<Plan> Build(const WeightFormat& f, const Layout& l, uint64_t gpu_budget,
                            uint64_t cpu_budget) const {
    Plan p;
    p.mode = l.mode;
    p.format = f;
    p.layers = l.layers;
    p.embed_on_gpu = l.embed_on_gpu;
    p.head_on_gpu = l.head_on_gpu;
    p.ring_depth = l.ring_depth;
    p.max_seqs = l.max_seqs;
    p.max_context = max_context_;
    p.max_step_tokens = l.step_tokens;
    p.page_size = kPageSize;
    p.kv_type = l.kv_type;
    p.gpu_budget = gpu_budget;
    p.cpu_budget = cpu_budget;
    const bool uses_gpu = l.mode != "cpu";
    const uint64_t vocab = static_cast<uint64_t>(c_.vocab_rows);

    // Weights. A format measured from the model in its stored form is memory-mapped: the parts the GPU
    // holds need no host memory once uploaded. Quantised-at-load host copies of those parts are freed too.
    int gpu_kv_layers = 0;
    for (int i = 0; i < c_.n_layers; ++i) {
      switch (l.layers[i]) {
        case LayerHome::kGpu:
          p.gpu_weight_bytes += f.layer_gpu_bytes[i];
          ++gpu_kv_layers;
          break;
        case LayerHome::kStreamed:
          p.ring_slot_bytes = std::max(p.ring_slot_bytes, f.layer_gpu_bytes[i]);
          p.cpu_pinned_bytes += f.layer_gpu_bytes[i];
          ++gpu_kv_layers;
          break;
        case LayerHome::kCpu:
          p.cpu_weight_bytes += f.layer_bytes[i];
          break;
      }
    }
    if (l.embed_on_gpu) {
      p.gpu_weight_bytes += f.embed_gpu_bytes;
    } else {
      p.cpu_weight_bytes += f.embed_bytes;
    }
    if (l.head_on_gpu) {
      p.gpu_weight_bytes += f.head_gpu_bytes;
    } else {
      p.cpu_weight_bytes += f.head_bytes;
    }
    p.gpu_ring_bytes = p.ring_slot_bytes * static_cast<uint64_t>(l.ring_depth);
    if (gpu_kv_layers > 0) p.gpu_weight_bytes += f.rope_gpu_bytes;

    // Activations on each device that computes (the engine gives each its own), logits on the head's
    // device, and on the host the sampled logits and the cross-device staging.
    const bool cpu_computes = !uses_gpu || !l.embed_on_gpu || !l.head_on_gpu ||
                              std::count(l.layers.begin(), l.layers.end(), LayerHome::kCpu) > 0;
    const DType gpu_act = in_.gpu_activation_type;
    if (uses_gpu) {
      p.gpu_fixed_bytes = in_.gpu_fixed_bytes;
      const bool all_on_gpu = l.embed_on_gpu && l.head_on_gpu &&
                              std::all_of(l.layers.begin(), l.layers.end(), [](LayerHome h) { return h == LayerHome::kGpu; });
      if (all_on_gpu) p.gpu_fixed_bytes += in_.gpu_graph_bytes;
      p.gpu_scratch_bytes = Activations::Bytes(c_, l.step_tokens, gpu_act);
      if (l.head_on_gpu) p.gpu_scratch_bytes += DTypeBytes(gpu_act, vocab * l.max_seqs);
    }
    if (cpu_computes) {
      p.cpu_scratch_bytes += Activations::Bytes(c_, l.step_tokens, DType::kF32) + in_.cpu_scratch_fixed +
                             static_cast<uint64_t>(l.step_tokens) * in_.cpu_scratch_per_token;
      if (!l.head_on_gpu) p.cpu_scratch_bytes += DTypeBytes(DType::kF32, vocab * l.max_seqs);
    }
    p.cpu_scratch_bytes +=
        DTypeBytes(DType::kF32, vocab * l.max_seqs) + static_cast<uint64_t>(l.step_tokens) * c_.hidden * 8;

    // KV: one page table for every layer; each layer's pool lives on its device.
    const uint64_t page_layer = KvCache::PageBytesPerLayer(c_, kPageSize, l.kv_type);
    const uint64_t gpu_page = page_layer * gpu_kv_layers;
    const uint64_t cpu_page = page_layer * (c_.n_layers - gpu_kv_layers);
    const int64_t want = std::max<int64_t>(
        min_pages_,
        (int64_t{l.max_seqs} * std::min(max_context_, kAverageTokensPerSeq) + kPageSize - 1) / kPageSize);
    int64_t fit = want;
    // Each budget (0: no limit) must hold what is fixed; the KV pages then fill what is left of both.
    auto limit = [&](uint64_t budget, uint64_t used, uint64_t per_page) {
      if (budget == 0) return true;
      if (used > budget) return false;
      if (per_page > 0) fit = std::min<int64_t>(fit, static_cast<int64_t>((budget - used) / per_page));
      return true;
    };
    const uint64_t gpu_used = p.gpu_weight_bytes + p.gpu_ring_bytes + p.gpu_scratch_bytes + p.gpu_fixed_bytes;
    const uint64_t cpu_used = p.cpu_weight_bytes + p.cpu_pinned_bytes + p.cpu_scratch_bytes;
    if (uses_gpu && (gpu_budget == 0 || !limit(gpu_budget, gpu_used, gpu_page))) return std::nullopt;
    if (!limit(cpu_budget, cpu_used, cpu_page)) return std::nullopt;
    if (fit < min_pages_) return std::nullopt;
    p.kv_pages = fit;
    p.gpu_kv_bytes = gpu_page * static_cast<uint64_t>(fit);
    p.cpu_kv_bytes = cpu_page * static_cast<uint64_t>(fit);

    p.predicted_batch = static_cast<int>(std::clamp<int64_t>(
        p.kv_pages * kPageSize / std::min(max_context_, kPredictedSeqTokens), 1, l.max_seqs));
    p.predicted_decode_tok_s = 1.0 / StepSeconds(p, 1);
    p.predicted_batch_tok_s = p.predicted_batch / StepSeconds(p, p.predicted_batch);
    return p;
  }

  // Seconds of one decode step of `batch` rows: each device reads its weights once per step and does
  // 2 FLOPs per parameter per row; streamed layers' copies overlap the GPU's compute.
  double StepSeconds(const Plan& p, int batch) const {
    const DeviceSpeeds& s = in_.speeds;
    const WeightFormat& f = p.format;
    const double rows = batch;
    double gpu = 0, cpu = 0, copied = 0;
    auto gpu_part = [&](const GpuReads& reads, double params) {
      gpu += s.gpu_part_seconds + reads.Seconds(s, batch, 2 * params * rows);
    };
    const double int8_ops = s.cpu_int8_ops > 0 ? s.cpu_int8_ops : s.cpu_flops;
    auto cpu_part = [&](double bytes, double params, double packed) {
      const double arithmetic = 2 * rows * ((params - packed) / s.cpu_flops + packed / int8_ops);
      cpu += s.cpu_part_seconds + std::max(bytes / s.cpu_bandwidth, arithmetic);
    };
    for (int i = 0; i < c_.n_layers; ++i) {
      const double params = static_cast<double>(f.layer_params);
      if (p.layers[i] == LayerHome::kCpu) {
        cpu_part(static_cast<double>(f.layer_bytes[i]), params, static_cast<double>(f.layer_packed_params));
      } else {
        gpu_part(f.layer_gpu_reads[i], params);
        if (p.layers[i] == LayerHome::kStreamed) copied += static_cast<double>(f.layer_gpu_bytes[i]);
      }
    }
    const double head_params = static_cast<double>(c_.vocab_rows) * c_.hidden;
    if (p.head_on_gpu) {
      gpu_part(c_.tied_output ? f.embed_gpu_reads : f.head_gpu_reads, head_params);
    } else {
      cpu_part(static_cast<double>(c_.tied_output ? f.embed_bytes : f.head_bytes), head_params,
               static_cast<double>(f.head_packed_params));
    }
    return std::max(gpu, copied / s.pcie_bandwidth) + cpu;
  }

  const PlanInput& in_;
  const ModelConfig& c_;
  int max_context_ = 0;
  int64_t min_pages_ = 0;
};

// The smallest multiple of kBudgetResolution for which `fits` holds (fits(top) must hold): one step of
// the resolution less does not fit. Feasibility only grows with the budget, so bisection over the
// multiples finds the edge.
uint64_t SmallestBudget(uint64_t top, const std::function<bool(uint64_t)>& fits) {
  uint64_t lo = 0, hi = (top + kBudgetResolution - 1) / kBudgetResolution;  // in units; fits(hi) holds
  while (hi - lo > 1) {
    const uint64_t mid = lo + (hi - lo) / 2;
    (fits(mid * kBudgetResolution) ? hi : lo) = mid;
  }
  return hi * kBudgetResolution;
}

// "2416M": a value for --gpu-mem / --cpu-mem that is exactly enough.
std::string BudgetFlag(uint64_t bytes) {
  return StrCat(RoundUp(bytes, uint64_t{1} << 20) >> 20, "M");
}

}  // namespace

const char* LayerHomeName(LayerHome home) {
  switch (home) {
    case LayerHome::kCpu:
      return "cpu";
    case LayerHome::kGpu:
      return "gpu";
    case LayerHome::kStreamed:
      return "streamed";
  }
  return "?";
}

bool IsFloatFormat(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16 || t == DType::kF8E4M3;
}

DType LoadTypeFor(const std::string& weight_type, const ModelConfig& c, const TensorSpec& spec) {
  if (spec.is_norm) return DType::kF32;
  if (IsKnownRecipe(weight_type)) {
    // A tied embedding is the output head and gets the head's type (recipe.h).
    const std::string role = spec.role == "token_embd" && c.tied_output ? "output" : spec.role;
    return MixedTypeFor(weight_type, role, spec.layer, c.n_layers, spec.cols);
  }
  DType t;
  if (!ParseDType(weight_type, &t))
    Fail(ErrorCode::kInvalidArgument, "unknown weight type '", weight_type,
         "' (a recipe such as q4_k_m or q8_0, or a type such as q4_k)");
  return t;
}

namespace {

// GpuReads' kinds, and each kind's two limits (GpuReadRate): the fraction of the memory interface's peak
// it reads where the memory bounds it (an H100) and the bytes/s it reads on an H200's SMs.
int GpuReadKind(DType t) {
  switch (t) {
    case DType::kBF16:
      return 0;
    case DType::kF16:
    case DType::kF32:
      return 1;
    case DType::kQ8_0:
      return 2;
    case DType::kQ4_K:
    case DType::kQ6_K:
      return 3;
    case DType::kF8E4M3:
      return 4;
    default:
      return 5;
  }
}
// H100 (3.35 TB/s interface), 3741ca4, batch 1 at 48 + 128 tokens: bf16 186.0, q8_0 280.1, q4_k_m 436.0
// tok/s; H200 (4.8 TB/s): bf16 238.9 and q8_0 348.4 tok/s (b5c3a2f), q4_k_m 494.1 (81545fd); each step
// less the 33 parts' gpu_part_seconds, over the weights it reads (docs/BENCHMARKS.md). f16 and f32 share
// bf16's kernel. The last two kinds keep the H200's single figure (3.9e12 x 0.71 and x 0.5) as a fraction
// of both limits.
constexpr double kMemFraction[GpuReads::kKinds] = {0.888, 0.888, 0.735, 0.702, 0.8125 * 0.71, 0.8125 * 0.5};
constexpr double kH200SmRate[GpuReads::kKinds] = {3.89e12, 3.89e12,       3.14e12,
                                                  2.73e12, 3.9e12 * 0.71, 3.9e12 * 0.5};
// The CUDA backend's MatMul row limits (backends/cuda: kGemvMaxRows, kQuantGemvMaxRows).
constexpr int64_t kGpuGemvRows = 8, kGpuQuantGemvRows = 32;

double KindRate(const DeviceSpeeds& s, int kind) {
  return std::min(s.gpu_peak_bandwidth * kMemFraction[kind], kH200SmRate[kind] * s.gpu_sm_scale);
}

// True when the SMs' limit is the lower one for type t.
bool SmBound(const DeviceSpeeds& s, DType t) {
  const int kind = GpuReadKind(t);
  return KindRate(s, kind) < s.gpu_peak_bandwidth * kMemFraction[kind];
}

}  // namespace

double GpuReadRate(const DeviceSpeeds& s, DType t) {
  return KindRate(s, GpuReadKind(t));
}

void GpuReads::Add(DType t, double n_bytes, double matrix_elems) {
  bytes[GpuReadKind(t)] += n_bytes;
  if (t != DType::kBF16) slab_elems += matrix_elems;
}

double GpuReads::Seconds(const DeviceSpeeds& s, int64_t rows, double flops) const {
  const double bf16 = bytes[0] / KindRate(s, 0);
  double other = 0;
  for (int k = 1; k < kKinds; ++k)
    if (bytes[k] > 0) other += bytes[k] / KindRate(s, k);
  const double arithmetic = flops / s.gpu_flops;
  if (rows <= kGpuQuantGemvRows) {
    const double passes = static_cast<double>((std::max<int64_t>(rows, 1) + kGpuGemvRows - 1) / kGpuGemvRows);
    return std::max(bf16 + other * passes, arithmetic);
  }
  const double slab = 2 * slab_elems / KindRate(s, 0);  // one way: written by the expansion, read by cuBLAS
  return other + slab + std::max(bf16 + slab, arithmetic);
}

WeightFormat MeasureFormat(const ModelConfig& c, const std::string& name, bool quantize_at_load,
                           const std::function<DType(const TensorSpec&)>& type_of,
                           const GpuBytesFn& gpu_bytes) {
  WeightFormat f;
  f.name = name;
  f.quantize_at_load = quantize_at_load;
  f.layer_bytes.assign(c.n_layers, 0);
  f.layer_gpu_bytes.assign(c.n_layers, 0);
  f.layer_gpu_reads.assign(c.n_layers, GpuReads{});
  f.rope_gpu_bytes = RoundUp(DTypeBytes(DType::kF32, c.head_dim / 2), 256);
  uint64_t main_bytes = 0;
  ForEachTensorSpec(c, [&](const TensorSpec& s) {
    const DType t = type_of(s);
    const uint64_t bytes = DTypeBytes(t, s.cols) * static_cast<uint64_t>(s.rows);
    const double elems = s.is_norm ? 0.0 : static_cast<double>(s.rows) * static_cast<double>(s.cols);
    uint64_t dev = gpu_bytes ? gpu_bytes(t, s.rows, s.cols) : bytes;
    dev = dev >= kGpuAllocGranularity ? RoundUp(dev, kGpuAllocGranularity) : RoundUp(dev, 256);
    if (s.layer >= 0) {
      f.layer_bytes[s.layer] += bytes;
      f.layer_gpu_bytes[s.layer] += dev;
      f.layer_gpu_reads[s.layer].Add(t, static_cast<double>(bytes), elems);
      if (s.layer == 0) f.layer_params += s.rows * s.cols;
      if (s.layer == 0 && !s.is_norm && cpu::HasPackedLayout(t)) f.layer_packed_params += s.rows * s.cols;
      if (s.role == "ffn_up" && bytes > main_bytes) {
        main_bytes = bytes;  // the largest matrices decide the speed
        f.main_type = t;
      }
    } else if (s.role == "token_embd") {
      if (c.tied_output && cpu::HasPackedLayout(t)) f.head_packed_params = s.rows * s.cols;
      f.embed_bytes += bytes;
      f.embed_gpu_bytes += dev;
      f.embed_gpu_reads.Add(t, static_cast<double>(bytes), elems);
    } else {
      if (!s.is_norm && cpu::HasPackedLayout(t)) f.head_packed_params = s.rows * s.cols;
      f.head_bytes += bytes;  // the final norm and an untied output head
      f.head_gpu_bytes += dev;
      f.head_gpu_reads.Add(t, static_cast<double>(bytes), elems);
    }
  });
  return f;
}

std::vector<WeightFormat> CandidateFormats(const ModelConfig& c,
                                           const std::function<DType(const TensorSpec&)>& stored,
                                           const std::string& stored_name, const std::string& weight_type,
                                           const GpuBytesFn& gpu_bytes) {
  auto load_as = [&](const std::string& type) {
    return MeasureFormat(
        c, type, true, [&](const TensorSpec& s) { return LoadTypeFor(type, c, s); }, gpu_bytes);
  };
  if (!weight_type.empty()) {
    WeightFormat f = load_as(weight_type);
    // Asking for the format the weights already have quantises nothing.
    bool changes = false;
    ForEachTensorSpec(c, [&](const TensorSpec& s) {
      changes |= !s.is_norm && LoadTypeFor(weight_type, c, s) != stored(s);
    });
    f.quantize_at_load = changes;
    return {f};
  }
  std::vector<WeightFormat> out{MeasureFormat(c, stored_name, false, stored, gpu_bytes)};
  if (stored_name.empty()) out[0].name = DTypeName(out[0].main_type);
  if (!IsFloatFormat(out[0].main_type)) return out;
  for (const char* recipe : {"q8_0", "q4_k_m"}) {
    WeightFormat f = load_as(recipe);
    if (Sum(f.layer_bytes) < Sum(out.back().layer_bytes)) out.push_back(std::move(f));
  }
  return out;
}

int Plan::CountLayers(LayerHome home) const {
  return static_cast<int>(std::count(layers.begin(), layers.end(), home));
}

DeviceSpeeds MeasuredCpuSpeeds(DeviceSpeeds base) {
  struct Measured {
    double bandwidth, flops, int8_ops;
  };
  static const Measured m = []() -> Measured {
    try {
      const cpu::Isa isa = cpu::DefaultIsa();
      return {MeasureHostReadBandwidthBest(size_t{256} << 20, 2),
              MeasureHostFmaPeak(5, isa == cpu::Isa::kAvx512) * 1e9, MeasureHostInt8Peak(isa, 5) * 1e9};
    } catch (const Error&) {  // no memory for the probe, or $HYMT_CPU_ISA names what the CPU lacks
      return {0, 0, 0};
    }
  }();
  if (m.bandwidth > 0) base.cpu_bandwidth = m.bandwidth * 1e9 * kCpuReadFraction;
  if (m.flops > 0) base.cpu_flops = m.flops * kCpuFlopFraction;
  if (m.int8_ops > 0) base.cpu_int8_ops = m.int8_ops * kCpuInt8Fraction;
  base.cpu_measured = m.bandwidth > 0;
  return base;
}

DeviceSpeeds GpuSpeedsForDevice(DeviceSpeeds base, double peak, double sm_clock_rate) {
  if (peak > 0) {
    base.gpu_peak_bandwidth = peak;
    base.gpu_sm_scale = sm_clock_rate > 0 ? sm_clock_rate / kH200SmClockRate : 1.0;
    base.gpu_described = true;
  }
  return base;
}

Plan MakePlan(const PlanInput& in) {
  const ModelConfig& c = in.config;
  if (in.formats.empty()) Fail(ErrorCode::kInvalidArgument, "the planner needs at least one weight format");
  for (const WeightFormat& f : in.formats)
    HYMT_CHECK(static_cast<int>(f.layer_bytes.size()) == c.n_layers &&
               static_cast<int>(f.layer_gpu_bytes.size()) == c.n_layers &&
               static_cast<int>(f.layer_gpu_reads.size()) == c.n_layers);
  if (in.device != "auto" && in.device != "cpu" && in.device != "gpu")
    Fail(ErrorCode::kInvalidArgument, "planner device must be auto, cpu or gpu, got '", in.device, "'");
  if (!in.mode.empty() && in.mode != "resident" && in.mode != "partial" && in.mode != "streamed" &&
      in.mode != "cpu")
    Fail(ErrorCode::kInvalidArgument, "plan mode must be resident, partial, streamed or cpu, got '", in.mode,
         "'");
  if (in.gpu_layers >= c.n_layers)
    Fail(ErrorCode::kInvalidArgument, "--gpu-layers ", in.gpu_layers, " must be below the model's ",
         c.n_layers, " layers (all layers on the GPU is the resident plan)");
  if (in.ring_depth < 0 || in.ring_depth > static_cast<int>(Ops::kUploadTicketWindow))
    Fail(ErrorCode::kInvalidArgument, "--ring-depth must be between 1 and ", Ops::kUploadTicketWindow,
         ", got ", in.ring_depth);
  if (in.device == "gpu" && !in.have_gpu)
    Fail(ErrorCode::kUnavailable, "a GPU was asked for, but no CUDA device is available");
  if (in.mode == "cpu" && in.device == "gpu")
    Fail(ErrorCode::kInvalidArgument, "plan mode cpu with a GPU device");

  Planner planner(in);
  // The context is already created when the free memory is read (CudaMemoryInfo creates it), and it is
  // part of gpu_fixed_bytes: add it back to what the device reports free.
  // What the device can give: its free memory plus the context, which exists already when the free
  // memory is read (CudaMemoryInfo creates it) and is part of gpu_fixed_bytes.
  const uint64_t gpu_available = in.gpu_free > 0 ? in.gpu_free + kGpuContextBytes : 0;
  uint64_t gpu_budget = in.gpu_budget;
  if (gpu_budget == 0 && gpu_available > kGpuMargin) gpu_budget = gpu_available - kGpuMargin;
  std::vector<std::string> notes;
  if (gpu_available > 0 && gpu_budget > gpu_available) {
    notes.push_back(StrCat("--gpu-mem ", FormatBytes(gpu_budget), " is more than the device has free (",
                           FormatBytes(in.gpu_free), "); planning for what it has"));
    gpu_budget = gpu_available;
  }
  const uint64_t cpu_budget =
      in.cpu_budget > 0 ? in.cpu_budget
                        : (in.cpu_available > kCpuMargin ? in.cpu_available - kCpuMargin : in.cpu_available);
  const bool try_gpu = in.have_gpu && in.device != "cpu" && in.mode != "cpu";
  const bool try_cpu = in.device != "gpu" && (in.mode.empty() || in.mode == "cpu");

  if (in.max_context > 0 && c.max_positions > 0 && in.max_context > c.max_positions)
    notes.push_back(
        StrCat("context ", in.max_context, " exceeds the model's trained ", c.max_positions, " positions"));
  std::optional<Plan> plan;
  if (try_gpu) plan = planner.Gpu(gpu_budget, cpu_budget);
  if (!plan && try_gpu && try_cpu)
    notes.push_back(
        StrCat("the GPU budget of ", FormatBytes(gpu_budget), " holds no GPU plan; running on the CPU"));
  if (!plan && try_cpu) plan = planner.Cpu(cpu_budget);

  if (!plan) {
    // Name the smallest budgets that would work, each with the other budget as given.
    const WeightFormat& all = in.formats.front();
    const uint64_t everything = Sum(all.layer_bytes) + all.embed_bytes + all.head_bytes;
    const uint64_t hi = 2 * (everything + Sum(all.layer_gpu_bytes) + all.embed_gpu_bytes +
                             all.head_gpu_bytes + in.gpu_fixed_bytes) +
                        (uint64_t{64} << 30);
    std::string msg = "nothing fits:";
    std::vector<std::string> fixes;
    if (try_gpu) {
      if (planner.Gpu(hi, cpu_budget)) {
        const uint64_t need =
            SmallestBudget(hi, [&](uint64_t b) { return planner.Gpu(b, cpu_budget).has_value(); });
        const Plan smallest = *planner.Gpu(need, cpu_budget);
        msg += StrCat(" the GPU budget is ", FormatBytes(gpu_budget), "; the smallest GPU plan (",
                      smallest.mode, ", ", smallest.format.name, ") needs ", FormatBytes(need), ";");
        fixes.push_back(StrCat("--gpu-mem ", BudgetFlag(need)));
      } else {
        msg += StrCat(" no GPU plan fits the host budget of ", FormatBytes(cpu_budget),
                      " (streamed and partial plans "
                      "keep weights in host memory);");
      }
    }
    if (try_cpu || !try_gpu) {
      const PlanInput* cpu_in = &in;
      PlanInput cpu_only;
      if (!try_cpu) {  // --device gpu without a GPU fails above; here a mode excluded the CPU
        cpu_only = in;
        cpu_only.mode = "cpu";
        cpu_in = &cpu_only;
      }
      Planner cpu_planner(*cpu_in);
      const uint64_t need = SmallestBudget(hi, [&](uint64_t b) { return cpu_planner.Cpu(b).has_value(); });
      msg += StrCat(" the host budget is ", FormatBytes(cpu_budget), "; the smallest CPU plan (",
                    cpu_planner.Cpu(need)->format.name, ") needs ", FormatBytes(need), ";");
      if (try_cpu) fixes.push_back(StrCat("--cpu-mem ", BudgetFlag(need)));
    }
    if (!fixes.empty()) msg += " give " + StrJoin(fixes, " or ");
    if (!in.mode.empty()) msg += StrCat(" (with --plan-mode ", in.mode, ")");
    Fail(ErrorCode::kResourceExhausted, msg);
  }

  Plan p = std::move(*plan);
  p.notes.insert(p.notes.begin(), notes.begin(), notes.end());
  if (p.format.quantize_at_load)
    p.notes.push_back(StrCat("weights are quantised to ", p.format.name, " at load (",
                             in.formats.front().name,
                             " does not fit this plan; --weight-type chooses a format)"));
  if (p.mode == "streamed")
    p.notes.push_back(StrCat(p.CountLayers(LayerHome::kStreamed),
                             " layers are copied from pinned host memory every "
                             "step through a ring of ",
                             p.ring_depth,
                             " GPU slots; each step moves the same bytes "
                             "whatever its batch, so run many sequences at once"));
  if (p.mode != "cpu") {
    char speeds[256];
    const DType main = p.format.main_type;
    const double rate = GpuReadRate(in.speeds, main);
    if (in.speeds.gpu_described)
      std::snprintf(speeds, sizeof speeds,
                    "predictions take the GPU to read %s weights at %.0f GB/s (bound by its %s; memory "
                    "interface's %.0f GB/s, SMs x clock %.2fx an H200's)",
                    DTypeName(main), rate / 1e9, SmBound(in.speeds, main) ? "SMs" : "memory",
                    in.speeds.gpu_peak_bandwidth / 1e9, in.speeds.gpu_sm_scale);
    else
      std::snprintf(speeds, sizeof speeds,
                    "predictions take the GPU to read %s weights at %.0f GB/s (assumed: an H200)",
                    DTypeName(main), rate / 1e9);
    p.notes.push_back(speeds);
  }
  if (p.mode == "cpu" || p.mode == "partial") {
    char speeds[224];
    char int8[64] = "";
    if (in.speeds.cpu_int8_ops > 0 && p.format.layer_packed_params > 0)
      std::snprintf(int8, sizeof int8, ", %.0f GOP/s int8 (packed weights)", in.speeds.cpu_int8_ops / 1e9);
    std::snprintf(speeds, sizeof speeds,
                  "predictions take the CPU at %.1f GB/s of weights read, %.0f GFLOP/s%s (%s)",
                  in.speeds.cpu_bandwidth / 1e9, in.speeds.cpu_flops / 1e9, int8,
                  in.speeds.cpu_measured ? "measured on this host" : "assumed");
    p.notes.push_back(speeds);
  }
  if (p.mode == "partial")
    p.notes.push_back(StrCat("layers ", p.CountLayers(LayerHome::kGpu), "..", c.n_layers - 1,
                             " run on the CPU; activations cross to the CPU and back once per step"));
  if (p.mode == "cpu" && !in.formats.front().quantize_at_load && IsFloatFormat(in.formats.front().main_type))
    p.notes.push_back(
        "the CPU reads every weight once per token: --weight-type q8_0 (or q4_k_m) is ~2x (~3x) faster");
  if (p.kv_pages * p.page_size < int64_t{p.max_seqs} * std::min(p.max_context, kAverageTokensPerSeq))
    p.notes.push_back(StrCat("the KV cache holds ", p.kv_pages * p.page_size, " tokens: fewer than ",
                             p.max_seqs, " sequences of ", kAverageTokensPerSeq,
                             " tokens run at once (admission waits for pages)"));
  return p;
}

std::string Plan::Table(const ModelConfig& c) const {
  std::string out;
  char line[256];
  auto row = [&](const char* what, const std::string& gpu, const std::string& cpu) {
    std::snprintf(line, sizeof line, "  %-24s %14s %14s\n", what, gpu.c_str(), cpu.c_str());
    out += line;
  };
  auto bytes = [](uint64_t b) { return b ? FormatBytes(b) : std::string("-"); };
  out += StrCat("plan: ", mode, ", ", format.name, format.quantize_at_load ? " (quantised at load)" : "",
                "; ", CountLayers(LayerHome::kGpu), " of ", c.n_layers, " layers resident on the GPU");
  if (CountLayers(LayerHome::kStreamed)) out += StrCat(", ", CountLayers(LayerHome::kStreamed), " streamed");
  if (CountLayers(LayerHome::kCpu)) out += StrCat(", ", CountLayers(LayerHome::kCpu), " on the CPU");
  out += StrCat("; embedding on the ", embed_on_gpu ? "GPU" : "CPU", ", head on the ",
                head_on_gpu ? "GPU" : "CPU", "\n");
  row("", "GPU", "CPU");
  row("weights", bytes(gpu_weight_bytes), bytes(cpu_weight_bytes));
  if (mode == "streamed") row("streaming ring, pinned", bytes(gpu_ring_bytes), bytes(cpu_pinned_bytes));
  row("KV cache", bytes(gpu_kv_bytes), bytes(cpu_kv_bytes));
  row("activations, logits", bytes(gpu_scratch_bytes), bytes(cpu_scratch_bytes));
  row("context, graphs, scratch", bytes(gpu_fixed_bytes), "-");
  row("total", bytes(gpu_total()), bytes(cpu_total()));
  row("budget", bytes(gpu_budget), cpu_budget ? FormatBytes(cpu_budget) : std::string("unlimited"));
  out += StrCat("  KV: ", kv_pages, " pages of ", page_size, " tokens (", kv_pages * page_size,
                " tokens) in ", DTypeName(kv_type), "; up to ", max_seqs, " sequences of up to ", max_context,
                " tokens; ", max_step_tokens, " tokens per step\n");
  if (mode == "streamed")
    out += StrCat("  streaming: ", CountLayers(LayerHome::kStreamed), " layers copied per step through ",
                  ring_depth, " GPU slots of ", FormatBytes(ring_slot_bytes), " from pinned host memory\n");
  std::snprintf(line, sizeof line,
                "  predicted decode: %.1f tokens/s at batch 1, %.0f tokens/s at batch %d\n",
                predicted_decode_tok_s, predicted_batch_tok_s, predicted_batch);
  out += line;
  for (const std::string& n : notes) out += "  note: " + n + "\n";
  return out;
}

}  // namespace hymt
