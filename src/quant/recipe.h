// Quantisation recipes: which stored type each weight tensor gets when a model is quantised as a whole
// ("q4_k_m", "q8_0", ...). The K_M mixtures follow llama.cpp's published rules, so a file hymt writes
// has the same tensor types as one llama-quantize writes; docs/QUANTIZATION.md states the rules.
#pragma once

#include <cstdint>
#include <string_view>

#include "core/dtype.h"

namespace hymt {

// The recipe names MixedTypeFor accepts: "q4_k_m", "q5_k_m", "q8_0", "q6_k", "q4_0", "bf16", "f16".
bool IsKnownRecipe(std::string_view recipe);

// The stored type of one tensor under `recipe`.
//   tensor_role  the GGUF name without "blk.N." and ".weight": "token_embd", "output", "attn_q",
//                "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down", or a norm
//                ("attn_norm", "ffn_norm", "attn_q_norm", "attn_k_norm", "output_norm": always f32).
//                When the embedding is tied (no separate output tensor; all Hunyuan models), ask for
//                the embedding as "output": it is the output head and gets the output's type.
//   layer        0-based block index (used by attn_v and ffn_down; ignored elsewhere).
//   n_layers     number of blocks.
//   cols         the tensor's row length (GGUF ne[0]); a type whose block does not divide it falls back
//                to a smaller block (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0), then to f16.
// Throws Error(kInvalidArgument) for an unknown recipe or role, or a layer outside [0, n_layers).
DType MixedTypeFor(std::string_view recipe, std::string_view tensor_role, int layer, int n_layers,
                   int64_t cols);

}  // namespace hymt
