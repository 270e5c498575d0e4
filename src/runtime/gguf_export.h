// Writing a loaded model as a GGUF file with llama.cpp's `hunyuan-dense` keys and tensor names, the
// tokenizer embedded, each tensor converted to the type a recipe gives it (quant/recipe.h).
#pragma once

#include <string>

#include "runtime/loader.h"

namespace hymt {

// recipe: f32, f16, bf16, q8_0, q6_k, q5_k_m, q4_k_m, q5_0, q5_1, q4_0, q4_1. Converts on all cores
// with a progress line on stderr. Throws Error(kInvalidArgument) for an unknown recipe.
void ExportGguf(const LoadedModel& model, const std::string& recipe, const std::string& path);

}  // namespace hymt
