#include "translate/languages.h"

#include <algorithm>
#include <cctype>

#include "core/status.h"

namespace hymt {

const std::vector<Language>& AllLanguages() {
  static const std::vector<Language> kLanguages = {
      {"zh", "Chinese", "中文", "中文", true},
      {"en", "English", "英语", "English", false},
      {"fr", "French", "法语", "Français", false},
      {"pt", "Portuguese", "葡萄牙语", "Português", false},
      {"es", "Spanish", "西班牙语", "Español", false},
      {"ja", "Japanese", "日语", "日本語", false},
      {"tr", "Turkish", "土耳其语", "Türkçe", false},
      {"ru", "Russian", "俄语", "Русский", false},
      {"ar", "Arabic", "阿拉伯语", "العربية", false},
      {"ko", "Korean", "韩语", "한국어", false},
      {"th", "Thai", "泰语", "ไทย", false},
      {"it", "Italian", "意大利语", "Italiano", false},
      {"de", "German", "德语", "Deutsch", false},
      {"vi", "Vietnamese", "越南语", "Tiếng Việt", false},
      {"ms", "Malay", "马来语", "Bahasa Melayu", false},
      {"id", "Indonesian", "印尼语", "Bahasa Indonesia", false},
      {"tl", "Filipino", "菲律宾语", "Filipino", false},
      {"hi", "Hindi", "印地语", "हिन्दी", false},
      {"zh-Hant", "Traditional Chinese", "繁体中文", "繁體中文", true},
      {"pl", "Polish", "波兰语", "Polski", false},
      {"cs", "Czech", "捷克语", "Čeština", false},
      {"nl", "Dutch", "荷兰语", "Nederlands", false},
      {"km", "Khmer", "高棉语", "ភាសាខ្មែរ", false},
      {"my", "Burmese", "缅甸语", "မြန်မာဘာသာ", false},
      {"fa", "Persian", "波斯语", "فارسی", false},
      {"gu", "Gujarati", "古吉拉特语", "ગુજરાતી", false},
      {"ur", "Urdu", "乌尔都语", "اردو", false},
      {"te", "Telugu", "泰卢固语", "తెలుగు", false},
      {"mr", "Marathi", "马拉地语", "मराठी", false},
      {"he", "Hebrew", "希伯来语", "עברית", false},
      {"bn", "Bengali", "孟加拉语", "বাংলা", false},
      {"ta", "Tamil", "泰米尔语", "தமிழ்", false},
      {"uk", "Ukrainian", "乌克兰语", "Українська", false},
      {"bo", "Tibetan", "藏语", "བོད་སྐད", false},
      {"kk", "Kazakh", "哈萨克语", "Қазақ тілі", false},
      {"mn", "Mongolian", "蒙古语", "Монгол хэл", false},
      {"ug", "Uyghur", "维吾尔语", "ئۇيغۇرچە", false},
      {"yue", "Cantonese", "粤语", "粵語", true},
  };
  return kLanguages;
}

namespace {

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

std::optional<Language> FindLanguage(std::string_view code) {
  const auto& all = AllLanguages();
  for (const Language& l : all)
    if (l.code == code) return l;
  const std::string lower = Lower(code);
  for (const Language& l : all)
    if (Lower(l.code) == lower) return l;
  static const std::pair<const char*, const char*> kAliases[] = {
      {"zh-cn", "zh"},      {"zh-hans", "zh"},    {"zh_cn", "zh"},      {"cmn", "zh"},
      {"zh-tw", "zh-Hant"}, {"zh-hk", "zh-Hant"}, {"zh_tw", "zh-Hant"}, {"zt", "zh-Hant"},
      {"fil", "tl"},        {"iw", "he"},         {"in", "id"},         {"pt-br", "pt"},
      {"pt-pt", "pt"},      {"en-us", "en"},      {"en-gb", "en"},      {"zh-yue", "yue"},
  };
  for (const auto& [alias, target] : kAliases)
    if (lower == alias) return FindLanguage(target);
  return std::nullopt;
}

std::string LanguageCodeList(const std::vector<std::string>& codes) {
  std::vector<std::string> list = codes;
  if (list.empty())
    for (const Language& l : AllLanguages()) list.push_back(l.code);
  return StrJoin(list, ", ");
}

Language RequireLanguage(std::string_view code, const std::vector<std::string>& allowed) {
  std::optional<Language> l = FindLanguage(code);
  if (l && (allowed.empty() || std::find(allowed.begin(), allowed.end(), l->code) != allowed.end())) return *l;
  std::string shown(code.substr(0, 64));
  if (l)
    Fail(ErrorCode::kInvalidArgument, "language '", shown, "' is not served by this model; valid codes: ",
         LanguageCodeList(allowed));
  Fail(ErrorCode::kInvalidArgument, "unknown language code '", shown, "'; valid codes: ", LanguageCodeList(allowed));
}

}  // namespace hymt
