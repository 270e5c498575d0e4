#include "translate/translator.h"

#include <algorithm>
#include <exception>
#include <condition_variable>
#include <mutex>

#include "core/status.h"
#include "core/utf8.h"

namespace hymt {
namespace {

// Output budget per segment: translations rarely need more than a few tokens per source token (some
// scripts, e.g. Tibetan or Burmese, tokenise longer), plus room for short inputs.
constexpr int32_t kOutputTokensPerInputToken = 4;
constexpr int32_t kOutputTokensSlack = 64;
// A generation repeating one short pattern for this many tokens is stopped.
constexpr int32_t kLoopGuardTokens = 64;
// Segments of one request queued on the engine at once; more are submitted as these finish.
constexpr size_t kMaxInFlightSegments = 256;

}  // namespace

Translator::Translator(const LoadedModel& model, Engine& engine, std::shared_ptr<const Segmenter> segmenter,
                       std::shared_ptr<const LanguageDetector> detector)
    : model_(model), engine_(engine), segmenter_(std::move(segmenter)), detector_(std::move(detector)) {
  languages_ = model.languages;
  if (languages_.empty())
    for (const Language& l : AllLanguages()) languages_.push_back(l.code);
  style_ = PromptStyleFromModelName(model.name);
  PromptStyle declared;
  if (!model.prompt_style.empty() && ParsePromptStyle(model.prompt_style, &declared)) style_ = declared;
  family_ = model.tokenizer->TokenId("<|startoftext|>") ? ChatFamily::kHunyuan7B : ChatFamily::kHy18B;
}

std::optional<Detection> Translator::Detect(std::string_view text) const {
  if (!detector_) return std::nullopt;
  return detector_->Detect(text, languages_);
}

std::string Translator::RenderPrompt(const Language& src, const Language& tgt, std::string_view text,
                                     const PromptOptions& options) const {
  return RenderChat(family_, RenderTranslationPrompt(style_, src, tgt, text, options));
}

TranslateResult Translator::Translate(const TranslateRequest& request) {
  const Language tgt = RequireLanguage(request.target, languages_);
  const bool auto_source = request.source.empty() || request.source == "auto";
  std::optional<Language> fixed_src;
  if (!auto_source) fixed_src = RequireLanguage(request.source, languages_);

  TranslateResult result;
  result.translations.resize(request.texts.size());
  result.detected.resize(request.texts.size());

  // Per text: its segments, and for each translatable segment the engine's output so far.
  struct Piece {
    size_t text = 0;
    size_t segment = 0;
    std::string output;
    bool done = false;
    GenerationResult outcome;
  };
  std::vector<std::vector<Segment>> segments(request.texts.size());
  std::vector<Piece> pieces;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<Language> piece_src;

  const Tokenizer& tok = *model_.tokenizer;
  for (size_t t = 0; t < request.texts.size(); ++t) {
    const std::string& text = request.texts[t];
    if (!IsValidUtf8(text)) Fail(ErrorCode::kInvalidArgument, "text ", t, " is not valid UTF-8");
    Language src;
    if (fixed_src) {
      src = *fixed_src;
      result.detected[t] = Detection{src.code, 1.0};
    } else {
      if (!detector_) Fail(ErrorCode::kInvalidArgument, "source language detection is not available; give a source");
      std::optional<Detection> d = detector_->Detect(text, languages_);
      if (!d) {
        // Nothing to detect (empty or only punctuation/digits): fall back to the first language that is
        // not the target, so the text passes through the model unchanged in spirit.
        d = Detection{tgt.code == "en" ? "zh" : "en", 0.0};
      }
      result.detected[t] = *d;
      src = RequireLanguage(d->code, languages_);
    }
    segments[t] = request.split_sentences ? segmenter_->Split(text, src) : CreateLineSegmenter()->Split(text, src);
    for (size_t s = 0; s < segments[t].size(); ++s) {
      if (!segments[t][s].translate) continue;
      if (src.code == tgt.code) {
        // Same language: nothing to translate.
        segments[t][s].translate = false;
        continue;
      }
      Piece p;
      p.text = t;
      p.segment = s;
      pieces.push_back(p);
      // The request's text is never parsed for special tokens (see EncodeChat).
      prompts.push_back(EncodeChat(
          tok, family_, RenderTranslationPrompt(style_, src, tgt, segments[t][s].text, request.prompt)));
      piece_src.push_back(src);
    }
  }

  // The pieces run on the engine in waves of at most kMaxInFlightSegments (a 10,000-sentence document
  // does not flood the engine's queue), and this thread waits for all of them.
  std::mutex mu;
  std::condition_variable cv;
  size_t in_flight = 0, finished = 0;
  std::vector<uint64_t> ids;
  const uint64_t group = request.group != 0 ? request.group : next_group_.fetch_add(1);
  const SamplingParams sampling = request.sampling.value_or([&] {
    SamplingParams p;
    const GenerationDefaults& g = model_.generation;
    if (!g.do_sample) return SamplingParams::Greedy();
    p.temperature = g.temperature;
    p.top_k = g.top_k;
    p.top_p = g.top_p;
    p.repetition_penalty = g.repetition_penalty;
    return p;
  }());

  // Text t's translation so far: its untranslated segments and its pieces' outputs, in order.
  std::vector<size_t> first_piece(request.texts.size() + 1, pieces.size());
  for (size_t i = pieces.size(); i-- > 0;) first_piece[pieces[i].text] = i;
  for (size_t t = request.texts.size(); t-- > 0;) first_piece[t] = std::min(first_piece[t], first_piece[t + 1]);
  auto assemble = [&](size_t t) {
    std::string out;
    size_t k = first_piece[t];
    for (const Segment& seg : segments[t]) out += seg.translate ? pieces[k++].output : seg.text;
    return out;
  };

  auto submit = [&](size_t i) {
    GenerationRequest g;
    g.prompt = prompts[i];
    g.sampling = sampling;
    g.sampling.seed = sampling.seed + i;
    const int32_t src_tokens =
        static_cast<int32_t>(tok.Encode(segments[pieces[i].text][pieces[i].segment].text, false).size());
    const int32_t cap = kOutputTokensPerInputToken * src_tokens + kOutputTokensSlack;
    const int32_t limit = request.max_new_tokens > 0 ? request.max_new_tokens : model_.generation.max_new_tokens;
    g.max_new_tokens = std::max<int32_t>(1, std::min(cap, limit));
    g.stop_ids = model_.stop_ids;
    g.loop_guard_tokens = kLoopGuardTokens;
    g.group = group;
    g.deadline = request.deadline;
    auto decoder = std::make_shared<StreamDecoder>(tok);
    g.on_token = [&, i, decoder](int32_t token) {
      std::string piece = decoder->Push(token);
      if (piece.empty()) return true;
      std::string so_far;
      {
        std::lock_guard<std::mutex> lock(mu);
        pieces[i].output += piece;
        if (request.on_partial) so_far = assemble(pieces[i].text);
      }
      if (request.on_partial) request.on_partial(pieces[i].text, so_far);
      return !(request.cancelled && request.cancelled->load());
    };
    g.on_done = [&, i, decoder](const GenerationResult& r) {
      std::lock_guard<std::mutex> lock(mu);
      pieces[i].output += decoder->Finish();
      pieces[i].done = true;
      pieces[i].outcome = r;
      --in_flight;
      ++finished;
      cv.notify_all();
    };
    ids.push_back(engine_.Submit(std::move(g)));
  };

  std::exception_ptr submit_error;
  bool stop = false, cancel_sent = false;
  size_t next = 0;
  {
    std::unique_lock<std::mutex> lock(mu);
    while (true) {
      while (!stop && next < pieces.size() && in_flight < kMaxInFlightSegments) {
        const size_t i = next++;
        ++in_flight;
        lock.unlock();
        try {
          submit(i);
        } catch (...) {
          submit_error = std::current_exception();  // e.g. the queue is full: take back what runs, then report
        }
        lock.lock();
        if (submit_error) {
          --in_flight;
          stop = true;
        }
      }
      if (finished == ids.size() && (stop || next == pieces.size())) break;
      cv.wait_for(lock, std::chrono::milliseconds(50));
      if (!cancel_sent && (submit_error || (request.cancelled && request.cancelled->load()))) {
        cancel_sent = stop = true;
        std::vector<uint64_t> to_cancel = ids;
        lock.unlock();
        for (uint64_t id : to_cancel) engine_.Cancel(id);
        lock.lock();
      }
    }
  }
  if (submit_error) std::rethrow_exception(submit_error);
  if (next < pieces.size()) Fail(ErrorCode::kCancelled, "translation cancelled");

  auto severity = [](FinishReason r) {
    switch (r) {
      case FinishReason::kStop: return 0;
      case FinishReason::kLength: return 1;
      case FinishReason::kRepetition: return 2;
      case FinishReason::kDeadline: return 3;
      case FinishReason::kCancelled: return 4;
      case FinishReason::kError: return 5;
    }
    return 5;
  };
  std::string error;
  for (const Piece& p : pieces) {
    result.input_tokens += p.outcome.prompt_tokens;
    result.output_tokens += static_cast<int64_t>(p.outcome.tokens.size());
    if (severity(p.outcome.reason) > severity(result.finish)) result.finish = p.outcome.reason;
    if (p.outcome.reason == FinishReason::kError) error = p.outcome.error;
  }
  result.segments = static_cast<int32_t>(pieces.size());
  if (result.finish == FinishReason::kError) Fail(ErrorCode::kInternal, "translation failed: ", error);
  if (result.finish == FinishReason::kCancelled) Fail(ErrorCode::kCancelled, "translation cancelled");
  if (result.finish == FinishReason::kDeadline) Fail(ErrorCode::kDeadlineExceeded, "translation ran past its deadline");
  for (size_t t = 0; t < request.texts.size(); ++t) result.translations[t] = assemble(t);
  return result;
}

}  // namespace hymt
