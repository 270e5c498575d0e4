#include "runtime/loader.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "core/json.h"
#include "core/logging.h"
#include "core/mapped_file.h"
#include "core/status.h"
#include "formats/gguf.h"
#include "formats/hf_config.h"
#include "formats/safetensors.h"
#include "quant/quant.h"

namespace hymt {
namespace {

namespace fs = std::filesystem;

// Everything a loaded model keeps alive: the open files and the small f32 copies made at load.
struct Storage {
  std::unique_ptr<TensorSource> source;
  std::vector<std::vector<float>> owned;
};

// A hyper-parameter as an int. A value that does not fit is corrupt: a silent wrap could turn an
// absurd value into a plausible one (2^32 + 64 into 64).
int ConfigInt(int64_t value, const std::string& where, std::string_view field) {
  if (value < 0 || value > INT32_MAX)
    Fail(ErrorCode::kCorruptData, where, ": ", field, " is ", value, ", outside [0, ", INT32_MAX, "]");
  return static_cast<int>(value);
}

// Supported stored types for the big matrices.
bool IsMatrixType(DType t) {
  switch (t) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
    case DType::kF8E4M3:
    case DType::kQ4_0:
    case DType::kQ4_1:
    case DType::kQ5_0:
    case DType::kQ5_1:
    case DType::kQ8_0:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K: return true;
    default: return false;
  }
}

// Norm weights are tiny; keep them as f32 copies whatever the file stores.
Weight OwnedF32(Storage& st, const TensorInfo& info, const std::string& name, int64_t n) {
  if (info.dtype != DType::kF32 && info.dtype != DType::kBF16 && info.dtype != DType::kF16)
    Fail(ErrorCode::kUnsupported, "tensor ", name, " in ", info.file, " has type ", DTypeName(info.dtype),
         "; norm weights must be f32, f16 or bf16");
  std::vector<float> v(static_cast<size_t>(n));
  DequantizeRow(info.dtype, info.data, v.data(), n);
  st.owned.push_back(std::move(v));
  Weight w;
  w.name = name;
  w.dtype = DType::kF32;
  w.rows = 1;
  w.cols = n;
  w.data = st.owned.back().data();
  return w;
}

Weight RopeWeight(Storage& st, const ModelConfig& c) {
  st.owned.push_back(c.RopeInvFreq());
  Weight w;
  w.name = "rope.inv_freq";
  w.dtype = DType::kF32;
  w.rows = 1;
  w.cols = c.head_dim / 2;
  w.data = st.owned.back().data();
  return w;
}

// Binds every tensor the architecture needs to the file's tensors, checking shape and type.
void BindWeights(const ModelConfig& c, const TensorSource& src, bool gguf, Storage& st, ModelWeights& w,
                 const std::string& where) {
  ForEachTensor(c, w, [&](const TensorSpec& spec, Weight& out) {
    const std::string& name = gguf ? spec.gguf_name : spec.hf_name;
    const TensorInfo* info = src.Find(name);
    if (info == nullptr) Fail(ErrorCode::kNotFound, where, ": tensor ", name, " is missing");
    std::vector<int64_t> want = spec.is_norm ? std::vector<int64_t>{spec.cols} : std::vector<int64_t>{spec.rows, spec.cols};
    if (info->shape != want)
      Fail(ErrorCode::kCorruptData, info->file, ": tensor ", name, " has shape ", ShapeString(info->shape),
           ", expected ", ShapeString(want));
    if (spec.is_norm) {
      out = OwnedF32(st, *info, name, spec.cols);
      return;
    }
    if (!IsMatrixType(info->dtype))
      Fail(ErrorCode::kUnsupported, info->file, ": tensor ", name, " has type ", DTypeName(info->dtype),
           ", which hymt does not run");
    out.name = name;
    out.dtype = info->dtype;
    out.rows = spec.rows;
    out.cols = spec.cols;
    out.data = info->data;
    if (info->dtype == DType::kF8E4M3) {
      // compressed-tensors FP8: a per-tensor weight_scale beside the weight.
      std::string scale_name = name + "_scale";
      const TensorInfo* scale = src.Find(scale_name);
      if (scale == nullptr) Fail(ErrorCode::kNotFound, where, ": FP8 tensor ", name, " has no ", scale_name);
      if (scale->dtype != DType::kF32 || scale->bytes < 4)
        Fail(ErrorCode::kCorruptData, scale->file, ": ", scale_name, " must be f32 with one value (per tensor), found ",
             DTypeName(scale->dtype), " ", ShapeString(scale->shape));
      if (scale->bytes != 4)
        Fail(ErrorCode::kUnsupported, scale->file, ": ", scale_name, " has ", scale->bytes / 4,
             " values; hymt reads per-tensor FP8 scales only");
      std::memcpy(&out.scale, scale->data, 4);
      if (!std::isfinite(out.scale) || out.scale <= 0)
        Fail(ErrorCode::kCorruptData, scale->file, ": ", scale_name, " is ", out.scale);
    }
  });
  const Weight rope = RopeWeight(st, c);
  for (LayerWeights& l : w.layers) l.rope_inv_freq = rope;
}

std::string ReadOptional(const std::string& path) { return FileExists(path) ? ReadFile(path, 1 << 20) : std::string(); }

// hymt.json: the project's own model card (name, languages, prompt style, description).
void ReadModelCard(const std::string& dir, LoadedModel& m) {
  std::string path = JoinPath(dir, "hymt.json");
  std::string text = ReadOptional(path);
  if (text.empty()) return;
  Json j;
  try {
    j = Json::Parse(text);
  } catch (const Error& e) {
    Fail(ErrorCode::kCorruptData, path, ": ", e.what());
  }
  auto str = [&](const char* key) -> std::string {
    const Json* v = j.Find(key);
    if (v == nullptr) return "";
    if (!v->is_string()) Fail(ErrorCode::kCorruptData, path, ": \"", key, "\" must be a string");
    return v->AsString();
  };
  if (!str("name").empty()) m.name = str("name");
  m.prompt_style = str("prompt_style");
  m.description = str("description");
  if (const Json* langs = j.Find("languages")) {
    if (!langs->is_array()) Fail(ErrorCode::kCorruptData, path, ": \"languages\" must be an array of codes");
    for (const Json& l : langs->AsArray()) {
      if (!l.is_string()) Fail(ErrorCode::kCorruptData, path, ": \"languages\" must be an array of codes");
      m.languages.push_back(l.AsString());
    }
  }
}

void ResolveStopIds(LoadedModel& m, const std::vector<int64_t>& declared) {
  const int64_t n = m.tokenizer->n_tokens();
  for (int64_t id : declared)
    if (id >= 0 && id < n) m.stop_ids.push_back(static_cast<int32_t>(id));
  // Always stop on the end-of-turn tokens the family defines, looked up by name.
  for (const char* name : {"<|eos|>", "<|endoftext|>", "<｜hy_eos｜>", "<｜hy_place▁holder▁no▁2｜>"}) {
    if (auto id = m.tokenizer->TokenId(name))
      if (std::find(m.stop_ids.begin(), m.stop_ids.end(), *id) == m.stop_ids.end()) m.stop_ids.push_back(*id);
  }
  if (m.stop_ids.empty()) Fail(ErrorCode::kCorruptData, m.path, ": no end-of-sequence token could be determined");
}

LoadedModel LoadHfFolder(const std::string& dir, const LoadOptions& options) {
  LoadedModel m;
  m.path = dir;
  m.format = "safetensors";
  const std::string config_path = JoinPath(dir, "config.json");
  if (!FileExists(config_path)) Fail(ErrorCode::kNotFound, dir, " has no config.json (is it a model folder?)");
  HfConfig hf = LoadHfConfig(config_path);
  const bool dense = hf.model_type == "hunyuan_v1_dense" ||
                     std::find(hf.architectures.begin(), hf.architectures.end(), "HunYuanDenseV1ForCausalLM") !=
                         hf.architectures.end();
  if (!dense) {
    std::string what = hf.model_type.find("moe") != std::string::npos ? " (a mixture-of-experts model)" : "";
    Fail(ErrorCode::kUnsupported, config_path, ": model_type '", hf.model_type, "'", what,
         " is not supported; hymt runs hunyuan_v1_dense models");
  }
  auto storage = std::make_shared<Storage>();
  storage->source = SafetensorsSource::Open(dir);
  const TensorSource& src = *storage->source;

  ModelConfig& c = m.config;
  c.architecture = "hunyuan_v1_dense";
  c.hidden = ConfigInt(hf.hidden_size, config_path, "hidden_size");
  c.ffn = ConfigInt(hf.intermediate_size, config_path, "intermediate_size");
  c.n_layers = ConfigInt(hf.num_hidden_layers, config_path, "num_hidden_layers");
  c.n_heads = ConfigInt(hf.num_attention_heads, config_path, "num_attention_heads");
  c.n_kv_heads = ConfigInt(hf.num_key_value_heads, config_path, "num_key_value_heads");
  c.head_dim = ConfigInt(
      hf.head_dim.value_or(hf.num_attention_heads > 0 ? hf.hidden_size / hf.num_attention_heads : 0),
      config_path, "head_dim");
  c.rms_eps = static_cast<float>(hf.rms_norm_eps.value_or(1e-5));
  c.rope.theta = hf.rope.theta.value_or(10000.0);
  if (hf.rope.alpha) {
    c.rope.alpha = *hf.rope.alpha;
  } else if (!hf.rope.type.empty() && hf.rope.type != "default" && hf.rope.factor && *hf.rope.factor != 1.0) {
    Fail(ErrorCode::kUnsupported, config_path, ": RoPE scaling type '", hf.rope.type, "' with factor ",
         *hf.rope.factor, " is not supported (Hunyuan models use a static alpha)");
  }
  c.tied_output = hf.tie_word_embeddings.value_or(false);  // the transformers default for this class
  c.max_positions = ConfigInt(hf.max_position_embeddings.value_or(0), config_path, "max_position_embeddings");
  // The vocabulary size is the embedding's row count, whatever config.json says.
  const TensorInfo& embed = src.Get("model.embed_tokens.weight");
  if (embed.shape.size() != 2)
    Fail(ErrorCode::kCorruptData, embed.file, ": model.embed_tokens.weight has shape ", ShapeString(embed.shape),
         ", expected [vocab, hidden]");
  c.vocab_rows = embed.shape[0];
  c.Validate(config_path);
  if (!c.tied_output && src.Find("lm_head.weight") == nullptr)
    Fail(ErrorCode::kNotFound, dir, ": tie_word_embeddings is false but there is no lm_head.weight");

  ModelWeights w;
  BindWeights(c, src, /*gguf=*/false, *storage, w, dir);

  // Generation defaults, tokenizer, model card.
  std::vector<int64_t> declared_stops = hf.eos_token_ids;
  const std::string gen_path = JoinPath(dir, "generation_config.json");
  if (FileExists(gen_path)) {
    GenerationConfig g = LoadGenerationConfig(gen_path);
    if (!g.eos_token_ids.empty()) declared_stops = g.eos_token_ids;
    GenerationDefaults& d = m.generation;
    if (g.do_sample) d.do_sample = *g.do_sample;
    if (g.temperature) d.temperature = static_cast<float>(*g.temperature);
    if (g.top_k) d.top_k = static_cast<int>(*g.top_k);
    if (g.top_p) d.top_p = static_cast<float>(*g.top_p);
    if (g.repetition_penalty) d.repetition_penalty = static_cast<float>(*g.repetition_penalty);
    if (g.max_new_tokens && *g.max_new_tokens > 0) d.max_new_tokens = static_cast<int>(*g.max_new_tokens);
  }
  auto tok = std::make_shared<Tokenizer>(Tokenizer::FromModelDir(dir));
  if (options.normalize == "nfc") tok->SetNormalization(Normalization::kNfc);
  if (options.normalize == "none") tok->SetNormalization(Normalization::kNone);
  m.tokenizer = tok;
  if (m.tokenizer->n_tokens() > c.vocab_rows)
    Fail(ErrorCode::kCorruptData, dir, ": the tokenizer has ", m.tokenizer->n_tokens(),
         " tokens but the embedding only ", c.vocab_rows, " rows");
  ResolveStopIds(m, declared_stops);

  m.name = !hf.name_or_path.empty() ? hf.name_or_path : fs::path(dir).lexically_normal().filename().string();
  if (m.name.empty()) m.name = fs::path(dir).lexically_normal().parent_path().filename().string();
  ReadModelCard(dir, m);
  c.name = m.name;
  m.model = std::make_shared<HunyuanModel>(c, std::move(w));
  m.storage = storage;
  return m;
}

// GGUF's "gpt2" tokenizer model stores token text in GPT-2's byte-level spelling.
std::string ByteLevelToBytes(const std::string& text, const std::string& where) {
  std::string out;
  if (!DecodeByteLevel(text, &out))
    Fail(ErrorCode::kCorruptData, where, ": token text '", text.substr(0, 40), "' is not byte-level");
  return out;
}

// The tokenizer stored in a GGUF file's tokenizer.ggml.* keys (model "gpt2", byte-level BPE with merges).
Tokenizer TokenizerFromGguf(const GgufMetadata& md, const std::string& path) {
  const std::string model = md.GetString("tokenizer.ggml.model");
  if (model != "gpt2")
    Fail(ErrorCode::kUnsupported, path, ": tokenizer.ggml.model '", model, "' is not supported (hymt reads gpt2-style BPE)");
  const std::string pre = md.Has("tokenizer.ggml.pre") ? md.GetString("tokenizer.ggml.pre") : "";
  TokenizerSpec spec;
  spec.source = path;
  if (pre == "hunyuan") {
    spec.split_rule = SplitRule::kHunyuan;
  } else if (pre == "hunyuan-dense") {
    spec.split_rule = SplitRule::kHunyuanDense;
  } else {
    Fail(ErrorCode::kUnsupported, path, ": tokenizer.ggml.pre '", pre, "' is not supported (hunyuan or hunyuan-dense)");
  }
  const std::vector<std::string>& tokens = md.GetStringArray("tokenizer.ggml.tokens");
  std::vector<int64_t> types;
  if (md.Has("tokenizer.ggml.token_type")) types = md.GetIntArray("tokenizer.ggml.token_type");
  if (!types.empty() && types.size() != tokens.size())
    Fail(ErrorCode::kCorruptData, path, ": tokenizer.ggml.token_type has ", types.size(), " entries for ", tokens.size(),
         " tokens");
  spec.tokens.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    // llama.cpp token types: 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte.
    const int64_t type = types.empty() ? 1 : types[i];
    if (type == 3 || type == 4) {
      spec.tokens.push_back(tokens[i]);
      spec.added_tokens.push_back({static_cast<int32_t>(i), type == 3});
    } else {
      spec.tokens.push_back(ByteLevelToBytes(tokens[i], path));
    }
  }
  spec.merge_rule = BpeModel::Rule::kMergeList;
  if (md.Has("tokenizer.ggml.merges")) {
    for (const std::string& m : md.GetStringArray("tokenizer.ggml.merges")) {
      size_t sp = m.find(' ');
      if (sp == std::string::npos || sp == 0 || sp + 1 == m.size())
        Fail(ErrorCode::kCorruptData, path, ": merge '", m.substr(0, 40), "' is not 'a b'");
      spec.merges.emplace_back(ByteLevelToBytes(m.substr(0, sp), path), ByteLevelToBytes(m.substr(sp + 1), path));
    }
  }
  return Tokenizer::FromSpec(std::move(spec));
}

LoadedModel LoadGguf(const std::string& path, const LoadOptions& options) {
  LoadedModel m;
  m.path = path;
  m.format = "gguf";
  auto storage = std::make_shared<Storage>();
  auto file = GgufFile::Open(path);
  const GgufMetadata& md = file->metadata();
  const std::string arch = md.GetString("general.architecture");
  if (arch != "hunyuan-dense") {
    std::string what = arch.find("moe") != std::string::npos ? " (a mixture-of-experts model)" : "";
    Fail(ErrorCode::kUnsupported, path, ": architecture '", arch, "'", what,
         " is not supported; hymt runs hunyuan-dense models");
  }
  const std::string p = arch + ".";
  ModelConfig& c = m.config;
  c.architecture = "hunyuan_v1_dense";
  auto int_key = [&](const std::string& key) { return ConfigInt(md.GetInt(key), md.Where(key), "value"); };
  c.hidden = int_key(p + "embedding_length");
  c.ffn = int_key(p + "feed_forward_length");
  c.n_layers = int_key(p + "block_count");
  c.n_heads = int_key(p + "attention.head_count");
  c.n_kv_heads = md.Has(p + "attention.head_count_kv") ? int_key(p + "attention.head_count_kv") : c.n_heads;
  c.head_dim = md.Has(p + "attention.key_length") ? int_key(p + "attention.key_length")
                                                  : (c.n_heads > 0 ? c.hidden / c.n_heads : 0);
  c.rms_eps = static_cast<float>(md.Has(p + "attention.layer_norm_rms_epsilon")
                                     ? md.GetFloat(p + "attention.layer_norm_rms_epsilon")
                                     : 1e-5);
  // GGUF stores the effective base (alpha already applied).
  c.rope.theta = md.Has(p + "rope.freq_base") ? md.GetFloat(p + "rope.freq_base") : 10000.0;
  c.rope.alpha = 0;
  c.max_positions = md.Has(p + "context_length") ? int_key(p + "context_length") : 0;
  const TensorInfo& embed = file->Get("token_embd.weight");
  if (embed.shape.size() != 2)
    Fail(ErrorCode::kCorruptData, path, ": token_embd.weight has shape ", ShapeString(embed.shape));
  c.vocab_rows = embed.shape[0];
  c.tied_output = file->Find("output.weight") == nullptr;
  c.Validate(path);

  ModelWeights w;
  BindWeights(c, *file, /*gguf=*/true, *storage, w, path);

  auto tok = std::make_shared<Tokenizer>(TokenizerFromGguf(md, path));
  if (options.normalize == "nfc") tok->SetNormalization(Normalization::kNfc);
  if (options.normalize == "none") tok->SetNormalization(Normalization::kNone);
  m.tokenizer = tok;
  if (m.tokenizer->n_tokens() > c.vocab_rows)
    Fail(ErrorCode::kCorruptData, path, ": the tokenizer has ", m.tokenizer->n_tokens(), " tokens but the embedding only ",
         c.vocab_rows, " rows");
  // The 7B family's converter writes eod_token_id (3 by default) as EOS: do not trust it there
  // (MODEL.md); the hy_ family's EOS is right.
  std::vector<int64_t> declared;
  const bool family_7b = m.tokenizer->TokenId("<|startoftext|>").has_value();
  if (!family_7b && md.Has("tokenizer.ggml.eos_token_id")) declared.push_back(md.GetInt("tokenizer.ggml.eos_token_id"));
  ResolveStopIds(m, declared);

  m.name = md.Has("general.name") ? md.GetString("general.name") : fs::path(path).stem().string();
  if (md.Has("hymt.languages"))
    for (const std::string& l : md.GetStringArray("hymt.languages")) m.languages.push_back(l);
  if (md.Has("hymt.prompt_style")) m.prompt_style = md.GetString("hymt.prompt_style");
  if (md.Has("general.description")) m.description = md.GetString("general.description");
  c.name = m.name;
  storage->source = std::move(file);
  m.model = std::make_shared<HunyuanModel>(c, std::move(w));
  m.storage = storage;
  return m;
}

bool HasGgufMagic(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::memcmp(magic, "GGUF", 4) == 0;
}

}  // namespace

LoadedModel LoadModel(const std::string& path, const LoadOptions& options) {
  if (path.empty()) Fail(ErrorCode::kInvalidArgument, "no model path given");
  LoadedModel m;
  if (IsDirectory(path)) {
    m = LoadHfFolder(path, options);
    m.is_demo = fs::weakly_canonical(path) == fs::weakly_canonical(FindDemoModel().empty() ? "/nonexistent" : FindDemoModel());
  } else if (FileExists(path)) {
    if (!HasGgufMagic(path))
      Fail(ErrorCode::kUnsupported, path, " is neither a model folder nor a GGUF file (no GGUF magic)");
    m = LoadGguf(path, options);
  } else {
    Fail(ErrorCode::kNotFound, "model not found: ", path);
  }
  return m;
}

std::string FindDemoModel() {
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("HYMT_DEMO_MODEL")) candidates.push_back(env);
  char exe[4096];
  ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    exe[n] = '\0';
    fs::path dir = fs::path(exe).parent_path();
    candidates.push_back((dir / ".." / "models" / "demo").string());
    candidates.push_back((dir / ".." / ".." / "models" / "demo").string());
    candidates.push_back((dir / ".." / "share" / "hymt" / "models" / "demo").string());
  }
  candidates.push_back("models/demo");
#ifdef HYMT_SOURCE_DIR_FOR_DEMO
  candidates.push_back(std::string(HYMT_SOURCE_DIR_FOR_DEMO) + "/models/demo");
#endif
  for (const std::string& c : candidates)
    if (FileExists(JoinPath(c, "config.json"))) return fs::weakly_canonical(c).string();
  return "";
}

std::vector<std::pair<std::string, std::pair<int64_t, int64_t>>> LoadedModel::TypeSummary() const {
  std::map<std::string, std::pair<int64_t, int64_t>> by_type;
  ModelWeights& w = model->mutable_weights();
  ForEachTensor(config, w, [&](const TensorSpec&, Weight& t) {
    auto& e = by_type[DTypeName(t.dtype)];
    e.first += 1;
    e.second += static_cast<int64_t>(t.bytes());
  });
  return {by_type.begin(), by_type.end()};
}

int64_t LoadedModel::WeightBytes() const {
  int64_t total = 0;
  for (const auto& [type, counts] : TypeSummary()) total += counts.second;
  return total;
}

}  // namespace hymt
