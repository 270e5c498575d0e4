#include "formats/hf_config.h"

#include <cmath>
#include <unordered_set>
#include <utility>

#include "core/mapped_file.h"
#include "core/status.h"
#include "core/strings.h"
#include "formats/json_util.h"

namespace hymt {
namespace {

// config files are small; anything larger is not a config.
constexpr size_t kMaxConfigBytes = size_t{16} << 20;

// Typed field access over one JSON object, with errors that name the file and the field path.
class Fields {
 public:
  Fields(const Json& obj, const std::string& file, std::string prefix)
      : obj_(obj), file_(file), prefix_(std::move(prefix)) {}

  // The member, or nullptr when absent or null.
  const Json* Get(std::string_view key) const {
    const Json* v = obj_.Find(key);
    return v == nullptr || v->is_null() ? nullptr : v;
  }

  [[noreturn]] void Wrong(std::string_view key, std::string_view expected, const Json& found) const {
    Fail(ErrorCode::kInvalidArgument, file_, ": field '", prefix_, key, "': expected ", expected, ", found ",
         JsonFoundText(found));
  }

  const Json& Required(std::string_view key) const {
    const Json* v = Get(key);
    if (v == nullptr)
      Fail(ErrorCode::kInvalidArgument, file_, ": required field '", prefix_, key, "' is missing");
    return *v;
  }

  std::optional<std::string> String(std::string_view key) const {
    const Json* v = Get(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_string()) Wrong(key, "a string", *v);
    return v->AsString();
  }

  std::optional<bool> Bool(std::string_view key) const {
    const Json* v = Get(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_bool()) Wrong(key, "a boolean", *v);
    return v->AsBool();
  }

  // An integer >= min_value.
  std::optional<int64_t> Int(std::string_view key, int64_t min_value) const {
    const Json* v = Get(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_integer() || v->AsInt() < min_value) {
      Wrong(key, min_value == 1 ? "a positive integer" : StrCat("an integer >= ", min_value), *v);
    }
    return v->AsInt();
  }

  int64_t RequiredPositiveInt(std::string_view key) const {
    Required(key);
    return *Int(key, 1);
  }

  // A finite number, > 0 when `positive`, >= 0 otherwise.
  std::optional<double> Number(std::string_view key, bool positive) const {
    const Json* v = Get(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_number() || !std::isfinite(v->AsDouble()) || v->AsDouble() < 0 ||
        (positive && v->AsDouble() == 0)) {
      Wrong(key, positive ? "a positive number" : "a non-negative number", *v);
    }
    return v->AsDouble();
  }

  // An integer id or a list of them; empty when absent.
  std::vector<int64_t> TokenIds(std::string_view key) const {
    const Json* v = Get(key);
    if (v == nullptr) return {};
    if (v->is_integer() && v->AsInt() >= 0) return {v->AsInt()};
    if (!v->is_array()) Wrong(key, "a token id or a list of token ids", *v);
    std::vector<int64_t> ids;
    for (const Json& e : v->AsArray()) {
      if (!e.is_integer() || e.AsInt() < 0) Wrong(key, "a list of non-negative integer token ids", *v);
      ids.push_back(e.AsInt());
    }
    return ids;
  }

  std::vector<std::string> Strings(std::string_view key) const {
    const Json* v = Get(key);
    if (v == nullptr) return {};
    if (!v->is_array()) Wrong(key, "a list of strings", *v);
    std::vector<std::string> out;
    for (const Json& e : v->AsArray()) {
      if (!e.is_string()) Wrong(key, "a list of strings", *v);
      out.push_back(e.AsString());
    }
    return out;
  }

  // A nested object, or nullopt when absent or null.
  std::optional<Fields> Object(std::string_view key) const {
    const Json* v = Get(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_object()) Wrong(key, "an object", *v);
    return Fields(*v, file_, StrCat(prefix_, key, "."));
  }

  [[noreturn]] void Unsupported(std::string_view key, std::string_view what) const {
    Fail(ErrorCode::kUnsupported, file_, ": field '", prefix_, key, "': ", what);
  }

  const Json& json() const { return obj_; }

 private:
  const Json& obj_;
  const std::string& file_;
  std::string prefix_;
};

// Python's json (which wrote these files) keeps the last of two equal keys and Json::Find the first;
// rather than guess, a repeated key is an error.
void CheckUniqueKeys(const Json& v, const std::string& file, const std::string& path) {
  if (v.is_array()) {
    for (const Json& e : v.AsArray()) CheckUniqueKeys(e, file, path);
  } else if (v.is_object()) {
    // A set, not pairwise comparison: a hostile file may hold a million keys.
    std::unordered_set<std::string_view> seen;
    for (const auto& [key, value] : v.AsObject()) {
      if (!seen.insert(key).second)
        Fail(ErrorCode::kInvalidArgument, file, ": field '", path, key, "' appears twice");
      if (value.is_array() || value.is_object()) CheckUniqueKeys(value, file, StrCat(path, key, "."));
    }
  }
}

Json ParseObject(std::string_view text, const std::string& file) {
  Json doc;
  try {
    doc = Json::Parse(text);
  } catch (const Error& e) {
    Fail(ErrorCode::kInvalidArgument, file, ": ", e.what());
  }
  if (!doc.is_object())
    Fail(ErrorCode::kInvalidArgument, file, ": expected a JSON object, found ", JsonFoundText(doc));
  CheckUniqueKeys(doc, file, "");
  return doc;
}

// Reads theta/type/alpha/factor present in one rope object (or the top level), overriding `rope`.
void ReadRopeFields(const Fields& f, bool with_theta, RopeConfig* rope) {
  if (with_theta) {
    if (auto theta = f.Number("rope_theta", true)) rope->theta = theta;
  }
  if (auto type = f.String("type")) rope->type = *type;
  if (auto type = f.String("rope_type")) rope->type = *type;  // the newer key wins
  if (auto alpha = f.Number("alpha", true)) rope->alpha = alpha;
  if (auto factor = f.Number("factor", true)) rope->factor = factor;
}

RopeConfig ParseRope(const Fields& top) {
  RopeConfig rope;
  rope.theta = top.Number("rope_theta", true);
  if (auto scaling = top.Object("rope_scaling")) ReadRopeFields(*scaling, false, &rope);
  if (auto params = top.Object("rope_parameters")) {
    // transformers 5 nests one parameter set per attention type for models that mix them.
    if (params->Get("rope_type") == nullptr && params->Get("rope_theta") == nullptr) {
      for (const auto& [key, value] : params->json().AsObject()) {
        if (value.is_object())
          params->Unsupported(key, "per-attention-type rope parameters are not supported");
      }
    }
    ReadRopeFields(*params, true, &rope);
  }
  return rope;
}

QuantArgs ParseQuantArgs(const Fields& f) {
  QuantArgs args;
  args.num_bits = f.Int("num_bits", 1);
  args.type = f.String("type").value_or("");
  args.strategy = f.String("strategy").value_or("");
  args.dynamic = f.Bool("dynamic");
  args.symmetric = f.Bool("symmetric");
  args.group_size = f.Int("group_size", 1);
  return args;
}

QuantizationConfig ParseQuantization(const Fields& q) {
  QuantizationConfig out;
  const Json& method = q.Required("quant_method");
  if (!method.is_string()) q.Wrong("quant_method", "a string", method);
  out.quant_method = method.AsString();
  out.format = q.String("format").value_or("");
  out.ignored_layers = q.Strings("ignored_layers");
  for (std::string& name : q.Strings("ignore")) out.ignored_layers.push_back(std::move(name));
  if (auto groups = q.Object("config_groups")) {
    for (const auto& [name, value] : groups->json().AsObject()) {
      auto group = groups->Object(name);
      if (!group) continue;  // null group
      QuantGroup g;
      g.name = name;
      g.targets = group->Strings("targets");
      if (auto w = group->Object("weights")) g.weights = ParseQuantArgs(*w);
      if (auto a = group->Object("input_activations")) g.input_activations = ParseQuantArgs(*a);
      out.groups.push_back(std::move(g));
    }
  }
  return out;
}

}  // namespace

HfConfig ParseHfConfig(std::string_view text, const std::string& file) {
  HfConfig c;
  c.raw = ParseObject(text, file);
  Fields f(c.raw, file, "");
  const Json& model_type = f.Required("model_type");
  if (!model_type.is_string()) f.Wrong("model_type", "a string", model_type);
  c.model_type = model_type.AsString();
  c.architectures = f.Strings("architectures");
  c.name_or_path = f.String("_name_or_path").value_or("");

  c.vocab_size = f.RequiredPositiveInt("vocab_size");
  c.hidden_size = f.RequiredPositiveInt("hidden_size");
  c.intermediate_size = f.RequiredPositiveInt("intermediate_size");
  c.num_hidden_layers = f.RequiredPositiveInt("num_hidden_layers");
  c.num_attention_heads = f.RequiredPositiveInt("num_attention_heads");
  c.num_key_value_heads = f.Int("num_key_value_heads", 1).value_or(c.num_attention_heads);
  c.head_dim = f.Int("head_dim", 1);

  c.rms_norm_eps = f.Number("rms_norm_eps", true);
  c.max_position_embeddings = f.Int("max_position_embeddings", 1);
  c.tie_word_embeddings = f.Bool("tie_word_embeddings");
  c.bos_token_ids = f.TokenIds("bos_token_id");
  c.eos_token_ids = f.TokenIds("eos_token_id");
  c.pad_token_ids = f.TokenIds("pad_token_id");

  c.rope = ParseRope(f);
  if (auto q = f.Object("quantization_config")) c.quantization = ParseQuantization(*q);
  return c;
}

HfConfig LoadHfConfig(const std::string& path) {
  return ParseHfConfig(ReadFile(path, kMaxConfigBytes), path);
}

GenerationConfig ParseGenerationConfig(std::string_view text, const std::string& file) {
  Json doc = ParseObject(text, file);
  Fields f(doc, file, "");
  GenerationConfig g;
  g.bos_token_ids = f.TokenIds("bos_token_id");
  g.eos_token_ids = f.TokenIds("eos_token_id");
  g.pad_token_ids = f.TokenIds("pad_token_id");
  g.do_sample = f.Bool("do_sample");
  g.temperature = f.Number("temperature", false);
  g.top_k = f.Int("top_k", 0);
  g.top_p = f.Number("top_p", false);
  g.repetition_penalty = f.Number("repetition_penalty", true);
  g.max_new_tokens = f.Int("max_new_tokens", 1);
  return g;
}

GenerationConfig LoadGenerationConfig(const std::string& path) {
  return ParseGenerationConfig(ReadFile(path, kMaxConfigBytes), path);
}

}  // namespace hymt
