// The typed requests of every API, and the parsers that build them from request fields. This is the
// edge: after these functions nothing looks at JSON or form fields again, and everything that can be
// checked without the model (types, ranges, lengths, encodings, file names) has been checked.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/sampler.h"
#include "runtime/loader.h"
#include "server/fields.h"
#include "translate/prompts.h"

namespace hymt {

// What a request may ask for (options of `hymt serve`; see ServerOptions).
struct RequestLimits {
  size_t max_text_chars = 5000;    // characters per text (and per context, per uploaded file: see below)
  size_t max_texts = 128;          // texts per request
  size_t max_file_chars = 100000;  // characters of an uploaded file
  size_t max_chat_chars = 32000;   // characters over all messages of a chat request
  int max_alternatives = 3;
  int max_choices = 4;  // OpenAI `n`
  size_t max_glossary_terms = 64;
  size_t max_messages = 64;
  double max_timeout_seconds = 600;
};

// Length limits of small fields: language codes, API keys, glossary terms, stop strings, file names.
constexpr size_t kMaxCodeBytes = 32;
constexpr size_t kMaxApiKeyBytes = 256;
constexpr size_t kMaxTermBytes = 256;
constexpr size_t kMaxStopStrings = 4;
constexpr size_t kMaxStopBytes = 64;
constexpr size_t kMaxFileNameBytes = 200;

enum class TextFormat { kText, kHtml, kMarkdown, kSrt };
const char* TextFormatName(TextFormat f);  // "text", "html", "markdown", "srt"

// Sampling fields a request may set; the rest come from the model's generation defaults.
struct SamplingOverrides {
  std::optional<double> temperature, top_p, repetition_penalty;
  std::optional<int64_t> top_k, seed;
  bool any() const { return temperature || top_p || repetition_penalty || top_k || seed; }
};
// nullopt when nothing is overridden (the translator then uses the model's defaults); otherwise the
// model's defaults (its official sampling when it is greedy by default) with the overrides applied.
std::optional<SamplingParams> ResolveSampling(const SamplingOverrides& o, const GenerationDefaults& g);
// The model's own choice: greedy, or its sampling settings when its generation config samples.
SamplingParams DefaultSampling(const GenerationDefaults& g);

// POST /translate (LibreTranslate).
struct LibreTranslateRequest {
  std::vector<std::string> texts;  // `q`
  bool is_list = false;            // `q` was a list: answer with a list
  std::string source = "auto";
  std::string target;
  TextFormat format = TextFormat::kText;  // text | html
  int alternatives = 0;
  std::optional<std::string> api_key;
  std::optional<double> timeout_seconds;
};

// POST /detect (LibreTranslate).
struct DetectRequest {
  std::vector<std::string> texts;
  bool is_list = false;
  std::optional<std::string> api_key;
};

// POST /api/translate (native).
struct NativeTranslateRequest {
  std::vector<std::string> texts;  // `texts` (a list) or `text` (one)
  bool is_list = false;
  std::string source = "auto";
  std::string target;
  TextFormat format = TextFormat::kText;
  PromptOptions prompt;  // glossary and context
  SamplingOverrides sampling;
  int32_t max_new_tokens = 0;  // per segment; 0: proportional to the input
  bool stream = false;
  std::optional<std::string> api_key;
  std::optional<double> timeout_seconds;
};

// POST /v1/chat/completions (OpenAI).
struct ChatMessage {
  enum class Role { kSystem, kUser, kAssistant };
  Role role = Role::kUser;
  std::string content;
};
struct ChatRequest {
  std::vector<ChatMessage> messages;  // at most one system message, first; the last one is the user's
  std::string model;
  std::optional<int32_t> max_tokens;
  SamplingOverrides sampling;
  std::vector<std::string> stop;
  int n = 1;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  std::optional<double> timeout_seconds;
};

// POST /translate_file (LibreTranslate; multipart).
struct FileTranslateRequest {
  std::string file_name;  // sanitised: a plain name with a supported extension
  TextFormat format = TextFormat::kText;
  std::string content;  // valid UTF-8
  std::string source = "auto";
  std::string target;
  std::optional<std::string> api_key;
  std::optional<double> timeout_seconds;
};

// Each throws Error(kInvalidArgument) naming the field at fault.
LibreTranslateRequest ParseLibreTranslate(const RequestFields& f, const RequestLimits& limits);
DetectRequest ParseDetect(const RequestFields& f, const RequestLimits& limits);
NativeTranslateRequest ParseNativeTranslate(const RequestFields& f, const RequestLimits& limits);
ChatRequest ParseChatCompletion(const RequestFields& f, const RequestLimits& limits);
// `fields` holds the form fields other than the file.
FileTranslateRequest ParseFileTranslate(const RequestFields& fields, std::string_view file_name,
                                        std::string content, const RequestLimits& limits);

// A client's file name reduced to a safe download name: the last path component (either slash),
// control characters, quotes and anything outside letters, digits, space and ._-()[] replaced by '_',
// no leading dots, at most kMaxFileNameBytes. Throws Error(kInvalidArgument) when nothing usable is
// left or the extension is not one of .txt .md .markdown .html .htm .srt (case-insensitive).
std::string SafeFileName(std::string_view name, TextFormat* format);

}  // namespace hymt
