// Pre-tokenizers: the split rules applied to text before byte-pair encoding, written by hand (no regex
// engine) to match exactly what the reference regexes do with leftmost-first, backtracking semantics.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

namespace hymt {

// The reference regexes, spelled as tokenizer.json files and llama.cpp write them.
// Hunyuan 7B family (tiktoken, llama.cpp `hunyuan`); note the single-digit \p{N}.
constexpr std::string_view kHunyuanSplitRegex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// The 1.8B hy_ family (llama.cpp `hunyuan-dense`, as DeepSeek-V3): three passes, each splitting the
// pieces of the one before.
constexpr std::string_view kHunyuanDenseSplitRegexes[3] = {
    R"(\p{N}{1,3})",
    R"([一-龥぀-ゟ゠-ヿ]+)",
    R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
};

enum class SplitRule {
  // kHunyuanSplitRegex, with leftmost-first alternation and backtracking as tiktoken's fancy-regex
  // applies it; case-insensitive contractions ('S, 'LL and 'ſ match too).
  kHunyuan,
  // kHunyuanDenseSplitRegexes in turn, each as HF's Split with behavior Isolated: matches and the
  // gaps between them both become pieces.
  kHunyuanDense,
};

// llama.cpp's name of the rule: "hunyuan" or "hunyuan-dense".
const char* SplitRuleName(SplitRule rule);
// The rule llama.cpp calls `name` (GGUF `tokenizer.ggml.pre`), or nullopt.
std::optional<SplitRule> SplitRuleFromName(std::string_view name);

// Appends the pieces of `text` under `rule` to *pieces: non-empty, in order, concatenating to `text`.
// `text` need not be valid UTF-8: every byte that is not part of a valid sequence becomes a piece of
// its own, and the valid runs between such bytes are split independently (as if each were a whole
// text, so a lookahead never looks past an invalid byte).
void SplitText(SplitRule rule, std::string_view text, std::vector<std::string_view>* pieces);

}  // namespace hymt
