#include "formats/json_util.h"

#include "core/strings.h"

namespace hymt {

std::string JsonFoundText(const Json& value) {
  constexpr size_t kMaxShown = 40;
  switch (value.type()) {
    case Json::Type::kNull:
      return "null";
    case Json::Type::kArray:
      return StrCat("array of ", value.AsArray().size());
    case Json::Type::kObject:
      return "object";
    case Json::Type::kString:
      if (value.AsString().size() > kMaxShown) {
        return StrCat("string ", Json(value.AsString().substr(0, kMaxShown)).Dump(), "...");
      }
      break;
    default:
      break;
  }
  return StrCat(Json::TypeName(value.type()), " ", value.Dump());
}

}  // namespace hymt
