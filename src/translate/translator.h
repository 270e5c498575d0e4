// The translation pipeline: languages -> segments -> prompts -> one batch of engine sequences ->
// translations reassembled in order. Used by the CLI and the server; it sees no JSON and no HTTP.
#pragma once

#include <cstdint>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/engine.h"
#include "runtime/loader.h"
#include "translate/languages.h"
#include "translate/prompts.h"
#include "translate/segmenter.h"

namespace hymt {

struct TranslateRequest {
  std::vector<std::string> texts;    // each translated independently (UTF-8, validated by the caller)
  std::string source = "auto";       // a language code, or "auto" to detect per text
  std::string target;
  PromptOptions prompt;              // glossary / context
  std::optional<SamplingParams> sampling;  // default: the model's generation defaults
  int32_t max_new_tokens = 0;        // per segment; 0: proportional to the segment's length
  bool split_sentences = true;       // false: each line is one segment
  uint64_t group = 0;                // fairness group (0: one is assigned)
  std::optional<std::chrono::steady_clock::time_point> deadline;
  std::shared_ptr<std::atomic<bool>> cancelled;  // set by the caller (e.g. a client disconnected)
  // Called (from the engine thread) with a text's translation so far whenever it grows.
  std::function<void(size_t text_index, const std::string& so_far)> on_partial;
};

struct TranslateResult {
  std::vector<std::string> translations;
  std::vector<Detection> detected;   // per text: the detected (or given) source language
  int64_t input_tokens = 0;          // prompt tokens over all segments
  int64_t output_tokens = 0;
  int32_t segments = 0;
  // The worst way a segment ended (kStop when all finished normally).
  FinishReason finish = FinishReason::kStop;
};

class Translator {
 public:
  // The model, engine and segmenter must outlive the translator; detector may be null (then "auto"
  // is refused).
  Translator(const LoadedModel& model, Engine& engine, std::shared_ptr<const Segmenter> segmenter,
             std::shared_ptr<const LanguageDetector> detector);

  // Blocks until every text is translated. Throws Error(kInvalidArgument) for unknown or unserved
  // languages and undetectable text, Error(kUnavailable) when the engine refuses work (queue full),
  // Error(kCancelled) / Error(kDeadlineExceeded) when cancelled or late.
  TranslateResult Translate(const TranslateRequest& request);

  // Detects the language of a text among the model's languages.
  std::optional<Detection> Detect(std::string_view text) const;

  // The model's languages (its declared list, else all 38).
  const std::vector<std::string>& languages() const { return languages_; }
  PromptStyle prompt_style() const { return style_; }
  void set_prompt_style(PromptStyle s) { style_ = s; }

  // The full prompt text (chat template included) for one segment; exposed for tests and `--dry-run`.
  std::string RenderPrompt(const Language& src, const Language& tgt, std::string_view text,
                           const PromptOptions& options) const;

 private:
  const LoadedModel& model_;
  Engine& engine_;
  std::shared_ptr<const Segmenter> segmenter_;
  std::shared_ptr<const LanguageDetector> detector_;
  std::vector<std::string> languages_;
  PromptStyle style_;
  ChatFamily family_;
  std::atomic<uint64_t> next_group_{1ull << 40};
};

}  // namespace hymt
