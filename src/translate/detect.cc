// Language identification: CLD2 with its full tables, mapped to hymt's codes, then checked against the
// text's script: pure-Han text is Chinese, never Japanese; Simplified vs Traditional is decided by the
// characters that exist in only one of them; Cantonese by the characters of written Cantonese; and
// script rules stand in when CLD2 has no answer.
#include <unicode/translit.h>
#include <unicode/uchar.h>
#include <unicode/uscript.h>

#include <cstdio>  // compact_lang_det.h uses FILE without including it
// clang-format off
#include <cld2/public/compact_lang_det.h>
#include <cld2/public/encodings.h>
// clang-format on

#include <algorithm>
#include <map>
#include <mutex>

#include "core/logging.h"
#include "core/status.h"
#include "core/utf8.h"
#include "translate/segmenter.h"

namespace hymt {
namespace {

// Detection reads at most this much of the text: a sample decides the language, the rest costs time.
constexpr size_t kMaxDetectBytes = 64 * 1024;

// Written Cantonese: characters of colloquial Cantonese that Standard Written Chinese (Mandarin) does
// not use. Text is Cantonese when these make up at least 1 in kCantoneseMaxHanPerMarker Han characters
// (colloquial Cantonese runs at 5-10%; one marker in a short sentence is enough). 係, 仲 and 咪 are
// left out, being common in Mandarin or Japanese words (關係), and so are 呢, 度, 嘞, 吓 and 嘈.
constexpr std::u32string_view kCantoneseMarkers =
    U"嘅咗唔佢喺冇啲嚟哋嘢嗰乜咁噉睇喎咩啱畀攞諗瞓冚揾搵嘥餸喐嗮噃囉";
constexpr int kCantoneseMaxHanPerMarker = 40;

// CLD2's codes (CLD2::LanguageCode) for hymt's languages. CLD2 says "iw" for Hebrew and reports
// Traditional Chinese as "zh-Hant"; it has no Cantonese.
const std::map<std::string, std::string>& Cld2ToHymt() {
  static const std::map<std::string, std::string> kMap = {
      {"zh", "zh"}, {"zh-Hant", "zh-Hant"}, {"en", "en"}, {"fr", "fr"}, {"pt", "pt"}, {"es", "es"},
      {"ja", "ja"}, {"tr", "tr"},           {"ru", "ru"}, {"ar", "ar"}, {"ko", "ko"}, {"th", "th"},
      {"it", "it"}, {"de", "de"},           {"vi", "vi"}, {"ms", "ms"}, {"id", "id"}, {"tl", "tl"},
      {"hi", "hi"}, {"pl", "pl"},           {"cs", "cs"}, {"nl", "nl"}, {"km", "km"}, {"my", "my"},
      {"fa", "fa"}, {"gu", "gu"},           {"ur", "ur"}, {"te", "te"}, {"mr", "mr"}, {"iw", "he"},
      {"bn", "bn"}, {"ta", "ta"},           {"uk", "uk"}, {"bo", "bo"}, {"kk", "kk"}, {"mn", "mn"},
      {"ug", "ug"},
  };
  return kMap;
}

// Languages CLD2 names that hymt does not serve but that CLD2 gives to text in a close language of
// hymt's (Spanish read as Galician, Dutch as Afrikaans, Filipino as Cebuano, Kazakh as Kyrgyz ...).
const std::map<std::string, std::vector<std::string>>& Cld2Related() {
  static const std::map<std::string, std::vector<std::string>> kMap = {
      {"gl", {"es", "pt"}}, {"ca", {"es", "fr"}}, {"oc", {"fr", "es"}}, {"af", {"nl"}},
      {"fy", {"nl"}},       {"lb", {"de"}},       {"rm", {"it"}},       {"co", {"it"}},
      {"ie", {"it", "es"}}, {"ia", {"it", "es"}}, {"la", {"it", "es"}}, {"ceb", {"tl"}},
      {"war", {"tl"}},      {"ilo", {"tl"}},      {"jw", {"id", "ms"}}, {"su", {"id", "ms"}},
      {"sk", {"cs"}},       {"ky", {"kk", "ru"}}, {"tt", {"ru", "kk"}}, {"ba", {"ru", "kk"}},
      {"be", {"ru", "uk"}}, {"bg", {"ru", "uk"}}, {"sr", {"ru", "uk"}}, {"mk", {"ru", "uk"}},
      {"dz", {"bo"}},       {"ne", {"hi", "mr"}}, {"sa", {"hi", "mr"}}, {"bh", {"hi"}},
      {"as", {"bn"}},       {"ps", {"fa", "ur"}}, {"ku", {"fa", "ar"}}, {"sd", {"ur", "ar"}},
      {"ks", {"ur"}},       {"yi", {"he"}},
  };
  return kMap;
}

bool IsChinese(const std::string& code) {
  return code == "zh" || code == "zh-Hant" || code == "yue";
}

// Languages so close that, when the caller rules one out, the other is the best remaining answer.
std::vector<std::string> Neighbours(const std::string& code) {
  if (IsChinese(code)) return {"zh", "zh-Hant", "yue"};
  if (code == "ms") return {"id"};
  if (code == "id") return {"ms"};
  return {};
}

// Which Han characters exist in only one of the two standards, from ICU's Hans-Hant and Hant-Hans
// transliterators (built once, ~70 ms): a character that Hant-Hans changes is Traditional-only, one
// that Hans-Hant changes is Simplified-only.
class HanVariants {
 public:
  enum Kind : uint8_t { kShared = 0, kTraditional = 1, kSimplified = 2 };

  static const HanVariants& Get() {
    static const HanVariants kTable;
    return kTable;
  }

  Kind Classify(char32_t c) const {
    size_t base = 0;
    for (const auto& r : kRanges) {
      if (c >= r.first && c <= r.last)
        return base + (c - r.first) < kind_.size() ? kind_[base + (c - r.first)] : kShared;
      base += r.last - r.first + 1;
    }
    return kShared;
  }

 private:
  struct Range {
    char32_t first, last;
  };
  // CJK Unified Ideographs with Extension A, and the compatibility block: every character the two
  // standards differ in.
  static constexpr Range kRanges[] = {{0x3400, 0x9FFF}, {0xF900, 0xFAFF}};

  HanVariants() {
    icu::UnicodeString all;
    std::vector<char32_t> chars;
    for (const auto& r : kRanges) {
      for (char32_t c = r.first; c <= r.last; ++c) {
        chars.push_back(c);
        all.append(static_cast<UChar32>(c));
        all.append(static_cast<UChar>('\n'));  // one character per line: no multi-character rules apply
      }
    }
    kind_.assign(chars.size(), kShared);
    UErrorCode status = U_ZERO_ERROR;
    std::unique_ptr<icu::Transliterator> to_simplified(
        icu::Transliterator::createInstance("Hant-Hans", UTRANS_FORWARD, status));
    std::unique_ptr<icu::Transliterator> to_traditional(
        icu::Transliterator::createInstance("Hans-Hant", UTRANS_FORWARD, status));
    if (U_FAILURE(status) || !to_simplified || !to_traditional) {
      HYMT_LOG_WARN("ICU has no Hans-Hant transliterator (", u_errorName(status),
                    "); Simplified vs Traditional Chinese is left to CLD2");
      return;
    }
    icu::UnicodeString simplified = all, traditional = all;
    to_simplified->transliterate(simplified);
    to_traditional->transliterate(traditional);
    std::vector<icu::UnicodeString> s_lines = Lines(simplified), t_lines = Lines(traditional);
    if (s_lines.size() != chars.size() || t_lines.size() != chars.size()) return;
    for (size_t i = 0; i < chars.size(); ++i) {
      icu::UnicodeString c;
      c.append(static_cast<UChar32>(chars[i]));
      bool traditional_only = s_lines[i] != c, simplified_only = t_lines[i] != c;
      if (traditional_only && !simplified_only) kind_[i] = kTraditional;
      if (simplified_only && !traditional_only) kind_[i] = kSimplified;
    }
  }

  static std::vector<icu::UnicodeString> Lines(const icu::UnicodeString& u) {
    std::vector<icu::UnicodeString> out;
    int32_t start = 0;
    for (int32_t i = 0; i < u.length(); ++i) {
      if (u[i] == '\n') {
        out.push_back(u.tempSubString(start, i - start));
        start = i + 1;
      }
    }
    return out;
  }

  std::vector<Kind> kind_;
};

// Letters per script and the Chinese-specific counts, in one pass.
struct TextStats {
  int letters = 0;
  std::map<UScriptCode, int> scripts;
  int kana = 0;
  int han = 0;
  int traditional = 0;         // Han characters that exist only in Traditional
  int simplified = 0;          // ... only in Simplified
  int cantonese = 0;           // markers of written Cantonese
  std::u32string distinctive;  // letters that single out one language of a script (see ScriptGuess)
};

bool IsDistinctive(char32_t c) {
  static constexpr std::u32string_view kLetters =
      U"ېۆۇۈۋە"          // Uyghur
      U"ےٹڈڑںہھ"         // Urdu
      U"پچژگکی"          // Persian (also Urdu and Uyghur)
      U"әғқңұһ"          // Kazakh
      U"өү"              // Mongolian (also Kazakh)
      U"іїєґ"            // Ukrainian (і also Kazakh)
      U"ळ"               // Marathi (rare in Hindi)
      U"ơưđăĐƠƯĂ"        // Vietnamese
      U"ğşıĞŞİ"          // Turkish
      U"łąęśźżńŁĄĘŚŹŻŃ"  // Polish
      U"řěůŘĚŮ";         // Czech
  return kLetters.find(c) != std::u32string_view::npos;
}

TextStats Measure(std::string_view text) {
  TextStats st;
  const HanVariants* variants = nullptr;
  for (size_t pos = 0; pos < text.size();) {
    char32_t c = DecodeUtf8(text, &pos);
    if (c == 0xFFFD || !u_isalpha(static_cast<UChar32>(c))) continue;
    ++st.letters;
    UErrorCode status = U_ZERO_ERROR;
    UScriptCode script = uscript_getScript(static_cast<UChar32>(c), &status);
    if (script == USCRIPT_HIRAGANA || script == USCRIPT_KATAKANA) ++st.kana;
    if (script == USCRIPT_HAN) {
      ++st.han;
      if (!variants) variants = &HanVariants::Get();
      auto kind = variants->Classify(c);
      st.traditional += kind == HanVariants::kTraditional;
      st.simplified += kind == HanVariants::kSimplified;
      st.cantonese += kCantoneseMarkers.find(c) != std::u32string_view::npos;
    }
    ++st.scripts[script];
    if (IsDistinctive(c) && st.distinctive.size() < 64) st.distinctive.push_back(c);
  }
  return st;
}

bool Has(const TextStats& st, std::u32string_view letters) {
  return st.distinctive.find_first_of(letters) != std::u32string::npos;
}

std::string ChineseVariant(const TextStats& st, const std::string& cld2_guess) {
  if (st.cantonese > 0 && st.cantonese * kCantoneseMaxHanPerMarker >= st.han) return "yue";
  if (st.traditional > 2 * st.simplified) return "zh-Hant";
  if (st.simplified > 2 * st.traditional) return "zh";
  return cld2_guess == "zh-Hant" ? "zh-Hant" : "zh";
}

struct Guess {
  std::string code;
  double confidence;
};

// Languages from the dominant script alone (when CLD2 has no usable answer), most likely first. A script
// that only one of hymt's languages writes is strong evidence; a shared one (Latin, Cyrillic, Arabic,
// Devanagari) is weak unless a distinctive letter decides it.
std::vector<Guess> ScriptGuess(const TextStats& st) {
  UScriptCode top = USCRIPT_COMMON;
  int top_count = 0;
  for (const auto& [script, count] : st.scripts) {
    if (count > top_count) {
      top = script;
      top_count = count;
    }
  }
  if (top_count == 0) return {};
  double share = static_cast<double>(top_count) / st.letters;
  const double strong = 0.9 * share, weak = 0.3 * share;
  if (st.kana > 0 && (top == USCRIPT_HAN || top == USCRIPT_HIRAGANA || top == USCRIPT_KATAKANA))
    return {{"ja", strong}};
  switch (top) {
    case USCRIPT_HAN:
      return {{ChineseVariant(st, ""), strong}};
    case USCRIPT_HANGUL:
      return {{"ko", strong}};
    case USCRIPT_THAI:
      return {{"th", strong}};
    case USCRIPT_TIBETAN:
      return {{"bo", strong}};
    case USCRIPT_KHMER:
      return {{"km", strong}};
    case USCRIPT_MYANMAR:
      return {{"my", strong}};
    case USCRIPT_GUJARATI:
      return {{"gu", strong}};
    case USCRIPT_TELUGU:
      return {{"te", strong}};
    case USCRIPT_TAMIL:
      return {{"ta", strong}};
    case USCRIPT_BENGALI:
      return {{"bn", strong}};
    case USCRIPT_HEBREW:
      return {{"he", strong}};
    case USCRIPT_DEVANAGARI:
      return Has(st, U"ळ") ? std::vector<Guess>{{"mr", weak}, {"hi", weak / 2}}
                           : std::vector<Guess>{{"hi", weak}, {"mr", weak / 2}};
    case USCRIPT_ARABIC:
      if (Has(st, U"ېۆۇۈۋە")) return {{"ug", strong}, {"fa", weak}, {"ur", weak}, {"ar", weak}};
      if (Has(st, U"ےٹڈڑںہھ")) return {{"ur", strong}, {"fa", weak}, {"ar", weak}, {"ug", weak}};
      if (Has(st, U"پچژگکی")) return {{"fa", weak}, {"ur", weak / 2}, {"ar", weak / 2}, {"ug", weak / 2}};
      return {{"ar", weak}, {"fa", weak / 2}, {"ur", weak / 2}, {"ug", weak / 2}};
    case USCRIPT_CYRILLIC:
      if (Has(st, U"әғқңұһ")) return {{"kk", strong}, {"mn", weak}, {"ru", weak}, {"uk", weak}};
      if (Has(st, U"өү")) return {{"mn", strong}, {"kk", weak}, {"ru", weak}, {"uk", weak}};
      if (Has(st, U"іїєґ")) return {{"uk", strong}, {"ru", weak}, {"kk", weak}, {"mn", weak}};
      return {{"ru", weak}, {"uk", weak / 2}, {"kk", weak / 2}, {"mn", weak / 2}};
    case USCRIPT_LATIN: {
      std::vector<Guess> out;
      if (Has(st, U"ơưđăĐƠƯĂ")) out.push_back({"vi", weak});
      if (Has(st, U"ğşıĞŞİ")) out.push_back({"tr", weak});
      if (Has(st, U"łąęśźżńŁĄĘŚŹŻŃ")) out.push_back({"pl", weak});
      if (Has(st, U"řěůŘĚŮ")) out.push_back({"cs", weak});
      for (const char* code :
           {"en", "fr", "es", "pt", "de", "it", "nl", "id", "ms", "tl", "tr", "vi", "pl", "cs"})
        out.push_back({code, weak / 4});
      return out;
    }
    default:
      return {};
  }
}

// Frequent function words of the Latin-script languages. CLD2 falls back to "English" for Latin text it
// cannot place (best effort), and now and then calls plain Italian or Dutch English: an English (or
// missing) answer for a text that holds none of the English function words but several of another
// language's goes to that other language. Other answers stand: CLD2 rarely errs there, while names
// and loanwords make word counts noisy. Malay and Indonesian share their function words (CLD2 alone
// tells them apart; lists of their differences such as karena / kerana did not do better on FLORES).
const std::vector<std::pair<std::string, std::vector<std::string_view>>>& FunctionWords() {
  static const std::vector<std::pair<std::string, std::vector<std::string_view>>> kWords = {
      {"en", {"the", "of", "and",  "to", "is",   "that", "for",  "it",  "with",  "was",  "on",
              "are", "by", "this", "be", "from", "at",   "have", "has", "which", "were", "an"}},
      {"fr", {"le",  "la",  "les", "et",   "des", "est", "une",  "un",  "du", "que", "dans", "pour",
              "qui", "sur", "au",  "avec", "pas", "ne",  "sont", "par", "ce", "aux", "été",  "il"}},
      {"es", {"el", "la", "los", "las",  "del", "que",  "en",  "por", "con", "una", "para", "es",
              "se", "al", "lo",  "como", "más", "pero", "sus", "fue", "ha",  "ser", "y"}},
      {"pt", {"o",   "os",  "as",  "do", "da", "dos",  "das",  "que",  "em",  "um",     "uma", "para", "com",
              "não", "por", "foi", "ao", "se", "mais", "pelo", "pela", "são", "também", "é",   "e"}},
      {"it", {"il",    "lo",  "la",    "gli", "le",  "di",   "che", "è",    "per",   "una", "un",  "del",
              "della", "dei", "delle", "con", "non", "sono", "nel", "alla", "anche", "ha",  "più", "e"}},
      {"de", {"der",  "die", "das", "und",  "ist", "nicht", "mit", "den",  "dem",   "des", "ein",
              "eine", "auf", "für", "sich", "von", "zu",    "im",  "auch", "wurde", "sind"}},
      {"nl", {"de",   "het",  "een",  "van", "en",  "is", "dat", "op",   "te",   "met", "voor",
              "niet", "zijn", "door", "aan", "ook", "er", "bij", "werd", "naar", "om"}},
      {"id",
       {"yang", "dan", "di", "ke", "dari", "ini", "itu", "dengan", "untuk", "tidak", "dalam", "akan", "pada",
        "juga", "oleh", "adalah", "telah", "ada"}},
      {"ms",
       {"yang", "dan", "di", "ke", "dari", "ini", "itu", "dengan", "untuk", "tidak", "dalam", "akan", "pada",
        "juga", "oleh", "adalah", "telah", "ada"}},
      {"tl",
       {"ang", "ng", "sa", "na", "mga", "at", "ay", "si", "ni", "para", "hindi", "ito", "kung", "siya",
        "niya", "kanyang", "noong"}},
      {"tr",
       {"ve", "bir", "bu", "da", "de", "için", "ile", "olarak", "çok", "daha", "olan", "gibi", "sonra",
        "kadar", "ancak"}},
      {"pl",
       {"i", "w", "na", "z", "się", "nie", "do", "to", "że", "jest", "jak", "od", "przez", "po", "dla",
        "oraz", "są", "był"}},
      {"cs", {"a", "v", "se",   "na", "je",  "že", "s",    "z",   "do", "to",
              "o", "k", "jako", "by", "pro", "od", "jsou", "byl", "ve", "ze"}},
      {"vi",
       {"của", "và", "là", "các", "những", "được", "trong", "cho", "không", "có", "một", "người", "này",
        "với", "đã", "ở", "từ", "khi"}},
  };
  return kWords;
}

// Lower-cased words (runs of letters) of `text`.
std::vector<std::string> Words(std::string_view text) {
  std::vector<std::string> out;
  std::string word;
  for (size_t pos = 0; pos <= text.size();) {
    char32_t c = pos < text.size() ? DecodeUtf8(text, &pos) : (++pos, U' ');
    if (c != 0xFFFD && u_isalpha(static_cast<UChar32>(c))) {
      AppendUtf8(static_cast<char32_t>(u_tolower(static_cast<UChar32>(c))), &word);
    } else if (!word.empty()) {
      out.push_back(std::move(word));
      word.clear();
    }
  }
  return out;
}

// How many of `words` each language lists.
template <typename Lists>
std::map<std::string, int> CountHits(const std::vector<std::string>& words, const Lists& lists) {
  std::map<std::string, int> hits;
  for (const auto& [code, list] : lists) {
    int n = 0;
    for (const auto& w : words) n += std::find(list.begin(), list.end(), w) != list.end();
    hits[code] = n;
  }
  return hits;
}

// Puts the language with the most function words first when CLD2's answer is English or missing and the
// text holds no English function words (see FunctionWords).
void CheckLatinWords(std::string_view sample, std::vector<Guess>* ranked) {
  std::vector<std::string> words = Words(sample);
  std::map<std::string, int> hits = CountHits(words, FunctionWords());
  std::string top = ranked->empty() ? "" : ranked->front().code;
  if (top.empty() || (top == "en" && hits["en"] == 0)) {
    std::string best;
    int best_hits = 0;
    for (const auto& [code, list] : FunctionWords()) {
      if (hits[code] > best_hits) {
        best = code;
        best_hits = hits[code];
      }
    }
    if (best_hits >= (top.empty() ? 1 : 2)) {
      double confidence = std::min(0.5, 0.1 * best_hits);
      std::erase_if(*ranked, [&](const Guess& g) { return g.code == best; });
      ranked->insert(ranked->begin(), Guess{best, confidence});
    }
  }
}

// Copies at most kMaxDetectBytes of `text`, turning what CLD2 refuses (invalid UTF-8, control
// characters, noncharacters) into spaces.
std::string Sanitize(std::string_view text) {
  text = text.substr(0, kMaxDetectBytes);
  std::string out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    int len = ValidUtf8SequenceLength(text, pos);
    if (len == 0) {
      out.push_back(' ');
      ++pos;
      continue;
    }
    size_t at = pos;
    char32_t c = DecodeUtf8(text, &pos);
    bool control = (c < 0x20 && c != '\t' && c != '\n' && c != '\r') || (c >= 0x7F && c < 0xA0);
    bool nonchar = (c >= 0xFDD0 && c <= 0xFDEF) || (c & 0xFFFE) == 0xFFFE;
    if (control || nonchar) {
      out.push_back(' ');
    } else {
      out.append(text.substr(at, pos - at));
    }
  }
  return out;
}

class Cld2Detector : public LanguageDetector {
 public:
  Cld2Detector() { CheckFullTables(); }

  std::optional<Detection> Detect(std::string_view text,
                                  const std::vector<std::string>& candidates) const override {
    std::vector<std::string> allowed;
    for (const auto& c : candidates) {
      if (auto lang = FindLanguage(c)) allowed.push_back(lang->code);
    }
    if (!candidates.empty() && allowed.empty()) return std::nullopt;
    auto ok = [&](const std::string& code) {
      return allowed.empty() || std::find(allowed.begin(), allowed.end(), code) != allowed.end();
    };

    std::string sample = Sanitize(text);
    TextStats st = Measure(sample);
    if (st.letters == 0) return std::nullopt;

    // Most likely first: CLD2's answers (checked by function words for Latin script), then, when the
    // caller ruled those out, their close neighbours (zh / zh-Hant / yue, ms / id), then what the
    // script alone suggests.
    std::vector<Guess> ranked = Cld2Guesses(sample, st);
    if (st.scripts[USCRIPT_LATIN] * 2 > st.letters) CheckLatinWords(sample, &ranked);
    for (const auto& g : ranked) {
      if (ok(g.code)) return Detection{g.code, g.confidence};
    }
    for (const auto& g : ranked) {
      for (const auto& n : Neighbours(g.code)) {
        if (ok(n)) return Detection{n, g.confidence / 2};
      }
    }
    for (const auto& g : ScriptGuess(st)) {
      if (ok(g.code)) return Detection{g.code, g.confidence};
    }
    return std::nullopt;
  }

 private:
  // CLD2's top three, mapped to hymt codes; confidence = share of the text, halved when CLD2 does not
  // call its answer reliable. When CLD2 has no answer, it is asked again for its best effort, which
  // counts as unreliable. Chinese answers are re-decided from the characters.
  static std::vector<Guess> Cld2Guesses(const std::string& sample, const TextStats& st) {
    CLD2::Language language3[3];
    int percent3[3];
    double scores3[3];
    int text_bytes = 0, valid_prefix = 0;
    bool reliable = false;
    CLD2::CLDHints hints = {nullptr, nullptr, CLD2::UNKNOWN_ENCODING, CLD2::UNKNOWN_LANGUAGE};
    for (int flags : {0, CLD2::kCLDFlagBestEffort}) {
      CLD2::ExtDetectLanguageSummaryCheckUTF8(sample.data(), static_cast<int>(sample.size()), true, &hints,
                                              flags, language3, percent3, scores3, nullptr, &text_bytes,
                                              &reliable, &valid_prefix);
      if (language3[0] != CLD2::UNKNOWN_LANGUAGE) break;
    }
    std::vector<Guess> out;
    for (int i = 0; i < 3; ++i) {
      if (language3[i] == CLD2::UNKNOWN_LANGUAGE || percent3[i] <= 0) continue;
      double confidence = percent3[i] / 100.0 * (reliable ? 1.0 : 0.5);
      auto add = [&](std::string code, double c) {
        // Japanese is never written without kana; CLD2 sometimes calls short Chinese lines Japanese.
        if (code == "ja" && st.kana == 0 && st.han > 0) code = "zh";
        if (IsChinese(code)) code = ChineseVariant(st, code);
        if (std::none_of(out.begin(), out.end(), [&](const Guess& g) { return g.code == code; }))
          out.push_back({code, c});
      };
      std::string cld2_code = CLD2::LanguageCode(language3[i]);
      if (auto it = Cld2ToHymt().find(cld2_code); it != Cld2ToHymt().end()) {
        add(it->second, confidence);
      } else if (auto rel = Cld2Related().find(cld2_code); rel != Cld2Related().end()) {
        for (const auto& code : rel->second) add(code, confidence / 2);
      }
    }
    std::stable_sort(out.begin(), out.end(),
                     [](const Guess& a, const Guess& b) { return a.confidence > b.confidence; });
    return out;
  }

  // Without the full tables (libcld2_full linked ahead of libcld2) CLD2 knows no Tibetan, Uyghur or
  // Mongolian; the script rules still name them, with less accuracy, so this warns instead of failing.
  static void CheckFullTables() {
    static std::once_flag once;
    std::call_once(once, [] {
      static constexpr std::string_view kTibetan = "ཁོང་ཚོ་ནི་སློབ་གྲྭ་ལ་འགྲོ་གི་ཡོད། ང་ཡང་སློབ་གྲྭ་ལ་འགྲོ་གི་ཡིན།";
      bool reliable = false;
      CLD2::Language lang =
          CLD2::DetectLanguage(kTibetan.data(), static_cast<int>(kTibetan.size()), true, &reliable);
      if (lang != CLD2::TIBETAN)
        HYMT_LOG_WARN("CLD2 runs without its full tables (libcld2_full): Tibetan, Uyghur and Mongolian are ",
                      "detected by script only");
    });
  }
};

}  // namespace

std::unique_ptr<LanguageDetector> CreateLanguageDetector() {
  return std::make_unique<Cld2Detector>();
}

}  // namespace hymt
