// Small string helpers used everywhere (no std::format: GCC 12 and clang 14 lack it).
#pragma once

#include <cstdint>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace hymt {

// Concatenates the stream representations of all arguments.
template <typename... Args>
std::string StrCat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

// Joins items with a separator; items must be streamable.
template <typename Container>
std::string StrJoin(const Container& items, std::string_view sep) {
  std::ostringstream os;
  bool first = true;
  for (const auto& item : items) {
    if (!first) os << sep;
    os << item;
    first = false;
  }
  return os.str();
}

// Splits on a single character; keeps empty fields.
std::vector<std::string> StrSplit(std::string_view s, char sep);

// Human-readable byte count: "1.50 GiB", "512 B".
std::string FormatBytes(uint64_t bytes);

// Parses sizes such as "6G", "512M", "1.5GiB", "800000"; returns false on anything else.
bool ParseBytes(std::string_view text, uint64_t* bytes);

bool StartsWith(std::string_view s, std::string_view prefix);
bool EndsWith(std::string_view s, std::string_view suffix);

// Shape text such as "[4096, 128]".
std::string ShapeString(const std::vector<int64_t>& shape);

}  // namespace hymt
