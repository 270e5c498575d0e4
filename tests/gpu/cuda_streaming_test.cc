// Layer streaming on CUDA: a streamed plan (every layer, or all but one, copied into a ring of slots
// each step, at ring depths 1-3) runs the same kernels on the same bytes as the resident plan, so its
// greedy output must be identical; a partial plan (layers on the CPU) must run. The device memory the
// driver reports for this process (nvidia-smi: context, cuBLAS and every allocation) stays within each
// plan's budget; other processes on the same GPU do not count.
#include <gtest/gtest.h>

#include <cstdio>
#include <future>
#include <random>
#include <string>

#include "backends/cuda/cuda_ops.h"
#include "runtime/session.h"
#include "test_util.h"

namespace hymt {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

#define REQUIRE_GPU() \
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device"

void ExpectWithinBudget(uint64_t budget) {
  const int64_t used = CudaProcessMemoryBytes();
  if (used < 0) {
    std::printf("[cuda-streaming] nvidia-smi does not list this process: the budget is not checked\n");
    return;
  }
  std::printf("[cuda-streaming] this process holds %.0f MiB of device memory, budget %.0f MiB\n",
              static_cast<double>(used) / kMiB, static_cast<double>(budget) / kMiB);
  EXPECT_LE(static_cast<uint64_t>(used), budget);
}

// Greedy requests of random prompts, one per (prompt length, new tokens) pair, all submitted at once;
// their generated tokens in submission order.
std::vector<std::vector<int32_t>> Outputs(Engine& engine, const std::vector<std::pair<int, int>>& requests,
                                          uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> tok(3, 999);
  std::vector<std::future<GenerationResult>> pending;
  for (const auto& [n, max_new] : requests) {
    GenerationRequest r;
    for (int i = 0; i < n; ++i) r.prompt.push_back(tok(rng));
    r.max_new_tokens = max_new;
    r.sampling = SamplingParams::Greedy();
    auto promise = std::make_shared<std::promise<GenerationResult>>();
    pending.push_back(promise->get_future());
    r.on_done = [promise](const GenerationResult& g) { promise->set_value(g); };
    engine.Submit(std::move(r));
  }
  std::vector<std::vector<int32_t>> out;
  for (auto& f : pending) {
    GenerationResult g = f.get();
    EXPECT_NE(g.reason, FinishReason::kError) << g.error;
    out.push_back(g.tokens);
  }
  return out;
}

// Three short prompts, 24 new tokens each.
std::vector<std::vector<int32_t>> Outputs(Engine& engine) {
  return Outputs(engine, {{5, 24}, {17, 24}, {40, 24}}, 5);
}

SessionOptions Options(const std::string& mode, int gpu_layers, int depth) {
  SessionOptions o;
  o.model = test::TestDataDir() + "/fixtures/tiny-gqa2/bf16";
  o.device = "cuda";
  o.weight_type = "bf16";  // as stored: no plan quantises at load
  o.max_seqs = 8;
  o.max_context = 256;
  o.gpu_mem = 2048 * kMiB;
  o.plan_mode = mode;
  o.gpu_layers = gpu_layers;
  o.ring_depth = depth;
  return o;
}

TEST(CudaStreaming, StreamedMatchesResidentBitForBit) {
  REQUIRE_GPU();
  const auto want = Outputs(Session::Open(Options("resident", -1, 0))->engine());
  for (int gpu_layers : {0, 1}) {
    for (int depth : {1, 2, 3}) {
      SCOPED_TRACE(testing::Message() << gpu_layers << " resident, depth " << depth);
      auto s = Session::Open(Options("streamed", gpu_layers, depth));
      ASSERT_EQ(s->plan().mode, "streamed");
      EXPECT_EQ(Outputs(s->engine()), want);
      ExpectWithinBudget(s->plan().gpu_budget);
    }
  }
}

// Decode steps replayed as CUDA graphs run the same kernels on the same data as eager steps: the greedy
// output is identical, across a context long enough to cross the graph's page quantum (64 pages) and
// with sequences of different lengths finishing at different steps.
TEST(CudaStreaming, GraphedDecodeMatchesEager) {
  REQUIRE_GPU();
  SessionOptions eager = Options("resident", -1, 0);
  eager.cuda_graphs = false;
  SessionOptions graphed = Options("resident", -1, 0);
  graphed.max_context = 1536;
  eager.max_context = 1536;
  // 900 + 150 tokens cross the graphs' page quantum (64 pages of 16); the 30-token one ends early.
  auto run = [](Engine& engine) { return Outputs(engine, {{3, 150}, {900, 150}, {30, 12}}, 11); };
  auto e = Session::Open(eager);
  const auto want = run(e->engine());
  EXPECT_EQ(e->engine().stats().graph_replays, 0);
  auto g = Session::Open(graphed);
  const auto got = run(g->engine());
  EXPECT_EQ(got, want);
  const EngineStats st = g->engine().stats();
  std::printf("[cuda-graphs] %lld decode steps replayed, %lld captured\n", static_cast<long long>(st.graph_replays),
              static_cast<long long>(st.graph_captures));
  EXPECT_GT(st.graph_replays, 10 * st.graph_captures);
}

// Layers on the CPU compute in f32 and the GPU in bf16, so a partial plan's tokens may drift from the
// resident plan's: it must run, cross devices each step, and stay within its budget.
TEST(CudaStreaming, PartialRunsWithinItsBudget) {
  REQUIRE_GPU();
  auto s = Session::Open(Options("partial", 1, 0));
  ASSERT_EQ(s->plan().mode, "partial");
  for (const auto& tokens : Outputs(s->engine())) EXPECT_EQ(tokens.size(), 24u);
  ExpectWithinBudget(s->plan().gpu_budget);
}

}  // namespace
}  // namespace hymt
