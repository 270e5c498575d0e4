// The engine under concurrent abuse: many threads submitting, cancelling (their own sequences, others'
// and ids that never existed), stopping from callbacks, timing out and reading stats at once, with a
// queue and a KV cache small enough that admission waits, preemption happens and Submit refuses.
// Every accepted request must get exactly one completion, every refused one none, and every KV page
// must come back. Built into hymt_concurrency_tests, which the TSan stage of `make test` also runs.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "backends/cpu/cpu_ops.h"
#include "core/status.h"
#include "runtime/engine.h"
#include "runtime/loader.h"
#include "test_util.h"

namespace hymt {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Completions seen per request id, filled from the engine thread.
struct Ledger {
  std::mutex mu;
  std::condition_variable cv;
  std::map<uint64_t, int> done;  // id -> completions
  std::map<FinishReason, int> reasons;
  int64_t total = 0;

  void Record(uint64_t id, const GenerationResult& r) {
    std::lock_guard<std::mutex> lock(mu);
    ++done[id];
    ++reasons[r.reason];
    ++total;
    cv.notify_all();
  }
  // Waits until `n` completions have arrived; false on timeout.
  bool WaitFor(int64_t n, milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, timeout, [&] { return total >= n; });
  }
};

class EngineStress : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = new LoadedModel(LoadModel(test::TestDataDir() + "/fixtures/tiny-gqa1/f32"));
    ops_ = CreateCpuOps().release();
  }
  static void TearDownTestSuite() {
    delete model_;
    delete ops_;
  }

  std::unique_ptr<Engine> MakeEngine(EngineOptions eo) {
    Placement p;
    p.embed = p.head = ops_;
    p.layers.assign(model_->config.n_layers, ops_);
    return std::make_unique<Engine>(model_->model, p, eo);
  }

  static LoadedModel* model_;
  static Ops* ops_;
};
LoadedModel* EngineStress::model_ = nullptr;
Ops* EngineStress::ops_ = nullptr;

TEST_F(EngineStress, EveryRequestCompletesExactlyOnceAndEveryPageReturns) {
  EngineOptions eo;
  eo.max_seqs = 6;
  eo.max_step_tokens = 48;
  eo.kv_pages = 16;  // 256 positions for up to 6 sequences of up to 155: admission waits, decodes preempt
  eo.page_size = 16;
  eo.max_queue = 24;  // small enough that bursts are refused with kUnavailable
  eo.max_context = 160;
  auto engine = MakeEngine(eo);
  const int32_t vocab = static_cast<int32_t>(model_->config.vocab_rows);

  constexpr int kThreads = 8;
  constexpr int kPerThread = 100;
  Ledger ledger;
  std::atomic<int64_t> accepted{0}, refused{0}, invalid{0};
  std::mutex ids_mu;
  std::vector<uint64_t> all_ids;  // every accepted id, for cross-thread cancels
  std::atomic<bool> stop_readers{false};

  // Readers hammer stats() meanwhile (its counters are written by the engine thread).
  std::thread reader([&] {
    while (!stop_readers.load()) {
      EngineStats s = engine->stats();
      EXPECT_LE(s.kv_pages_used, s.kv_pages_total);
      EXPECT_LE(s.running, eo.max_seqs);
      std::this_thread::yield();
    }
  });

  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(1234 + t);
      for (int i = 0; i < kPerThread; ++i) {
        const int kind = static_cast<int>(rng() % 10);
        GenerationRequest g;
        const int len = 1 + static_cast<int>(rng() % 90);
        for (int k = 0; k < len; ++k) g.prompt.push_back(static_cast<int32_t>(rng() % vocab));
        g.sampling = kind % 2 ? SamplingParams::Greedy() : SamplingParams{};
        g.sampling.seed = rng();
        g.max_new_tokens = 1 + static_cast<int32_t>(rng() % 64);
        g.group = static_cast<uint64_t>(t % 3);
        g.loop_guard_tokens = kind == 3 ? 4 : 0;
        if (kind == 4) g.deadline = Clock::now();  // already due
        if (kind == 5) g.deadline = Clock::now() + milliseconds(rng() % 20);
        if (kind == 6) {
          auto seen = std::make_shared<int>(0);
          g.on_token = [seen](int32_t) { return ++*seen < 3; };  // stops itself after 3 tokens
        }
        if (kind == 7 && i % 4 == 0) g.prompt.push_back(vocab + 5);  // refused: outside the vocabulary
        auto id_box = std::make_shared<std::atomic<uint64_t>>(0);
        g.on_done = [&ledger, id_box](const GenerationResult& r) {
          // The id is published before Submit returns only through this box; spin until it is.
          while (id_box->load() == 0) std::this_thread::yield();
          ledger.Record(id_box->load(), r);
        };
        uint64_t id = 0;
        try {
          id = engine->Submit(std::move(g));
        } catch (const Error& e) {
          if (e.code() == ErrorCode::kUnavailable) {
            ++refused;
          } else {
            EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
            ++invalid;
          }
          std::this_thread::sleep_for(milliseconds(5 + rng() % 10));  // back off, as a client would
          continue;
        }
        id_box->store(id);
        ++accepted;
        {
          std::lock_guard<std::mutex> lock(ids_mu);
          all_ids.push_back(id);
        }
        if (kind == 8) engine->Cancel(id);  // at once, probably still queued
        if (kind == 9) {
          std::this_thread::sleep_for(milliseconds(rng() % 10));
          engine->Cancel(id);  // probably mid-generation
        }
        if (kind == 2) {
          uint64_t other = 0;
          {
            std::lock_guard<std::mutex> lock(ids_mu);
            other = all_ids[rng() % all_ids.size()];
          }
          engine->Cancel(other);                        // someone else's, maybe finished
          engine->Cancel(other + (uint64_t{1} << 40));  // never existed
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_TRUE(ledger.WaitFor(accepted.load(), milliseconds(120000)))
      << ledger.total << " of " << accepted.load() << " requests completed";
  // A little longer, so that a duplicate completion would show up.
  std::this_thread::sleep_for(milliseconds(50));
  stop_readers = true;
  reader.join();

  std::lock_guard<std::mutex> lock(ledger.mu);
  EXPECT_EQ(static_cast<int64_t>(ledger.done.size()), accepted.load());
  for (const auto& [id, n] : ledger.done)
    EXPECT_EQ(n, 1) << "request " << id << " completed " << n << " times";
  EXPECT_EQ(accepted + refused + invalid, kThreads * kPerThread);
  EXPECT_GT(refused.load(), 0) << "the queue limit was never reached: the test is too gentle";
  EXPECT_GT(ledger.reasons[FinishReason::kCancelled], 0);
  EXPECT_GT(ledger.reasons[FinishReason::kDeadline], 0);
  EXPECT_EQ(ledger.reasons[FinishReason::kError], 0);
  const EngineStats s = engine->stats();
  std::printf(
      "[stress] %lld accepted (%d cancelled, %d past deadline, %d stopped, %d at length), %lld refused "
      "(queue full), %lld invalid; %lld steps, %lld preemptions\n",
      static_cast<long long>(accepted.load()), ledger.reasons[FinishReason::kCancelled],
      ledger.reasons[FinishReason::kDeadline], ledger.reasons[FinishReason::kStop],
      ledger.reasons[FinishReason::kLength], static_cast<long long>(refused.load()),
      static_cast<long long>(invalid.load()), static_cast<long long>(s.steps),
      static_cast<long long>(s.preemptions));
  EXPECT_EQ(s.kv_pages_used, 0) << "KV pages leaked";
  EXPECT_EQ(s.queued, 0);
  EXPECT_EQ(s.running, 0);
  EXPECT_GT(s.preemptions, 0) << "no decode ever had to preempt: the test is too gentle";
}

// Shutting down with work queued and running completes every request (as cancelled when the grace
// runs out), and returns as soon as the work is done rather than after the whole grace.
TEST_F(EngineStress, ShutdownCompletesEverythingAndReturnsWhenIdle) {
  EngineOptions eo;
  eo.max_seqs = 2;
  eo.max_step_tokens = 32;
  eo.kv_pages = 16;
  eo.max_context = 256;
  {
    auto engine = MakeEngine(eo);
    Ledger ledger;
    int submitted = 0;
    for (int i = 0; i < 12; ++i) {
      GenerationRequest g;
      g.prompt = {1, 2, 3, static_cast<int32_t>(i)};
      g.sampling = SamplingParams::Greedy();
      g.max_new_tokens = 200;
      g.on_done = [&ledger, i](const GenerationResult& r) { ledger.Record(static_cast<uint64_t>(i + 1), r); };
      engine->Submit(std::move(g));
      ++submitted;
    }
    engine->Shutdown(milliseconds(0));  // no grace: the rest is cancelled
    EXPECT_EQ(ledger.total, submitted);
    for (const auto& [id, n] : ledger.done) EXPECT_EQ(n, 1) << "request " << id;
    EXPECT_GT(ledger.reasons[FinishReason::kCancelled], 0);
    EXPECT_EQ(engine->stats().kv_pages_used, 0);
    GenerationRequest late;
    late.prompt = {1};
    EXPECT_THROW(engine->Submit(std::move(late)), Error) << "a stopped engine refuses work";
  }
  {
    auto engine = MakeEngine(eo);
    GenerationRequest g;
    g.prompt = {1, 2, 3};
    g.sampling = SamplingParams::Greedy();
    g.max_new_tokens = 4;
    engine->Submit(std::move(g));
    const auto t0 = Clock::now();
    engine->Shutdown(milliseconds(20000));
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    EXPECT_LT(secs, 5.0) << "Shutdown waited for its whole grace although the work was done";
    EXPECT_EQ(engine->stats().kv_pages_used, 0);
  }
}

}  // namespace
}  // namespace hymt
