#include "server/chat.h"

#include <algorithm>
#include <condition_variable>
#include <mutex>

#include "core/status.h"
#include "translate/prompts.h"

namespace hymt {
namespace {

// Same guard as the translation pipeline: a generation repeating one short pattern this long is stopped.
constexpr int32_t kLoopGuardTokens = 64;
// Fairness groups of chat requests; far from the translator's range (which starts at 2^40).
std::atomic<uint64_t> g_next_group{1ull << 50};

}  // namespace

std::vector<PromptPiece> ConversationPieces(const LoadedModel& model,
                                            const std::vector<ChatMessage>& messages) {
  const Tokenizer& tok = *model.tokenizer;
  const bool is_7b = tok.TokenId("<|startoftext|>").has_value();
  // The template's markup around one user turn, split at the places RenderChat puts the texts.
  const std::string kSystemSlot = "\x01", kUserSlot = "\x02";
  std::string end_of_answer = "<|eos|>";
  if (!is_7b && !model.stop_ids.empty()) end_of_answer = tok.TokenBytes(model.stop_ids.front());
  const ChatFamily family = is_7b ? ChatFamily::kHunyuan7B : ChatFamily::kHy18B;

  std::vector<PromptPiece> pieces;
  auto add = [&](std::string_view text, bool markup) {
    if (text.empty()) return;
    if (!pieces.empty() && pieces.back().is_markup == markup) {
      pieces.back().text += text;
    } else {
      pieces.push_back(PromptPiece{std::string(text), markup});
    }
  };
  std::string_view system;
  size_t i = 0;
  if (!messages.empty() && messages[0].role == ChatMessage::Role::kSystem) system = messages[i++].content;
  bool first = true;
  for (; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == ChatMessage::Role::kAssistant) {
      add(m.content, false);
      add(end_of_answer, true);
      continue;
    }
    // Render the turn with placeholders, then swap the placeholders for the real texts.
    const bool with_system = first && !system.empty();
    const std::string turn =
        RenderChat(family, kUserSlot, with_system ? std::string_view(kSystemSlot) : std::string_view());
    first = false;
    size_t pos = 0;
    while (pos < turn.size()) {
      size_t next = turn.find_first_of(kSystemSlot + kUserSlot, pos);
      add(std::string_view(turn).substr(pos, next - pos), true);
      if (next == std::string::npos) break;
      add(turn[next] == kSystemSlot[0] ? system : std::string_view(m.content), false);
      pos = next + 1;
    }
  }
  return pieces;
}

std::string RenderConversation(const LoadedModel& model, const std::vector<ChatMessage>& messages) {
  std::string out;
  for (const PromptPiece& p : ConversationPieces(model, messages)) out += p.text;
  return out;
}

std::vector<int32_t> EncodeConversation(const LoadedModel& model, const std::vector<ChatMessage>& messages) {
  std::vector<int32_t> ids;
  for (const PromptPiece& p : ConversationPieces(model, messages)) {
    std::vector<int32_t> part = model.tokenizer->Encode(p.text, p.is_markup);
    ids.insert(ids.end(), part.begin(), part.end());
  }
  return ids;
}

std::string StopMatcher::Push(std::string_view text, bool* stopped) {
  *stopped = false;
  held_.append(text);
  size_t cut = std::string::npos;
  for (const std::string& s : stops_) cut = std::min(cut, held_.find(s));
  if (cut != std::string::npos) {
    std::string out = held_.substr(0, cut);
    held_.clear();
    *stopped = true;
    return out;
  }
  // Keep the longest tail that is the beginning of some stop string.
  size_t keep = 0;
  for (const std::string& s : stops_) {
    for (size_t k = std::min(s.size() - 1, held_.size()); k > keep; --k) {
      if (held_.compare(held_.size() - k, k, s, 0, k) == 0) {
        keep = k;
        break;
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopMatcher::Finish() {
  std::string out;
  out.swap(held_);
  return out;
}

const char* OpenAiFinishReason(FinishReason r) {
  return r == FinishReason::kStop ? "stop" : "length";
}

ChatOutcome RunChat(const LoadedModel& model, Engine& engine, const ChatGeneration& gen) {
  struct Choice {
    std::unique_ptr<StreamDecoder> decoder;
    std::unique_ptr<StopMatcher> stop;
    std::string text;
    bool stopped_by_string = false;
    GenerationResult result;
  };
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Choice> choices(static_cast<size_t>(gen.n));
  size_t remaining = choices.size();
  std::vector<uint64_t> ids;
  const uint64_t group = g_next_group.fetch_add(1);

  for (Choice& c : choices) {
    c.decoder = std::make_unique<StreamDecoder>(*model.tokenizer);
    c.stop = std::make_unique<StopMatcher>(gen.stop);
  }
  auto cancel_all = [&] {
    for (uint64_t id : ids) engine.Cancel(id);
  };
  try {
    for (int i = 0; i < gen.n; ++i) {
      Choice* c = &choices[static_cast<size_t>(i)];
      GenerationRequest g;
      g.prompt = gen.prompt;
      g.sampling = gen.sampling;
      g.sampling.seed = gen.sampling.seed + static_cast<uint64_t>(i);
      g.max_new_tokens = gen.max_tokens;
      g.stop_ids = model.stop_ids;
      g.loop_guard_tokens = kLoopGuardTokens;
      g.group = group;
      g.deadline = gen.deadline;
      // Both callbacks run on the engine thread; `mu` guards the choice against the waiting thread.
      g.on_token = [&, i, c](int32_t token) {
        bool stopped = false;
        std::string delta;
        {
          std::lock_guard<std::mutex> lock(mu);
          delta = c->stop->Push(c->decoder->Push(token), &stopped);
          c->text += delta;
          c->stopped_by_string = stopped;
        }
        if (!delta.empty() && gen.on_delta) gen.on_delta(i, delta);
        return !stopped && !(gen.cancelled && gen.cancelled->load());
      };
      g.on_done = [&, i, c](const GenerationResult& r) {
        std::string delta;
        {
          std::lock_guard<std::mutex> lock(mu);
          if (!c->stopped_by_string) {
            bool stopped = false;
            delta = c->stop->Push(c->decoder->Finish(), &stopped);
            c->stopped_by_string = stopped;
            if (!stopped) delta += c->stop->Finish();
            c->text += delta;
          }
          c->result = r;
        }
        if (!delta.empty() && gen.on_delta) gen.on_delta(i, delta);
        std::lock_guard<std::mutex> lock(mu);
        --remaining;
        cv.notify_all();
      };
      ids.push_back(engine.Submit(std::move(g)));
    }
  } catch (...) {
    cancel_all();
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return remaining == choices.size() - ids.size(); });
    throw;
  }

  {
    std::unique_lock<std::mutex> lock(mu);
    bool cancel_sent = false;
    while (remaining > 0) {
      cv.wait_for(lock, std::chrono::milliseconds(50));
      if (!cancel_sent && gen.cancelled && gen.cancelled->load()) {
        cancel_sent = true;
        lock.unlock();
        cancel_all();
        lock.lock();
      }
    }
  }

  ChatOutcome out;
  for (Choice& c : choices) {
    const GenerationResult& r = c.result;
    if (r.reason == FinishReason::kError) Fail(ErrorCode::kInternal, "generation failed: ", r.error);
    if (r.reason == FinishReason::kDeadline)
      Fail(ErrorCode::kDeadlineExceeded, "generation ran past its deadline");
    // A choice stopped by a stop string ends with kStop (on_token returned false) unless a cancel
    // raced it; a cancel that was asked for wins.
    if (r.reason == FinishReason::kCancelled || (gen.cancelled && gen.cancelled->load()))
      Fail(ErrorCode::kCancelled, "generation cancelled");
    out.prompt_tokens = r.prompt_tokens;
    ChatChoice choice;
    choice.text = std::move(c.text);
    choice.finish = c.stopped_by_string ? FinishReason::kStop : r.reason;
    choice.completion_tokens = static_cast<int32_t>(r.tokens.size());
    out.choices.push_back(std::move(choice));
  }
  return out;
}

}  // namespace hymt
