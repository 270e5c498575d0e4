#include "server/http_error.h"

#include "core/json.h"
#include "core/logging.h"
#include "core/utf8.h"

namespace hymt {
namespace {

// Error messages may quote a piece of the request (a field name, a language code); they are cut to
// this size so that an error never echoes a large input back.
constexpr size_t kMaxErrorMessageBytes = 1024;
// Retry-After for a temporary refusal that does not say better (queue full, shutting down).
constexpr int kDefaultRetryAfterSeconds = 1;

// Valid UTF-8 (each invalid byte becomes U+FFFD), cut at a character boundary.
std::string CleanMessage(std::string_view text) {
  std::string out;
  size_t pos = 0;
  while (pos < text.size() && out.size() < kMaxErrorMessageBytes) {
    int n = ValidUtf8SequenceLength(text, pos);
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      ++pos;
    } else {
      out.append(text.substr(pos, static_cast<size_t>(n)));
      pos += static_cast<size_t>(n);
    }
  }
  if (pos < text.size()) out += "...";
  return out;
}

int StatusForCode(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument:
    case ErrorCode::kCorruptData:
    case ErrorCode::kUnsupported:
      return 400;
    case ErrorCode::kNotFound:
      return 404;
    case ErrorCode::kResourceExhausted:
      return 413;
    case ErrorCode::kUnavailable:
      return 503;
    case ErrorCode::kCancelled:
      return kStatusClientClosed;
    case ErrorCode::kDeadlineExceeded:
      return 504;
    case ErrorCode::kInternal:
      return 500;
  }
  return 500;
}

const char* OpenAiType(int status) {
  switch (status) {
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 429:
      return "rate_limit_error";
    case 503:
      return "overloaded_error";
    default:
      return status < 500 ? "invalid_request_error" : "server_error";
  }
}

}  // namespace

ErrorReply MapError(const std::exception& e) {
  ErrorReply r;
  if (const auto* http = dynamic_cast<const HttpError*>(&e)) {
    r.status = http->status();
    r.retry_after = http->retry_after();
    r.code = http->code();
    r.message = CleanMessage(http->what());
  } else if (const auto* err = dynamic_cast<const Error*>(&e)) {
    r.code = err->code();
    r.status = StatusForCode(r.code);
    r.message = CleanMessage(err->what());
  } else {
    HYMT_LOG_ERROR("unexpected exception in a request: ", e.what());
    r.status = 500;
    r.code = ErrorCode::kInternal;
    r.message = "internal error";
  }
  if (r.status == 503 && r.retry_after <= 0) r.retry_after = kDefaultRetryAfterSeconds;
  return r;
}

ErrorReply MapError(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    return MapError(ex);
  } catch (...) {
    HYMT_LOG_ERROR("unexpected non-standard exception in a request");
    return ErrorReply{500, 0, ErrorCode::kInternal, "internal error"};
  }
}

std::string ErrorBody(const ErrorReply& reply, ErrorStyle style) {
  Json body = Json::MakeObject();
  if (style == ErrorStyle::kPlain) {
    body.Set("error", reply.message);
  } else {
    Json detail = Json::MakeObject();
    detail.Set("message", reply.message);
    detail.Set("type", OpenAiType(reply.status));
    detail.Set("code", ErrorCodeName(reply.code));
    body.Set("error", std::move(detail));
  }
  return body.Dump();
}

ErrorReply ReplyForStatus(int status) {
  ErrorReply r;
  r.status = status;
  switch (status) {
    case 400:
      r.code = ErrorCode::kInvalidArgument;
      r.message = "malformed HTTP request (or its body did not arrive in time)";
      break;
    case 404:
      r.code = ErrorCode::kNotFound;
      r.message = "no such route";
      break;
    case 405:
      r.code = ErrorCode::kInvalidArgument;
      r.message = "method not allowed on this route";
      break;
    case 408:
      r.code = ErrorCode::kInvalidArgument;
      r.message = "the request did not arrive in time";
      break;
    case 413:
      r.code = ErrorCode::kResourceExhausted;
      r.message = "request body too large";
      break;
    case 414:
      r.code = ErrorCode::kInvalidArgument;
      r.message = "request URI too long";
      break;
    case 416:
      r.code = ErrorCode::kInvalidArgument;
      r.message = "range not satisfiable";
      break;
    default:
      r.code = status < 500 ? ErrorCode::kInvalidArgument : ErrorCode::kInternal;
      r.message = status < 500 ? "bad request" : "internal error";
  }
  return r;
}

}  // namespace hymt
