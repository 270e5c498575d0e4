#include "server/http_util.h"

#include "server/http_error.h"
#include "server/requests.h"

namespace hymt {
namespace {

// The media type of a Content-Type header, lowercased and without parameters ("; charset=...").
std::string MediaType(const std::string& header) {
  std::string t = header.substr(0, header.find(';'));
  while (!t.empty() && t.back() == ' ') t.pop_back();
  while (!t.empty() && t.front() == ' ') t.erase(t.begin());
  for (char& c : t)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return t;
}

}  // namespace

RequestFields FieldsOf(const httplib::Request& req, BodyKinds kinds) {
  const std::string type = MediaType(req.get_header_value("Content-Type"));
  if (type.empty() || type == "application/json") return RequestFields::FromJson(req.body);
  if (kinds == BodyKinds::kJsonOrForm) {
    if (type == "application/x-www-form-urlencoded")
      return RequestFields::FromForm({req.params.begin(), req.params.end()});
    if (type == "multipart/form-data") {
      std::vector<std::pair<std::string, std::string>> values(req.params.begin(), req.params.end());
      for (const auto& [name, part] : req.files)
        if (part.filename.empty()) values.emplace_back(name, part.content);
      return RequestFields::FromForm(std::move(values));
    }
  }
  throw HttpError(415, ErrorCode::kInvalidArgument,
                  StrCat("unsupported Content-Type '", type.substr(0, 64), "'; send application/json",
                         kinds == BodyKinds::kJsonOrForm ? " or a form" : ""));
}

std::optional<std::string> RequestApiKey(const httplib::Request& req,
                                         const std::optional<std::string>& body_key) {
  const std::string auth = req.get_header_value("Authorization");
  if (auth.size() > 7) {
    std::string scheme = auth.substr(0, 7);
    for (char& c : scheme)
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (scheme == "bearer ") {
      std::string key = auth.substr(7);
      while (!key.empty() && key.front() == ' ') key.erase(key.begin());
      if (!key.empty()) return key.substr(0, kMaxApiKeyBytes);
    }
  }
  if (body_key && !body_key->empty()) return body_key;
  if (req.has_param("api_key")) return req.get_param_value("api_key").substr(0, kMaxApiKeyBytes);
  return std::nullopt;
}

void SendJson(httplib::Response& res, const Json& body) {
  res.set_content(body.Dump(), "application/json");
}

}  // namespace hymt
