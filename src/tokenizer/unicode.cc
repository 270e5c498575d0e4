#include "tokenizer/unicode.h"

#include <algorithm>
#include <string>
#include <unordered_map>

#include "core/status.h"
#include "core/utf8.h"

namespace hymt {
namespace {

struct FlagRange {
  uint32_t first, last, value;
};
struct Decomposition {
  uint32_t cp, first, second;  // second == 0: a singleton decomposition
};
struct Composition {
  uint32_t first, second, composite;
};

#include "tokenizer/unicode_tables.inc"

constexpr char32_t kMaxCodePoint = 0x10ffff;
// Hangul syllables compose and decompose by arithmetic (Unicode 15.0, section 3.12).
constexpr char32_t kSBase = 0xac00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11a7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28;
constexpr char32_t kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;
// Bytes that are not valid UTF-8 travel through NFC as these values (above U+10FFFF): class 0, never
// composing, written back as the original byte.
constexpr char32_t kInvalidByteBase = 0x110000;

int CombiningClass(char32_t cp) {
  auto it = std::upper_bound(std::begin(kCombiningClassRanges), std::end(kCombiningClassRanges), cp,
                             [](char32_t c, const FlagRange& r) { return c < r.first; });
  if (it == std::begin(kCombiningClassRanges)) return 0;
  --it;
  return cp <= it->last ? static_cast<int>(it->value) : 0;
}

const Decomposition* FindDecomposition(char32_t cp) {
  auto it = std::lower_bound(std::begin(kDecompositions), std::end(kDecompositions), cp,
                             [](const Decomposition& d, char32_t c) { return d.cp < c; });
  return it != std::end(kDecompositions) && it->cp == cp ? it : nullptr;
}

// The primary composite of (a, b), or 0 when they do not compose.
char32_t Compose(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount)
    return a + (b - kTBase);
  auto less = [](const Composition& c, std::pair<char32_t, char32_t> key) {
    return c.first < key.first || (c.first == key.first && c.second < key.second);
  };
  auto it = std::lower_bound(std::begin(kCompositions), std::end(kCompositions), std::make_pair(a, b), less);
  if (it != std::end(kCompositions) && it->first == a && it->second == b) return it->composite;
  return 0;
}

// Appends the full canonical decomposition of cp.
void Decompose(char32_t cp, std::u32string* out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    char32_t s = cp - kSBase;
    out->push_back(kLBase + s / kNCount);
    out->push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out->push_back(kTBase + s % kTCount);
    return;
  }
  const Decomposition* d = cp < kInvalidByteBase ? FindDecomposition(cp) : nullptr;
  if (d == nullptr) {
    out->push_back(cp);
    return;
  }
  Decompose(d->first, out);
  if (d->second != 0) Decompose(d->second, out);
}

int ClassOf(char32_t cp) {
  return cp < kInvalidByteBase ? CombiningClass(cp) : 0;
}

}  // namespace

UnicodeFlagTable::UnicodeFlagTable() {
  std::vector<uint8_t> flat(kMaxCodePoint + 1, 0);
  for (const FlagRange& r : kFlagRanges)
    for (uint32_t c = r.first; c <= r.last; ++c) flat[c] = static_cast<uint8_t>(r.value);
  for (const FlagRange& r : kCombiningClassRanges)
    for (uint32_t c = r.first; c <= r.last; ++c) flat[c] |= kUnicodeNfcUnstable;
  for (const Decomposition& d : kDecompositions) flat[d.cp] |= kUnicodeNfcUnstable;
  for (const Composition& c : kCompositions) flat[c.second] |= kUnicodeNfcUnstable;
  // Hangul vowels and trailing consonants compose with what precedes them.
  for (char32_t c = kVBase; c < kVBase + kVCount; ++c) flat[c] |= kUnicodeNfcUnstable;
  for (char32_t c = kTBase + 1; c < kTBase + kTCount; ++c) flat[c] |= kUnicodeNfcUnstable;

  constexpr size_t kBlockSize = size_t{1} << kBlockBits;
  std::unordered_map<std::string, uint16_t> seen;
  index_.resize(flat.size() / kBlockSize);
  for (size_t b = 0; b < index_.size(); ++b) {
    std::string block(reinterpret_cast<const char*>(flat.data() + b * kBlockSize), kBlockSize);
    auto [it, inserted] = seen.emplace(block, static_cast<uint16_t>(seen.size()));
    if (inserted)
      blocks_.insert(blocks_.end(), flat.begin() + b * kBlockSize, flat.begin() + (b + 1) * kBlockSize);
    index_[b] = it->second;
  }
  HYMT_CHECK(seen.size() < 65536);
}

const UnicodeFlagTable& UnicodeFlagTable::Get() {
  static const UnicodeFlagTable table;
  return table;
}

const char* TokenizerUnicodeVersion() {
  return kTokenizerUnicodeVersion;
}

bool IsNfcQuick(std::string_view text) {
  const UnicodeFlagTable& table = UnicodeFlagTable::Get();
  size_t pos = 0;
  while (pos < text.size()) {
    if (static_cast<uint8_t>(text[pos]) < 0x80) {
      ++pos;
      continue;
    }
    int len = ValidUtf8SequenceLength(text, pos);
    if (len == 0) {
      ++pos;  // invalid bytes pass through unchanged
      continue;
    }
    size_t p = pos;
    char32_t cp = DecodeUtf8(text, &p);
    if (table.Flags(cp) & kUnicodeNfcUnstable) return false;
    pos += len;
  }
  return true;
}

void AppendNfc(std::string_view text, std::string* out) {
  if (IsNfcQuick(text)) {
    out->append(text);
    return;
  }
  // Full canonical decomposition, invalid bytes kept as markers.
  std::u32string buf;
  buf.reserve(text.size() + 8);
  for (size_t pos = 0; pos < text.size();) {
    if (ValidUtf8SequenceLength(text, pos) == 0) {
      buf.push_back(kInvalidByteBase + static_cast<uint8_t>(text[pos]));
      ++pos;
      continue;
    }
    Decompose(DecodeUtf8(text, &pos), &buf);
  }
  // Canonical ordering: a stable sort of each run of non-zero combining classes.
  std::vector<int> classes(buf.size());
  for (size_t i = 0; i < buf.size(); ++i) classes[i] = ClassOf(buf[i]);
  for (size_t i = 0; i < buf.size();) {
    if (classes[i] == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < buf.size() && classes[j] != 0) ++j;
    for (size_t a = i + 1; a < j; ++a)  // insertion sort: runs are short and must stay stable
      for (size_t b = a; b > i && classes[b - 1] > classes[b]; --b) {
        std::swap(classes[b - 1], classes[b]);
        std::swap(buf[b - 1], buf[b]);
      }
    i = j;
  }
  // Canonical composition: a character joins the last starter unless blocked by one in between
  // whose class is 0 or not lower than its own.
  size_t out_len = 0;
  size_t starter = std::u32string::npos;
  int last_class = 0;
  for (size_t i = 0; i < buf.size(); ++i) {
    char32_t c = buf[i];
    int cls = classes[i];
    if (starter != std::u32string::npos && c < kInvalidByteBase && buf[starter] < kInvalidByteBase) {
      bool adjacent = out_len == starter + 1;
      if (adjacent || (last_class != 0 && last_class < cls)) {
        char32_t composite = Compose(buf[starter], c);
        if (composite != 0) {
          buf[starter] = composite;
          continue;
        }
      }
    }
    if (cls == 0) starter = out_len;
    last_class = cls;
    buf[out_len++] = c;
  }
  for (size_t i = 0; i < out_len; ++i) {
    if (buf[i] >= kInvalidByteBase) {
      out->push_back(static_cast<char>(buf[i] - kInvalidByteBase));
    } else {
      AppendUtf8(buf[i], out);
    }
  }
}

}  // namespace hymt
