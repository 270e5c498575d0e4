#include "core/utf8.h"

namespace hymt {
namespace {

// Length of the sequence introduced by lead byte b, 0 if b cannot start one.
inline int SequenceLength(uint8_t b) {
  if (b < 0x80) return 1;
  if (b >= 0xc2 && b <= 0xdf) return 2;
  if (b >= 0xe0 && b <= 0xef) return 3;
  if (b >= 0xf0 && b <= 0xf4) return 4;
  return 0;
}

// Validates one sequence of length n at s[i]; returns the code point or -1.
inline int32_t DecodeAt(std::string_view s, size_t i, int n) {
  if (i + n > s.size()) return -1;
  auto byte = [&](size_t k) { return static_cast<uint8_t>(s[i + k]); };
  for (int k = 1; k < n; ++k)
    if ((byte(k) & 0xc0) != 0x80) return -1;
  int32_t cp;
  switch (n) {
    case 1: return byte(0);
    case 2: return ((byte(0) & 0x1f) << 6) | (byte(1) & 0x3f);
    case 3:
      cp = ((byte(0) & 0x0f) << 12) | ((byte(1) & 0x3f) << 6) | (byte(2) & 0x3f);
      if (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff)) return -1;
      return cp;
    case 4:
      cp = ((byte(0) & 0x07) << 18) | ((byte(1) & 0x3f) << 12) | ((byte(2) & 0x3f) << 6) | (byte(3) & 0x3f);
      if (cp < 0x10000 || cp > 0x10ffff) return -1;
      return cp;
  }
  return -1;
}

}  // namespace

size_t FindInvalidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    uint8_t b = static_cast<uint8_t>(s[i]);
    if (b < 0x80) {
      ++i;
      continue;
    }
    int n = SequenceLength(b);
    if (n == 0 || DecodeAt(s, i, n) < 0) return i;
    i += n;
  }
  return std::string_view::npos;
}

int ValidUtf8SequenceLength(std::string_view s, size_t pos) {
  if (pos >= s.size()) return 0;
  int n = SequenceLength(static_cast<uint8_t>(s[pos]));
  if (n == 0 || DecodeAt(s, pos, n) < 0) return 0;
  return n;
}

char32_t DecodeUtf8(std::string_view s, size_t* pos) {
  uint8_t b = static_cast<uint8_t>(s[*pos]);
  if (b < 0x80) {
    ++*pos;
    return b;
  }
  int n = SequenceLength(b);
  int32_t cp = n == 0 ? -1 : DecodeAt(s, *pos, n);
  if (cp < 0) {
    ++*pos;
    return 0xfffd;
  }
  *pos += n;
  return static_cast<char32_t>(cp);
}

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xc0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xe0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else {
    out->push_back(static_cast<char>(0xf0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  }
}

size_t CompleteUtf8Prefix(std::string_view s) {
  // Look back at most 3 bytes for a lead byte whose sequence is cut off by the end of s.
  size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    uint8_t b = static_cast<uint8_t>(s[n - back]);
    if ((b & 0xc0) == 0x80) continue;  // continuation byte: keep looking for its lead
    int len = SequenceLength(b);
    if (len > static_cast<int>(back)) return n - back;  // incomplete sequence at the end
    return n;
  }
  return n;
}

}  // namespace hymt
