// Translation-quality metrics that reproduce sacreBLEU 2.6.0: BLEU (corpus and sentence level, with
// its 13a, zh, intl, char and none tokenizers and its four smoothing methods) and chrF / chrF++.
//
// Agreement with sacreBLEU is the contract: for the same inputs and options every score below equals
// sacreBLEU's to 1e-9 (tests/unit/metrics_test.cc checks the committed vectors), including its quirks:
// Python's whitespace set for str.split()/strip(), Python's str.lower(), the `zh` tokenizer's character
// ranges exactly as implemented there, 13a's entity handling, and sacreBLEU's rules for several
// references. Text is UTF-8 and is processed as Unicode code points, as Python does.
//
// References are given as sacreBLEU takes them: a list of reference *streams*, each stream holding one
// reference per hypothesis (ref_streams[k][i] is the k-th reference of segment i). Like sacreBLEU, a
// reference that is the empty string is dropped for that segment (this is how a segment gets fewer
// references), and a segment left with no reference is an error.
//
// Errors that input can cause (invalid UTF-8, streams of different lengths, a segment with no
// reference, options out of range) throw MetricsInputError; nothing here aborts.

#ifndef HYMT_TRANSLATE_METRICS_H_
#define HYMT_TRANSLATE_METRICS_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace hymt {

// Thrown for anything the caller's input can cause; the message names what was expected and found.
class MetricsInputError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// ---------------------------------------------------------------------------------------------------
// BLEU

enum class BleuTokenizer {
  k13a,  // mteval-v13a: entities, punctuation split (sacreBLEU's default)
  kZh,   // every character in sacreBLEU's "Chinese" ranges becomes a token, then the 13a regexes
  kIntl, // mteval-v14 international: split Unicode punctuation (except between digits) and symbols
  kChar, // every non-whitespace code point is a token
  kNone, // split on whitespace only
};

enum class BleuSmoothing {
  kExp,    // NIST geometric sequence for zero counts (sacreBLEU's default)
  kFloor,  // zero counts get smooth_value (default 0.1)
  kAddK,   // orders >= 2 get smooth_value (default 1) added to counts and totals
  kNone,
};

// Returns the tokenizer/smoothing for sacreBLEU's name ("13a", "zh", "intl", "char", "none";
// "exp", "floor", "add-k", "none"), or nullopt for any other name.
std::optional<BleuTokenizer> ParseBleuTokenizer(std::string_view name);
std::optional<BleuSmoothing> ParseBleuSmoothing(std::string_view name);
std::string_view BleuTokenizerName(BleuTokenizer tokenizer);

struct BleuOptions {
  BleuTokenizer tokenizer = BleuTokenizer::k13a;
  BleuSmoothing smoothing = BleuSmoothing::kExp;
  // Value for kFloor / kAddK; unset means sacreBLEU's defaults (0.1 / 1). Ignored by the others.
  std::optional<double> smooth_value;
  bool lowercase = false;  // Python str.lower() before tokenizing
  // Stop at the highest n-gram order the hypothesis has. Unset means sacreBLEU's defaults: off for
  // CorpusBleu, on for SentenceBleu (sacrebleu.sentence_bleu's use_effective_order=True).
  std::optional<bool> effective_order;
  int max_ngram_order = 4;  // must be >= 1
};

// The components sacreBLEU's BLEUScore carries; every vector has max_ngram_order entries.
struct BleuScore {
  double score = 0.0;               // 0..100
  std::vector<int64_t> counts;      // matched n-grams per order (clipped by the references)
  std::vector<int64_t> totals;      // hypothesis n-grams per order
  std::vector<double> precisions;   // percent per order, after smoothing
  double bp = 0.0;                  // brevity penalty
  int64_t sys_len = 0;              // hypothesis tokens
  int64_t ref_len = 0;              // closest reference tokens, summed over segments
  // Note: with kAddK sacreBLEU also adds k to the counts/totals it returns for orders >= 2; here
  // counts/totals stay the raw integers and k shows only in precisions and the score.

  // sys_len / ref_len, or 0 when ref_len is 0 (as sacreBLEU prints it).
  double Ratio() const;
};

// sacreBLEU's tokenizer applied to one line, exactly as its __call__ returns it (no lowercasing and
// no rstrip; BLEU itself rstrips first). Throws MetricsInputError on invalid UTF-8.
std::string TokenizeForBleu(std::string_view text, BleuTokenizer tokenizer);

// BLEU over a corpus: hypotheses[i] against ref_streams[k][i] for every k. Requires every stream to
// have hypotheses.size() entries and at least one stream.
BleuScore CorpusBleu(const std::vector<std::string>& hypotheses,
                     const std::vector<std::vector<std::string>>& ref_streams,
                     const BleuOptions& options = {});

// BLEU of one hypothesis against its references (sacrebleu.sentence_bleu). Requires >= 1 reference.
BleuScore SentenceBleu(std::string_view hypothesis, const std::vector<std::string>& references,
                       const BleuOptions& options = {});

// "BLEU = 35.12 66.7/40.0/28.6/16.7 (BP = 1.000 ratio = 1.000 hyp_len = 6 ref_len = 6)", the line
// sacreBLEU prints in text mode without its signature.
std::string FormatBleu(const BleuScore& score);

// ---------------------------------------------------------------------------------------------------
// chrF and chrF++

struct ChrfOptions {
  int char_order = 6;        // character n-gram orders 1..char_order; must be >= 1
  int word_order = 0;        // word n-gram orders 1..word_order; 2 gives chrF++; must be >= 0
  int beta = 2;              // recall weight; must be >= 0
  bool lowercase = false;    // Python str.lower() first
  bool whitespace = false;   // keep whitespace in character n-grams (sacreBLEU's default removes it)
  // false: average precision and recall over the orders both sides have (sacreBLEU's default);
  // true: chrF++.py / Moses / NLTK epsilon smoothing, averaging per-order F scores.
  bool eps_smoothing = false;
};

// The options for chrF++ (word_order = 2), everything else as chrF.
ChrfOptions ChrfPlusPlusOptions();

struct ChrfScore {
  double score = 0.0;  // 0..100
  int char_order = 6;
  int word_order = 0;
  int beta = 2;
  // Per order (character orders first, then word orders): hypothesis n-grams, reference n-grams and
  // matches, summed over segments; 3 * (char_order + word_order) entries.
  std::vector<int64_t> stats;

  // "chrF2", or "chrF2++" for word_order 2: sacreBLEU's name ('+' once per word order).
  std::string Name() const;
};

// chrF over a corpus, same reference layout and requirements as CorpusBleu. For each segment the
// reference with the best chrF is used (the first one on ties), then statistics are summed.
ChrfScore CorpusChrf(const std::vector<std::string>& hypotheses,
                     const std::vector<std::vector<std::string>>& ref_streams,
                     const ChrfOptions& options = {});

// chrF of one hypothesis (sacrebleu.sentence_chrf). Requires >= 1 reference.
ChrfScore SentenceChrf(std::string_view hypothesis, const std::vector<std::string>& references,
                       const ChrfOptions& options = {});

// "chrF2 = 52.31" / "chrF2++ = 50.10".
std::string FormatChrf(const ChrfScore& score);

// ---------------------------------------------------------------------------------------------------
// Text helpers shared with the score command.

// Byte offset of the first byte that Python's strict UTF-8 decoder rejects (overlong forms, encoded
// surrogates, values above U+10FFFF, stray or missing continuation bytes), or nullopt if valid.
std::optional<size_t> FindInvalidUtf8(std::string_view text);

// `text` without trailing whitespace as Python's str.rstrip() defines it (sacreBLEU's command line
// strips every line this way). Requires valid UTF-8.
std::string_view RstripPythonWhitespace(std::string_view text);

}  // namespace hymt

#endif  // HYMT_TRANSLATE_METRICS_H_
