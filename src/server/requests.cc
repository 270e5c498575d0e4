#include "server/requests.h"

#include <algorithm>

#include "core/status.h"
#include "core/utf8.h"

namespace hymt {
namespace {

// A UTF-8 character takes at most 4 bytes: a byte cap that a text within the character limit never hits.
constexpr size_t kMaxBytesPerChar = 4;

std::string LanguageCode(const RequestFields& f, std::string_view name, bool required, std::string fallback) {
  std::optional<std::string> code = f.String(name, kMaxCodeBytes);
  if (!code) {
    if (required) Fail(ErrorCode::kInvalidArgument, "field '", name, "' (a language code) is required");
    return fallback;
  }
  if (code->empty())
    Fail(ErrorCode::kInvalidArgument, "field '", name, "' is empty (expected a language code)");
  for (char c : *code)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-' || c == '_'))
      Fail(ErrorCode::kInvalidArgument, "field '", name, "' is not a language code (letters and '-' only)");
  return *code;
}

void CheckTexts(std::string_view name, const std::vector<std::string>& texts, const RequestLimits& limits) {
  if (texts.empty()) Fail(ErrorCode::kInvalidArgument, "field '", name, "' holds no text");
  for (size_t i = 0; i < texts.size(); ++i) {
    size_t n = CountChars(texts[i]);
    if (n > limits.max_text_chars)
      Fail(ErrorCode::kInvalidArgument, "text ", i, " of '", name, "' has ", n, " characters; the limit is ",
           limits.max_text_chars);
  }
}

std::vector<std::string> Texts(const RequestFields& f, std::string_view name, const RequestLimits& limits,
                               bool* is_list) {
  auto texts = f.StringOrList(name, limits.max_texts, limits.max_text_chars * kMaxBytesPerChar, is_list);
  if (!texts) Fail(ErrorCode::kInvalidArgument, "field '", name, "' (the text) is required");
  CheckTexts(name, *texts, limits);
  return std::move(*texts);
}

std::optional<double> Timeout(const RequestFields& f, const RequestLimits& limits) {
  std::optional<double> t = f.Number("timeout", 0, limits.max_timeout_seconds);
  if (t && *t <= 0) Fail(ErrorCode::kInvalidArgument, "field 'timeout' must be more than 0 seconds");
  return t;
}

SamplingOverrides Sampling(const RequestFields& f) {
  SamplingOverrides s;
  s.temperature = f.Number("temperature", 0, 2);
  s.top_p = f.Number("top_p", 0, 1);
  if (s.top_p && *s.top_p <= 0) Fail(ErrorCode::kInvalidArgument, "field 'top_p' must be more than 0");
  s.top_k = f.Int("top_k", 0, 1 << 20);
  s.repetition_penalty = f.Number("repetition_penalty", 0.01, 10);
  s.seed = f.Int("seed", INT64_MIN, INT64_MAX);
  return s;
}

TextFormat Format(const RequestFields& f, bool allow_all) {
  std::optional<std::string> name = f.String("format", 16);
  if (!name || *name == "text" || *name == "plain") return TextFormat::kText;
  if (*name == "html") return TextFormat::kHtml;
  if (allow_all && (*name == "markdown" || *name == "md")) return TextFormat::kMarkdown;
  if (allow_all && *name == "srt") return TextFormat::kSrt;
  Fail(ErrorCode::kInvalidArgument, "field 'format' must be ",
       allow_all ? "text, html, markdown or srt" : "text or html");
}

std::string Term(const Json& v, std::string_view where) {
  if (!v.is_string()) Fail(ErrorCode::kInvalidArgument, where, " must be a string");
  const std::string& s = v.AsString();
  if (s.empty() || s.size() > kMaxTermBytes)
    Fail(ErrorCode::kInvalidArgument, where, " must have 1 to ", kMaxTermBytes, " bytes");
  // Terms go into the prompt one per line.
  if (s.find_first_of("\r\n") != std::string::npos)
    Fail(ErrorCode::kInvalidArgument, where, " must be one line");
  return s;
}

std::vector<std::pair<std::string, std::string>> Glossary(const RequestFields& f,
                                                          const RequestLimits& limits) {
  std::vector<std::pair<std::string, std::string>> out;
  const Json* g = f.Raw("glossary");
  if (!g) {
    if (f.Has("glossary")) Fail(ErrorCode::kInvalidArgument, "field 'glossary' needs a JSON body");
    return out;
  }
  if (g->is_object()) {
    for (const auto& [k, v] : g->AsObject()) {
      Json key(k);
      out.emplace_back(Term(key, "a glossary term"), Term(v, "a glossary translation"));
    }
  } else if (g->is_array()) {
    for (const Json& e : g->AsArray()) {
      if (e.is_object()) {
        const Json* s = e.Find("source");
        const Json* t = e.Find("target");
        if (!s || !t) Fail(ErrorCode::kInvalidArgument, "a glossary entry needs 'source' and 'target'");
        out.emplace_back(Term(*s, "glossary 'source'"), Term(*t, "glossary 'target'"));
      } else if (e.is_array() && e.AsArray().size() == 2) {
        out.emplace_back(Term(e.AsArray()[0], "a glossary term"),
                         Term(e.AsArray()[1], "a glossary translation"));
      } else {
        Fail(ErrorCode::kInvalidArgument,
             "a glossary entry must be {\"source\", \"target\"} or [source, target]");
      }
    }
  } else {
    Fail(ErrorCode::kInvalidArgument, "field 'glossary' must be an object or a list, found ",
         Json::TypeName(g->type()));
  }
  if (out.size() > limits.max_glossary_terms)
    Fail(ErrorCode::kInvalidArgument, "the glossary has ", out.size(), " terms; at most ",
         limits.max_glossary_terms, " are allowed");
  return out;
}

std::string MessageContent(const Json& content, size_t index) {
  if (content.is_string()) return content.AsString();
  if (!content.is_array())
    Fail(ErrorCode::kInvalidArgument, "messages[", index, "].content must be a string or a list of parts");
  std::string text;
  for (const Json& part : content.AsArray()) {
    const Json* type = part.Find("type");
    const Json* t = part.Find("text");
    if (!type || !type->is_string() || type->AsString() != "text" || !t || !t->is_string())
      Fail(ErrorCode::kInvalidArgument, "messages[", index,
           "].content: only parts {\"type\": \"text\", \"text\": ...} are supported");
    text += t->AsString();
  }
  return text;
}

SamplingParams ModelSampling(const GenerationDefaults& g) {
  SamplingParams p;
  p.temperature = g.temperature;
  p.top_k = g.top_k;
  p.top_p = g.top_p;
  p.repetition_penalty = g.repetition_penalty;
  return p;
}

}  // namespace

const char* TextFormatName(TextFormat f) {
  switch (f) {
    case TextFormat::kText:
      return "text";
    case TextFormat::kHtml:
      return "html";
    case TextFormat::kMarkdown:
      return "markdown";
    case TextFormat::kSrt:
      return "srt";
  }
  return "text";
}

SamplingParams DefaultSampling(const GenerationDefaults& g) {
  return g.do_sample ? ModelSampling(g) : SamplingParams::Greedy();
}

std::optional<SamplingParams> ResolveSampling(const SamplingOverrides& o, const GenerationDefaults& g) {
  if (!o.any()) return std::nullopt;
  SamplingParams p = ModelSampling(g);
  if (o.temperature) p.temperature = static_cast<float>(*o.temperature);
  if (o.top_p) p.top_p = static_cast<float>(*o.top_p);
  if (o.top_k) p.top_k = static_cast<int>(*o.top_k);
  if (o.repetition_penalty) p.repetition_penalty = static_cast<float>(*o.repetition_penalty);
  if (o.seed) p.seed = static_cast<uint64_t>(*o.seed);
  return p;
}

LibreTranslateRequest ParseLibreTranslate(const RequestFields& f, const RequestLimits& limits) {
  LibreTranslateRequest r;
  r.texts = Texts(f, "q", limits, &r.is_list);
  r.source = LanguageCode(f, "source", false, "auto");
  r.target = LanguageCode(f, "target", true, "");
  r.format = Format(f, false);
  r.alternatives = static_cast<int>(f.Int("alternatives", 0, limits.max_alternatives).value_or(0));
  r.api_key = f.String("api_key", kMaxApiKeyBytes);
  r.timeout_seconds = Timeout(f, limits);
  return r;
}

DetectRequest ParseDetect(const RequestFields& f, const RequestLimits& limits) {
  DetectRequest r;
  r.texts = Texts(f, "q", limits, &r.is_list);
  r.api_key = f.String("api_key", kMaxApiKeyBytes);
  return r;
}

NativeTranslateRequest ParseNativeTranslate(const RequestFields& f, const RequestLimits& limits) {
  NativeTranslateRequest r;
  if (f.Has("texts") && f.Has("text"))
    Fail(ErrorCode::kInvalidArgument, "give either 'text' or 'texts', not both");
  if (f.Has("texts")) {
    r.texts = Texts(f, "texts", limits, &r.is_list);
    r.is_list = true;
  } else {
    bool list = false;
    r.texts = Texts(f, "text", limits, &list);
    if (list) Fail(ErrorCode::kInvalidArgument, "field 'text' must be one string (use 'texts' for a list)");
  }
  r.source = LanguageCode(f, "source", false, "auto");
  r.target = LanguageCode(f, "target", true, "");
  r.format = Format(f, true);
  r.prompt.glossary = Glossary(f, limits);
  r.prompt.context = f.String("context", limits.max_text_chars * kMaxBytesPerChar).value_or("");
  if (CountChars(r.prompt.context) > limits.max_text_chars)
    Fail(ErrorCode::kInvalidArgument, "field 'context' has more than ", limits.max_text_chars, " characters");
  r.sampling = Sampling(f);
  r.max_new_tokens = static_cast<int32_t>(f.Int("max_new_tokens", 1, 1 << 20).value_or(0));
  r.stream = f.Bool("stream").value_or(false);
  r.api_key = f.String("api_key", kMaxApiKeyBytes);
  r.timeout_seconds = Timeout(f, limits);
  return r;
}

ChatRequest ParseChatCompletion(const RequestFields& f, const RequestLimits& limits) {
  if (!f.is_json()) Fail(ErrorCode::kInvalidArgument, "chat completions take a JSON body");
  ChatRequest r;
  const Json* messages = f.Raw("messages");
  if (!messages) Fail(ErrorCode::kInvalidArgument, "field 'messages' is required");
  if (!messages->is_array())
    Fail(ErrorCode::kInvalidArgument, "field 'messages' must be a list, found ",
         Json::TypeName(messages->type()));
  const Json::Array& list = messages->AsArray();
  if (list.empty()) Fail(ErrorCode::kInvalidArgument, "field 'messages' is empty");
  if (list.size() > limits.max_messages)
    Fail(ErrorCode::kInvalidArgument, "at most ", limits.max_messages, " messages are allowed, got ",
         list.size());
  size_t chars = 0;
  for (size_t i = 0; i < list.size(); ++i) {
    const Json& m = list[i];
    if (!m.is_object()) Fail(ErrorCode::kInvalidArgument, "messages[", i, "] must be an object");
    const Json* role = m.Find("role");
    const Json* content = m.Find("content");
    if (!role || !role->is_string())
      Fail(ErrorCode::kInvalidArgument, "messages[", i, "].role must be a string");
    if (!content) Fail(ErrorCode::kInvalidArgument, "messages[", i, "].content is required");
    ChatMessage msg;
    const std::string& name = role->AsString();
    if (name == "system" || name == "developer") {
      msg.role = ChatMessage::Role::kSystem;
      if (i != 0)
        Fail(ErrorCode::kInvalidArgument, "a system message may only come first (messages[", i, "])");
    } else if (name == "user") {
      msg.role = ChatMessage::Role::kUser;
    } else if (name == "assistant") {
      msg.role = ChatMessage::Role::kAssistant;
    } else {
      Fail(ErrorCode::kInvalidArgument, "messages[", i, "].role must be system, user or assistant");
    }
    msg.content = MessageContent(*content, i);
    chars += CountChars(msg.content);
    r.messages.push_back(std::move(msg));
  }
  if (chars > limits.max_chat_chars)
    Fail(ErrorCode::kInvalidArgument, "the messages have ", chars, " characters; the limit is ",
         limits.max_chat_chars);
  // The template alternates user and assistant turns and ends on the user's.
  ChatMessage::Role expect = ChatMessage::Role::kUser;
  for (size_t i = 0; i < r.messages.size(); ++i) {
    if (r.messages[i].role == ChatMessage::Role::kSystem) continue;
    if (r.messages[i].role != expect)
      Fail(ErrorCode::kInvalidArgument,
           "messages must alternate user and assistant, starting with user (messages[", i, "])");
    expect = expect == ChatMessage::Role::kUser ? ChatMessage::Role::kAssistant : ChatMessage::Role::kUser;
  }
  if (r.messages.back().role != ChatMessage::Role::kUser)
    Fail(ErrorCode::kInvalidArgument, "the last message must be the user's");

  r.model = f.String("model", 256).value_or("");
  std::optional<int64_t> max_tokens = f.Int("max_completion_tokens", 1, 1 << 20);
  if (!max_tokens) max_tokens = f.Int("max_tokens", 1, 1 << 20);
  if (max_tokens) r.max_tokens = static_cast<int32_t>(*max_tokens);
  r.sampling = Sampling(f);
  // OpenAI's penalties have no counterpart here; they are range-checked and otherwise ignored.
  f.Number("presence_penalty", -2, 2);
  f.Number("frequency_penalty", -2, 2);
  bool stop_list = false;
  if (auto stop = f.StringOrList("stop", kMaxStopStrings, kMaxStopBytes, &stop_list)) {
    for (const std::string& s : *stop) {
      if (s.empty()) Fail(ErrorCode::kInvalidArgument, "field 'stop' holds an empty string");
      r.stop.push_back(s);
    }
  }
  r.n = static_cast<int>(f.Int("n", 1, limits.max_choices).value_or(1));
  r.stream = f.Bool("stream").value_or(false);
  if (const Json* so = f.Raw("stream_options")) {
    if (!so->is_object()) Fail(ErrorCode::kInvalidArgument, "field 'stream_options' must be an object");
    if (const Json* u = so->Find("include_usage")) {
      if (!u->is_bool())
        Fail(ErrorCode::kInvalidArgument, "stream_options.include_usage must be true or false");
      r.include_usage = u->AsBool();
    }
  }
  r.timeout_seconds = Timeout(f, limits);
  return r;
}

std::string SafeFileName(std::string_view name, TextFormat* format) {
  // The last path component, whichever separator the client's system uses.
  size_t slash = name.find_last_of("/\\");
  if (slash != std::string_view::npos) name.remove_prefix(slash + 1);
  std::string out;
  size_t pos = 0;
  while (pos < name.size()) {
    int n = ValidUtf8SequenceLength(name, pos);
    if (n == 0) {
      out += '_';
      ++pos;
      continue;
    }
    if (n > 1) {  // letters of any script are fine in a download name
      out.append(name.substr(pos, static_cast<size_t>(n)));
    } else {
      char c = name[pos];
      bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                std::string_view(" ._-()[]").find(c) != std::string_view::npos;
      out += ok ? c : '_';
    }
    pos += static_cast<size_t>(n);
  }
  while (!out.empty() && (out.front() == '.' || out.front() == ' ')) out.erase(out.begin());
  while (!out.empty() && out.back() == ' ') out.pop_back();
  size_t dot = out.rfind('.');
  if (out.empty() || dot == std::string::npos || dot == 0)
    Fail(ErrorCode::kInvalidArgument, "the uploaded file needs a name ending in .txt, .md, .html or .srt");
  std::string ext = out.substr(dot + 1);
  for (char& c : ext)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  if (ext == "txt") {
    *format = TextFormat::kText;
  } else if (ext == "md" || ext == "markdown") {
    *format = TextFormat::kMarkdown;
  } else if (ext == "html" || ext == "htm") {
    *format = TextFormat::kHtml;
  } else if (ext == "srt") {
    *format = TextFormat::kSrt;
  } else {
    Fail(ErrorCode::kInvalidArgument, "unsupported file type '.", ext.substr(0, 16),
         "' (supported: .txt, .md, .html, .srt)");
  }
  // A long name loses the end of its stem (at a character boundary), never its extension.
  if (out.size() > kMaxFileNameBytes) {
    size_t keep = kMaxFileNameBytes - (out.size() - dot);
    while (keep > 0 && (static_cast<unsigned char>(out[keep]) & 0xC0) == 0x80) --keep;
    out = out.substr(0, keep) + out.substr(dot);
  }
  return out;
}

FileTranslateRequest ParseFileTranslate(const RequestFields& fields, std::string_view file_name,
                                        std::string content, const RequestLimits& limits) {
  FileTranslateRequest r;
  r.file_name = SafeFileName(file_name, &r.format);
  size_t bad = FindInvalidUtf8(content);
  if (bad != std::string::npos)
    Fail(ErrorCode::kInvalidArgument, "the uploaded file is not UTF-8 text (invalid byte at offset ", bad,
         ")");
  // A UTF-8 byte-order mark says nothing the translation needs.
  if (content.compare(0, 3, "\xEF\xBB\xBF") == 0) content.erase(0, 3);
  size_t chars = CountChars(content);
  if (chars > limits.max_file_chars)
    Fail(ErrorCode::kInvalidArgument, "the file has ", chars, " characters; the limit is ",
         limits.max_file_chars);
  if (chars == 0) Fail(ErrorCode::kInvalidArgument, "the uploaded file is empty");
  r.content = std::move(content);
  r.source = LanguageCode(fields, "source", false, "auto");
  r.target = LanguageCode(fields, "target", true, "");
  r.api_key = fields.String("api_key", kMaxApiKeyBytes);
  r.timeout_seconds = Timeout(fields, limits);
  return r;
}

}  // namespace hymt
