#include "harness.h"

#include "core/status.h"
#include "core/utf8.h"
#include "tokenizer/unicode.h"

namespace hymt::fuzz {
namespace {

std::string FixturePath(const char* relative) {
  return StrCat(HYMT_SOURCE_DIR, "/", relative);
}

}  // namespace

void CheckTensorsInside(const TensorSource& src, const uint8_t* data, size_t size) {
  uint8_t sink = 0;
  for (const TensorInfo& t : src.tensors()) {
    HYMT_FUZZ_REQUIRE(src.Find(t.name) == &t, "tensor '", t.name, "' is not found by its name");
    HYMT_FUZZ_REQUIRE(t.bytes == DTypeBytes(t.dtype, ElementCount(t)), "tensor '", t.name, "'");
    if (t.bytes == 0) continue;
    HYMT_FUZZ_REQUIRE(
        t.data >= data && t.bytes <= size && static_cast<size_t>(t.data - data) <= size - t.bytes, "tensor '",
        t.name, "' lies outside the file");
    sink ^= t.data[0] ^ t.data[t.bytes - 1];
  }
  asm volatile("" : : "r"(sink));  // keeps the reads
}

void CheckRoundTrip(const Tokenizer& tok, std::string_view text, bool parse_special) {
  std::vector<int32_t> ids;
  try {
    ids = tok.Encode(text, parse_special);
  } catch (const Error& e) {
    // Documented: a vocabulary may lack a byte the text needs.
    HYMT_FUZZ_REQUIRE(e.code() == ErrorCode::kInvalidArgument, e.what());
    return;
  }
  for (int32_t id : ids) {
    HYMT_FUZZ_REQUIRE(id >= 0 && id < tok.n_tokens(), "id ", id, " of ", tok.n_tokens());
    if (!parse_special) HYMT_FUZZ_REQUIRE(!tok.IsSpecial(id), "special id ", id, " without parse_special");
  }
  const std::string decoded = tok.Decode(ids);
  if (tok.normalization() == Normalization::kNone) {
    HYMT_FUZZ_REQUIRE(decoded == text, "Decode(Encode(x)) != x");
  } else if (!parse_special && IsValidUtf8(text)) {
    // With parse_special the text between special tokens is normalised piece by piece (as HF does
    // for added tokens), which NFC of the whole need not equal.
    std::string nfc;
    AppendNfc(text, &nfc);
    HYMT_FUZZ_REQUIRE(decoded == nfc, "Decode(Encode(x)) != NFC(x)");
  }
  StreamDecoder stream(tok);
  std::string streamed;
  for (int32_t id : ids) {
    std::string chunk = stream.Push(id);
    HYMT_FUZZ_REQUIRE(IsValidUtf8(chunk), "StreamDecoder emitted invalid UTF-8");
    streamed += chunk;
  }
  std::string rest = stream.Finish();
  HYMT_FUZZ_REQUIRE(IsValidUtf8(rest), "StreamDecoder::Finish emitted invalid UTF-8");
  streamed += rest;
  if (IsValidUtf8(decoded)) HYMT_FUZZ_REQUIRE(streamed == decoded, "streamed text differs from Decode");
}

void ExerciseTokenizer(const Tokenizer& tok, std::string_view input) {
  static const char* const kTexts[] = {"Hello, world! 123", "你好，世界。", "<|startoftext|>a<|extra_0|>",
                                       "  \r\n\t x", "caf\xc3\xa9 \xff\xfe"};
  for (const char* t : kTexts) {
    CheckRoundTrip(tok, t, true);
    CheckRoundTrip(tok, t, false);
  }
  CheckRoundTrip(tok, input.substr(0, 256), true);
  for (int32_t id = 0; id < tok.n_tokens() && id < 64; ++id)
    HYMT_FUZZ_REQUIRE(tok.TokenId(tok.TokenBytes(id)).has_value(), "token ", id,
                      " is not found by its bytes");
}

std::vector<std::string_view> SplitFields(std::string_view s) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || static_cast<uint8_t>(s[i]) == 0xff) {
      out.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  return out;
}

const Tokenizer& TiktokenFixture() {
  static const Tokenizer tok =
      Tokenizer::FromTiktokenFile(FixturePath("tests/data/fixtures/tiny-gqa1/f32/hy.tiktoken"));
  return tok;
}

const Tokenizer& TokenizerJsonFixture() {
  static const Tokenizer tok =
      Tokenizer::FromTokenizerJson(FixturePath("tests/data/fixtures/tiny-gqa2/f32/tokenizer.json"));
  return tok;
}

const Tokenizer& DemoTokenizer() {
  static const Tokenizer tok = Tokenizer::FromTiktokenFile(FixturePath("models/demo/hy.tiktoken"));
  return tok;
}

}  // namespace hymt::fuzz
