// hymt plan: what a model needs and where it would go, for given budgets, before anything runs (also
// from a shape name alone, so a model can be planned before it is downloaded).
#include <cstdio>
#include <map>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/status.h"
#include "model/shapes.h"
#include "runtime/planner.h"
#ifdef HYMT_HAVE_CUDA
#include "backends/cuda/cuda_ops.h"
#endif

namespace hymt {

int RunPlan(int argc, char** argv) {
  Args args("hymt plan [--model PATH | --shape hunyuan-7b|hy-1.8b [--type bf16|q8_0|q4_k_m|...]] [budgets]");
  args.Option("model", "a model folder or GGUF file (default: the bundled demo model)")
      .Option("shape", "plan a shape without its files: hunyuan-7b, hy-1.8b, tiny")
      .Option("type", "with --shape: the stored weight format (a recipe such as q4_k_m)", "bf16")
      .Option("weight-type", "quantise at load to this format (default: the planner's choice)")
      .Option("device", "auto, cpu or cuda", "auto")
      .Option("gpu-mem", "GPU budget, e.g. 8G (plans for a GPU even where none is present)")
      .Option("cpu-mem", "host memory budget, e.g. 16G (default: available memory minus a margin)")
      .Option("max-seqs", "sequences at once (0: planner's choice)", "0")
      .Option("ctx", "tokens per sequence (0: planner's choice)", "0")
      .Option("kv-type", "KV cache type (default: f32 on the CPU, bf16 on a GPU)")
      .Option("plan-mode", "force a mode: resident, partial, streamed or cpu (default: the planner's choice)")
      .Option("gpu-layers", "partial and streamed plans: layers resident on the GPU (-1: planner's choice)",
              "-1")
      .Option("ring-depth", "streamed plans: GPU slots for streamed layers (0: planner's choice)", "0");
  if (!args.Parse(argc, argv)) return 0;
  PlanInput in;
  if (args.Has("shape") && args.Has("model"))
    Fail(ErrorCode::kInvalidArgument, "give --model or --shape, not both");
  GpuBytesFn gpu_bytes;
#ifdef HYMT_HAVE_CUDA
  gpu_bytes = [](DType t, int64_t rows, int64_t cols) { return CudaPreparedWeightBytes(t, rows, cols); };
  in.gpu_fixed_bytes = kGpuContextBytes + CudaOpsScratchBytes(CudaOpsOptions{});
#endif
  const std::string weight_type = args.Get("weight-type");
  if (args.Has("shape")) {
    in.config = ShapeConfig(args.Get("shape"));
    const std::string recipe = args.Get("type");
    const ModelConfig& c = in.config;
    in.formats = CandidateFormats(
        c, [&](const TensorSpec& s) { return LoadTypeFor(recipe, c, s); }, recipe, weight_type, gpu_bytes);
  } else {
    std::string path = args.Get("model");
    if (path.empty()) path = FindDemoModel();
    if (path.empty())
      Fail(ErrorCode::kNotFound, "no --model given and the demo model was not found (set HYMT_DEMO_MODEL)");
    LoadedModel m = LoadModel(path);
    in.config = m.config;
    std::map<std::string, DType> stored;
    ForEachTensor(m.config, m.model->mutable_weights(),
                  [&](const TensorSpec& s, Weight& w) { stored[s.gguf_name] = w.dtype; });
    in.formats = CandidateFormats(
        m.config, [&](const TensorSpec& s) { return stored.at(s.gguf_name); }, "", weight_type, gpu_bytes);
  }
  const std::string device = args.Get("device");
  if (device != "auto" && device != "cpu" && device != "cuda")
    Fail(ErrorCode::kInvalidArgument, "--device must be auto, cpu or cuda");
  in.device = device == "cuda" ? "gpu" : device;
  if (args.Has("gpu-mem")) {
    in.have_gpu = true;
    in.gpu_budget = args.GetBytes("gpu-mem");
  } else {
#ifdef HYMT_HAVE_CUDA
    size_t free_b = 0, total_b = 0;
    if (device != "cpu" && CudaMemoryInfo(0, &free_b, &total_b)) {
      in.have_gpu = true;
      in.gpu_free = free_b;
    }
#endif
  }
#ifdef HYMT_HAVE_CUDA
  // A GPU in this machine: the predictions take its memory system (the budget may be a what-if).
  if (device != "cpu" && CudaDeviceCount() > 0)
    in.speeds = GpuSpeedsForDevice(in.speeds, CudaPeakMemoryBandwidth(0), CudaSmClockRate(0));
#endif
  SetCpuScratch(in);
  in.cpu_available = HostMemoryAvailable();
  if (args.Has("cpu-mem")) in.cpu_budget = args.GetBytes("cpu-mem");
  in.max_seqs = static_cast<int>(args.GetInt("max-seqs"));
  in.max_context = static_cast<int>(args.GetInt("ctx"));
  in.mode = args.Get("plan-mode");
  in.gpu_layers = static_cast<int>(args.GetInt("gpu-layers"));
  in.ring_depth = static_cast<int>(args.GetInt("ring-depth"));
  if (args.Has("kv-type")) {
    DType kv;
    if (!ParseDType(args.Get("kv-type"), &kv)) Fail(ErrorCode::kInvalidArgument, "unknown --kv-type");
    in.cpu_kv_type = in.gpu_kv_type = kv;
  }
  // Without a GPU the plan's prediction uses this host's CPU speeds (nothing is chosen by them).
  if (!in.have_gpu) in.speeds = MeasuredCpuSpeeds(in.speeds);
  Plan p = MakePlan(in);
  std::printf("%s", p.Table(in.config).c_str());
  return 0;
}

}  // namespace hymt
