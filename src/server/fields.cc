#include "server/fields.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "core/status.h"
#include "core/utf8.h"

namespace hymt {
namespace {

std::string_view Lower(std::string_view s, std::string* buf) {
  buf->assign(s);
  for (char& c : *buf)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return *buf;
}

void CheckLength(std::string_view name, std::string_view value, size_t max_bytes) {
  if (value.size() > max_bytes)
    Fail(ErrorCode::kInvalidArgument, "field '", name, "' is too long (", value.size(), " bytes; at most ",
         max_bytes, ")");
}

}  // namespace

size_t CountChars(std::string_view utf8) {
  size_t n = 0;
  for (char c : utf8)
    if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++n;
  return n;
}

RequestFields RequestFields::FromJson(std::string_view body) {
  bool blank = true;
  for (char c : body)
    if (c != ' ' && c != '\t' && c != '\r' && c != '\n') blank = false;
  if (blank) Fail(ErrorCode::kInvalidArgument, "empty request body (expected a JSON object)");
  RequestFields f;
  f.is_json_ = true;
  try {
    f.json_ = Json::Parse(body, kMaxJsonDepth);
  } catch (const Error& e) {
    Fail(ErrorCode::kInvalidArgument, "invalid JSON body: ", e.what());
  }
  if (!f.json_.is_object())
    Fail(ErrorCode::kInvalidArgument, "the JSON body must be an object, found ",
         Json::TypeName(f.json_.type()));
  return f;
}

RequestFields RequestFields::FromForm(std::vector<std::pair<std::string, std::string>> values) {
  for (const auto& [name, value] : values) {
    if (!IsValidUtf8(name)) Fail(ErrorCode::kInvalidArgument, "a form field name is not valid UTF-8");
    if (!IsValidUtf8(value)) Fail(ErrorCode::kInvalidArgument, "form field '", name, "' is not valid UTF-8");
  }
  RequestFields f;
  f.form_ = std::move(values);
  return f;
}

const Json* RequestFields::FindJson(std::string_view name) const {
  const Json* v = json_.Find(name);
  return v && !v->is_null() ? v : nullptr;
}

std::vector<std::string_view> RequestFields::FormValues(std::string_view name) const {
  std::vector<std::string_view> out;
  for (const auto& [k, v] : form_)
    if (k == name) out.push_back(v);
  return out;
}

bool RequestFields::Has(std::string_view name) const {
  return is_json_ ? FindJson(name) != nullptr : !FormValues(name).empty();
}

std::optional<std::string> RequestFields::String(std::string_view name, size_t max_bytes) const {
  std::string value;
  if (is_json_) {
    const Json* v = FindJson(name);
    if (!v) return std::nullopt;
    if (!v->is_string())
      Fail(ErrorCode::kInvalidArgument, "field '", name, "' must be a string, found ",
           Json::TypeName(v->type()));
    value = v->AsString();
  } else {
    auto values = FormValues(name);
    if (values.empty()) return std::nullopt;
    if (values.size() > 1) Fail(ErrorCode::kInvalidArgument, "field '", name, "' is given more than once");
    value = std::string(values[0]);
  }
  CheckLength(name, value, max_bytes);
  return value;
}

std::optional<std::vector<std::string>> RequestFields::StringOrList(std::string_view name, size_t max_items,
                                                                    size_t max_bytes, bool* is_list) const {
  std::vector<std::string> out;
  if (is_json_) {
    const Json* v = FindJson(name);
    if (!v) return std::nullopt;
    if (v->is_string()) {
      *is_list = false;
      out.push_back(v->AsString());
    } else if (v->is_array()) {
      *is_list = true;
      const Json::Array& items = v->AsArray();
      if (items.size() > max_items)
        Fail(ErrorCode::kInvalidArgument, "field '", name, "' has ", items.size(), " items; at most ",
             max_items, " are allowed");
      for (size_t i = 0; i < items.size(); ++i) {
        if (!items[i].is_string())
          Fail(ErrorCode::kInvalidArgument, "field '", name, "[", i, "]' must be a string, found ",
               Json::TypeName(items[i].type()));
        out.push_back(items[i].AsString());
      }
    } else {
      Fail(ErrorCode::kInvalidArgument, "field '", name, "' must be a string or a list of strings, found ",
           Json::TypeName(v->type()));
    }
  } else {
    auto values = FormValues(name);
    if (values.empty()) return std::nullopt;
    *is_list = values.size() > 1;
    if (values.size() > max_items)
      Fail(ErrorCode::kInvalidArgument, "field '", name, "' is given ", values.size(), " times; at most ",
           max_items, " are allowed");
    for (std::string_view v : values) out.emplace_back(v);
  }
  for (const std::string& s : out) CheckLength(name, s, max_bytes);
  return out;
}

std::optional<bool> RequestFields::Bool(std::string_view name) const {
  if (is_json_) {
    const Json* v = FindJson(name);
    if (!v) return std::nullopt;
    if (!v->is_bool())
      Fail(ErrorCode::kInvalidArgument, "field '", name, "' must be true or false, found ",
           Json::TypeName(v->type()));
    return v->AsBool();
  }
  std::optional<std::string> s = String(name, 16);
  if (!s) return std::nullopt;
  std::string buf;
  std::string_view v = Lower(*s, &buf);
  if (v == "1" || v == "true" || v == "yes" || v == "on") return true;
  if (v == "0" || v == "false" || v == "no" || v == "off" || v.empty()) return false;
  Fail(ErrorCode::kInvalidArgument, "field '", name, "' must be true or false");
}

std::optional<int64_t> RequestFields::Int(std::string_view name, int64_t min, int64_t max) const {
  int64_t value = 0;
  if (is_json_) {
    const Json* v = FindJson(name);
    if (!v) return std::nullopt;
    if (!v->is_integer())
      Fail(ErrorCode::kInvalidArgument, "field '", name, "' must be an integer, found ",
           v->is_number() ? "a fraction or an out-of-range number" : Json::TypeName(v->type()));
    value = v->AsInt();
  } else {
    std::optional<std::string> s = String(name, 20);
    if (!s) return std::nullopt;
    char* end = nullptr;
    errno = 0;
    long long parsed = std::strtoll(s->c_str(), &end, 10);
    if (s->empty() || *end != '\0' || errno != 0)
      Fail(ErrorCode::kInvalidArgument, "field '", name, "' must be an integer");
    value = parsed;
  }
  if (value < min || value > max)
    Fail(ErrorCode::kInvalidArgument, "field '", name, "' must be between ", min, " and ", max, ", got ",
         value);
  return value;
}

std::optional<double> RequestFields::Number(std::string_view name, double min, double max) const {
  double value = 0;
  if (is_json_) {
    const Json* v = FindJson(name);
    if (!v) return std::nullopt;
    if (!v->is_number())
      Fail(ErrorCode::kInvalidArgument, "field '", name, "' must be a number, found ",
           Json::TypeName(v->type()));
    value = v->AsDouble();
  } else {
    std::optional<std::string> s = String(name, 32);
    if (!s) return std::nullopt;
    char* end = nullptr;
    value = std::strtod(s->c_str(), &end);
    if (s->empty() || *end != '\0') Fail(ErrorCode::kInvalidArgument, "field '", name, "' must be a number");
  }
  if (!std::isfinite(value) || value < min || value > max)
    Fail(ErrorCode::kInvalidArgument, "field '", name, "' must be between ", min, " and ", max);
  return value;
}

const Json* RequestFields::Raw(std::string_view name) const {
  return is_json_ ? FindJson(name) : nullptr;
}

}  // namespace hymt
