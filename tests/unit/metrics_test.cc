// Checks src/translate/metrics against sacreBLEU 2.6.0: every vector in
// shared/data/metrics/sacrebleu_vectors.json and sacrebleu_sentence_vectors.json (tokenizer outputs
// exactly, scores to 1e-9), then edge cases and quirks derived by hand from sacreBLEU's source.
//
// The shared data folder is found by test_util's SharedDataDir(): $HYMT_SHARED_DATA, else shared/data
// beside the repository or above the current directory. Without it the vector tests skip.

#include "translate/metrics.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/json.h"
#include "core/status.h"
#include "test_util.h"

namespace hymt {
namespace {

constexpr double kScoreTolerance = 1e-9;
constexpr char kVectorsFile[] = "sacrebleu_vectors.json";
constexpr char kSentenceVectorsFile[] = "sacrebleu_sentence_vectors.json";

Json LoadJson(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::stringstream text;
  text << in.rdbuf();
  return Json::Parse(text.str());
}

const std::string& Str(const Json& object, std::string_view key) {
  const Json* value = object.Find(key);
  if (value == nullptr) throw std::runtime_error("vector without \"" + std::string(key) + "\"");
  return value->AsString();
}

// The largest score difference seen across all vector checks, reported when the program ends.
struct DiffTracker {
  double max_abs_diff = 0.0;
  int scores_checked = 0;
  int tokenizations_checked = 0;
  ~DiffTracker() {
    std::printf("[metrics vectors] %d scores checked, max |diff| = %.3g; %d tokenizations checked\n",
                scores_checked, max_abs_diff, tokenizations_checked);
  }
};
DiffTracker& Tracker() {
  static DiffTracker tracker;
  return tracker;
}

void ExpectScore(double actual, double expected, const std::string& what) {
  const double diff = std::fabs(actual - expected);
  Tracker().max_abs_diff = std::max(Tracker().max_abs_diff, diff);
  ++Tracker().scores_checked;
  EXPECT_LE(diff, kScoreTolerance) << what << ": got " << actual << ", sacreBLEU " << expected;
}

class SacrebleuVectors : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string shared = test::SharedDataDir();
    if (shared.empty()) {
      GTEST_SKIP() << "shared data not found (set HYMT_SHARED_DATA or place it at ../shared/data); "
                      "the sacreBLEU vectors live in shared/data/metrics";
    }
    dir_ = shared + "/metrics/";
    if (!std::filesystem::exists(dir_ + kVectorsFile)) {
      GTEST_SKIP() << "no " << dir_ << kVectorsFile << " in the shared data";
    }
  }
  std::string dir_;
};

TEST_F(SacrebleuVectors, AllEntriesOfMainFile) {
  const Json vectors = LoadJson(dir_ + kVectorsFile);
  ASSERT_FALSE(vectors.AsArray().empty());
  std::vector<std::string> corpus_without_inputs;
  for (const Json& v : vectors.AsArray()) {
    const std::string& kind = Str(v, "kind");
    if (kind == "tokenize") {
      const std::string& tok_name = Str(v, "tok");
      const auto tokenizer = ParseBleuTokenizer(tok_name);
      ASSERT_TRUE(tokenizer.has_value()) << tok_name;
      const std::string& input = Str(v, "input");
      EXPECT_EQ(TokenizeForBleu(input, *tokenizer), Str(v, "output"))
          << "tokenizer " << tok_name << " on: " << input;
      ++Tracker().tokenizations_checked;
    } else if (kind == "sentence") {
      const std::string& hyp = Str(v, "hyp");
      const std::vector<std::string> refs{Str(v, "ref")};
      const std::string where = Str(v, "src") + " | " + hyp;
      int checked = 0;
      for (const auto& [key, value] : v.AsObject()) {
        if (key == "kind" || key == "src" || key == "hyp" || key == "ref") continue;
        const double expected = value.AsDouble();
        if (key == "bleu_13a_eff" || key == "bleu_tok_zh_eff") {
          BleuOptions options;
          options.tokenizer = key == "bleu_13a_eff" ? BleuTokenizer::k13a : BleuTokenizer::kZh;
          ExpectScore(SentenceBleu(hyp, refs, options).score, expected, key + " " + where);
        } else if (key == "chrf") {
          ExpectScore(SentenceChrf(hyp, refs).score, expected, key + " " + where);
        } else if (key == "chrfpp") {
          ExpectScore(SentenceChrf(hyp, refs, ChrfPlusPlusOptions()).score, expected, key + " " + where);
        } else {
          ADD_FAILURE() << "unchecked field " << key << " in " << where;
          continue;
        }
        ++checked;
      }
      EXPECT_GT(checked, 0) << where;
    } else if (kind == "corpus") {
      // These entries name their inputs (NTREX-128 lines) but do not carry them.
      corpus_without_inputs.push_back(Str(v, "src"));
    } else {
      ADD_FAILURE() << "unknown vector kind " << kind;
    }
  }
  for (const std::string& src : corpus_without_inputs) {
    std::printf("[metrics vectors] not checkable, inputs not in the file: corpus \"%s\"\n", src.c_str());
  }
}

TEST_F(SacrebleuVectors, AllEntriesOfSentenceFile) {
  const Json vectors = LoadJson(dir_ + kSentenceVectorsFile);
  ASSERT_FALSE(vectors.AsArray().empty());
  for (const Json& v : vectors.AsArray()) {
    const std::string& hyp = Str(v, "hyp");
    const std::vector<std::string> refs{Str(v, "ref")};
    for (const auto& [key, value] : v.AsObject()) {
      if (key == "hyp" || key == "ref") continue;
      const double expected = value.AsDouble();
      const std::string what = key + " | " + hyp;
      if (key == "sentence_bleu_13a_exp_effective_order") {
        ExpectScore(SentenceBleu(hyp, refs).score, expected, what);
      } else if (key == "corpus_bleu_13a_exp_single_segment") {
        ExpectScore(CorpusBleu({hyp}, {refs}).score, expected, what);
      } else if (key == "chrF2_default") {
        ExpectScore(SentenceChrf(hyp, refs).score, expected, what);
      } else if (key == "chrF2pp_default") {
        ExpectScore(SentenceChrf(hyp, refs, ChrfPlusPlusOptions()).score, expected, what);
      } else if (key == "chrF2_eps_smoothing") {
        ChrfOptions options;
        options.eps_smoothing = true;
        ExpectScore(SentenceChrf(hyp, refs, options).score, expected, what);
      } else {
        ADD_FAILURE() << "unchecked field " << key << " for " << hyp;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------------
// Edge cases. Expected values follow from sacreBLEU's code by hand; the derivation is in comments.

// BLEU of precisions p (percent) with brevity penalty 1, as sacreBLEU computes it.
double GeometricBleu(const std::vector<double>& p) {
  double log_sum = 0.0;
  for (double x : p) log_sum += std::log(x);
  return std::exp(log_sum / static_cast<double>(p.size()));
}

TEST(BleuEdgeCases, EmptyHypothesis) {
  const BleuScore s = SentenceBleu("", {"reference"});
  EXPECT_EQ(s.score, 0.0);
  EXPECT_EQ(s.sys_len, 0);
  EXPECT_EQ(s.ref_len, 1);
  EXPECT_EQ(s.bp, 0.0);  // sys_len 0 < ref_len: bp is 0 rather than exp(-inf)
  EXPECT_EQ(s.Ratio(), 0.0);
  EXPECT_EQ(SentenceChrf("", {"reference"}).score, 0.0);
}

TEST(BleuEdgeCases, EmptyReferenceIsDroppedAndNoneLeftIsAnError) {
  EXPECT_THROW(SentenceBleu("x", {""}), Error);
  EXPECT_THROW(SentenceChrf("x", {""}), Error);
  EXPECT_THROW(CorpusBleu({"a", "b"}, {{"a", ""}}), Error);
  // An empty reference next to a real one just means fewer references for that segment.
  EXPECT_NEAR(SentenceBleu("a b", {"", "a b"}).score, 100.0, kScoreTolerance);
  EXPECT_NEAR(SentenceChrf("ab", {"", "ab"}).score, 100.0, kScoreTolerance);
  // A whitespace-only reference is not empty: it is kept, and has no tokens.
  const BleuScore s = SentenceBleu("a", {" "});
  EXPECT_EQ(s.ref_len, 0);
  EXPECT_EQ(s.score, 0.0);
}

TEST(BleuEdgeCases, BadArgumentsThrow) {
  EXPECT_THROW(SentenceBleu("x", {}), Error);
  EXPECT_THROW(CorpusBleu({}, {{}}), Error);
  EXPECT_THROW(CorpusBleu({"a"}, {}), Error);
  EXPECT_THROW(CorpusBleu({"a", "b"}, {{"a"}}), Error);
  BleuOptions bad;
  bad.max_ngram_order = 0;
  EXPECT_THROW(SentenceBleu("a", {"a"}, bad), Error);
  ChrfOptions bad_chrf;
  bad_chrf.char_order = 0;
  EXPECT_THROW(SentenceChrf("a", {"a"}, bad_chrf), Error);
  EXPECT_THROW(SentenceBleu("\xff", {"a"}), Error);
  EXPECT_THROW(SentenceChrf("a", {"\xc0\x80"}), Error);
}

TEST(BleuEdgeCases, AllZeroMatches) {
  const BleuScore s = SentenceBleu("a b c d", {"e f g h"});
  EXPECT_EQ(s.score, 0.0);
  EXPECT_EQ(s.counts, (std::vector<int64_t>{0, 0, 0, 0}));
  EXPECT_EQ(s.totals, (std::vector<int64_t>{4, 3, 2, 1}));
  EXPECT_EQ(s.precisions, (std::vector<double>{0, 0, 0, 0}));  // no smoothing when nothing matches
  EXPECT_EQ(s.bp, 1.0);
  EXPECT_EQ(SentenceChrf("abc", {"xyz"}).score, 0.0);
}

TEST(BleuEdgeCases, OneWordSentences) {
  // Effective order stops after unigrams: exp(log(100) / 1).
  EXPECT_NEAR(SentenceBleu("cat", {"cat"}).score, 100.0, kScoreTolerance);
  EXPECT_EQ(SentenceBleu("cat", {"dog"}).score, 0.0);
  // Corpus BLEU keeps all four orders; orders 2-4 have no n-grams, precision 0, so BLEU is 0.
  const BleuScore corpus = CorpusBleu({"cat"}, {{"cat"}});
  EXPECT_EQ(corpus.score, 0.0);
  EXPECT_EQ(corpus.counts, (std::vector<int64_t>{1, 0, 0, 0}));
  EXPECT_EQ(corpus.totals, (std::vector<int64_t>{1, 0, 0, 0}));
  EXPECT_EQ(SentenceChrf("cat", {"cat"}).score, 100.0);
  EXPECT_EQ(SentenceChrf("cat", {"cat"}, ChrfPlusPlusOptions()).score, 100.0);
}

TEST(BleuEdgeCases, SmoothingMethods) {
  // "a b c d" vs "a b x d": matches 3/4, 1/3, 0/2, 0/1.
  const std::string hyp = "a b c d";
  const std::vector<std::string> refs{"a b x d"};
  BleuOptions options;
  EXPECT_NEAR(SentenceBleu(hyp, refs, options).score, GeometricBleu({75.0, 100.0 / 3, 100.0 / 4, 100.0 / 4}),
              kScoreTolerance);  // 2^k
  options.smoothing = BleuSmoothing::kFloor;
  EXPECT_NEAR(SentenceBleu(hyp, refs, options).score,
              GeometricBleu({75.0, 100.0 / 3, 100.0 * 0.1 / 2, 100.0 * 0.1 / 1}), kScoreTolerance);
  options.smoothing = BleuSmoothing::kAddK;  // k = 1 added to orders >= 2
  EXPECT_NEAR(SentenceBleu(hyp, refs, options).score, GeometricBleu({75.0, 200.0 / 4, 100.0 / 3, 100.0 / 2}),
              kScoreTolerance);
  options.smoothing = BleuSmoothing::kNone;
  EXPECT_EQ(SentenceBleu(hyp, refs, options).score, 0.0);
  EXPECT_EQ(ParseBleuSmoothing("add-k"), BleuSmoothing::kAddK);
  EXPECT_EQ(ParseBleuSmoothing("add-n"), std::nullopt);
}

TEST(BleuEdgeCases, MultipleReferences) {
  // Closest reference length, the shorter one on ties: 3 tokens against 2 and 4 gives 2.
  EXPECT_EQ(SentenceBleu("a b c", {"a b c d", "a b"}).ref_len, 2);
  EXPECT_EQ(SentenceBleu("a b c", {"a b", "a b c d"}).ref_len, 2);
  // Counts are clipped by the maximum count in any one reference: min(3, max(1, 2)) = 2.
  const BleuScore s = SentenceBleu("the the the", {"the cat", "the the dog"});
  EXPECT_EQ(s.counts[0], 2);
  // chrF takes the statistics of the best reference for each segment.
  const ChrfScore c = SentenceChrf("abc", {"xyz", "abc"});
  EXPECT_EQ(c.score, 100.0);
  EXPECT_EQ(c.stats[0], 3);  // hypothesis unigrams
  EXPECT_EQ(c.stats[2], 3);  // matched unigrams: from "abc", not "xyz"
  // Corpus statistics add up per segment.
  const BleuScore corpus = CorpusBleu({"a b", "c d e"}, {{"a b", "c d"}, {"", "c d e f"}});
  EXPECT_EQ(corpus.sys_len, 5);
  EXPECT_EQ(corpus.ref_len, 2 + 2);  // |3-2| = |3-4|: the shorter reference
}

TEST(BleuEdgeCases, Lowercase) {
  BleuOptions options;
  options.lowercase = true;
  EXPECT_NEAR(SentenceBleu("HELLO World", {"hello world"}, options).score, 100.0, kScoreTolerance);
  // Python's str.lower() turns a word-final capital sigma into the final form.
  EXPECT_NEAR(SentenceBleu("ΟΔΟΣ", {"οδος"}, options).score, 100.0, kScoreTolerance);
  EXPECT_EQ(SentenceBleu("ΟΔΟΣ", {"οδοσ"}, options).score, 0.0);
  // U+0130 lowercases to two code points, i + combining dot (U+0307).
  options.tokenizer = BleuTokenizer::kChar;
  EXPECT_NEAR(SentenceBleu("İ", {"i\u0307"}, options).score, 100.0, kScoreTolerance);
  ChrfOptions chrf;
  chrf.lowercase = true;
  EXPECT_EQ(SentenceChrf("ABC", {"abc"}, chrf).score, 100.0);
}

TEST(TokenizerQuirks, Mteval13a) {
  const auto tok = [](const std::string& s) { return TokenizeForBleu(s, BleuTokenizer::k13a); };
  EXPECT_EQ(tok("&amp;quot;"), "& quot ;");  // &quot; is replaced before &amp;
  EXPECT_EQ(tok("&amp;lt;"), "<");           // &lt; after &amp;
  EXPECT_EQ(tok("&lt;b&gt;"), "< b >");
  EXPECT_EQ(tok("a<skipped>b"), "ab");
  EXPECT_EQ(tok("foo-\nbar\nbaz"), "foobar baz");
  EXPECT_EQ(tok("It costs 2019."), "It costs 2019 .");  // padded, so the final period splits
  EXPECT_EQ(tok("1,000.5 a,b 3-4 x-y"), "1,000.5 a , b 3 - 4 x-y");
  EXPECT_EQ(tok(""), "");
}

TEST(TokenizerQuirks, ZhRangesAsImplemented) {
  const auto tok = [](const std::string& s) { return TokenizeForBleu(s, BleuTokenizer::kZh); };
  EXPECT_EQ(tok("It costs 2019."), "It costs 2019.");  // no padding: the period stays
  EXPECT_EQ(tok("a\u2010b"), "a \u2010 b");            // U+2001..U+2A6D count as Chinese
  EXPECT_EQ(tok("a\u2a6db"), "a \u2a6d b");
  EXPECT_EQ(tok("a\u2a6eb"), "a\u2a6eb");
  EXPECT_EQ(tok("a\U00020000b"), "a\U00020000b");  // CJK Extension B is not split
  EXPECT_EQ(tok("a\u4db5b\u4db6c"), "a \u4db5 b\u4db6c");
  EXPECT_EQ(tok("a\u9fbbb\u9fbcc"), "a \u9fbb b\u9fbcc");
  EXPECT_EQ(tok("&amp;"), "& amp ;");  // no entity handling in zh
}

TEST(TokenizerQuirks, IntlUnicodeClasses) {
  const auto tok = [](const std::string& s) { return TokenizeForBleu(s, BleuTokenizer::kIntl); };
  EXPECT_EQ(tok("Hello, world! e.g."), "Hello , world ! e . g .");
  EXPECT_EQ(tok("3.14 1,000.50; $5 a+b"), "3.14 1,000.50 ; $ 5 a + b");
  EXPECT_EQ(tok("in 2019."), "in 2019.");  // mteval-v14's own quirk: a digit before the period
  EXPECT_EQ(tok("«Bonjour»"), "« Bonjour »");
  EXPECT_EQ(tok("中文，标点。"), "中文 ， 标点 。");
  EXPECT_EQ(tok("x\u00a9y"), "x \u00a9 y");  // So
}

TEST(TokenizerQuirks, CharAndNone) {
  EXPECT_EQ(TokenizeForBleu("ab c", BleuTokenizer::kChar), "a b   c");
  EXPECT_EQ(TokenizeForBleu(" a  b ", BleuTokenizer::kNone), " a  b ");
  // BLEU counts non-whitespace characters as tokens for `char`.
  BleuOptions options;
  options.tokenizer = BleuTokenizer::kChar;
  EXPECT_EQ(SentenceBleu("ab c", {"abc"}, options).sys_len, 3);
}

TEST(TokenizerQuirks, PythonWhitespace) {
  const auto tok = [](const std::string& s) { return TokenizeForBleu(s, BleuTokenizer::kNone); };
  BleuOptions none;
  none.tokenizer = BleuTokenizer::kNone;
  for (const char* space : {"\x1c", "\x1f", "\u0085", "\u00a0", "\u1680", "\u2000", "\u200a", "\u2028",
                            "\u2029", "\u202f", "\u205f", "\u3000"}) {
    EXPECT_EQ(SentenceBleu(std::string("a") + space + "b", {"a b"}, none).sys_len, 2) << tok(space);
  }
  for (const char* not_space : {"\u200b", "\u180e", "\ufeff"}) {
    EXPECT_EQ(SentenceBleu(std::string("a") + not_space + "b", {"a b"}, none).sys_len, 1);
  }
  EXPECT_EQ(RstripPythonWhitespace("a b\u3000\t\r"), "a b");
  EXPECT_EQ(RstripPythonWhitespace("\u200b"), "\u200b");
}

TEST(Utf8, InvalidInputIsAnError) {
  for (const char* bad : {"\xc0\x80", "ab\xed\xa0\x80", "ab\xf4\x90\x80\x80", "\xe2\x82", "a\x80"}) {
    EXPECT_THROW(TokenizeForBleu(bad, BleuTokenizer::k13a), Error) << bad;
  }
  EXPECT_EQ(TokenizeForBleu("€, 中文, \U0001F600", BleuTokenizer::kChar), "€ ,   中 文 ,   \U0001F600");
}

TEST(Formatting, SacrebleuTextStyle) {
  BleuScore s;
  s.score = 35.1215;
  s.precisions = {66.66666, 40.0, 28.571428, 16.666666};
  s.bp = 1.0;
  s.sys_len = 6;
  s.ref_len = 6;
  EXPECT_EQ(FormatBleu(s),
            "BLEU = 35.12 66.7/40.0/28.6/16.7 (BP = 1.000 ratio = 1.000 hyp_len = 6 ref_len = 6)");
  ChrfScore c;
  c.score = 52.3149;
  EXPECT_EQ(FormatChrf(c), "chrF2 = 52.31");
  c.word_order = 2;
  c.score = 50.1;
  EXPECT_EQ(FormatChrf(c), "chrF2++ = 50.10");
}

}  // namespace
}  // namespace hymt
