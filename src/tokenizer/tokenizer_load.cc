// The file loaders: hy.tiktoken and HF tokenizer.json, both turned into a TokenizerSpec.
#include <algorithm>
#include <charconv>

#include "core/json.h"
#include "core/mapped_file.h"
#include "core/status.h"
#include "core/utf8.h"
#include "tokenizer/tokenizer.h"

namespace hymt {
namespace {

constexpr int kHunyuanExtraSpecials = 205;  // <|extra_0|> .. <|extra_204|>

// MODEL.md's fixed order of the Hunyuan special tokens, which follow the ranks of hy.tiktoken.
std::vector<std::string> HunyuanSpecialNames() {
  std::vector<std::string> names = {"<|endoftext|>", "<|startoftext|>", "<|bos|>", "<|eos|>", "<|pad|>"};
  for (int i = 0; i < kHunyuanExtraSpecials; ++i) names.push_back(StrCat("<|extra_", i, "|>"));
  return names;
}

int Base64Value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

// Strict standard base64 with padding; false on anything else.
bool DecodeBase64(std::string_view in, std::string* out) {
  out->clear();
  if (in.empty() || in.size() % 4 != 0) return false;
  for (size_t i = 0; i < in.size(); i += 4) {
    int v[4];
    int pad = 0;
    for (int k = 0; k < 4; ++k) {
      char c = in[i + k];
      if (c == '=' && i + 4 == in.size() && k >= 2) {
        v[k] = 0;
        ++pad;
      } else if (pad > 0 || (v[k] = Base64Value(c)) < 0) {
        return false;  // a character after padding, or outside the alphabet
      }
    }
    uint32_t w = v[0] << 18 | v[1] << 12 | v[2] << 6 | v[3];
    out->push_back(static_cast<char>(w >> 16));
    if (pad < 2) out->push_back(static_cast<char>((w >> 8) & 0xff));
    if (pad < 1) out->push_back(static_cast<char>(w & 0xff));
  }
  return true;
}

// GPT-2's byte-level alphabet (bytes_to_unicode): printable Latin-1 bytes stand for themselves, the
// other 68 bytes for U+0100..U+0143 in byte order.
class ByteLevelAlphabet {
 public:
  static const ByteLevelAlphabet& Get() {
    static const ByteLevelAlphabet alphabet;
    return alphabet;
  }
  char32_t CharOf(uint8_t byte) const { return char_of_[byte]; }
  int ByteOf(char32_t c) const { return c < kSize ? byte_of_[c] : -1; }

 private:
  static constexpr char32_t kSize = 256 + 68;
  ByteLevelAlphabet() {
    std::fill(std::begin(byte_of_), std::end(byte_of_), -1);
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
      char_of_[b] = printable ? b : next++;
      byte_of_[char_of_[b]] = static_cast<int16_t>(b);
    }
  }
  char32_t char_of_[256];
  int16_t byte_of_[kSize];
};

std::string Quoted(std::string_view s) {
  std::string out;
  AppendJsonString(s.substr(0, 80), &out);
  return s.size() > 80 ? out + "..." : out;
}

// Field access with errors that name the file and the field.
class JsonFile {
 public:
  explicit JsonFile(std::string path) : path_(std::move(path)) {}

  [[noreturn]] void Bad(std::string_view field, const std::string& what) const {
    Fail(ErrorCode::kCorruptData, path_, ": ", field, ": ", what);
  }
  [[noreturn]] void Unsupported(std::string_view field, const std::string& what) const {
    Fail(ErrorCode::kUnsupported, path_, ": ", field, ": ", what);
  }
  const Json& Expect(const Json& v, Json::Type type, std::string_view field) const {
    if (v.type() != type)
      Bad(field, StrCat("expected ", Json::TypeName(type), ", found ", Json::TypeName(v.type())));
    return v;
  }
  const Json& Member(const Json& obj, std::string_view key, Json::Type type, std::string_view field) const {
    const Json* v = obj.Find(key);
    if (v == nullptr) Bad(field, "missing");
    return Expect(*v, type, field);
  }
  // A boolean member, `fallback` when absent or null.
  bool Flag(const Json& obj, std::string_view key, bool fallback, std::string_view field) const {
    const Json* v = obj.Find(key);
    if (v == nullptr || v->is_null()) return fallback;
    return Expect(*v, Json::Type::kBool, field).AsBool();
  }
  int32_t Id(const Json& v, std::string_view field) const {
    if (!v.is_integer() || v.AsInt() < 0 || v.AsInt() >= INT32_MAX)
      Bad(field, StrCat("expected a token id (an integer in [0, 2^31-1)), found ", v.Dump()));
    return static_cast<int32_t>(v.AsInt());
  }

 private:
  std::string path_;
};

Normalization ParseNormalizer(const JsonFile& file, const Json& n, const std::string& field) {
  if (n.is_null()) return Normalization::kNone;
  file.Expect(n, Json::Type::kObject, field);
  const std::string& type = file.Member(n, "type", Json::Type::kString, field + ".type").AsString();
  if (type == "NFC") return Normalization::kNfc;
  if (type == "Sequence") {
    const Json& list = file.Member(n, "normalizers", Json::Type::kArray, field + ".normalizers");
    Normalization result = Normalization::kNone;
    for (size_t i = 0; i < list.AsArray().size(); ++i)
      if (ParseNormalizer(file, list.AsArray()[i], StrCat(field, ".normalizers[", i, "]")) ==
          Normalization::kNfc)
        result = Normalization::kNfc;
    return result;
  }
  file.Unsupported(field,
                   StrCat("normalizer type ", Quoted(type), " is not supported (hymt implements NFC)"));
}

// A split pattern with literal CR, LF and tab characters written as the escapes \r, \n, \t (the same
// regex): DeepSeek-V3-style tokenizer.json files carry literal CR LF inside [\r\n].
std::string CanonicalPattern(std::string_view pattern) {
  std::string out;
  for (char c : pattern) {
    if (c == '\r') {
      out += "\\r";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

SplitRule ParsePreTokenizer(const JsonFile& file, const Json& root) {
  const Json* p = root.Find("pre_tokenizer");
  if (p == nullptr || p->is_null())
    file.Unsupported("pre_tokenizer", "none declared; hymt needs a Split rule followed by ByteLevel");
  file.Expect(*p, Json::Type::kObject, "pre_tokenizer");
  std::vector<std::pair<const Json*, std::string>> items;
  // A Sequence of Split steps and one ByteLevel step (without its own GPT-2 regex), or one step alone.
  if (file.Member(*p, "type", Json::Type::kString, "pre_tokenizer.type").AsString() == "Sequence") {
    const Json& list = file.Member(*p, "pretokenizers", Json::Type::kArray, "pre_tokenizer.pretokenizers");
    for (size_t i = 0; i < list.AsArray().size(); ++i)
      items.emplace_back(&list.AsArray()[i], StrCat("pre_tokenizer.pretokenizers[", i, "]"));
  } else {
    items.emplace_back(p, "pre_tokenizer");
  }
  std::vector<std::string> patterns;
  bool byte_level = false;
  for (const auto& [item, field] : items) {
    file.Expect(*item, Json::Type::kObject, field);
    const std::string& type = file.Member(*item, "type", Json::Type::kString, field + ".type").AsString();
    if (type == "Split") {
      if (byte_level) file.Unsupported(field, "a Split after ByteLevel would split byte-level text");
      const Json& pattern = file.Member(*item, "pattern", Json::Type::kObject, field + ".pattern");
      const Json* regex = pattern.Find("Regex");
      if (regex == nullptr || !regex->is_string())
        file.Unsupported(field + ".pattern", "only {\"Regex\": ...} split patterns are supported");
      const std::string& behavior =
          file.Member(*item, "behavior", Json::Type::kString, field + ".behavior").AsString();
      if (behavior != "Isolated")
        file.Unsupported(field + ".behavior", StrCat(Quoted(behavior), ", expected \"Isolated\""));
      if (file.Flag(*item, "invert", false, field + ".invert")) file.Unsupported(field + ".invert", "true");
      patterns.push_back(CanonicalPattern(regex->AsString()));
    } else if (type == "ByteLevel") {
      // HF's defaults are true for both; hymt's rules need both off.
      if (file.Flag(*item, "use_regex", true, field + ".use_regex"))
        file.Unsupported(field + ".use_regex", "true (the GPT-2 split rule) is not one of hymt's rules");
      if (file.Flag(*item, "add_prefix_space", true, field + ".add_prefix_space"))
        file.Unsupported(field + ".add_prefix_space", "true is not supported");
      byte_level = true;
    } else {
      file.Unsupported(field, StrCat("pre-tokenizer type ", Quoted(type), " is not supported"));
    }
  }
  // The Split patterns must be exactly one of the rules implemented in pretokenize.cc.
  if (!byte_level)
    file.Unsupported("pre_tokenizer", "no ByteLevel step: hymt reads byte-level BPE vocabularies only");
  if (patterns.size() == 1 && patterns[0] == kHunyuanSplitRegex) return SplitRule::kHunyuan;
  if (std::equal(patterns.begin(), patterns.end(), std::begin(kHunyuanDenseSplitRegexes),
                 std::end(kHunyuanDenseSplitRegexes)))
    return SplitRule::kHunyuanDense;
  std::string list;
  for (const auto& pat : patterns) list += (list.empty() ? "" : ", ") + Quoted(pat);
  file.Unsupported("pre_tokenizer", StrCat("split pattern(s) [", list,
                                           "] are not a rule hymt implements (hunyuan, hunyuan-dense)"));
}

}  // namespace

bool DecodeByteLevel(std::string_view text, std::string* bytes) {
  const ByteLevelAlphabet& alphabet = ByteLevelAlphabet::Get();
  bytes->clear();
  if (!IsValidUtf8(text)) return false;
  for (size_t pos = 0; pos < text.size();) {
    int b = alphabet.ByteOf(DecodeUtf8(text, &pos));
    if (b < 0) return false;
    bytes->push_back(static_cast<char>(b));
  }
  return true;
}

std::string EncodeByteLevel(std::string_view bytes) {
  const ByteLevelAlphabet& alphabet = ByteLevelAlphabet::Get();
  std::string text;
  for (char c : bytes) AppendUtf8(alphabet.CharOf(static_cast<uint8_t>(c)), &text);
  return text;
}

Tokenizer Tokenizer::FromTiktokenFile(const std::string& path) {
  return FromTiktokenText(ReadFile(path), path);
}

Tokenizer Tokenizer::FromTiktokenText(std::string_view data, const std::string& path) {
  // Ranks must be 0..n-1, one per line, so none can reach the number of lines: checking that first
  // keeps a corrupt rank from sizing a huge table.
  const size_t n_lines = std::count(data.begin(), data.end(), '\n') + 1;
  std::vector<std::string> tokens;
  std::vector<int64_t> line_of;  // [rank] the line defining it, 0 when none yet
  std::string token;
  size_t line_no = 0;
  for (size_t pos = 0; pos < data.size();) {
    size_t end = data.find('\n', pos);
    if (end == std::string::npos) end = data.size();
    std::string_view line(data.data() + pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    size_t space = line.find(' ');
    std::string_view b64 = line.substr(0, space), rank_text;
    if (space != std::string_view::npos) rank_text = line.substr(space + 1);
    int64_t rank = -1;
    auto [ptr, ec] = std::from_chars(rank_text.data(), rank_text.data() + rank_text.size(), rank);
    if (space == std::string_view::npos || rank_text.empty() || ec != std::errc() ||
        ptr != rank_text.data() + rank_text.size() || rank < 0)
      Fail(ErrorCode::kCorruptData, path, ":", line_no, ": expected \"<base64 token> <rank>\", found ",
           Quoted(line));
    if (static_cast<uint64_t>(rank) >= n_lines)
      Fail(ErrorCode::kCorruptData, path, ":", line_no, ": rank ", rank, " is out of range (the file has ",
           n_lines, " lines and ranks must be 0..n-1)");
    if (!DecodeBase64(b64, &token))
      Fail(ErrorCode::kCorruptData, path, ":", line_no, ": invalid base64 token ", Quoted(b64));
    if (rank >= static_cast<int64_t>(tokens.size())) {
      tokens.resize(rank + 1);
      line_of.resize(rank + 1, 0);
    }
    if (line_of[rank] != 0)
      Fail(ErrorCode::kCorruptData, path, ":", line_no, ": rank ", rank, " is already defined on line ",
           line_of[rank]);
    tokens[rank] = token;
    line_of[rank] = static_cast<int64_t>(line_no);
  }
  if (tokens.empty()) Fail(ErrorCode::kCorruptData, path, ": no tokens (empty or truncated file)");
  for (size_t rank = 0; rank < tokens.size(); ++rank)
    if (line_of[rank] == 0)
      Fail(ErrorCode::kCorruptData, path, ": rank ", rank, " is missing (ranks must be 0..",
           tokens.size() - 1, ")");

  // The specials follow the ranks in MODEL.md's order; the file does not list them.
  TokenizerSpec spec;
  spec.source = path;
  const int32_t n_ranks = static_cast<int32_t>(tokens.size());
  spec.tokens = std::move(tokens);
  for (std::string& name : HunyuanSpecialNames()) {
    spec.added_tokens.push_back({static_cast<int32_t>(spec.tokens.size()), true});
    spec.tokens.push_back(std::move(name));
  }
  spec.merge_rule = BpeModel::Rule::kRanks;
  spec.split_rule = SplitRule::kHunyuan;
  spec.where = [line_of = std::move(line_of), n_ranks](int32_t id) {
    return id < n_ranks ? StrCat("line ", line_of[id]) : StrCat("special token ", id);
  };
  return FromSpec(std::move(spec));
}

Tokenizer Tokenizer::FromTokenizerJson(const std::string& path) {
  return FromTokenizerJsonText(ReadFile(path), path);
}

Tokenizer Tokenizer::FromTokenizerJsonText(std::string_view text, const std::string& path) {
  const JsonFile file(path);
  Json root;
  try {
    root = Json::Parse(text);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kInvalidArgument) throw;
    Fail(ErrorCode::kCorruptData, path, ": ", e.what());
  }
  file.Expect(root, Json::Type::kObject, "(top level)");
  // The model: a plain byte-level BPE. Options that change how merges apply are refused, not ignored.
  const Json& model = file.Member(root, "model", Json::Type::kObject, "model");
  const Json* type = model.Find("type");
  if (type == nullptr || !type->is_string() || type->AsString() != "BPE")
    file.Unsupported("model.type", StrCat(type ? type->Dump() : "missing", ", expected \"BPE\""));
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const Json* v = model.Find(key);
    if (v != nullptr && !v->is_null() && !(v->is_string() && v->AsString().empty()))
      file.Unsupported(StrCat("model.", key), v->Dump());
  }
  if (const Json* d = model.Find("dropout");
      d != nullptr && !d->is_null() && !(d->is_number() && d->AsDouble() == 0))
    file.Unsupported("model.dropout", d->Dump());
  if (file.Flag(model, "byte_fallback", false, "model.byte_fallback"))
    file.Unsupported("model.byte_fallback", "true (a byte-level vocabulary never needs it)");

  TokenizerSpec spec;
  spec.source = path;
  spec.merge_rule = BpeModel::Rule::kMergeList;
  spec.ignore_merges = file.Flag(model, "ignore_merges", false, "model.ignore_merges");
  spec.normalization =
      ParseNormalizer(file, root.Find("normalizer") ? *root.Find("normalizer") : Json(), "normalizer");
  spec.split_rule = ParsePreTokenizer(file, root);

  // Added tokens first: their text replaces any byte-level spelling the vocab has for the same id.
  std::vector<std::pair<int32_t, std::string>> added;
  if (const Json* list = root.Find("added_tokens"); list != nullptr && !list->is_null()) {
    file.Expect(*list, Json::Type::kArray, "added_tokens");
    for (size_t i = 0; i < list->AsArray().size(); ++i) {
      const Json& a = list->AsArray()[i];
      std::string field = StrCat("added_tokens[", i, "]");
      file.Expect(a, Json::Type::kObject, field);
      int32_t id = file.Id(file.Member(a, "id", Json::Type::kNumber, field + ".id"), field + ".id");
      const std::string& content =
          file.Member(a, "content", Json::Type::kString, field + ".content").AsString();
      if (content.empty()) file.Bad(field + ".content", "empty");
      for (const char* flag : {"lstrip", "rstrip", "single_word"})
        if (file.Flag(a, flag, false, StrCat(field, ".", flag)))
          file.Unsupported(StrCat(field, ".", flag), StrCat("true (token ", Quoted(content), ")"));
      spec.added_tokens.push_back({id, file.Flag(a, "special", false, field + ".special")});
      added.emplace_back(id, content);
    }
  }
  // Ids must be 0..n-1 without gaps, so the largest cannot exceed the number of entries: checking that
  // first keeps a corrupt id from sizing a huge table.
  const Json& vocab = file.Member(model, "vocab", Json::Type::kObject, "model.vocab");
  int64_t n_tokens = 0;
  for (const auto& [text, id] : vocab.AsObject())
    n_tokens = std::max<int64_t>(n_tokens, file.Id(id, "model.vocab") + 1);
  for (const auto& [id, content] : added) n_tokens = std::max<int64_t>(n_tokens, id + 1);
  const size_t n_entries = vocab.AsObject().size() + added.size();
  if (static_cast<size_t>(n_tokens) > n_entries)
    file.Bad("model.vocab", StrCat("id ", n_tokens - 1, " is out of range: there are only ", n_entries,
                                   " vocab and added-token entries"));
  // Vocab keys are byte-level text (GPT-2's alphabet); an added token's id may also have a vocab entry,
  // in which case the added token's content is its text.
  spec.tokens.assign(n_tokens, std::string());
  std::vector<uint8_t> defined(n_tokens, 0);  // 1: from the vocab, 2: an added token
  for (const auto& [id, content] : added) {
    spec.tokens[id] = content;
    defined[id] = 2;
  }
  std::string bytes;
  for (const auto& [text, id_json] : vocab.AsObject()) {
    int32_t id = file.Id(id_json, "model.vocab");
    if (defined[id] == 1)
      file.Bad("model.vocab", StrCat("id ", id, " is given to two entries, one is ", Quoted(text)));
    if (defined[id] == 2) continue;
    if (!DecodeByteLevel(text, &bytes))
      file.Bad("model.vocab", StrCat("entry ", Quoted(text), " (id ", id, ") is not byte-level text"));
    spec.tokens[id] = bytes;
    defined[id] = 1;
  }
  for (int64_t id = 0; id < n_tokens; ++id)
    if (defined[id] == 0)
      file.Bad("model.vocab", StrCat("id ", id, " has no token (ids must be 0..", n_tokens - 1, ")"));

  // Merges, in priority order: "left right" (older files) or ["left", "right"] (tokenizers >= 0.20).
  const Json& merges = file.Member(model, "merges", Json::Type::kArray, "model.merges");
  spec.merges.reserve(merges.AsArray().size());
  std::string left, right;
  for (size_t i = 0; i < merges.AsArray().size(); ++i) {
    const Json& m = merges.AsArray()[i];
    auto field = [i] { return StrCat("model.merges[", i, "]"); };  // built only for an error
    std::string_view a, b;
    if (m.is_string()) {  // "left right"
      std::string_view s = m.AsString();
      size_t space = s.find(' ');
      if (space == std::string_view::npos || s.find(' ', space + 1) != std::string_view::npos)
        file.Bad(field(), StrCat("expected \"left right\", found ", Quoted(s)));
      a = s.substr(0, space);
      b = s.substr(space + 1);
    } else if (m.is_array() && m.AsArray().size() == 2 && m.AsArray()[0].is_string() &&
               m.AsArray()[1].is_string()) {
      a = m.AsArray()[0].AsString();
      b = m.AsArray()[1].AsString();
    } else {
      file.Bad(field(), StrCat("expected \"left right\" or [left, right], found ", m.Dump()));
    }
    if (!DecodeByteLevel(a, &left) || !DecodeByteLevel(b, &right) || left.empty() || right.empty())
      file.Bad(field(), "not two byte-level tokens");
    spec.merges.emplace_back(left, right);
  }
  spec.where = [](int32_t id) { return StrCat("model.vocab id ", id); };
  return FromSpec(std::move(spec));
}

Tokenizer Tokenizer::FromModelDir(const std::string& dir) {
  std::string json = JoinPath(dir, "tokenizer.json");
  if (FileExists(json)) return FromTokenizerJson(json);
  std::string tiktoken = JoinPath(dir, "hy.tiktoken");
  if (FileExists(tiktoken)) return FromTiktokenFile(tiktoken);
  Fail(ErrorCode::kNotFound, dir, ": no tokenizer.json or hy.tiktoken in this folder");
}

}  // namespace hymt
