// Replays every committed fuzz corpus file (tests/fuzz/corpus/<target>/) through its harness, so the
// seeds and every input a fuzzer once crashed on stay tested with every compiler and build, fuzzers or
// not. Also (re)writes the seeds: HYMT_WRITE_FUZZ_SEEDS=1 hymt_unit_tests --gtest_filter='FuzzSeeds.*'.
//
// Seeds are derived from the committed fixtures and kept small (a few KB): valid files, so that a
// fuzzer starts deep in the parser instead of at its first check.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "core/json.h"
#include "core/mapped_file.h"
#include "core/status.h"
#include "formats/gguf.h"
#include "formats/safetensors.h"
#include "formats/safetensors_writer.h"
#include "fuzz/harness.h"
#include "model/model.h"
#include "quant/quant.h"
#include "runtime/gguf_export.h"
#include "runtime/loader.h"
#include "test_util.h"

namespace hymt {
namespace {

namespace fs = std::filesystem;
using namespace std::string_literals;  // seeds hold NUL bytes

struct Target {
  const char* name;
  void (*run)(const uint8_t* data, size_t size);
};

const Target kTargets[] = {
    {"safetensors", fuzz::FuzzSafetensors},
    {"gguf", fuzz::FuzzGguf},
    {"tokenizer_json", fuzz::FuzzTokenizerJson},
    {"tiktoken", fuzz::FuzzTiktoken},
    {"encode", fuzz::FuzzEncode},
    {"prompt", fuzz::FuzzPrompt},
#ifdef HYMT_HAVE_SERVER
    {"http_request", fuzz::FuzzHttpRequest},
#endif
};

std::string CorpusDir(const std::string& target) {
  return test::SourceDir() + "/tests/fuzz/corpus/" + target;
}

std::vector<std::string> CorpusFiles(const std::string& target) {
  std::vector<std::string> files;
  if (!fs::is_directory(CorpusDir(target))) return files;
  for (const auto& e : fs::directory_iterator(CorpusDir(target)))
    if (e.is_regular_file()) files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

class FuzzCorpus : public testing::TestWithParam<Target> {};

// Every file runs through the harness without a crash or a broken property (a PropertyViolation or
// any exception other than hymt::Error fails here).
TEST_P(FuzzCorpus, ReplaysWithoutFindings) {
  const std::vector<std::string> files = CorpusFiles(GetParam().name);
  ASSERT_FALSE(files.empty()) << "no corpus for " << GetParam().name << " in " << CorpusDir(GetParam().name);
  for (const std::string& path : files) {
    SCOPED_TRACE(path);
    const std::string bytes = ReadFile(path);
    EXPECT_NO_THROW(GetParam().run(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
  }
}

INSTANTIATE_TEST_SUITE_P(Targets, FuzzCorpus, testing::ValuesIn(kTargets),
                         [](const testing::TestParamInfo<Target>& info) {
                           return std::string(info.param.name);
                         });

// The harness's own property checks can fail: text that spells a special token, encoded the way the
// translator encoded prompts before EncodeChat, becomes a control token.
TEST(FuzzHarness, PropertyViolationsAreReported) {
  const Tokenizer& tok = fuzz::TiktokenFixture();
  EXPECT_THROW(
      {
        std::vector<int32_t> ids = tok.Encode("a<|extra_0|>b", /*parse_special=*/true);
        for (int32_t id : ids) HYMT_FUZZ_REQUIRE(!tok.IsSpecial(id), "special id ", id);
      },
      fuzz::PropertyViolation);
}

// ---- seeds ----------------------------------------------------------------------------------------

std::string FixtureDir(const std::string& name) {
  return test::TestDataDir() + "/fixtures/" + name;
}

// Deterministic small weights (an LCG), so that regenerated seeds are byte-identical.
std::vector<float> Pseudorandom(int64_t n, uint32_t seed) {
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) {
    seed = seed * 1664525u + 1013904223u;
    x = (static_cast<float>(seed >> 8) / 16777216.0f - 0.5f) * 0.2f;
  }
  return v;
}

// A loadable model a few KB large: `hidden` wide, one layer, a twelve-token vocabulary with the
// Hunyuan 7B family's specials, built in memory and written by ExportGguf (the `hymt quantize` path).
void WriteMicroGguf(const std::string& path, int hidden, const std::string& recipe) {
  ModelConfig c;
  c.name = "micro";
  c.architecture = "hunyuan_v1_dense";
  c.hidden = hidden;
  c.ffn = hidden;
  c.n_layers = 1;
  c.head_dim = hidden >= 32 ? 8 : 4;
  c.n_heads = hidden / c.head_dim;
  c.n_kv_heads = c.n_heads / 2;
  c.vocab_rows = 16;
  c.max_positions = 64;
  c.rope.alpha = 0;

  TokenizerSpec spec;
  spec.source = "micro";
  spec.tokens = {
      "a",           "b",           "c",       " ",      "ab", "abc", "<|endoftext|>", "<|startoftext|>",
      "<|extra_0|>", "<|extra_4|>", "<|eos|>", "<|pad|>"};
  for (int32_t id = 6; id < 12; ++id) spec.added_tokens.push_back({id, true});
  spec.merge_rule = BpeModel::Rule::kMergeList;
  spec.merges = {{"a", "b"}, {"ab", "c"}};

  auto owned = std::make_shared<std::vector<std::vector<float>>>();
  ModelWeights w;
  uint32_t seed = 1;
  ForEachTensor(c, w, [&](const TensorSpec& s, Weight& out) {
    owned->push_back(s.is_norm ? std::vector<float>(static_cast<size_t>(s.cols), 1.0f)
                               : Pseudorandom(s.rows * s.cols, seed++));
    out.name = s.hf_name;
    out.dtype = DType::kF32;
    out.rows = s.rows;
    out.cols = s.cols;
    out.data = owned->back().data();
  });
  owned->push_back(c.RopeInvFreq());
  Weight rope;
  rope.dtype = DType::kF32;
  rope.rows = 1;
  rope.cols = c.head_dim / 2;
  rope.data = owned->back().data();
  for (LayerWeights& l : w.layers) l.rope_inv_freq = rope;

  LoadedModel m;
  m.name = "micro";
  m.config = c;
  m.tokenizer = std::make_shared<Tokenizer>(Tokenizer::FromSpec(std::move(spec)));
  m.model = std::make_shared<HunyuanModel>(c, std::move(w));
  m.storage = owned;
  ExportGguf(m, recipe, path);
}

// Every value type GGUF has, nested arrays and a non-default alignment, with one small tensor.
void WriteMetadataGguf(const std::string& path) {
  GgufWriter w;
  GgufMetadata& md = w.metadata();
  md.Set("general.name", GgufValue::String("metadata seed"));
  md.Set("u8", GgufValue::U8(200));
  md.Set("i8", GgufValue::I8(-100));
  md.Set("u16", GgufValue::U16(60000));
  md.Set("i16", GgufValue::I16(-30000));
  md.Set("u32", GgufValue::U32(4000000000u));
  md.Set("i32", GgufValue::I32(-2000000000));
  md.Set("f32", GgufValue::F32(1.5f));
  md.Set("bool", GgufValue::Bool(true));
  md.Set("u64", GgufValue::U64(uint64_t{1} << 63));
  md.Set("i64", GgufValue::I64(-(int64_t{1} << 62)));
  md.Set("f64", GgufValue::F64(-2.25));
  md.Set("strings", GgufValue::Array(std::vector<std::string>{"a", "", "\xe4\xbd\xa0"}));
  md.Set("floats", GgufValue::Array(std::vector<float>{0.5f, -1.0f}));
  md.Set("nested", GgufValue::ArrayOfArrays({GgufValue::Array(std::vector<int32_t>{1, 2}),
                                             GgufValue::Array(std::vector<std::string>{"x"})}));
  w.SetAlignment(64);
  std::vector<float> t = Pseudorandom(32, 7);
  w.AddTensor("t", DType::kF32, {32}, t.data(), t.size() * sizeof(float));
  std::vector<uint8_t> q(DTypeBytes(DType::kQ8_0, 64));
  QuantizeRow(DType::kQ8_0, Pseudorandom(64, 8).data(), q.data(), 64);
  w.AddTensor("q", DType::kQ8_0, {2, 32}, q.data(), q.size());
  w.Write(path);
}

// Copies tensors of a fixture into a new safetensors file, converted to `dtype`.
void WriteSafetensorsSeed(const std::string& path, const std::vector<std::string>& names, DType dtype,
                          const std::map<std::string, std::string>& metadata = {}) {
  auto src = SafetensorsSource::Open(FixtureDir("tiny-gqa1/f32"));
  std::vector<SafetensorsEntry> entries;
  for (const std::string& name : names) {
    const TensorInfo& t = src->Get(name);
    SafetensorsEntry e;
    e.name = name;
    e.dtype = dtype;
    e.shape = t.shape;
    e.fill = [&t, dtype](uint8_t* dst, size_t bytes) {
      const int64_t n = ElementCount(t);
      std::vector<float> v(static_cast<size_t>(n));
      std::memcpy(v.data(), t.data, t.bytes);
      if (dtype == DType::kF32) {
        std::memcpy(dst, v.data(), bytes);
      } else if (dtype == DType::kF8E4M3) {  // QuantizeRow has no FP8 encoder; any finite bytes do
        for (size_t i = 0; i < bytes; ++i) dst[i] = static_cast<uint8_t>((i * 37) & 0x77);
      } else {
        QuantizeRow(dtype, v.data(), dst, n);
      }
    };
    entries.push_back(std::move(e));
  }
  WriteSafetensors(path, entries, metadata);
}

// The fixture's tokenizer.json cut down to its first n vocab entries, the merges among them and a few
// specials (renumbered after them); `string_merges` writes merges as "a b" instead of [a, b].
std::string SmallTokenizerJson(size_t n, bool string_merges, bool nfc) {
  Json root = Json::Parse(ReadFile(FixtureDir("tiny-gqa2/f32/tokenizer.json")));
  Json model = *root.Find("model");
  Json vocab = Json::MakeObject();
  std::map<std::string, int64_t> kept;
  for (const auto& [text, id] : model.Find("vocab")->AsObject()) {
    if (static_cast<size_t>(id.AsInt()) < n) {
      vocab.Set(text, id);
      kept[text] = id.AsInt();
    }
  }
  Json merges = Json::MakeArray();
  for (const Json& m : model.Find("merges")->AsArray()) {
    const std::string& a = m.AsArray()[0].AsString();
    const std::string& b = m.AsArray()[1].AsString();
    if (!kept.count(a) || !kept.count(b) || !kept.count(a + b)) continue;
    if (string_merges) {
      merges.Push(Json(a + " " + b));
    } else {
      merges.Push(m);
    }
  }
  model.Set("vocab", vocab);
  model.Set("merges", merges);
  root.Set("model", model);
  Json added = Json::MakeArray();
  int64_t next = static_cast<int64_t>(n);
  for (const Json& a : root.Find("added_tokens")->AsArray()) {
    const std::string& content = a.Find("content")->AsString();
    if (content != "<|startoftext|>" && content != "<|extra_0|>" && content != "<|eos|>") continue;
    Json copy = a;
    copy.Set("id", Json(next++));
    added.Push(copy);
  }
  root.Set("added_tokens", added);
  if (nfc) root.Set("normalizer", Json(Json::Object{{"type", Json("NFC")}}));
  return root.Dump();
}

// The first n lines of the fixture's hy.tiktoken (ranks 0..n-1: itself a valid vocabulary).
std::string SmallTiktoken(size_t n) {
  const std::string all = ReadFile(FixtureDir("tiny-gqa1/f32/hy.tiktoken"));
  size_t end = 0;
  for (size_t i = 0; i < n && end != std::string::npos; ++i) end = all.find('\n', end) + 1;
  return all.substr(0, end);
}

void WriteText(const std::string& path, std::string_view text) {
  std::ofstream out(path, std::ios::binary);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
}

// Writes every seed into tests/fuzz/corpus/<target>/seed-*.
void WriteSeeds(const std::string& root) {
  auto dir = [&](const char* target) {
    std::string d = root + "/" + target;
    fs::create_directories(d);
    return d + "/";
  };
  const std::string st = dir("safetensors");
  WriteSafetensorsSeed(st + "seed-norms-f32",
                       {"model.norm.weight", "model.layers.0.self_attn.query_layernorm.weight"}, DType::kF32,
                       {{"format", "pt"}});
  WriteSafetensorsSeed(st + "seed-norms-bf16",
                       {"model.norm.weight", "model.layers.1.post_attention_layernorm.weight"}, DType::kBF16);
  WriteSafetensorsSeed(st + "seed-norm-f16", {"model.layers.0.self_attn.key_layernorm.weight"}, DType::kF16);
  WriteSafetensorsSeed(st + "seed-fp8", {"model.layers.0.self_attn.query_layernorm.weight"}, DType::kF8E4M3);
  {
    // Scalars and empty tensors, beside an FP8 weight and its per-tensor scale.
    std::vector<SafetensorsEntry> entries(3);
    entries[0] = {"w", DType::kF8E4M3, {2, 4}, [](uint8_t* dst, size_t n) { std::memset(dst, 0x38, n); }};
    entries[1] = {"w_scale", DType::kF32, {}, [](uint8_t* dst, size_t) {
                    const float one = 1;
                    std::memcpy(dst, &one, 4);
                  }};
    entries[2] = {"empty", DType::kI32, {0, 3}, [](uint8_t*, size_t) {}};
    WriteSafetensors(st + "seed-fp8-scale", entries);
  }
  WriteSafetensors(st + "seed-empty", {});

  const std::string gg = dir("gguf");
  WriteMicroGguf(gg + "seed-micro-f32", 8, "f32");
  WriteMicroGguf(gg + "seed-micro-q4_0", 32, "q4_0");
  WriteMetadataGguf(gg + "seed-metadata");

  const std::string tj = dir("tokenizer_json");
  WriteText(tj + "seed-pairs", SmallTokenizerJson(300, false, false));
  WriteText(tj + "seed-strings-nfc", SmallTokenizerJson(280, true, true));

  const std::string tt = dir("tiktoken");
  WriteText(tt + "seed-300", SmallTiktoken(300));
  WriteText(tt + "seed-40", SmallTiktoken(40));

  // encode: a mode byte (vocabulary, parse_special, NFC), then text.
  const std::string en = dir("encode");
  const std::pair<const char*, std::string> texts[] = {
      {"seed-english", "\x00The quick brown fox jumps over the lazy dog, doesn't it? 1234567"s},
      {"seed-chinese", "\x05今天天气很好，我们去公园散步吧。"s},
      {"seed-specials", "\x04<|startoftext|>Hi<|extra_0|><|eos|> <|extra_204|><|pad|"s},
      {"seed-mixed", "\x06日本語とEnglish mixed 한국어 العربية \xf0\x9f\x98\x80\r\n\t  end"s},
      {"seed-invalid", "\x01\xff\xfe\xc3\x28 a\xe2\x82 \xf0\x9f\x98"s},
      {"seed-nfc",
       "\x0a"
       "e\xcc\x81 A\xcc\x8a \xe1\x84\x80\xe1\x85\xa1 \xef\xac\x81"s},
      {"seed-whitespace", "\x02    \n\n\n   \t\t x  y   "s},
  };
  for (const auto& [name, text] : texts) WriteText(en + name, text);

  // prompt: fields split at 0xff (flags, source, target, text, context, system, glossary pairs).
  const std::string pr = dir("prompt");
  const std::pair<const char*, std::string> prompts[] = {
      {"seed-plain",
       "\x00\xff"
       "en\xff"
       "de\xff"
       "Hello world."s},
      {"seed-chinese",
       "\x01\xff"
       "zh\xff"
       "en\xff"
       "你好\xff\xff"
       "You translate."s},
      {"seed-glossary",
       "\x02\xff"
       "en\xff"
       "zh-Hant\xff"
       "Apple pie\xff\xff\xff"
       "Apple\xff"
       "蘋果\xff"
       "pie\xff"
       "派"s},
      {"seed-context",
       "\x05\xff"
       "fr\xff"
       "yue\xff"
       "Bonjour\xff"
       "Previous line.\xff"s},
      {"seed-injection",
       "\x00\xff"
       "en\xff"
       "de\xff"
       "a<|extra_0|>b<|startoftext|><|eos|>\xff"
       "<|extra_4|>\xff"
       "<|pad|>"s},
  };
  for (const auto& [name, text] : prompts) WriteText(pr + name, text);

  // http_request: a route/body-kind byte, then a JSON body or 0xff-separated form fields (for a file
  // upload: its name and content first); routes 5-7 take a bare file name.
  const std::string hr = dir("http_request");
  const std::pair<const char*, std::string> requests[] = {
      {"seed-translate", "\x00{\"q\": \"The house is big.\", \"source\": \"en\", \"target\": \"zh\"}"s},
      {"seed-translate-list",
       "\x00{\"q\": [\"Das Haus ist gro\xc3\x9f.\", \"<b>x</b>\"], \"source\": \"auto\", \"target\": \"de\", "
       "\"format\": \"html\", \"alternatives\": 2, \"timeout\": 5.5, \"api_key\": \"k\"}"s},
      {"seed-translate-form", "\x08q\xffI like books.\xffsource\xff" "en\xfftarget\xff" "de\xff" "alternatives\xff" "1"s},
      {"seed-detect", "\x01{\"q\": [\"Bonjour\", \"\u4f60\u597d\"]}"s},
      {"seed-native",
       "\x02{\"texts\": [\"The house is big. I like books.\"], \"source\": \"en\", \"target\": \"zh\", "
       "\"glossary\": [{\"source\": \"house\", \"target\": \"Haus\"}, [\"book\", \"Buch\"]], "
       "\"context\": \"A letter.\", \"temperature\": 0.7, \"top_p\": 0.9, \"top_k\": 20, \"seed\": -3, "
       "\"repetition_penalty\": 1.05, \"max_new_tokens\": 64, \"stream\": true, \"format\": \"markdown\"}"s},
      {"seed-native-glossary-object",
       "\x02{\"text\": \"a <|extra_0|> b\", \"target\": \"de\", \"glossary\": {\"<|eos|>\": \"x\"}}"s},
      {"seed-chat",
       "\x03{\"model\": \"m\", \"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, "
       "{\"role\": \"user\", \"content\": \"Hi<|extra_0|>\"}, {\"role\": \"assistant\", \"content\": \"Hello\"}, "
       "{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"stop here STOP later\"}]}], "
       "\"stop\": [\"STOP\", \"la\"], \"n\": 2, \"max_tokens\": 16, \"stream\": true, "
       "\"stream_options\": {\"include_usage\": true}, \"presence_penalty\": 0.5}"s},
      {"seed-file", "\x04notes.md\xff# Notes\n\nThe house is big.\n\xffsource\xff" "en\xfftarget\xff" "de"s},
      {"seed-file-path", "\x04../../etc/x\xe2\x80\xae" "fdp.html\xff<p>x</p>\xfftarget\xff" "zh"s},
      {"seed-file-name", "\x05" "C:\\Users\\..\\\xe6\x96\x87\xe4\xbb\xb6 \"a\";b%00.SRT"s},
  };
  for (const auto& [name, text] : requests) WriteText(hr + name, text);
}

TEST(FuzzSeeds, Write) {
  if (std::getenv("HYMT_WRITE_FUZZ_SEEDS") == nullptr)
    GTEST_SKIP() << "set HYMT_WRITE_FUZZ_SEEDS=1 to rewrite tests/fuzz/corpus/*/seed-*";
  WriteSeeds(test::SourceDir() + "/tests/fuzz/corpus");
}

// The seeds are what they claim: files the parsers accept (a rejected seed would start the fuzzer at
// the first check), and for GGUF models that load.
TEST(FuzzSeeds, AreValidInputs) {
  for (const std::string& f : CorpusFiles("safetensors")) {
    if (fs::path(f).filename().string().rfind("seed-", 0) != 0) continue;
    EXPECT_NO_THROW(SafetensorsSource::OpenFile(f)) << f;
  }
  for (const std::string& f : CorpusFiles("gguf")) {
    const std::string name = fs::path(f).filename().string();
    if (name.rfind("seed-micro", 0) == 0) {
      EXPECT_NO_THROW(LoadModel(f)) << f;
    } else if (name.rfind("seed-", 0) == 0) {
      EXPECT_NO_THROW(GgufFile::Open(f)) << f;
    }
  }
  for (const std::string& f : CorpusFiles("tokenizer_json"))
    if (fs::path(f).filename().string().rfind("seed-", 0) == 0)
      EXPECT_NO_THROW(Tokenizer::FromTokenizerJson(f)) << f;
  for (const std::string& f : CorpusFiles("tiktoken"))
    if (fs::path(f).filename().string().rfind("seed-", 0) == 0)
      EXPECT_NO_THROW(Tokenizer::FromTiktokenFile(f)) << f;
}

}  // namespace
}  // namespace hymt
