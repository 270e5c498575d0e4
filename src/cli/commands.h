// Entry points of the hymt subcommands. Each takes the arguments that follow the program name, so
// argv[0] is the subcommand's own name ("score") and argv[1..argc-1] its options, as main() receives
// them. Each returns the process exit status: 0 on success, 2 for bad input or usage (reported on
// stderr); none of them aborts on bad input.

#pragma once

namespace hymt {

// `hymt score --hyp FILE --ref FILE [--ref FILE ...] [--tokenize 13a|zh|intl|char|none]
//  [--metrics bleu,chrf,chrf++] [--lowercase]`: corpus BLEU / chrF / chrF++ as sacreBLEU 2.6.0
// prints them, one line per metric on stdout.
int RunScore(int argc, char** argv);

}  // namespace hymt
