// The server's one error mapper: every failure of a request (an hymt::Error thrown anywhere below, a
// refusal at the HTTP edge, an unexpected exception) becomes an HTTP status, an optional Retry-After,
// and a JSON body in the style of the API that was called.
#pragma once

#include <exception>
#include <string>

#include "core/status.h"

namespace hymt {

// A refusal decided at the HTTP edge whose status the error code alone does not pin down (401, 403,
// 405, 413, 415, 429, ...). Everything else throws a plain hymt::Error and is mapped by its code.
class HttpError : public Error {
 public:
  HttpError(int status, ErrorCode code, const std::string& message, int retry_after_seconds = 0)
      : Error(code, message), status_(status), retry_after_(retry_after_seconds) {}
  int status() const { return status_; }
  int retry_after() const { return retry_after_; }

 private:
  int status_;
  int retry_after_;
};

// Status used when a client went away before its answer was ready (nginx's convention); the
// response is written only for the log, nobody reads it.
constexpr int kStatusClientClosed = 499;

struct ErrorReply {
  int status = 500;
  int retry_after = 0;  // seconds; 0: no Retry-After header
  ErrorCode code = ErrorCode::kInternal;
  std::string message;  // valid UTF-8, at most kMaxErrorMessageBytes
};

// The mapping by code: kInvalidArgument, kCorruptData, kUnsupported 400; kNotFound 404;
// kResourceExhausted 413; kUnavailable 503 (Retry-After); kCancelled 499; kDeadlineExceeded 504;
// kInternal 500. An HttpError keeps its own status. Anything that is not an hymt::Error is a bug of
// ours: 500 with a generic message (the detail goes to the log only).
ErrorReply MapError(const std::exception& e);
ErrorReply MapError(std::exception_ptr e);

// Bodies. LibreTranslate (and the native API): {"error": "message"}. OpenAI:
// {"error": {"message": ..., "type": ..., "code": ...}} with OpenAI's type names
// (invalid_request_error, authentication_error, permission_error, rate_limit_error, server_error, ...).
enum class ErrorStyle { kPlain, kOpenAi };
std::string ErrorBody(const ErrorReply& reply, ErrorStyle style);

// The reply for a status the HTTP library produced on its own (no route, body too large, bad request
// line, read timeout), with a message that says what happened.
ErrorReply ReplyForStatus(int status);

}  // namespace hymt
