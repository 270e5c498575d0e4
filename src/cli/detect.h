// `hymt detect`: language identification from the command line (built with HYMT_SERVER).
#pragma once

namespace hymt {

// `hymt detect [--candidates CODES] [TEXT...]`: prints "code confidence" for each TEXT, or for each stdin
// line when none is given, one line each ("und 0.00" when undetermined). argv[0] is "detect". Returns 0,
// or 2 for bad usage (reported on stderr).
int RunDetect(int argc, char** argv);

}  // namespace hymt
