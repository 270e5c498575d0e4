// Fuzz target: loading a hy.tiktoken vocabulary from its bytes, then encoding with what loaded.
#include <optional>

#include "core/status.h"
#include "harness.h"

namespace hymt::fuzz {

void FuzzTiktoken(const uint8_t* data, size_t size) {
  std::optional<Tokenizer> tok;
  try {
    tok = Tokenizer::FromTiktokenText(AsText(data, size), "fuzz/hy.tiktoken");
  } catch (const Error&) {
    return;
  }
  ExerciseTokenizer(*tok, AsText(data, size));
}

}  // namespace hymt::fuzz

HYMT_FUZZ_ENTRY(hymt::fuzz::FuzzTiktoken)
