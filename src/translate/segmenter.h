// Splitting input into the pieces that are translated one by one, keeping everything between them
// (whitespace, newlines, blank lines) exactly, so the output can be put back together in order.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "translate/languages.h"

namespace hymt {

struct Segment {
  std::string text;
  bool translate = true;  // false: copied to the output as it is (whitespace, separators, markup)
};

class Segmenter {
 public:
  virtual ~Segmenter() = default;
  // Splits text written in `lang`. The concatenation of the segments' text equals the input.
  virtual std::vector<Segment> Split(std::string_view text, const Language& lang) const = 0;
};

// Splits at line breaks only: each non-blank line is one segment; line breaks and leading/trailing
// whitespace of a line are kept untranslated. Needs no system library (used on bare GPU hosts).
std::unique_ptr<Segmenter> CreateLineSegmenter();

// Splits into sentences with ICU's sentence BreakIterator (with care for Tibetan shad, CJK and
// Arabic-script punctuation), inside lines and paragraphs. Defined only when built with HYMT_SERVER.
std::unique_ptr<Segmenter> CreateSentenceSegmenter();

struct Detection {
  std::string code;        // hymt language code
  double confidence = 0;   // 0..1
};

class LanguageDetector {
 public:
  virtual ~LanguageDetector() = default;
  // The most likely language among `candidates` (hymt codes; empty: all), or nullopt when unsure.
  virtual std::optional<Detection> Detect(std::string_view text, const std::vector<std::string>& candidates) const = 0;
};

// CLD2 (full tables) plus a Cantonese check. Defined only when built with HYMT_SERVER.
std::unique_ptr<LanguageDetector> CreateLanguageDetector();

}  // namespace hymt
