// hymt plan: what a model needs and where it would go, for given budgets, before anything runs (also
// from a shape name alone, so a model can be planned before it is downloaded).
#include <cstdio>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/status.h"
#include "model/shapes.h"
#include "quant/recipe.h"
#include "runtime/planner.h"

namespace hymt {

int RunPlan(int argc, char** argv) {
  Args args("hymt plan (--model PATH | --shape hunyuan-7b|hy-1.8b [--type bf16|q8_0|q4_k_m|...]) [budgets]");
  args.Option("model", "a model folder or GGUF file")
      .Option("shape", "plan a shape without its files: hunyuan-7b, hy-1.8b, tiny")
      .Option("type", "with --shape: the weight format (a recipe such as q4_k_m)", "bf16")
      .Option("device", "auto, cpu or cuda", "auto")
      .Option("gpu-mem", "GPU budget, e.g. 8G (required to plan a GPU without one present)")
      .Option("cpu-mem", "host memory budget, e.g. 16G", "")
      .Option("max-seqs", "sequences at once (0: planner's choice)", "0")
      .Option("ctx", "tokens per sequence (0: planner's choice)", "0")
      .Option("kv-type", "KV cache type (default: f32 on the CPU, bf16 on a GPU)");
  if (!args.Parse(argc, argv)) return 0;
  PlanInput in;
  if (args.Has("shape") == args.Has("model")) Fail(ErrorCode::kInvalidArgument, "give --model or --shape (one of them)");
  if (args.Has("shape")) {
    in.config = ShapeConfig(args.Get("shape"));
    const std::string recipe = args.Get("type");
    if (!IsKnownRecipe(recipe)) Fail(ErrorCode::kInvalidArgument, "unknown --type '", recipe, "'");
    in.layer_bytes.assign(in.config.n_layers, 0);
    ForEachTensorSpec(in.config, [&](const TensorSpec& s) {
      const std::string role = (s.role == "token_embd" && in.config.tied_output) ? "output" : s.role;
      DType t = s.is_norm ? DType::kF32 : MixedTypeFor(recipe, role, s.layer, in.config.n_layers, s.cols);
      const int64_t bytes = static_cast<int64_t>(DTypeBytes(t, s.rows * s.cols));
      if (s.layer >= 0) {
        in.layer_bytes[s.layer] += bytes;
      } else if (s.role == "token_embd") {
        in.embed_bytes += bytes;
        in.weight_type = t;
      } else if (s.role == "output") {
        in.head_bytes += bytes;
      }
    });
  } else {
    LoadedModel m = LoadModel(args.Get("model"));
    in.config = m.config;
    in.layer_bytes.assign(m.config.n_layers, 0);
    ForEachTensor(m.config, m.model->mutable_weights(), [&](const TensorSpec& s, Weight& w) {
      const int64_t bytes = static_cast<int64_t>(w.bytes());
      if (s.layer >= 0) {
        in.layer_bytes[s.layer] += bytes;
      } else if (s.role == "token_embd") {
        in.embed_bytes += bytes;
        in.weight_type = w.dtype;
      } else if (s.role == "output") {
        in.head_bytes += bytes;
      }
    });
  }
  in.device = args.Get("device");
  if (args.Has("gpu-mem")) {
    in.have_gpu = true;
    in.gpu_budget = in.gpu_free = args.GetBytes("gpu-mem");
  }
  if (!args.Get("cpu-mem").empty()) in.cpu_budget = args.GetBytes("cpu-mem");
  in.max_seqs = static_cast<int>(args.GetInt("max-seqs"));
  in.max_context = static_cast<int>(args.GetInt("ctx"));
  if (args.Has("kv-type")) {
    DType kv;
    if (!ParseDType(args.Get("kv-type"), &kv)) Fail(ErrorCode::kInvalidArgument, "unknown --kv-type");
    in.cpu_kv_type = in.gpu_kv_type = kv;
  }
  Plan p = MakePlan(in);
  std::printf("%s", p.Table(in.config).c_str());
  return 0;
}

}  // namespace hymt
