// hymt translate: translates the texts given as arguments, or each line of stdin.
#include <cstdio>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/status.h"
#include "translate/translator.h"

namespace hymt {

// Lines from stdin are translated in batches of this many, so memory stays bounded on long input.
constexpr size_t kStdinBatch = 256;

void AddSamplingOptions(Args& args) {
  args.Option("temperature", "sampling temperature; 0 means greedy (default: the model's setting)")
      .Option("top-k", "sample from the k most likely tokens")
      .Option("top-p", "sample from the smallest set with this probability mass")
      .Option("repetition-penalty", "penalty for tokens already seen (1: off)")
      .Option("seed", "random seed for sampling", "0")
      .Flag("greedy", "always take the most likely token (same as --temperature 0)");
}

std::optional<SamplingParams> SamplingFromArgs(const Args& args, const GenerationDefaults& g) {
  if (args.GetFlag("greedy")) return SamplingParams::Greedy();
  if (!args.Has("temperature") && !args.Has("top-k") && !args.Has("top-p") && !args.Has("repetition-penalty") &&
      !args.Has("seed"))
    return std::nullopt;
  SamplingParams p;
  p.temperature = g.do_sample ? g.temperature : 0.0f;
  p.top_k = g.top_k;
  p.top_p = g.top_p;
  p.repetition_penalty = g.repetition_penalty;
  if (args.Has("temperature")) p.temperature = static_cast<float>(args.GetDouble("temperature"));
  if (args.Has("top-k")) p.top_k = static_cast<int>(args.GetInt("top-k"));
  if (args.Has("top-p")) p.top_p = static_cast<float>(args.GetDouble("top-p"));
  if (args.Has("repetition-penalty")) p.repetition_penalty = static_cast<float>(args.GetDouble("repetition-penalty"));
  p.seed = static_cast<uint64_t>(args.GetInt("seed"));
  if (p.temperature < 0 || p.top_p <= 0 || p.top_p > 1 || p.repetition_penalty <= 0)
    Fail(ErrorCode::kInvalidArgument, "sampling options out of range (temperature >= 0, 0 < top-p <= 1, "
                                      "repetition-penalty > 0)");
  return p;
}

std::unique_ptr<Translator> MakeTranslator(Session& session) {
#ifdef HYMT_HAVE_SERVER
  std::shared_ptr<const Segmenter> seg = CreateSentenceSegmenter();
  std::shared_ptr<const LanguageDetector> det = CreateLanguageDetector();
#else
  std::shared_ptr<const Segmenter> seg = CreateLineSegmenter();
  std::shared_ptr<const LanguageDetector> det;
#endif
  return std::make_unique<Translator>(session.model(), session.engine(), seg, det);
}

int RunTranslate(int argc, char** argv) {
  Args args("hymt translate [--model PATH] --from CODE|auto --to CODE [TEXT...]  (stdin lines when no TEXT)");
  AddSessionOptions(args);
  args.Option("from", "source language code, or auto to detect each text", "auto")
      .Option("to", "target language code (required)")
      .Option("glossary", "a term to translate a fixed way, SOURCE=TARGET (repeatable)", "", true)
      .Option("context", "text the translation should be consistent with (not translated)")
      .Option("prompt-style", "hunyuan-mt, hy-mt1.5 or hy-mt2 (default: from the model's name)")
      .Option("max-new-tokens", "output tokens per segment (0: proportional to the input)", "0")
      .Flag("no-split", "translate each text as one segment per line (no sentence splitting)")
      .Flag("quiet", "do not print which model is used");
  AddSamplingOptions(args);
  if (!args.Parse(argc, argv)) return 0;
  if (!args.Has("to")) Fail(ErrorCode::kInvalidArgument, "--to is required (a language code such as zh, en, de)");
  // Check the languages before loading anything, so a typo fails fast.
  if (args.Get("from") != "auto") RequireLanguage(args.Get("from"));
  RequireLanguage(args.Get("to"));

  auto session = Session::Open(SessionOptionsFromArgs(args));
  if (!args.GetFlag("quiet")) PrintModelBanner(*session, stderr);
  auto translator = MakeTranslator(*session);
  if (args.Has("prompt-style")) {
    PromptStyle style;
    if (!ParsePromptStyle(args.Get("prompt-style"), &style))
      Fail(ErrorCode::kInvalidArgument, "--prompt-style must be hunyuan-mt, hy-mt1.5 or hy-mt2");
    translator->set_prompt_style(style);
  }

  TranslateRequest req;
  req.source = args.Get("from");
  req.target = args.Get("to");
  req.prompt.context = args.Get("context");
  for (const std::string& g : args.GetAll("glossary")) {
    size_t eq = g.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == g.size())
      Fail(ErrorCode::kInvalidArgument, "--glossary needs SOURCE=TARGET, got '", g, "'");
    req.prompt.glossary.emplace_back(g.substr(0, eq), g.substr(eq + 1));
  }
  req.sampling = SamplingFromArgs(args, session->model().generation);
  req.max_new_tokens = static_cast<int32_t>(args.GetInt("max-new-tokens"));
  req.split_sentences = !args.GetFlag("no-split");

  auto emit = [&](const TranslateResult& r) {
    for (std::string t : r.translations) {
      for (char& ch : t)
        if (ch == '\n' || ch == '\r') ch = ' ';  // one output line per input text
      std::printf("%s\n", t.c_str());
    }
    std::fflush(stdout);
  };
  if (!args.positional().empty()) {
    req.texts = args.positional();
    emit(translator->Translate(req));
    return 0;
  }
  std::vector<std::string> lines = ReadLines(stdin);
  for (size_t i = 0; i < lines.size(); i += kStdinBatch) {
    req.texts.assign(lines.begin() + i, lines.begin() + std::min(lines.size(), i + kStdinBatch));
    emit(translator->Translate(req));
  }
  return 0;
}

}  // namespace hymt
