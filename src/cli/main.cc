// hymt command line: dispatches to one subcommand per file in src/cli/.
#include <cstdio>
#include <cstring>
#include <string>

#include "core/status.h"

int main(int argc, char** argv) {
  if (argc >= 2 && (std::strcmp(argv[1], "--version") == 0 || std::strcmp(argv[1], "version") == 0)) {
    std::printf("hymt %s\n", HYMT_VERSION);
    return 0;
  }
  std::fprintf(stderr, "usage: hymt <command> [options]\n");
  return 2;
}
