// Reading the parts of an HTTP request the routes share: the body as fields (by content type) and the
// API key (header, body field or query parameter).
#pragma once

#include <httplib.h>

#include <optional>
#include <string>

#include "core/json.h"
#include "server/fields.h"

namespace hymt {

enum class BodyKinds { kJsonOnly, kJsonOrForm };

// The body's fields. application/json (or no content type) is parsed as JSON; with kJsonOrForm, URL-
// encoded and multipart forms too (their fields plus the query string; multipart file parts are left
// out). Anything else throws HttpError 415.
RequestFields FieldsOf(const httplib::Request& req, BodyKinds kinds);

// The API key: "Authorization: Bearer KEY", else `body_key` (the api_key field), else the api_key
// query parameter. nullopt when none is given.
std::optional<std::string> RequestApiKey(const httplib::Request& req,
                                         const std::optional<std::string>& body_key);

void SendJson(httplib::Response& res, const Json& body);

}  // namespace hymt
