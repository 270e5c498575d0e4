// The error policy (one for the whole project).
//
// - Anything a user, a request or a file can cause throws hymt::Error with a code and a message that
//   says what was expected, what was found, and where (file, tensor, field). Nothing a user does may
//   abort the process: the edges (CLI main, HTTP handlers, the engine thread) catch Error and report it.
// - HYMT_CHECK is for invariants whose failure means a bug in hymt; it aborts with file and line.
#pragma once

#include <stdexcept>
#include <string>

#include "core/strings.h"

namespace hymt {

enum class ErrorCode {
  kInvalidArgument,    // bad user input: unknown language, bad option, malformed request
  kNotFound,           // a file, tensor or key that should exist does not
  kCorruptData,        // a file is truncated or inconsistent
  kUnsupported,        // valid but not something hymt runs (architecture, tensor type)
  kResourceExhausted,  // over a memory budget or a limit
  kUnavailable,        // temporarily unable (queue full, loading, shutting down)
  kCancelled,          // the caller went away or asked to stop
  kDeadlineExceeded,   // ran past its deadline
  kInternal,           // our fault (a CUDA call failed, an I/O error we did not expect)
};

// Short lowercase name of a code ("invalid_argument"), used in logs and JSON errors.
const char* ErrorCodeName(ErrorCode code);

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ErrorCode code() const { return code_; }

 private:
  ErrorCode code_;
};

// Throws Error(code, StrCat(args...)).
template <typename... Args>
[[noreturn]] void Fail(ErrorCode code, const Args&... args) {
  throw Error(code, StrCat(args...));
}

[[noreturn]] void CheckFailed(const char* file, int line, const char* cond, const std::string& msg);

}  // namespace hymt

// Invariant check: a failure is a bug in hymt, never the user's fault.
#define HYMT_CHECK(cond, ...)                                                           \
  do {                                                                                  \
    if (!(cond)) ::hymt::CheckFailed(__FILE__, __LINE__, #cond, ::hymt::StrCat("" __VA_OPT__(, ) __VA_ARGS__)); \
  } while (0)
