// Sentence segmentation: ICU's sentence rules line by line, plus the script rules ICU lacks, plus a
// length cap. Positions are byte offsets into the caller's UTF-8 (ICU reads it through a UTF-8 UText),
// so every cut is a cut of the input and the segments concatenate back to it exactly.
#include "translate/segmenter.h"

#include <unicode/brkiter.h>
#include <unicode/filteredbrk.h>
#include <unicode/uchar.h>
#include <unicode/utext.h>

#include <algorithm>
#include <climits>
#include <map>
#include <mutex>

#include "core/status.h"
#include "core/utf8.h"

namespace hymt {
namespace {

// ICU returns int32 positions; a longer line could not be addressed.
constexpr size_t kMaxLineBytes = INT32_MAX / 2;

// Abbreviations ICU's own suppression lists (locale keyword ss=standard) lack, per language.
const std::map<std::string, std::vector<const char*>>& ExtraSuppressions() {
  static const std::map<std::string, std::vector<const char*>> kExtra = {
      {"en", {"Dr.", "Jr.", "Sr.", "vs.", "e.g.", "i.e.", "cf.", "approx.", "Fig.", "Figs.", "Eq."}},
      {"de", {"Dr.", "Nr.", "ca.", "bzw.", "Abs.", "Prof.", "Hr.", "Fr."}},
  };
  return kExtra;
}

// Cuts only between code points: moves pos forward past UTF-8 continuation bytes.
size_t SnapForward(std::string_view s, size_t pos) {
  while (pos < s.size() && (static_cast<unsigned char>(s[pos]) & 0xC0) == 0x80) ++pos;
  return pos;
}

// Start of the code point that ends at `pos` (invalid bytes count as one code point each).
size_t PrevStart(std::string_view s, size_t pos) {
  for (size_t back = 1; back <= 4 && back <= pos; ++back) {
    unsigned char b = static_cast<unsigned char>(s[pos - back]);
    if ((b & 0xC0) != 0x80) {
      return ValidUtf8SequenceLength(s, pos - back) == static_cast<int>(back) ? pos - back : pos - 1;
    }
  }
  return pos - 1;
}

char32_t CodePointAt(std::string_view s, size_t pos, size_t* next) {
  *next = pos;
  return DecodeUtf8(s, next);
}

// Whitespace for trimming: Unicode White_Space plus the invisible BOM and zero-width space, which carry
// nothing to translate.
bool IsSpace(char32_t c) {
  return u_isUWhiteSpace(static_cast<UChar32>(c)) || c == 0xFEFF || c == 0x200B;
}

bool HasLetter(std::string_view s) {
  for (size_t pos = 0; pos < s.size();) {
    char32_t c = DecodeUtf8(s, &pos);
    if (c != 0xFFFD && u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_ALPHABETIC)) return true;
  }
  return false;
}

size_t SkipSpaces(std::string_view s, size_t pos, size_t end = std::string_view::npos) {
  end = std::min(end, s.size());
  while (pos < end) {
    size_t next;
    if (!IsSpace(CodePointAt(s, pos, &next)) || next > end) break;
    pos = next;
  }
  return pos;
}

size_t TrimEnd(std::string_view s, size_t begin, size_t end) {
  while (end > begin) {
    size_t start = PrevStart(s, end);
    size_t next;
    if (!IsSpace(CodePointAt(s, start, &next)) || next != end) break;
    end = start;
  }
  return end;
}

bool IsTibetanShad(char32_t c) {
  return c >= 0x0F0D && c <= 0x0F12;
}
bool IsKhmerKhan(char32_t c) {
  return c == 0x17D4 || c == 0x17D5;
}
bool IsClose(char32_t c) {
  return u_getIntPropertyValue(static_cast<UChar32>(c), UCHAR_SENTENCE_BREAK) == U_SB_CLOSE;
}

// Clause punctuation for splitting an over-long sentence. ASCII ones count only before whitespace so
// "1,000", "10:30" and "http://" stay whole.
bool IsClausePunct(char32_t c, char32_t next) {
  switch (c) {
    case ',':
    case ';':
    case ':':
      return IsSpace(next);
    case 0x060C:  // ، Arabic comma
    case 0x061B:  // ؛ Arabic semicolon
    case 0x3001:  // 、 ideographic comma
    case 0xFF0C:  // ， full-width comma
    case 0xFF1B:  // ； full-width semicolon
    case 0xFF1A:  // ： full-width colon
    case 0x104A:  // ၊ Burmese little section
    case 0x2014:  // — em dash
      return true;
    default:
      return false;
  }
}

// After a terminator: the closing quotes and brackets that belong to it, then the spaces after it (the
// same shape as ICU's rule STerm Close* Sp*).
size_t AfterTerminator(std::string_view s, size_t pos) {
  size_t next;
  while (pos < s.size() && IsClose(CodePointAt(s, pos, &next))) pos = next;
  return SkipSpaces(s, pos);
}

// Boundaries ICU does not make: after Tibetan shad (one or several, possibly separated by spaces, as in
// "། །") and after the Khmer khan ។ / ៕ (ICU 72 gives them no sentence-break class). "។ល។" is Khmer
// "etc.", which mostly sits inside a sentence: it never ends one.
void AddScriptBoundaries(std::string_view s, std::vector<size_t>* out) {
  for (size_t pos = 0; pos < s.size();) {
    size_t next;
    char32_t c = CodePointAt(s, pos, &next);
    if (IsTibetanShad(c)) {
      size_t end = next;
      for (;;) {
        size_t q = SkipSpaces(s, end);
        size_t after;
        if (q < s.size() && IsTibetanShad(CodePointAt(s, q, &after))) {
          end = after;
        } else {
          break;
        }
      }
      end = AfterTerminator(s, end);
      if (end < s.size()) out->push_back(end);
      pos = end;
      continue;
    }
    if (IsKhmerKhan(c)) {
      static constexpr std::string_view kKhmerEtc = "\u17D4\u179B\u17D4";
      if (s.substr(pos, kKhmerEtc.size()) == kKhmerEtc) {
        pos += kKhmerEtc.size();
        continue;
      }
      size_t end = AfterTerminator(s, next);
      if (end < s.size()) out->push_back(end);
      pos = end;
      continue;
    }
    pos = next;
  }
}

bool IsCjkTerminator(char32_t c) {
  return c == 0x3002 || c == 0xFF01 || c == 0xFF1F || c == 0xFF61;
}

// ICU's rule STerm Close* takes every quote after a terminator, which in unspaced CJK text swallows the
// opening quote of the next sentence ("？“我" would end with “). After a CJK terminator, opening brackets
// and the quotes Chinese and Japanese open with (“ ‘) go to the next sentence: returns the moved boundary.
size_t MoveOpeningQuotes(std::string_view s, size_t b) {
  size_t end = TrimEnd(s, 0, b);
  if (end < b) return b;  // spaces before the boundary: the quotes were closing ones
  size_t run = end, next;
  while (run > 0) {
    size_t prev = PrevStart(s, run);
    if (!IsClose(CodePointAt(s, prev, &next))) break;
    run = prev;
  }
  if (run == end || run == 0 || !IsCjkTerminator(CodePointAt(s, PrevStart(s, run), &next))) return b;
  for (size_t pos = run; pos < end; pos = next) {
    char32_t c = CodePointAt(s, pos, &next);
    if (c == 0x201C || c == 0x2018 || u_charType(static_cast<UChar32>(c)) == U_START_PUNCTUATION) return pos;
  }
  return b;
}

// True when ICU's boundary at `b` should be dropped (ICU ends a sentence at every terminator followed by
// space and a capital, or by a non-Latin letter):
// - after the Burmese little section ၊, a comma in use though Unicode classes it as a terminator;
// - after an initial such as "John F. Kennedy" (one capital letter and a dot);
// - in Thai after ".", which marks abbreviations there (ดร.), never the end of a sentence;
// - in German after an ordinal such as "3. Mai";
// - before a quotative particle that continues the sentence after a closing quote: Japanese 「…。」と,
//   Burmese "…။" ဟု.
bool DropBoundary(std::string_view s, size_t b, const std::string& lang) {
  size_t end = TrimEnd(s, 0, b);
  if (end == 0) return false;
  size_t last = PrevStart(s, end);
  size_t next;
  char32_t c = CodePointAt(s, last, &next);
  if (c == 0x104A) return true;
  if (c == '.' && end < b && last > 0) {
    if (lang == "th") return true;
    size_t letter = PrevStart(s, last);
    char32_t l = CodePointAt(s, letter, &next);
    char32_t before = letter == 0 ? ' ' : CodePointAt(s, PrevStart(s, letter), &next);
    if (u_isupper(static_cast<UChar32>(l)) && (IsSpace(before) || before == '-' || before == '('))
      return true;
    if (lang == "de") {
      size_t digits = last;
      while (digits > 0 && s[digits - 1] >= '0' && s[digits - 1] <= '9') --digits;
      size_t n = last - digits;
      bool word_start = digits == 0 || s[digits - 1] == ' ' || s[digits - 1] == '(';
      if (n >= 1 && n <= 2 && word_start) return true;
    }
  }
  if (IsClose(c)) {
    std::string_view rest = s.substr(b);
    if (lang == "ja" && (rest.starts_with("と") || rest.starts_with("って"))) return true;
    if (lang == "my" && rest.starts_with("ဟု")) return true;
  }
  return false;
}

// Prototype break iterators per language; each Split works on its own clone (ICU iterators hold the
// text they iterate, so they cannot be shared between threads).
class IteratorCache {
 public:
  std::unique_ptr<icu::BreakIterator> Sentence(const std::string& lang) {
    std::lock_guard<std::mutex> lock(mu_);
    auto& slot = sentence_[lang];
    if (!slot) slot = MakeSentence(lang);
    return std::unique_ptr<icu::BreakIterator>(slot->clone());
  }
  std::unique_ptr<icu::BreakIterator> Word(const std::string& lang) {
    std::lock_guard<std::mutex> lock(mu_);
    auto& slot = word_[lang];
    if (!slot) {
      UErrorCode status = U_ZERO_ERROR;
      slot.reset(icu::BreakIterator::createWordInstance(IcuLocale(lang), status));
      if (U_FAILURE(status) || !slot)
        Fail(ErrorCode::kInternal, "ICU word break iterator: ", u_errorName(status));
    }
    return std::unique_ptr<icu::BreakIterator>(slot->clone());
  }

 private:
  static icu::Locale IcuLocale(const std::string& lang) {
    if (lang == "zh-Hant") return icu::Locale("zh_Hant");
    if (lang == "tl") return icu::Locale("fil");
    return icu::Locale(lang.c_str());
  }

  static std::unique_ptr<icu::BreakIterator> MakeSentence(const std::string& lang) {
    icu::Locale locale = IcuLocale(lang);
    UErrorCode status = U_ZERO_ERROR;
    std::unique_ptr<icu::BreakIterator> base(icu::BreakIterator::createSentenceInstance(locale, status));
    if (U_FAILURE(status) || !base)
      Fail(ErrorCode::kInternal, "ICU sentence break iterator for '", lang, "': ", u_errorName(status));
    // The builder loads the locale's standard suppressions (what the keyword ss=standard selects:
    // "Mr.", "U.S." ...); ours are added on top.
    std::unique_ptr<icu::FilteredBreakIteratorBuilder> builder(
        icu::FilteredBreakIteratorBuilder::createInstance(locale, status));
    if (U_FAILURE(status) || !builder) return base;  // no suppression data: plain rules still work
    auto extra = ExtraSuppressions().find(lang);
    if (extra != ExtraSuppressions().end()) {
      for (const char* abbrev : extra->second)
        builder->suppressBreakAfter(icu::UnicodeString(abbrev), status);
    }
    std::unique_ptr<icu::BreakIterator> filtered(builder->wrapIteratorWithFilter(base.release(), status));
    if (U_FAILURE(status) || !filtered)
      Fail(ErrorCode::kInternal, "ICU sentence filter for '", lang, "': ", u_errorName(status));
    return filtered;
  }

  std::mutex mu_;
  std::map<std::string, std::unique_ptr<icu::BreakIterator>> sentence_;
  std::map<std::string, std::unique_ptr<icu::BreakIterator>> word_;
};

// Collects segments, merging neighbours that are both untranslated.
class SegmentList {
 public:
  void Add(std::string_view s, bool translate) {
    if (s.empty()) return;
    if (translate && !HasLetter(s)) translate = false;
    if (!translate && !out_.empty() && !out_.back().translate) {
      out_.back().text.append(s);
    } else {
      out_.push_back(Segment{std::string(s), translate});
    }
  }
  std::vector<Segment> Take() { return std::move(out_); }

 private:
  std::vector<Segment> out_;
};

// UText over a string_view, closed on scope exit.
class Utf8Text {
 public:
  explicit Utf8Text(std::string_view s) {
    UErrorCode status = U_ZERO_ERROR;
    text_ = utext_openUTF8(nullptr, s.data(), static_cast<int64_t>(s.size()), &status);
    if (U_FAILURE(status)) Fail(ErrorCode::kInternal, "ICU utext_openUTF8: ", u_errorName(status));
  }
  ~Utf8Text() { utext_close(text_); }
  Utf8Text(const Utf8Text&) = delete;
  Utf8Text& operator=(const Utf8Text&) = delete;
  UText* get() const { return text_; }

 private:
  UText* text_ = nullptr;
};

class SentenceSegmenter : public Segmenter {
 public:
  explicit SentenceSegmenter(const SentenceSegmenterOptions& options) : options_(options) {
    if (options_.max_segment_chars < 8)
      Fail(ErrorCode::kInvalidArgument, "max_segment_chars must be at least 8, got ",
           options_.max_segment_chars);
  }

  std::vector<Segment> Split(std::string_view text, const Language& lang) const override {
    SegmentList out;
    size_t pos = 0;
    while (pos < text.size()) {
      size_t nl = text.find('\n', pos);
      size_t end = nl == std::string_view::npos ? text.size() : nl;
      SplitLine(text.substr(pos, end - pos), lang.code, &out);
      if (nl == std::string_view::npos) break;
      out.Add(text.substr(nl, 1), false);
      pos = nl + 1;
    }
    return out.Take();
  }

 private:
  void SplitLine(std::string_view line, const std::string& lang, SegmentList* out) const {
    if (line.size() > kMaxLineBytes)
      Fail(ErrorCode::kInvalidArgument, "a line of ", line.size(),
           " bytes is longer than the sentence segmenter's ", kMaxLineBytes);
    size_t begin = SkipSpaces(line, 0);
    size_t end = TrimEnd(line, begin, line.size());
    out->Add(line.substr(0, begin), false);
    if (begin < end) SplitContent(line.substr(begin, end - begin), lang, out);
    out->Add(line.substr(end), false);
  }

  // `s` starts and ends with a non-space character.
  void SplitContent(std::string_view s, const std::string& lang, SegmentList* out) const {
    std::vector<size_t> bounds;
    {
      std::unique_ptr<icu::BreakIterator> it = cache_.Sentence(lang);
      Utf8Text text(s);
      UErrorCode status = U_ZERO_ERROR;
      it->setText(text.get(), status);
      if (U_FAILURE(status)) Fail(ErrorCode::kInternal, "ICU setText: ", u_errorName(status));
      it->first();
      for (int32_t b = it->next(); b != icu::BreakIterator::DONE; b = it->next()) {
        size_t pos = MoveOpeningQuotes(s, SnapForward(s, static_cast<size_t>(b)));
        if (pos > 0 && pos < s.size() && !DropBoundary(s, pos, lang)) bounds.push_back(pos);
      }
    }
    AddScriptBoundaries(s, &bounds);
    bounds.push_back(s.size());
    std::sort(bounds.begin(), bounds.end());
    bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());
    size_t start = 0;
    for (size_t b : bounds) {
      size_t content_start = SkipSpaces(s, start, b);
      size_t content_end = TrimEnd(s, content_start, b);
      out->Add(s.substr(start, content_start - start), false);
      if (content_start < content_end)
        EmitSentence(s.substr(content_start, content_end - content_start), lang, out);
      out->Add(s.substr(content_end, b - content_end), false);
      start = b;
    }
  }

  // Emits one sentence (no surrounding spaces), cut into pieces of at most max_segment_chars.
  void EmitSentence(std::string_view s, const std::string& lang, SegmentList* out) const {
    const size_t max_chars = options_.max_segment_chars;
    std::unique_ptr<icu::BreakIterator> words;  // made only when a cut needs it
    std::unique_ptr<Utf8Text> words_text;
    size_t start = 0;
    while (start < s.size()) {
      // limit: the byte offset after max_chars code points; min_cut keeps pieces from getting tiny.
      size_t limit = start, min_cut = start, count = 0;
      while (limit < s.size() && count < max_chars) {
        DecodeUtf8(s, &limit);
        if (++count == max_chars / 4) min_cut = limit;
      }
      if (limit >= s.size()) {
        out->Add(s.substr(start), true);
        return;
      }
      // Tibetan writes no spaces between words; the tsheg after every syllable is the fallback there.
      size_t clause_cut = 0, space_cut = 0, tsheg_cut = 0;
      for (size_t pos = min_cut; pos < limit;) {
        size_t next;
        char32_t c = CodePointAt(s, pos, &next);
        char32_t after = 0;
        if (next < s.size()) {
          size_t unused;
          after = CodePointAt(s, next, &unused);
        }
        if (IsClausePunct(c, after)) clause_cut = next;
        if (IsSpace(c) && pos > min_cut) space_cut = pos;
        if (c == 0x0F0B) tsheg_cut = next;
        pos = next;
      }
      size_t cut = clause_cut ? clause_cut : space_cut ? space_cut : tsheg_cut;
      if (cut == 0) {
        if (!words) {
          words = cache_.Word(lang);
          words_text = std::make_unique<Utf8Text>(s);
          UErrorCode status = U_ZERO_ERROR;
          words->setText(words_text->get(), status);
          if (U_FAILURE(status)) Fail(ErrorCode::kInternal, "ICU setText: ", u_errorName(status));
        }
        int32_t b = words->preceding(static_cast<int32_t>(limit) + 1);
        if (b != icu::BreakIterator::DONE && static_cast<size_t>(b) > min_cut) cut = SnapForward(s, b);
      }
      if (cut == 0 || cut <= start) cut = limit;  // no boundary at all: a hard cut between code points
      size_t head_end = TrimEnd(s, start, cut);
      out->Add(s.substr(start, head_end - start), true);
      size_t next_start = SkipSpaces(s, cut);
      out->Add(s.substr(head_end, next_start - head_end), false);
      start = next_start;
    }
  }

  SentenceSegmenterOptions options_;
  mutable IteratorCache cache_;
};

}  // namespace

std::unique_ptr<Segmenter> CreateSentenceSegmenter(const SentenceSegmenterOptions& options) {
  return std::make_unique<SentenceSegmenter>(options);
}

}  // namespace hymt
