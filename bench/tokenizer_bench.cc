// Tokenizer throughput on one thread: encodes every FLORES-200 devtest line (38 languages, taken
// round-robin so that languages mix) and reports MB/s of UTF-8 input against the 10 MB/s target.
//
//   build/bench/tokenizer_bench [--vocab FILE|DIR] [--flores DIR] [--runs N]
//
// Defaults: hunyuan/hy.tiktoken and flores200-devtest/ in the shared data folder ($HYMT_SHARED_DATA,
// else shared/data found above the repository). Each "cold" run loads the tokenizer anew
// (not timed), so its piece cache starts empty; "warm" runs reuse one tokenizer.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <string>
#include <vector>

#include "core/mapped_file.h"
#include "core/status.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer.h"

namespace hymt {
namespace {

constexpr double kTargetMBps = 10.0;  // the target for one core

struct Options {
  std::string vocab;
  std::string flores;
  int runs = 7;
};

// $HYMT_SHARED_DATA, else the first shared/data found walking up from the source tree or the current
// folder (worktrees sit at different depths below it).
std::string SharedData() {
  namespace fs = std::filesystem;
  if (const char* env = std::getenv("HYMT_SHARED_DATA")) return env;
  std::error_code ec;
  for (fs::path start : {fs::path(HYMT_SOURCE_DIR), fs::current_path(ec)})
    for (fs::path p = start; !p.empty() && p != p.root_path(); p = p.parent_path())
      if (fs::is_directory(p / "shared" / "data" / "flores200-devtest", ec))
        return (p / "shared" / "data").string();
  return "../shared/data";
}

Tokenizer Load(const std::string& path) {
  return IsDirectory(path)         ? Tokenizer::FromModelDir(path)
         : EndsWith(path, ".json") ? Tokenizer::FromTokenizerJson(path)
                                   : Tokenizer::FromTiktokenFile(path);
}

// Lines of every file in `dir`, interleaved: line 1 of each language, then line 2, ...
std::vector<std::string> MixedLines(const std::string& dir) {
  std::vector<std::vector<std::string>> files;
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec))
    if (entry.path().extension() == ".txt") names.push_back(entry.path().string());
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    std::string data = ReadFile(name);
    files.push_back(StrSplit(data, '\n'));
    if (!files.back().empty() && files.back().back().empty()) files.back().pop_back();
  }
  std::vector<std::string> lines;
  for (size_t i = 0;; ++i) {
    bool any = false;
    for (const auto& f : files) {
      if (i >= f.size()) continue;
      lines.push_back(f[i]);
      any = true;
    }
    if (!any) break;
  }
  if (lines.empty()) Fail(ErrorCode::kNotFound, "no FLORES lines in ", dir);
  return lines;
}

double ThreadCpuSeconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

// MB/s of one timed call, by the wall clock and by this thread's CPU time (the two differ when other
// work shares the cores).
struct Rate {
  double wall, cpu;
};
template <typename F>
Rate Measure(double mb, F f) {
  auto t0 = std::chrono::steady_clock::now();
  double c0 = ThreadCpuSeconds();
  f();
  double cpu = ThreadCpuSeconds() - c0;
  double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return {mb / wall, mb / cpu};
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void Print(const char* what, const std::vector<Rate>& rates) {
  std::vector<double> wall, cpu;
  for (const Rate& r : rates) {
    wall.push_back(r.wall);
    cpu.push_back(r.cpu);
  }
  double median = Median(wall);
  std::printf(
      "%-28s median %7.2f MB/s (min %.2f, max %.2f; %zu runs; %.2f MB/s by CPU time) = %.2fx the %.0f MB/s "
      "target\n",
      what, median, *std::min_element(wall.begin(), wall.end()), *std::max_element(wall.begin(), wall.end()),
      rates.size(), Median(cpu), median / kTargetMBps, kTargetMBps);
}

int Run(const Options& options) {
  std::vector<std::string> lines = MixedLines(options.flores);
  size_t bytes = 0;
  for (const auto& l : lines) bytes += l.size();
  const double mb = bytes / 1e6;
  Tokenizer warm = Load(options.vocab);
  std::printf(
      "tokenizer_bench: %zu lines, %.2f MB of UTF-8, vocabulary %s (%d tokens, rule %s), one thread\n",
      lines.size(), mb, options.vocab.c_str(), warm.n_tokens(), SplitRuleName(warm.split_rule()));

  size_t n_ids = 0;
  auto encode_all = [&](const Tokenizer& t) {
    n_ids = 0;
    for (const auto& l : lines) n_ids += t.Encode(l).size();
  };
  std::vector<Rate> cold, hot, split;
  for (int r = 0; r < options.runs; ++r) {
    Tokenizer fresh = Load(options.vocab);  // a new tokenizer: an empty piece cache
    cold.push_back(Measure(mb, [&] { encode_all(fresh); }));
  }
  encode_all(warm);
  for (int r = 0; r < options.runs; ++r) hot.push_back(Measure(mb, [&] { encode_all(warm); }));
  std::vector<std::string_view> pieces;
  size_t n_pieces = 0;
  for (int r = 0; r < options.runs; ++r) {
    split.push_back(Measure(mb, [&] {
      n_pieces = 0;
      for (const auto& l : lines) {
        pieces.clear();
        SplitText(warm.split_rule(), l, &pieces);
        n_pieces += pieces.size();
      }
    }));
  }
  std::printf("%zu tokens (%.2f bytes/token), %zu pieces\n", n_ids, static_cast<double>(bytes) / n_ids,
              n_pieces);
  Print("encode, cold piece cache:", cold);
  Print("encode, warm piece cache:", hot);
  Print("split rule alone (no BPE):", split);
  return 0;
}

}  // namespace
}  // namespace hymt

int main(int argc, char** argv) {
  hymt::Options options;
  options.vocab = hymt::SharedData() + "/hunyuan/hy.tiktoken";
  options.flores = hymt::SharedData() + "/flores200-devtest";
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    bool has_value = i + 1 < argc;
    if (arg == "--vocab" && has_value) {
      options.vocab = argv[++i];
    } else if (arg == "--flores" && has_value) {
      options.flores = argv[++i];
    } else if (arg == "--runs" && has_value) {
      options.runs = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: tokenizer_bench [--vocab FILE|DIR] [--flores DIR] [--runs N]\n");
      return 2;
    }
  }
  try {
    return hymt::Run(options);
  } catch (const hymt::Error& e) {
    std::fprintf(stderr, "tokenizer_bench: %s\n", e.what());
    return 1;
  }
}
