// A small JSON document model and a strict parser (RFC 8259), used for config files, safetensors
// headers, tokenizer.json and, in the server, request and response bodies. The engine library carries
// no third-party JSON dependency, so it builds on a bare GPU host.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace hymt {

class Json {
 public:
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };
  using Array = std::vector<Json>;
  using Object = std::vector<std::pair<std::string, Json>>;  // keeps the document's key order

  // Limits that keep hostile input from exhausting the stack or memory.
  static constexpr int kDefaultMaxDepth = 128;

  // Parses a whole document. Throws Error(kInvalidArgument) naming the line and column of the first
  // problem: invalid syntax, invalid UTF-8 in a string, nesting deeper than max_depth, trailing data.
  static Json Parse(std::string_view text, int max_depth = kDefaultMaxDepth);

  Json() = default;  // null
  Json(std::nullptr_t) {}
  Json(bool b) : value_(b) {}
  Json(int v) : value_(Number{static_cast<double>(v), v, true}) {}
  Json(int64_t v) : value_(Number{static_cast<double>(v), v, true}) {}
  Json(uint64_t v) : value_(Number{static_cast<double>(v), static_cast<int64_t>(v), v <= INT64_MAX}) {}
  Json(double v) : value_(Number{v, 0, false}) {}
  Json(const char* s) : value_(std::string(s)) {}
  Json(std::string s) : value_(std::move(s)) {}
  Json(std::string_view s) : value_(std::string(s)) {}
  Json(Array a) : value_(std::move(a)) {}
  Json(Object o) : value_(std::move(o)) {}
  static Json MakeArray() { return Json(Array{}); }
  static Json MakeObject() { return Json(Object{}); }

  Type type() const { return static_cast<Type>(value_.index()); }
  bool is_null() const { return type() == Type::kNull; }
  bool is_bool() const { return type() == Type::kBool; }
  bool is_number() const { return type() == Type::kNumber; }
  bool is_string() const { return type() == Type::kString; }
  bool is_array() const { return type() == Type::kArray; }
  bool is_object() const { return type() == Type::kObject; }
  // True for a number written without fraction or exponent that fits in int64.
  bool is_integer() const { return is_number() && std::get<Number>(value_).is_int; }

  // Accessors throw Error(kInvalidArgument) "expected <type>, found <type>" on a type mismatch; the
  // caller adds where (file, field) by catching or by checking types first.
  bool AsBool() const;
  double AsDouble() const;
  int64_t AsInt() const;  // requires is_integer()
  const std::string& AsString() const;
  const Array& AsArray() const;
  const Object& AsObject() const;
  Array& MutableArray();
  Object& MutableObject();

  // Object member lookup; nullptr when absent or when this is not an object.
  const Json* Find(std::string_view key) const;
  // Sets (replacing) an object member; this must be an object.
  Json& Set(std::string_view key, Json value);
  // Appends to an array; this must be an array.
  Json& Push(Json value);

  // Compact serialisation; strings are escaped, non-ASCII UTF-8 passes through.
  std::string Dump() const;
  void DumpTo(std::string* out) const;

  static const char* TypeName(Type t);

 private:
  struct Number {
    double d;
    int64_t i;
    bool is_int;
  };
  std::variant<std::monostate, bool, Number, std::string, Array, Object> value_;
};

// Appends s as a JSON string literal (with quotes) to out.
void AppendJsonString(std::string_view s, std::string* out);

}  // namespace hymt
