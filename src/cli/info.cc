// hymt info: what a model is and what it needs, without running it.
#include <cstdio>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/status.h"
#include "runtime/kv_cache.h"

namespace hymt {

int RunInfo(int argc, char** argv) {
  Args args("hymt info [--model PATH]");
  args.Option("model", "model folder or GGUF file (default: the demo model)");
  if (!args.Parse(argc, argv)) return 0;
  std::string path = args.Get("model");
  if (path.empty()) path = FindDemoModel();
  LoadedModel m = LoadModel(path);
  const ModelConfig& c = m.config;
  std::printf("model         %s\n", m.name.c_str());
  std::printf("path          %s (%s)\n", m.path.c_str(), m.format.c_str());
  if (!m.description.empty()) std::printf("description   %s\n", m.description.c_str());
  std::printf("architecture  %s: %d layers, hidden %d, FFN %d, %d query heads, %d key/value heads, head_dim %d\n",
              c.architecture.c_str(), c.n_layers, c.hidden, c.ffn, c.n_heads, c.n_kv_heads, c.head_dim);
  std::printf("rope          base %.6f (theta %.1f, alpha %.1f), rotate-half, q/k norm after RoPE\n",
              c.rope.Base(c.head_dim), c.rope.theta, c.rope.alpha);
  std::printf("vocabulary    %d tokens, %lld embedding rows, output head %s\n", m.tokenizer->n_tokens(),
              static_cast<long long>(c.vocab_rows), c.tied_output ? "tied to the embedding" : "separate");
  std::printf("parameters    %lld (%.2f B)\n", static_cast<long long>(c.ParameterCount()), c.ParameterCount() / 1e9);
  std::printf("weights       %s in total\n", FormatBytes(static_cast<uint64_t>(m.WeightBytes())).c_str());
  for (const auto& [type, counts] : m.TypeSummary())
    std::printf("  %-8s %4lld tensors  %s\n", type.c_str(), static_cast<long long>(counts.first),
                FormatBytes(static_cast<uint64_t>(counts.second)).c_str());
  std::printf("stop tokens   %s\n", StrJoin(m.stop_ids, ", ").c_str());
  std::printf("languages     %s\n", m.languages.empty() ? "all 38" : StrJoin(m.languages, ", ").c_str());
  for (DType kv : {DType::kF32, DType::kBF16, DType::kQ8_0}) {
    size_t per_token = KvCache::PageBytesPerLayer(c, 1, kv) * c.n_layers;
    std::printf("KV cache      %s per token in %s (%s for 1,024 tokens)\n", FormatBytes(per_token).c_str(),
                DTypeName(kv), FormatBytes(per_token * 1024).c_str());
  }
  return 0;
}

}  // namespace hymt
