// The Tokenizer API: the checked vectors, special tokens, streaming decode, odd input, the generic
// constructor's BPE rules, and the loaders' errors on malformed files.
#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <fstream>
#include <thread>

#include "core/status.h"
#include "core/utf8.h"
#include "tokenizer_test_util.h"

namespace hymt {
namespace {

std::string TinyTiktoken() {
  return test::TestDataDir() + "/fixtures/tiny-gqa1/f32/hy.tiktoken";
}

std::string WriteTemp(const std::string& name, const std::string& content) {
  std::string path = test::TempDir() + "/" + name;
  std::ofstream(path, std::ios::binary) << content;
  return path;
}

// Runs `f`, expecting an Error with `code` whose message contains every one of `parts`.
template <typename F>
void ExpectError(F f, ErrorCode code, std::initializer_list<std::string> parts) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one containing " << *parts.begin();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    for (const std::string& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

std::vector<int32_t> ToIds(const Json& array) {
  std::vector<int32_t> ids;
  for (const Json& v : array.AsArray()) ids.push_back(static_cast<int32_t>(v.AsInt()));
  return ids;
}

// ../shared/data/hunyuan/tokenizer_vectors.json: ids from llama.cpp on the official GGUF, exactly.
TEST(Tokenizer, CheckedVectors) {
  HYMT_REQUIRE_SHARED_DATA();
  const Tokenizer& t = test::OfficialTokenizer();
  Json vectors = Json::Parse(ReadFile(test::SharedDataDir() + "/hunyuan/tokenizer_vectors.json"));
  EXPECT_EQ(t.n_tokens(), 128167);
  for (const Json& v : vectors.Find("vectors")->AsArray()) {
    const std::string& text = v.Find("text")->AsString();
    EXPECT_EQ(t.Encode(text), ToIds(*v.Find("ids"))) << text;
    EXPECT_EQ(t.Decode(ToIds(*v.Find("ids"))), text);
  }
  const Json& greedy = *vectors.Find("greedy_reference");
  EXPECT_EQ(t.Decode(ToIds(*greedy.Find("answer_ids"))), greedy.Find("answer_text")->AsString() + "<|eos|>");
  for (const auto& [name, id] : vectors.Find("special_tokens")->AsObject()) {
    EXPECT_EQ(t.TokenId(name), id.AsInt()) << name;
    EXPECT_TRUE(t.IsSpecial(static_cast<int32_t>(id.AsInt()))) << name;
    EXPECT_EQ(t.TokenBytes(static_cast<int32_t>(id.AsInt())), name);
  }
}

TEST(Tokenizer, SpecialTokensByName) {
  Tokenizer t = Tokenizer::FromTiktokenFile(TinyTiktoken());
  EXPECT_EQ(t.n_tokens(), 1024 + 210);
  EXPECT_EQ(t.TokenId("<|endoftext|>"), 1024);
  EXPECT_EQ(t.TokenId("<|eos|>"), 1027);
  EXPECT_EQ(t.TokenId("<|extra_204|>"), 1233);
  EXPECT_EQ(t.TokenId("<|extra_205|>"), std::nullopt);
  EXPECT_EQ(t.TokenId("!"), 0);  // an ordinary token by its bytes
  EXPECT_FALSE(t.IsSpecial(0));
  EXPECT_FALSE(t.IsSpecial(-1));
  EXPECT_FALSE(t.IsSpecial(t.n_tokens()));
  EXPECT_EQ(t.split_rule(), SplitRule::kHunyuan);
  EXPECT_EQ(t.source(), TinyTiktoken());

  // Specials written literally are matched only with parse_special.
  std::vector<int32_t> ids = t.Encode("<|startoftext|>hi<|extra_0|>");
  EXPECT_EQ(ids.front(), 1025);
  EXPECT_EQ(ids.back(), 1029);
  std::vector<int32_t> plain = t.Encode("<|startoftext|>hi<|extra_0|>", false);
  for (int32_t id : plain) EXPECT_FALSE(t.IsSpecial(id));
  EXPECT_EQ(t.Decode(plain), "<|startoftext|>hi<|extra_0|>");
  // Near misses stay text; adjacent specials both match; <|extra_1|> is not read as a prefix of <|extra_10|>.
  EXPECT_EQ(t.Decode(t.Encode("<|extra_0|")), "<|extra_0|");
  EXPECT_EQ(t.Encode("<|eos|><|eos|>"), (std::vector<int32_t>{1027, 1027}));
  EXPECT_EQ(t.Encode("<|extra_10|>"), (std::vector<int32_t>{1029 + 10}));
}

// The bundled demo model's own vocabulary (tools/train_demo.py writes it as hy.tiktoken).
TEST(Tokenizer, DemoModelVocabulary) {
  Tokenizer t = Tokenizer::FromModelDir(test::SourceDir() + "/models/demo");
  const int32_t n_ranks = *t.TokenId("<|endoftext|>");
  EXPECT_EQ(t.n_tokens(), n_ranks + 210);
  EXPECT_EQ(t.TokenId("<|eos|>"), n_ranks + 3);
  const std::string prompt =
      "<|startoftext|>Translate the following segment into Chinese, without additional "
      "explanation.\n\nHello, how are you?<|extra_0|>";
  std::vector<int32_t> ids = t.Encode(prompt);
  EXPECT_EQ(ids.front(), n_ranks + 1);
  EXPECT_EQ(ids.back(), n_ranks + 5);
  EXPECT_EQ(t.Decode(ids), prompt);
}

TEST(Tokenizer, EmptyAndOddInput) {
  Tokenizer t = Tokenizer::FromTiktokenFile(TinyTiktoken());
  EXPECT_TRUE(t.Encode("").empty());
  EXPECT_EQ(t.Decode({}), "");
  // Invalid UTF-8: every bad byte is its own single-byte token, and the bytes come back unchanged.
  const std::string bad = "ab\xff\xfe c\xe4\xb8 \xed\xa0\x80 \xc0\xaf";
  std::vector<int32_t> ids = t.Encode(bad);
  EXPECT_EQ(t.Decode(ids), bad);
  EXPECT_NE(std::find(ids.begin(), ids.end(), *t.TokenId("\xff")), ids.end());
  // A NUL byte, and long runs that make one huge piece each.
  EXPECT_EQ(t.Decode(t.Encode(std::string("a\0b", 3))), std::string("a\0b", 3));
  for (const std::string& s : {std::string(200000, '!'), std::string(200000, 'a'), std::string(100000, ' ')})
    EXPECT_EQ(t.Decode(t.Encode(s)), s);
  // Random bytes round-trip.
  uint64_t state = 7;
  std::string random;
  for (int i = 0; i < 20000; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    random.push_back(static_cast<char>(state >> 56));
  }
  EXPECT_EQ(t.Decode(t.Encode(random)), random);
  ExpectError(
      [&] {
        t.Decode(std::vector<int32_t>{5, t.n_tokens()});
      },
      ErrorCode::kInvalidArgument, {"token id 1234"});
  ExpectError([&] { t.Decode(std::vector<int32_t>{-1}); }, ErrorCode::kInvalidArgument, {"-1"});
}

TEST(Tokenizer, Normalization) {
  Tokenizer t = Tokenizer::FromTiktokenFile(TinyTiktoken());
  EXPECT_EQ(t.normalization(), Normalization::kNone);
  const std::string decomposed = "Cafe\u0301 de\u0301ja\u0300", composed = "Café déjà";
  EXPECT_EQ(t.Decode(t.Encode(decomposed)), decomposed);
  t.SetNormalization(Normalization::kNfc);
  EXPECT_EQ(t.Encode(decomposed), t.Encode(composed));
  EXPECT_EQ(t.Decode(t.Encode(decomposed)), composed);
  // Specials are cut out before normalisation.
  EXPECT_EQ(t.Encode("<|eos|>e\u0301"), t.Encode("<|eos|>é"));
  EXPECT_EQ(ParseNormalization("nfc"), Normalization::kNfc);
  EXPECT_STREQ(NormalizationName(Normalization::kNone), "none");
  ExpectError([] { ParseNormalization("nfkc"); }, ErrorCode::kInvalidArgument, {"nfkc", "none or nfc"});
}

TEST(Tokenizer, StreamDecoder) {
  Tokenizer t = Tokenizer::FromTiktokenFile(TinyTiktoken());
  auto byte = [&](const char* b) { return *t.TokenId(b); };
  StreamDecoder d(t);
  // 😀 = F0 9F 98 80 arriving one byte token at a time.
  EXPECT_EQ(d.Push(byte("\xf0")), "");
  EXPECT_EQ(d.Push(byte("\x9f")), "");
  EXPECT_EQ(d.Push(byte("\x98")), "");
  EXPECT_EQ(d.Push(byte("\x80")), "😀");
  EXPECT_EQ(d.Push(*t.TokenId("<|eos|>")), "<|eos|>");
  // A byte that can never start a character, and a sequence cut off by another character.
  EXPECT_EQ(d.Push(byte("\xff")), "\ufffd");
  EXPECT_EQ(d.Push(byte("\xe4")), "");
  EXPECT_EQ(d.Push(byte("a")), "\ufffda");
  // An incomplete tail at the end becomes one U+FFFD.
  EXPECT_EQ(d.Push(byte("\xe4")), "");
  EXPECT_EQ(d.Push(byte("\xb8")), "");
  EXPECT_EQ(d.Finish(), "\ufffd");
  EXPECT_EQ(d.Finish(), "");
  ExpectError([&] { d.Push(t.n_tokens()); }, ErrorCode::kInvalidArgument, {"outside"});
}

TEST(Tokenizer, EncodeFromManyThreads) {
  Tokenizer t = Tokenizer::FromTiktokenFile(TinyTiktoken());
  std::vector<std::string> texts;
  for (int i = 0; i < 200; ++i)
    texts.push_back(StrCat("Line ", i, ": the quick brown fox, 数字 ", i * 7919, " é"));
  std::vector<std::vector<int32_t>> want;
  for (const auto& s : texts) want.push_back(t.Encode(s));
  std::vector<int> failures(4, 0);
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&, k] {
      for (int rep = 0; rep < 20; ++rep)
        for (size_t i = 0; i < texts.size(); ++i) failures[k] += t.Encode(texts[i]) != want[i];
    });
  }
  for (auto& th : threads) th.join();
  for (int f : failures) EXPECT_EQ(f, 0);
}

// A hand-made vocabulary through the generic constructor: bytes a, b, c plus merged tokens.
TokenizerSpec SmallSpec(BpeModel::Rule rule) {
  TokenizerSpec spec;
  spec.source = "small";
  for (int b = 0; b < 256; ++b) spec.tokens.push_back(std::string(1, static_cast<char>(b)));
  for (const char* t : {"ab", "bc", "abc", "aa", "aaa"}) spec.tokens.push_back(t);  // ids 256..260
  spec.tokens.push_back("<|stop|>");                                                // 261
  spec.tokens.push_back("@@");                                                      // 262
  spec.added_tokens = {{261, true}, {262, false}};
  spec.merge_rule = rule;
  return spec;
}

TEST(Tokenizer, RanksRule) {
  Tokenizer t = Tokenizer::FromSpec(SmallSpec(BpeModel::Rule::kRanks));
  // "abc" is a token: taken whole. "abcabc" splits as one piece; ab (256) outranks bc (257).
  EXPECT_EQ(t.Encode("abc"), (std::vector<int32_t>{258}));
  EXPECT_EQ(t.Encode("bcab"), (std::vector<int32_t>{257, 256}));
  // Ties go to the leftmost pair: aaaa -> aa aa, then no "aaaa" token.
  EXPECT_EQ(t.Encode("aaaa"), (std::vector<int32_t>{259, 259}));
  EXPECT_EQ(t.Encode("aaa"), (std::vector<int32_t>{260}));
  // Added tokens: special only with parse_special, non-special always.
  EXPECT_EQ(t.Encode("a<|stop|>"), (std::vector<int32_t>{'a', 261}));
  EXPECT_EQ(t.Encode("a@@", false), (std::vector<int32_t>{'a', 262}));
  EXPECT_TRUE(t.IsSpecial(261));
  EXPECT_FALSE(t.IsSpecial(262));
}

TEST(Tokenizer, MergeListRule) {
  TokenizerSpec spec = SmallSpec(BpeModel::Rule::kMergeList);
  // bc before ab, and no merge makes "abc" from "ab"+"c": the whole token is not reached.
  spec.merges = {{"b", "c"}, {"a", "b"}, {"a", "a"}, {"a", "bc"}};
  Tokenizer t = Tokenizer::FromSpec(spec);
  EXPECT_EQ(t.Encode("abc"), (std::vector<int32_t>{258}));  // a + bc -> abc
  EXPECT_EQ(t.Encode("bcab"), (std::vector<int32_t>{257, 256}));
  EXPECT_EQ(t.Encode("aaa"), (std::vector<int32_t>{259, 'a'}));  // no merge makes "aaa"
  spec.ignore_merges = true;                                     // HF ignore_merges: whole piece first
  EXPECT_EQ(Tokenizer::FromSpec(spec).Encode("aaa"), (std::vector<int32_t>{260}));
  // A later duplicate replaces the earlier merge's priority (as HF's merge map does).
  spec = SmallSpec(BpeModel::Rule::kMergeList);
  spec.merges = {{"a", "b"}, {"b", "c"}, {"a", "b"}};
  EXPECT_EQ(Tokenizer::FromSpec(spec).Encode("abc"), (std::vector<int32_t>{'a', 257}));
}

TEST(Tokenizer, SpecErrors) {
  TokenizerSpec spec = SmallSpec(BpeModel::Rule::kMergeList);
  spec.merges = {{"a", "z"}};  // "az" is not a token
  ExpectError([&] { Tokenizer::FromSpec(spec); }, ErrorCode::kCorruptData, {"small", "merge 0", "\"az\""});
  spec = SmallSpec(BpeModel::Rule::kRanks);
  spec.tokens[257] = "ab";
  ExpectError([&] { Tokenizer::FromSpec(spec); }, ErrorCode::kCorruptData, {"small", "same bytes", "256"});
  spec = SmallSpec(BpeModel::Rule::kRanks);
  spec.added_tokens.push_back({999, true});
  ExpectError([&] { Tokenizer::FromSpec(spec); }, ErrorCode::kCorruptData, {"999"});
  // A vocabulary without some single bytes works until the text needs one.
  spec = SmallSpec(BpeModel::Rule::kRanks);
  spec.tokens[0xff] = "\xff\xfe";
  Tokenizer t = Tokenizer::FromSpec(spec);
  EXPECT_EQ(t.Encode("ab"), (std::vector<int32_t>{256}));
  ExpectError([&] { t.Encode("a\xff"); }, ErrorCode::kInvalidArgument, {"byte 0xff"});
}

TEST(Tokenizer, TiktokenFileErrors) {
  ExpectError([] { Tokenizer::FromTiktokenFile("/nonexistent/hy.tiktoken"); }, ErrorCode::kNotFound,
              {"/nonexistent/hy.tiktoken"});
  struct Case {
    std::string content;
    std::vector<std::string> parts;
  };
  const std::vector<Case> cases = {
      {"", {"no tokens"}},
      {"\n\n", {"no tokens"}},
      {"IQ== 0\nIg==\n", {":2:", "expected"}},  // truncated line: no rank
      {"IQ== 0\nI*== 1\n", {":2:", "invalid base64"}},
      {"IQ== 0\nIg= 1\n", {":2:", "invalid base64"}},
      {"IQ== 0\nIg== x\n", {":2:", "expected"}},
      {"IQ== 0\nIg== -1\n", {":2:", "expected"}},
      {"IQ== 0\nIg== 0\n", {":2:", "rank 0", "line 1"}},  // duplicate rank
      {"IQ== 0\nIg== 2\n", {"rank 1 is missing"}},
      {"IQ== 0\nIg== 2000000000\n", {":2:", "out of range"}},
      {"IQ== 0\nIQ== 1\n", {"line 2", "same bytes", "line 1"}},  // duplicate token
      {"IQ== 0 extra\n", {":1:"}},
  };
  for (const Case& c : cases) {
    std::string path = WriteTemp("hy.tiktoken", c.content);
    std::vector<std::string> parts = c.parts;
    parts.push_back(path);
    try {
      Tokenizer::FromTiktokenFile(path);
      ADD_FAILURE() << "no error for " << c.content;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kCorruptData) << e.what();
      for (const std::string& p : parts)
        EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
    }
  }
  // CRLF line ends and a missing final newline are fine.
  Tokenizer t = Tokenizer::FromTiktokenFile(WriteTemp("hy.tiktoken", "IQ== 0\r\nIg== 1"));
  EXPECT_EQ(t.n_tokens(), 2 + 210);
}

// A minimal valid tokenizer.json with `pre` and `normalizer` spliced in.
std::string TokenizerJson(const std::string& pre, const std::string& normalizer = "null",
                          const std::string& model_extra = "", const std::string& added = "") {
  std::string split = StrCat("{\"type\":\"Split\",\"pattern\":{\"Regex\":", Json(kHunyuanSplitRegex).Dump(),
                             "},\"behavior\":\"Isolated\",\"invert\":false}");
  std::string byte_level = "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":false}";
  std::string pre_json =
      pre.empty() ? StrCat("{\"type\":\"Sequence\",\"pretokenizers\":[", split, ",", byte_level, "]}") : pre;
  std::string vocab;
  for (int b = 0; b < 256; ++b)
    vocab += StrCat(b ? "," : "", Json(test::ByteLevelSpelling(std::string(1, static_cast<char>(b)))).Dump(),
                    ":", b);
  vocab += ",\"ab\":256";
  return StrCat("{\"added_tokens\":[{\"id\":257,\"content\":\"<|eos|>\",\"special\":true}", added, "],",
                "\"normalizer\":", normalizer, ",\"pre_tokenizer\":", pre_json,
                ",\"model\":{\"type\":\"BPE\",\"vocab\":{", vocab, "},\"merges\":[\"a b\"]", model_extra,
                "}}");
}

TEST(Tokenizer, ByteLevelSpelling) {
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  EXPECT_EQ(EncodeByteLevel(all), test::ByteLevelSpelling(all));
  EXPECT_EQ(EncodeByteLevel(" hello\n"), "\u0120hello\u010a");  // Ġhello Ċ
  std::string bytes;
  ASSERT_TRUE(DecodeByteLevel(EncodeByteLevel(all), &bytes));
  EXPECT_EQ(bytes, all);
  EXPECT_FALSE(DecodeByteLevel("a\u0144", &bytes));  // one past the alphabet
  EXPECT_FALSE(DecodeByteLevel("\xff", &bytes));     // not UTF-8
}

TEST(Tokenizer, TokenizerJsonVariants) {
  Tokenizer t = Tokenizer::FromTokenizerJson(WriteTemp("tokenizer.json", TokenizerJson("")));
  EXPECT_EQ(t.n_tokens(), 258);
  EXPECT_EQ(t.Encode("ab<|eos|>"), (std::vector<int32_t>{256, 257}));
  EXPECT_EQ(t.normalization(), Normalization::kNone);
  t = Tokenizer::FromTokenizerJson(WriteTemp("tokenizer.json", TokenizerJson("", "{\"type\":\"NFC\"}")));
  EXPECT_EQ(t.normalization(), Normalization::kNfc);
  t = Tokenizer::FromTokenizerJson(WriteTemp(
      "tokenizer.json", TokenizerJson("", "{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"NFC\"}]}")));
  EXPECT_EQ(t.normalization(), Normalization::kNfc);
  // The hunyuan-dense three passes are recognised, also with literal CR LF inside [\r\n] as
  // DeepSeek-V3-style files write them.
  std::string dense = "{\"type\":\"Sequence\",\"pretokenizers\":[";
  for (std::string_view regex : kHunyuanDenseSplitRegexes) {
    std::string p(regex);
    for (size_t at; (at = p.find("\\r\\n")) != std::string::npos;) p.replace(at, 4, "\r\n");
    dense += StrCat("{\"type\":\"Split\",\"pattern\":{\"Regex\":", Json(p).Dump(),
                    "},\"behavior\":\"Isolated\"},");
  }
  EXPECT_NE(dense.find("\\r\\n"), std::string::npos);  // JSON escapes of the literal characters
  dense += "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":false}]}";
  t = Tokenizer::FromTokenizerJson(WriteTemp("tokenizer.json", TokenizerJson(dense)));
  EXPECT_EQ(t.split_rule(), SplitRule::kHunyuanDense);
  // Merges as [left, right] pairs; FromModelDir prefers tokenizer.json.
  std::string pairs = TokenizerJson("");
  pairs.replace(pairs.find("[\"a b\"]"), 7, "[[\"a\",\"b\"]]");
  std::string dir = test::TempDir();
  std::ofstream(dir + "/tokenizer.json") << pairs;
  std::ofstream(dir + "/hy.tiktoken") << "IQ== 0\n";
  EXPECT_EQ(Tokenizer::FromModelDir(dir).Encode("ab"), (std::vector<int32_t>{256}));
  ExpectError([] { Tokenizer::FromModelDir(test::TempDir()); }, ErrorCode::kNotFound,
              {"tokenizer.json", "hy.tiktoken"});
}

TEST(Tokenizer, TokenizerJsonErrors) {
  struct Case {
    std::string json;
    ErrorCode code;
    std::vector<std::string> parts;
  };
  std::string ok = TokenizerJson("");
  auto replace = [&](std::string from, std::string to) {
    std::string s = ok;
    size_t at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return s.replace(at, from.size(), to);
  };
  // Ids 0..258 from 259 entries, but id 5 given twice (vocab and added token): id 256 has nothing.
  std::string gap = TokenizerJson("", "null", "", ",{\"id\":5,\"content\":\"<x>\"}");
  gap.replace(gap.find("\"ab\":256"), 8, "\"ab\":258");
  const std::vector<Case> cases = {
      {"{\"model\": [1, 2", ErrorCode::kCorruptData, {"invalid JSON", "line 1"}},
      {"", ErrorCode::kCorruptData, {"invalid JSON"}},
      {"[]", ErrorCode::kCorruptData, {"expected object"}},
      {replace("\"vocab\"", "\"vocabulary\""), ErrorCode::kCorruptData, {"model.vocab", "missing"}},
      {replace("\"merges\":[\"a b\"]", "\"merges\":[\"a  b\"]"),
       ErrorCode::kCorruptData,
       {"model.merges[0]"}},
      {replace("\"merges\":[\"a b\"]", "\"merges\":[\"a c\"]"),
       ErrorCode::kCorruptData,
       {"merge 0", "\"ac\""}},
      {replace("\"merges\":[\"a b\"]", "\"merges\":[7]"), ErrorCode::kCorruptData, {"model.merges[0]"}},
      {replace("\"ab\":256", "\"ab\":300"), ErrorCode::kCorruptData, {"id 300 is out of range"}},
      {gap, ErrorCode::kCorruptData, {"id 256 has no token"}},
      {replace("\"ab\":256", "\"ab\":-3"), ErrorCode::kCorruptData, {"model.vocab", "-3"}},
      {replace("\"ab\":256", "\"ab\":255"), ErrorCode::kCorruptData, {"id 255"}},
      {replace("\"ab\":256", "\"a\xe4\xb8\xad\":256"), ErrorCode::kCorruptData, {"not byte-level"}},
      {replace("\"type\":\"BPE\"", "\"type\":\"WordPiece\""),
       ErrorCode::kUnsupported,
       {"model.type", "WordPiece"}},
      {replace("\"type\":\"BPE\"", "\"type\":\"BPE\",\"continuing_subword_prefix\":\"##\""),
       ErrorCode::kUnsupported,
       {"continuing_subword_prefix"}},
      {replace("\"normalizer\":null", "\"normalizer\":{\"type\":\"NFKC\"}"),
       ErrorCode::kUnsupported,
       {"normalizer", "NFKC"}},
      {replace("\"special\":true", "\"special\":true,\"lstrip\":true"),
       ErrorCode::kUnsupported,
       {"added_tokens[0].lstrip"}},
      {replace("\"content\":\"<|eos|>\"", "\"content\":\"\""),
       ErrorCode::kCorruptData,
       {"added_tokens[0].content"}},
      {TokenizerJson("{\"type\":\"Whitespace\"}"), ErrorCode::kUnsupported, {"pre_tokenizer", "Whitespace"}},
      {TokenizerJson("{\"type\":\"ByteLevel\",\"add_prefix_space\":false}"),
       ErrorCode::kUnsupported,
       {"use_regex"}},
      {replace("\"Regex\":", "\"Regex\":\"\\\\s+\",\"x\":"),
       ErrorCode::kUnsupported,
       {"split pattern", "\\\\s+"}},
      {replace("\"Isolated\"", "\"Removed\""), ErrorCode::kUnsupported, {"behavior", "Removed"}},
      {replace("\"pre_tokenizer\":{", "\"pre_tokenizer\":null,\"x\":{"),
       ErrorCode::kUnsupported,
       {"pre_tokenizer"}},
  };
  for (const Case& c : cases) {
    std::string path = WriteTemp("tokenizer.json", c.json);
    try {
      Tokenizer::FromTokenizerJson(path);
      ADD_FAILURE() << "no error for " << c.json.substr(0, 200);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), c.code) << e.what();
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
      for (const std::string& p : c.parts)
        EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace hymt
