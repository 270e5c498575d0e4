// The official FP8 layout (compressed-tensors, naive-quantized: float8 e4m3 weights with a per-tensor f32
// weight_scale and input_scale; embeddings, norms and the head unquantised). A fixture is converted to
// that layout here; hymt must load it and compute exactly what the same model with the dequantised
// weights (e4m3 value x scale, in f32) computes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>

#include "backends/cpu/cpu_ops.h"
#include "core/half.h"
#include "core/json.h"
#include "core/mapped_file.h"
#include "core/status.h"
#include "formats/safetensors.h"
#include "formats/safetensors_writer.h"
#include "runtime/loader.h"
#include "runtime/oneshot.h"
#include "test_util.h"

namespace hymt {
namespace {

// Nearest e4m3fn code to x (ties to the even code); x within the format's range.
uint8_t ToE4M3(float x) {
  uint8_t best = 0;
  float best_err = INFINITY;
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7f) == 0x7f) continue;  // NaN
    float v = F8E4M3ToF32(static_cast<uint8_t>(c));
    float err = std::fabs(v - x);
    if (err < best_err || (err == best_err && (c & 1) == 0)) {
      best = static_cast<uint8_t>(c);
      best_err = err;
    }
  }
  return best;
}

bool IsQuantised(const std::string& name) {
  for (const char* p : {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"})
    if (name.find(p) != std::string::npos) return true;
  return false;
}

// Writes the FP8 checkpoint and, beside it, its exact f32 dequantisation.
void WriteFp8AndReference(const std::string& src_dir, const std::string& fp8_dir, const std::string& ref_dir) {
  auto src = SafetensorsSource::Open(src_dir);
  std::vector<SafetensorsEntry> fp8, ref;
  for (const TensorInfo& t : src->tensors()) {
    ASSERT_EQ(t.dtype, DType::kF32);
    const size_t n = t.bytes / 4;
    std::vector<float> w(n);
    std::memcpy(w.data(), t.data, t.bytes);
    if (!IsQuantised(t.name)) {
      auto fill = [w](uint8_t* dst, size_t bytes) { std::memcpy(dst, w.data(), bytes); };
      fp8.push_back({t.name, DType::kF32, t.shape, fill});
      ref.push_back({t.name, DType::kF32, t.shape, fill});
      continue;
    }
    float amax = 0;
    for (float v : w) amax = std::max(amax, std::fabs(v));
    const float scale = amax / 448.0f;
    std::vector<uint8_t> codes(n);
    std::vector<float> deq(n);
    for (size_t i = 0; i < n; ++i) {
      codes[i] = ToE4M3(w[i] / scale);
      deq[i] = F8E4M3ToF32(codes[i]) * scale;
    }
    fp8.push_back({t.name, DType::kF8E4M3, t.shape, [codes](uint8_t* d, size_t b) { std::memcpy(d, codes.data(), b); }});
    const std::string base = t.name.substr(0, t.name.size() - std::string("weight").size());
    fp8.push_back({base + "weight_scale", DType::kF32, {1}, [scale](uint8_t* d, size_t) { std::memcpy(d, &scale, 4); }});
    const float input_scale = 0.05f;  // static activation scale: part of the layout, unused for weight-only dequant
    fp8.push_back({base + "input_scale", DType::kF32, {1}, [input_scale](uint8_t* d, size_t) { std::memcpy(d, &input_scale, 4); }});
    ref.push_back({t.name, DType::kF32, t.shape, [deq](uint8_t* d, size_t b) { std::memcpy(d, deq.data(), b); }});
  }
  WriteSafetensors(fp8_dir + "/model.safetensors", fp8);
  WriteSafetensors(ref_dir + "/model.safetensors", ref);
  for (const char* f : {"generation_config.json", "tokenizer.json", "hy.tiktoken"}) {
    if (!FileExists(JoinPath(src_dir, f))) continue;
    std::string data = ReadFile(JoinPath(src_dir, f));
    std::ofstream(JoinPath(fp8_dir, f)) << data;
    std::ofstream(JoinPath(ref_dir, f)) << data;
  }
  Json cfg = Json::Parse(ReadFile(JoinPath(src_dir, "config.json")));
  std::ofstream(JoinPath(ref_dir, "config.json")) << cfg.Dump();
  Json q = Json::Parse(R"({"quant_method": "compressed-tensors", "format": "naive-quantized",
      "ignored_layers": ["lm_head"], "config_groups": {"group_0": {"targets": ["Linear"],
      "weights": {"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": false, "symmetric": true},
      "input_activations": {"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": false, "symmetric": true}}}})");
  cfg.Set("quantization_config", std::move(q));
  std::ofstream(JoinPath(fp8_dir, "config.json")) << cfg.Dump();
}

TEST(Fp8Checkpoint, LoadsAndMatchesItsDequantisedWeights) {
  const std::string src = test::TestDataDir() + "/fixtures/tiny-gqa2/f32";
  const std::string fp8_dir = test::TempDir(), ref_dir = test::TempDir();
  WriteFp8AndReference(src, fp8_dir, ref_dir);
  LoadedModel fp8 = LoadModel(fp8_dir);
  LoadedModel ref = LoadModel(ref_dir);
  bool saw_fp8 = false;
  for (const auto& [type, counts] : fp8.TypeSummary()) saw_fp8 |= type == "f8_e4m3";
  EXPECT_TRUE(saw_fp8) << "the projections stay e4m3 in memory";
  auto ops = CreateCpuOps();
  std::vector<int32_t> ids = fp8.tokenizer->Encode(
      "<|startoftext|>Translate the following segment into Chinese, without additional explanation.\n\nHello, world.<|extra_0|>",
      true);
  std::vector<float> a = ForwardLogits(*fp8.model, *ops, ids);
  std::vector<float> b = ForwardLogits(*ref.model, *ops, ids);
  ASSERT_EQ(a.size(), b.size());
  double max_diff = 0, max_ref = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    max_diff = std::max(max_diff, std::fabs(static_cast<double>(a[i]) - b[i]));
    max_ref = std::max(max_ref, std::fabs(static_cast<double>(b[i])));
  }
  // Same values; only the order of the scale multiply differs (f32 rounding).
  EXPECT_LE(max_diff / max_ref, 1e-5);
  EXPECT_EQ(GreedyContinuation(*fp8.model, *ops, ids, 16), GreedyContinuation(*ref.model, *ops, ids, 16));
}

TEST(Fp8Checkpoint, MissingScaleIsAClearError) {
  const std::string src = test::TestDataDir() + "/fixtures/tiny-gqa2/f32";
  const std::string fp8_dir = test::TempDir(), ref_dir = test::TempDir();
  WriteFp8AndReference(src, fp8_dir, ref_dir);
  // Rewrite the weights without one scale tensor.
  auto st = SafetensorsSource::Open(fp8_dir);
  std::vector<SafetensorsEntry> kept;
  for (const TensorInfo& t : st->tensors()) {
    if (t.name == "model.layers.0.self_attn.q_proj.weight_scale") continue;
    std::vector<uint8_t> bytes(t.data, t.data + t.bytes);
    kept.push_back({t.name, t.dtype, t.shape, [bytes](uint8_t* d, size_t b) { std::memcpy(d, bytes.data(), b); }});
  }
  st.reset();
  WriteSafetensors(fp8_dir + "/model.safetensors", kept);
  try {
    LoadModel(fp8_dir);
    FAIL() << "loaded an FP8 weight without its scale";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("q_proj.weight_scale"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hymt
