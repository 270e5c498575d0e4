// MixedTypeFor: llama.cpp's published per-tensor rules for the K_M mixtures, the output head, and the
// fallbacks for rows a block does not divide.
#include <gtest/gtest.h>

#include <set>

#include "core/dtype.h"
#include "core/status.h"
#include "quant/recipe.h"

namespace hymt {
namespace {

constexpr int kLayers = 32;  // Hunyuan 7B and 1.8B
constexpr int64_t kHidden = 4096;

// llama.cpp's use_more_bits for 32 layers: the first and last eighth (0-3, 28-31) and every third
// layer between, starting at 6.
const std::set<int> kMoreBits32 = {0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31};

TEST(Recipe, Q4_K_MBumpsAttnVAndFfnDownInTheChosenLayers) {
  for (const char* role : {"attn_v", "ffn_down"}) {
    for (int layer = 0; layer < kLayers; ++layer) {
      const DType want = kMoreBits32.count(layer) ? DType::kQ6_K : DType::kQ4_K;
      EXPECT_EQ(MixedTypeFor("q4_k_m", role, layer, kLayers, kHidden), want) << role << " layer " << layer;
      const DType want5 = kMoreBits32.count(layer) ? DType::kQ6_K : DType::kQ5_K;
      EXPECT_EQ(MixedTypeFor("q5_k_m", role, layer, kLayers, kHidden), want5) << role << " layer " << layer;
    }
  }
  for (const char* role : {"attn_q", "attn_k", "attn_output", "ffn_gate", "ffn_up"}) {
    for (int layer = 0; layer < kLayers; ++layer)
      EXPECT_EQ(MixedTypeFor("q4_k_m", role, layer, kLayers, kHidden), DType::kQ4_K) << role << " " << layer;
  }
}

TEST(Recipe, UseMoreBitsForOtherDepths) {
  // 24 layers: eighths at 3 and 21; between, (layer - 3) % 3 == 2 picks 5, 8, ..., 20.
  std::set<int> got;
  for (int layer = 0; layer < 24; ++layer)
    if (MixedTypeFor("q4_k_m", "attn_v", layer, 24, kHidden) == DType::kQ6_K) got.insert(layer);
  EXPECT_EQ(got, (std::set<int>{0, 1, 2, 5, 8, 11, 14, 17, 20, 21, 22, 23}));
}

TEST(Recipe, OutputHeadAndEmbedding) {
  EXPECT_EQ(MixedTypeFor("q4_k_m", "output", 0, kLayers, kHidden), DType::kQ6_K);
  EXPECT_EQ(MixedTypeFor("q5_k_m", "output", 0, kLayers, kHidden), DType::kQ6_K);
  EXPECT_EQ(MixedTypeFor("q4_0", "output", 0, kLayers, kHidden), DType::kQ6_K);
  EXPECT_EQ(MixedTypeFor("q6_k", "output", 0, kLayers, kHidden), DType::kQ6_K);
  EXPECT_EQ(MixedTypeFor("q8_0", "output", 0, kLayers, kHidden), DType::kQ8_0);
  // An untied input embedding keeps the base type.
  EXPECT_EQ(MixedTypeFor("q4_k_m", "token_embd", 0, kLayers, kHidden), DType::kQ4_K);
  EXPECT_EQ(MixedTypeFor("q8_0", "token_embd", 0, kLayers, kHidden), DType::kQ8_0);
  // An output whose rows the base block does not divide: Q8_0.
  EXPECT_EQ(MixedTypeFor("q4_k_m", "output", 0, kLayers, 4000), DType::kQ8_0);
}

TEST(Recipe, NormsStayF32AndFloatRecipesConvertEveryMatrix) {
  for (const char* role : {"attn_norm", "ffn_norm", "attn_q_norm", "attn_k_norm", "output_norm"})
    EXPECT_EQ(MixedTypeFor("q4_k_m", role, 3, kLayers, 128), DType::kF32) << role;
  for (const char* role : {"token_embd", "output", "attn_v", "ffn_down"}) {
    EXPECT_EQ(MixedTypeFor("bf16", role, 0, kLayers, kHidden), DType::kBF16) << role;
    EXPECT_EQ(MixedTypeFor("f16", role, 0, kLayers, 100), DType::kF16) << role;
  }
}

TEST(Recipe, RowsTheBlockDoesNotDivideFallBack) {
  // 4000 = 125 * 32: no 256-blocks, but 32-blocks fit.
  EXPECT_EQ(MixedTypeFor("q4_k_m", "attn_q", 5, kLayers, 4000), DType::kQ5_0);
  EXPECT_EQ(MixedTypeFor("q5_k_m", "attn_q", 5, kLayers, 4000), DType::kQ5_1);
  EXPECT_EQ(MixedTypeFor("q4_k_m", "attn_v", 0, kLayers, 4000), DType::kQ8_0);  // Q6_K -> Q8_0
  EXPECT_EQ(MixedTypeFor("q6_k", "ffn_up", 0, kLayers, 4000), DType::kQ8_0);
  // 100: not even 32-blocks.
  for (const char* recipe : {"q4_k_m", "q5_k_m", "q6_k", "q8_0", "q4_0"})
    EXPECT_EQ(MixedTypeFor(recipe, "ffn_gate", 1, kLayers, 100), DType::kF16) << recipe;
  EXPECT_EQ(MixedTypeFor("q4_0", "attn_k", 1, kLayers, 4000), DType::kQ4_0);
}

// The recipe reproduces the published HY-MT1.5-7B / Hy-MT2-7B Q4_K_M file (4.62 GB, docs MODEL.md): the
// tensor bytes of the 7B shape (tied embedding of 128,167 rows, asked for as "output") come to 4.617 GB.
TEST(Recipe, Hunyuan7BQ4_K_MSizeMatchesThePublishedFile) {
  constexpr int64_t kFfn = 14336, kKv = 1024, kVocab = 128167;
  struct Tensor {
    const char* role;
    int64_t rows, cols;
  };
  const Tensor layer_tensors[] = {
      {"attn_q", kHidden, kHidden},      {"attn_k", kKv, kHidden},    {"attn_v", kKv, kHidden},
      {"attn_output", kHidden, kHidden}, {"ffn_gate", kFfn, kHidden}, {"ffn_up", kFfn, kHidden},
      {"ffn_down", kHidden, kFfn},       {"attn_norm", 1, kHidden},   {"ffn_norm", 1, kHidden},
      {"attn_q_norm", 1, 128},           {"attn_k_norm", 1, 128}};
  double bytes = 0;
  for (int layer = 0; layer < kLayers; ++layer) {
    for (const Tensor& t : layer_tensors)
      bytes += DTypeBytes(MixedTypeFor("q4_k_m", t.role, layer, kLayers, t.cols), t.rows * t.cols);
  }
  bytes += DTypeBytes(MixedTypeFor("q4_k_m", "output", 0, kLayers, kHidden), kVocab * kHidden);
  bytes += DTypeBytes(MixedTypeFor("q4_k_m", "output_norm", 0, kLayers, kHidden), kHidden);
  EXPECT_NEAR(bytes / 1e9, 4.62, 0.005);
}

TEST(Recipe, RejectsWhatItDoesNotKnow) {
  EXPECT_TRUE(IsKnownRecipe("q4_k_m"));
  EXPECT_FALSE(IsKnownRecipe("q3_k_m"));
  auto code_of = [](auto fn) {
    try {
      fn();
    } catch (const Error& e) {
      return e.code();
    }
    return ErrorCode::kInternal;
  };
  EXPECT_EQ(code_of([] { MixedTypeFor("q3_k_m", "attn_q", 0, kLayers, kHidden); }),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of([] { MixedTypeFor("q4_k_m", "blk.0.attn_q.weight", 0, kLayers, kHidden); }),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of([] { MixedTypeFor("q4_k_m", "attn_v", kLayers, kLayers, kHidden); }),
            ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace hymt
