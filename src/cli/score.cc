// `hymt score`: corpus-level BLEU, chrF and chrF++ of a hypothesis file against one or more reference
// files, printed the way sacreBLEU's text mode prints them (without the signature). Files are read
// the way sacreBLEU's command line reads them: split on '\n' only, each line stripped of trailing
// whitespace with Python's rules, so the scores equal `sacrebleu REF... -i HYP` to 1e-9.

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <exception>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "cli/commands.h"
#include "core/utf8.h"
#include "translate/metrics.h"

namespace hymt {
namespace {

constexpr char kUsage[] =
    "usage: hymt score --hyp FILE --ref FILE [--ref FILE ...] [--tokenize 13a|zh|intl|char|none]\n"
    "                  [--metrics bleu,chrf,chrf++] [--lowercase]\n"
    "\n"
    "Corpus BLEU, chrF and chrF++ as sacreBLEU 2.6.0 computes them. FILEs are UTF-8, one segment\n"
    "per line; every --ref file must have as many lines as --hyp. An empty reference line is\n"
    "skipped for that segment (as sacreBLEU does), but each line needs one non-empty reference.\n"
    "\n"
    "  --hyp FILE       system output\n"
    "  --ref FILE       reference; repeat for several references\n"
    "  --tokenize NAME  BLEU tokenizer (default 13a; use zh for Chinese)\n"
    "  --metrics LIST   comma-separated, printed in this order (default bleu,chrf,chrf++)\n"
    "  --lowercase      case-insensitive BLEU and chrF (sacreBLEU's -lc and --chrf-lowercase)\n";

enum class Metric { kBleu, kChrf, kChrfPlusPlus };

struct ScoreArgs {
  std::string hyp_path;
  std::vector<std::string> ref_paths;
  BleuTokenizer tokenizer = BleuTokenizer::k13a;
  std::vector<Metric> metrics;  // in the order requested, no duplicates
  bool lowercase = false;
  bool help = false;
};

// A problem with the command line; the usage text is printed after the message.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A problem with the input files.
class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

std::string Lowercase(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

std::vector<Metric> ParseMetrics(std::string_view list) {
  std::vector<Metric> metrics;
  size_t start = 0;
  while (start <= list.size()) {
    size_t comma = list.find(',', start);
    if (comma == std::string_view::npos) comma = list.size();
    const std::string name = Lowercase(list.substr(start, comma - start));
    Metric metric;
    if (name == "bleu") {
      metric = Metric::kBleu;
    } else if (name == "chrf") {
      metric = Metric::kChrf;
    } else if (name == "chrf++") {
      metric = Metric::kChrfPlusPlus;
    } else {
      throw UsageError("unknown metric '" + name + "' in --metrics (expected bleu, chrf, chrf++)");
    }
    if (std::find(metrics.begin(), metrics.end(), metric) == metrics.end()) {
      metrics.push_back(metric);
    }
    start = comma + 1;
  }
  return metrics;
}

ScoreArgs ParseArgs(int argc, char** argv) {
  ScoreArgs args;
  bool metrics_given = false;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    std::string value;
    bool has_value = false;
    // Both "--flag VALUE" and "--flag=VALUE".
    if (const size_t eq = flag.find('='); flag.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag.resize(eq);
      has_value = true;
    }
    const auto take_value = [&]() -> std::string {
      if (has_value) return value;
      if (i + 1 >= argc) throw UsageError(flag + " needs a value");
      return argv[++i];
    };
    if (flag == "-h" || flag == "--help") {
      args.help = true;
    } else if (flag == "--lowercase") {
      if (has_value) throw UsageError("--lowercase takes no value");
      args.lowercase = true;
    } else if (flag == "--hyp") {
      if (!args.hyp_path.empty()) throw UsageError("--hyp given twice");
      args.hyp_path = take_value();
      if (args.hyp_path.empty()) throw UsageError("--hyp needs a file name");
    } else if (flag == "--ref") {
      args.ref_paths.push_back(take_value());
      if (args.ref_paths.back().empty()) throw UsageError("--ref needs a file name");
    } else if (flag == "--tokenize") {
      const std::string name = take_value();
      const auto tokenizer = ParseBleuTokenizer(name);
      if (!tokenizer) {
        throw UsageError("unknown tokenizer '" + name + "' (expected 13a, zh, intl, char, none)");
      }
      args.tokenizer = *tokenizer;
    } else if (flag == "--metrics") {
      args.metrics = ParseMetrics(take_value());
      metrics_given = true;
    } else {
      throw UsageError("unknown argument '" + std::string(argv[i]) + "'");
    }
  }
  if (args.help) return args;
  if (args.hyp_path.empty()) throw UsageError("--hyp is required");
  if (args.ref_paths.empty()) throw UsageError("at least one --ref is required");
  if (!metrics_given) args.metrics = {Metric::kBleu, Metric::kChrf, Metric::kChrfPlusPlus};
  return args;
}

// The file's lines as sacreBLEU's command line reads them: split on '\n' only (a final line without
// '\n' counts, no empty line after a final '\n'), then Python's rstrip(). Invalid UTF-8 is an error
// naming the line.
std::vector<std::string> ReadLines(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError("cannot open '" + path + "'");
  std::string data;
  try {
    data.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  } catch (const std::exception& e) {  // e.g. the path is a directory
    throw InputError("cannot read '" + path + "': " + e.what());
  }
  if (in.bad()) throw InputError("cannot read '" + path + "'");
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < data.size()) {
    size_t end = data.find('\n', start);
    if (end == std::string::npos) end = data.size();
    const std::string_view line(data.data() + start, end - start);
    if (const size_t bad = FindInvalidUtf8(line); bad != std::string_view::npos) {
      throw InputError("'" + path + "' line " + std::to_string(lines.size() + 1) +
                       ": invalid UTF-8 at byte " + std::to_string(bad + 1) + " of the line");
    }
    lines.emplace_back(RstripPythonWhitespace(line));
    start = end + 1;
  }
  if (lines.empty()) throw InputError("'" + path + "' is empty: nothing to score");
  return lines;
}

int Score(const ScoreArgs& args) {
  const std::vector<std::string> hyps = ReadLines(args.hyp_path);
  std::vector<std::vector<std::string>> refs;
  for (const std::string& path : args.ref_paths) {
    refs.push_back(ReadLines(path));
    if (refs.back().size() != hyps.size()) {
      throw InputError("line counts differ: '" + args.hyp_path + "' has " + std::to_string(hyps.size()) +
                       " lines, '" + path + "' has " + std::to_string(refs.back().size()));
    }
  }
  // sacreBLEU drops empty references per segment but fails when none is left; say where.
  for (size_t i = 0; i < hyps.size(); ++i) {
    const bool any = std::any_of(refs.begin(), refs.end(),
                                 [i](const std::vector<std::string>& r) { return !r[i].empty(); });
    if (!any) {
      std::string files;
      for (const std::string& path : args.ref_paths) files += (files.empty() ? "'" : ", '") + path + "'";
      throw InputError("line " + std::to_string(i + 1) + " is empty in every reference file (" + files +
                       "); each segment needs one non-empty reference");
    }
  }
  std::vector<std::string> output;
  for (Metric metric : args.metrics) {
    if (metric == Metric::kBleu) {
      BleuOptions options;
      options.tokenizer = args.tokenizer;
      options.lowercase = args.lowercase;
      output.push_back(FormatBleu(CorpusBleu(hyps, refs, options)));
    } else {
      ChrfOptions options = metric == Metric::kChrf ? ChrfOptions{} : ChrfPlusPlusOptions();
      options.lowercase = args.lowercase;
      output.push_back(FormatChrf(CorpusChrf(hyps, refs, options)));
    }
  }
  // Print only once everything is computed, so an error never leaves half the results behind.
  for (const std::string& line : output) std::printf("%s\n", line.c_str());
  return 0;
}

}  // namespace

int RunScore(int argc, char** argv) {
  constexpr int kExitError = 2;
  try {
    const ScoreArgs args = ParseArgs(argc, argv);
    if (args.help) {
      std::fputs(kUsage, stdout);
      return 0;
    }
    return Score(args);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "hymt score: %s\n\n%s", e.what(), kUsage);
  } catch (const std::exception& e) {
    // InputError, hymt::Error from the metrics, and anything else (e.g. out of memory): report, exit 2.
    std::fprintf(stderr, "hymt score: error: %s\n", e.what());
  }
  return kExitError;
}

}  // namespace hymt
