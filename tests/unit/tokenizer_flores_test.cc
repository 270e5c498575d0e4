// Every FLORES-200 devtest line (38 languages) against the goldens made with tiktoken and HF tokenizers
// (tools/tokenizer_goldens.py): identical ids, exact round trips, identical three-pass pieces, and the
// tokenizer.json loader agreeing with the tiktoken loader.
#include <gtest/gtest.h>

#include "core/utf8.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer_test_util.h"

namespace hymt {
namespace {

using test::FloresGoldens;
using test::FloresLines;
using test::IdsHash;

constexpr int kMaxReported = 5;  // mismatches printed per test; all are counted

std::string Ids(const std::vector<int32_t>& ids) {
  return StrJoin(ids, " ");
}

// Compares `tokenizer` with the golden ids of every line; returns the number of lines that differ.
int CountGoldenMismatches(const Tokenizer& tokenizer) {
  const Json& languages = *FloresGoldens().Find("languages");
  EXPECT_EQ(FloresLines().size(), languages.AsObject().size());
  int mismatches = 0;
  size_t lines_checked = 0;
  for (const auto& [code, golden] : languages.AsObject()) {
    auto it = FloresLines().find(code);
    if (it == FloresLines().end()) {
      ADD_FAILURE() << "no FLORES file for " << code;
      continue;
    }
    const std::vector<std::string>& lines = it->second;
    const Json::Array& hashes = golden.Find("ids_hash")->AsArray();
    const Json::Array& first = golden.Find("first_ids")->AsArray();
    EXPECT_EQ(lines.size(), hashes.size()) << code;
    int64_t n_tokens = 0;
    for (size_t i = 0; i < lines.size() && i < hashes.size(); ++i) {
      std::vector<int32_t> ids = tokenizer.Encode(lines[i]);
      n_tokens += ids.size();
      ++lines_checked;
      if (IdsHash(ids) == hashes[i].AsString()) continue;
      if (++mismatches > kMaxReported) continue;
      std::string want = "(only the hash is stored)";
      if (i < first.size()) {
        std::vector<int32_t> w;
        for (const Json& id : first[i].AsArray()) w.push_back(static_cast<int32_t>(id.AsInt()));
        want = Ids(w);
      }
      ADD_FAILURE() << code << " line " << i + 1 << ": " << lines[i] << "\n  want " << want << "\n  got  "
                    << Ids(ids);
    }
    EXPECT_EQ(n_tokens, golden.Find("tokens")->AsInt()) << code;
  }
  EXPECT_EQ(static_cast<int64_t>(lines_checked), FloresGoldens().Find("summary")->Find("lines")->AsInt());
  return mismatches;
}

TEST(TokenizerFlores, GoldenIdsAndRoundTrip) {
  HYMT_REQUIRE_SHARED_DATA();
  const Tokenizer& tokenizer = test::OfficialTokenizer();
  EXPECT_EQ(CountGoldenMismatches(tokenizer), 0);
  // The first lines of every language are stored in full: compare them id by id too.
  int roundtrip_failures = 0;
  for (const auto& [code, golden] : FloresGoldens().Find("languages")->AsObject()) {
    const auto& lines = FloresLines().at(code);
    const Json::Array& first = golden.Find("first_ids")->AsArray();
    for (size_t i = 0; i < first.size(); ++i) {
      std::vector<int32_t> want;
      for (const Json& id : first[i].AsArray()) want.push_back(static_cast<int32_t>(id.AsInt()));
      EXPECT_EQ(tokenizer.Encode(lines[i]), want) << code << " line " << i + 1;
    }
    for (const std::string& line : lines)
      if (tokenizer.Decode(tokenizer.Encode(line)) != line && ++roundtrip_failures <= kMaxReported)
        ADD_FAILURE() << code << ": round trip changed " << line;
  }
  EXPECT_EQ(roundtrip_failures, 0);
}

TEST(TokenizerFlores, ThreePassPieces) {
  HYMT_REQUIRE_SHARED_DATA();
  int mismatches = 0;
  std::vector<std::string_view> pieces;
  for (const auto& [code, golden] : FloresGoldens().Find("languages")->AsObject()) {
    const auto& lines = FloresLines().at(code);
    const Json::Array& hashes = golden.Find("three_pass_hash")->AsArray();
    ASSERT_EQ(lines.size(), hashes.size()) << code;
    for (size_t i = 0; i < lines.size(); ++i) {
      pieces.clear();
      SplitText(SplitRule::kHunyuanDense, lines[i], &pieces);
      std::vector<uint32_t> lengths;
      std::string joined;
      for (std::string_view p : pieces) {
        lengths.push_back(static_cast<uint32_t>(p.size()));
        joined += p;
      }
      EXPECT_EQ(joined, lines[i]);
      if (test::Fnv1a64Hex(lengths) != hashes[i].AsString() && ++mismatches <= kMaxReported) {
        std::string shown;
        for (std::string_view p : pieces) shown += StrCat("[", p, "]");
        ADD_FAILURE() << code << " line " << i + 1 << " pieces: " << shown;
      }
    }
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(TokenizerFlores, StreamDecoderEmitsWholeCharacters) {
  HYMT_REQUIRE_SHARED_DATA();
  const Tokenizer& tokenizer = test::OfficialTokenizer();
  int failures = 0;
  for (const auto& [code, lines] : FloresLines()) {
    for (const std::string& line : lines) {
      StreamDecoder decoder(tokenizer);
      std::string text;
      bool chunks_valid = true;
      for (int32_t id : tokenizer.Encode(line)) {
        std::string chunk = decoder.Push(id);
        chunks_valid = chunks_valid && IsValidUtf8(chunk);
        text += chunk;
      }
      text += decoder.Finish();
      if ((text != line || !chunks_valid) && ++failures <= kMaxReported)
        ADD_FAILURE() << code << ": streamed " << text << " for " << line
                      << (chunks_valid ? "" : " (invalid chunk)");
    }
  }
  EXPECT_EQ(failures, 0);
}

// tiny-gqa2's tokenizer.json was written by HF tokenizers from the same 1,024 ranks as tiny-gqa1's
// hy.tiktoken: the two loaders must agree on every line.
TEST(TokenizerFlores, TinyTokenizerJsonMatchesTiktoken) {
  HYMT_REQUIRE_SHARED_DATA();
  Tokenizer tiktoken =
      Tokenizer::FromTiktokenFile(test::TestDataDir() + "/fixtures/tiny-gqa1/f32/hy.tiktoken");
  Tokenizer json = Tokenizer::FromModelDir(test::TestDataDir() + "/fixtures/tiny-gqa2/f32");
  ASSERT_EQ(tiktoken.n_tokens(), 1024 + 210);
  ASSERT_EQ(json.n_tokens(), tiktoken.n_tokens());
  EXPECT_EQ(json.split_rule(), SplitRule::kHunyuan);
  EXPECT_EQ(json.normalization(), Normalization::kNone);
  for (const char* name : {"<|endoftext|>", "<|startoftext|>", "<|eos|>", "<|extra_0|>", "<|extra_204|>"}) {
    EXPECT_EQ(json.TokenId(name), tiktoken.TokenId(name)) << name;
    EXPECT_TRUE(json.IsSpecial(*json.TokenId(name))) << name;
  }
  int mismatches = 0;
  size_t lines = 0;
  for (const auto& [code, texts] : FloresLines()) {
    for (const std::string& line : texts) {
      ++lines;
      std::vector<int32_t> want = tiktoken.Encode(line), got = json.Encode(line);
      if (want != got && ++mismatches <= kMaxReported)
        ADD_FAILURE() << code << ": " << line << "\n  tiktoken " << Ids(want) << "\n  json     " << Ids(got);
    }
  }
  EXPECT_EQ(mismatches, 0);
  EXPECT_EQ(lines, 38u * 1012u);
}

// The full vocabulary converted to a tokenizer.json (merge list instead of ranks) must give the golden
// ids too.
TEST(TokenizerFlores, FullSizeTokenizerJson) {
  HYMT_REQUIRE_SHARED_DATA();
  std::string path = test::TempDir() + "/tokenizer.json";
  test::WriteTokenizerJsonFromRanks(test::OfficialTokenizer(), path);
  Tokenizer json = Tokenizer::FromTokenizerJson(path);
  EXPECT_EQ(json.n_tokens(), test::OfficialTokenizer().n_tokens());
  EXPECT_EQ(json.TokenId("<|extra_0|>"), 127962);
  EXPECT_EQ(CountGoldenMismatches(json), 0);
}

}  // namespace
}  // namespace hymt
