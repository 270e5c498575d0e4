// End-to-end parity with HF transformers on the committed tiny fixtures (tools/make_fixtures.py):
// three random hunyuan_v1_dense checkpoints (GQA 1/2/4, tied and untied, one sharded, one with
// tokenizer.json), in f32 and bf16, with HF's logits at every position and a 32-token greedy
// continuation.
//
// Bounds (from the issue): f32 logits ‖Δ‖∞/‖ref‖∞ ≤ 1e-4 and the greedy continuation identical;
// bf16 ≤ 3e-2 (HF rounds every activation to bf16, we keep them in f32), and the teacher-forced top-1
// identical wherever the reference's top-2 margin exceeds 0.05.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/cpu/cpu_ops.h"
#include "core/json.h"
#include "core/mapped_file.h"
#include "formats/safetensors.h"
#include "runtime/engine.h"
#include "runtime/loader.h"
#include "runtime/oneshot.h"
#include "test_util.h"

namespace hymt {
namespace {

struct Case {
  std::string fixture;
  std::string dtype;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.fixture << "/" << c.dtype; }

std::vector<Case> AllCases() {
  std::vector<Case> out;
  for (const char* f : {"tiny-gqa1", "tiny-gqa2", "tiny-gqa4"})
    for (const char* d : {"f32", "bf16"}) out.push_back({f, d});
  return out;
}

std::string CaseName(const testing::TestParamInfo<Case>& info) {
  std::string n = info.param.fixture + "_" + info.param.dtype;
  std::replace(n.begin(), n.end(), '-', '_');
  return n;
}

struct Reference {
  std::unique_ptr<SafetensorsSource> file;
  Json meta;
  int n_prompts = 0;

  std::vector<int32_t> Ints(const std::string& name) const {
    const TensorInfo& t = file->Get(name);
    std::vector<int32_t> v(t.bytes / 4);
    std::memcpy(v.data(), t.data, t.bytes);
    return v;
  }
  std::vector<float> Floats(const std::string& name) const {
    const TensorInfo& t = file->Get(name);
    std::vector<float> v(t.bytes / 4);
    std::memcpy(v.data(), t.data, t.bytes);
    return v;
  }
};

Reference LoadReference(const std::string& fixture) {
  Reference r;
  const std::string dir = test::TestDataDir() + "/fixtures/" + fixture;
  r.file = SafetensorsSource::Open(dir + "/reference.safetensors");
  r.meta = Json::Parse(ReadFile(dir + "/reference.json"));
  r.n_prompts = static_cast<int>(r.meta.Find("prompts")->AsArray().size());
  return r;
}

class FixtureParity : public testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    dir_ = test::TestDataDir() + "/fixtures/" + GetParam().fixture + "/" + GetParam().dtype;
    model_ = LoadModel(dir_);
    ref_ = LoadReference(GetParam().fixture);
    f32_ = GetParam().dtype == "f32";
  }

  // Compares teacher-forced logits over prompt + reference continuation with the reference's.
  void CheckLogits(Ops& ops, const std::string& which) {
    const int64_t vocab = model_.config.vocab_rows;
    for (int p = 0; p < ref_.n_prompts; ++p) {
      const std::string key = GetParam().dtype + ".prompt" + std::to_string(p);
      std::vector<int32_t> ids = ref_.Ints(key + ".ids");
      std::vector<int32_t> greedy = ref_.Ints(key + ".greedy");
      ids.insert(ids.end(), greedy.begin(), greedy.end());
      std::vector<float> want = ref_.Floats(key + ".logits");
      ASSERT_EQ(want.size(), ids.size() * vocab);
      std::vector<float> got = ForwardLogits(*model_.model, ops, ids);
      ASSERT_EQ(got.size(), want.size());
      double max_diff = 0, max_ref = 0;
      int top1_checked = 0, top1_mismatch = 0;
      for (size_t pos = 0; pos < ids.size(); ++pos) {
        const float* w = want.data() + pos * vocab;
        const float* g = got.data() + pos * vocab;
        for (int64_t i = 0; i < vocab; ++i) {
          max_diff = std::max(max_diff, std::fabs(static_cast<double>(w[i]) - g[i]));
          max_ref = std::max(max_ref, std::fabs(static_cast<double>(w[i])));
        }
        // Top-1 agreement where the reference is not near a tie.
        std::vector<int64_t> order(static_cast<size_t>(vocab));
        for (int64_t i = 0; i < vocab; ++i) order[i] = i;
        std::partial_sort(order.begin(), order.begin() + 2, order.end(), [&](int64_t a, int64_t b) { return w[a] > w[b]; });
        if (w[order[0]] - w[order[1]] > 0.05f) {
          ++top1_checked;
          int64_t argmax = std::max_element(g, g + vocab) - g;
          if (argmax != order[0]) ++top1_mismatch;
        }
      }
      const double rel = max_diff / max_ref;
      const double bound = f32_ ? 1e-4 : 3e-2;
      EXPECT_LE(rel, bound) << which << " prompt " << p << ": ‖Δ‖∞/‖ref‖∞ = " << rel;
      EXPECT_EQ(top1_mismatch, 0) << which << " prompt " << p << ": " << top1_mismatch << " of " << top1_checked
                                  << " confident positions disagree on the top token";
      RecordProperty(which + "_prompt" + std::to_string(p) + "_rel_linf", std::to_string(rel));
    }
  }

  std::string dir_;
  LoadedModel model_;
  Reference ref_;
  bool f32_ = true;
};

TEST_P(FixtureParity, TokenizerMatchesReferenceIds) {
  const Json::Array& prompts = ref_.meta.Find("prompts")->AsArray();
  for (int p = 0; p < ref_.n_prompts; ++p) {
    std::vector<int32_t> want = ref_.Ints(GetParam().dtype + ".prompt" + std::to_string(p) + ".ids");
    EXPECT_EQ(model_.tokenizer->Encode(prompts[p].AsString(), true), want) << "prompt " << p;
  }
}

TEST_P(FixtureParity, ReferenceOpsLogits) {
  auto ops = CreateReferenceOps();
  CheckLogits(*ops, "reference");
}

TEST_P(FixtureParity, CpuOpsLogits) {
  auto ops = CreateCpuOps();
  CheckLogits(*ops, "cpu");
}

TEST_P(FixtureParity, CpuGreedyContinuation) {
  if (!f32_) GTEST_SKIP() << "greedy identity is required in f32; bf16 is checked by teacher-forced top-1";
  auto ops = CreateCpuOps();
  for (int p = 0; p < ref_.n_prompts; ++p) {
    const std::string key = GetParam().dtype + ".prompt" + std::to_string(p);
    std::vector<int32_t> ids = ref_.Ints(key + ".ids");
    std::vector<int32_t> want = ref_.Ints(key + ".greedy");
    EXPECT_EQ(GreedyContinuation(*model_.model, *ops, ids, static_cast<int>(want.size())), want) << "prompt " << p;
  }
}

TEST_P(FixtureParity, ChunkedPrefillEqualsOneShot) {
  auto ops = CreateCpuOps();
  std::vector<int32_t> ids = ref_.Ints(GetParam().dtype + ".prompt2.ids");
  std::vector<float> whole = ForwardLogits(*model_.model, *ops, ids);
  std::vector<float> chunked = ForwardLogits(*model_.model, *ops, ids, DType::kF32, 7);
  ASSERT_EQ(whole.size(), chunked.size());
  double max_diff = 0, max_ref = 0;
  for (size_t i = 0; i < whole.size(); ++i) {
    max_diff = std::max(max_diff, std::fabs(static_cast<double>(whole[i]) - chunked[i]));
    max_ref = std::max(max_ref, std::fabs(static_cast<double>(whole[i])));
  }
  EXPECT_LE(max_diff / max_ref, 1e-5);
}

// All prompts at once through the engine (continuous batching over the paged cache) give each one's
// reference continuation.
TEST_P(FixtureParity, EngineBatchGreedy) {
  if (!f32_) GTEST_SKIP() << "greedy identity is required in f32";
  auto ops = CreateCpuOps();
  Placement placement;
  placement.embed = placement.head = ops.get();
  placement.layers.assign(model_.config.n_layers, ops.get());
  EngineOptions eo;
  eo.max_seqs = 4;
  eo.max_step_tokens = 40;  // smaller than the prompts: prefill is chunked and mixed with decoding
  eo.kv_pages = 64;
  eo.page_size = 16;
  Engine engine(model_.model, placement, eo);
  std::vector<std::vector<int32_t>> want(ref_.n_prompts);
  std::vector<std::shared_ptr<GenerationResult>> got(ref_.n_prompts);
  std::vector<uint64_t> ids;
  std::mutex mu;
  std::condition_variable cv;
  int done = 0;
  for (int p = 0; p < ref_.n_prompts; ++p) {
    const std::string key = GetParam().dtype + ".prompt" + std::to_string(p);
    want[p] = ref_.Ints(key + ".greedy");
    GenerationRequest g;
    g.prompt = ref_.Ints(key + ".ids");
    g.sampling = SamplingParams::Greedy();
    g.max_new_tokens = static_cast<int32_t>(want[p].size());
    g.group = static_cast<uint64_t>(p);
    g.on_done = [&, p](const GenerationResult& r) {
      std::lock_guard<std::mutex> lock(mu);
      got[p] = std::make_shared<GenerationResult>(r);
      ++done;
      cv.notify_all();
    };
    engine.Submit(std::move(g));
  }
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done == ref_.n_prompts; });
  for (int p = 0; p < ref_.n_prompts; ++p) {
    EXPECT_EQ(got[p]->reason, FinishReason::kLength);
    EXPECT_EQ(got[p]->tokens, want[p]) << "prompt " << p;
  }
  EXPECT_EQ(engine.stats().kv_pages_used, 0) << "every page comes back";
}

INSTANTIATE_TEST_SUITE_P(Fixtures, FixtureParity, testing::ValuesIn(AllCases()), CaseName);

}  // namespace
}  // namespace hymt
