#include "core/strings.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace hymt {

std::vector<std::string> StrSplit(std::string_view s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t pos = s.find(sep, start);
    if (pos == std::string_view::npos) {
      out.emplace_back(s.substr(start));
      return out;
    }
    out.emplace_back(s.substr(start, pos - start));
    start = pos + 1;
  }
}

std::string FormatBytes(uint64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int unit = 0;
  while (v >= 1024.0 && unit < 4) {
    v /= 1024.0;
    ++unit;
  }
  char buf[32];
  if (unit == 0) {
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  } else {
    std::snprintf(buf, sizeof buf, "%.2f %s", v, kUnits[unit]);
  }
  return buf;
}

bool ParseBytes(std::string_view text, uint64_t* bytes) {
  std::string s(text);
  if (s.empty()) return false;
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || !std::isfinite(v) || v < 0) return false;
  std::string unit(end);
  for (auto& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  double mul = 1;
  if (unit.empty() || unit == "B") {
    mul = 1;
  } else if (unit == "K" || unit == "KB" || unit == "KIB") {
    mul = 1024.0;
  } else if (unit == "M" || unit == "MB" || unit == "MIB") {
    mul = 1024.0 * 1024.0;
  } else if (unit == "G" || unit == "GB" || unit == "GIB") {
    mul = 1024.0 * 1024.0 * 1024.0;
  } else if (unit == "T" || unit == "TB" || unit == "TIB") {
    mul = 1024.0 * 1024.0 * 1024.0 * 1024.0;
  } else {
    return false;
  }
  double total = v * mul;
  if (total > 1.8e19) return false;
  *bytes = static_cast<uint64_t>(total);
  return true;
}

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && s.substr(0, prefix.size()) == prefix;
}

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

std::string ShapeString(const std::vector<int64_t>& shape) { return "[" + StrJoin(shape, ", ") + "]"; }

}  // namespace hymt
