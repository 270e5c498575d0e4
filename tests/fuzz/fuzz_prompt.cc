// Fuzz target: prompt rendering and chat encoding with arbitrary language codes, text, context,
// system message and glossary. Fields are split at 0xff: flags, source code, target code, text,
// context, system, then glossary source/target pairs. Flags: bits 0-1 the prompt style, bit 2 the
// chat family.
#include <algorithm>
#include <optional>

#include "core/status.h"
#include "harness.h"
#include "translate/languages.h"
#include "translate/prompts.h"

namespace hymt::fuzz {
namespace {

// An unknown code must be refused with kInvalidArgument, consistently with FindLanguage; a known
// language then stands in for it.
Language AnyLanguage(std::string_view code, size_t fallback) {
  std::optional<Language> found = FindLanguage(code);
  try {
    Language required = RequireLanguage(code);
    HYMT_FUZZ_REQUIRE(found.has_value() && found->code == required.code, "RequireLanguage disagrees");
  } catch (const Error& e) {
    HYMT_FUZZ_REQUIRE(!found.has_value() && e.code() == ErrorCode::kInvalidArgument, e.what());
  }
  return found ? *found : AllLanguages()[fallback % AllLanguages().size()];
}

}  // namespace

void FuzzPrompt(const uint8_t* data, size_t size) {
  std::vector<std::string_view> f = SplitFields(AsText(data, size));
  f.resize(std::max<size_t>(f.size(), 6));
  const uint8_t flags = f[0].empty() ? 0 : static_cast<uint8_t>(f[0][0]);
  const PromptStyle styles[] = {PromptStyle::kHunyuanMt, PromptStyle::kHyMt15, PromptStyle::kHyMt2,
                                PromptStyle::kHunyuanMt};
  const PromptStyle style = styles[flags & 3];
  const ChatFamily family = flags & 4 ? ChatFamily::kHy18B : ChatFamily::kHunyuan7B;
  const Language src = AnyLanguage(f[1], f[1].size());
  const Language tgt = AnyLanguage(f[2], f[2].size() + 1);
  PromptOptions options;
  options.context = std::string(f[4]);
  for (size_t i = 6; i + 1 < f.size(); i += 2) options.glossary.emplace_back(f[i], f[i + 1]);
  const std::string_view text = f[3], system = f[5];

  const std::string user = RenderTranslationPrompt(style, src, tgt, text, options);
  HYMT_FUZZ_REQUIRE(user.find(text) != std::string::npos, "the prompt lost the text");
  for (const auto& [s, t] : options.glossary)
    HYMT_FUZZ_REQUIRE(user.find(s) != std::string::npos && user.find(t) != std::string::npos,
                      "the prompt lost a glossary term");
  const std::string chat = RenderChat(family, user, system);

  // Encoded, the chat holds exactly the template's special tokens, whatever the request spells.
  const Tokenizer& tok = TiktokenFixture();
  const std::vector<int32_t> ids = EncodeChat(tok, family, user, system);
  HYMT_FUZZ_REQUIRE(tok.Decode(ids) == chat, "Decode(EncodeChat) != RenderChat");
  std::vector<int32_t> specials;
  for (int32_t id : ids)
    if (tok.IsSpecial(id)) specials.push_back(id);
  std::vector<int32_t> want;
  if (family == ChatFamily::kHunyuan7B) {  // the fixture has none of the 1.8B family's specials
    want.push_back(*tok.TokenId("<|startoftext|>"));
    if (!system.empty()) want.push_back(*tok.TokenId("<|extra_4|>"));
    want.push_back(*tok.TokenId("<|extra_0|>"));
  }
  HYMT_FUZZ_REQUIRE(specials == want, "text in the request became special tokens");
}

}  // namespace hymt::fuzz

HYMT_FUZZ_ENTRY(hymt::fuzz::FuzzPrompt)
