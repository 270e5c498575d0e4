// Partial offload and layer streaming on the CPU, through the host-memory stand-in for a GPU
// (backends/cpu/standin.h): the same kernels as the CPU path, so every plan must give bit-identical
// output. Compared over the committed fixtures: greedy continuations and seeded sampled ones (a sampled
// token depends on every logit's exact value) of several prompts run as one batch. The stand-in counts
// its "device" bytes: the peak never exceeds the plan's budget, nor the plan's own total.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <future>
#include <random>

#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/standin.h"
#include "core/status.h"
#include "runtime/session.h"
#include "runtime/streamer.h"
#include "test_util.h"

namespace hymt {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

std::string FixtureDir(const std::string& name) {
  return test::TestDataDir() + "/fixtures/" + name + "/f32";
}

// Prompts of several lengths (one longer than a KV page, one spanning a 16-row prefill boundary).
std::vector<std::vector<int32_t>> Prompts() {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int32_t> tok(3, 999);
  std::vector<std::vector<int32_t>> out;
  for (int n : {5, 17, 40}) {
    std::vector<int32_t> p;
    for (int i = 0; i < n; ++i) p.push_back(tok(rng));
    out.push_back(p);
  }
  return out;
}

// Every prompt twice (greedy, then sampled with a seed), all submitted at once: one batch.
std::vector<std::vector<int32_t>> Outputs(Engine& engine) {
  std::vector<std::future<GenerationResult>> pending;
  const auto prompts = Prompts();
  for (bool sampled : {false, true}) {
    for (size_t i = 0; i < prompts.size(); ++i) {
      GenerationRequest r;
      r.prompt = prompts[i];
      r.max_new_tokens = 24;
      r.sampling = SamplingParams::Greedy();
      if (sampled) {
        r.sampling.temperature = 1.0f;
        r.sampling.top_k = 0;
        r.sampling.top_p = 1.0f;
        r.sampling.seed = 100 + i;
      }
      r.group = i;
      auto promise = std::make_shared<std::promise<GenerationResult>>();
      pending.push_back(promise->get_future());
      r.on_done = [promise](const GenerationResult& g) { promise->set_value(g); };
      engine.Submit(std::move(r));
    }
  }
  std::vector<std::vector<int32_t>> out;
  for (auto& f : pending) {
    GenerationResult g = f.get();
    EXPECT_NE(g.reason, FinishReason::kError) << g.error;
    out.push_back(g.tokens);
  }
  return out;
}

SessionOptions Options(const std::string& fixture) {
  SessionOptions o;
  o.model = FixtureDir(fixture);
  // The CPU path's types, so that every plan runs the same kernels on the same data (a plan that is not
  // resident would otherwise quantise at load).
  o.kv_type = "f32";
  o.weight_type = "f32";
  o.max_seqs = 8;
  o.max_context = 256;
  return o;
}

struct Variant {
  const char* name;
  const char* mode;
  int gpu_layers;
  int ring_depth;
};

class Offload : public testing::TestWithParam<std::string> {};

TEST_P(Offload, EveryPlanMatchesTheCpuPath) {
  const std::string fixture = GetParam();
  SessionOptions cpu = Options(fixture);
  cpu.device = "cpu";
  const auto want = Outputs(Session::Open(cpu)->engine());
  ASSERT_EQ(want.size(), 6u);
  for (const auto& t : want) EXPECT_EQ(t.size(), 24u);

  const Variant variants[] = {
      {"resident", "resident", -1, 0},          {"partial 1", "partial", 1, 0},
      {"streamed 0 depth 1", "streamed", 0, 1}, {"streamed 0 depth 2", "streamed", 0, 2},
      {"streamed 0 depth 3", "streamed", 0, 3}, {"streamed 1 depth 1", "streamed", 1, 1},
      {"streamed 1 depth 2", "streamed", 1, 2},
  };
  for (const Variant& v : variants) {
    SCOPED_TRACE(v.name);
    SessionOptions o = Options(fixture);
    o.device = "standin";
    o.gpu_mem = 64 * kMiB;
    o.plan_mode = v.mode;
    o.gpu_layers = v.gpu_layers;
    o.ring_depth = v.ring_depth;
    auto s = Session::Open(o);
    const Plan& p = s->plan();
    ASSERT_EQ(p.mode, v.mode) << p.Table(s->model().config);
    if (v.gpu_layers >= 0) EXPECT_EQ(p.CountLayers(LayerHome::kGpu), v.gpu_layers);
    if (p.mode == "streamed") {
      ASSERT_NE(s->streamer(), nullptr);
      EXPECT_EQ(s->streamer()->depth(), std::min(v.ring_depth, p.CountLayers(LayerHome::kStreamed)));
    }
    EXPECT_EQ(Outputs(s->engine()), want);
    if (p.mode == "streamed") {
      // Every streamed layer was copied once per step (and the ring ran ahead into the next step).
      const int64_t steps = s->engine().stats().steps;
      EXPECT_GE(s->streamer()->uploads(), steps * p.CountLayers(LayerHome::kStreamed));
    }
    auto* standin = dynamic_cast<StandinOps*>(s->gpu_ops());
    ASSERT_NE(standin, nullptr);
    EXPECT_LE(standin->peak_bytes(), p.gpu_budget);
    EXPECT_LE(standin->peak_bytes(), p.gpu_total()) << p.Table(s->model().config);
  }
}

// The planner on its own: a budget too small for a resident plan streams, within the budget.
TEST_P(Offload, TheSmallestBudgetStreamsWithinIt) {
  SessionOptions o = Options(GetParam());
  o.device = "standin";
  o.gpu_mem = 64 << 10;
  std::string msg;
  try {
    Session::Open(o);
  } catch (const Error& e) {
    msg = e.what();
  }
  const size_t at = msg.find("--gpu-mem ");
  ASSERT_NE(at, std::string::npos) << msg;
  o.gpu_mem = std::strtoull(msg.c_str() + at + 10, nullptr, 10) * kMiB;
  auto s = Session::Open(o);
  Outputs(s->engine());
  auto* standin = dynamic_cast<StandinOps*>(s->gpu_ops());
  ASSERT_NE(standin, nullptr);
  EXPECT_LE(standin->peak_bytes(), o.gpu_mem);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Offload, testing::Values("tiny-gqa1", "tiny-gqa2", "tiny-gqa4"),
                         [](const testing::TestParamInfo<std::string>& i) {
                           std::string n = i.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

// The head and embedding on the CPU around layers split between the stand-in and the CPU: activations
// go up after the embedding, down, up and down again, and the output still matches.
TEST(Offload, EmbeddingRowsGoUpAndTheHeadComesDown) {
  LoadedModel m = LoadModel(FixtureDir("tiny-gqa2"));
  const ModelConfig& c = m.config;
  ASSERT_EQ(c.n_layers, 3);
  auto cpu = CreateCpuOps();
  auto dev = CreateStandinOps(StandinOptions{});
  ModelWeights w = m.model->weights();
  Placement placement;
  placement.embed = placement.head = cpu.get();
  const Weight rope = w.layers[0].rope_inv_freq;
  for (int i = 0; i < c.n_layers; ++i) {
    Ops* ops = i == 1 ? cpu.get() : static_cast<Ops*>(dev.get());
    placement.layers.push_back(ops);
    for (Weight* t : w.layers[i].Stored()) *t = ops->PrepareWeight(*t);
    w.layers[i].rope_inv_freq = ops->PrepareWeight(rope);
  }
  EngineOptions eo;
  eo.max_seqs = 8;
  eo.max_step_tokens = 512;  // as the CPU plan's: the same rows per step, so the same kernels
  eo.kv_pages = 64;
  eo.max_context = 256;
  eo.n_valid_tokens = m.tokenizer->n_tokens();
  Engine split(std::make_shared<HunyuanModel>(c, w), placement, eo);

  SessionOptions o = Options("tiny-gqa2");
  o.device = "cpu";
  EXPECT_EQ(Outputs(split), Outputs(Session::Open(o)->engine()));
}

// The streamer alone: out-of-order use (a step that failed half-way) restarts the cycle.
TEST(Offload, StreamerRestartsAfterAnAbandonedStep) {
  LoadedModel m = LoadModel(FixtureDir("tiny-gqa2"));
  auto dev = CreateStandinOps(StandinOptions{});
  const Weight rope = dev->PrepareWeight(m.model->weights().layers[0].rope_inv_freq);
  LayerStreamer streamer(*dev, {0, 1, 2}, m.model->weights().layers, rope, 2);
  auto same = [&](int layer, const LayerWeights& got) {
    const LayerWeights& host = m.model->weights().layers[layer];
    auto a = host.Stored();
    auto b = got.Stored();
    for (size_t t = 0; t < a.size(); ++t) {
      ASSERT_EQ(a[t]->bytes(), b[t]->bytes());
      EXPECT_EQ(std::memcmp(a[t]->data, b[t]->data, a[t]->bytes()), 0) << a[t]->name;
      EXPECT_EQ(b[t]->device, kStandinDevice);
    }
  };
  for (int step = 0; step < 3; ++step) {
    for (int i = 0; i < 3; ++i) {
      same(i, streamer.Acquire(i));
      streamer.Release(i);
    }
  }
  same(0, streamer.Acquire(0));  // a step that ends after acquiring layer 0 ...
  same(0, streamer.Acquire(0));  // ... and the next starts over
  streamer.Release(0);
  same(1, streamer.Acquire(1));
  streamer.Release(1);
  same(0, streamer.Acquire(0));  // skipped layer 2
  streamer.Release(0);
}

}  // namespace
}  // namespace hymt
