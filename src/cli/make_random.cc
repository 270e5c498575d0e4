// hymt make-random: a checkpoint of a real shape with random (normal, never zero) weights, for
// benchmarks and parity runs where the numbers do not matter but the shapes and bytes do.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/half.h"
#include "core/json.h"
#include "core/mapped_file.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "formats/safetensors_writer.h"
#include "model/shapes.h"
#include "model/weights.h"
#include "quant/recipe.h"
#include "runtime/gguf_export.h"
#include "runtime/loader.h"

namespace hymt {
namespace {

// Fast normal samples: splitmix64 picks one of 4096 equal-probability quantiles of N(0, 1), which
// is normal enough for weights whose values do not matter, and ~1 ns per value.
class NormalTable {
 public:
  NormalTable() {
    for (int i = 0; i < kSize; ++i) table_[i] = static_cast<float>(InverseNormal((i + 0.5) / kSize));
  }
  float Sample(uint64_t& state) const {
    state += 0x9e3779b97f4a7c15ull;
    uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return table_[z & (kSize - 1)];
  }

 private:
  static constexpr int kSize = 4096;
  // Acklam's rational approximation of the normal quantile (relative error < 1.2e-9).
  static double InverseNormal(double p) {
    static const double a[] = {-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02,
                               1.383577518672690e+02, -3.066479806614716e+01, 2.506628277459239e+00};
    static const double b[] = {-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
                               6.680131188771972e+01, -1.328068155288572e+01};
    static const double c[] = {-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
                               -2.549732539343734e+00, 4.374664141464968e+00, 2.938163982698783e+00};
    static const double d[] = {7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
                               3.754408661907416e+00};
    if (p < 0.02425) {
      double q = std::sqrt(-2 * std::log(p));
      return (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
             ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
    }
    if (p > 1 - 0.02425) return -InverseNormal(1 - p);
    double q = p - 0.5, r = q * q;
    return (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
           (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
  }
  float table_[kSize];
};

// Fills `n` values of `type` with mean + std * N(0, 1), on all cores, deterministically from seed.
void FillNormal(uint8_t* dst, int64_t n, DType type, float mean, float std_dev, uint64_t seed) {
  static const NormalTable table;
  constexpr int64_t kChunk = 1 << 16;
  DefaultThreadPool().ParallelFor((n + kChunk - 1) / kChunk, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      uint64_t state = seed * 0x100000001b3ull + static_cast<uint64_t>(c) * 0x9e3779b97f4a7c15ull;
      const int64_t begin = c * kChunk, end = std::min(n, begin + kChunk);
      for (int64_t i = begin; i < end; ++i) {
        float v = mean + std_dev * table.Sample(state);
        if (v == 0.0f) v = std_dev * 1e-3f;  // never exactly zero
        switch (type) {
          case DType::kF32: std::memcpy(dst + 4 * i, &v, 4); break;
          case DType::kBF16: {
            uint16_t h = F32ToBf16(v);
            std::memcpy(dst + 2 * i, &h, 2);
            break;
          }
          case DType::kF16: {
            uint16_t h = F32ToF16(v);
            std::memcpy(dst + 2 * i, &h, 2);
            break;
          }
          default: HYMT_CHECK(false);
        }
      }
    }
  });
}

// A minimal byte-level vocabulary (the 256 single bytes, then the Hunyuan special tokens): random
// models need a tokenizer to load, not a good one.
void WriteByteVocabulary(const std::string& path) {
  static const char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::ofstream out(path);
  for (int b = 0; b < 256; ++b) {
    char enc[5] = {kB64[b >> 2], kB64[(b & 3) << 4], '=', '=', 0};
    out << enc << ' ' << b << '\n';
  }
  if (!out) Fail(ErrorCode::kInternal, "cannot write ", path);
}

}  // namespace

int RunMakeRandom(int argc, char** argv) {
  Args args("hymt make-random --shape hunyuan-7b|hy-1.8b|tiny --type f32|f16|bf16 -o DIR");
  args.Option("shape", "hunyuan-7b, hy-1.8b or tiny", "hunyuan-7b")
      .Option("type", "f32, f16, bf16 (a Hugging Face folder) or a GGUF format: q8_0, q6_k, q5_k_m, q4_k_m, "
                      "q5_0, q5_1, q4_0, q4_1 (-o then names a .gguf file)",
              "bf16")
      .Option("o", "output folder, or .gguf file for the quantised types")
      .Option("seed", "random seed", "1")
      .Option("shard-gib", "largest safetensors shard in GiB", "4");
  if (!args.Parse(argc, argv)) return 0;
  if (!args.Has("o")) Fail(ErrorCode::kInvalidArgument, "-o DIR is required");
  ModelConfig c = ShapeConfig(args.Get("shape"));
  DType type;
  const std::string type_name = args.Get("type");
  if (!ParseDType(type_name, &type) || !(type == DType::kF32 || type == DType::kF16 || type == DType::kBF16)) {
    // A GGUF format: random bf16 weights in a scratch folder beside the output, quantised into the file.
    if (!IsKnownRecipe(type_name)) Fail(ErrorCode::kInvalidArgument, "unknown --type '", type_name, "'");
    const std::string out = args.Get("o");
    if (!EndsWith(out, ".gguf")) Fail(ErrorCode::kInvalidArgument, "-o must name a .gguf file for --type ", type_name);
    const std::string scratch = out + ".bf16-tmp";
    std::vector<std::string> sub = {"make-random", "--shape", args.Get("shape"), "--type", "bf16", "-o", scratch,
                                    "--seed", args.Get("seed")};
    std::vector<char*> sub_argv;
    for (auto& a : sub) sub_argv.push_back(a.data());
    int rc = RunMakeRandom(static_cast<int>(sub_argv.size()), sub_argv.data());
    if (rc != 0) return rc;
    {
      LoadedModel m = LoadModel(scratch);
      ExportGguf(m, type_name, out);
    }
    std::filesystem::remove_all(scratch);
    std::fprintf(stderr, "wrote %s: shape %s, %s\n", out.c_str(), args.Get("shape").c_str(), type_name.c_str());
    return 0;
  }
  const std::string dir = args.Get("o");
  std::filesystem::create_directories(dir);
  const uint64_t seed = static_cast<uint64_t>(args.GetInt("seed"));
  const uint64_t shard_limit = static_cast<uint64_t>(args.GetDouble("shard-gib") * (1ull << 30));

  // Group tensors into shards in file order.
  std::vector<std::vector<SafetensorsEntry>> shards(1);
  uint64_t shard_bytes = 0, total = 0;
  int index = 0;
  ForEachTensorSpec(c, [&](const TensorSpec& s) {
    SafetensorsEntry e;
    e.name = s.hf_name;
    e.dtype = type;
    e.shape = s.is_norm ? std::vector<int64_t>{s.cols} : std::vector<int64_t>{s.rows, s.cols};
    const uint64_t bytes = DTypeBytes(type, s.rows * s.cols);
    // Matrices N(0, 1/fan_in) keep activations at unit scale through the layers; the embedding N(0, 1)
    // spreads the logits; norm weights vary around 1.
    float mean = 0, std_dev = 1.0f / std::sqrt(static_cast<float>(s.cols));
    if (s.role == "token_embd") std_dev = 1.0f;
    if (s.is_norm) {
      mean = 1.0f;
      std_dev = 0.1f;
    }
    const uint64_t tensor_seed = seed * 1000003ull + static_cast<uint64_t>(index++);
    e.fill = [=](uint8_t* dst, size_t) { FillNormal(dst, s.rows * s.cols, type, mean, std_dev, tensor_seed); };
    if (shard_bytes > 0 && shard_bytes + bytes > shard_limit) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(std::move(e));
    shard_bytes += bytes;
    total += bytes;
  });

  Json weight_map = Json::MakeObject();
  for (size_t i = 0; i < shards.size(); ++i) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", i + 1, shards.size());
    std::fprintf(stderr, "writing %s/%s (%zu tensors)\n", dir.c_str(), name, shards[i].size());
    WriteSafetensors(JoinPath(dir, name), shards[i]);
    for (const auto& e : shards[i]) weight_map.Set(e.name, Json(name));
  }
  Json index_json = Json::MakeObject();
  Json md = Json::MakeObject();
  md.Set("total_size", Json(total));
  index_json.Set("metadata", std::move(md));
  index_json.Set("weight_map", std::move(weight_map));

  const int n_ranks = 256;
  Json cfg = Json::MakeObject();
  cfg.Set("architectures", Json(Json::Array{Json("HunYuanDenseV1ForCausalLM")}));
  cfg.Set("model_type", Json("hunyuan_v1_dense"));
  cfg.Set("_name_or_path", Json(c.name));
  cfg.Set("vocab_size", Json(c.vocab_rows));
  cfg.Set("hidden_size", Json(c.hidden));
  cfg.Set("intermediate_size", Json(c.ffn));
  cfg.Set("num_hidden_layers", Json(c.n_layers));
  cfg.Set("num_attention_heads", Json(c.n_heads));
  cfg.Set("num_key_value_heads", Json(c.n_kv_heads));
  cfg.Set("head_dim", Json(c.head_dim));
  cfg.Set("hidden_act", Json("silu"));
  cfg.Set("rms_norm_eps", Json(static_cast<double>(c.rms_eps)));
  cfg.Set("max_position_embeddings", Json(c.max_positions));
  cfg.Set("rope_theta", Json(c.rope.theta));
  Json rope = Json::MakeObject();
  rope.Set("type", Json("dynamic"));
  rope.Set("alpha", Json(c.rope.alpha));
  rope.Set("factor", Json(1.0));
  cfg.Set("rope_scaling", std::move(rope));
  cfg.Set("tie_word_embeddings", Json(c.tied_output));
  cfg.Set("attention_bias", Json(false));
  cfg.Set("torch_dtype", Json(type == DType::kF32 ? "float32" : type == DType::kF16 ? "float16" : "bfloat16"));
  cfg.Set("bos_token_id", Json(n_ranks + 1));
  cfg.Set("eos_token_id", Json(n_ranks + 3));
  cfg.Set("pad_token_id", Json(n_ranks + 4));
  auto write = [&](const std::string& name, const Json& j) {
    std::ofstream out(JoinPath(dir, name));
    out << j.Dump() << "\n";
    if (!out) Fail(ErrorCode::kInternal, "cannot write ", JoinPath(dir, name));
  };
  write("config.json", cfg);
  write("model.safetensors.index.json", index_json);
  WriteByteVocabulary(JoinPath(dir, "hy.tiktoken"));
  std::fprintf(stderr, "wrote %s: shape %s, %s, %.2f B parameters, %s\n", dir.c_str(), args.Get("shape").c_str(),
               DTypeName(type), c.ParameterCount() / 1e9, FormatBytes(total).c_str());
  return 0;
}

}  // namespace hymt
