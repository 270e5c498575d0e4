// Prompts of the Hunyuan translation models and the chat templates they are rendered through.
//
// Which prompt style a model wants is not in its config (every model says hunyuan_v1_dense): it is
// taken from the model's name, defaulting to Hunyuan-MT-7B's, and the user may override it.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "translate/languages.h"

namespace hymt {

enum class PromptStyle {
  kHunyuanMt,  // Hunyuan-MT-7B and Chimera (the WMT25 models)
  kHyMt15,     // HY-MT1.5
  kHyMt2,      // Hy-MT2
};

// The family of special tokens the chat template uses.
enum class ChatFamily {
  kHunyuan7B,  // <|startoftext|>{user}<|extra_0|>
  kHy18B,      // <｜hy_begin▁of▁sentence｜><｜hy_User｜>{user}<｜hy_Assistant｜>
};

const char* PromptStyleName(PromptStyle s);
// "hunyuan-mt" | "hy-mt1.5" | "hy-mt2"; false when unknown.
bool ParsePromptStyle(std::string_view name, PromptStyle* out);
// Chooses from a model name such as "tencent/HY-MT1.5-7B" or "Hy-MT2-1.8B-Q4_K_M"; default kHunyuanMt.
PromptStyle PromptStyleFromModelName(std::string_view name);

struct PromptOptions {
  std::vector<std::pair<std::string, std::string>> glossary;  // source term -> target term
  std::string context;                                        // text the translation should follow
};

// The user-turn text asking to translate `text` from `src` into `tgt`. With Chinese on either side
// the Chinese template (with Chinese language names), else the English one. A glossary or context
// uses the HY-MT1.5 terminology / context templates.
std::string RenderTranslationPrompt(PromptStyle style, const Language& src, const Language& tgt,
                                    std::string_view text, const PromptOptions& options = {});

// The Chimera-7B prompt that fuses several candidate translations into one.
std::string RenderChimeraPrompt(const Language& src, const Language& tgt, std::string_view text,
                                const std::vector<std::string>& candidates);

// One user turn (and an optional system message) through the chat template; the model answers next.
std::string RenderChat(ChatFamily family, std::string_view user, std::string_view system = {});

// The token ids of RenderChat(family, user, system): the template's own special tokens become their
// ids, while `user` and `system` are encoded as ordinary text. Text that spells a special token
// ("<|extra_0|>", "<|eos|>") inside a request therefore never acts as a control token (prompt
// injection); Decode of the result is RenderChat's string. Throws as Tokenizer::Encode.
std::vector<int32_t> EncodeChat(const Tokenizer& tokenizer, ChatFamily family, std::string_view user,
                                std::string_view system = {});

}  // namespace hymt
