// hymt generate: raw completion of a prompt, for looking at what a model does.
#include <cstdio>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/status.h"
#include "translate/prompts.h"

namespace hymt {

void AddSamplingOptions(Args& args);
std::optional<SamplingParams> SamplingFromArgs(const Args& args, const GenerationDefaults& g);

int RunGenerate(int argc, char** argv) {
  Args args("hymt generate [--model PATH] [--chat] PROMPT");
  AddSessionOptions(args);
  args.Option("max-new-tokens", "tokens to generate", "128")
      .Flag("chat", "wrap the prompt in the model's chat template as one user turn")
      .Flag("ids", "print the generated token ids too");
  AddSamplingOptions(args);
  if (!args.Parse(argc, argv)) return 0;
  if (args.positional().size() != 1) Fail(ErrorCode::kInvalidArgument, "give exactly one PROMPT");
  auto session = Session::Open(SessionOptionsFromArgs(args));
  PrintModelBanner(*session, stderr);
  const LoadedModel& m = session->model();
  std::string prompt = args.positional()[0];
  if (args.GetFlag("chat")) {
    ChatFamily family = m.tokenizer->TokenId("<|startoftext|>") ? ChatFamily::kHunyuan7B : ChatFamily::kHy18B;
    prompt = RenderChat(family, prompt);
  }
  GenerationRequest g;
  g.prompt = m.tokenizer->Encode(prompt, true);
  g.sampling = SamplingFromArgs(args, m.generation).value_or(SamplingParams::Greedy());
  g.max_new_tokens = static_cast<int32_t>(args.GetInt("max-new-tokens"));
  g.stop_ids = m.stop_ids;
  StreamDecoder decoder(*m.tokenizer);
  g.on_token = [&](int32_t t) {
    std::string s = decoder.Push(t);
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::fflush(stdout);
    return true;
  };
  GenerationResult r = session->engine().Generate(std::move(g));
  std::string tail = decoder.Finish();
  std::fwrite(tail.data(), 1, tail.size(), stdout);
  std::printf("\n");
  if (args.GetFlag("ids")) std::printf("ids: %s\n", StrJoin(r.tokens, " ").c_str());
  std::fprintf(stderr, "[%zu tokens, %s, %.2fs]\n", r.tokens.size(), FinishReasonName(r.reason), r.total_seconds);
  return 0;
}

}  // namespace hymt
