// What the translation routes run: texts in a format (plain, HTML, Markdown, SRT) through the
// Translator, with per-text language detection and the optional translation cache.
//
// Each text is a document. Plain text goes to the translator as it is (it splits sentences). A markup
// document is split by markup.h into its translatable pieces, which are translated and put back in
// place, so tags, code, URLs and timings are untouched. With source "auto", each document's language is
// detected once (on its text, markup left out) and its pieces are translated from that language. The
// cache, when there is one, answers units (a plain text, or a piece) it has seen translated the same
// way; only greedy translations are cached, since only they are repeatable.
#pragma once

#include <string>
#include <vector>

#include "server/requests.h"
#include "translate/cache.h"
#include "translate/translator.h"

namespace hymt {

struct TranslationContext {
  Translator* translator = nullptr;
  TranslationCache* cache = nullptr;  // may be null
  std::string model_id;               // the model's identity in cache keys
  bool model_greedy = true;           // the model's default decoding is greedy
};

struct TranslationOutcome {
  std::vector<std::string> translations;  // per text
  std::vector<Detection> detected;        // per text: the detected (or given) source
  int64_t input_tokens = 0, output_tokens = 0;
  int32_t segments = 0;    // segments the model translated
  int32_t cache_hits = 0;  // units answered by the cache
  FinishReason finish = FinishReason::kStop;
};

// `request.texts` are the documents; its on_partial (plain text only) reports per document. Throws what
// Translator::Translate throws.
TranslationOutcome RunTranslation(const TranslationContext& context, const TranslateRequest& request,
                                  TextFormat format);

// The model's identity for cache keys: its name, file format, stored weight bytes, the weight type it
// was converted to at load (if any) and its vocabulary size.
std::string ModelIdentity(const LoadedModel& model, const std::string& weight_type);

}  // namespace hymt
