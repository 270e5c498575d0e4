// Fuzz target: Encode, Decode and StreamDecoder on arbitrary bytes with real vocabularies.
// The first byte picks the vocabulary (bits 0-1: the fixture's hy.tiktoken, the fixture's
// tokenizer.json, the demo model's hy.tiktoken), parse_special (bit 2) and NFC (bit 3); the rest is
// the text.
#include "harness.h"

namespace hymt::fuzz {

void FuzzEncode(const uint8_t* data, size_t size) {
  if (size == 0) return;
  const uint8_t mode = data[0];
  const Tokenizer* vocabularies[] = {&TiktokenFixture(), &TokenizerJsonFixture(), &DemoTokenizer(),
                                     &TiktokenFixture()};
  Tokenizer tok = *vocabularies[mode & 3];
  tok.SetNormalization(mode & 8 ? Normalization::kNfc : Normalization::kNone);
  CheckRoundTrip(tok, AsText(data + 1, size - 1), (mode & 4) != 0);
}

}  // namespace hymt::fuzz

HYMT_FUZZ_ENTRY(hymt::fuzz::FuzzEncode)
