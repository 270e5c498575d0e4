// The 38 language codes the Hunyuan translation models serve, with the names the prompts use.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hymt {

struct Language {
  std::string code;          // hymt's code: "zh", "en", "zh-Hant", "yue", ...
  std::string english_name;  // used inside English prompts: "Chinese"
  std::string chinese_name;  // used inside Chinese prompts: "中文"
  std::string native_name;   // for people: "Deutsch"
  bool is_chinese = false;   // a Chinese variety: a Chinese prompt template is used when on either side
};

// All 38, in a stable order (the table of MODEL.md).
const std::vector<Language>& AllLanguages();

// Looks a code up (exact, then case-insensitive, then common aliases such as "zh-CN", "zh-TW",
// "fil", "iw"). Returns nullopt when unknown.
std::optional<Language> FindLanguage(std::string_view code);

// Like FindLanguage but throws Error(kInvalidArgument) listing the valid codes (or `allowed`, when
// given, the model's own languages).
Language RequireLanguage(std::string_view code, const std::vector<std::string>& allowed = {});

// "ar, bn, bo, ..." for error messages.
std::string LanguageCodeList(const std::vector<std::string>& codes = {});

}  // namespace hymt
