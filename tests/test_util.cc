#include "test_util.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <vector>

namespace hymt::test {

std::string SourceDir() { return HYMT_SOURCE_DIR; }
std::string TestDataDir() { return SourceDir() + "/tests/data"; }

std::string SharedDataDir() {
  namespace fs = std::filesystem;
  if (const char* env = std::getenv("HYMT_SHARED_DATA")) {
    if (fs::is_directory(env)) return env;
    return "";
  }
  std::vector<fs::path> candidates = {fs::path(SourceDir()) / ".." / "shared" / "data"};
  std::error_code ec;
  for (fs::path p = fs::current_path(ec); !p.empty() && p != p.root_path(); p = p.parent_path())
    candidates.push_back(p / "shared" / "data");
  for (const auto& c : candidates)
    if (fs::is_directory(c / "flores200-devtest")) return fs::canonical(c).string();
  return "";
}

namespace {
struct TempDirs {
  std::vector<std::string> dirs;
  ~TempDirs() {
    for (const auto& d : dirs) {
      std::error_code ec;
      std::filesystem::remove_all(d, ec);
    }
  }
};
TempDirs g_temp_dirs;
std::mutex g_mu;
}  // namespace

std::string TempDir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "hymt-test-XXXXXX").string();
  char* made = mkdtemp(tmpl.data());
  if (made == nullptr) return "";
  std::lock_guard<std::mutex> lock(g_mu);
  g_temp_dirs.dirs.push_back(made);
  return made;
}

}  // namespace hymt::test
