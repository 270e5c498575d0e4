#include "server/translation.h"

#include <map>

#include "core/status.h"
#include "server/fields.h"
#include "translate/markup.h"

namespace hymt {
namespace {

// Characters per call of the translator. Ordinary text has a sentence every 100 characters or so, so a
// call submits a few hundred sequences: enough to fill every engine slot, far below its queue bound.
constexpr size_t kBatchChars = 20000;

int Severity(FinishReason r) {
  switch (r) {
    case FinishReason::kStop:
      return 0;
    case FinishReason::kLength:
      return 1;
    case FinishReason::kRepetition:
      return 2;
    default:
      return 3;
  }
}

std::vector<MarkupPiece> SplitDocument(std::string_view text, TextFormat format) {
  switch (format) {
    case TextFormat::kHtml:
      return SplitHtml(text);
    case TextFormat::kMarkdown:
      return SplitMarkdown(text);
    case TextFormat::kSrt:
      return SplitSrt(text);
    case TextFormat::kText:
      break;
  }
  return {};
}

// Everything besides model, languages and text that changes a translation.
std::string CacheOptionsOf(const TranslationContext& context, const TranslateRequest& request,
                           TextFormat format) {
  std::string glossary;
  for (const auto& [s, t] : request.prompt.glossary) glossary += s + "\n" + t + "\n";
  return CacheOptions({{"style", PromptStyleName(context.translator->prompt_style())},
                       {"glossary", glossary},
                       {"context", request.prompt.context},
                       {"max_new_tokens", std::to_string(request.max_new_tokens)},
                       {"split", request.split_sentences ? "sentences" : "lines"},
                       {"unit", format == TextFormat::kText ? "text" : "markup piece"}});
}

}  // namespace

std::string ModelIdentity(const LoadedModel& model, const std::string& weight_type) {
  return StrCat(model.name, "|", model.format, "|", model.WeightBytes(), "|",
                weight_type.empty() ? "stored" : weight_type, "|", model.tokenizer->n_tokens());
}

TranslationOutcome RunTranslation(const TranslationContext& context, const TranslateRequest& request,
                                  TextFormat format) {
  Translator& translator = *context.translator;
  const std::vector<std::string>& served = translator.languages();
  const Language target = RequireLanguage(request.target, served);
  const bool auto_source = request.source.empty() || request.source == "auto";
  if (!auto_source) RequireLanguage(request.source, served);

  // Units: what is translated one by one (a plain text, or a markup piece), in document order.
  struct Document {
    std::vector<MarkupPiece> pieces;  // markup formats only
    std::vector<size_t> units;
  };
  const size_t n = request.texts.size();
  std::vector<Document> docs(n);
  std::vector<std::string> unit_text;
  std::vector<size_t> unit_doc;
  for (size_t t = 0; t < n; ++t) {
    if (format == TextFormat::kText) {
      docs[t].units.push_back(unit_text.size());
      unit_text.push_back(request.texts[t]);
      unit_doc.push_back(t);
      continue;
    }
    docs[t].pieces = SplitDocument(request.texts[t], format);
    for (const MarkupPiece& p : docs[t].pieces) {
      if (!p.translate) continue;
      docs[t].units.push_back(unit_text.size());
      unit_text.push_back(p.source);
      unit_doc.push_back(t);
    }
  }

  TranslationOutcome out;
  out.detected.resize(n);
  for (size_t t = 0; t < n; ++t) {
    if (!auto_source) {
      out.detected[t] = Detection{RequireLanguage(request.source, served).code, 1.0};
      continue;
    }
    std::string plain;
    if (format == TextFormat::kText) {
      plain = request.texts[t];
    } else {
      for (size_t u : docs[t].units) plain += unit_text[u] + "\n";
    }
    std::optional<Detection> d = translator.Detect(plain);
    if (!d) {
      // Nothing to go by (no letters): any other language does, the text passes through unchanged in
      // spirit. The translator decides the same way.
      for (const std::string& code : served)
        if (code != target.code) {
          d = Detection{code, 0.0};
          break;
        }
    }
    if (!d) Fail(ErrorCode::kInvalidArgument, "the model serves no language besides the target");
    out.detected[t] = *d;
  }

  const bool greedy = request.sampling ? request.sampling->greedy() : context.model_greedy;
  TranslationCache* cache = greedy ? context.cache : nullptr;
  const std::string options = cache ? CacheOptionsOf(context, request, format) : std::string();
  auto key = [&](size_t u) {
    return CacheKey{context.model_id, out.detected[unit_doc[u]].code, target.code, options, unit_text[u]};
  };

  std::vector<std::optional<std::string>> unit_out(unit_text.size());
  std::map<std::string, std::vector<size_t>> misses;  // by source language
  for (size_t u = 0; u < unit_text.size(); ++u) {
    const std::string& source = out.detected[unit_doc[u]].code;
    if (source == target.code) {
      unit_out[u] = unit_text[u];
      continue;
    }
    if (cache) {
      if (std::optional<std::string> hit = cache->Get(key(u))) {
        unit_out[u] = std::move(*hit);
        ++out.cache_hits;
        continue;
      }
    }
    misses[source].push_back(u);
  }

  // Batches of units, each one call of the translator, by source language and at most kBatchChars
  // characters: the engine's queue bounds the sequences one call may submit, and a long document must
  // not overflow it.
  std::vector<std::pair<std::string, std::vector<size_t>>> batches;
  for (const auto& [source, units] : misses) {
    size_t chars = 0;
    for (size_t u : units) {
      const size_t n_chars = CountChars(unit_text[u]);
      if (batches.empty() || batches.back().first != source || chars + n_chars > kBatchChars) {
        batches.emplace_back(source, std::vector<size_t>());
        chars = 0;
      }
      batches.back().second.push_back(u);
      chars += n_chars;
    }
  }
  for (const auto& batch : batches) {
    const std::vector<size_t>& units = batch.second;
    TranslateRequest sub = request;
    sub.source = batch.first;
    sub.texts.clear();
    for (size_t u : units) sub.texts.push_back(unit_text[u]);
    sub.on_partial = nullptr;
    if (format == TextFormat::kText && request.on_partial) {
      sub.on_partial = [&request, &units, &unit_doc](size_t i, const std::string& so_far) {
        request.on_partial(unit_doc[units[i]], so_far);
      };
    }
    TranslateResult r = translator.Translate(sub);
    for (size_t i = 0; i < units.size(); ++i) unit_out[units[i]] = r.translations[i];
    out.input_tokens += r.input_tokens;
    out.output_tokens += r.output_tokens;
    out.segments += r.segments;
    if (Severity(r.finish) > Severity(out.finish)) out.finish = r.finish;
    // A translation cut short (length, repetition) is not worth remembering.
    if (cache && r.finish == FinishReason::kStop)
      for (size_t i = 0; i < units.size(); ++i) cache->Put(key(units[i]), r.translations[i]);
  }

  out.translations.resize(n);
  for (size_t t = 0; t < n; ++t) {
    if (out.detected[t].code == target.code) {
      out.translations[t] = request.texts[t];  // already in the target language: untouched, markup and all
    } else if (format == TextFormat::kText) {
      out.translations[t] = *unit_out[docs[t].units[0]];
    } else {
      std::vector<std::string> pieces;
      for (size_t u : docs[t].units) pieces.push_back(*unit_out[u]);
      out.translations[t] = JoinMarkup(docs[t].pieces, pieces);
    }
  }
  return out;
}

}  // namespace hymt
