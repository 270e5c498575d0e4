// The split rules as hand-written matchers. Each Match* function answers "which alternative of the
// regex matches at byte i, and where does that match end", trying alternatives in order as a
// backtracking engine does; the reasoning for each alternative is in the comments.
#include "tokenizer/pretokenize.h"

#include <cstdint>

#include "core/utf8.h"
#include "tokenizer/unicode.h"

namespace hymt {
namespace {

constexpr size_t kNoMatch = static_cast<size_t>(-1);
constexpr uint8_t kL = kUnicodeLetter, kM = kUnicodeMark, kN = kUnicodeNumber, kP = kUnicodePunct,
                  kS = kUnicodeSymbol, kWs = kUnicodeSpace;

inline bool IsNewline(char32_t c) {
  return c == '\r' || c == '\n';
}
inline bool IsAsciiAlpha(uint8_t c) {
  return (c | 0x20) >= 'a' && (c | 0x20) <= 'z';
}
// The 32 ASCII punctuation and symbol characters: !"#$%&'()*+,-./:;<=>?@[\]^_`{|}~
inline bool IsAsciiPunct(char32_t c) {
  return (c >= 0x21 && c <= 0x2f) || (c >= 0x3a && c <= 0x40) || (c >= 0x5b && c <= 0x60) ||
         (c >= 0x7b && c <= 0x7e);
}
// Pass 2 of hunyuan-dense: [一-龥぀-ゟ゠-ヿ] (CJK ideographs up to U+9FA5, hiragana, katakana).
inline bool IsDenseCjk(char32_t c) {
  return (c >= 0x4e00 && c <= 0x9fa5) || (c >= 0x3040 && c <= 0x30ff);
}

// One valid UTF-8 run being split; positions are byte offsets into it.
class Run {
 public:
  Run(std::string_view text, const UnicodeFlagTable& table)
      : s_(reinterpret_cast<const uint8_t*>(text.data())), n_(text.size()), table_(table) {}

  size_t size() const { return n_; }

  // The code point starting at byte i < size() (the run is valid UTF-8); *next is the byte after it.
  char32_t At(size_t i, size_t* next) const {
    uint8_t b = s_[i];
    if (b < 0x80) {
      *next = i + 1;
      return b;
    }
    if (b < 0xe0) {
      *next = i + 2;
      return (char32_t{b & 0x1fu} << 6) | (s_[i + 1] & 0x3fu);
    }
    if (b < 0xf0) {
      *next = i + 3;
      return (char32_t{b & 0x0fu} << 12) | ((s_[i + 1] & 0x3fu) << 6) | (s_[i + 2] & 0x3fu);
    }
    *next = i + 4;
    return (char32_t{b & 0x07u} << 18) | ((s_[i + 1] & 0x3fu) << 12) | ((s_[i + 2] & 0x3fu) << 6) |
           (s_[i + 3] & 0x3fu);
  }
  uint8_t Flags(char32_t c) const { return table_.Flags(c); }
  // Flags of the code point at i, or 0 at the end of the run.
  uint8_t FlagsAt(size_t i) const {
    size_t next;
    return i < n_ ? Flags(At(i, &next)) : 0;
  }

  // End of the run, from i, of code points whose flags intersect `any`.
  size_t RunOf(size_t i, uint8_t any) const {
    size_t next;
    while (i < n_ && (Flags(At(i, &next)) & any)) i = next;
    return i;
  }
  // End of the run, from i, of code points whose flags avoid `none` entirely.
  size_t RunAvoiding(size_t i, uint8_t none) const {
    size_t next;
    while (i < n_ && !(Flags(At(i, &next)) & none)) i = next;
    return i;
  }
  // [\r\n]* from i.
  size_t NewlinesEnd(size_t i) const {
    while (i < n_ && (s_[i] == '\r' || s_[i] == '\n')) ++i;
    return i;
  }
  size_t AsciiAlphaEnd(size_t i) const {
    while (i < n_ && IsAsciiAlpha(s_[i])) ++i;
    return i;
  }

  // The shared tail of both rules, at a whitespace code point i: \s*[\r\n]+|\s+(?!\S)|\s+
  //  - \s*[\r\n]+ backtracks \s* from the end of the whitespace run to its last \r or \n, so it ends
  //    just after the last newline of the run when there is one;
  //  - else \s+(?!\S) takes the whole run at the end of the text, or all of it but its last code point
  //    (which is whitespace, so the lookahead holds) when the run has two or more;
  //  - else \s+ takes the single whitespace code point.
  size_t WhitespaceEnd(size_t i) const {
    size_t pos = i, last_start = i, after_newline = kNoMatch, count = 0, next;
    while (pos < n_) {
      char32_t c = At(pos, &next);
      if (!(Flags(c) & kWs)) break;
      if (IsNewline(c)) after_newline = next;
      last_start = pos;
      pos = next;
      ++count;
    }
    if (after_newline != kNoMatch) return after_newline;
    if (pos == n_ || count < 2) return pos;
    return last_start;
  }

 private:
  const uint8_t* s_;
  size_t n_;
  const UnicodeFlagTable& table_;
};

// Lower-cases the code points the contractions test: ASCII, and U+017F LONG S, which Unicode simple
// case folding maps to 's' (the reference engines match (?i:'s) against it).
inline char32_t FoldContraction(char32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c == 0x17f) return 's';
  return c;
}

// The Hunyuan rule at byte i of `run` (every position matches some alternative). Returns the end.
size_t MatchHunyuan(const Run& run, size_t i) {
  const size_t n = run.size();
  size_t j;
  char32_t c = run.At(i, &j);
  uint8_t f = run.Flags(c);
  // (?i:'s|'t|'re|'ve|'m|'ll|'d)
  if (c == '\'' && j < n) {
    size_t k;
    char32_t c2 = FoldContraction(run.At(j, &k));
    if (c2 == 's' || c2 == 't' || c2 == 'm' || c2 == 'd') return k;
    if ((c2 == 'r' || c2 == 'v' || c2 == 'l') && k < n) {
      size_t m;
      char32_t c3 = FoldContraction(run.At(k, &m));
      if (c3 == (c2 == 'l' ? 'l' : 'e')) return m;
    }
  }
  // [^\r\n\p{L}\p{N}]?\p{L}+ : the optional code point is tried first, then left out.
  if (f & kL) return run.RunOf(j, kL);
  if (!IsNewline(c) && !(f & kN) && (run.FlagsAt(j) & kL)) return run.RunOf(j, kL);
  // \p{N}
  if (f & kN) return j;
  // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
  constexpr uint8_t kNotOther = kWs | kL | kN;
  if (c == ' ' && j < n && !(run.FlagsAt(j) & kNotOther))
    return run.NewlinesEnd(run.RunAvoiding(j, kNotOther));
  if (!(f & kNotOther)) return run.NewlinesEnd(run.RunAvoiding(j, kNotOther));
  // What is left is whitespace.
  return run.WhitespaceEnd(i);
}

// Pass 3 of hunyuan-dense at byte i; kNoMatch when no alternative matches there (a gap).
size_t MatchDenseGeneral(const Run& run, size_t i) {
  const size_t n = run.size();
  size_t j;
  char32_t c = run.At(i, &j);
  uint8_t f = run.Flags(c);
  // [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+
  if (c < 0x80 && IsAsciiPunct(c) && j < n) {
    size_t end = run.AsciiAlphaEnd(j);
    if (end > j) return end;
  }
  // [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+ : a mark is taken either as the optional code point or as the
  // start of the run, with the same result.
  if (f & (kL | kM)) return run.RunOf(j, kL | kM);
  if (!IsNewline(c) && !(f & (kP | kS)) && (run.FlagsAt(j) & (kL | kM))) return run.RunOf(j, kL | kM);
  // ' ?[\p{P}\p{S}]+[\r\n]*'
  if (c == ' ' && (run.FlagsAt(j) & (kP | kS))) return run.NewlinesEnd(run.RunOf(j, kP | kS));
  if (f & (kP | kS)) return run.NewlinesEnd(run.RunOf(j, kP | kS));
  if (f & kWs) return run.WhitespaceEnd(i);
  return kNoMatch;
}

// HF Split with behavior Isolated: matches and the gaps between them both become pieces.
template <typename Matcher, typename Emit>
void SplitIsolated(std::string_view text, const UnicodeFlagTable& table, Matcher match, Emit emit) {
  Run run(text, table);
  size_t i = 0, gap = kNoMatch;
  while (i < text.size()) {
    size_t end = match(run, i);
    if (end == kNoMatch) {
      if (gap == kNoMatch) gap = i;
      size_t next;
      run.At(i, &next);
      i = next;
      continue;
    }
    if (gap != kNoMatch) emit(text.substr(gap, i - gap));
    gap = kNoMatch;
    emit(text.substr(i, end - i));
    i = end;
  }
  if (gap != kNoMatch) emit(text.substr(gap));
}

void SplitValid(SplitRule rule, std::string_view text, const UnicodeFlagTable& table,
                std::vector<std::string_view>* pieces) {
  auto emit = [pieces](std::string_view piece) { pieces->push_back(piece); };
  if (rule == SplitRule::kHunyuan) {
    Run run(text, table);
    for (size_t i = 0; i < text.size();) {
      size_t end = MatchHunyuan(run, i);
      pieces->push_back(text.substr(i, end - i));
      i = end;
    }
    return;
  }
  // \p{N}{1,3}: up to three number code points.
  auto numbers = [](const Run& run, size_t i) {
    size_t end = i, next;
    for (int k = 0; k < 3 && end < run.size() && (run.Flags(run.At(end, &next)) & kN); ++k) end = next;
    return end > i ? end : kNoMatch;
  };
  // [一-龥぀-ゟ゠-ヿ]+
  auto cjk = [](const Run& run, size_t i) {
    size_t end = i, next;
    while (end < run.size() && IsDenseCjk(run.At(end, &next))) end = next;
    return end > i ? end : kNoMatch;
  };
  SplitIsolated(text, table, numbers, [&](std::string_view p1) {
    SplitIsolated(p1, table, cjk,
                  [&](std::string_view p2) { SplitIsolated(p2, table, MatchDenseGeneral, emit); });
  });
}

}  // namespace

const char* SplitRuleName(SplitRule rule) {
  switch (rule) {
    case SplitRule::kHunyuan:
      return "hunyuan";
    case SplitRule::kHunyuanDense:
      return "hunyuan-dense";
  }
  return "unknown";
}

std::optional<SplitRule> SplitRuleFromName(std::string_view name) {
  if (name == "hunyuan") return SplitRule::kHunyuan;
  if (name == "hunyuan-dense") return SplitRule::kHunyuanDense;
  return std::nullopt;
}

void SplitText(SplitRule rule, std::string_view text, std::vector<std::string_view>* pieces) {
  const UnicodeFlagTable& table = UnicodeFlagTable::Get();
  size_t pos = 0;
  while (pos < text.size()) {
    size_t bad = FindInvalidUtf8(text.substr(pos));
    size_t end = bad == std::string_view::npos ? text.size() : pos + bad;
    if (end > pos) SplitValid(rule, text.substr(pos, end - pos), table, pieces);
    if (end < text.size()) pieces->push_back(text.substr(end++, 1));  // one invalid byte
    pos = end;
  }
}

}  // namespace hymt
