#include "runtime/gguf_export.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <mutex>
#include <tuple>

#include "core/logging.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "formats/gguf.h"
#include "quant/quant.h"
#include "quant/recipe.h"

namespace hymt {
namespace {

// llama.cpp's llama_ftype values for general.file_type.
uint32_t FileType(std::string_view recipe) {
  static const std::map<std::string, uint32_t, std::less<>> kTypes = {
      {"f32", 0},  {"f16", 1},     {"q4_0", 2},    {"q4_1", 3},  {"q8_0", 7},  {"q5_0", 8},
      {"q5_1", 9}, {"q4_k_m", 15}, {"q5_k_m", 17}, {"q6_k", 18}, {"bf16", 32},
  };
  auto it = kTypes.find(recipe);
  return it == kTypes.end() ? 0 : it->second;
}

// The tokenizer as GGUF "gpt2" keys: byte-level token text, token types, and merges. A tiktoken-style
// vocabulary (id = rank) becomes a merge list holding every split of every token whose halves are
// tokens, ordered by the rank of the result: BPE over that list gives exactly tiktoken's ids.
void AddTokenizer(const LoadedModel& m, GgufMetadata& md) {
  const Tokenizer& tok = *m.tokenizer;
  const int32_t n = tok.n_tokens();
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  std::map<std::string, int32_t> by_bytes;
  for (int32_t id = 0; id < n; ++id) {
    const std::string& bytes = tok.TokenBytes(id);
    if (tok.IsSpecial(id)) {
      tokens.push_back(bytes);
      types.push_back(3);  // control
    } else {
      tokens.push_back(EncodeByteLevel(bytes));
      types.push_back(1);  // normal
      by_bytes.emplace(bytes, id);
    }
  }
  // Rows of the embedding without a token, as llama.cpp's converter marks them.
  for (int64_t id = n; id < m.config.vocab_rows; ++id) {
    tokens.push_back(StrCat("[PAD", id, "]"));
    types.push_back(5);  // unused
  }
  struct Merge {
    int32_t result, left, right;
  };
  std::vector<Merge> merges;
  for (const auto& [bytes, id] : by_bytes) {
    for (size_t i = 1; i < bytes.size(); ++i) {
      auto l = by_bytes.find(bytes.substr(0, i));
      auto r = by_bytes.find(bytes.substr(i));
      if (l != by_bytes.end() && r != by_bytes.end()) merges.push_back({id, l->second, r->second});
    }
  }
  std::sort(merges.begin(), merges.end(), [](const Merge& a, const Merge& b) {
    return std::tie(a.result, a.left, a.right) < std::tie(b.result, b.left, b.right);
  });
  std::vector<std::string> merge_text;
  merge_text.reserve(merges.size());
  for (const Merge& mg : merges) merge_text.push_back(tokens[mg.left] + " " + tokens[mg.right]);

  md.Set("tokenizer.ggml.model", GgufValue::String("gpt2"));
  md.Set("tokenizer.ggml.pre",
         GgufValue::String(tok.split_rule() == SplitRule::kHunyuanDense ? "hunyuan-dense" : "hunyuan"));
  md.Set("tokenizer.ggml.tokens", GgufValue::Array(tokens));
  md.Set("tokenizer.ggml.token_type", GgufValue::Array(types));
  md.Set("tokenizer.ggml.merges", GgufValue::Array(merge_text));
  auto set_id = [&](const char* key, const char* name) {
    if (auto id = tok.TokenId(name)) md.Set(key, GgufValue::U32(static_cast<uint32_t>(*id)));
  };
  set_id("tokenizer.ggml.bos_token_id", "<|startoftext|>");
  set_id("tokenizer.ggml.eos_token_id", "<|eos|>");
  set_id("tokenizer.ggml.eot_token_id", "<|eos|>");
  set_id("tokenizer.ggml.padding_token_id", "<|pad|>");
  md.Set("tokenizer.ggml.add_bos_token", GgufValue::Bool(false));
}

}  // namespace

void ExportGguf(const LoadedModel& m, const std::string& recipe, const std::string& path) {
  if (!IsKnownRecipe(recipe))
    Fail(ErrorCode::kInvalidArgument, "unknown type '", recipe,
         "'; use f32, f16, bf16, q8_0, q6_k, q5_k_m, q4_k_m, ", "q5_0, q5_1, q4_0 or q4_1");
  const ModelConfig& c = m.config;
  GgufWriter w;
  GgufMetadata& md = w.metadata();
  const std::string a = "hunyuan-dense.";
  md.Set("general.architecture", GgufValue::String("hunyuan-dense"));
  md.Set("general.name", GgufValue::String(m.name));
  md.Set("general.file_type", GgufValue::U32(FileType(recipe)));
  md.Set("general.quantization_version", GgufValue::U32(2));
  if (!m.description.empty()) md.Set("general.description", GgufValue::String(m.description));
  md.Set(a + "context_length",
         GgufValue::U32(static_cast<uint32_t>(c.max_positions > 0 ? c.max_positions : 32768)));
  md.Set(a + "embedding_length", GgufValue::U32(static_cast<uint32_t>(c.hidden)));
  md.Set(a + "block_count", GgufValue::U32(static_cast<uint32_t>(c.n_layers)));
  md.Set(a + "feed_forward_length", GgufValue::U32(static_cast<uint32_t>(c.ffn)));
  md.Set(a + "attention.head_count", GgufValue::U32(static_cast<uint32_t>(c.n_heads)));
  md.Set(a + "attention.head_count_kv", GgufValue::U32(static_cast<uint32_t>(c.n_kv_heads)));
  md.Set(a + "attention.key_length", GgufValue::U32(static_cast<uint32_t>(c.head_dim)));
  md.Set(a + "attention.value_length", GgufValue::U32(static_cast<uint32_t>(c.head_dim)));
  md.Set(a + "attention.layer_norm_rms_epsilon", GgufValue::F32(c.rms_eps));
  // GGUF holds the effective base: the alpha scaling is folded in (as llama.cpp's converter does).
  md.Set(a + "rope.freq_base", GgufValue::F32(static_cast<float>(c.rope.Base(c.head_dim))));
  md.Set(a + "rope.scaling.type", GgufValue::String("none"));
  md.Set(a + "vocab_size", GgufValue::U32(static_cast<uint32_t>(c.vocab_rows)));
  if (!m.languages.empty()) md.Set("hymt.languages", GgufValue::Array(m.languages));
  if (!m.prompt_style.empty()) md.Set("hymt.prompt_style", GgufValue::String(m.prompt_style));
  AddTokenizer(m, md);

  // Tensors, converted while the file is written (one tensor at a time, rows on all cores).
  int64_t total_rows = 0;
  ForEachTensorSpec(c, [&](const TensorSpec& s) { total_rows += s.rows; });
  auto done_rows = std::make_shared<int64_t>(0);
  auto shown = std::make_shared<int>(-1);  // the percentage on screen: printed again only when it changes
  ModelWeights& weights = m.model->mutable_weights();
  ForEachTensor(c, weights, [&](const TensorSpec& s, Weight& src) {
    DType type = DType::kF32;
    if (!s.is_norm) {
      // A tied embedding is also the output head: it gets the head's type (recipe.h).
      std::string role = (s.role == "token_embd" && c.tied_output) ? "output" : s.role;
      type = MixedTypeFor(recipe, role, s.layer, c.n_layers, s.cols);
    }
    std::vector<int64_t> shape =
        s.is_norm ? std::vector<int64_t>{s.cols} : std::vector<int64_t>{s.rows, s.cols};
    Weight in = src;
    const int64_t rows = s.rows, cols = s.cols;
    w.AddTensor(s.gguf_name, type, shape,
                [in, type, rows, cols, total_rows, done_rows, shown](uint8_t* dst, size_t) {
                  const size_t in_row = DTypeBytes(in.dtype, cols), out_row = DTypeBytes(type, cols);
                  const uint8_t* base = static_cast<const uint8_t*>(in.data);
                  DefaultThreadPool().ParallelFor(rows, 8, [&](int64_t r0, int64_t r1) {
                    std::vector<float> row(static_cast<size_t>(cols));
                    for (int64_t r = r0; r < r1; ++r) {
                      DequantizeRow(in.dtype, base + in_row * r, row.data(), cols);
                      if (in.scale != 1.0f)
                        for (float& v : row) v *= in.scale;
                      QuantizeRow(type, row.data(), dst + out_row * r, cols);
                    }
                  });
                  *done_rows += rows;
                  const int percent = static_cast<int>(100 * *done_rows / std::max<int64_t>(1, total_rows));
                  if (percent != *shown) std::fprintf(stderr, "\rquantising: %3d%%", percent);
                  *shown = percent;
                });
  });
  w.Write(path);
  std::fprintf(stderr, "\n");
}

}  // namespace hymt
