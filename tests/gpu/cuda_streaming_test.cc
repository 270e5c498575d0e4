// Layer streaming on CUDA: a streamed plan (every layer, or all but one, copied into a ring of slots
// each step, at ring depths 1-3) runs the same kernels on the same bytes as the resident plan, so its
// greedy output must be identical; a partial plan (layers on the CPU) must run. The device memory the
// driver reports stays within each plan's budget.
#include <gtest/gtest.h>

#include <future>
#include <random>

#include "backends/cuda/cuda_ops.h"
#include "runtime/session.h"
#include "test_util.h"

namespace hymt {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

#define REQUIRE_GPU() \
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device"

std::vector<std::vector<int32_t>> Outputs(Engine& engine) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int32_t> tok(3, 999);
  std::vector<std::future<GenerationResult>> pending;
  for (int n : {5, 17, 40}) {
    GenerationRequest r;
    for (int i = 0; i < n; ++i) r.prompt.push_back(tok(rng));
    r.max_new_tokens = 24;
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
      size_t free_b = 0, total_b = 0;
      ASSERT_TRUE(CudaMemoryInfo(0, &free_b, &total_b));
      EXPECT_LE(total_b - free_b, s->plan().gpu_budget) << "the whole device's use, this process's included";
    }
  }
}

// Layers on the CPU compute in f32 and the GPU in bf16, so a partial plan's tokens may drift from the
// resident plan's: it must run, cross devices each step, and stay within its budget.
TEST(CudaStreaming, PartialRunsWithinItsBudget) {
  REQUIRE_GPU();
  auto s = Session::Open(Options("partial", 1, 0));
  ASSERT_EQ(s->plan().mode, "partial");
  for (const auto& tokens : Outputs(s->engine())) EXPECT_EQ(tokens.size(), 24u);
  size_t free_b = 0, total_b = 0;
  ASSERT_TRUE(CudaMemoryInfo(0, &free_b, &total_b));
  EXPECT_LE(total_b - free_b, s->plan().gpu_budget);
}

}  // namespace
}  // namespace hymt
