// The engine's scheduling on a real (tiny fixture) model with the CPU backend: preemption under a small
// KV pool, cancellation, deadlines, backpressure, fairness between groups, and token selection.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include "backends/cpu/cpu_ops.h"
#include "core/status.h"
#include "ops/sampling.h"
#include "runtime/engine.h"
#include "runtime/loader.h"
#include "runtime/oneshot.h"
#include "test_util.h"

namespace hymt {
namespace {

class EngineTest : public testing::Test {
 protected:
  void SetUp() override {
    model_ = LoadModel(test::TestDataDir() + "/fixtures/tiny-gqa2/f32");
    ops_ = CreateCpuOps();
  }
  std::unique_ptr<Engine> MakeEngine(EngineOptions o) {
    Placement p;
    p.embed = p.head = ops_.get();
    p.layers.assign(model_.config.n_layers, ops_.get());
    return std::make_unique<Engine>(model_.model, p, o);
  }
  std::vector<int32_t> Prompt(int n, int salt) {
    std::vector<int32_t> ids;
    for (int i = 0; i < n; ++i) ids.push_back((i * 37 + salt * 101) % 1000 + 1);
    return ids;
  }

  LoadedModel model_;
  std::unique_ptr<Ops> ops_;
};

// Collects results of asynchronous submissions.
struct Results {
  std::mutex mu;
  std::condition_variable cv;
  std::map<int, GenerationResult> done;
  std::vector<int> order;
  std::function<void(const GenerationResult&)> Callback(int key) {
    return [this, key](const GenerationResult& r) {
      std::lock_guard<std::mutex> lock(mu);
      done[key] = r;
      order.push_back(key);
      cv.notify_all();
    };
  }
  void Wait(size_t n) {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(60), [&] { return done.size() >= n; }));
  }
};

TEST_F(EngineTest, PreemptionUnderASmallCacheKeepsOutputsExact) {
  // Three sequences of 60 + 40 tokens need 21 pages together; the pool has 9 (one sequence and a bit),
  // so sequences are preempted and recomputed. Each output must equal its solo greedy continuation.
  EngineOptions o;
  o.max_seqs = 3;
  o.max_step_tokens = 32;
  o.kv_pages = 9;
  o.page_size = 16;
  auto engine = MakeEngine(o);
  Results res;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 3; ++i) {
    prompts.push_back(Prompt(60, i));
    GenerationRequest g;
    g.prompt = prompts.back();
    g.sampling = SamplingParams::Greedy();
    g.max_new_tokens = 40;
    g.group = static_cast<uint64_t>(i);
    g.on_done = res.Callback(i);
    engine->Submit(std::move(g));
  }
  res.Wait(3);
  EXPECT_GT(engine->stats().preemptions, 0) << "the pool was meant to be too small for all three";
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(res.done[i].reason, FinishReason::kLength);
    EXPECT_EQ(res.done[i].tokens, GreedyContinuation(*model_.model, *ops_, prompts[i], 40)) << "sequence " << i;
  }
  EXPECT_EQ(engine->stats().kv_pages_used, 0);
}

TEST_F(EngineTest, CancelReturnsPagesAndReportsCancelled) {
  EngineOptions o;
  o.kv_pages = 64;
  o.max_context = 2048;
  auto engine = MakeEngine(o);
  Results res;
  std::atomic<int> tokens{0};
  GenerationRequest g;
  g.prompt = Prompt(20, 1);
  g.sampling = SamplingParams::Greedy();
  g.max_new_tokens = 1000;
  g.on_token = [&](int32_t) {
    ++tokens;
    return true;
  };
  g.on_done = res.Callback(0);
  uint64_t id = engine->Submit(std::move(g));
  while (tokens.load() < 3) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  engine->Cancel(id);
  res.Wait(1);
  EXPECT_EQ(res.done[0].reason, FinishReason::kCancelled);
  EXPECT_LT(res.done[0].tokens.size(), 1000u);
  EXPECT_EQ(engine->stats().kv_pages_used, 0);
  engine->Cancel(id);  // unknown by now: ignored
}

TEST_F(EngineTest, DeadlineEndsASequence) {
  EngineOptions o;
  o.kv_pages = 64;
  auto engine = MakeEngine(o);
  GenerationRequest g;
  g.prompt = Prompt(10, 2);
  g.sampling = SamplingParams::Greedy();
  g.max_new_tokens = 100000;
  g.deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(30);
  GenerationResult r = engine->Generate(std::move(g));
  EXPECT_EQ(r.reason, FinishReason::kDeadline);
}

TEST_F(EngineTest, FullQueueRefusesWithUnavailable) {
  EngineOptions o;
  o.kv_pages = 64;
  o.max_seqs = 1;
  o.max_queue = 2;
  auto engine = MakeEngine(o);
  Results res;
  int accepted = 0, refused = 0;
  for (int i = 0; i < 20; ++i) {
    GenerationRequest g;
    g.prompt = Prompt(10, i);
    g.sampling = SamplingParams::Greedy();
    g.max_new_tokens = 50;
    g.on_done = res.Callback(i);
    try {
      engine->Submit(std::move(g));
      ++accepted;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kUnavailable);
      ++refused;
    }
  }
  EXPECT_GT(refused, 0);
  res.Wait(static_cast<size_t>(accepted));
}

TEST_F(EngineTest, BadPromptsAreRefused) {
  EngineOptions o;
  o.kv_pages = 4;
  o.max_context = 60;
  auto engine = MakeEngine(o);
  GenerationRequest empty;
  EXPECT_THROW(engine->Submit(std::move(empty)), Error);
  GenerationRequest too_long;
  too_long.prompt = Prompt(100, 0);
  EXPECT_THROW(engine->Submit(std::move(too_long)), Error);
  GenerationRequest bad_id;
  bad_id.prompt = {1, 2, 999999};
  EXPECT_THROW(engine->Submit(std::move(bad_id)), Error);
}

TEST_F(EngineTest, ASmallRequestIsNotStarvedByALargeOne) {
  // Group 1 submits 12 sequences, then group 2 one sequence; with two slots, round-robin admission
  // starts group 2 as soon as a slot frees, long before group 1 is done.
  EngineOptions o;
  o.max_seqs = 2;
  o.kv_pages = 64;
  auto engine = MakeEngine(o);
  Results res;
  for (int i = 0; i < 12; ++i) {
    GenerationRequest g;
    g.prompt = Prompt(16, i);
    g.sampling = SamplingParams::Greedy();
    g.max_new_tokens = 24;
    g.group = 1;
    g.on_done = res.Callback(i);
    engine->Submit(std::move(g));
  }
  GenerationRequest small;
  small.prompt = Prompt(8, 99);
  small.sampling = SamplingParams::Greedy();
  small.max_new_tokens = 4;
  small.group = 2;
  small.on_done = res.Callback(100);
  engine->Submit(std::move(small));
  res.Wait(13);
  auto pos = std::find(res.order.begin(), res.order.end(), 100) - res.order.begin();
  EXPECT_LE(pos, 3) << "the one-sentence request finished at position " << pos << " of 13";
}

TEST(LoopGuard, DetectsShortCycles) {
  std::vector<int32_t> t;
  for (int i = 0; i < 40; ++i) t.push_back(i % 3);
  EXPECT_TRUE(LooksLikeLoop(t, 32));
  EXPECT_FALSE(LooksLikeLoop(t, 64)) << "too few tokens for the window";
  std::vector<int32_t> varied;
  for (int i = 0; i < 64; ++i) varied.push_back(i * 7 % 23);
  EXPECT_FALSE(LooksLikeLoop(varied, 32));
  EXPECT_FALSE(LooksLikeLoop(t, 0)) << "0 disables the guard";
}

TEST(SampleRow, GreedyTakesTheLowestIdOnTies) {
  std::vector<float> logits = {1, 5, 5, 2};
  SampleSpec greedy;
  EXPECT_EQ(SampleRow(logits, 4, greedy), 1);
  EXPECT_EQ(SampleRow(logits, 1, greedy), 0) << "ids past n_valid are never chosen";
}

TEST(SampleRow, RepetitionPenaltyFollowsTransformers) {
  // Positive scores are divided, negative multiplied, each distinct history token once.
  std::vector<float> logits = {2.0f, 1.9f, -1.0f};
  SampleSpec s;
  s.repetition_penalty = 1.1f;
  std::vector<int32_t> history = {0, 0, 0};
  s.history = history;
  EXPECT_EQ(SampleRow(logits, 3, s), 1) << "2.0 / 1.1 < 1.9";
  std::vector<float> neg = {-1.0f, -1.05f};
  std::vector<int32_t> h0 = {0};
  s.history = h0;
  s.repetition_penalty = 1.1f;
  EXPECT_EQ(SampleRow(neg, 2, s), 1) << "-1.0 * 1.1 = -1.1 < -1.05";
}

TEST(SampleRow, SamplingMatchesTheFilteredSoftmax) {
  // logits log(0.5), log(0.3), log(0.15), log(0.05): top_p 0.75 keeps the first two (0.5 + 0.3 >= 0.75),
  // renormalised to 0.625 / 0.375; top_k 1 keeps one.
  std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
  SampleSpec s;
  s.temperature = 1;
  s.top_p = 0.75f;
  int counts[4] = {};
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    s.uniform = (i + 0.5) / n;
    ++counts[SampleRow(logits, 4, s)];
  }
  EXPECT_NEAR(counts[0] / double(n), 0.625, 0.002);
  EXPECT_NEAR(counts[1] / double(n), 0.375, 0.002);
  EXPECT_EQ(counts[2] + counts[3], 0);
  s.top_p = 1;
  s.top_k = 1;
  s.uniform = 0.99;
  EXPECT_EQ(SampleRow(logits, 4, s), 0);
}

}  // namespace
}  // namespace hymt
