// Chat completions over the engine (the OpenAI-compatible route): the model's chat template over
// several turns, n choices generated together, stop strings, streaming deltas, cancellation.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/engine.h"
#include "runtime/loader.h"
#include "server/requests.h"

namespace hymt {

// A conversation in the model's chat template, as pieces that end where the model's answer starts:
// template markup (special tokens) and message contents alternate. 7B family: per turn
// `<|startoftext|>{user}<|extra_0|>{assistant}<|eos|>`, the system message after the first
// <|startoftext|> followed by <|extra_4|> (checked against llama.cpp, see MODEL.md). The 1.8B family
// repeats its single-turn template per turn, closing each answer with the model's first stop token
// (by analogy: no multi-turn reference exists for it). Requires messages as ParseChatCompletion leaves
// them (optional system first, alternating, ending with a user turn).
struct PromptPiece {
  std::string text;
  bool is_markup = false;  // true: special tokens of the template; false: a message's content
};
std::vector<PromptPiece> ConversationPieces(const LoadedModel& model,
                                            const std::vector<ChatMessage>& messages);
// The pieces concatenated (for logs and tests).
std::string RenderConversation(const LoadedModel& model, const std::vector<ChatMessage>& messages);
// The prompt's token ids. Message contents are encoded as plain text: a special token written in a
// message (say "<|eos|>") is text there, never a control token.
std::vector<int32_t> EncodeConversation(const LoadedModel& model, const std::vector<ChatMessage>& messages);

// Holds back generated text that might be the start of a stop string, and cuts the output where one
// completes (the stop string itself is not part of the output, as in OpenAI's API).
class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {}
  // Adds text; returns what can be emitted now. Sets *stopped when a stop string completed.
  std::string Push(std::string_view text, bool* stopped);
  // The text still held back (generation ended without completing a stop string).
  std::string Finish();

 private:
  std::vector<std::string> stops_;
  std::string held_;
};

struct ChatGeneration {
  std::vector<int32_t> prompt;
  SamplingParams sampling;  // choice i uses seed + i
  int n = 1;
  int32_t max_tokens = 0;  // per choice
  std::vector<std::string> stop;
  std::optional<std::chrono::steady_clock::time_point> deadline;
  std::shared_ptr<std::atomic<bool>> cancelled;
  // Called on the engine thread with each new piece of a choice's text (valid UTF-8). Must be quick.
  std::function<void(int choice, const std::string& delta)> on_delta;
};

struct ChatChoice {
  std::string text;
  FinishReason finish = FinishReason::kStop;  // kStop also when a stop string matched
  int32_t completion_tokens = 0;
};

struct ChatOutcome {
  std::vector<ChatChoice> choices;
  int32_t prompt_tokens = 0;
};

// Runs the n choices as one group on the engine and waits for all of them. Throws what Engine::Submit
// throws (kInvalidArgument for a prompt over the context, kUnavailable when the queue is full),
// Error(kCancelled) when `cancelled` was set, Error(kDeadlineExceeded) past the deadline, and
// Error(kInternal) when a step failed.
ChatOutcome RunChat(const LoadedModel& model, Engine& engine, const ChatGeneration& gen);

// OpenAI's name for how a choice ended: "stop" or "length" (a repetition loop cut short counts as
// "length": the answer was cut, not finished).
const char* OpenAiFinishReason(FinishReason r);

}  // namespace hymt
