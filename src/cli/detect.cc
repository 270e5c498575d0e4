// `hymt detect`: prints the language of each text, as the server's auto-detection would see it.
#include "cli/commands.h"

#ifdef HYMT_HAVE_SERVER

#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/strings.h"
#include "translate/segmenter.h"

namespace hymt {
namespace {

constexpr char kUsage[] =
    "usage: hymt detect [--candidates CODES] [TEXT...]\n"
    "\n"
    "Prints \"code confidence\" for each TEXT, or for each line of stdin when no TEXT is given.\n"
    "\"und 0.00\" means undetermined (no letters, or no candidate fits).\n"
    "\n"
    "  --candidates CODES  comma-separated hymt codes to choose from (default: all 38)\n";

void PrintDetection(const LanguageDetector& detector, std::string_view text,
                    const std::vector<std::string>& candidates) {
  auto d = detector.Detect(text, candidates);
  if (d) {
    std::printf("%s %.2f\n", d->code.c_str(), d->confidence);
  } else {
    std::printf("und 0.00\n");
  }
}

}  // namespace

int RunDetect(int argc, char** argv) {
  std::vector<std::string> candidates, texts;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    std::string value;
    if (arg == "--candidates") {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "hymt detect: --candidates needs a value\n\n%s", kUsage);
        return 2;
      }
      value = argv[++i];
    } else if (StartsWith(arg, "--candidates=")) {
      value = arg.substr(std::strlen("--candidates="));
    } else if (StartsWith(arg, "--") && arg != "--") {
      std::fprintf(stderr, "hymt detect: unknown option %s\n\n%s", arg.c_str(), kUsage);
      return 2;
    } else {
      texts.push_back(arg);
      continue;
    }
    for (const auto& code : StrSplit(value, ',')) {
      if (code.empty()) continue;
      try {
        candidates.push_back(RequireLanguage(code).code);
      } catch (const Error& e) {
        std::fprintf(stderr, "hymt detect: %s\n", e.what());
        return 2;
      }
    }
  }
  auto detector = CreateLanguageDetector();
  if (!texts.empty()) {
    for (const auto& text : texts) PrintDetection(*detector, text, candidates);
  } else {
    for (std::string line; std::getline(std::cin, line);) PrintDetection(*detector, line, candidates);
  }
  return 0;
}

}  // namespace hymt

#endif  // HYMT_HAVE_SERVER
