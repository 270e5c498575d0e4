#include "translate/prompts.h"

#include <algorithm>
#include <cctype>

#include "core/strings.h"

namespace hymt {

const char* PromptStyleName(PromptStyle s) {
  switch (s) {
    case PromptStyle::kHunyuanMt: return "hunyuan-mt";
    case PromptStyle::kHyMt15: return "hy-mt1.5";
    case PromptStyle::kHyMt2: return "hy-mt2";
  }
  return "?";
}

bool ParsePromptStyle(std::string_view name, PromptStyle* out) {
  for (PromptStyle s : {PromptStyle::kHunyuanMt, PromptStyle::kHyMt15, PromptStyle::kHyMt2}) {
    if (name == PromptStyleName(s)) {
      *out = s;
      return true;
    }
  }
  return false;
}

PromptStyle PromptStyleFromModelName(std::string_view name) {
  std::string lower(name);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  // Normalise separators so "hy_mt1.5", "HY-MT1.5" and "hymt1.5" all match.
  lower.erase(std::remove_if(lower.begin(), lower.end(), [](char c) { return c == '-' || c == '_' || c == ' '; }),
              lower.end());
  if (lower.find("hymt1.5") != std::string::npos || lower.find("hymt15") != std::string::npos)
    return PromptStyle::kHyMt15;
  if (lower.find("hymt2") != std::string::npos) return PromptStyle::kHyMt2;
  return PromptStyle::kHunyuanMt;
}

std::string RenderTranslationPrompt(PromptStyle style, const Language& src, const Language& tgt,
                                    std::string_view text, const PromptOptions& options) {
  const bool chinese = src.is_chinese || tgt.is_chinese;
  const std::string& target = chinese ? tgt.chinese_name : tgt.english_name;
  // Terminology and context prompts exist in HY-MT1.5's Chinese form; they are used for every model.
  if (!options.glossary.empty()) {
    std::string terms;
    for (const auto& [s, t] : options.glossary) terms += StrCat(s, " 翻译成 ", t, "\n");
    return StrCat("参考下面的翻译：\n", terms, "\n将以下文本翻译为", tgt.chinese_name,
                  "，注意只需要输出翻译后的结果，不要额外解释：\n", text);
  }
  if (!options.context.empty()) {
    return StrCat(options.context, "\n参考上面的信息，把下面的文本翻译成", tgt.chinese_name,
                  "，注意不需要翻译上文，也不要额外解释：\n", text, "\n");
  }
  switch (style) {
    case PromptStyle::kHunyuanMt:
      if (chinese) return StrCat("把下面的文本翻译成", target, "，不要额外解释。\n\n", text);
      return StrCat("Translate the following segment into ", target, ", without additional explanation.\n\n", text);
    case PromptStyle::kHyMt15:
      if (chinese) return StrCat("将以下文本翻译为", target, "，注意只需要输出翻译后的结果，不要额外解释：\n\n", text);
      return StrCat("Translate the following segment into ", target, ", without additional explanation.\n\n", text);
    case PromptStyle::kHyMt2:
      if (chinese) return StrCat("将以下文本翻译为", target, "，注意只需要输出翻译后的结果，不要额外解释：\n\n", text);
      return StrCat("Translate the following text into ", target,
                    ". Note that you should only output the translated result without any additional "
                    "explanation:\n\n",
                    text);
  }
  return std::string(text);
}

std::string RenderChimeraPrompt(const Language& src, const Language& tgt, std::string_view text,
                                const std::vector<std::string>& candidates) {
  std::string out = StrCat("Analyze the following multiple ", tgt.english_name, " translations of the ",
                           src.english_name, " segment surrounded in triple backticks and generate a single refined ",
                           tgt.english_name,
                           " translation. Only output the refined translation, do not explain.\n\nThe ",
                           src.english_name, " segment:\n```", text, "```\n\nThe multiple ", tgt.english_name,
                           " translations:\n");
  for (size_t i = 0; i < candidates.size(); ++i) out += StrCat(i + 1, ". ```", candidates[i], "```\n");
  return out;
}

namespace {

// One piece of a chat template: the template's own text (special tokens included) or the caller's.
struct ChatPart {
  std::string_view text;
  bool is_template;
};

// The chat template of `family` as parts, so that rendering and encoding cannot disagree.
std::vector<ChatPart> ChatParts(ChatFamily family, std::string_view user, std::string_view system) {
  switch (family) {
    case ChatFamily::kHunyuan7B:
      if (!system.empty())
        return {{"<|startoftext|>", true},
                {system, false},
                {"<|extra_4|>", true},
                {user, false},
                {"<|extra_0|>", true}};
      return {{"<|startoftext|>", true}, {user, false}, {"<|extra_0|>", true}};
    case ChatFamily::kHy18B:
      // The system message goes between the begin token and the user turn (as the family's template
      // places it).
      return {{"<｜hy_begin▁of▁sentence｜>", true},
              {system, false},
              {"<｜hy_User｜>", true},
              {user, false},
              {"<｜hy_Assistant｜>", true}};
  }
  return {{user, false}};
}

}  // namespace

std::string RenderChat(ChatFamily family, std::string_view user, std::string_view system) {
  std::string out;
  for (const ChatPart& part : ChatParts(family, user, system)) out += part.text;
  return out;
}

std::vector<int32_t> EncodeChat(const Tokenizer& tokenizer, ChatFamily family, std::string_view user,
                                std::string_view system) {
  std::vector<int32_t> ids;
  for (const ChatPart& part : ChatParts(family, user, system)) {
    // The caller's text never parses special tokens; the template's always does.
    std::vector<int32_t> part_ids = tokenizer.Encode(part.text, /*parse_special=*/part.is_template);
    ids.insert(ids.end(), part_ids.begin(), part_ids.end());
  }
  return ids;
}

}  // namespace hymt
