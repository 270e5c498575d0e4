// Helpers shared by the formats_* tests.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <initializer_list>
#include <string>
#include <string_view>

#include "core/status.h"

namespace hymt::test {

// Writes `bytes` to `path`, replacing it.
inline void WriteBytes(const std::string& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}

// Checks that `message` contains every one of `parts`.
inline void ExpectMessageHas(std::string_view message, std::initializer_list<std::string_view> parts) {
  for (std::string_view part : parts)
    EXPECT_NE(message.find(part), std::string_view::npos)
        << "message \"" << message << "\" lacks \"" << part << "\"";
}

}  // namespace hymt::test

// Runs `stmt` and expects a hymt::Error with `expected_code` whose message contains each further argument.
#define EXPECT_HYMT_ERROR(stmt, expected_code, ...)                                              \
  do {                                                                                           \
    try {                                                                                        \
      stmt;                                                                                      \
      ADD_FAILURE() << "expected an error from: " #stmt;                                         \
    } catch (const ::hymt::Error& hymt_error_) {                                                 \
      EXPECT_EQ(::hymt::ErrorCodeName(hymt_error_.code()), ::hymt::ErrorCodeName(expected_code)) \
          << hymt_error_.what();                                                                 \
      ::hymt::test::ExpectMessageHas(hymt_error_.what(), {__VA_ARGS__});                         \
    }                                                                                            \
  } while (0)
