// BLEU and chrF as sacreBLEU 2.6.0 computes them. The structure follows sacreBLEU's so that each step
// can be checked against it: preprocess (lowercase, strip, tokenize) -> n-gram counts -> per-segment
// statistics (best reference) -> statistics summed over the corpus -> score. Python's string semantics
// (code points, its whitespace set, str.lower(), re.sub) are reproduced by small helpers at the top.

#include "translate/metrics.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <unordered_map>
#include <utility>

#include "core/utf8.h"

namespace hymt {
namespace {

struct CodePointRange {
  char32_t first;
  char32_t last;
};

// Every code point c in [first, last] with (c - first) % stride == 0 lowers to c + delta.
struct LowerRun {
  char32_t first;
  char32_t last;
  uint32_t stride;
  int32_t delta;
};

// Full lowercase mappings have at most two code points today (U+0130 -> U+0069 U+0307); the table
// generator fails if a future Unicode version needs more than this room.
constexpr size_t kMaxLowerExpansion = 3;

struct MultiLower {
  char32_t code_point;
  std::array<char32_t, kMaxLowerExpansion> lower;  // zero-padded
};

#include "unicode_case_table.inc"
#include "unicode_categories_table.inc"

template <size_t N>
bool InRanges(const CodePointRange (&ranges)[N], char32_t c) {
  const auto* it = std::upper_bound(std::begin(ranges), std::end(ranges), c,
                                    [](char32_t v, const CodePointRange& r) { return v < r.first; });
  return it != std::begin(ranges) && c <= std::prev(it)->last;
}

// ------------------------------------------------------------------------------------------------
// UTF-8 <-> code points. core/utf8 accepts exactly what Python's strict "utf-8" codec accepts
// (shortest forms, no surrogates, at most U+10FFFF), which is what sacreBLEU reads files with.

std::u32string DecodeText(std::string_view text, std::string_view what) {
  if (const size_t bad = FindInvalidUtf8(text); bad != std::string_view::npos) {
    Fail(ErrorCode::kInvalidArgument, what, ": invalid UTF-8 at byte ", bad);
  }
  std::u32string out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) out.push_back(DecodeUtf8(text, &pos));
  return out;
}

std::string EncodeText(std::u32string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char32_t c : text) AppendUtf8(c, &out);
  return out;
}

// ------------------------------------------------------------------------------------------------
// Python str semantics.

// str.split() / str.strip() whitespace: CPython's Py_UNICODE_ISSPACE, i.e. bidirectional class WS, B
// or S, or category Zs. This set has been stable since Unicode 6.3 (U+180E left it then).
bool IsPythonSpace(char32_t c) {
  if (c <= 0x20) return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20);
  if (c < 0x85) return false;
  return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
         c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// str.split() with no separator: runs of whitespace separate, no empty pieces.
std::vector<std::u32string_view> PythonSplit(std::u32string_view text) {
  std::vector<std::u32string_view> pieces;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && IsPythonSpace(text[i])) ++i;
    const size_t start = i;
    while (i < text.size() && !IsPythonSpace(text[i])) ++i;
    if (i > start) pieces.push_back(text.substr(start, i - start));
  }
  return pieces;
}

// ' '.join(text.split()), the normalisation every tokenizer ends with.
std::u32string JoinSplit(std::u32string_view text) {
  std::u32string out;
  out.reserve(text.size());
  for (std::u32string_view piece : PythonSplit(text)) {
    if (!out.empty()) out.push_back(U' ');
    out.append(piece);
  }
  return out;
}

std::u32string_view PythonRstrip(std::u32string_view text) {
  size_t end = text.size();
  while (end > 0 && IsPythonSpace(text[end - 1])) --end;
  return text.substr(0, end);
}

std::u32string_view PythonStrip(std::u32string_view text) {
  text = PythonRstrip(text);
  size_t start = 0;
  while (start < text.size() && IsPythonSpace(text[start])) ++start;
  return text.substr(start);
}

void AppendLower(char32_t c, std::u32string& out) {
  for (const MultiLower& m : kMultiLower) {
    if (m.code_point == c) {
      for (char32_t l : m.lower) {
        if (l != 0) out.push_back(l);
      }
      return;
    }
  }
  const auto* it = std::upper_bound(std::begin(kLowerRuns), std::end(kLowerRuns), c,
                                    [](char32_t v, const LowerRun& r) { return v < r.first; });
  if (it != std::begin(kLowerRuns)) {
    const LowerRun& run = *std::prev(it);
    if (c <= run.last && (c - run.first) % run.stride == 0) {
      out.push_back(static_cast<char32_t>(static_cast<int64_t>(c) + run.delta));
      return;
    }
  }
  out.push_back(c);
}

// Unicode's Final_Sigma condition for the capital sigma at text[i], as CPython's lower() tests it:
// a cased letter before it and none after it, skipping case-ignorable characters both ways.
bool IsFinalSigma(std::u32string_view text, size_t i) {
  size_t j = i;
  while (j > 0 && InRanges(kCaseIgnorableRanges, text[j - 1])) --j;
  if (j == 0 || !InRanges(kCasedRanges, text[j - 1])) return false;
  size_t k = i + 1;
  while (k < text.size() && InRanges(kCaseIgnorableRanges, text[k])) ++k;
  return k == text.size() || !InRanges(kCasedRanges, text[k]);
}

// str.lower(): full case mapping (U+0130 becomes two code points) with Final_Sigma.
std::u32string PythonLower(std::u32string_view text) {
  constexpr char32_t kCapitalSigma = 0x3A3;
  std::u32string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == kCapitalSigma) {
      out.push_back(IsFinalSigma(text, i) ? 0x3C2 : 0x3C3);
    } else {
      AppendLower(text[i], out);
    }
  }
  return out;
}

// str.replace(from, to): non-overlapping, left to right, replaced text is not rescanned.
std::u32string ReplaceAll(std::u32string_view text, std::u32string_view from, std::u32string_view to) {
  std::u32string out;
  out.reserve(text.size());
  size_t i = 0;
  while (true) {
    const size_t hit = text.find(from, i);
    if (hit == std::u32string_view::npos) break;
    out.append(text.substr(i, hit - i));
    out.append(to);
    i = hit + from.size();
  }
  out.append(text.substr(i));
  return out;
}

// ------------------------------------------------------------------------------------------------
// re.sub for the tokenizers' patterns. Every pattern is either one character class `(X)` replaced by
// ` \1 `, or two classes `(X)(Y)` replaced by `\1 \2 ` or ` \1 \2`. re.sub takes the leftmost match
// and resumes after it, which for a fixed two-character pattern is this left-to-right scan.

struct PairSpacing {
  bool before;  // ` \1 \2` puts a space before the pair...
  bool after;   // ...`\1 \2 ` after it; both put one between.
};
constexpr PairSpacing kSpaceAfter{false, true};
constexpr PairSpacing kSpaceBefore{true, false};

template <typename First, typename Second>
std::u32string SubstitutePairs(std::u32string_view text, First first, Second second, PairSpacing spacing) {
  std::u32string out;
  out.reserve(text.size() + text.size() / 2);
  size_t i = 0;
  while (i < text.size()) {
    if (i + 1 < text.size() && first(text[i]) && second(text[i + 1])) {
      if (spacing.before) out.push_back(U' ');
      out.push_back(text[i]);
      out.push_back(U' ');
      out.push_back(text[i + 1]);
      if (spacing.after) out.push_back(U' ');
      i += 2;
    } else {
      out.push_back(text[i]);
      ++i;
    }
  }
  return out;
}

template <typename Class>
std::u32string PadEach(std::u32string_view text, Class in_class) {
  std::u32string out;
  out.reserve(text.size() * 2);
  for (char32_t c : text) {
    if (in_class(c)) {
      out.push_back(U' ');
      out.push_back(c);
      out.push_back(U' ');
    } else {
      out.push_back(c);
    }
  }
  return out;
}

// ------------------------------------------------------------------------------------------------
// Tokenizers.

bool IsAsciiDigit(char32_t c) {
  return c >= U'0' && c <= U'9';
}
bool IsPeriodOrComma(char32_t c) {
  return c == U'.' || c == U',';
}

// mteval's class [\{-\~\[-\` -\&\(-\+\:-\@\/]: ASCII punctuation except ' , - . (and it includes the
// space, which is harmless as spaces are normalised at the end).
bool IsMtevalSeparated(char32_t c) {
  return (c >= 0x7B && c <= 0x7E) || (c >= 0x5B && c <= 0x60) || (c >= 0x20 && c <= 0x26) ||
         (c >= 0x28 && c <= 0x2B) || (c >= 0x3A && c <= 0x40) || c == 0x2F;
}

// The regex part shared by 13a and zh (sacreBLEU's TokenizerRegexp). Python's [0-9] is ASCII only.
std::u32string MtevalRegexes(std::u32string_view line) {
  std::u32string s = PadEach(line, IsMtevalSeparated);
  // period and comma unless preceded by a digit
  s = SubstitutePairs(
      s, [](char32_t c) { return !IsAsciiDigit(c); }, IsPeriodOrComma, kSpaceAfter);
  // period and comma unless followed by a digit
  s = SubstitutePairs(
      s, IsPeriodOrComma, [](char32_t c) { return !IsAsciiDigit(c); }, kSpaceBefore);
  // dash preceded by a digit
  s = SubstitutePairs(
      s, IsAsciiDigit, [](char32_t c) { return c == U'-'; }, kSpaceAfter);
  return JoinSplit(s);
}

std::u32string Tokenize13a(std::u32string_view line) {
  std::u32string s = ReplaceAll(line, U"<skipped>", U"");
  s = ReplaceAll(s, U"-\n", U"");
  s = ReplaceAll(s, U"\n", U" ");
  // Order matters and is sacreBLEU's: "&amp;lt;" becomes "<", "&amp;quot;" stays "&quot;".
  s = ReplaceAll(s, U"&quot;", U"\"");
  s = ReplaceAll(s, U"&amp;", U"&");
  s = ReplaceAll(s, U"&lt;", U"<");
  s = ReplaceAll(s, U"&gt;", U">");
  return MtevalRegexes(U" " + s + U" ");
}

// sacreBLEU's _UCODE_RANGES, compared as Python compares one-character strings with the range ends.
// Two ends there are written '\u20000', '\u2a6d6', '\u2f800' and '\u2fa1d': Python reads '\u' with
// four hex digits, so they are the two-character strings U+2000 '0', U+2A6D '6', U+2F80 '0' and
// U+2FA1 'd'. A single character c then satisfies U+2000 '0' <= c <= U+2A6D '6' exactly when
// U+2001 <= c <= U+2A6D (general punctuation, arrows, maths, ... count as "Chinese"), and the other
// range becomes U+2F81..U+2FA1; CJK Extension B and the compatibility supplement are never split.
constexpr CodePointRange kSacrebleuChineseRanges[] = {
    {0x3400, 0x4DB5}, {0x4E00, 0x9FA5}, {0x9FA6, 0x9FBB}, {0xF900, 0xFA2D}, {0xFA30, 0xFA6A},
    {0xFA70, 0xFAD9}, {0x2001, 0x2A6D}, {0x2F81, 0x2FA1}, {0xFF00, 0xFFEF}, {0x2E80, 0x2EFF},
    {0x3000, 0x303F}, {0x31C0, 0x31EF}, {0x2F00, 0x2FDF}, {0x2FF0, 0x2FFF}, {0x3100, 0x312F},
    {0x31A0, 0x31BF}, {0xFE10, 0xFE1F}, {0xFE30, 0xFE4F}, {0x2600, 0x26FF}, {0x2700, 0x27BF},
    {0x3200, 0x32FF}, {0x3300, 0x33FF},
};

bool IsSacrebleuChinese(char32_t c) {
  return std::any_of(std::begin(kSacrebleuChineseRanges), std::end(kSacrebleuChineseRanges),
                     [c](const CodePointRange& r) { return c >= r.first && c <= r.last; });
}

std::u32string TokenizeZh(std::u32string_view line) {
  std::u32string spaced = PadEach(PythonStrip(line), IsSacrebleuChinese);
  // Unlike 13a there are no entity replacements and no padding spaces before the regexes.
  return MtevalRegexes(spaced);
}

bool IsPunctuation(char32_t c) {
  return InRanges(kPunctuationRanges, c);
}
bool IsSymbol(char32_t c) {
  return InRanges(kSymbolRanges, c);
}
bool IsNotNumber(char32_t c) {
  return !InRanges(kNumberRanges, c);
}

std::u32string TokenizeIntl(std::u32string_view line) {
  // (\P{N})(\p{P}) -> '\1 \2 ', then (\p{P})(\P{N}) -> ' \1 \2', then (\p{S}) -> ' \1 '.
  std::u32string s = SubstitutePairs(line, IsNotNumber, IsPunctuation, kSpaceAfter);
  s = SubstitutePairs(s, IsPunctuation, IsNotNumber, kSpaceBefore);
  s = PadEach(s, IsSymbol);
  return JoinSplit(s);
}

std::u32string TokenizeChar(std::u32string_view line) {
  std::u32string out;
  out.reserve(line.size() * 2);
  for (char32_t c : line) {
    if (!out.empty()) out.push_back(U' ');
    out.push_back(c);
  }
  return out;
}

std::u32string Tokenize(std::u32string_view line, BleuTokenizer tokenizer) {
  switch (tokenizer) {
    case BleuTokenizer::k13a:
      return Tokenize13a(line);
    case BleuTokenizer::kZh:
      return TokenizeZh(line);
    case BleuTokenizer::kIntl:
      return TokenizeIntl(line);
    case BleuTokenizer::kChar:
      return TokenizeChar(line);
    case BleuTokenizer::kNone:
      return std::u32string(line);
  }
  Fail(ErrorCode::kInvalidArgument, "unknown BLEU tokenizer value ", static_cast<int>(tokenizer));
}

// ------------------------------------------------------------------------------------------------
// N-gram counting. An n-gram is keyed by its text with tokens joined by one space; tokens never contain
// whitespace, so the key identifies the token sequence (sacreBLEU uses tuples for BLEU and this same
// join for chrF++). Keys are views into a text the table owns, which avoids one allocation per n-gram.

using NgramCounts = std::unordered_map<std::u32string_view, int64_t>;

// A moved vector keeps its buffer, so a table can be moved without invalidating its keys.
struct NgramTable {
  std::vector<char32_t> text;       // what the keys point into
  std::vector<NgramCounts> counts;  // counts[n - 1]: n-grams of order n
};

NgramTable WordNgrams(const std::vector<std::u32string_view>& tokens, int max_order) {
  NgramTable table;
  std::vector<size_t> starts;
  std::vector<size_t> ends;
  for (std::u32string_view token : tokens) {
    if (!table.text.empty()) table.text.push_back(U' ');
    starts.push_back(table.text.size());
    table.text.insert(table.text.end(), token.begin(), token.end());
    ends.push_back(table.text.size());
  }
  table.counts.resize(static_cast<size_t>(max_order));
  for (size_t start = 0; start < tokens.size(); ++start) {
    for (size_t n = 1; n <= table.counts.size() && start + n <= tokens.size(); ++n) {
      const size_t end = ends[start + n - 1];
      ++table.counts[n - 1][std::u32string_view(table.text.data() + starts[start], end - starts[start])];
    }
  }
  return table;
}

NgramTable CharNgrams(std::u32string_view chars, int max_order) {
  NgramTable table;
  table.text.assign(chars.begin(), chars.end());
  table.counts.resize(static_cast<size_t>(max_order));
  for (size_t n = 1; n <= table.counts.size(); ++n) {
    for (size_t start = 0; start + n <= table.text.size(); ++start) {
      ++table.counts[n - 1][std::u32string_view(table.text.data() + start, n)];
    }
  }
  return table;
}

int64_t TotalCount(const NgramCounts& counts) {
  int64_t total = 0;
  for (const auto& [ngram, count] : counts) total += count;
  return total;
}

// Python's math.log with sacreBLEU's my_log guard: log(0) is taken as -9999999999.
double SacrebleuLog(double x) {
  return x == 0.0 ? -9999999999.0 : std::log(x);
}

std::string FormatFixed(double value, int digits) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", digits, value);
  return buffer;
}

// The references of segment `index` in stream order, empty strings dropped (sacreBLEU's
// _cache_references); throws if none is left.
std::vector<std::u32string> SegmentReferences(const std::vector<std::vector<std::string>>& ref_streams,
                                              size_t index) {
  std::vector<std::u32string> refs;
  for (size_t k = 0; k < ref_streams.size(); ++k) {
    const std::string& ref = ref_streams[k][index];
    if (ref.empty()) continue;
    refs.push_back(DecodeText(ref, StrCat("reference ", k + 1, " of segment ", index + 1)));
  }
  if (refs.empty()) {
    Fail(ErrorCode::kInvalidArgument, "segment ", index + 1,
         ": every reference is empty (sacreBLEU needs one non-empty reference)");
  }
  return refs;
}

void CheckStreams(size_t num_hypotheses, const std::vector<std::vector<std::string>>& ref_streams) {
  if (num_hypotheses == 0) Fail(ErrorCode::kInvalidArgument, "no hypotheses to score");
  if (ref_streams.empty()) Fail(ErrorCode::kInvalidArgument, "no reference streams");
  for (size_t k = 0; k < ref_streams.size(); ++k) {
    if (ref_streams[k].size() != num_hypotheses) {
      Fail(ErrorCode::kInvalidArgument, "reference stream ", k + 1, " has ", ref_streams[k].size(),
           " segments, expected ", num_hypotheses, " (one per hypothesis)");
    }
  }
}

std::vector<std::vector<std::string>> SentenceStreams(const std::vector<std::string>& references) {
  if (references.empty()) Fail(ErrorCode::kInvalidArgument, "no references");
  std::vector<std::vector<std::string>> streams;
  streams.reserve(references.size());
  for (const std::string& ref : references) streams.push_back({ref});
  return streams;
}

// ------------------------------------------------------------------------------------------------
// BLEU.

// Sufficient statistics, summed over segments.
struct BleuStats {
  int64_t sys_len = 0;
  int64_t ref_len = 0;
  std::vector<int64_t> correct;  // [max_order]
  std::vector<int64_t> total;    // [max_order]
};

// The tokenized line BLEU counts n-grams over: lowercase (optional), rstrip, tokenize.
std::u32string BleuTokenized(std::u32string_view line, const BleuOptions& options) {
  if (options.lowercase) return Tokenize(PythonRstrip(PythonLower(line)), options.tokenizer);
  return Tokenize(PythonRstrip(line), options.tokenizer);
}

// Closest reference length to the hypothesis length; the shorter one on ties.
int64_t ClosestRefLength(int64_t hyp_len, const std::vector<int64_t>& ref_lens) {
  int64_t best_diff = -1;
  int64_t best_len = -1;
  for (int64_t len : ref_lens) {
    const int64_t diff = len > hyp_len ? len - hyp_len : hyp_len - len;
    if (best_diff == -1 || diff < best_diff || (diff == best_diff && len < best_len)) {
      best_diff = diff;
      best_len = len;
    }
  }
  return best_len;
}

void AddSegmentStats(const std::u32string& hypothesis, const std::vector<std::u32string>& refs,
                     const BleuOptions& options, BleuStats* stats) {
  const int max_order = options.max_ngram_order;
  // Reference n-gram counts are the maximum over references (clipping), lengths kept per reference.
  // ref_max's keys point into ref_tables, which therefore live as long as it.
  std::vector<NgramTable> ref_tables;
  std::vector<NgramCounts> ref_max(static_cast<size_t>(max_order));
  std::vector<int64_t> ref_lens;
  for (const std::u32string& ref : refs) {
    const std::u32string tokenized = BleuTokenized(ref, options);
    const std::vector<std::u32string_view> tokens = PythonSplit(tokenized);
    ref_lens.push_back(static_cast<int64_t>(tokens.size()));
    ref_tables.push_back(WordNgrams(tokens, max_order));
    for (size_t n = 0; n < ref_max.size(); ++n) {
      for (const auto& [ngram, count] : ref_tables.back().counts[n]) {
        int64_t& slot = ref_max[n][ngram];
        slot = std::max(slot, count);
      }
    }
  }
  const std::u32string tokenized = BleuTokenized(hypothesis, options);
  const std::vector<std::u32string_view> tokens = PythonSplit(tokenized);
  const int64_t hyp_len = static_cast<int64_t>(tokens.size());
  stats->sys_len += hyp_len;
  stats->ref_len += ClosestRefLength(hyp_len, ref_lens);
  const NgramTable hyp = WordNgrams(tokens, max_order);
  for (size_t n = 0; n < hyp.counts.size(); ++n) {
    for (const auto& [ngram, count] : hyp.counts[n]) {
      stats->total[n] += count;
      const auto hit = ref_max[n].find(ngram);
      if (hit != ref_max[n].end()) stats->correct[n] += std::min(count, hit->second);
    }
  }
}

// sacreBLEU's BLEU.compute_bleu, step for step (the floating-point operations are in the same order).
BleuScore ComputeBleu(const BleuStats& stats, const BleuOptions& options, bool effective_order) {
  const size_t max_order = static_cast<size_t>(options.max_ngram_order);
  BleuScore result;
  result.counts = stats.correct;
  result.totals = stats.total;
  result.sys_len = stats.sys_len;
  result.ref_len = stats.ref_len;
  result.precisions.assign(max_order, 0.0);
  if (stats.sys_len < stats.ref_len) {
    result.bp = stats.sys_len > 0
                    ? std::exp(1.0 - static_cast<double>(stats.ref_len) / static_cast<double>(stats.sys_len))
                    : 0.0;
  } else {
    result.bp = 1.0;
  }
  // No match at any order: 0 without smoothing (sacreBLEU issue #141).
  if (std::all_of(stats.correct.begin(), stats.correct.end(), [](int64_t c) { return c == 0; })) {
    return result;
  }
  double smooth_value = 0.0;
  if (options.smoothing == BleuSmoothing::kFloor) smooth_value = options.smooth_value.value_or(0.1);
  if (options.smoothing == BleuSmoothing::kAddK) smooth_value = options.smooth_value.value_or(1.0);

  double smooth_mteval = 1.0;
  size_t eff_order = max_order;
  for (size_t n = 1; n <= max_order; ++n) {
    double correct = static_cast<double>(stats.correct[n - 1]);
    double total = static_cast<double>(stats.total[n - 1]);
    if (options.smoothing == BleuSmoothing::kAddK && n > 1) {
      correct += smooth_value;
      total += smooth_value;
    }
    if (total == 0.0) break;
    if (effective_order) eff_order = n;
    double& precision = result.precisions[n - 1];
    if (correct == 0.0) {
      if (options.smoothing == BleuSmoothing::kExp) {
        smooth_mteval *= 2.0;
        precision = 100.0 / (smooth_mteval * total);
      } else if (options.smoothing == BleuSmoothing::kFloor) {
        precision = 100.0 * smooth_value / total;
      }
    } else {
      precision = 100.0 * correct / total;
    }
  }
  // A plain left-to-right sum, as Python's sum() before 3.12; sacreBLEU's reference outputs are
  // bit-identical with it (3.12+ compensates the sum and can differ in the last bit).
  double log_sum = 0.0;
  for (size_t n = 0; n < eff_order; ++n) log_sum += SacrebleuLog(result.precisions[n]);
  result.score = result.bp * std::exp(log_sum / static_cast<double>(eff_order));
  return result;
}

void CheckBleuOptions(const BleuOptions& options) {
  if (options.max_ngram_order < 1) {
    Fail(ErrorCode::kInvalidArgument, "BLEU max_ngram_order must be >= 1, got ", options.max_ngram_order);
  }
}

// ------------------------------------------------------------------------------------------------
// chrF.

// string.punctuation, the set chrF++ splits off words.
bool IsAsciiPunctuation(char32_t c) {
  return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
         (c >= 0x7B && c <= 0x7E);
}

// sacreBLEU's CHRF._remove_punctuation: one punctuation character comes off the end of a word, or if
// not, off its start; '(hi)' gives '(hi' and ')'.
std::vector<std::u32string_view> ChrfWords(std::u32string_view text) {
  std::vector<std::u32string_view> words;
  for (std::u32string_view w : PythonSplit(text)) {
    if (w.size() == 1) {
      words.push_back(w);
    } else if (IsAsciiPunctuation(w.back())) {
      words.push_back(w.substr(0, w.size() - 1));
      words.push_back(w.substr(w.size() - 1));
    } else if (IsAsciiPunctuation(w.front())) {
      words.push_back(w.substr(0, 1));
      words.push_back(w.substr(1));
    } else {
      words.push_back(w);
    }
  }
  return words;
}

// Character n-grams (orders 1..char_order) and word n-grams (1..word_order) of one segment.
struct ChrfNgrams {
  NgramTable chars;
  NgramTable words;  // no orders for chrF
};

ChrfNgrams ExtractChrfNgrams(std::u32string_view text, const ChrfOptions& options) {
  ChrfNgrams ngrams;
  if (options.whitespace) {
    ngrams.chars = CharNgrams(text, options.char_order);
  } else {
    std::u32string without_space;
    for (std::u32string_view piece : PythonSplit(text)) without_space.append(piece);
    ngrams.chars = CharNgrams(without_space, options.char_order);
  }
  ngrams.words = WordNgrams(ChrfWords(text), options.word_order);
  return ngrams;
}

// sacreBLEU's CHRF._compute_f_score over [hyp, ref, match] triples.
double ChrfFScore(const std::vector<int64_t>& stats, const ChrfOptions& options) {
  constexpr double kEps = 1e-16;
  const size_t order = static_cast<size_t>(options.char_order + options.word_order);
  const double factor = static_cast<double>(options.beta) * options.beta;
  double score = 0.0;
  double avg_prec = 0.0;
  double avg_rec = 0.0;
  int effective_order = 0;
  for (size_t i = 0; i < order; ++i) {
    const int64_t n_hyp = stats[3 * i];
    const int64_t n_ref = stats[3 * i + 1];
    const double n_match = static_cast<double>(stats[3 * i + 2]);
    const double prec = n_hyp > 0 ? n_match / static_cast<double>(n_hyp) : kEps;
    const double rec = n_ref > 0 ? n_match / static_cast<double>(n_ref) : kEps;
    const double denom = factor * prec + rec;
    score += denom > 0 ? (1 + factor) * prec * rec / denom : kEps;
    if (n_hyp > 0 && n_ref > 0) {
      avg_prec += prec;
      avg_rec += rec;
      ++effective_order;
    }
  }
  if (options.eps_smoothing) return 100 * score / static_cast<double>(order);
  if (effective_order == 0) {
    avg_prec = 0.0;
    avg_rec = 0.0;
  } else {
    avg_prec /= effective_order;
    avg_rec /= effective_order;
  }
  if (avg_prec + avg_rec == 0.0) return 0.0;
  score = (1 + factor) * avg_prec * avg_rec;
  score /= (factor * avg_prec) + avg_rec;
  return 100 * score;
}

// [hyp, ref, match] per order against the reference with the best F score (first on ties).
std::vector<int64_t> ChrfSegmentStats(const std::u32string& hypothesis,
                                      const std::vector<std::u32string>& refs, const ChrfOptions& options) {
  const auto prepare = [&](const std::u32string& text) {
    return ExtractChrfNgrams(options.lowercase ? PythonLower(text) : text, options);
  };
  // Appends [hyp, ref, match] for every order of one kind of n-gram.
  const auto match = [](const NgramTable& hyp, const NgramTable& ref, std::vector<int64_t>* stats) {
    for (size_t i = 0; i < hyp.counts.size(); ++i) {
      int64_t matches = 0;
      for (const auto& [ngram, count] : hyp.counts[i]) {
        const auto hit = ref.counts[i].find(ngram);
        if (hit != ref.counts[i].end()) matches += std::min(count, hit->second);
      }
      // sacreBLEU counts no hypothesis n-grams for an order the reference lacks.
      stats->push_back(ref.counts[i].empty() ? 0 : TotalCount(hyp.counts[i]));
      stats->push_back(TotalCount(ref.counts[i]));
      stats->push_back(matches);
    }
  };
  const ChrfNgrams hyp = prepare(hypothesis);
  std::vector<int64_t> best_stats;
  double best_f = -1.0;
  for (const std::u32string& ref_text : refs) {
    const ChrfNgrams ref = prepare(ref_text);
    std::vector<int64_t> stats;
    match(hyp.chars, ref.chars, &stats);
    match(hyp.words, ref.words, &stats);
    const double f = ChrfFScore(stats, options);
    if (f > best_f) {
      best_f = f;
      best_stats = std::move(stats);
    }
  }
  return best_stats;
}

void CheckChrfOptions(const ChrfOptions& options) {
  if (options.char_order < 0 || options.word_order < 0 || options.char_order + options.word_order < 1 ||
      options.beta < 0) {
    Fail(ErrorCode::kInvalidArgument,
         "chrF needs char_order >= 0, word_order >= 0, at least one order and beta >= 0; got char_order ",
         options.char_order, ", word_order ", options.word_order, ", beta ", options.beta);
  }
}

}  // namespace

// --------------------------------------------------------------------------------------------------
// Public API.

std::optional<BleuTokenizer> ParseBleuTokenizer(std::string_view name) {
  for (BleuTokenizer t : {BleuTokenizer::k13a, BleuTokenizer::kZh, BleuTokenizer::kIntl, BleuTokenizer::kChar,
                          BleuTokenizer::kNone}) {
    if (BleuTokenizerName(t) == name) return t;
  }
  return std::nullopt;
}

std::optional<BleuSmoothing> ParseBleuSmoothing(std::string_view name) {
  if (name == "exp") return BleuSmoothing::kExp;
  if (name == "floor") return BleuSmoothing::kFloor;
  if (name == "add-k") return BleuSmoothing::kAddK;
  if (name == "none") return BleuSmoothing::kNone;
  return std::nullopt;
}

std::string_view BleuTokenizerName(BleuTokenizer tokenizer) {
  switch (tokenizer) {
    case BleuTokenizer::k13a:
      return "13a";
    case BleuTokenizer::kZh:
      return "zh";
    case BleuTokenizer::kIntl:
      return "intl";
    case BleuTokenizer::kChar:
      return "char";
    case BleuTokenizer::kNone:
      return "none";
  }
  return "?";
}

double BleuScore::Ratio() const {
  return ref_len != 0 ? static_cast<double>(sys_len) / static_cast<double>(ref_len) : 0.0;
}

std::string TokenizeForBleu(std::string_view text, BleuTokenizer tokenizer) {
  return EncodeText(Tokenize(DecodeText(text, "text"), tokenizer));
}

BleuScore CorpusBleu(const std::vector<std::string>& hypotheses,
                     const std::vector<std::vector<std::string>>& ref_streams, const BleuOptions& options) {
  CheckBleuOptions(options);
  CheckStreams(hypotheses.size(), ref_streams);
  BleuStats stats;
  stats.correct.assign(static_cast<size_t>(options.max_ngram_order), 0);
  stats.total.assign(static_cast<size_t>(options.max_ngram_order), 0);
  for (size_t i = 0; i < hypotheses.size(); ++i) {
    const std::vector<std::u32string> refs = SegmentReferences(ref_streams, i);
    const std::u32string hyp = DecodeText(hypotheses[i], StrCat("hypothesis ", i + 1));
    AddSegmentStats(hyp, refs, options, &stats);
  }
  return ComputeBleu(stats, options, options.effective_order.value_or(false));
}

BleuScore SentenceBleu(std::string_view hypothesis, const std::vector<std::string>& references,
                       const BleuOptions& options) {
  BleuOptions sentence_options = options;
  sentence_options.effective_order = options.effective_order.value_or(true);
  return CorpusBleu({std::string(hypothesis)}, SentenceStreams(references), sentence_options);
}

std::string FormatBleu(const BleuScore& score) {
  std::string precisions;
  for (double p : score.precisions) {
    if (!precisions.empty()) precisions += '/';
    precisions += FormatFixed(p, 1);
  }
  return "BLEU = " + FormatFixed(score.score, 2) + " " + precisions + " (BP = " + FormatFixed(score.bp, 3) +
         " ratio = " + FormatFixed(score.Ratio(), 3) + " hyp_len = " + std::to_string(score.sys_len) +
         " ref_len = " + std::to_string(score.ref_len) + ")";
}

ChrfOptions ChrfPlusPlusOptions() {
  ChrfOptions options;
  options.word_order = 2;
  return options;
}

std::string ChrfScore::Name() const {
  return "chrF" + std::to_string(beta) + std::string(static_cast<size_t>(word_order), '+');
}

ChrfScore CorpusChrf(const std::vector<std::string>& hypotheses,
                     const std::vector<std::vector<std::string>>& ref_streams, const ChrfOptions& options) {
  CheckChrfOptions(options);
  CheckStreams(hypotheses.size(), ref_streams);
  ChrfScore result;
  result.char_order = options.char_order;
  result.word_order = options.word_order;
  result.beta = options.beta;
  result.stats.assign(3 * static_cast<size_t>(options.char_order + options.word_order), 0);
  for (size_t i = 0; i < hypotheses.size(); ++i) {
    const std::vector<std::u32string> refs = SegmentReferences(ref_streams, i);
    const std::u32string hyp = DecodeText(hypotheses[i], StrCat("hypothesis ", i + 1));
    const std::vector<int64_t> stats = ChrfSegmentStats(hyp, refs, options);
    for (size_t k = 0; k < stats.size(); ++k) result.stats[k] += stats[k];
  }
  result.score = ChrfFScore(result.stats, options);
  return result;
}

ChrfScore SentenceChrf(std::string_view hypothesis, const std::vector<std::string>& references,
                       const ChrfOptions& options) {
  return CorpusChrf({std::string(hypothesis)}, SentenceStreams(references), options);
}

std::string FormatChrf(const ChrfScore& score) {
  return score.Name() + " = " + FormatFixed(score.score, 2);
}

std::string_view RstripPythonWhitespace(std::string_view text) {
  size_t keep = 0;  // byte length up to the end of the last non-whitespace code point
  for (size_t pos = 0; pos < text.size();) {
    if (!IsPythonSpace(DecodeUtf8(text, &pos))) keep = pos;
  }
  return text.substr(0, keep);
}

}  // namespace hymt
