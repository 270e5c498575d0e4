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

struct SentenceSegmenterOptions {
  // A sentence longer than this (in code points) is split further, at clause punctuation, else at
  // whitespace, else at a word boundary, so that no segment is too long for one model call.
  size_t max_segment_chars = 400;
};

// Splits into sentences with ICU's sentence BreakIterator, line by line, plus the rules ICU lacks:
// Tibetan shad (། ༎) and Khmer khan (។ ៕) end sentences, the Burmese little section (၊) does not.
// Untranslated segments: leading and trailing whitespace of lines and sentences, line breaks, and any
// piece without a letter (numbers, punctuation, emoji). Invalid UTF-8 is kept byte for byte inside the
// segment it falls in (it reads as U+FFFD). Thread-safe. Defined only when built with HYMT_SERVER.
std::unique_ptr<Segmenter> CreateSentenceSegmenter(const SentenceSegmenterOptions& options = {});

struct Detection {
  std::string code;       // hymt language code
  double confidence = 0;  // 0..1
};

class LanguageDetector {
 public:
  virtual ~LanguageDetector() = default;
  // The most likely language among `candidates` (hymt codes; empty: all), or nullopt when unsure.
  virtual std::optional<Detection> Detect(std::string_view text,
                                          const std::vector<std::string>& candidates) const = 0;
};

// CLD2 (full tables) plus a Cantonese check. Defined only when built with HYMT_SERVER.
std::unique_ptr<LanguageDetector> CreateLanguageDetector();

}  // namespace hymt
