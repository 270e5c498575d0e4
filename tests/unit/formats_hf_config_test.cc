#include <gtest/gtest.h>

#include <string>

#include "formats/hf_config.h"
#include "formats_test_helpers.h"
#include "test_util.h"

namespace hymt {
namespace {

std::string Fixture(const std::string& rel) {
  return test::TestDataDir() + "/fixtures/" + rel;
}

// A minimal valid config with `extra` spliced in as further top-level members.
std::string Config(const std::string& extra = "") {
  return R"({"model_type":"m","vocab_size":10,"hidden_size":8,"intermediate_size":16,)"
         R"("num_hidden_layers":2,"num_attention_heads":2)" +
         (extra.empty() ? "" : "," + extra) + "}";
}

TEST(HfConfig, ReadsLegacyRopeSpelling) {
  // tiny-gqa1 spells rope as the published Hunyuan-MT-7B does: rope_theta + rope_scaling.
  HfConfig c = LoadHfConfig(Fixture("tiny-gqa1/f32/config.json"));
  EXPECT_EQ(c.model_type, "hunyuan_v1_dense");
  EXPECT_EQ(c.architectures, std::vector<std::string>{"HunYuanDenseV1ForCausalLM"});
  EXPECT_EQ(c.vocab_size, 1280);
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.intermediate_size, 128);
  EXPECT_EQ(c.num_hidden_layers, 2);
  EXPECT_EQ(c.num_attention_heads, 4);
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_EQ(c.max_position_embeddings, 4096);
  EXPECT_EQ(c.tie_word_embeddings, true);
  EXPECT_EQ(c.bos_token_ids, std::vector<int64_t>{1025});
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{1027});
  EXPECT_EQ(c.pad_token_ids, std::vector<int64_t>{1028});
  EXPECT_EQ(c.rope.theta, 10000.0);
  EXPECT_EQ(c.rope.type, "dynamic");
  EXPECT_EQ(c.rope.alpha, 1000.0);
  EXPECT_EQ(c.rope.factor, 1.0);
  EXPECT_FALSE(c.quantization.has_value());
  EXPECT_TRUE(c.name_or_path.empty());
  // Fields the struct does not name stay reachable.
  ASSERT_NE(c.raw.Find("eod_token_id"), nullptr);
  EXPECT_EQ(c.raw.Find("eod_token_id")->AsInt(), 1027);
}

TEST(HfConfig, ReadsTransformers5RopeParameters) {
  HfConfig c = LoadHfConfig(Fixture("tiny-gqa2/f32/config.json"));
  EXPECT_EQ(c.num_key_value_heads, 2);
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_EQ(c.tie_word_embeddings, false);
  EXPECT_EQ(c.rope.theta, 10000.0);
  EXPECT_EQ(c.rope.type, "dynamic");
  EXPECT_EQ(c.rope.alpha, 1000.0);
  EXPECT_EQ(c.rope.factor, 1.0);
}

TEST(HfConfig, ReadsEveryFixtureAndTheDemoModel) {
  for (const char* f : {"tiny-gqa1", "tiny-gqa2", "tiny-gqa4"}) {
    for (const char* v : {"f32", "bf16"}) {
      SCOPED_TRACE(std::string(f) + "/" + v);
      HfConfig c = LoadHfConfig(Fixture(std::string(f) + "/" + v + "/config.json"));
      EXPECT_EQ(c.rope.alpha, 1000.0);
      EXPECT_EQ(c.rope.theta, 10000.0);
      EXPECT_EQ(c.hidden_size, c.num_attention_heads * *c.head_dim);
      GenerationConfig g =
          LoadGenerationConfig(Fixture(std::string(f) + "/" + v + "/generation_config.json"));
      EXPECT_EQ(g.eos_token_ids, (std::vector<int64_t>{1027, 1024}));
      EXPECT_EQ(g.do_sample, true);
      EXPECT_EQ(g.top_k, 20);
      EXPECT_EQ(g.top_p, 0.6);
      EXPECT_EQ(g.temperature, 0.7);
      EXPECT_EQ(g.repetition_penalty, 1.05);
      EXPECT_FALSE(g.max_new_tokens.has_value());
    }
  }
  HfConfig demo = LoadHfConfig(test::SourceDir() + "/models/demo/config.json");
  EXPECT_EQ(demo.vocab_size, 12288);
  EXPECT_EQ(demo.num_hidden_layers, 8);
  EXPECT_EQ(demo.num_key_value_heads, 2);
  GenerationConfig g = LoadGenerationConfig(test::SourceDir() + "/models/demo/generation_config.json");
  EXPECT_EQ(g.eos_token_ids, (std::vector<int64_t>{12003, 12000}));
  EXPECT_EQ(g.bos_token_ids, std::vector<int64_t>{12001});
  EXPECT_EQ(g.do_sample, false);
  EXPECT_EQ(g.max_new_tokens, 256);
  EXPECT_FALSE(g.temperature.has_value());
}

TEST(HfConfig, DefaultsAndNulls) {
  HfConfig c = ParseHfConfig(Config(R"("eos_token_id":null,"rope_scaling":null,"head_dim":null)"), "c.json");
  EXPECT_EQ(c.num_key_value_heads, 2);  // = num_attention_heads
  EXPECT_FALSE(c.head_dim.has_value());
  EXPECT_FALSE(c.rms_norm_eps.has_value());
  EXPECT_FALSE(c.tie_word_embeddings.has_value());
  EXPECT_TRUE(c.eos_token_ids.empty());
  EXPECT_FALSE(c.rope.theta.has_value());
  EXPECT_TRUE(c.rope.type.empty());
  EXPECT_FALSE(c.rope.alpha.has_value());

  c = ParseHfConfig(
      Config(R"("_name_or_path":"tencent/Hunyuan-MT-7B","eos_token_id":[1,2],"bos_token_id":0)"), "c.json");
  EXPECT_EQ(c.name_or_path, "tencent/Hunyuan-MT-7B");
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(c.bos_token_ids, std::vector<int64_t>{0});
}

TEST(HfConfig, RopeParametersWinOverTheLegacySpelling) {
  HfConfig c =
      ParseHfConfig(Config(R"("rope_theta":500.0,"rope_scaling":{"type":"linear","factor":2.0},)"
                           R"("rope_parameters":{"rope_type":"dynamic","rope_theta":10000,"alpha":1000.0})"),
                    "c.json");
  EXPECT_EQ(c.rope.theta, 10000.0);
  EXPECT_EQ(c.rope.type, "dynamic");
  EXPECT_EQ(c.rope.alpha, 1000.0);
  EXPECT_EQ(c.rope.factor, 2.0);  // only in rope_scaling

  EXPECT_HYMT_ERROR(
      ParseHfConfig(Config(R"("rope_parameters":{"full_attention":{"rope_type":"default"}})"), "c.json"),
      ErrorCode::kUnsupported, "c.json", "rope_parameters.full_attention");
}

TEST(HfConfig, ReadsCompressedTensorsFp8) {
  // The shape of the published FP8 configs, with the skip list as Hunyuan spells it.
  const std::string q = R"("quantization_config":{
      "quant_method":"compressed-tensors","format":"naive-quantized","quantization_status":"compressed",
      "ignored_layers":["lm_head"],
      "config_groups":{"group_0":{"targets":["Linear"],
        "weights":{"num_bits":8,"type":"float","strategy":"tensor","dynamic":false,"symmetric":true},
        "input_activations":{"num_bits":8,"type":"float","strategy":"tensor","dynamic":false},
        "output_activations":null}}})";
  HfConfig c = ParseHfConfig(Config(q), "fp8/config.json");
  ASSERT_TRUE(c.quantization.has_value());
  const QuantizationConfig& qc = *c.quantization;
  EXPECT_EQ(qc.quant_method, "compressed-tensors");
  EXPECT_EQ(qc.format, "naive-quantized");
  EXPECT_EQ(qc.ignored_layers, std::vector<std::string>{"lm_head"});
  ASSERT_EQ(qc.groups.size(), 1u);
  EXPECT_EQ(qc.groups[0].name, "group_0");
  EXPECT_EQ(qc.groups[0].targets, std::vector<std::string>{"Linear"});
  ASSERT_TRUE(qc.groups[0].weights.has_value());
  EXPECT_EQ(qc.groups[0].weights->num_bits, 8);
  EXPECT_EQ(qc.groups[0].weights->type, "float");
  EXPECT_EQ(qc.groups[0].weights->strategy, "tensor");
  EXPECT_EQ(qc.groups[0].weights->dynamic, false);
  EXPECT_EQ(qc.groups[0].weights->symmetric, true);
  ASSERT_TRUE(qc.groups[0].input_activations.has_value());
  EXPECT_EQ(qc.groups[0].input_activations->strategy, "tensor");

  c = ParseHfConfig(Config(R"("quantization_config":{"quant_method":"compressed-tensors",)"
                           R"("config_groups":{"g":{"weights":{"type":"float"}},"h":null}})"),
                    "c.json");
  ASSERT_EQ(c.quantization->groups.size(), 1u);
  EXPECT_FALSE(c.quantization->groups[0].weights->num_bits.has_value());

  // The compressed-tensors library's own spelling, "ignore".
  c = ParseHfConfig(
      Config(R"("quantization_config":{"quant_method":"compressed-tensors","ignore":["lm_head","x"]})"),
      "c.json");
  EXPECT_EQ(c.quantization->ignored_layers, (std::vector<std::string>{"lm_head", "x"}));
  EXPECT_TRUE(c.quantization->groups.empty());
  EXPECT_TRUE(c.quantization->format.empty());

  EXPECT_HYMT_ERROR(ParseHfConfig(Config(R"("quantization_config":{"format":"x"})"), "c.json"),
                    ErrorCode::kInvalidArgument, "c.json", "quantization_config.quant_method", "missing");
  EXPECT_HYMT_ERROR(ParseHfConfig(Config(R"("quantization_config":{"quant_method":"compressed-tensors",)"
                                         R"("config_groups":{"g":{"weights":{"num_bits":"8"}}}})"),
                                  "c.json"),
                    ErrorCode::kInvalidArgument, "quantization_config.config_groups.g.weights.num_bits",
                    "positive integer", "string \"8\"");
  EXPECT_HYMT_ERROR(
      ParseHfConfig(Config(R"("quantization_config":{"quant_method":"x","ignored_layers":"lm_head"})"),
                    "c.json"),
      ErrorCode::kInvalidArgument, "quantization_config.ignored_layers", "list of strings");
}

struct BadConfig {
  std::string text;
  std::vector<const char*> expect;
};

TEST(HfConfig, ErrorsNameTheFileFieldExpectedAndFound) {
  const std::vector<BadConfig> cases = {
      {"[1]", {"expected a JSON object", "array of 1"}},
      {"{", {"invalid JSON"}},
      {R"({"vocab_size":1})", {"'model_type'", "missing"}},
      {R"({"model_type":3})", {"'model_type'", "expected a string", "found number 3"}},
      {R"({"model_type":"m","hidden_size":8,"intermediate_size":16,"num_hidden_layers":2,"num_attention_heads":2})",
       {"'vocab_size'", "missing"}},
      {Config(R"("vocab_size":"10")"), {"'vocab_size'", "appears twice"}},
      {Config(R"("rope_scaling":{"alpha":1,"alpha":2})"), {"'rope_scaling.alpha'", "appears twice"}},
      {R"({"model_type":"m","vocab_size":"10","hidden_size":8,"intermediate_size":16,"num_hidden_layers":2,)"
       R"("num_attention_heads":2})",
       {"'vocab_size'", "expected a positive integer", "found string \"10\""}},
      {R"({"model_type":"m","vocab_size":10,"hidden_size":-8,"intermediate_size":16,"num_hidden_layers":2,)"
       R"("num_attention_heads":2})",
       {"'hidden_size'", "positive integer", "found number -8"}},
      {R"({"model_type":"m","vocab_size":10,"hidden_size":8.5,"intermediate_size":16,"num_hidden_layers":2,)"
       R"("num_attention_heads":2})",
       {"'hidden_size'", "positive integer", "8.5"}},
      {Config(R"("num_key_value_heads":0)"), {"'num_key_value_heads'", "positive integer"}},
      {Config(R"("rms_norm_eps":"1e-5")"), {"'rms_norm_eps'", "positive number", "string"}},
      {Config(R"("rms_norm_eps":0)"), {"'rms_norm_eps'", "positive number"}},
      {Config(R"("tie_word_embeddings":1)"), {"'tie_word_embeddings'", "boolean", "number 1"}},
      {Config(R"("eos_token_id":"</s>")"), {"'eos_token_id'", "token id", "string"}},
      {Config(R"("eos_token_id":[1,"x"])"), {"'eos_token_id'", "list of non-negative integer token ids"}},
      {Config(R"("eos_token_id":-1)"), {"'eos_token_id'"}},
      {Config(R"("architectures":"X")"), {"'architectures'", "list of strings"}},
      {Config(R"("rope_scaling":"dynamic")"), {"'rope_scaling'", "an object", "string"}},
      {Config(R"("rope_scaling":{"alpha":"big"})"), {"'rope_scaling.alpha'", "positive number"}},
      {Config(R"("rope_parameters":{"rope_theta":-1})"), {"'rope_parameters.rope_theta'", "positive number"}},
      {Config(R"("rope_theta":true)"), {"'rope_theta'", "positive number", "boolean"}},
      {Config(R"("quantization_config":[])"), {"'quantization_config'", "an object"}},
  };
  for (const BadConfig& c : cases) {
    SCOPED_TRACE(c.text);
    try {
      ParseHfConfig(c.text, "dir/config.json");
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
      test::ExpectMessageHas(e.what(), {"dir/config.json"});
      for (const char* part : c.expect) test::ExpectMessageHas(e.what(), {part});
    }
  }
}

TEST(GenerationConfig, AllOptionalAndTyped) {
  GenerationConfig g = ParseGenerationConfig("{}", "g.json");
  EXPECT_TRUE(g.eos_token_ids.empty());
  EXPECT_FALSE(g.do_sample.has_value());
  EXPECT_FALSE(g.top_k.has_value());

  g = ParseGenerationConfig(
      R"({"eos_token_id":7,"temperature":1,"top_k":0,"top_p":null,"max_new_tokens":2048})", "g.json");
  EXPECT_EQ(g.eos_token_ids, std::vector<int64_t>{7});
  EXPECT_EQ(g.temperature, 1.0);
  EXPECT_EQ(g.top_k, 0);
  EXPECT_FALSE(g.top_p.has_value());
  EXPECT_EQ(g.max_new_tokens, 2048);

  EXPECT_HYMT_ERROR(ParseGenerationConfig(R"({"top_k":2.5})", "g.json"), ErrorCode::kInvalidArgument,
                    "g.json", "'top_k'", "integer >= 0", "2.5");
  EXPECT_HYMT_ERROR(ParseGenerationConfig(R"({"do_sample":"yes"})", "g.json"), ErrorCode::kInvalidArgument,
                    "'do_sample'", "boolean", "string \"yes\"");
  EXPECT_HYMT_ERROR(ParseGenerationConfig(R"({"temperature":-1})", "g.json"), ErrorCode::kInvalidArgument,
                    "'temperature'", "non-negative number");
  EXPECT_HYMT_ERROR(ParseGenerationConfig(R"({"eos_token_id":{"a":1}})", "g.json"),
                    ErrorCode::kInvalidArgument, "'eos_token_id'", "object");
  EXPECT_HYMT_ERROR(ParseGenerationConfig("1", "g.json"), ErrorCode::kInvalidArgument, "g.json",
                    "JSON object");
  EXPECT_HYMT_ERROR(LoadGenerationConfig(test::TempDir() + "/none.json"), ErrorCode::kNotFound, "none.json");
  EXPECT_HYMT_ERROR(LoadHfConfig(test::TempDir() + "/none.json"), ErrorCode::kNotFound, "none.json");
}

}  // namespace
}  // namespace hymt
