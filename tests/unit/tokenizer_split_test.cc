// The split rules and the Unicode data under them. Expected pieces come from Python's `regex` module
// (a backtracking engine, like fancy-regex and Oniguruma) running the reference patterns; FLORES-wide
// agreement is in tokenizer_flores_test.cc.
#include <gtest/gtest.h>

#include "core/utf8.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/unicode.h"
#include "tokenizer_test_util.h"

namespace hymt {
namespace {

struct SplitCase {
  std::string text;
  std::vector<std::string> pieces;
};

std::vector<std::string> Split(SplitRule rule, std::string_view text) {
  std::vector<std::string_view> views;
  SplitText(rule, text, &views);
  return std::vector<std::string>(views.begin(), views.end());
}

TEST(TokenizerSplit, Hunyuan) {
  const std::vector<SplitCase> cases = {
      {"Hello world", {"Hello", " world"}},
      // Case-insensitive contractions, U+017F LONG S included; a non-contraction apostrophe joins letters.
      {"it's IT'S we'LL they'Re I'M 'sun 'ſ",
       {"it", "'s", " IT", "'S", " we", "'LL", " they", "'Re", " I", "'M", " '", "sun", " '", "ſ"}},
      {"don't 'hello", {"don", "'t", " '", "hello"}},
      // \s+(?!\S) leaves the last space to the word; \s*[\r\n]+ stops after the last newline.
      {"a  b", {"a", " ", " b"}},
      {"a \n\n b", {"a", " \n\n", " b"}},
      {"x   ", {"x", "   "}},
      {"  \r\n  end", {"  \r\n", " ", " end"}},
      {"\t\tx", {"\t", "\tx"}},
      {"tab\t", {"tab", "\t"}},
      {"a\u00a0\u00a0b", {"a", "\u00a0", "\u00a0b"}},
      // One number code point per piece, any script.
      {"1234 ١٢٣", {"1", "2", "3", "4", " ", "١", "٢", "٣"}},
      {" !!!\n\nabc", {" !!!\n\n", "abc"}},
      {"(hello) [x]", {"(hello", ")", " [", "x", "]"}},
      // Combining marks are not letters.
      {"नमस\u094dत\u0947 द\u0941न\u093fय\u093e",
       {"नमस", "\u094dत", "\u0947", " द", "\u0941न", "\u093fय", "\u093e"}},
      {"你好，世界。", {"你好", "，世界", "。"}},
      {"😀😀 ok", {"😀😀", " ok"}},
      {"", {}},
  };
  for (const SplitCase& c : cases) EXPECT_EQ(Split(SplitRule::kHunyuan, c.text), c.pieces) << c.text;
}

TEST(TokenizerSplit, HunyuanDenseThreePasses) {
  const std::vector<SplitCase> cases = {
      {"12345abc", {"123", "45", "abc"}},
      {"日本語テキストabc 123", {"日本語テキスト", "abc", " ", "123"}},
      {"カタカナ・ひらがな", {"カタカナ", "・", "ひらがな"}},
      // ASCII punctuation takes the ASCII letters after it, up to the first other letter.
      {"'hello 'héllo", {"'hello", " '", "héllo"}},
      // Marks join letters; a code point no alternative matches is a gap piece of its own.
      {"नमस\u094dत\u0947", {"नमस\u094dत\u0947"}},
      {"é\u0301x", {"é\u0301x"}},
      {"a\u200d", {"a", "\u200d"}},
      {"\u200d", {"\u200d"}},
      {"x, y!! \n\nz", {"x", ",", " y", "!!", " \n\n", "z"}},
      {"ab12cd", {"ab", "12", "cd"}},
      {"  spaces  ", {" ", " spaces", "  "}},
      {"1²³½", {"1²³", "½"}},
  };
  for (const SplitCase& c : cases) EXPECT_EQ(Split(SplitRule::kHunyuanDense, c.text), c.pieces) << c.text;
}

TEST(TokenizerSplit, InvalidUtf8BytesArePiecesOfTheirOwn) {
  for (SplitRule rule : {SplitRule::kHunyuan, SplitRule::kHunyuanDense}) {
    // The valid runs around an invalid byte are split as whole texts: "a " keeps its trailing space.
    EXPECT_EQ(Split(rule, "a \xff b"), (std::vector<std::string>{"a", " ", "\xff", " b"}));
    EXPECT_EQ(Split(rule, "\xe4\xb8"), (std::vector<std::string>{"\xe4", "\xb8"}));  // truncated 中
    EXPECT_EQ(Split(rule, "\xed\xa0\x80x"),
              (std::vector<std::string>{"\xed", "\xa0", "\x80", "x"}));              // surrogate
    EXPECT_EQ(Split(rule, "\xc0\xaf"), (std::vector<std::string>{"\xc0", "\xaf"}));  // overlong '/'
  }
}

// Random bytes, valid and not: the pieces are non-empty and concatenate to the input.
TEST(TokenizerSplit, PiecesCoverAnyInput) {
  uint64_t state = 12345;
  auto next = [&state] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<uint32_t>(state >> 33);
  };
  const std::string alphabet[] = {"a",      "Z", "'",    "s",    " ",      "\n",    "\r",
                                  "\t",     "1", "!",    "é",    "\u0301", "中",    "カ",
                                  "\u3000", "😀", "\xff", "\xe4", "\x80",   "\u200d"};
  for (int iter = 0; iter < 2000; ++iter) {
    std::string text;
    for (uint32_t n = next() % 24; n > 0; --n) text += alphabet[next() % std::size(alphabet)];
    for (SplitRule rule : {SplitRule::kHunyuan, SplitRule::kHunyuanDense}) {
      std::string joined;
      for (const std::string& p : Split(rule, text)) {
        EXPECT_FALSE(p.empty());
        joined += p;
      }
      EXPECT_EQ(joined, text);
    }
  }
}

TEST(TokenizerSplit, RuleNames) {
  EXPECT_STREQ(SplitRuleName(SplitRule::kHunyuan), "hunyuan");
  EXPECT_EQ(SplitRuleFromName("hunyuan-dense"), SplitRule::kHunyuanDense);
  EXPECT_EQ(SplitRuleFromName("gpt2"), std::nullopt);
}

TEST(TokenizerUnicode, Flags) {
  const UnicodeFlagTable& t = UnicodeFlagTable::Get();
  EXPECT_STREQ(TokenizerUnicodeVersion(), "15.0");
  EXPECT_EQ(t.Flags('a') & 0x3f, kUnicodeLetter);
  EXPECT_EQ(t.Flags('7') & 0x3f, kUnicodeNumber);
  EXPECT_EQ(t.Flags('!') & 0x3f, kUnicodePunct);
  EXPECT_EQ(t.Flags('$') & 0x3f, kUnicodeSymbol);
  EXPECT_EQ(t.Flags(0x0301) & 0x3f, kUnicodeMark);
  EXPECT_EQ(t.Flags(' ') & 0x3f, kUnicodeSpace);
  EXPECT_EQ(t.Flags(0x3000) & 0x3f, kUnicodeSpace);    // IDEOGRAPHIC SPACE (Zs)
  EXPECT_EQ(t.Flags(0x0085) & 0x3f, kUnicodeSpace);    // NEL: Cc but White_Space
  EXPECT_EQ(t.Flags(0x001c) & 0x3f, 0);                // a Python isspace() that is not White_Space
  EXPECT_EQ(t.Flags(0x200b) & 0x3f, 0);                // ZERO WIDTH SPACE is Cf, not White_Space
  EXPECT_EQ(t.Flags(0x1f600) & 0x3f, kUnicodeSymbol);  // 😀
  EXPECT_EQ(t.Flags(0x31350) & 0x3f, kUnicodeLetter);  // CJK Extension H, new in Unicode 15.0
  EXPECT_EQ(t.Flags(0x10ffff) & 0x3f, 0);
}

std::string Nfc(std::string_view text) {
  std::string out;
  AppendNfc(text, &out);
  return out;
}

TEST(TokenizerUnicode, Nfc) {
  EXPECT_EQ(Nfc("e\u0301"), "é");
  EXPECT_EQ(Nfc("é"), "é");
  EXPECT_EQ(Nfc("e\u0301\u0301"), "é\u0301");      // the second accent is blocked by the first
  EXPECT_EQ(Nfc("a\u0302\u0323"), "\u1ead");       // reordered by combining class, then composed
  EXPECT_EQ(Nfc("\u0958"), "\u0915\u093c");        // a composition exclusion stays decomposed
  EXPECT_EQ(Nfc("\u212b"), "\u00c5");              // ANGSTROM SIGN: singleton decomposition
  EXPECT_EQ(Nfc("\u1100\u1161\u11a8"), "\uac01");  // Hangul L V T
  EXPECT_EQ(Nfc("\uac00\u11a8"), "\uac01");        // Hangul LV + T
  EXPECT_EQ(Nfc("e\xff\u0301"), "e\xff\u0301");    // an invalid byte blocks composition, kept as is
  EXPECT_EQ(Nfc("plain ASCII"), "plain ASCII");
  EXPECT_TRUE(IsNfcQuick("plain 中文"));
  EXPECT_FALSE(IsNfcQuick("e\u0301"));
}

// Every FLORES line against Python's NFC (tools/tokenizer_nfc_goldens.py): lines listed there must
// give the listed hash, all others must come out unchanged.
TEST(TokenizerUnicode, NfcOnFlores) {
  HYMT_REQUIRE_SHARED_DATA();
  Json goldens = Json::Parse(ReadFile(test::TestDataDir() + "/tokenizer/flores_nfc_goldens.json"));
  int changed = 0, mismatches = 0;
  for (const auto& [code, lines] : test::FloresLines()) {
    const Json* lang = goldens.Find("languages")->Find(code);
    ASSERT_NE(lang, nullptr) << code;
    const Json& want = *lang->Find("changed");
    for (size_t i = 0; i < lines.size(); ++i) {
      std::string nfc = Nfc(lines[i]);
      EXPECT_EQ(Nfc(nfc), nfc);  // idempotent
      const Json* hash = want.Find(std::to_string(i + 1));
      if (hash == nullptr) {
        if (nfc != lines[i] && ++mismatches <= 5) ADD_FAILURE() << code << " line " << i + 1 << " changed";
        continue;
      }
      ++changed;
      std::vector<uint32_t> cps;
      for (size_t pos = 0; pos < nfc.size();) cps.push_back(DecodeUtf8(nfc, &pos));
      if (test::Fnv1a64Hex(cps) != hash->AsString() && ++mismatches <= 5)
        ADD_FAILURE() << code << " line " << i + 1 << ": " << nfc;
    }
  }
  EXPECT_EQ(mismatches, 0);
  EXPECT_EQ(changed, goldens.Find("changed_lines")->AsInt());
}

}  // namespace
}  // namespace hymt
