#include "core/json.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/status.h"
#include "core/utf8.h"

namespace hymt {
namespace {

class Parser {
 public:
  Parser(std::string_view text, int max_depth) : s_(text), max_depth_(max_depth) {}

  Json ParseDocument() {
    SkipSpace();
    Json v = ParseValue(0);
    SkipSpace();
    if (pos_ != s_.size()) Error("unexpected data after the JSON value");
    return v;
  }

 private:
  [[noreturn]] void Error(const std::string& what) const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < pos_ && i < s_.size(); ++i) {
      if (s_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    Fail(ErrorCode::kInvalidArgument, "invalid JSON at line ", line, " column ", col, ": ", what);
  }

  void SkipSpace() {
    while (pos_ < s_.size()) {
      char c = s_[pos_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++pos_;
      } else {
        break;
      }
    }
  }

  bool Consume(std::string_view lit) {
    if (s_.substr(pos_, lit.size()) == lit) {
      pos_ += lit.size();
      return true;
    }
    return false;
  }

  Json ParseValue(int depth) {
    if (pos_ >= s_.size()) Error("unexpected end of input");
    char c = s_[pos_];
    switch (c) {
      case '{': return ParseObject(depth + 1);
      case '[': return ParseArray(depth + 1);
      case '"': return Json(ParseString());
      case 't':
        if (Consume("true")) return Json(true);
        break;
      case 'f':
        if (Consume("false")) return Json(false);
        break;
      case 'n':
        if (Consume("null")) return Json();
        break;
      default:
        if (c == '-' || (c >= '0' && c <= '9')) return ParseNumber();
    }
    Error(StrCat("unexpected character '", std::string(1, c), "'"));
  }

  Json ParseObject(int depth) {
    if (depth > max_depth_) Error(StrCat("nesting deeper than ", max_depth_));
    ++pos_;  // {
    Json::Object obj;
    SkipSpace();
    if (pos_ < s_.size() && s_[pos_] == '}') {
      ++pos_;
      return Json(std::move(obj));
    }
    while (true) {
      SkipSpace();
      if (pos_ >= s_.size() || s_[pos_] != '"') Error("expected a string key");
      std::string key = ParseString();
      SkipSpace();
      if (pos_ >= s_.size() || s_[pos_] != ':') Error("expected ':'");
      ++pos_;
      SkipSpace();
      obj.emplace_back(std::move(key), ParseValue(depth));
      SkipSpace();
      if (pos_ >= s_.size()) Error("unexpected end of input in an object");
      if (s_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (s_[pos_] == '}') {
        ++pos_;
        return Json(std::move(obj));
      }
      Error("expected ',' or '}'");
    }
  }

  Json ParseArray(int depth) {
    if (depth > max_depth_) Error(StrCat("nesting deeper than ", max_depth_));
    ++pos_;  // [
    Json::Array arr;
    SkipSpace();
    if (pos_ < s_.size() && s_[pos_] == ']') {
      ++pos_;
      return Json(std::move(arr));
    }
    while (true) {
      SkipSpace();
      arr.push_back(ParseValue(depth));
      SkipSpace();
      if (pos_ >= s_.size()) Error("unexpected end of input in an array");
      if (s_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (s_[pos_] == ']') {
        ++pos_;
        return Json(std::move(arr));
      }
      Error("expected ',' or ']'");
    }
  }

  int Hex4() {
    if (pos_ + 4 > s_.size()) Error("truncated \\u escape");
    int v = 0;
    for (int k = 0; k < 4; ++k) {
      char c = s_[pos_ + k];
      v <<= 4;
      if (c >= '0' && c <= '9') {
        v |= c - '0';
      } else if (c >= 'a' && c <= 'f') {
        v |= c - 'a' + 10;
      } else if (c >= 'A' && c <= 'F') {
        v |= c - 'A' + 10;
      } else {
        Error("invalid hex digit in \\u escape");
      }
    }
    pos_ += 4;
    return v;
  }

  std::string ParseString() {
    ++pos_;  // opening quote
    std::string out;
    size_t run_start = pos_;
    while (true) {
      if (pos_ >= s_.size()) Error("unterminated string");
      unsigned char c = static_cast<unsigned char>(s_[pos_]);
      if (c == '"') {
        out.append(s_.data() + run_start, pos_ - run_start);
        ++pos_;
        break;
      }
      if (c < 0x20) Error("control character in a string");
      if (c == '\\') {
        out.append(s_.data() + run_start, pos_ - run_start);
        ++pos_;
        if (pos_ >= s_.size()) Error("unterminated escape");
        char e = s_[pos_++];
        switch (e) {
          case '"': out.push_back('"'); break;
          case '\\': out.push_back('\\'); break;
          case '/': out.push_back('/'); break;
          case 'b': out.push_back('\b'); break;
          case 'f': out.push_back('\f'); break;
          case 'n': out.push_back('\n'); break;
          case 'r': out.push_back('\r'); break;
          case 't': out.push_back('\t'); break;
          case 'u': {
            int cp = Hex4();
            if (cp >= 0xd800 && cp <= 0xdbff) {
              if (!Consume("\\u")) Error("unpaired high surrogate");
              int lo = Hex4();
              if (lo < 0xdc00 || lo > 0xdfff) Error("invalid low surrogate");
              cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            } else if (cp >= 0xdc00 && cp <= 0xdfff) {
              Error("unpaired low surrogate");
            }
            AppendUtf8(static_cast<char32_t>(cp), &out);
            break;
          }
          default: Error("invalid escape");
        }
        run_start = pos_;
        continue;
      }
      if (c >= 0x80) {
        int n = ValidUtf8SequenceLength(s_, pos_);
        if (n == 0) Error("invalid UTF-8 in a string");
        pos_ += n;
        continue;
      }
      ++pos_;
    }
    return out;
  }

  Json ParseNumber() {
    size_t start = pos_;
    bool is_int = true;
    if (s_[pos_] == '-') ++pos_;
    if (pos_ >= s_.size()) Error("truncated number");
    if (s_[pos_] == '0') {
      ++pos_;
    } else if (s_[pos_] >= '1' && s_[pos_] <= '9') {
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
    } else {
      Error("invalid number");
    }
    if (pos_ < s_.size() && s_[pos_] == '.') {
      is_int = false;
      ++pos_;
      if (pos_ >= s_.size() || !(s_[pos_] >= '0' && s_[pos_] <= '9')) Error("invalid number");
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      is_int = false;
      ++pos_;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      if (pos_ >= s_.size() || !(s_[pos_] >= '0' && s_[pos_] <= '9')) Error("invalid number");
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
    }
    std::string text(s_.substr(start, pos_ - start));
    double d = std::strtod(text.c_str(), nullptr);
    if (is_int) {
      errno = 0;
      char* end = nullptr;
      long long v = std::strtoll(text.c_str(), &end, 10);
      if (errno == 0) return Json(static_cast<int64_t>(v));
    }
    return Json(d);
  }

  std::string_view s_;
  size_t pos_ = 0;
  int max_depth_;
};

}  // namespace

Json Json::Parse(std::string_view text, int max_depth) { return Parser(text, max_depth).ParseDocument(); }

const char* Json::TypeName(Type t) {
  switch (t) {
    case Type::kNull: return "null";
    case Type::kBool: return "boolean";
    case Type::kNumber: return "number";
    case Type::kString: return "string";
    case Type::kArray: return "array";
    case Type::kObject: return "object";
  }
  return "?";
}

namespace {
[[noreturn]] void TypeMismatch(Json::Type want, Json::Type got) {
  Fail(ErrorCode::kInvalidArgument, "expected ", Json::TypeName(want), ", found ", Json::TypeName(got));
}
}  // namespace

bool Json::AsBool() const {
  if (!is_bool()) TypeMismatch(Type::kBool, type());
  return std::get<bool>(value_);
}

double Json::AsDouble() const {
  if (!is_number()) TypeMismatch(Type::kNumber, type());
  return std::get<Number>(value_).d;
}

int64_t Json::AsInt() const {
  if (!is_number()) TypeMismatch(Type::kNumber, type());
  const Number& n = std::get<Number>(value_);
  if (!n.is_int) Fail(ErrorCode::kInvalidArgument, "expected an integer, found ", n.d);
  return n.i;
}

const std::string& Json::AsString() const {
  if (!is_string()) TypeMismatch(Type::kString, type());
  return std::get<std::string>(value_);
}

const Json::Array& Json::AsArray() const {
  if (!is_array()) TypeMismatch(Type::kArray, type());
  return std::get<Array>(value_);
}

const Json::Object& Json::AsObject() const {
  if (!is_object()) TypeMismatch(Type::kObject, type());
  return std::get<Object>(value_);
}

Json::Array& Json::MutableArray() {
  if (!is_array()) TypeMismatch(Type::kArray, type());
  return std::get<Array>(value_);
}

Json::Object& Json::MutableObject() {
  if (!is_object()) TypeMismatch(Type::kObject, type());
  return std::get<Object>(value_);
}

const Json* Json::Find(std::string_view key) const {
  if (!is_object()) return nullptr;
  for (const auto& [k, v] : std::get<Object>(value_))
    if (k == key) return &v;
  return nullptr;
}

Json& Json::Set(std::string_view key, Json value) {
  Object& obj = MutableObject();
  for (auto& [k, v] : obj) {
    if (k == key) {
      v = std::move(value);
      return v;
    }
  }
  obj.emplace_back(std::string(key), std::move(value));
  return obj.back().second;
}

Json& Json::Push(Json value) {
  Array& arr = MutableArray();
  arr.push_back(std::move(value));
  return arr.back();
}

void AppendJsonString(std::string_view s, std::string* out) {
  out->push_back('"');
  for (char ch : s) {
    unsigned char c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out->append("\\\""); break;
      case '\\': out->append("\\\\"); break;
      case '\n': out->append("\\n"); break;
      case '\r': out->append("\\r"); break;
      case '\t': out->append("\\t"); break;
      case '\b': out->append("\\b"); break;
      case '\f': out->append("\\f"); break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out->append(buf);
        } else {
          out->push_back(static_cast<char>(c));
        }
    }
  }
  out->push_back('"');
}

void Json::DumpTo(std::string* out) const {
  switch (type()) {
    case Type::kNull: out->append("null"); break;
    case Type::kBool: out->append(std::get<bool>(value_) ? "true" : "false"); break;
    case Type::kNumber: {
      const Number& n = std::get<Number>(value_);
      char buf[32];
      if (n.is_int) {
        std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(n.i));
      } else if (!std::isfinite(n.d)) {
        std::snprintf(buf, sizeof buf, "null");  // JSON has no inf/nan
      } else {
        std::snprintf(buf, sizeof buf, "%.17g", n.d);
        // Prefer the shortest representation that round-trips.
        for (int prec = 6; prec < 17; ++prec) {
          char shorter[32];
          std::snprintf(shorter, sizeof shorter, "%.*g", prec, n.d);
          if (std::strtod(shorter, nullptr) == n.d) {
            std::memcpy(buf, shorter, sizeof shorter);
            break;
          }
        }
      }
      out->append(buf);
      break;
    }
    case Type::kString: AppendJsonString(std::get<std::string>(value_), out); break;
    case Type::kArray: {
      out->push_back('[');
      bool first = true;
      for (const Json& v : std::get<Array>(value_)) {
        if (!first) out->push_back(',');
        first = false;
        v.DumpTo(out);
      }
      out->push_back(']');
      break;
    }
    case Type::kObject: {
      out->push_back('{');
      bool first = true;
      for (const auto& [k, v] : std::get<Object>(value_)) {
        if (!first) out->push_back(',');
        first = false;
        AppendJsonString(k, out);
        out->push_back(':');
        v.DumpTo(out);
      }
      out->push_back('}');
      break;
    }
  }
}

std::string Json::Dump() const {
  std::string out;
  DumpTo(&out);
  return out;
}

}  // namespace hymt
