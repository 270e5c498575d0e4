// hymt command line: one subcommand per file in src/cli/. Errors caused by the user or by a file are
// reported on stderr with exit code 2; nothing a user types aborts the process.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "cli/commands.h"
#include "core/status.h"

namespace {

struct Command {
  const char* name;
  int (*run)(int, char**);
  const char* help;
};

const Command kCommands[] = {
    {"translate", hymt::RunTranslate, "translate text (arguments or stdin lines)"},
#ifdef HYMT_HAVE_SERVER
    {"serve", hymt::RunServe, "serve the web page and the HTTP APIs"},
    {"detect", hymt::RunDetect, "detect the language of text"},
#endif
    {"info", hymt::RunInfo, "describe a model: architecture, parameters, stored types, memory"},
    {"plan", hymt::RunPlan, "print the memory plan for a model or a shape within budgets"},
    {"tokenize", hymt::RunTokenize, "text to token ids (or --decode ids to text)"},
    {"generate", hymt::RunGenerate, "complete a raw prompt (chat template applied with --chat)"},
    {"forward", hymt::RunForward, "teacher-forced logits of a token sequence (raw f32), for parity checks"},
    {"eval", hymt::RunEval, "translate a test set and score it (BLEU, chrF)"},
    {"score", hymt::RunScore, "score translations against references (BLEU, chrF, chrF++)"},
    {"quantize", hymt::RunQuantize, "write a GGUF file in another weight format"},
    {"bench", hymt::RunBench, "measure prefill and decode speed against the memory bandwidth"},
    {"make-random", hymt::RunMakeRandom, "write a random-weight checkpoint of a real shape"},
};

void Usage(FILE* out) {
  std::fprintf(out, "usage: hymt <command> [options]   (hymt <command> --help for its options)\n\ncommands:\n");
  for (const Command& c : kCommands) std::fprintf(out, "  %-12s %s\n", c.name, c.help);
  std::fprintf(out, "  %-12s %s\n", "--version", "print the version");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    Usage(stderr);
    return 2;
  }
  std::string cmd = argv[1];
  if (cmd == "--version" || cmd == "version") {
    std::printf("hymt %s\n", HYMT_VERSION);
    return 0;
  }
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    Usage(stdout);
    return 0;
  }
  for (const Command& c : kCommands) {
    if (cmd != c.name) continue;
    try {
      // Each command sees argv[0] = its own name.
      return c.run(argc - 1, argv + 1);
    } catch (const hymt::Error& e) {
      std::fprintf(stderr, "hymt %s: %s\n", c.name, e.what());
      return 2;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "hymt %s: internal error: %s\n", c.name, e.what());
      return 1;
    }
  }
  std::fprintf(stderr, "hymt: unknown command '%s'\n", cmd.c_str());
  Usage(stderr);
  return 2;
}
