// hymt eval: translates a test set and scores it with sacreBLEU-exact BLEU and chrF.
#include <chrono>
#include <cstdio>
#include <fstream>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/json.h"
#include "core/status.h"
#include "translate/metrics.h"
#include "translate/translator.h"

namespace hymt {

std::unique_ptr<Translator> MakeTranslator(Session& session);
void AddSamplingOptions(Args& args);
std::optional<SamplingParams> SamplingFromArgs(const Args& args, const GenerationDefaults& g);

namespace {

constexpr size_t kEvalBatch = 64;  // lines per translation batch (progress granularity)

// The BLEU tokenizer sacreBLEU users pick for a target language.
BleuTokenizer DefaultBleuTokenizer(const std::string& target) {
  if (target == "zh" || target == "zh-Hant" || target == "yue") return BleuTokenizer::kZh;
  if (target == "ja" || target == "ko" || target == "th" || target == "km" || target == "my" || target == "bo")
    return BleuTokenizer::kChar;
  return BleuTokenizer::k13a;
}

}  // namespace

int RunEval(int argc, char** argv) {
  Args args("hymt eval [--model PATH] --from CODE --to CODE (--src FILE --ref FILE | --tsv FILE [--reverse])");
  AddSessionOptions(args);
  args.Option("from", "source language code")
      .Option("to", "target language code")
      .Option("src", "source sentences, one per line")
      .Option("ref", "reference translations, one per line")
      .Option("tsv", "tab-separated pairs (column 1 source, column 2 reference)")
      .Flag("reverse", "with --tsv: column 2 is the source, column 1 the reference")
      .Option("limit", "use only the first N lines (0: all)", "0")
      .Option("tokenize", "BLEU tokenizer: 13a, zh, intl, char, none (default: by target language)")
      .Option("hyp-out", "write the translations to this file")
      .Option("json-out", "write the scores as JSON to this file")
      .Flag("quiet", "no progress bar");
  AddSamplingOptions(args);
  if (!args.Parse(argc, argv)) return 0;
  if (!args.Has("from") || !args.Has("to")) Fail(ErrorCode::kInvalidArgument, "--from and --to are required");
  const std::string target = RequireLanguage(args.Get("to")).code;

  std::vector<std::string> src, ref;
  if (args.Has("tsv")) {
    for (const std::string& line : ReadFileLines(args.Get("tsv"))) {
      size_t tab = line.find('\t');
      if (tab == std::string::npos) Fail(ErrorCode::kInvalidArgument, args.Get("tsv"), ": a line has no tab");
      std::string a = line.substr(0, tab), b = line.substr(tab + 1);
      if (args.GetFlag("reverse")) std::swap(a, b);
      src.push_back(a);
      ref.push_back(b);
    }
  } else {
    if (!args.Has("src") || !args.Has("ref")) Fail(ErrorCode::kInvalidArgument, "give --src and --ref, or --tsv");
    src = ReadFileLines(args.Get("src"));
    ref = ReadFileLines(args.Get("ref"));
    if (src.size() != ref.size())
      Fail(ErrorCode::kInvalidArgument, args.Get("src"), " has ", src.size(), " lines but ", args.Get("ref"), " has ",
           ref.size());
  }
  const int64_t limit = args.GetInt("limit");
  if (limit > 0 && static_cast<size_t>(limit) < src.size()) {
    src.resize(static_cast<size_t>(limit));
    ref.resize(static_cast<size_t>(limit));
  }

  auto session = Session::Open(SessionOptionsFromArgs(args));
  if (!args.GetFlag("quiet")) PrintModelBanner(*session, stderr);
  auto translator = MakeTranslator(*session);
  TranslateRequest req;
  req.source = args.Get("from");
  req.target = target;
  req.sampling = SamplingFromArgs(args, session->model().generation);
  req.split_sentences = false;  // test sets are aligned line by line

  std::vector<std::string> hyp;
  int64_t out_tokens = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < src.size(); i += kEvalBatch) {
    req.texts.assign(src.begin() + i, src.begin() + std::min(src.size(), i + kEvalBatch));
    TranslateResult r = translator->Translate(req);
    out_tokens += r.output_tokens;
    for (std::string& t : r.translations) {
      for (char& ch : t)
        if (ch == '\n' || ch == '\r') ch = ' ';
      hyp.push_back(std::move(t));
    }
    if (!args.GetFlag("quiet")) {
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const int width = 30, filled = static_cast<int>(width * hyp.size() / src.size());
      std::fprintf(stderr, "\r[%s%s] %zu/%zu lines, %.1f lines/s, %.0f tokens/s", std::string(filled, '#').c_str(),
                   std::string(width - filled, '.').c_str(), hyp.size(), src.size(), hyp.size() / secs,
                   out_tokens / secs);
    }
  }
  if (!args.GetFlag("quiet")) std::fprintf(stderr, "\n");
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  BleuOptions bo;
  bo.tokenizer = DefaultBleuTokenizer(target);
  if (args.Has("tokenize")) {
    auto t = ParseBleuTokenizer(args.Get("tokenize"));
    if (!t) Fail(ErrorCode::kInvalidArgument, "unknown --tokenize '", args.Get("tokenize"), "'");
    bo.tokenizer = *t;
  }
  BleuScore bleu = CorpusBleu(hyp, {ref}, bo);
  ChrfScore chrf = CorpusChrf(hyp, {ref});
  ChrfScore chrfpp = CorpusChrf(hyp, {ref}, ChrfPlusPlusOptions());
  std::printf("%s-%s %zu lines, %.1fs (%.1f lines/s)\n", args.Get("from").c_str(), target.c_str(), hyp.size(), secs,
              hyp.size() / secs);
  std::printf("%s (tokenize %s)\n%s\n%s\n", FormatBleu(bleu).c_str(), std::string(BleuTokenizerName(bo.tokenizer)).c_str(),
              FormatChrf(chrf).c_str(), FormatChrf(chrfpp).c_str());
  if (args.Has("hyp-out")) {
    std::ofstream out(args.Get("hyp-out"));
    for (const auto& h : hyp) out << h << "\n";
    if (!out) Fail(ErrorCode::kInternal, "cannot write ", args.Get("hyp-out"));
  }
  if (args.Has("json-out")) {
    Json j = Json::MakeObject();
    j.Set("model", Json(session->model().name));
    j.Set("from", Json(args.Get("from")));
    j.Set("to", Json(target));
    j.Set("lines", Json(static_cast<int64_t>(hyp.size())));
    j.Set("bleu", Json(bleu.score));
    j.Set("chrf", Json(chrf.score));
    j.Set("chrfpp", Json(chrfpp.score));
    j.Set("seconds", Json(secs));
    std::ofstream out(args.Get("json-out"));
    out << j.Dump() << "\n";
    if (!out) Fail(ErrorCode::kInternal, "cannot write ", args.Get("json-out"));
  }
  return 0;
}

}  // namespace hymt
