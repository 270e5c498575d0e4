#include "cli/commands.h"

#include <charconv>
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "core/mapped_file.h"
#include "core/status.h"
#include "tokenizer/tokenizer.h"

namespace hymt {
namespace {

constexpr char kUsage[] =
    "usage: hymt tokenize (--model DIR | --vocab FILE) [--decode] [--normalize none|nfc]\n"
    "  Reads stdin line by line; writes the token ids of each line, space-separated.\n"
    "  --model DIR       a model folder (tokenizer.json, else hy.tiktoken)\n"
    "  --vocab FILE      a hy.tiktoken file, or a tokenizer.json (by its .json name)\n"
    "  --decode          read lines of ids and write their text instead\n"
    "  --normalize MODE  none or nfc (default: what the vocabulary declares; hy.tiktoken: none)\n";

struct Args {
  std::string model, vocab;
  bool decode = false;
  std::optional<Normalization> normalize;
};

// Throws Error(kInvalidArgument) on bad usage; returns nullopt for --help.
std::optional<Args> ParseArgs(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) Fail(ErrorCode::kInvalidArgument, arg, " needs a value");
      return argv[++i];
    };
    if (arg == "--model") {
      args.model = value();
    } else if (arg == "--vocab") {
      args.vocab = value();
    } else if (arg == "--decode") {
      args.decode = true;
    } else if (arg == "--normalize") {
      args.normalize = ParseNormalization(value());
    } else if (arg == "--help" || arg == "-h") {
      return std::nullopt;
    } else {
      Fail(ErrorCode::kInvalidArgument, "unknown option '", arg, "'");
    }
  }
  if (args.model.empty() == args.vocab.empty())
    Fail(ErrorCode::kInvalidArgument, "give one of --model or --vocab");
  return args;
}

Tokenizer LoadTokenizer(const Args& args) {
  if (!args.model.empty()) return Tokenizer::FromModelDir(args.model);
  if (EndsWith(args.vocab, ".json")) return Tokenizer::FromTokenizerJson(args.vocab);
  return Tokenizer::FromTiktokenFile(args.vocab);
}

// The ids of one --decode input line (separated by spaces or tabs); throws naming the line on anything
// that is not an id.
std::vector<int32_t> ParseIds(const std::string& line, size_t line_no) {
  std::vector<int32_t> ids;
  size_t pos = 0;
  while (true) {
    pos = line.find_first_not_of(" \t\r", pos);
    if (pos == std::string::npos) break;
    size_t end = line.find_first_of(" \t\r", pos);
    if (end == std::string::npos) end = line.size();
    int32_t id = 0;
    auto [ptr, ec] = std::from_chars(line.data() + pos, line.data() + end, id);
    if (ec != std::errc() || ptr != line.data() + end)
      Fail(ErrorCode::kInvalidArgument, "stdin line ", line_no, ": '", line.substr(pos, end - pos),
           "' is not a token id");
    ids.push_back(id);
    pos = end;
  }
  return ids;
}

}  // namespace

int RunTokenize(int argc, char** argv) {
  std::optional<Args> args;
  try {
    args = ParseArgs(argc, argv);
  } catch (const Error& e) {
    std::fprintf(stderr, "hymt tokenize: %s\n%s", e.what(), kUsage);
    return 2;
  }
  if (!args) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  try {
    Tokenizer tokenizer = LoadTokenizer(*args);
    if (args->normalize) tokenizer.SetNormalization(*args->normalize);
    // Lines are split on '\n' only, so a '\r' stays part of the text, as in the FLORES goldens.
    std::ios::sync_with_stdio(false);
    std::string line, out;
    for (size_t line_no = 1; std::getline(std::cin, line); ++line_no) {
      if (args->decode) {
        std::vector<int32_t> ids = ParseIds(line, line_no);
        try {  // an id out of range: say which line
          out = tokenizer.Decode(ids);
        } catch (const Error& e) {
          Fail(e.code(), "stdin line ", line_no, ": ", e.what());
        }
      } else {
        out = StrJoin(tokenizer.Encode(line), " ");
      }
      out.push_back('\n');
      std::fwrite(out.data(), 1, out.size(), stdout);
    }
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "hymt tokenize: %s\n", e.what());
    return 2;
  }
}

}  // namespace hymt
