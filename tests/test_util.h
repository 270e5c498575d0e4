// Helpers shared by the C++ tests: where the repository's test data and ../shared/data are.
#pragma once

#include <string>

namespace hymt::test {

// The repository root (compiled in).
std::string SourceDir();
// tests/data inside the repository.
std::string TestDataDir();
// The shared data folder (FLORES, Tatoeba, the official vocabulary): $HYMT_SHARED_DATA, else
// ../shared/data beside the repository or above the current directory. Empty when absent.
std::string SharedDataDir();
// A fresh empty temporary directory (removed at exit).
std::string TempDir();

}  // namespace hymt::test

// Skips the current test with a clear message when ../shared/data is not present.
#define HYMT_REQUIRE_SHARED_DATA()                                                               \
  do {                                                                                           \
    if (::hymt::test::SharedDataDir().empty())                                                   \
      GTEST_SKIP() << "shared data not found: set HYMT_SHARED_DATA or place it at ../shared/data"; \
  } while (0)
