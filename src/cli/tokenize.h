// `hymt tokenize`: text to token ids and back, one line at a time (for checking a model's vocabulary
// against other tools).
#pragma once

namespace hymt {

// `hymt tokenize (--model DIR | --vocab FILE) [--decode] [--normalize none|nfc]`: reads stdin line by
// line (split on '\n') and writes one line per input line: the space-separated token ids of the line
// (special tokens written literally are matched), or with --decode the text of a line of ids. argv[0]
// is the subcommand's own name ("tokenize"). Returns 0 on success, 2 on bad usage or input (the
// reason on stderr).
int RunTokenize(int argc, char** argv);

}  // namespace hymt
