// Layer streaming on CUDA: a streamed plan (every layer, or all but one, copied into a ring of slots
// each step, at ring depths 1-3) runs the same kernels on the same bytes as the resident plan, so its
// greedy output must be identical; a partial plan (layers on the CPU) must run. The device memory the
// driver reports for this process (nvidia-smi: context, cuBLAS and every allocation) stays within each
// plan's budget; other processes on the same GPU do not count.
#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
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

// The generated tokens of each result, in order; none may have failed.
std::vector<std::vector<int32_t>> Collect(std::vector<std::future<GenerationResult>>& results) {
  std::vector<std::vector<int32_t>> out;
  for (auto& f : results) {
    GenerationResult g = f.get();
    EXPECT_NE(g.reason, FinishReason::kError) << g.error;
    out.push_back(g.tokens);
  }
  return out;
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
  return Collect(pending);
}

// Three short prompts, 24 new tokens each.
std::vector<std::vector<int32_t>> Outputs(Engine& engine) {
  return Outputs(engine, {{5, 24}, {17, 24}, {40, 24}}, 5);
}

SessionOptions Options(const std::string& mode, int gpu_layers, int depth,
                       const std::string& fixture = "tiny-gqa2") {
  SessionOptions o;
  o.model = test::TestDataDir() + "/fixtures/" + fixture + "/bf16";
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

// The same at head_dim 64 (tiny-gqa4), where the fast attention kernels run; with HYMT_FUSE_ROPE_ATTN=1
// (tests/gpu/run.sh runs it so too) decode steps apply RoPE and write the KV cache inside the attention
// kernel (RopeNormKvAttention) in eager steps, captures and replays alike; prefill steps take
// RopeNormKvWrite and Attention.
TEST(CudaStreaming, GraphedDecodeMatchesEagerFastAttention) {
  REQUIRE_GPU();
  SessionOptions eager = Options("resident", -1, 0, "tiny-gqa4");
  eager.cuda_graphs = false;
  const SessionOptions graphed = Options("resident", -1, 0, "tiny-gqa4");
  auto run = [](Engine& engine) { return Outputs(engine, {{3, 40}, {60, 40}, {20, 9}}, 13); };
  auto e = Session::Open(eager);
  const auto want = run(e->engine());
  auto g = Session::Open(graphed);
  EXPECT_EQ(run(g->engine()), want);
  const EngineStats st = g->engine().stats();
  EXPECT_GT(st.graph_replays, 5 * st.graph_captures);
}

// Greedy decode steps launched before the previous step's tokens reach the host (the ids go from one
// step's argmax to the next step's embedding on the device) give the same tokens as steps launched
// after them. Steps launched ahead are discarded when the batch changes under them: a sequence that
// stops on a stop token, requests submitted while others decode; their rows run again.
TEST(CudaStreaming, LookaheadMatchesSteps) {
  REQUIRE_GPU();
  struct Req {
    int prompt, max_new;
    int stop_at;  // the stop id: this request's token at that index without stops (-1: none)
  };
  const std::vector<Req> first = {{3, 90, -1}, {200, 90, 30}, {30, 12, -1}};
  const std::vector<Req> second = {{50, 40, -1}, {7, 60, 10}};
  // Runs the first list at once and the second when request 0 has 20 tokens; the tokens per request.
  // Both lists are submitted from callbacks on the engine thread (a one-token starter's end, request 0's
  // 20th token), so every run admits them at the same step.
  auto run = [&](Engine& engine, const std::vector<int32_t>& stops) {
    std::mt19937 rng(17);
    std::uniform_int_distribution<int32_t> tok(3, 999);
    std::vector<GenerationRequest> reqs;
    std::vector<std::future<GenerationResult>> results;
    std::vector<Req> all = first;
    all.insert(all.end(), second.begin(), second.end());
    for (size_t i = 0; i < all.size(); ++i) {
      GenerationRequest r;
      for (int j = 0; j < all[i].prompt; ++j) r.prompt.push_back(tok(rng));
      r.max_new_tokens = all[i].max_new;
      r.sampling = SamplingParams::Greedy();
      if (stops[i] >= 0) r.stop_ids = {stops[i]};
      auto promise = std::make_shared<std::promise<GenerationResult>>();
      results.push_back(promise->get_future());
      r.on_done = [promise](const GenerationResult& g) { promise->set_value(g); };
      reqs.push_back(std::move(r));
    }
    auto submit_range = [&engine, &reqs](size_t begin, size_t end) {
      for (size_t i = begin; i < end; ++i) engine.Submit(std::move(reqs[i]));
    };
    std::promise<void> all_submitted;
    auto n = std::make_shared<int>(0);
    reqs[0].on_token = [n, &submit_range, &all_submitted, &first, &all](int32_t) {
      if (++*n == 20) {
        submit_range(first.size(), all.size());
        all_submitted.set_value();
      }
      return true;
    };
    GenerationRequest starter;
    starter.prompt = {5};
    starter.max_new_tokens = 1;
    starter.sampling = SamplingParams::Greedy();
    starter.on_done = [&submit_range, &first](const GenerationResult&) { submit_range(0, first.size()); };
    engine.Submit(std::move(starter));
    all_submitted.get_future().wait();
    return Collect(results);
  };
  SessionOptions off = Options("resident", -1, 0);
  off.cuda_lookahead = false;
  SessionOptions on = Options("resident", -1, 0);
  const size_t n = first.size() + second.size();
  // The stop ids: tokens the run without stops produced.
  auto s0 = Session::Open(off);
  const auto free_run = run(s0->engine(), std::vector<int32_t>(n, -1));
  std::vector<int32_t> stops(n, -1);
  std::vector<Req> all = first;
  all.insert(all.end(), second.begin(), second.end());
  for (size_t i = 0; i < n; ++i)
    if (all[i].stop_at >= 0) {
      ASSERT_GT(free_run[i].size(), static_cast<size_t>(all[i].stop_at));
      stops[i] = free_run[i][static_cast<size_t>(all[i].stop_at)];
    }
  const auto want = run(s0->engine(), stops);
  EXPECT_EQ(s0->engine().stats().lookahead_steps, 0);
  auto s1 = Session::Open(on);
  const auto got = run(s1->engine(), stops);
  EXPECT_EQ(got, want);
  for (size_t i = 0; i < n; ++i)
    if (stops[i] >= 0) {
      EXPECT_LE(want[i].size(), static_cast<size_t>(all[i].stop_at)) << "request " << i;
    }
  const EngineStats st = s1->engine().stats();
  std::printf("[cuda-lookahead] %lld steps, %lld launched ahead, %lld discarded\n", static_cast<long long>(st.steps),
              static_cast<long long>(st.lookahead_steps), static_cast<long long>(st.lookahead_discarded));
  EXPECT_GT(st.lookahead_steps, st.steps / 2);
  EXPECT_GE(st.lookahead_discarded, 1);
  EXPECT_LT(st.lookahead_discarded, st.lookahead_steps / 4);

  // One sequence alone: every decode step after the first few is launched ahead, none is discarded.
  auto s2 = Session::Open(on);
  const auto one = Outputs(s2->engine(), {{9, 64}}, 3);
  auto s3 = Session::Open(off);
  EXPECT_EQ(one, Outputs(s3->engine(), {{9, 64}}, 3));
  const EngineStats st2 = s2->engine().stats();
  EXPECT_GE(st2.lookahead_steps, 55);
  EXPECT_EQ(st2.lookahead_discarded, 0);
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
