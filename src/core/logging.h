// Minimal leveled logging to stderr. Level from HYMT_LOG (debug, info, warn, error; default info).
// Request text never goes through here unless the server was asked to log it.
#pragma once

#include <string>

#include "core/strings.h"

namespace hymt {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

LogLevel CurrentLogLevel();
void SetLogLevel(LogLevel level);
void LogLine(LogLevel level, const std::string& message);

}  // namespace hymt

#define HYMT_LOG(level, ...)                                                           \
  do {                                                                                 \
    if (::hymt::LogLevel::level >= ::hymt::CurrentLogLevel())                          \
      ::hymt::LogLine(::hymt::LogLevel::level, ::hymt::StrCat(__VA_ARGS__));           \
  } while (0)
#define HYMT_LOG_DEBUG(...) HYMT_LOG(kDebug, __VA_ARGS__)
#define HYMT_LOG_INFO(...) HYMT_LOG(kInfo, __VA_ARGS__)
#define HYMT_LOG_WARN(...) HYMT_LOG(kWarn, __VA_ARGS__)
#define HYMT_LOG_ERROR(...) HYMT_LOG(kError, __VA_ARGS__)
