// A request body as named fields, whichever way the client sent it: a JSON object, a URL-encoded form
// (with the query string), or multipart form fields. The typed getters check the type, the range and
// the encoding of one field and throw Error(kInvalidArgument) naming the field, so every parser in
// requests.h reads the same way whatever the content type.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/json.h"

namespace hymt {

class RequestFields {
 public:
  // Deepest JSON nesting a request may have (the deepest legitimate body, a chat message with content
  // parts, needs 4).
  static constexpr int kMaxJsonDepth = 16;

  // Throws Error(kInvalidArgument) for an empty body, invalid JSON (invalid UTF-8 included), nesting
  // deeper than kMaxJsonDepth, or a document that is not an object.
  static RequestFields FromJson(std::string_view body);
  // Form values as decoded by the HTTP library (repeated names allowed). Throws Error(kInvalidArgument)
  // naming a field whose value is not valid UTF-8.
  static RequestFields FromForm(std::vector<std::pair<std::string, std::string>> values);

  bool is_json() const { return is_json_; }
  bool Has(std::string_view name) const;

  // Each returns nullopt when the field is absent (or JSON null).
  std::optional<std::string> String(std::string_view name, size_t max_bytes) const;
  // A string or a list of strings (JSON), or the values of a repeated form field; `is_list` says which
  // the client sent. At most max_items items of at most max_bytes each.
  std::optional<std::vector<std::string>> StringOrList(std::string_view name, size_t max_items,
                                                       size_t max_bytes, bool* is_list) const;
  // JSON true/false; forms also accept 1/0, true/false, yes/no, on/off.
  std::optional<bool> Bool(std::string_view name) const;
  // An integer in [min, max] (JSON integers; forms: decimal digits).
  std::optional<int64_t> Int(std::string_view name, int64_t min, int64_t max) const;
  // A finite number in [min, max].
  std::optional<double> Number(std::string_view name, double min, double max) const;
  // The raw JSON value of a structured field (glossary, messages); nullptr when absent or for forms.
  const Json* Raw(std::string_view name) const;

 private:
  const Json* FindJson(std::string_view name) const;
  std::vector<std::string_view> FormValues(std::string_view name) const;

  bool is_json_ = false;
  Json json_;
  std::vector<std::pair<std::string, std::string>> form_;
};

// Number of Unicode characters (code points) of valid UTF-8 text.
size_t CountChars(std::string_view utf8);

}  // namespace hymt
