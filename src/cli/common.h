// Options shared by the commands that open a model (translate, serve, eval, bench, generate).
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "cli/args.h"
#include "runtime/session.h"

namespace hymt {

void AddSessionOptions(Args& args);
SessionOptions SessionOptionsFromArgs(const Args& args);

// Tells the user which model runs (and that it is the demo model when it is).
void PrintModelBanner(const Session& session, FILE* out);

// Reads stdin lines (without their '\n'; a trailing '\r' is kept out too).
std::vector<std::string> ReadLines(FILE* in);
std::vector<std::string> ReadFileLines(const std::string& path);

}  // namespace hymt
