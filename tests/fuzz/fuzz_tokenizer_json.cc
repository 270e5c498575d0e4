// Fuzz target: loading an HF tokenizer.json from its bytes, then encoding with what loaded.
#include <optional>

#include "core/status.h"
#include "harness.h"

namespace hymt::fuzz {

void FuzzTokenizerJson(const uint8_t* data, size_t size) {
  std::optional<Tokenizer> tok;
  try {
    tok = Tokenizer::FromTokenizerJsonText(AsText(data, size), "fuzz/tokenizer.json");
  } catch (const Error&) {
    return;
  }
  ExerciseTokenizer(*tok, AsText(data, size));
}

}  // namespace hymt::fuzz

HYMT_FUZZ_ENTRY(hymt::fuzz::FuzzTokenizerJson)
