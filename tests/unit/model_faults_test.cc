// Damaged model files: truncated, bit-flipped, the wrong architecture, wrong shapes, missing tensors,
// FP8 without scales, absurd hyper-parameters, in Hugging Face folders (a fixture copied to a temporary
// folder and damaged) and in GGUF files (a fixture written by ExportGguf, the `hymt quantize` path,
// then damaged). Each must fail at load with an Error whose message names the file and the field or
// tensor, never crash. A damaged file that still loads (a flip in tensor data, in a name string) must
// run: a short forward on the reference ops, and an engine that reports NaN/inf weights as an error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>

#include "core/json.h"
#include "core/mapped_file.h"
#include "core/status.h"
#include "formats/gguf.h"
#include "formats/safetensors.h"
#include "formats/safetensors_writer.h"
#include "ops/ops.h"
#include "runtime/engine.h"
#include "runtime/gguf_export.h"
#include "runtime/loader.h"
#include "runtime/oneshot.h"
#include "test_util.h"

namespace hymt {
namespace {

namespace fs = std::filesystem;

// The fixture damaged in the HF cases: one shard, tied, hy.tiktoken, f32.
constexpr const char* kFixture = "tiny-gqa1/f32";

std::string Slurp(const std::string& path) {
  return ReadFile(path);
}

void Spit(const std::string& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

// A copy of a fixture folder to damage.
std::string CopyFixture(const std::string& fixture = kFixture) {
  const std::string dir = test::TempDir() + "/model";
  fs::copy(test::TestDataDir() + "/fixtures/" + fixture, dir, fs::copy_options::recursive);
  return dir;
}

// Runs a few tokens through a model that loaded, on the reference ops: whatever the weights hold, no
// crash, and logits of the right size.
void RunShortForward(const LoadedModel& m) {
  static std::unique_ptr<Ops> ops = CreateReferenceOps();
  const std::vector<int32_t> ids = {1, 2, static_cast<int32_t>(m.config.vocab_rows - 1)};
  std::vector<float> logits = ForwardLogits(*m.model, *ops, ids);
  EXPECT_EQ(logits.size(), ids.size() * static_cast<size_t>(m.config.vocab_rows));
}

// Loads `path`, which must fail with an Error whose message holds every one of `parts` (the file and
// the field or tensor).
void ExpectLoadFails(const std::string& path, const std::vector<std::string>& parts) {
  try {
    LoadedModel m = LoadModel(path);
    ADD_FAILURE() << path << " loaded although it is damaged";
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const std::string& p : parts)
      EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  }
}

// Loads `path`, which may load (then it must run) or fail with an Error naming `file`.
// Returns true when it loaded.
bool LoadRunsOrFailsNaming(const std::string& path, const std::string& file, const std::string& what) {
  try {
    LoadedModel m = LoadModel(path);
    RunShortForward(m);
    return true;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(file), std::string::npos)
        << what << ": the message does not name " << file << ": " << e.what();
    return false;
  }
}

// ---- Hugging Face folders -------------------------------------------------------------------------

uint64_t SafetensorsHeaderEnd(const std::string& bytes) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | static_cast<uint8_t>(bytes[i]);
  return 8 + n;
}

// Rewrites a safetensors file after `mutate` edits its tensor list (data copied from the original).
void RewriteSafetensors(const std::string& path,
                        const std::function<void(std::vector<SafetensorsEntry>&)>& mutate) {
  const std::string original = Slurp(path);
  auto src =
      SafetensorsSource::Parse(reinterpret_cast<const uint8_t*>(original.data()), original.size(), path);
  std::vector<SafetensorsEntry> entries;
  for (const TensorInfo& t : src->tensors()) {
    SafetensorsEntry e;
    e.name = t.name;
    e.dtype = t.dtype;
    e.shape = t.shape;
    const uint8_t* data = t.data;
    e.fill = [data](uint8_t* dst, size_t bytes) { std::memcpy(dst, data, bytes); };
    entries.push_back(std::move(e));
  }
  mutate(entries);
  WriteSafetensors(path, entries);
}

SafetensorsEntry* FindEntry(std::vector<SafetensorsEntry>& entries, const std::string& name) {
  for (auto& e : entries)
    if (e.name == name) return &e;
  ADD_FAILURE() << "no tensor " << name;
  return &entries.front();
}

void EditConfig(const std::string& dir, const std::function<void(Json&)>& edit) {
  const std::string path = dir + "/config.json";
  Json config = Json::Parse(Slurp(path));
  edit(config);
  Spit(path, config.Dump());
}

TEST(ModelFaults, HfTruncatedAtManyPointsFailsNamingTheFile) {
  const std::string dir = CopyFixture();
  const std::string file = dir + "/model.safetensors";
  const std::string whole = Slurp(file);
  const uint64_t header_end = SafetensorsHeaderEnd(whole);
  std::vector<uint64_t> cuts = {
      0, 1, 7, 8, 9, header_end / 2, header_end - 1, header_end, header_end + 1, whole.size() - 1};
  for (int i = 1; i < 16; ++i) cuts.push_back(header_end + (whole.size() - header_end) * i / 16);
  for (uint64_t cut : cuts) {
    SCOPED_TRACE(testing::Message() << "cut at " << cut << " of " << whole.size());
    Spit(file, std::string_view(whole).substr(0, cut));
    // Past the header, the message names the tensor whose data is cut off.
    std::vector<std::string> parts = {file};
    if (cut > header_end) parts.push_back("tensor '");
    if (cut >= 8 && cut < header_end) parts.push_back("header length");
    ExpectLoadFails(dir, parts);
  }
}

TEST(ModelFaults, HfHeaderBitFlipsFailOrLoadAndRun) {
  const std::string dir = CopyFixture();
  const std::string file = dir + "/model.safetensors";
  const std::string whole = Slurp(file);
  const uint64_t header_end = SafetensorsHeaderEnd(whole);
  int failed = 0, loaded = 0;
  // Every 11th byte of the header (length included), one bit each, cycling through the bit positions.
  for (uint64_t pos = 0; pos < header_end; pos += 11) {
    std::string damaged = whole;
    damaged[pos] = static_cast<char>(damaged[pos] ^ (1 << (pos % 8)));
    Spit(file, damaged);
    (LoadRunsOrFailsNaming(dir, dir, StrCat("flip at byte ", pos)) ? loaded : failed)++;
  }
  EXPECT_GT(failed, 0);
  RecordProperty("hf_header_flips", StrCat(failed, " failed, ", loaded, " loaded"));
}

TEST(ModelFaults, HfDataBitFlipsLoadAndRun) {
  const std::string dir = CopyFixture();
  const std::string file = dir + "/model.safetensors";
  const std::string whole = Slurp(file);
  const uint64_t header_end = SafetensorsHeaderEnd(whole);
  // Flips anywhere in float data are not an error (the file is consistent); exponent flips make huge,
  // inf or NaN weights, and the forward must still not crash.
  std::string damaged = whole;
  for (uint64_t pos = header_end + 3; pos < damaged.size(); pos += 997)
    damaged[pos] = static_cast<char>(damaged[pos] ^ 0x7f);
  Spit(file, damaged);
  EXPECT_TRUE(LoadRunsOrFailsNaming(dir, dir, "data flips"));
}

// Writes `value` over the first float of tensor `name` in a folder's single safetensors file.
void PoisonFirstFloat(const std::string& dir, const std::string& name, float value) {
  const std::string file = dir + "/model.safetensors";
  std::string bytes = Slurp(file);
  auto src = SafetensorsSource::Parse(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), file);
  const TensorInfo& t = src->Get(name);
  ASSERT_EQ(t.dtype, DType::kF32);
  std::memcpy(bytes.data() + (t.data - reinterpret_cast<const uint8_t*>(bytes.data())), &value, 4);
  Spit(file, bytes);
}

// NaN or inf weights load (the file is consistent) but poison the logits: the engine ends the
// sequence with an error, greedy or sampled, and keeps serving.
TEST(ModelFaults, NonFiniteWeightsAreReportedByTheEngine) {
  struct Case {
    const char* tensor;
    float value;
  };
  const Case cases[] = {{"model.layers.0.self_attn.q_proj.weight", std::numeric_limits<float>::quiet_NaN()},
                        {"model.layers.1.mlp.down_proj.weight", std::numeric_limits<float>::infinity()},
                        {"model.embed_tokens.weight", -std::numeric_limits<float>::infinity()}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.tensor);
    const std::string dir = CopyFixture();
    PoisonFirstFloat(dir, c.tensor, c.value);
    LoadedModel m = LoadModel(dir);
    RunShortForward(m);
    auto ops = CreateReferenceOps();
    Placement p;
    p.embed = p.head = ops.get();
    p.layers.assign(m.config.n_layers, ops.get());
    EngineOptions eo;
    eo.max_seqs = 2;
    eo.kv_pages = 8;
    Engine engine(m.model, p, eo);
    for (bool greedy : {true, false}) {
      GenerationRequest g;
      g.prompt = {0, 5, 9, 0};  // token 0 reads the poisoned embedding row
      g.sampling = greedy ? SamplingParams::Greedy() : SamplingParams{};
      g.max_new_tokens = 4;
      GenerationResult r = engine.Generate(std::move(g));
      EXPECT_EQ(r.reason, FinishReason::kError) << (greedy ? "greedy" : "sampled");
      EXPECT_NE(r.error.find("non-finite"), std::string::npos) << r.error;
    }
    EXPECT_EQ(engine.stats().kv_pages_used, 0);
  }
}

TEST(ModelFaults, HfWrongArchitecture) {
  const std::string dir = CopyFixture();
  EditConfig(dir, [](Json& c) {
    c.Set("model_type", Json("hunyuan_v1_moe"));
    c.Set("architectures", Json(Json::Array{Json("HunYuanMoEV1ForCausalLM")}));
  });
  ExpectLoadFails(dir, {dir + "/config.json", "model_type 'hunyuan_v1_moe'", "mixture-of-experts"});
}

TEST(ModelFaults, HfWrongShapesAndTypes) {
  {
    const std::string dir = CopyFixture();
    RewriteSafetensors(dir + "/model.safetensors", [](std::vector<SafetensorsEntry>& e) {
      std::swap(FindEntry(e, "model.layers.0.mlp.gate_proj.weight")->shape[0],
                FindEntry(e, "model.layers.0.mlp.gate_proj.weight")->shape[1]);
    });
    ExpectLoadFails(dir, {dir + "/model.safetensors", "model.layers.0.mlp.gate_proj.weight", "[64, 128]",
                          "expected [128, 64]"});
  }
  {  // the config disagrees with every tensor
    const std::string dir = CopyFixture();
    EditConfig(dir, [](Json& c) { c.Set("intermediate_size", Json(96)); });
    ExpectLoadFails(dir, {dir + "/model.safetensors", "mlp.gate_proj.weight", "expected [96, 64]"});
  }
  {  // a norm stored as i32
    const std::string dir = CopyFixture();
    RewriteSafetensors(dir + "/model.safetensors", [](std::vector<SafetensorsEntry>& e) {
      FindEntry(e, "model.norm.weight")->dtype = DType::kI32;
    });
    ExpectLoadFails(dir, {dir + "/model.safetensors", "model.norm.weight", "i32"});
  }
  {  // a matrix stored as i32
    const std::string dir = CopyFixture();
    RewriteSafetensors(dir + "/model.safetensors", [](std::vector<SafetensorsEntry>& e) {
      FindEntry(e, "model.layers.1.self_attn.o_proj.weight")->dtype = DType::kI32;
    });
    ExpectLoadFails(dir,
                    {dir + "/model.safetensors", "model.layers.1.self_attn.o_proj.weight", "does not run"});
  }
  {  // an embedding that is not a matrix
    const std::string dir = CopyFixture();
    RewriteSafetensors(dir + "/model.safetensors", [](std::vector<SafetensorsEntry>& e) {
      SafetensorsEntry* t = FindEntry(e, "model.embed_tokens.weight");
      t->shape = {t->shape[0] * t->shape[1]};
    });
    ExpectLoadFails(dir,
                    {dir + "/model.safetensors", "model.embed_tokens.weight", "expected [vocab, hidden]"});
  }
}

TEST(ModelFaults, HfMissingPieces) {
  {
    const std::string dir = CopyFixture();
    RewriteSafetensors(dir + "/model.safetensors", [](std::vector<SafetensorsEntry>& e) {
      e.erase(e.begin() + (FindEntry(e, "model.layers.1.mlp.down_proj.weight") - e.data()));
    });
    ExpectLoadFails(dir, {dir, "model.layers.1.mlp.down_proj.weight", "missing"});
  }
  {  // untied, but no lm_head
    const std::string dir = CopyFixture();
    EditConfig(dir, [](Json& c) { c.Set("tie_word_embeddings", Json(false)); });
    ExpectLoadFails(dir, {dir, "lm_head.weight"});
  }
  {
    const std::string dir = CopyFixture();
    fs::remove(dir + "/config.json");
    ExpectLoadFails(dir, {dir, "config.json"});
  }
  {
    const std::string dir = CopyFixture();
    fs::remove(dir + "/hy.tiktoken");
    ExpectLoadFails(dir, {dir, "hy.tiktoken"});
  }
  {
    const std::string dir = CopyFixture();
    fs::remove(dir + "/model.safetensors");
    ExpectLoadFails(dir, {dir, "model.safetensors"});
  }
  {  // a sharded checkpoint without one of its shards
    const std::string dir = CopyFixture("tiny-gqa4/f32");
    fs::remove(dir + "/model-00002-of-00003.safetensors");
    ExpectLoadFails(dir, {"model.safetensors.index.json", "model-00002-of-00003.safetensors"});
  }
  {  // a tokenizer cut short: fewer ranks than the config's special-token ids assume is fine, a
     // corrupt line is not
    const std::string dir = CopyFixture();
    std::string vocab = Slurp(dir + "/hy.tiktoken");
    vocab.insert(vocab.find('\n', vocab.size() / 2) + 1, "not-base64!! 7\n");
    Spit(dir + "/hy.tiktoken", vocab);
    ExpectLoadFails(dir, {dir + "/hy.tiktoken", "base64"});
  }
}

TEST(ModelFaults, HfFp8WithoutUsableScales) {
  const std::string weight = "model.layers.0.self_attn.k_proj.weight";
  auto to_fp8 = [&](std::vector<SafetensorsEntry>& e) {
    SafetensorsEntry* t = FindEntry(e, weight);
    t->dtype = DType::kF8E4M3;
    t->fill = [](uint8_t* dst, size_t n) { std::memset(dst, 0x30, n); };
  };
  auto with_scale = [&](DType dtype, std::vector<int64_t> shape, float value) {
    return [=](std::vector<SafetensorsEntry>& e) {
      to_fp8(e);
      e.push_back({weight + "_scale", dtype, shape, [value](uint8_t* dst, size_t n) {
                     for (size_t i = 0; i + 4 <= n; i += 4) std::memcpy(dst + i, &value, 4);
                   }});
    };
  };
  struct Case {
    std::function<void(std::vector<SafetensorsEntry>&)> mutate;
    std::vector<std::string> parts;
  };
  const std::vector<Case> cases = {
      {to_fp8, {weight + "_scale", "FP8 tensor"}},
      {with_scale(DType::kI32, {1}, 1.0f), {weight + "_scale", "must be f32"}},
      {with_scale(DType::kF32, {64}, 1.0f), {weight + "_scale", "per-tensor"}},
      {with_scale(DType::kF32, {}, std::numeric_limits<float>::quiet_NaN()), {weight + "_scale", "nan"}},
      {with_scale(DType::kF32, {}, 0.0f), {weight + "_scale", " is 0"}},
      {with_scale(DType::kF32, {}, -2.0f), {weight + "_scale", " is -2"}},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(i);
    const std::string dir = CopyFixture();
    RewriteSafetensors(dir + "/model.safetensors", cases[i].mutate);
    std::vector<std::string> parts = cases[i].parts;
    parts.push_back(dir);
    ExpectLoadFails(dir, parts);
  }
  {  // with a good scale it loads and runs
    const std::string dir = CopyFixture();
    RewriteSafetensors(dir + "/model.safetensors", with_scale(DType::kF32, {}, 0.5f));
    EXPECT_TRUE(LoadRunsOrFailsNaming(dir, dir, "fp8 with a scale"));
  }
}

TEST(ModelFaults, HfAbsurdConfigNumbers) {
  struct Case {
    const char* field;
    Json value;
  };
  const Case cases[] = {
      {"hidden_size", Json(int64_t{1} << 32 | 64)},  // must not wrap to 64
      {"hidden_size", Json(int64_t{1} << 40)},
      {"num_hidden_layers", Json(int64_t{1} << 32 | 2)},
      {"num_hidden_layers", Json(1000000)},
      {"num_attention_heads", Json(int64_t{1} << 31)},
      {"num_attention_heads", Json(3)},
      {"num_attention_heads", Json(0)},
      {"num_key_value_heads", Json(3)},
      {"num_key_value_heads", Json(int64_t{1} << 32 | 4)},
      {"intermediate_size", Json(-128)},
      {"head_dim", Json(15)},
      {"head_dim", Json(int64_t{1} << 32 | 16)},
      {"head_dim", Json(2)},
      {"rms_norm_eps", Json(10.0)},
      {"rms_norm_eps", Json(-1e-5)},
      {"rope_theta", Json(0.0)},
      {"max_position_embeddings", Json(int64_t{1} << 40)},
      {"hidden_size", Json("64")},
      {"num_hidden_layers", Json(2.5)},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(StrCat(c.field, " = ", c.value.Dump()));
    const std::string dir = CopyFixture();
    EditConfig(dir, [&](Json& config) { config.Set(c.field, c.value); });
    ExpectLoadFails(dir, {dir + "/config.json"});
  }
  {  // JSON cannot spell infinity, but a number too large for a double reads as one
    const std::string dir = CopyFixture();
    std::string text = Slurp(dir + "/config.json");
    const size_t at = text.find("\"rope_theta\": 10000.0");
    ASSERT_NE(at, std::string::npos);
    text.replace(at, std::strlen("\"rope_theta\": 10000.0"), "\"rope_theta\": 1e999");
    Spit(dir + "/config.json", text);
    ExpectLoadFails(dir, {dir + "/config.json", "rope_theta"});
  }
  {  // a RoPE alpha that makes the base zero or infinite
    for (double alpha : {1e-300, 1e300}) {
      SCOPED_TRACE(alpha);
      const std::string dir = CopyFixture();
      EditConfig(dir, [&](Json& config) {
        Json scaling = *config.Find("rope_scaling");
        scaling.Set("alpha", Json(alpha));
        config.Set("rope_scaling", scaling);
      });
      ExpectLoadFails(dir, {dir + "/config.json", "RoPE"});
    }
  }
}

// ---- GGUF -----------------------------------------------------------------------------------------

// The fixture exported by ExportGguf (as `hymt quantize` writes it), once per type.
std::string ExportedGguf(const std::string& recipe) {
  static std::map<std::string, std::string> made;
  auto it = made.find(recipe);
  if (it != made.end()) return it->second;
  const std::string path = test::TempDir() + "/model-" + recipe + ".gguf";
  ExportGguf(LoadModel(test::TestDataDir() + "/fixtures/" + kFixture), recipe, path);
  return made[recipe] = path;
}

// A copy of the exported file rewritten with edits to its metadata and tensors.
struct GgufEdit {
  std::function<void(GgufMetadata&)> metadata;
  std::function<void(std::vector<TensorInfo>&)> tensors;
};

std::string RewriteGguf(const std::string& recipe, const GgufEdit& edit) {
  auto file = GgufFile::Open(ExportedGguf(recipe));
  GgufWriter w;
  for (const auto& [key, value] : file->metadata().entries()) w.metadata().Set(key, value);
  if (edit.metadata) edit.metadata(w.metadata());
  std::vector<TensorInfo> tensors = file->tensors();
  if (edit.tensors) edit.tensors(tensors);
  for (const TensorInfo& t : tensors) w.AddTensor(t.name, t.dtype, t.shape, t.data, t.bytes);
  const std::string path = test::TempDir() + "/edited.gguf";
  w.Write(path);
  return path;
}

TensorInfo& FindTensor(std::vector<TensorInfo>& tensors, const std::string& name) {
  for (auto& t : tensors)
    if (t.name == name) return t;
  ADD_FAILURE() << "no tensor " << name;
  return tensors.front();
}

TEST(ModelFaults, GgufExportedFixtureLoadsAndRuns) {
  for (const char* recipe : {"f32", "q8_0"})
    EXPECT_TRUE(LoadRunsOrFailsNaming(ExportedGguf(recipe), "", recipe));
}

TEST(ModelFaults, GgufTruncatedAtManyPointsFailsNamingTheFile) {
  const std::string whole = Slurp(ExportedGguf("q8_0"));
  auto parsed = GgufFile::Parse(reinterpret_cast<const uint8_t*>(whole.data()), whole.size(), "x");
  const uint64_t data_offset = parsed->data_offset();
  const std::string path = test::TempDir() + "/cut.gguf";
  std::vector<uint64_t> cuts = {
      4, 5, 8, 16, 24, 100, data_offset / 3, data_offset - 1, data_offset, whole.size() - 1};
  for (int i = 1; i < 24; ++i) cuts.push_back(data_offset * i / 24);
  for (int i = 1; i < 12; ++i) cuts.push_back(data_offset + (whole.size() - data_offset) * i / 12);
  for (uint64_t cut : cuts) {
    SCOPED_TRACE(testing::Message() << "cut at " << cut << " of " << whole.size());
    Spit(path, std::string_view(whole).substr(0, cut));
    // In the header the message says what was being read ("truncated at byte ... while reading",
    // "... cannot fit"); past it, which tensor's data is cut off.
    std::vector<std::string> parts = {path};
    if (cut >= data_offset) parts.push_back("tensor '");
    ExpectLoadFails(path, parts);
  }
  Spit(path, "");  // empty: not GGUF at all
  ExpectLoadFails(path, {path});
}

TEST(ModelFaults, GgufHeaderBitFlipsFailOrLoadAndRun) {
  const std::string whole = Slurp(ExportedGguf("q8_0"));
  auto parsed = GgufFile::Parse(reinterpret_cast<const uint8_t*>(whole.data()), whole.size(), "x");
  const uint64_t data_offset = parsed->data_offset();
  const std::string path = test::TempDir() + "/flipped.gguf";
  int failed = 0, loaded = 0;
  // The header is mostly the tokenizer; stride so that every region (counts, keys, types, lengths,
  // token strings, tensor infos) gets flips.
  const uint64_t stride = std::max<uint64_t>(1, data_offset / 160);
  for (uint64_t pos = 0; pos < data_offset; pos += stride) {
    std::string damaged = whole;
    damaged[pos] = static_cast<char>(damaged[pos] ^ (1 << (pos % 8)));
    Spit(path, damaged);
    (LoadRunsOrFailsNaming(path, path, StrCat("flip at byte ", pos)) ? loaded : failed)++;
  }
  EXPECT_GT(failed, 0);
  RecordProperty("gguf_header_flips", StrCat(failed, " failed, ", loaded, " loaded"));
}

TEST(ModelFaults, GgufDataBitFlipsLoadAndRun) {
  for (const char* recipe : {"f32", "q8_0"}) {
    SCOPED_TRACE(recipe);
    std::string bytes = Slurp(ExportedGguf(recipe));
    auto parsed = GgufFile::Parse(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "x");
    for (uint64_t pos = parsed->data_offset() + 1; pos < bytes.size(); pos += 509)
      bytes[pos] = static_cast<char>(bytes[pos] ^ 0x7c);  // exponents and q8_0 block scales included
    const std::string path = test::TempDir() + "/data-flipped.gguf";
    Spit(path, bytes);
    EXPECT_TRUE(LoadRunsOrFailsNaming(path, path, "data flips"));
  }
}

TEST(ModelFaults, GgufWrongArchitecture) {
  for (const char* arch : {"hunyuan-moe", "llama", ""}) {
    SCOPED_TRACE(arch);
    const std::string path = RewriteGguf(
        "q8_0",
        {[&](GgufMetadata& md) { md.Set("general.architecture", GgufValue::String(arch)); }, nullptr});
    std::vector<std::string> parts = {path, StrCat("architecture '", arch, "'")};
    if (std::string(arch) == "hunyuan-moe") parts.push_back("mixture-of-experts");
    ExpectLoadFails(path, parts);
  }
  const std::string path = RewriteGguf(
      "q8_0", {[](GgufMetadata& md) { md.Set("general.architecture", GgufValue::U32(7)); }, nullptr});
  ExpectLoadFails(path, {path, "general.architecture", "expected string"});
}

TEST(ModelFaults, GgufWrongShapesTypesAndMissingTensors) {
  {
    const std::string path = RewriteGguf("q8_0", {nullptr, [](std::vector<TensorInfo>& t) {
                                                    TensorInfo& g = FindTensor(t, "blk.0.ffn_gate.weight");
                                                    std::swap(g.shape[0], g.shape[1]);
                                                  }});
    ExpectLoadFails(path, {path, "blk.0.ffn_gate.weight", "[64, 128]", "expected [128, 64]"});
  }
  {
    const std::string path =
        RewriteGguf("q8_0", {nullptr, [](std::vector<TensorInfo>& t) {
                               t.erase(t.begin() + (&FindTensor(t, "blk.1.ffn_down.weight") - t.data()));
                             }});
    ExpectLoadFails(path, {path, "blk.1.ffn_down.weight", "missing"});
  }
  {  // a norm quantised (norms must be float)
    std::vector<uint8_t> q(DTypeBytes(DType::kQ8_0, 64));
    const std::string path = RewriteGguf("q8_0", {nullptr, [&](std::vector<TensorInfo>& t) {
                                                    TensorInfo& n = FindTensor(t, "output_norm.weight");
                                                    n.dtype = DType::kQ8_0;
                                                    n.data = q.data();
                                                    n.bytes = q.size();
                                                  }});
    ExpectLoadFails(path, {path, "output_norm.weight", "norm weights must be"});
  }
  {  // an embedding with fewer rows than the tokenizer has tokens
    const std::string path =
        RewriteGguf("q8_0", {nullptr, [](std::vector<TensorInfo>& t) {
                               for (TensorInfo& x : t) {
                                 if (x.name != "token_embd.weight" && x.name != "output.weight") continue;
                                 x.shape[0] = 256;
                                 x.bytes = DTypeBytes(x.dtype, 256 * x.shape[1]);
                               }
                             }});
    ExpectLoadFails(path, {path, "tokens but the embedding only 256 rows"});
  }
}

TEST(ModelFaults, GgufAbsurdMetadata) {
  const std::string a = "hunyuan-dense.";
  struct Case {
    std::string key;
    GgufValue value;
  };
  const std::vector<Case> cases = {
      {a + "block_count", GgufValue::U64((uint64_t{1} << 32) | 2)},  // must not wrap to 2
      {a + "block_count", GgufValue::U32(100000)},
      {a + "block_count", GgufValue::I32(-2)},
      {a + "embedding_length", GgufValue::U64((uint64_t{1} << 32) | 64)},
      {a + "embedding_length", GgufValue::I64(-64)},
      {a + "feed_forward_length", GgufValue::U64(uint64_t{1} << 63)},
      {a + "attention.head_count", GgufValue::U32(0)},
      {a + "attention.head_count", GgufValue::U64((uint64_t{1} << 32) | 4)},
      {a + "attention.head_count_kv", GgufValue::U32(3)},
      {a + "attention.key_length", GgufValue::U32(15)},
      {a + "attention.key_length", GgufValue::U32(1u << 31)},
      {a + "attention.layer_norm_rms_epsilon", GgufValue::F32(std::numeric_limits<float>::quiet_NaN())},
      {a + "attention.layer_norm_rms_epsilon", GgufValue::F32(-1)},
      {a + "rope.freq_base", GgufValue::F32(std::numeric_limits<float>::infinity())},
      {a + "rope.freq_base", GgufValue::F32(std::numeric_limits<float>::quiet_NaN())},
      {a + "rope.freq_base", GgufValue::F32(0)},
      {a + "context_length", GgufValue::U64(uint64_t{1} << 40)},
      {a + "block_count", GgufValue::String("2")},
      {"tokenizer.ggml.tokens", GgufValue::Array(std::vector<int32_t>{1, 2, 3})},
      {"tokenizer.ggml.token_type", GgufValue::Array(std::vector<int32_t>{1, 1})},
      {"tokenizer.ggml.merges", GgufValue::Array(std::vector<std::string>{"no-space-here"})},
      {"tokenizer.ggml.model", GgufValue::String("llama")},
      {"tokenizer.ggml.pre", GgufValue::String("gpt-4o")},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(StrCat(c.key, " = ", c.value.ToString()));
    const std::string path =
        RewriteGguf("q8_0", {[&](GgufMetadata& md) { md.Set(c.key, c.value); }, nullptr});
    ExpectLoadFails(path, {path});
  }
  {  // the tokenizer's tokens removed altogether: the key is named
    const std::string path = RewriteGguf("q8_0", {[](GgufMetadata& md) {
                                                    GgufMetadata kept(md.source());
                                                    for (const auto& [k, v] : md.entries())
                                                      if (k != "tokenizer.ggml.tokens") kept.Set(k, v);
                                                    md = kept;
                                                  },
                                                  nullptr});
    ExpectLoadFails(path, {path, "tokenizer.ggml.tokens", "missing"});
  }
}

}  // namespace
}  // namespace hymt
