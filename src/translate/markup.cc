// Splitting HTML, Markdown and SRT into markup and translatable text. Every scanner moves forward only
// and every search starts where the previous one stopped, so the work is linear in the input even for
// hostile documents (unclosed comments, thousands of "<", unmatched brackets).
#include "translate/markup.h"

#include <unicode/uchar.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <unordered_map>

#include "core/status.h"
#include "core/utf8.h"

namespace hymt {
namespace {

constexpr size_t npos = std::string_view::npos;

bool IsAsciiSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
bool IsAsciiAlpha(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}
bool IsAsciiDigit(char c) {
  return c >= '0' && c <= '9';
}
bool IsAsciiAlnum(char c) {
  return IsAsciiAlpha(c) || IsAsciiDigit(c);
}
bool IsAsciiPunct(char c) {
  return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
         (c >= 0x7B && c <= 0x7E);
}
char Lower(char c) {
  return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
}

std::string LowerAscii(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = Lower(c);
  return out;
}

bool StartsWithNoCase(std::string_view s, size_t pos, std::string_view prefix) {
  if (s.size() - std::min(pos, s.size()) < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i) {
    if (Lower(s[pos + i]) != prefix[i]) return false;
  }
  return true;
}

bool HasLetter(std::string_view s) {
  for (size_t pos = 0; pos < s.size();) {
    char32_t c = DecodeUtf8(s, &pos);
    if (c != 0xFFFD && u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_ALPHABETIC)) return true;
  }
  return false;
}

// Runs of ASCII whitespace become one space; leading and trailing whitespace goes.
std::string CollapseSpaces(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  bool pending_space = false;
  for (char c : s) {
    if (IsAsciiSpace(c)) {
      pending_space = !out.empty();
    } else {
      if (pending_space) out.push_back(' ');
      pending_space = false;
      out.push_back(c);
    }
  }
  return out;
}

// ---- HTML character references ------------------------------------------------------------------

// The HTML 4 named references (HTML 5's values where they differ: lang, rang).
const std::unordered_map<std::string, char32_t>& NamedEntities() {
  static const std::unordered_map<std::string, char32_t> kTable = [] {
    std::unordered_map<std::string, char32_t> t = {
        {"quot", 34},      {"amp", 38},      {"apos", 39},     {"lt", 60},       {"gt", 62},
        {"OElig", 338},    {"oelig", 339},   {"Scaron", 352},  {"scaron", 353},  {"Yuml", 376},
        {"fnof", 402},     {"circ", 710},    {"tilde", 732},   {"ensp", 8194},   {"emsp", 8195},
        {"thinsp", 8201},  {"zwnj", 8204},   {"zwj", 8205},    {"lrm", 8206},    {"rlm", 8207},
        {"ndash", 8211},   {"mdash", 8212},  {"lsquo", 8216},  {"rsquo", 8217},  {"sbquo", 8218},
        {"ldquo", 8220},   {"rdquo", 8221},  {"bdquo", 8222},  {"dagger", 8224}, {"Dagger", 8225},
        {"bull", 8226},    {"hellip", 8230}, {"permil", 8240}, {"prime", 8242},  {"Prime", 8243},
        {"lsaquo", 8249},  {"rsaquo", 8250}, {"oline", 8254},  {"frasl", 8260},  {"euro", 8364},
        {"image", 8465},   {"weierp", 8472}, {"real", 8476},   {"trade", 8482},  {"alefsym", 8501},
        {"larr", 8592},    {"uarr", 8593},   {"rarr", 8594},   {"darr", 8595},   {"harr", 8596},
        {"crarr", 8629},   {"lArr", 8656},   {"uArr", 8657},   {"rArr", 8658},   {"dArr", 8659},
        {"hArr", 8660},    {"forall", 8704}, {"part", 8706},   {"exist", 8707},  {"empty", 8709},
        {"nabla", 8711},   {"isin", 8712},   {"notin", 8713},  {"ni", 8715},     {"prod", 8719},
        {"sum", 8721},     {"minus", 8722},  {"lowast", 8727}, {"radic", 8730},  {"prop", 8733},
        {"infin", 8734},   {"ang", 8736},    {"and", 8743},    {"or", 8744},     {"cap", 8745},
        {"cup", 8746},     {"int", 8747},    {"there4", 8756}, {"sim", 8764},    {"cong", 8773},
        {"asymp", 8776},   {"ne", 8800},     {"equiv", 8801},  {"le", 8804},     {"ge", 8805},
        {"sub", 8834},     {"sup", 8835},    {"nsub", 8836},   {"sube", 8838},   {"supe", 8839},
        {"oplus", 8853},   {"otimes", 8855}, {"perp", 8869},   {"sdot", 8901},   {"lceil", 8968},
        {"rceil", 8969},   {"lfloor", 8970}, {"rfloor", 8971}, {"lang", 10216},  {"rang", 10217},
        {"loz", 9674},     {"spades", 9824}, {"clubs", 9827},  {"hearts", 9829}, {"diams", 9830},
        {"thetasym", 977}, {"upsih", 978},   {"piv", 982},
    };
    // Latin-1, U+00A0..U+00FF, in code point order.
    static constexpr std::array<std::string_view, 96> kLatin1 = {
        "nbsp",   "iexcl",  "cent",   "pound",  "curren", "yen",    "brvbar", "sect",   "uml",    "copy",
        "ordf",   "laquo",  "not",    "shy",    "reg",    "macr",   "deg",    "plusmn", "sup2",   "sup3",
        "acute",  "micro",  "para",   "middot", "cedil",  "sup1",   "ordm",   "raquo",  "frac14", "frac12",
        "frac34", "iquest", "Agrave", "Aacute", "Acirc",  "Atilde", "Auml",   "Aring",  "AElig",  "Ccedil",
        "Egrave", "Eacute", "Ecirc",  "Euml",   "Igrave", "Iacute", "Icirc",  "Iuml",   "ETH",    "Ntilde",
        "Ograve", "Oacute", "Ocirc",  "Otilde", "Ouml",   "times",  "Oslash", "Ugrave", "Uacute", "Ucirc",
        "Uuml",   "Yacute", "THORN",  "szlig",  "agrave", "aacute", "acirc",  "atilde", "auml",   "aring",
        "aelig",  "ccedil", "egrave", "eacute", "ecirc",  "euml",   "igrave", "iacute", "icirc",  "iuml",
        "eth",    "ntilde", "ograve", "oacute", "ocirc",  "otilde", "ouml",   "divide", "oslash", "ugrave",
        "uacute", "ucirc",  "uuml",   "yacute", "thorn",  "yuml"};
    for (size_t i = 0; i < kLatin1.size(); ++i) t[std::string(kLatin1[i])] = static_cast<char32_t>(0xA0 + i);
    // Greek: capitals U+0391..U+03A9 (U+03A2 unassigned), small U+03B1..U+03C9.
    static constexpr std::array<std::string_view, 25> kGreek = {
        "alpha", "beta",   "gamma",   "delta", "epsilon", "zeta",    "eta",  "theta", "iota",
        "kappa", "lambda", "mu",      "nu",    "xi",      "omicron", "pi",   "rho",   "sigmaf",
        "sigma", "tau",    "upsilon", "phi",   "chi",     "psi",     "omega"};
    for (size_t i = 0; i < kGreek.size(); ++i) {
      std::string name(kGreek[i]);
      t[name] = static_cast<char32_t>(0x3B1 + i);
      if (name == "sigmaf") continue;  // no capital final sigma
      name[0] = static_cast<char>(name[0] - 'a' + 'A');
      t[name] = static_cast<char32_t>(0x391 + i);
    }
    return t;
  }();
  return kTable;
}

// Named references a browser also reads without the closing ';' (the common legacy ones).
bool IsLegacyName(std::string_view name) {
  return name == "amp" || name == "lt" || name == "gt" || name == "quot" || name == "nbsp" ||
         name == "copy" || name == "reg";
}

// Length of the reference name at s[pos] (after '&'): letters then letters or digits.
size_t NameLength(std::string_view s, size_t pos) {
  size_t end = pos;
  if (end < s.size() && IsAsciiAlpha(s[end])) {
    while (end < s.size() && IsAsciiAlnum(s[end]) && end - pos < 32) ++end;
  }
  return end - pos;
}

// Decodes the reference starting at s[amp] == '&': appends the character and returns the length used,
// or returns 0 when there is none to decode. HTML reads numeric and a few legacy named references
// without their ';', CommonMark (strict) none.
size_t DecodeReference(std::string_view s, size_t amp, std::string* out, bool strict = false) {
  size_t pos = amp + 1;
  if (pos < s.size() && s[pos] == '#') {
    ++pos;
    bool hex = pos < s.size() && (s[pos] == 'x' || s[pos] == 'X');
    if (hex) ++pos;
    size_t digits_start = pos;
    uint32_t value = 0;
    while (pos < s.size() &&
           (hex ? std::isxdigit(static_cast<unsigned char>(s[pos])) : IsAsciiDigit(s[pos]))) {
      char c = Lower(s[pos]);
      uint32_t d = IsAsciiDigit(c) ? c - '0' : c - 'a' + 10;
      value = std::min<uint32_t>(value * (hex ? 16 : 10) + d, 0x110000);
      ++pos;
    }
    if (pos == digits_start) return 0;
    if (pos < s.size() && s[pos] == ';') {
      ++pos;
    } else if (strict) {
      return 0;
    }
    // HTML turns NUL, surrogates and out-of-range values into U+FFFD.
    bool bad = value == 0 || value >= 0x110000 || (value >= 0xD800 && value <= 0xDFFF);
    AppendUtf8(bad ? 0xFFFD : static_cast<char32_t>(value), out);
    return pos - amp;
  }
  size_t len = NameLength(s, pos);
  if (len == 0) return 0;
  std::string_view name = s.substr(pos, len);
  bool semicolon = pos + len < s.size() && s[pos + len] == ';';
  if (!semicolon && (strict || !IsLegacyName(name))) return 0;
  auto it = NamedEntities().find(std::string(name));
  if (it == NamedEntities().end()) return 0;
  AppendUtf8(it->second, out);
  return 1 + len + (semicolon ? 1 : 0);
}

// True when s[amp] == '&' starts a reference DecodeReference would not decode (an unknown name with
// its ';'), which an escaper must keep as it is.
bool IsUnknownReference(std::string_view s, size_t amp) {
  size_t len = NameLength(s, amp + 1);
  return len > 0 && amp + 1 + len < s.size() && s[amp + 1 + len] == ';' &&
         !NamedEntities().count(std::string(s.substr(amp + 1, len)));
}

std::string EscapeHtml(std::string_view text, bool attribute) {
  std::string out;
  out.reserve(text.size() + text.size() / 8);
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    switch (c) {
      case '&':
        out += IsUnknownReference(text, i) ? "&" : "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += attribute ? "&quot;" : "\"";
        break;
      case '\'':
        out += attribute ? "&#39;" : "'";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

// ---- the piece list --------------------------------------------------------------------------------

// Collects pieces in document order, merging neighbouring untranslated ones.
class Pieces {
 public:
  void Keep(std::string_view text) {
    if (text.empty()) return;
    if (!out_.empty() && !out_.back().translate) {
      out_.back().text.append(text);
    } else {
      out_.push_back(MarkupPiece{std::string(text), false, "", MarkupEscape::kNone});
    }
  }

  // A run of text: its leading and trailing whitespace is kept as markup; the middle is translated
  // when it has a letter, with `decode` turning it into the source.
  template <typename Decode>
  void Text(std::string_view text, MarkupEscape escape, Decode decode) {
    size_t begin = 0, end = text.size();
    while (begin < end && IsAsciiSpace(text[begin])) ++begin;
    while (end > begin && IsAsciiSpace(text[end - 1])) --end;
    Keep(text.substr(0, begin));
    std::string_view middle = text.substr(begin, end - begin);
    std::string source = middle.empty() ? std::string() : CollapseSpaces(decode(middle));
    if (!source.empty() && HasLetter(source)) {
      out_.push_back(MarkupPiece{std::string(middle), true, std::move(source), escape});
    } else {
      Keep(middle);
    }
    Keep(text.substr(end));
  }

  std::vector<MarkupPiece> Take() { return std::move(out_); }

 private:
  std::vector<MarkupPiece> out_;
};

// ---- HTML ----------------------------------------------------------------------------------------

struct HtmlAttribute {
  std::string name;  // lower-case
  size_t value_begin = 0, value_end = 0;
  char quote = 0;  // '"' or '\'' when quoted, 0 otherwise
};

struct HtmlTag {
  size_t end = 0;  // one past the '>' (or the end of the input for an unterminated tag)
  std::string name;
  bool end_tag = false;
  bool self_closing = false;
  std::vector<HtmlAttribute> attributes;
};

// Tokenizes the tag at s[lt] == '<' followed by a letter (or "</" and a letter), as HTML's tokenizer
// does: quoted values may hold '>'.
HtmlTag ParseTag(std::string_view s, size_t lt) {
  HtmlTag tag;
  size_t p = lt + 1;
  if (s[p] == '/') {
    tag.end_tag = true;
    ++p;
  }
  size_t name_begin = p;
  while (p < s.size() && !IsAsciiSpace(s[p]) && s[p] != '/' && s[p] != '>') ++p;
  tag.name = LowerAscii(s.substr(name_begin, p - name_begin));
  for (;;) {
    while (p < s.size() && (IsAsciiSpace(s[p]) || s[p] == '/')) {
      if (s[p] == '/' && p + 1 < s.size() && s[p + 1] == '>') tag.self_closing = true;
      ++p;
    }
    if (p >= s.size()) {
      tag.end = s.size();
      return tag;
    }
    if (s[p] == '>') {
      tag.end = p + 1;
      return tag;
    }
    HtmlAttribute attr;
    size_t attr_begin = p++;  // a first '=' belongs to the name
    while (p < s.size() && !IsAsciiSpace(s[p]) && s[p] != '/' && s[p] != '>' && s[p] != '=') ++p;
    attr.name = LowerAscii(s.substr(attr_begin, p - attr_begin));
    size_t after_name = p;
    while (p < s.size() && IsAsciiSpace(s[p])) ++p;
    if (p < s.size() && s[p] == '=') {
      ++p;
      while (p < s.size() && IsAsciiSpace(s[p])) ++p;
      if (p < s.size() && (s[p] == '"' || s[p] == '\'')) {
        attr.quote = s[p];
        attr.value_begin = p + 1;
        size_t close = s.find(attr.quote, attr.value_begin);
        if (close == npos) {  // unterminated: the tag runs to the end of the input
          tag.end = s.size();
          return tag;
        }
        attr.value_end = close;
        p = close + 1;
      } else {
        attr.value_begin = p;
        while (p < s.size() && !IsAsciiSpace(s[p]) && s[p] != '>') ++p;
        attr.value_end = p;
      }
    } else {
      p = after_name;
    }
    tag.attributes.push_back(std::move(attr));
  }
}

bool IsVoidElement(const std::string& name) {
  static const char* const kVoid[] = {"area", "base", "br",    "col",    "embed", "hr",  "img",   "input",
                                      "link", "meta", "param", "source", "track", "wbr", "keygen"};
  return std::any_of(std::begin(kVoid), std::end(kVoid), [&](const char* v) { return name == v; });
}

// Elements whose content is text up to their end tag, never markup.
bool IsRawTextElement(const std::string& name) {
  return name == "script" || name == "style" || name == "textarea" || name == "title" || name == "xmp" ||
         name == "iframe" || name == "noembed" || name == "noframes" || name == "plaintext";
}

// Elements whose content is code or notation, not prose.
bool IsCodeElement(const std::string& name) {
  return name == "code" || name == "pre" || name == "kbd" || name == "samp" || name == "var" ||
         name == "svg" || name == "math";
}

bool IsTranslatableAttribute(const std::string& name) {
  return name == "alt" || name == "title" || name == "placeholder" || name == "aria-label";
}

// translate="no" (HTML) or class="... notranslate ..." (Google's convention).
bool OptsOut(std::string_view s, const HtmlTag& tag) {
  for (const auto& a : tag.attributes) {
    std::string value = LowerAscii(s.substr(a.value_begin, a.value_end - a.value_begin));
    if (a.name == "translate" && value == "no") return true;
    if (a.name == "class") {
      size_t at = value.find("notranslate");
      while (at != npos) {
        bool start_ok = at == 0 || IsAsciiSpace(value[at - 1]);
        size_t end = at + std::string_view("notranslate").size();
        if (start_ok && (end == value.size() || IsAsciiSpace(value[end]))) return true;
        at = value.find("notranslate", at + 1);
      }
    }
  }
  return false;
}

// One pass over the document: text runs between markup are translated unless they sit inside an
// element that opts out (code, pre, translate="no" ...). Only one such element is tracked, with the
// nesting of its own name counted; a document that never closes it stays untranslated to the end, the
// safe side for malformed input.
class HtmlSplitter {
 public:
  explicit HtmlSplitter(std::string_view s) : s_(s) {}

  std::vector<MarkupPiece> Run() {
    size_t text_start = 0, pos = 0;
    while (pos < s_.size()) {
      size_t lt = s_.find('<', pos);
      if (lt == npos) break;
      if (IsTagStart(lt)) {  // each tag is tokenized once, attributes and all
        HtmlTag tag = ParseTag(s_, lt);
        EmitText(s_.substr(text_start, lt - text_start));
        pos = text_start = HandleTag(lt, tag);
        continue;
      }
      size_t end = OtherMarkupEnd(lt);
      if (end == 0) {  // a '<' that starts nothing is text
        pos = lt + 1;
        continue;
      }
      EmitText(s_.substr(text_start, lt - text_start));
      out_.Keep(s_.substr(lt, end - lt));
      pos = text_start = end;
    }
    EmitText(s_.substr(text_start));
    return out_.Take();
  }

 private:
  // Whether s_[lt] == '<' starts a start or end tag: a letter, or '/' and a letter.
  bool IsTagStart(size_t lt) const {
    return lt + 1 < s_.size() && (IsAsciiAlpha(s_[lt + 1]) ||
                                  (s_[lt + 1] == '/' && lt + 2 < s_.size() && IsAsciiAlpha(s_[lt + 2])));
  }

  // End of the comment or declaration at s_[lt] == '<' (not a tag), or 0 when it is a plain '<'.
  size_t OtherMarkupEnd(size_t lt) const {
    auto until = [&](std::string_view close, size_t from) {
      size_t at = s_.find(close, from);
      return at == npos ? s_.size() : at + close.size();
    };
    if (s_.compare(lt, 4, "<!--") == 0) return until("-->", lt + 2);  // "<!-->" closes at once, as in HTML
    if (s_.compare(lt, 9, "<![CDATA[") == 0) return until("]]>", lt + 9);
    if (lt + 1 >= s_.size()) return 0;
    char next = s_[lt + 1];
    if (next == '!' || next == '?') return until(">", lt + 2);  // doctype, bogus comment
    if (next == '/') return until(">", lt + 2);  // "</>" and bogus end tags are dropped by browsers
    return 0;
  }

  void EmitText(std::string_view text) {
    if (skip_depth_ > 0) {
      out_.Keep(text);
    } else {
      out_.Text(text, MarkupEscape::kHtmlText, DecodeHtmlEntities);
    }
  }

  // Emits the tag at s_[lt] (parsed as `tag`) and, after a raw-text start tag, the raw text; returns
  // where text resumes.
  size_t HandleTag(size_t lt, const HtmlTag& tag) {
    const size_t end = tag.end;
    if (tag.end_tag) {
      out_.Keep(s_.substr(lt, end - lt));
      if (skip_depth_ > 0 && tag.name == skip_name_ && --skip_depth_ == 0) skip_name_.clear();
      return end;
    }
    bool opts_out = OptsOut(s_, tag);
    EmitStartTag(lt, tag, skip_depth_ > 0 || opts_out);
    bool opens = !IsVoidElement(tag.name) && !(tag.self_closing && (tag.name == "svg" || tag.name == "math"));
    if (skip_depth_ > 0) {
      if (opens && tag.name == skip_name_) ++skip_depth_;
    } else if (opens && (opts_out || IsCodeElement(tag.name))) {
      skip_name_ = tag.name;
      skip_depth_ = 1;
    }
    // Raw text is not parsed for tags ("</div>" in a JavaScript string is not an end tag); it runs to
    // "</name" followed by a space, '/' or '>' (any case), or to the end (plaintext always does).
    if (!IsRawTextElement(tag.name) || end >= s_.size()) return end;
    size_t close = end;
    for (;;) {
      close = s_.find("</", close);
      if (close == npos) {
        close = s_.size();
        break;
      }
      size_t after = close + 2 + tag.name.size();
      if (tag.name != "plaintext" && StartsWithNoCase(s_, close + 2, tag.name) &&
          (after >= s_.size() || IsAsciiSpace(s_[after]) || s_[after] == '/' || s_[after] == '>'))
        break;
      close += 2;
    }
    std::string_view raw = s_.substr(end, close - end);
    if (tag.name == "title" && skip_depth_ == 0) {  // the one raw-text element that holds prose
      out_.Text(raw, MarkupEscape::kHtmlText, DecodeHtmlEntities);
    } else {
      out_.Keep(raw);
    }
    return close;
  }

  // A start tag, with the values of its translatable attributes as pieces of their own. Only quoted
  // values: an unquoted one ends at a space, so a translation with spaces would break the tag.
  void EmitStartTag(size_t lt, const HtmlTag& tag, bool no_translate) {
    size_t done = lt;
    if (!no_translate) {
      for (const auto& a : tag.attributes) {
        if (!a.quote || !IsTranslatableAttribute(a.name) || a.value_end <= a.value_begin) continue;
        out_.Keep(s_.substr(done, a.value_begin - done));
        out_.Text(s_.substr(a.value_begin, a.value_end - a.value_begin), MarkupEscape::kHtmlAttribute,
                  DecodeHtmlEntities);
        done = a.value_end;
      }
    }
    out_.Keep(s_.substr(done, tag.end - done));
  }

  std::string_view s_;
  Pieces out_;
  std::string skip_name_;  // the element whose content is not translated (code, translate="no", ...)
  int skip_depth_ = 0;     // how many of skip_name_ are open
};

// ---- Markdown --------------------------------------------------------------------------------------

// Backslash escapes and entity references are for Markdown's reader, not text for the model.
std::string DecodeMarkdownText(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size() && IsAsciiPunct(s[i + 1])) {
      out.push_back(s[++i]);
    } else if (s[i] == '&') {
      size_t used = DecodeReference(s, i, &out, /*strict=*/true);
      if (used == 0) {
        out.push_back('&');
      } else {
        i += used - 1;
      }
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

// The inverse of DecodeMarkdownText for a translation: what would read as markup (emphasis, code,
// links, tags, entities, table pipes) gets a backslash, so the translation shows as the text it is.
std::string EscapeMarkdown(std::string_view text, bool line_start) {
  std::string out;
  out.reserve(text.size() + 8);
  std::string one_line = CollapseSpaces(text);  // a paragraph piece stays one line
  std::string_view t = one_line;
  if (line_start && !t.empty()) {
    // Block markers at the start of a line: # > - + = and ordered-list numbers "1." / "1)".
    size_t digits = 0;
    while (digits < t.size() && IsAsciiDigit(t[digits])) ++digits;
    if (t[0] == '#' || t[0] == '>' || t[0] == '-' || t[0] == '+' || t[0] == '=') {
      out.push_back('\\');
    } else if (digits > 0 && digits < t.size() && (t[digits] == '.' || t[digits] == ')')) {
      out.append(t.substr(0, digits));
      out.push_back('\\');
      t = t.substr(digits);
    }
  }
  for (size_t i = 0; i < t.size(); ++i) {
    char c = t[i];
    switch (c) {
      case '\\':
      case '`':
      case '*':
      case '[':
      case ']':
      case '|':
      case '~':
        out.push_back('\\');
        out.push_back(c);
        break;
      case '_': {
        bool inside_word = i > 0 && i + 1 < t.size() && IsAsciiAlnum(t[i - 1]) && IsAsciiAlnum(t[i + 1]);
        if (!inside_word) out.push_back('\\');
        out.push_back(c);
        break;
      }
      case '<':
        // At the end of the piece the markup that follows could complete a tag.
        if (i + 1 == t.size() || IsAsciiAlpha(t[i + 1]) || t[i + 1] == '/' || t[i + 1] == '!' ||
            t[i + 1] == '?')
          out.push_back('\\');
        out.push_back(c);
        break;
      case '!':
        if (i + 1 == t.size()) out.push_back('\\');  // "!" before a link would make it an image
        out.push_back(c);
        break;
      case '&':
        out += NameLength(t, i + 1) > 0 || (i + 1 < t.size() && t[i + 1] == '#') ? "&amp;" : "&";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

// One line of a Markdown document: [begin, content_end) is the text, [content_end, end) the line break.
struct Line {
  size_t begin = 0, content_end = 0, end = 0;
};

std::vector<Line> SplitLines(std::string_view s) {
  std::vector<Line> lines;
  size_t pos = 0;
  while (pos < s.size()) {
    size_t nl = s.find('\n', pos);
    size_t end = nl == npos ? s.size() : nl + 1;
    size_t content_end = nl == npos ? s.size() : nl;
    if (content_end > pos && s[content_end - 1] == '\r') --content_end;
    lines.push_back({pos, content_end, end});
    pos = end;
  }
  return lines;
}

bool IsBlank(std::string_view line) {
  return std::all_of(line.begin(), line.end(), [](char c) { return IsAsciiSpace(c); });
}

std::string_view TrimLeft(std::string_view s) {
  size_t i = 0;
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
  return s.substr(i);
}

// Columns of leading indentation (a tab counts to the next multiple of 4).
int Indent(std::string_view s) {
  int cols = 0;
  for (char c : s) {
    if (c == ' ') {
      ++cols;
    } else if (c == '\t') {
      cols = (cols / 4 + 1) * 4;
    } else {
      break;
    }
  }
  return cols;
}

// A thematic break or setext underline: three or more of one of - * _ = (spaces allowed).
bool IsRule(std::string_view t) {
  char mark = 0;
  int count = 0;
  for (char c : t) {
    if (c == ' ' || c == '\t') continue;
    if (c != '-' && c != '*' && c != '_' && c != '=') return false;
    if (mark && c != mark) return false;
    mark = c;
    ++count;
  }
  return count >= 3 || (mark == '=' && count >= 1);
}

// A fence opener/closer: three or more ` or ~. Returns its length, 0 when none.
size_t FenceLength(std::string_view t, char* mark) {
  if (t.empty() || (t[0] != '`' && t[0] != '~')) return 0;
  size_t n = 0;
  while (n < t.size() && t[n] == t[0]) ++n;
  if (n < 3) return 0;
  if (t[0] == '`' && t.substr(n).find('`') != npos) return 0;  // backticks in the info string: a code span
  *mark = t[0];
  return n;
}

// A GFM table delimiter row such as "|---|:--:|" or "--- | ---".
bool IsDelimiterRow(std::string_view t) {
  bool dash = false, pipe = false;
  for (char c : t) {
    if (c == '-') {
      dash = true;
    } else if (c == '|') {
      pipe = true;
    } else if (c != ':' && c != ' ' && c != '\t') {
      return false;
    }
  }
  return dash && (pipe || t.find("--") != npos) && t.find('|') != npos;
}

// CommonMark's HTML block kind 7: the line holds one complete open or closing tag (strict syntax: tag
// and attribute names, quoted or plain values) and nothing else.
bool IsCompleteTagLine(std::string_view t) {
  while (!t.empty() && IsAsciiSpace(t.back())) t.remove_suffix(1);
  size_t p = 1;
  bool closing = p < t.size() && t[p] == '/';
  if (closing) ++p;
  if (p >= t.size() || !IsAsciiAlpha(t[p])) return false;
  while (p < t.size() && (IsAsciiAlnum(t[p]) || t[p] == '-')) ++p;
  auto name_char = [](char c) { return IsAsciiAlnum(c) || c == '_' || c == '.' || c == ':' || c == '-'; };
  for (;;) {
    size_t ws = p;
    while (p < t.size() && IsAsciiSpace(t[p])) ++p;
    if (p < t.size() && t[p] == '>') return p + 1 == t.size();
    if (!closing && t.compare(p, 2, "/>") == 0) return p + 2 == t.size();
    if (closing || p == ws || p >= t.size() || !(IsAsciiAlpha(t[p]) || t[p] == '_' || t[p] == ':'))
      return false;
    while (p < t.size() && name_char(t[p])) ++p;
    size_t q = p;
    while (q < t.size() && IsAsciiSpace(t[q])) ++q;
    if (q < t.size() && t[q] == '=') {
      p = q + 1;
      while (p < t.size() && IsAsciiSpace(t[p])) ++p;
      if (p < t.size() && (t[p] == '"' || t[p] == '\'')) {
        size_t close = t.find(t[p], p + 1);
        if (close == npos) return false;
        p = close + 1;
      } else {
        size_t v = p;
        while (p < t.size() && !IsAsciiSpace(t[p]) && std::string_view("\"'=<>`").find(t[p]) == npos) ++p;
        if (p == v) return false;
      }
    }
  }
}

// HTML block starts (CommonMark kinds 1-7); returns the kind, 0 when none. Kind 7 (any complete tag alone
// on its line) may not interrupt a paragraph.
int HtmlBlockKind(std::string_view t, bool paragraph_open) {
  if (t.empty() || t[0] != '<') return 0;
  for (const char* name : {"script", "pre", "style", "textarea"}) {
    size_t n = std::string_view(name).size();
    if (StartsWithNoCase(t, 1, name) && (t.size() == n + 1 || IsAsciiSpace(t[n + 1]) || t[n + 1] == '>'))
      return 1;
  }
  if (t.starts_with("<!--")) return 2;
  if (t.starts_with("<?")) return 3;
  if (t.starts_with("<![CDATA[")) return 5;
  if (t.size() > 2 && t[1] == '!' && IsAsciiAlpha(t[2])) return 4;
  size_t p = t.size() > 1 && t[1] == '/' ? 2 : 1;
  size_t name_end = p;
  while (name_end < t.size() && (IsAsciiAlnum(t[name_end]) || t[name_end] == '-')) ++name_end;
  if (name_end == p) return 0;
  std::string name = LowerAscii(t.substr(p, name_end - p));
  static const char* const kBlockTags[] = {
      "address",  "article",  "aside",    "base",       "basefont", "blockquote", "body",   "caption",
      "center",   "col",      "colgroup", "dd",         "details",  "dialog",     "dir",    "div",
      "dl",       "dt",       "fieldset", "figcaption", "figure",   "footer",     "form",   "frame",
      "frameset", "h1",       "h2",       "h3",         "h4",       "h5",         "h6",     "head",
      "header",   "hr",       "html",     "iframe",     "legend",   "li",         "link",   "main",
      "menu",     "menuitem", "nav",      "noframes",   "ol",       "optgroup",   "option", "p",
      "param",    "search",   "section",  "summary",    "table",    "tbody",      "td",     "tfoot",
      "th",       "thead",    "title",    "tr",         "track",    "ul"};
  bool after_ok = name_end == t.size() || IsAsciiSpace(t[name_end]) || t[name_end] == '>' ||
                  t.compare(name_end, 2, "/>") == 0;
  if (after_ok &&
      std::any_of(std::begin(kBlockTags), std::end(kBlockTags), [&](const char* b) { return name == b; }))
    return 6;
  return !paragraph_open && IsCompleteTagLine(t) ? 7 : 0;
}

bool HtmlBlockEnds(int kind, std::string_view line) {
  switch (kind) {
    case 1: {
      std::string lower = LowerAscii(line);
      return lower.find("</script>") != npos || lower.find("</pre>") != npos ||
             lower.find("</style>") != npos || lower.find("</textarea>") != npos;
    }
    case 2:
      return line.find("-->") != npos;
    case 3:
      return line.find("?>") != npos;
    case 4:
      return line.find('>') != npos;
    case 5:
      return line.find("]]>") != npos;
    default:
      return false;  // 6 and 7 end at a blank line
  }
}

// Inline content of a paragraph, heading or table cell: markup out, text in. Code spans and brackets are
// matched up front (each in one pass), so the scan itself never looks back.
class InlineSplitter {
 public:
  InlineSplitter(std::string_view s, bool line_start, Pieces* out)
      : s_(s), line_start_(line_start), out_(out) {}

  void Run() {
    FindCodeSpans();
    MatchBrackets();
    size_t text = 0, q = 0;
    auto flush = [&](size_t upto) {
      if (upto > text) {
        out_->Text(s_.substr(text, upto - text),
                   StartsLine(text, upto) ? MarkupEscape::kMarkdownLineStart : MarkupEscape::kMarkdown,
                   DecodeMarkdownText);
      }
    };
    auto markup = [&](size_t from, size_t to) {
      flush(from);
      out_->Keep(s_.substr(from, to - from));
      text = q = to;
    };
    size_t span = 0;  // next code span
    // In CommonMark's order of precedence: code spans, then link tails, escapes, tags and autolinks,
    // link openers, emphasis runs, bare URLs.
    while (q < s_.size()) {
      while (span < spans_.size() && spans_[span].first < q) ++span;
      if (span < spans_.size() && spans_[span].first == q) {
        markup(q, spans_[span].second);
        continue;
      }
      if (auto it = link_tails_.find(q); it != link_tails_.end()) {
        markup(q, it->second);
        continue;
      }
      char c = s_[q];
      if (c == '\\' && q + 1 < s_.size() && IsAsciiPunct(s_[q + 1])) {
        q += 2;
        continue;
      }
      if (c == '<') {
        size_t end = AngleEnd(q);
        if (end) {
          markup(q, end);
          continue;
        }
      }
      if (c == '[' || (c == '!' && q + 1 < s_.size() && s_[q + 1] == '[')) {
        size_t open = c == '!' ? q + 1 : q;
        if (size_t end = LinkOpen(open)) {
          markup(q, end);
          continue;
        }
      }
      if (c == '*' || c == '_' || c == '~') {
        size_t run_end = q;
        while (run_end < s_.size() && s_[run_end] == c) ++run_end;
        if (IsDelimiterRun(q, run_end, c)) {
          markup(q, run_end);
        } else {
          q = run_end;
        }
        continue;
      }
      if (size_t end = BareUrlEnd(q)) {
        markup(q, end);
        continue;
      }
      ++q;
    }
    flush(s_.size());
  }

 private:
  // Whether the text in [begin, end) starts a line: only spaces and tabs between its first character and
  // the line break before it (or the start, when this inline text starts a line).
  bool StartsLine(size_t begin, size_t end) const {
    size_t first = begin;
    while (first < end && IsAsciiSpace(s_[first])) ++first;
    size_t back = first;
    while (back > 0 && (s_[back - 1] == ' ' || s_[back - 1] == '\t')) --back;
    return back == 0 ? line_start_ : s_[back - 1] == '\n' || s_[back - 1] == '\r';
  }

  // Code spans: a run of n backticks up to the next run of exactly n.
  void FindCodeSpans() {
    std::vector<std::pair<size_t, size_t>> runs;  // [begin, end)
    for (size_t i = 0; i < s_.size();) {
      if (s_[i] == '\\' && i + 1 < s_.size() && s_[i + 1] == '`') {
        i += 2;  // an escaped backtick opens nothing
        continue;
      }
      if (s_[i] != '`') {
        ++i;
        continue;
      }
      size_t j = i;
      while (j < s_.size() && s_[j] == '`') ++j;
      runs.push_back({i, j});
      i = j;
    }
    std::vector<size_t> next_same(runs.size(), npos);
    std::unordered_map<size_t, size_t> last_by_length;
    for (size_t k = runs.size(); k-- > 0;) {
      size_t len = runs[k].second - runs[k].first;
      auto it = last_by_length.find(len);
      if (it != last_by_length.end()) next_same[k] = it->second;
      last_by_length[len] = k;
    }
    for (size_t k = 0; k < runs.size();) {
      if (next_same[k] == npos) {
        ++k;
        continue;
      }
      spans_.push_back({runs[k].first, runs[next_same[k]].second});
      k = next_same[k] + 1;
    }
  }

  bool InCodeSpan(size_t pos) const {
    auto it = std::upper_bound(spans_.begin(), spans_.end(), std::make_pair(pos, npos));
    return it != spans_.begin() && pos < std::prev(it)->second;
  }

  // Matching brackets and parentheses outside code spans (escaped ones do not count).
  void MatchBrackets() {
    std::vector<size_t> brackets, parens;
    for (size_t i = 0; i < s_.size(); ++i) {
      char c = s_[i];
      if (c == '\\') {
        ++i;
        continue;
      }
      if ((c == '[' || c == ']' || c == '(' || c == ')') && InCodeSpan(i)) continue;
      if (c == '[') brackets.push_back(i);
      if (c == '(') parens.push_back(i);
      if (c == ']' && !brackets.empty()) {
        bracket_match_[brackets.back()] = i;
        brackets.pop_back();
      }
      if (c == ')' && !parens.empty()) {
        paren_match_[parens.back()] = i;
        parens.pop_back();
      }
    }
  }

  // At '[' (s_[open]): when it opens a link or image, records its tail ("](url)", "][ref]") as markup
  // and returns the end of the opener; a footnote reference "[^1]" is markup whole. 0 otherwise.
  size_t LinkOpen(size_t open) {
    auto close = bracket_match_.find(open);
    if (close == bracket_match_.end()) return 0;
    size_t m = close->second;
    if (open + 1 < s_.size() && s_[open + 1] == '^') return m + 1;
    if (m + 1 < s_.size() && s_[m + 1] == '(') {
      auto paren = paren_match_.find(m + 1);
      if (paren == paren_match_.end()) return 0;
      link_tails_[m] = paren->second + 1;
      return open + 1;
    }
    if (m + 1 < s_.size() && s_[m + 1] == '[') {
      auto ref = bracket_match_.find(m + 1);
      if (ref == bracket_match_.end()) return 0;
      link_tails_[m] = ref->second + 1;
      return open + 1;
    }
    return 0;
  }

  // An autolink (<https://...>, <a@b.c>), inline HTML tag, comment or declaration at s_[lt] == '<':
  // its end, or 0. An end tag is "</name>" strictly; the others run to the first '>'. The search stops
  // at the next '<', so each '<' costs at most the distance to the next one.
  size_t AngleEnd(size_t lt) const {
    if (lt + 1 >= s_.size()) return 0;
    char next = s_[lt + 1];
    if (next == '/') {
      size_t p = lt + 2;
      if (p >= s_.size() || !IsAsciiAlpha(s_[p])) return 0;
      while (p < s_.size() && (IsAsciiAlnum(s_[p]) || s_[p] == '-')) ++p;
      while (p < s_.size() && (s_[p] == ' ' || s_[p] == '\t')) ++p;
      return p < s_.size() && s_[p] == '>' ? p + 1 : 0;
    }
    if (!IsAsciiAlpha(next) && next != '!' && next != '?') return 0;
    for (size_t p = lt + 1; p < s_.size(); ++p) {
      if (s_[p] == '<') return 0;
      if (s_[p] == '>') return p + 1;
    }
    return 0;
  }

  // CommonMark's flanking rules: a run of * (or ~) is markup when it can open or close; a run of _
  // only when it is not inside a word.
  bool IsDelimiterRun(size_t begin, size_t end, char c) const {
    size_t prev_pos = begin;
    char32_t prev = begin == 0 ? U' ' : 0;
    if (begin > 0) {
      prev_pos = begin - 1;
      while (prev_pos > 0 && (static_cast<unsigned char>(s_[prev_pos]) & 0xC0) == 0x80) --prev_pos;
      size_t p = prev_pos;
      prev = DecodeUtf8(s_, &p);
    }
    size_t p = end;
    char32_t next = end < s_.size() ? DecodeUtf8(s_, &p) : U' ';
    auto space = [](char32_t x) { return u_isUWhiteSpace(static_cast<UChar32>(x)) != 0; };
    auto punct = [](char32_t x) {
      return u_ispunct(static_cast<UChar32>(x)) != 0 || (x < 128 && IsAsciiPunct(static_cast<char>(x)));
    };
    bool left = !space(next) && (!punct(next) || space(prev) || punct(prev));
    bool right = !space(prev) && (!punct(prev) || space(next) || punct(next));
    if (c == '~') return (end - begin) <= 2 && (left || right);
    if (c == '_') return (left && (!right || punct(prev))) || (right && (!left || punct(next)));
    return left || right;
  }

  // A bare URL (http://, https://, www.) at a word start: its end, or 0. Trailing punctuation stays text.
  size_t BareUrlEnd(size_t q) const {
    if (q > 0 && (IsAsciiAlnum(s_[q - 1]) || s_[q - 1] == '/' || s_[q - 1] == '.')) return 0;
    size_t scheme = StartsWithNoCase(s_, q, "https://")  ? 8
                    : StartsWithNoCase(s_, q, "http://") ? 7
                    : StartsWithNoCase(s_, q, "www.")    ? 4
                                                         : 0;
    if (scheme == 0 || q + scheme >= s_.size() || !IsAsciiAlnum(s_[q + scheme])) return 0;
    size_t end = q + scheme;
    // Up to whitespace or a character URLs cannot hold (RFC 3986).
    while (end < s_.size() && !IsAsciiSpace(s_[end]) && std::string_view("<>\"\\^`{|}").find(s_[end]) == npos)
      ++end;
    while (end > q + scheme && std::string_view(".,:;!?'\")*_~").find(s_[end - 1]) != npos) --end;
    return end > q + scheme ? end : 0;
  }

  std::string_view s_;
  bool line_start_;
  Pieces* out_;
  std::vector<std::pair<size_t, size_t>> spans_;  // code spans, [begin, end), in order
  std::unordered_map<size_t, size_t> bracket_match_, paren_match_;
  std::unordered_map<size_t, size_t> link_tails_;  // at a link text's ']': the end of "](...)" / "][...]"
};

// Blocks, line by line (CommonMark's container and leaf blocks, simplified): each line is markup
// (fences, code, HTML blocks, rules, reference definitions), a heading, a table row, or paragraph text;
// block-quote and list markers before it are markup.
class MarkdownSplitter {
 public:
  explicit MarkdownSplitter(std::string_view s) : s_(s), lines_(SplitLines(s)) {}

  std::vector<MarkupPiece> Run() {
    size_t i = FrontMatterEnd();
    if (i > 0) out_.Keep(s_.substr(0, lines_[i - 1].end));
    for (; i < lines_.size(); ++i) ProcessLine(i);
    FlushParagraph();
    return out_.Take();
  }

 private:
  std::string_view Content(size_t i) const {
    return s_.substr(lines_[i].begin, lines_[i].content_end - lines_[i].begin);
  }
  std::string_view Break(size_t i) const {
    return s_.substr(lines_[i].content_end, lines_[i].end - lines_[i].content_end);
  }

  // YAML (---) or TOML (+++) front matter at the very top: the number of lines it takes, 0 if none.
  size_t FrontMatterEnd() const {
    if (lines_.empty()) return 0;
    std::string_view first = Content(0);
    if (first != "---" && first != "+++") return 0;
    for (size_t i = 1; i < lines_.size(); ++i) {
      std::string_view c = Content(i);
      if (c == first || (first == "---" && c == "...")) return i + 1;
    }
    return 0;
  }

  void KeepLine(size_t i) {
    FlushParagraph();
    out_.Keep(s_.substr(lines_[i].begin, lines_[i].end - lines_[i].begin));
  }

  // A paragraph's lines are parsed as one inline text, as CommonMark does (code spans, links and tags
  // may run over line breaks), and its text pieces run over the breaks too.
  void FlushParagraph() {
    if (!pending_) return;
    InlineSplitter(s_.substr(pending_begin_, pending_end_ - pending_begin_), true, &out_).Run();
    out_.Keep(Break(pending_last_));
    pending_ = false;
  }

  void ProcessLine(size_t i) {
    std::string_view line = Content(i);
    if (fence_len_ > 0) {
      // Inside a fence everything is code; the closing fence (same character, at least as long) may sit
      // in the same block quote.
      KeepLine(i);
      std::string_view t = TrimLeft(line);
      while (!t.empty() && t[0] == '>') t = TrimLeft(t.substr(1));
      char mark = 0;
      size_t n = FenceLength(t, &mark);
      if (n >= fence_len_ && mark == fence_mark_ && IsBlank(t.substr(n))) fence_len_ = 0;
      return;
    }
    if (html_kind_ > 0) {
      KeepLine(i);
      if (html_kind_ >= 6 ? IsBlank(line) : HtmlBlockEnds(html_kind_, line)) html_kind_ = 0;
      return;
    }
    if (IsBlank(line)) {
      KeepLine(i);
      blank_before_ = true;
      paragraph_ = table_ = false;
      return;
    }
    // Four columns of indentation start code only after a blank line and outside lists (in a list they
    // continue an item; after paragraph text they continue the paragraph).
    int indent = Indent(line);
    if (indent >= 4 && !paragraph_ && !table_ && !list_ && blank_before_) {
      KeepLine(i);  // indented code
      return;
    }
    if (blank_before_ && indent == 0) list_ = false;
    bool continuation = paragraph_;  // a lazy continuation line of the open paragraph, unless a block starts

    // Container markers: block quotes and list items, in any nesting.
    size_t p = line.size() - TrimLeft(line).size();
    bool item = false;
    for (;;) {
      std::string_view rest = line.substr(p);
      if (!rest.empty() && rest[0] == '>') {
        p += 1 + (rest.size() > 1 && (rest[1] == ' ' || rest[1] == '\t'));
        continuation = false;
        continue;
      }
      if (IsRule(rest)) break;  // "- - -" and "* * *" are rules, not list items
      size_t marker = ListMarker(rest);
      if (marker == 0) break;
      p += marker;
      p += line.substr(p).size() - TrimLeft(line.substr(p)).size();
      if (line.compare(p, 4, "[ ] ") == 0 || line.compare(p, 4, "[x] ") == 0 ||
          line.compare(p, 4, "[X] ") == 0)
        p += 4;
      item = true;
      continuation = false;
    }
    std::string_view prefix = line.substr(0, p), rest = line.substr(p);
    if (item) list_ = true;
    blank_before_ = false;

    char mark = 0;
    if (size_t n = FenceLength(rest, &mark)) {
      KeepLine(i);
      fence_len_ = n;
      fence_mark_ = mark;
      paragraph_ = table_ = false;
      return;
    }
    if (int kind = HtmlBlockKind(rest, paragraph_)) {
      KeepLine(i);
      if (kind >= 6 || !HtmlBlockEnds(kind, rest)) html_kind_ = kind;
      paragraph_ = table_ = false;
      return;
    }
    if (IsRule(rest) && (rest.find_first_not_of("= \t") != npos || paragraph_)) {
      KeepLine(i);  // thematic break or setext underline
      paragraph_ = false;
      return;
    }
    // The open paragraph goes on over a line that starts no block and has only indentation before it.
    if (pending_ && continuation && prefix.find_first_not_of(" \t") == npos && !AtxHeading(rest) &&
        !IsTableLine(i, rest)) {
      pending_end_ = lines_[i].content_end;
      pending_last_ = i;
      return;
    }
    FlushParagraph();
    out_.Keep(prefix);
    if (IsBlank(rest)) {  // an empty list item or quote line holds no paragraph
      out_.Keep(rest);
      out_.Keep(Break(i));
      paragraph_ = false;
      return;
    }
    if (size_t hashes = AtxHeading(rest)) {
      Heading(rest, hashes);
      paragraph_ = false;
    } else if (!paragraph_ && IsReferenceDefinition(rest)) {
      out_.Keep(rest);
    } else if (IsTableLine(i, rest)) {
      if (table_ && IsDelimiterRow(rest)) {
        out_.Keep(rest);
      } else {
        TableRow(rest);
      }
      table_ = true;
      paragraph_ = false;
    } else {
      pending_ = paragraph_ = true;
      pending_begin_ = static_cast<size_t>(rest.data() - s_.data());
      pending_end_ = lines_[i].content_end;
      pending_last_ = i;
      return;
    }
    out_.Keep(Break(i));
  }

  bool IsTableLine(size_t i, std::string_view rest) const {
    return rest.find('|') != npos && (table_ || NextIsDelimiterRow(i));
  }

  // Length of a list marker ("- ", "* ", "+ ", "1. ", "1) ") at the start of t, 0 if none. An ordered
  // item interrupts a paragraph only when it starts at 1 (so "2020. That year..." stays text).
  size_t ListMarker(std::string_view t) const {
    if (t.size() >= 2 && (t[0] == '-' || t[0] == '*' || t[0] == '+') && (t[1] == ' ' || t[1] == '\t'))
      return 1;
    if (t.size() == 1 && (t[0] == '-' || t[0] == '*' || t[0] == '+')) return 1;
    size_t d = 0;
    while (d < t.size() && d < 10 && IsAsciiDigit(t[d])) ++d;
    if (d == 0 || d > 9 || d >= t.size() || (t[d] != '.' && t[d] != ')')) return 0;
    if (d + 1 < t.size() && t[d + 1] != ' ' && t[d + 1] != '\t') return 0;
    if (paragraph_ && t.substr(0, d) != "1") return 0;
    return d + 1;
  }

  static size_t AtxHeading(std::string_view t) {
    size_t n = 0;
    while (n < t.size() && t[n] == '#') ++n;
    if (n == 0 || n > 6 || (n < t.size() && t[n] != ' ' && t[n] != '\t')) return 0;
    return n;
  }

  void Heading(std::string_view t, size_t hashes) {
    // "## Title ##": the closing hashes (after a space) are markup too.
    size_t end = t.size();
    while (end > hashes && (t[end - 1] == ' ' || t[end - 1] == '\t')) --end;
    size_t close = end;
    while (close > hashes && t[close - 1] == '#') --close;
    if (close < end && (close == hashes || t[close - 1] == ' ' || t[close - 1] == '\t')) end = close;
    out_.Keep(t.substr(0, hashes));
    InlineSplitter(t.substr(hashes, end - hashes), false, &out_).Run();
    out_.Keep(t.substr(end));
  }

  static bool IsReferenceDefinition(std::string_view t) {
    if (t.empty() || t[0] != '[' || (t.size() > 1 && t[1] == '^')) return false;
    size_t close = t.find("]:");
    return close != npos && close > 1 && t.substr(1, close - 1).find('[') == npos;
  }

  bool NextIsDelimiterRow(size_t i) const {
    if (i + 1 >= lines_.size()) return false;
    std::string_view next = TrimLeft(Content(i + 1));
    while (!next.empty() && next[0] == '>') next = TrimLeft(next.substr(1));
    return IsDelimiterRow(next);
  }

  // Cells split at unescaped pipes outside code spans; pipes and cell padding are markup.
  void TableRow(std::string_view row) {
    size_t cell = 0;
    bool in_code = false;
    size_t tick_run = 0;
    for (size_t i = 0; i <= row.size(); ++i) {
      if (i < row.size() && row[i] == '\\') {
        ++i;
        continue;
      }
      if (i < row.size() && row[i] == '`') {
        size_t j = i;
        while (j < row.size() && row[j] == '`') ++j;
        if (!in_code) {
          in_code = true;
          tick_run = j - i;
        } else if (j - i == tick_run) {
          in_code = false;
        }
        i = j - 1;
        continue;
      }
      if (i == row.size() || (row[i] == '|' && !in_code)) {
        InlineSplitter(row.substr(cell, i - cell), false, &out_).Run();
        if (i < row.size()) out_.Keep(row.substr(i, 1));
        cell = i + 1;
        in_code = false;
      }
    }
  }

  std::string_view s_;
  std::vector<Line> lines_;
  Pieces out_;
  size_t fence_len_ = 0;  // inside a fenced code block when > 0
  char fence_mark_ = 0;
  int html_kind_ = 0;  // inside an HTML block of this kind when > 0
  bool blank_before_ = true;
  bool paragraph_ = false;
  bool table_ = false;
  bool list_ = false;     // inside a list: indented lines continue items rather than start code
  bool pending_ = false;  // a paragraph's lines collected, not yet split: [pending_begin_, pending_end_)
  size_t pending_begin_ = 0, pending_end_ = 0, pending_last_ = 0;
};

// ---- SRT -------------------------------------------------------------------------------------------

bool IsCueNumber(std::string_view t) {
  t = TrimLeft(t);
  while (!t.empty() && IsAsciiSpace(t.back())) t.remove_suffix(1);
  return !t.empty() && std::all_of(t.begin(), t.end(), IsAsciiDigit);
}

// Leading and trailing formatting tags of a cue's text (<i>, </b>, <font ...>, {\an8}) are markup.
void SrtText(std::string_view text, Pieces* out) {
  size_t begin = 0, end = text.size();
  for (;;) {
    size_t b = begin;
    while (b < end && IsAsciiSpace(text[b])) ++b;
    char open = b < end ? text[b] : 0;
    if (open != '<' && open != '{') break;
    size_t close = text.find(open == '<' ? '>' : '}', b);
    if (close == npos || close >= end) break;
    begin = close + 1;
  }
  for (;;) {
    size_t e = end;
    while (e > begin && IsAsciiSpace(text[e - 1])) --e;
    char last = e > begin ? text[e - 1] : 0;
    if (last != '>' && last != '}') break;
    size_t open = text.rfind(last == '>' ? '<' : '{', e - 1);
    if (open == npos || open < begin) break;
    end = open;
  }
  out->Keep(text.substr(0, begin));
  out->Text(text.substr(begin, end - begin), MarkupEscape::kSrt,
            [](std::string_view s) { return std::string(s); });
  out->Keep(text.substr(end));
}

std::vector<MarkupPiece> SplitSrtImpl(std::string_view s) {
  Pieces out;
  std::vector<Line> lines = SplitLines(s);
  auto content = [&](size_t i) { return s.substr(lines[i].begin, lines[i].content_end - lines[i].begin); };
  auto whole = [&](size_t i) { return s.substr(lines[i].begin, lines[i].end - lines[i].begin); };
  auto line_break = [&](size_t i) {
    return s.substr(lines[i].content_end, lines[i].end - lines[i].content_end);
  };
  // Markup lines: timing lines ("00:00:01,000 --> 00:00:04,000", maybe with position settings), the
  // cue number or identifier right before one, lone numbers. The rest of a cue is its text.
  auto is_timing = [&](size_t i) { return content(i).find("-->") != npos; };
  auto is_markup = [&](size_t i) {
    return is_timing(i) || IsCueNumber(content(i)) || (i + 1 < lines.size() && is_timing(i + 1));
  };
  size_t i = 0;
  while (i < lines.size()) {
    if (IsBlank(content(i)) || is_markup(i)) {
      out.Keep(whole(i++));
      continue;
    }
    size_t end = i;
    while (end < lines.size() && !IsBlank(content(end)) && !is_markup(end)) ++end;
    bool dialogue = true;
    for (size_t k = i; k < end; ++k) dialogue = dialogue && TrimLeft(content(k)).starts_with("-");
    if (dialogue) {
      for (size_t k = i; k < end; ++k) {
        SrtText(content(k), &out);
        out.Keep(line_break(k));
      }
    } else {
      // All text lines of the cue as one piece: a subtitle sentence often runs over two lines.
      SrtText(s.substr(lines[i].begin, lines[end - 1].content_end - lines[i].begin), &out);
      out.Keep(line_break(end - 1));
    }
    i = end;
  }
  return out.Take();
}

// A blank line would end the cue: blank lines go, the other line breaks stay.
std::string EscapeSrt(std::string_view text) {
  std::string out;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t nl = std::min(text.find('\n', pos), text.size());
    std::string_view line = text.substr(pos, nl - pos);
    while (!line.empty() && IsAsciiSpace(line.back())) line.remove_suffix(1);
    if (!IsBlank(line)) {
      if (!out.empty()) out.push_back('\n');
      out.append(line);
    }
    pos = nl + 1;
  }
  return out;
}

}  // namespace

std::string DecodeHtmlEntities(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '&') {
      out.push_back(text[i]);
      continue;
    }
    size_t used = DecodeReference(text, i, &out);
    if (used == 0) {
      out.push_back('&');
    } else {
      i += used - 1;
    }
  }
  return out;
}

std::string EscapeHtmlText(std::string_view text) {
  return EscapeHtml(text, false);
}
std::string EscapeHtmlAttribute(std::string_view text) {
  return EscapeHtml(text, true);
}

std::vector<MarkupPiece> SplitHtml(std::string_view html) {
  return HtmlSplitter(html).Run();
}
std::vector<MarkupPiece> SplitMarkdown(std::string_view markdown) {
  return MarkdownSplitter(markdown).Run();
}
std::vector<MarkupPiece> SplitSrt(std::string_view srt) {
  return SplitSrtImpl(srt);
}

std::string RenderTranslation(const MarkupPiece& piece, std::string_view translation) {
  switch (piece.escape) {
    case MarkupEscape::kHtmlText:
      return EscapeHtmlText(translation);
    case MarkupEscape::kHtmlAttribute:
      return EscapeHtmlAttribute(translation);
    case MarkupEscape::kMarkdown:
      return EscapeMarkdown(translation, false);
    case MarkupEscape::kMarkdownLineStart:
      return EscapeMarkdown(translation, true);
    case MarkupEscape::kSrt:
      return EscapeSrt(translation);
    case MarkupEscape::kNone:
      break;
  }
  return std::string(translation);
}

std::string JoinMarkup(const std::vector<MarkupPiece>& pieces, const std::vector<std::string>& translations) {
  size_t needed =
      std::count_if(pieces.begin(), pieces.end(), [](const MarkupPiece& p) { return p.translate; });
  if (needed != translations.size())
    Fail(ErrorCode::kInvalidArgument, "JoinMarkup: ", translations.size(), " translations for ", needed,
         " translatable pieces");
  std::string out;
  size_t next = 0;
  for (const auto& piece : pieces)
    out += piece.translate ? RenderTranslation(piece, translations[next++]) : piece.text;
  return out;
}

}  // namespace hymt
