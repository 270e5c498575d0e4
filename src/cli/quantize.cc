// hymt quantize: writes a model (HF folder or GGUF) as a GGUF file in another weight format.
#include <chrono>
#include <cstdio>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/status.h"
#include "runtime/gguf_export.h"

namespace hymt {

int RunQuantize(int argc, char** argv) {
  Args args("hymt quantize --model HF_DIR|FILE.gguf --type f16|bf16|q8_0|q6_k|q5_k_m|q4_k_m|q4_0 -o OUT.gguf");
  args.Option("model", "the model to convert (default: the demo model)")
      .Option("type", "target format (a recipe: q4_k_m mixes q4_k and q6_k as llama.cpp does)", "q8_0")
      .Option("o", "output GGUF file");
  if (!args.Parse(argc, argv)) return 0;
  if (!args.Has("o")) Fail(ErrorCode::kInvalidArgument, "-o OUT.gguf is required");
  std::string path = args.Get("model");
  if (path.empty()) path = FindDemoModel();
  auto t0 = std::chrono::steady_clock::now();
  LoadedModel m = LoadModel(path);
  ExportGguf(m, args.Get("type"), args.Get("o"));
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "wrote %s (%s) in %.1fs\n", args.Get("o").c_str(), args.Get("type").c_str(), secs);
  return 0;
}

}  // namespace hymt
