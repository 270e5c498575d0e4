#include "quant/recipe.h"

#include <algorithm>
#include <iterator>

#include "core/status.h"

namespace hymt {
namespace {

struct Recipe {
  std::string_view name;
  DType base;      // every matrix not named by a rule below
  bool k_mixture;  // the _K_M rules: Q6_K for attn_v and ffn_down in the layers UseMoreBits picks
};

constexpr Recipe kRecipes[] = {
    {"q4_k_m", DType::kQ4_K, true}, {"q5_k_m", DType::kQ5_K, true}, {"q8_0", DType::kQ8_0, false},
    {"q6_k", DType::kQ6_K, false},  {"q4_0", DType::kQ4_0, false},  {"bf16", DType::kBF16, false},
    {"f16", DType::kF16, false},    {"f32", DType::kF32, false},  {"q4_1", DType::kQ4_1, false},
    {"q5_0", DType::kQ5_0, false},  {"q5_1", DType::kQ5_1, false},
};

constexpr std::string_view kMatrixRoles[] = {"token_embd",  "output",   "attn_q", "attn_k",  "attn_v",
                                             "attn_output", "ffn_gate", "ffn_up", "ffn_down"};
// 1-D tensors: llama.cpp never quantises them, and neither does hymt.
constexpr std::string_view kNormRoles[] = {"attn_norm", "ffn_norm", "attn_q_norm", "attn_k_norm",
                                           "output_norm"};

template <typename List>
bool Contains(const List& list, std::string_view s) {
  return std::find(std::begin(list), std::end(list), s) != std::end(list);
}

const Recipe* FindRecipe(std::string_view name) {
  for (const Recipe& r : kRecipes)
    if (r.name == name) return &r;
  return nullptr;
}

// llama.cpp's use_more_bits: the first and last eighth of the layers and every third layer between.
bool UseMoreBits(int layer, int n_layers) {
  return layer < n_layers / 8 || layer >= 7 * n_layers / 8 || (layer - n_layers / 8) % 3 == 2;
}

bool BlockDivides(DType t, int64_t cols) {
  return cols % GetDTypeInfo(t).block_size == 0;
}

// llama.cpp's fallback for rows a 256-block does not divide; hymt extends it to the 32-element formats
// (f16 when 32 does not divide either) where llama.cpp would refuse the tensor.
DType FitToColumns(DType t, int64_t cols) {
  if (BlockDivides(t, cols)) return t;
  DType smaller = DType::kF16;
  if (t == DType::kQ4_K) smaller = DType::kQ5_0;
  if (t == DType::kQ5_K) smaller = DType::kQ5_1;
  if (t == DType::kQ6_K) smaller = DType::kQ8_0;
  return BlockDivides(smaller, cols) ? smaller : DType::kF16;
}

}  // namespace

bool IsKnownRecipe(std::string_view recipe) {
  return FindRecipe(recipe) != nullptr;
}

DType MixedTypeFor(std::string_view recipe, std::string_view tensor_role, int layer, int n_layers,
                   int64_t cols) {
  const Recipe* r = FindRecipe(recipe);
  if (r == nullptr)
    Fail(ErrorCode::kInvalidArgument, "unknown quantisation recipe '", recipe,
         "' (expected q4_k_m, q5_k_m, q8_0, q6_k, q5_0, q5_1, q4_0, q4_1, bf16, f16 or f32)");
  if (Contains(kNormRoles, tensor_role)) return DType::kF32;
  if (!Contains(kMatrixRoles, tensor_role))
    Fail(ErrorCode::kInvalidArgument, "unknown tensor role '", tensor_role, "' for recipe ", recipe);
  const bool per_layer = tensor_role == "attn_v" || tensor_role == "ffn_down";
  if (per_layer && (n_layers <= 0 || layer < 0 || layer >= n_layers))
    Fail(ErrorCode::kInvalidArgument, "layer ", layer, " of ", n_layers, " for ", tensor_role);
  // llama.cpp applies no per-tensor rules to the float recipes.
  if (!GetDTypeInfo(r->base).quantized) return r->base;

  DType t = r->base;
  if (tensor_role == "output") {
    // The output head is the most sensitive matrix: Q6_K unless the recipe is already Q8_0.
    if (!BlockDivides(r->base, cols))
      t = DType::kQ8_0;
    else if (r->base != DType::kQ8_0)
      t = DType::kQ6_K;
  } else if (per_layer && r->k_mixture && UseMoreBits(layer, n_layers)) {
    t = DType::kQ6_K;
  }
  return FitToColumns(t, cols);
}

}  // namespace hymt
