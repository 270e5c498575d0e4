// UTF-8 validation and decoding (no normalisation here; see tokenizer/ for that).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace hymt {

// Returns the byte offset of the first invalid sequence, or npos if `s` is valid UTF-8
// (shortest form, no surrogates, at most U+10FFFF).
size_t FindInvalidUtf8(std::string_view s);
inline bool IsValidUtf8(std::string_view s) { return FindInvalidUtf8(s) == std::string_view::npos; }

// Length (1-4) of the valid UTF-8 sequence starting at s[pos], or 0 if none starts there.
int ValidUtf8SequenceLength(std::string_view s, size_t pos);

// Decodes the code point at s[*pos] and advances *pos. Invalid bytes decode as U+FFFD and advance by
// one byte. Requires *pos < s.size().
char32_t DecodeUtf8(std::string_view s, size_t* pos);

// Appends the UTF-8 encoding of cp (cp must be a valid scalar value).
void AppendUtf8(char32_t cp, std::string* out);

// Length of the longest prefix of `s` that does not end inside a multi-byte character: the part that
// can be emitted now when more bytes may follow (streaming decode).
size_t CompleteUtf8Prefix(std::string_view s);

}  // namespace hymt
