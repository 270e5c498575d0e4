#include "cli/common.h"

#include "core/mapped_file.h"
#include "core/status.h"

namespace hymt {

void AddSessionOptions(Args& args) {
  args.Option("model", "model folder (Hugging Face) or GGUF file; default: the bundled demo model")
      .Option("device", "auto, cpu, cuda or cuda:N", "auto")
      .Option("threads", "CPU threads (0: all cores)", "0")
      .Option("max-seqs", "sequences running at once (0: planner's choice)", "0")
      .Option("ctx", "tokens per sequence, prompt and output (0: planner's choice)", "0")
      .Option("kv-type", "KV cache type: f32, f16, bf16, q8_0 (default: the activation type)")
      .Option("weight-type",
              "quantise weights at load: a recipe (q8_0, q4_k_m, q5_k_m, q6_k, ...) or a type (q4_k, q5_k, ...); "
              "default: as stored, or what the planner picks to fit")
      .Option("gpu-mem", "GPU memory budget, e.g. 6G (default: free memory minus a margin)")
      .Option("cpu-mem", "host memory budget, e.g. 16G (default: available memory minus a margin)")
      .Option("plan-mode", "force a memory mode: resident, partial, streamed or cpu (default: the planner's)")
      .Option("gpu-layers", "partial and streamed plans: layers resident on the GPU (-1: the planner's)", "-1")
      .Option("ring-depth", "streamed plans: GPU slots for streamed layers (0: the planner's)", "0")
      .Option("cuda-graphs", "decode steps on one CUDA device as CUDA graphs: on or off", "on")
      .Option("normalize", "tokenizer input normalisation: none or nfc (default: the tokenizer's own)");
}

SessionOptions SessionOptionsFromArgs(const Args& args) {
  SessionOptions o;
  o.model = args.Get("model");
  o.device = args.Get("device");
  o.threads = static_cast<int>(args.GetInt("threads"));
  o.max_seqs = static_cast<int>(args.GetInt("max-seqs"));
  o.max_context = static_cast<int>(args.GetInt("ctx"));
  o.kv_type = args.Get("kv-type");
  o.weight_type = args.Get("weight-type");
  if (args.Has("gpu-mem")) o.gpu_mem = args.GetBytes("gpu-mem");
  if (args.Has("cpu-mem")) o.cpu_mem = args.GetBytes("cpu-mem");
  o.plan_mode = args.Get("plan-mode");
  o.gpu_layers = static_cast<int>(args.GetInt("gpu-layers"));
  o.ring_depth = static_cast<int>(args.GetInt("ring-depth"));
  const std::string graphs = args.Get("cuda-graphs");
  if (graphs != "on" && graphs != "off")
    Fail(ErrorCode::kInvalidArgument, "--cuda-graphs takes on or off, not '", graphs, "'");
  o.cuda_graphs = graphs == "on";
  o.load.normalize = args.Get("normalize");
  if (!o.load.normalize.empty() && o.load.normalize != "none" && o.load.normalize != "nfc")
    Fail(ErrorCode::kInvalidArgument, "--normalize must be none or nfc");
  if (o.threads < 0 || o.max_seqs < 0 || o.max_context < 0)
    Fail(ErrorCode::kInvalidArgument, "--threads, --max-seqs and --ctx must not be negative");
  return o;
}

void PrintModelBanner(const Session& session, FILE* out) {
  const LoadedModel& m = session.model();
  if (m.is_demo) {
    std::fprintf(out, "hymt: no --model given; using the bundled demo model (%s, %s). It knows %s only.\n",
                 m.name.c_str(), m.path.c_str(), StrJoin(m.languages, ", ").c_str());
  } else {
    std::fprintf(out, "hymt: model %s (%s)\n", m.name.c_str(), m.path.c_str());
  }
}

std::vector<std::string> ReadLines(FILE* in) {
  std::vector<std::string> lines;
  std::string cur;
  int ch;
  while ((ch = std::fgetc(in)) != EOF) {
    if (ch == '\n') {
      if (!cur.empty() && cur.back() == '\r') cur.pop_back();
      lines.push_back(std::move(cur));
      cur.clear();
    } else {
      cur.push_back(static_cast<char>(ch));
    }
  }
  if (!cur.empty()) lines.push_back(std::move(cur));
  return lines;
}

std::vector<std::string> ReadFileLines(const std::string& path) {
  std::string text = ReadFile(path);
  std::vector<std::string> lines = StrSplit(text, '\n');
  if (!lines.empty() && lines.back().empty()) lines.pop_back();
  for (auto& l : lines)
    if (!l.empty() && l.back() == '\r') l.pop_back();
  return lines;
}

}  // namespace hymt
