// Fuzz target: HTTP request bodies into the server's typed requests (src/server/requests.h), as the
// routes build them: RequestFields from a JSON body or from form fields, then the route's parser; a
// request that parses is then rendered and encoded as its route would (translation prompts, the chat
// template, stop strings).
//
// The first byte picks the route (bits 0-2: /translate, /detect, /api/translate,
// /v1/chat/completions, /translate_file) and the body kind (bit 3: form fields instead of JSON). The
// rest is the JSON body, or form fields split at 0xff into name, value, name, value...; for
// /translate_file the first two fields are the uploaded file's name and content.
#include <algorithm>
#include <optional>

#include "core/status.h"
#include "core/utf8.h"
#include "harness.h"
#include "runtime/loader.h"
#include "server/chat.h"
#include "server/requests.h"
#include "translate/languages.h"
#include "translate/prompts.h"

namespace hymt::fuzz {
namespace {

const RequestLimits kLimits;

const LoadedModel& FixtureModel() {
  static const LoadedModel model = LoadModel(StrCat(HYMT_SOURCE_DIR, "/tests/data/fixtures/tiny-gqa1/f32"));
  return model;
}

int CountSpecials(const Tokenizer& tok, const std::vector<int32_t>& ids) {
  return static_cast<int>(std::count_if(ids.begin(), ids.end(), [&](int32_t id) { return tok.IsSpecial(id); }));
}

void CheckTexts(const std::vector<std::string>& texts) {
  HYMT_FUZZ_REQUIRE(!texts.empty() && texts.size() <= kLimits.max_texts, texts.size(), " texts");
  for (const std::string& t : texts) {
    HYMT_FUZZ_REQUIRE(IsValidUtf8(t), "a text that is not UTF-8 was accepted");
    HYMT_FUZZ_REQUIRE(CountChars(t) <= kLimits.max_text_chars, "a text over the limit was accepted");
  }
}

void CheckCode(const std::string& code) {
  HYMT_FUZZ_REQUIRE(!code.empty() && code.size() <= kMaxCodeBytes, "language code '", code, "'");
}

// Every text of a translation request encodes with exactly the template's special tokens, whatever
// its text, glossary or context spell (the translator's EncodeChat).
void CheckTranslationPrompts(const std::vector<std::string>& texts, const std::string& source,
                             const std::string& target, const PromptOptions& options) {
  std::optional<Language> tgt = FindLanguage(target);
  if (!tgt) return;  // refused later, by the translator
  std::optional<Language> src = FindLanguage(source);
  const Tokenizer& tok = TiktokenFixture();
  for (const std::string& text : texts) {
    const std::string user =
        RenderTranslationPrompt(PromptStyle::kHyMt15, src ? *src : *FindLanguage("en"), *tgt, text, options);
    const std::vector<int32_t> ids = EncodeChat(tok, ChatFamily::kHunyuan7B, user);
    HYMT_FUZZ_REQUIRE(CountSpecials(tok, ids) == 2, "request text became special tokens");
  }
}

// The chat template: message contents never become special tokens, and decoding gives the rendering.
void CheckConversation(const ChatRequest& r) {
  const LoadedModel& model = FixtureModel();
  const Tokenizer& tok = *model.tokenizer;
  int markup_specials = 0;
  for (const PromptPiece& p : ConversationPieces(model, r.messages))
    if (p.is_markup) markup_specials += CountSpecials(tok, tok.Encode(p.text, true));
  const std::vector<int32_t> ids = EncodeConversation(model, r.messages);
  HYMT_FUZZ_REQUIRE(CountSpecials(tok, ids) == markup_specials, "a message became special tokens");
  HYMT_FUZZ_REQUIRE(tok.Decode(ids) == RenderConversation(model, r.messages));
}

// Stop strings over the last message taken as generated text, arriving in uneven chunks: the output
// is the text up to the first stop string, whatever the chunking.
void CheckStopStrings(const ChatRequest& r) {
  const std::string& text = r.messages.back().content;
  size_t cut = std::string::npos;
  for (const std::string& s : r.stop) cut = std::min(cut, text.find(s));
  StopMatcher matcher(r.stop);
  std::string out;
  bool stopped = false;
  for (size_t pos = 0, step = 1; pos < text.size() && !stopped; pos += step, step = step % 7 + 1)
    out += matcher.Push(std::string_view(text).substr(pos, step), &stopped);
  if (!stopped) out += matcher.Finish();
  HYMT_FUZZ_REQUIRE(stopped == (cut != std::string::npos), "stop string found ", stopped, ", expected ",
                    cut != std::string::npos);
  HYMT_FUZZ_REQUIRE(out == text.substr(0, cut), "stop strings cut the text at the wrong place");
}

void CheckFileName(const std::string& name) {
  HYMT_FUZZ_REQUIRE(!name.empty() && name.size() <= kMaxFileNameBytes, "file name of ", name.size(), " bytes");
  HYMT_FUZZ_REQUIRE(IsValidUtf8(name), "file name is not UTF-8");
  HYMT_FUZZ_REQUIRE(name.front() != '.', "file name starts with a dot");
  for (unsigned char c : name)
    HYMT_FUZZ_REQUIRE(c >= 0x20 && c != 0x7f && c != '/' && c != '\\' && c != '"' && c != '%' && c != ';',
                      "file name holds byte ", int{c});
}

}  // namespace

void FuzzHttpRequest(const uint8_t* data, size_t size) {
  if (size == 0) return;
  const int route = data[0] & 7;
  const bool form = (data[0] & 8) != 0;
  const std::string_view body = AsText(data + 1, size - 1);
  try {
    if (route >= 5) {  // the file-name sanitiser alone
      TextFormat format;
      CheckFileName(SafeFileName(body, &format));
      return;
    }
    std::vector<std::string_view> parts;
    if (form || route == 4) parts = SplitFields(body);
    std::string file_name, file_content;
    if (route == 4) {
      parts.resize(std::max<size_t>(parts.size(), 2));
      file_name = std::string(parts[0]);
      file_content = std::string(parts[1]);
      parts.erase(parts.begin(), parts.begin() + 2);
    }
    std::vector<std::pair<std::string, std::string>> values;
    for (size_t i = 0; i + 1 < parts.size(); i += 2) values.emplace_back(parts[i], parts[i + 1]);
    const RequestFields fields =
        form || route == 4 ? RequestFields::FromForm(std::move(values)) : RequestFields::FromJson(body);

    switch (route) {
      case 0: {
        LibreTranslateRequest r = ParseLibreTranslate(fields, kLimits);
        CheckTexts(r.texts);
        CheckCode(r.source);
        CheckCode(r.target);
        HYMT_FUZZ_REQUIRE(r.alternatives >= 0 && r.alternatives <= kLimits.max_alternatives);
        CheckTranslationPrompts(r.texts, r.source, r.target, {});
        break;
      }
      case 1:
        CheckTexts(ParseDetect(fields, kLimits).texts);
        break;
      case 2: {
        NativeTranslateRequest r = ParseNativeTranslate(fields, kLimits);
        CheckTexts(r.texts);
        CheckCode(r.target);
        HYMT_FUZZ_REQUIRE(r.prompt.glossary.size() <= kLimits.max_glossary_terms);
        for (const auto& [s, t] : r.prompt.glossary)
          HYMT_FUZZ_REQUIRE(!s.empty() && s.size() <= kMaxTermBytes && !t.empty() && t.size() <= kMaxTermBytes &&
                            s.find('\n') == std::string::npos && t.find('\n') == std::string::npos);
        HYMT_FUZZ_REQUIRE(CountChars(r.prompt.context) <= kLimits.max_text_chars);
        CheckTranslationPrompts(r.texts, r.source, r.target, r.prompt);
        break;
      }
      case 3: {
        ChatRequest r = ParseChatCompletion(fields, kLimits);
        HYMT_FUZZ_REQUIRE(!r.messages.empty() && r.messages.size() <= kLimits.max_messages);
        HYMT_FUZZ_REQUIRE(r.messages.back().role == ChatMessage::Role::kUser);
        HYMT_FUZZ_REQUIRE(r.n >= 1 && r.n <= kLimits.max_choices && r.stop.size() <= kMaxStopStrings);
        CheckConversation(r);
        CheckStopStrings(r);
        break;
      }
      case 4: {
        FileTranslateRequest r = ParseFileTranslate(fields, file_name, std::move(file_content), kLimits);
        CheckFileName(r.file_name);
        HYMT_FUZZ_REQUIRE(IsValidUtf8(r.content) && CountChars(r.content) <= kLimits.max_file_chars);
        break;
      }
    }
  } catch (const Error& e) {
    // Every refusal of a request is a client error, named as such.
    HYMT_FUZZ_REQUIRE(e.code() == ErrorCode::kInvalidArgument, ErrorCodeName(e.code()), ": ", e.what());
  }
}

}  // namespace hymt::fuzz

HYMT_FUZZ_ENTRY(hymt::fuzz::FuzzHttpRequest)
