// hymt forward: teacher-forced logits of one token sequence, written as raw little-endian f32
// [n_tokens, vocab_rows] — for parity checks against other implementations.
#include <cstdio>
#include <fstream>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/status.h"
#include "runtime/oneshot.h"

namespace hymt {

int RunForward(int argc, char** argv) {
  Args args("hymt forward [--model PATH] --ids \"1 2 3\" -o LOGITS.f32");
  AddSessionOptions(args);
  args.Option("ids", "space-separated token ids").Option("o", "output file (raw f32)").Option("chunk", "prefill chunk", "0");
  if (!args.Parse(argc, argv)) return 0;
  if (!args.Has("ids") || !args.Has("o")) Fail(ErrorCode::kInvalidArgument, "--ids and -o are required");
  std::vector<int32_t> ids;
  for (const std::string& t : StrSplit(args.Get("ids"), ' ')) {
    if (t.empty()) continue;
    char* end = nullptr;
    long v = std::strtol(t.c_str(), &end, 10);
    if (*end != '\0' || v < 0) Fail(ErrorCode::kInvalidArgument, "bad token id '", t, "'");
    ids.push_back(static_cast<int32_t>(v));
  }
  if (ids.empty()) Fail(ErrorCode::kInvalidArgument, "no ids");
  auto session = Session::Open(SessionOptionsFromArgs(args));
  for (int32_t id : ids)
    if (id >= session->model().config.vocab_rows) Fail(ErrorCode::kInvalidArgument, "id ", id, " outside the vocabulary");
  std::vector<float> logits = ForwardLogits(session->placed_model(), session->first_layer_ops(), ids,
                                            session->plan().kv_type, static_cast<int>(args.GetInt("chunk")));
  std::ofstream out(args.Get("o"), std::ios::binary);
  out.write(reinterpret_cast<const char*>(logits.data()), static_cast<std::streamsize>(logits.size() * 4));
  if (!out) Fail(ErrorCode::kInternal, "cannot write ", args.Get("o"));
  std::fprintf(stderr, "wrote %zu x %lld logits (%s plan on %s)\n", ids.size(),
               static_cast<long long>(session->model().config.vocab_rows), session->plan().mode.c_str(),
               session->first_layer_ops().name().c_str());
  return 0;
}

}  // namespace hymt
