// The fuzz harnesses: one function per target, each in its own fuzz_<target>.cc, shared by the
// libFuzzer binaries (built with clang by HYMT_FUZZ, where HYMT_FUZZ_MAIN makes each file its
// binary's entry point) and by the unit test that replays every committed corpus file with any
// compiler (tests/unit/fuzz_corpus_test.cc), so an input once found keeps being tested.
//
// A harness feeds arbitrary bytes to one parser. hymt::Error is the expected outcome of bad input and
// is swallowed; anything else (a crash, a sanitizer report, another exception, a broken property) is a
// bug. Properties are checked with HYMT_FUZZ_REQUIRE, which throws PropertyViolation: uncaught in the
// fuzzer (libFuzzer reports the abort and saves the input), a test failure in the replay test.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "core/strings.h"
#include "formats/tensor_source.h"
#include "tokenizer/tokenizer.h"

namespace hymt::fuzz {

// A broken property: a bug in hymt, never the input's fault.
class PropertyViolation : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

// ---- the targets (the corpus folder of each is tests/fuzz/corpus/<name>) ----
// safetensors: SafetensorsSource::Parse on the bytes; a parsed file's tensors must lie inside it.
void FuzzSafetensors(const uint8_t* data, size_t size);
// gguf: GgufFile::Parse on the bytes; a parsed file's tensors must lie inside it and every metadata
// value must render. A file that names an architecture is also loaded as a model (LoadModel) and,
// when it loads, run for a few tokens on the reference ops.
void FuzzGguf(const uint8_t* data, size_t size);
// tokenizer_json: Tokenizer::FromTokenizerJsonText; a loaded tokenizer must encode and decode.
void FuzzTokenizerJson(const uint8_t* data, size_t size);
// tiktoken: Tokenizer::FromTiktokenText; a loaded tokenizer must encode and decode.
void FuzzTiktoken(const uint8_t* data, size_t size);
// encode: Encode, Decode and StreamDecoder on arbitrary bytes with real vocabularies.
void FuzzEncode(const uint8_t* data, size_t size);
// prompt: prompt rendering and chat encoding with arbitrary language codes, text, context and
// glossaries.
void FuzzPrompt(const uint8_t* data, size_t size);
#ifdef HYMT_HAVE_SERVER
// http_request: request bodies (JSON or form fields) into the server's typed requests, then their
// prompts, chat template and stop strings. Built with the server (HYMT_SERVER).
void FuzzHttpRequest(const uint8_t* data, size_t size);
#endif

// ---- helpers shared by the targets (harness.cc) ----
// Every tensor of a parsed file lies inside [data, data + size) with the byte count its type and
// shape need; its first and last bytes are read (so ASan checks them).
void CheckTensorsInside(const TensorSource& src, const uint8_t* data, size_t size);
// Properties of Encode on `text`: ids in range, no special id without parse_special, Decode(Encode(x))
// == x without normalisation (== NFC(x) with it, for valid UTF-8 not parsed for specials), and a
// StreamDecoder that emits only valid UTF-8 and, for valid text, exactly Decode's.
void CheckRoundTrip(const Tokenizer& tok, std::string_view text, bool parse_special);
// CheckRoundTrip on a few fixed texts and on `input`'s start, and a lookup of the first ids.
void ExerciseTokenizer(const Tokenizer& tok, std::string_view input);
// Splits at 0xff, a byte valid UTF-8 never holds, so that any valid text fits in one field.
std::vector<std::string_view> SplitFields(std::string_view s);
// The committed vocabularies: the fixture's hy.tiktoken and tokenizer.json, and the demo model's.
const Tokenizer& TiktokenFixture();
const Tokenizer& TokenizerJsonFixture();
const Tokenizer& DemoTokenizer();

inline std::string_view AsText(const uint8_t* data, size_t size) {
  return std::string_view(reinterpret_cast<const char*>(data), size);
}

}  // namespace hymt::fuzz

// Checks a property of the code under test; on failure throws PropertyViolation with the message.
#define HYMT_FUZZ_REQUIRE(cond, ...)                                                                       \
  do {                                                                                                     \
    if (!(cond))                                                                                           \
      throw ::hymt::fuzz::PropertyViolation(::hymt::StrCat(__FILE__, ":", __LINE__, ": property '", #cond, \
                                                           "' failed" __VA_OPT__(, ": ", ) __VA_ARGS__));  \
  } while (0)

// Makes a harness function the libFuzzer entry point when the file is built as a fuzzer.
#ifdef HYMT_FUZZ_MAIN
#define HYMT_FUZZ_ENTRY(fn)                                                 \
  extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { \
    fn(data, size);                                                         \
    return 0;                                                               \
  }
#else
#define HYMT_FUZZ_ENTRY(fn)
#endif
