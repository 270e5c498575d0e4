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

// `hymt translate [--model PATH] --from CODE|auto --to CODE [TEXT...]`: translates each TEXT, or each
// stdin line when none is given; one translation per output line.
int RunTranslate(int argc, char** argv);

// `hymt info --model PATH`: architecture, parameters, stored types, memory needed.
int RunInfo(int argc, char** argv);

// `hymt plan (--model PATH | --shape hunyuan-7b|hy-1.8b --type T) [--gpu-mem 6G] [--cpu-mem 16G] ...`
int RunPlan(int argc, char** argv);

// `hymt tokenize (--model PATH | --vocab FILE) [--decode]`: one line of ids per stdin line.
int RunTokenize(int argc, char** argv);

// `hymt generate [--model PATH] [--chat] PROMPT`: raw completion, for debugging models.
int RunGenerate(int argc, char** argv);

// `hymt eval [--model PATH] --from en --to zh --src FILE --ref FILE`: translate and score.
int RunEval(int argc, char** argv);

// `hymt quantize --model HF_DIR|GGUF --type T -o OUT.gguf`
int RunQuantize(int argc, char** argv);

// `hymt make-random --shape hunyuan-7b|hy-1.8b|tiny --type T -o DIR|FILE.gguf`
int RunMakeRandom(int argc, char** argv);

// `hymt bench --model PATH [--device cpu|cuda] ...`: prefill and decode rates against measured ceilings.
int RunBench(int argc, char** argv);

// `hymt forward --ids "1 2 3" -o FILE`: teacher-forced logits as raw f32, for parity checks.
int RunForward(int argc, char** argv);

// `hymt serve [--model PATH] [--host H] [--port P] ...` (built with HYMT_SERVER).
int RunServe(int argc, char** argv);

// `hymt detect [TEXT...]`: language identification (built with HYMT_SERVER).
int RunDetect(int argc, char** argv);

}  // namespace hymt
