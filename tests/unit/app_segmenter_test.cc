// The sentence segmenter: segments concatenate to the input byte for byte (FLORES, all 38 languages,
// multi-paragraph mixes, invalid UTF-8), and hand-written cases per script split where they should.
#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "core/utf8.h"
#include "test_util.h"
#include "translate/segmenter.h"

namespace hymt {
namespace {

std::string Join(const std::vector<Segment>& segments) {
  std::string out;
  for (const auto& s : segments) out += s.text;
  return out;
}

std::vector<std::string> Translated(const std::vector<Segment>& segments) {
  std::vector<std::string> out;
  for (const auto& s : segments)
    if (s.translate) out.push_back(s.text);
  return out;
}

size_t CodePoints(std::string_view s) {
  size_t n = 0;
  for (size_t pos = 0; pos < s.size(); ++n) DecodeUtf8(s, &pos);
  return n;
}

bool IsAsciiSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

// The contract every split must keep.
void ExpectWellFormed(const std::vector<Segment>& segments, std::string_view input, size_t max_chars = 400) {
  ASSERT_EQ(Join(segments), input);
  for (size_t i = 0; i < segments.size(); ++i) {
    const Segment& s = segments[i];
    EXPECT_FALSE(s.text.empty());
    if (i > 0) {
      EXPECT_FALSE(!s.translate && !segments[i - 1].translate) << "untranslated neighbours not merged";
    }
    if (!s.translate) continue;
    EXPECT_FALSE(IsAsciiSpace(s.text.front())) << "[" << s.text << "]";
    EXPECT_FALSE(IsAsciiSpace(s.text.back())) << "[" << s.text << "]";
    EXPECT_EQ(s.text.find('\n'), std::string::npos);
    EXPECT_LE(CodePoints(s.text), max_chars);
  }
}

std::vector<std::string> ReadLines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::vector<std::string> Split(std::string_view text, const std::string& code) {
  static const auto segmenter = CreateSentenceSegmenter();
  auto segments = segmenter->Split(text, RequireLanguage(code));
  ExpectWellFormed(segments, text);
  return Translated(segments);
}

TEST(SentenceSegmenter, EveryFloresLineConcatenatesBack) {
  HYMT_REQUIRE_SHARED_DATA();
  auto segmenter = CreateSentenceSegmenter();
  for (const Language& lang : AllLanguages()) {
    auto lines = ReadLines(test::SharedDataDir() + "/flores200-devtest/" + lang.code + ".txt");
    ASSERT_EQ(lines.size(), 1012u) << lang.code;
    size_t sentences = 0;
    for (const auto& line : lines) {
      auto segments = segmenter->Split(line, lang);
      ExpectWellFormed(segments, line);
      sentences += Translated(segments).size();
    }
    // FLORES lines are single sentences or a few; far more pieces would mean a rule splits too eagerly.
    EXPECT_GE(sentences, lines.size() * 95 / 100) << lang.code;
    EXPECT_LE(sentences, lines.size() * 3) << lang.code;
  }
}

TEST(SentenceSegmenter, MultiParagraphMixesOfAllLanguages) {
  HYMT_REQUIRE_SHARED_DATA();
  auto segmenter = CreateSentenceSegmenter();
  std::mt19937 rng(1234);
  const char* kJoins[] = {" ", "  ", "\n", "\n\n", "\r\n", "\r\n\r\n", "\t", "\u3000", " \n \n", "\u00A0"};
  for (const Language& lang : AllLanguages()) {
    auto lines = ReadLines(test::SharedDataDir() + "/flores200-devtest/" + lang.code + ".txt");
    for (int doc = 0; doc < 20; ++doc) {
      std::string text = doc % 3 == 0 ? "  " : "";
      int n = 2 + static_cast<int>(rng() % 12);
      for (int i = 0; i < n; ++i) {
        text += lines[rng() % lines.size()];
        text += kJoins[rng() % std::size(kJoins)];
      }
      auto segments = segmenter->Split(text, lang);
      ExpectWellFormed(segments, text);
      // Thai marks no sentence end, so lines joined by spaces run together there.
      if (lang.code != "th") {
        EXPECT_GE(Translated(segments).size(), static_cast<size_t>(n) * 9 / 10) << lang.code;
      }
    }
  }
}

TEST(SentenceSegmenter, Latin) {
  EXPECT_EQ(Split("Dr. Smith arrived at 3.14 today. He said hello, e.g. to Mr. Jones. Then he left!", "en"),
            (std::vector<std::string>{"Dr. Smith arrived at 3.14 today.", "He said hello, e.g. to Mr. Jones.",
                                      "Then he left!"}));
  EXPECT_EQ(Split("Pi is 3.14 and e is 2.718. Done.", "en").size(), 2u);
  EXPECT_EQ(
      Split("He worked for John F. Kennedy and then for Lyndon B. Johnson. Later he left.", "en").size(), 2u);
  EXPECT_EQ(Split("Am 3. Oktober 1990 wurde Deutschland vereinigt. Das ist z.B. gut.", "de").size(), 2u);
  EXPECT_EQ(Split("Это первое предложение. Это второе? Да!", "ru").size(), 3u);
  EXPECT_EQ(Split("Ini kalimat pertama. Ini kalimat kedua.", "id").size(), 2u);
  EXPECT_EQ(Split("Đây là câu thứ nhất. Đây là câu thứ hai.", "vi").size(), 2u);
}

TEST(SentenceSegmenter, CjkFullWidthPunctuation) {
  EXPECT_EQ(Split("你好。今天天气很好！你去哪里？“我不知道。”他说。", "zh"),
            (std::vector<std::string>{"你好。", "今天天气很好！", "你去哪里？", "“我不知道。”", "他说。"}));
  EXPECT_EQ(Split("他說：「好。」然後走了。", "zh-Hant"),
            (std::vector<std::string>{"他說：「好。」", "然後走了。"}));
  EXPECT_EQ(Split("佢話：「我哋走咗啦。」你知唔知？", "yue").size(), 2u);
  EXPECT_EQ(Split("これはペンです。あれは何ですか？（はい）", "ja").size(), 3u);
  EXPECT_EQ(Split("안녕하세요. 저는 학생입니다!", "ko").size(), 2u);
  // A quote closed by 」 and continued by the quotative particle と is one sentence.
  EXPECT_EQ(Split("彼は「今は何もしていない。」と語った。次の日。", "ja").size(), 2u);
}

TEST(SentenceSegmenter, TibetanShad) {
  EXPECT_EQ(Split("ཁོང་ཚོ་ཡིན། ང་ཡང་ཡིན། དེ་རེད།", "bo"),
            (std::vector<std::string>{"ཁོང་ཚོ་ཡིན།", "ང་ཡང་ཡིན།", "དེ་རེད།"}));
  // Double shad, a shad pair "། །" and an ornament-only opening that has no letters to translate.
  EXPECT_EQ(Split("༄༅། །བཀྲ་ཤིས་བདེ་ལེགས། །ཐུགས་རྗེ་ཆེ༎ ལེགས་སོ།", "bo"),
            (std::vector<std::string>{"བཀྲ་ཤིས་བདེ་ལེགས། །", "ཐུགས་རྗེ་ཆེ༎", "ལེགས་སོ།"}));
}

TEST(SentenceSegmenter, ArabicScript) {
  EXPECT_EQ(Split("یہ ایک جملہ ہے۔ یہ دوسرا ہے؟ ٹھیک ہے۔", "ur").size(), 3u);
  EXPECT_EQ(Split("هذه جملة. هل هذه جملة؟ نعم، هذه جملة.", "ar").size(), 3u);
  EXPECT_EQ(Split("این یک جمله است. آیا این جمله است؟", "fa").size(), 2u);
  EXPECT_EQ(Split("بۇ بىر جۈملە. بۇ ئىككىنچى جۈملە؟", "ug").size(), 2u);
  // The Arabic comma is not a sentence end.
  EXPECT_EQ(Split("نعم، هذه جملة، وهذه أيضا.", "ar").size(), 1u);
}

TEST(SentenceSegmenter, IndicAndSoutheastAsian) {
  EXPECT_EQ(Split("यह एक वाक्य है। यह दूसरा है॥ तीसरा", "hi").size(), 3u);
  EXPECT_EQ(Split("हे पहिले वाक्य आहे। हे दुसरे वाक्य आहे.", "mr").size(), 2u);
  EXPECT_EQ(Split("এটি একটি বাক্য। এটি আরেকটি।", "bn").size(), 2u);
  // Burmese: ။ ends a sentence, ၊ (a comma in use) does not.
  EXPECT_EQ(Split("ဟုတ်တယ်၊ မဟုတ်ဘူး။ နောက်တစ်ခု။", "my"), (std::vector<std::string>{"ဟုတ်တယ်၊ မဟုတ်ဘူး။", "နောက်တစ်ခု။"}));
  // Khmer khan, with and without a following space; ។ល។ ("etc.") inside a sentence does not end it.
  EXPECT_EQ(Split("នេះជាប្រយោគ។ នេះជាប្រយោគទីពីរ។", "km").size(), 2u);
  EXPECT_EQ(Split("ខ្ញុំទៅផ្សារ។គាត់នៅផ្ទះ។", "km").size(), 2u);
  EXPECT_EQ(Split("ផ្លែឈើ ចេក ។ល។ ល្អ។", "km").size(), 1u);
  // Thai marks no sentence end; a line stays whole, and "." marks abbreviations (ดร. = Dr.).
  EXPECT_EQ(Split("สวัสดีครับ ผมชื่อสมชาย วันนี้อากาศดีมาก", "th").size(), 1u);
  EXPECT_EQ(Split("ดร. เอฮุด อูร์ ศาสตราจารย์แพทยศาสตร์", "th").size(), 1u);
}

TEST(SentenceSegmenter, WhitespaceAndLinesAreKept) {
  auto segmenter = CreateSentenceSegmenter();
  const Language en = RequireLanguage("en");
  std::string text = "  First line. Second one!  \r\n\n\tIndented.\n\n\n12345\n---\n   ";
  auto segments = segmenter->Split(text, en);
  ExpectWellFormed(segments, text);
  EXPECT_EQ(Translated(segments), (std::vector<std::string>{"First line.", "Second one!", "Indented."}));
  EXPECT_TRUE(segmenter->Split("", en).empty());
  auto blank = segmenter->Split(" \n\t\n", en);
  ASSERT_EQ(blank.size(), 1u);
  EXPECT_FALSE(blank[0].translate);
}

TEST(SentenceSegmenter, InvalidUtf8IsKeptByteForByte) {
  auto segmenter = CreateSentenceSegmenter();
  const Language en = RequireLanguage("en");
  std::string text = "Hello\xff world. Bye\xc3 now.\x80\xe4\xb8 \xf0\x9f\x98";
  auto segments = segmenter->Split(text, en);
  ExpectWellFormed(segments, text);
  EXPECT_EQ(Translated(segments).size(), 2u);
  // Random bytes: never a crash, always the input back.
  std::mt19937 rng(7);
  for (int i = 0; i < 2000; ++i) {
    std::string junk(rng() % 200, '\0');
    for (char& c : junk) c = static_cast<char>(rng() % 4 == 0 ? " .\n。।"[rng() % 5] : rng());
    ASSERT_EQ(Join(segmenter->Split(junk, en)), junk);
  }
}

TEST(SentenceSegmenter, LongSentencesAreCut) {
  SentenceSegmenterOptions options;
  options.max_segment_chars = 100;
  auto segmenter = CreateSentenceSegmenter(options);
  // Latin words without punctuation: cut at spaces.
  std::string words;
  for (int i = 0; i < 200; ++i) words += "word" + std::to_string(i) + " ";
  words += "end.";
  auto segments = segmenter->Split(words, RequireLanguage("en"));
  ExpectWellFormed(segments, words, 100);
  EXPECT_GE(Translated(segments).size(), 12u);
  // Chinese with commas: cut after a comma.
  std::string zh;
  for (int i = 0; i < 30; ++i) zh += "我们今天去了公园，";
  zh += "然后回家。";
  segments = segmenter->Split(zh, RequireLanguage("zh"));
  ExpectWellFormed(segments, zh, 100);
  for (const auto& s : Translated(segments)) EXPECT_TRUE(s.ends_with("，") || s.ends_with("。")) << s;
  // No punctuation and no spaces at all (Thai, CJK, Tibetan): cut at word or syllable boundaries.
  for (auto [code, unit] : std::vector<std::pair<std::string, std::string>>{
           {"th", "สวัสดีครับ"}, {"zh", "我们今天去公园"}, {"bo", "བཀྲ་ཤིས་བདེ་ལེགས་"}, {"en", "x"}}) {
    std::string text;
    for (int i = 0; i < 150; ++i) text += unit;
    segments = segmenter->Split(text, RequireLanguage(code));
    ExpectWellFormed(segments, text, 100);
    EXPECT_GE(Translated(segments).size(), 2u) << code;
  }
  EXPECT_THROW(CreateSentenceSegmenter(SentenceSegmenterOptions{.max_segment_chars = 2}), Error);
}

// One segmenter serves many threads (the server's HTTP threads), languages mixed.
TEST(SentenceSegmenter, ThreadSafe) {
  auto segmenter = CreateSentenceSegmenter();
  const std::vector<std::pair<std::string, std::string>> cases = {{"en", "One. Two! Three?"},
                                                                  {"zh", "一。二！三？"},
                                                                  {"bo", "ཁོང་ཚོ་ཡིན། ང་ཡང་ཡིན། དེ་རེད།"},
                                                                  {"th", "สวัสดี ครับ"}};
  std::vector<std::vector<Segment>> expected;
  for (const auto& [code, text] : cases) expected.push_back(segmenter->Split(text, RequireLanguage(code)));
  std::vector<int> wrong(8, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        size_t c = static_cast<size_t>(t + i) % cases.size();
        auto got = segmenter->Split(cases[c].second, RequireLanguage(cases[c].first));
        wrong[t] += Translated(got) != Translated(expected[c]);
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int w : wrong) EXPECT_EQ(w, 0);
}

}  // namespace
}  // namespace hymt
