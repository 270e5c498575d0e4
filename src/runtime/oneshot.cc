#include "runtime/oneshot.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "core/half.h"
#include "core/status.h"
#include "runtime/kv_cache.h"

namespace hymt {
namespace {

// The state of one sequence run step by step: activations, a KV cache covering max_tokens, logits.
struct OneSequence {
  OneSequence(const HunyuanModel& m, Ops& ops, int64_t max_tokens, int64_t max_rows, DType kv_type)
      : model(m), ops(ops), page_size(16) {
    const ModelConfig& c = m.config();
    const DType act = ops.activation_dtype();
    act_buf = ops.Allocate(Activations::Bytes(c, max_rows, act), "activations");
    a = Activations::Carve(c, max_rows, act, ops.device(), act_buf->data());
    const int64_t pages = (max_tokens + page_size - 1) / page_size;
    kv = std::make_unique<KvCache>(c, pages, page_size, kv_type, std::vector<Ops*>(c.n_layers, &ops));
    HYMT_CHECK(kv->pages().Reserve(table, max_tokens));
    const int64_t vocab = m.weights().head().rows;
    logit_buf = ops.Allocate(DTypeBytes(act, vocab * max_rows), "logits");
    logits.data = logit_buf->data();
    logits.dtype = act;
    logits.rows = max_rows;
    logits.cols = vocab;
    logits.stride = vocab;
    logits.device = ops.device();
  }

  // Feeds ids at positions [n_past, n_past + n) and appends the logits of every fed row to out.
  void Feed(std::span<const int32_t> ids, std::vector<float>* out) {
    const int64_t n = static_cast<int64_t>(ids.size());
    StepBatch batch;
    batch.page_size = page_size;
    const int64_t pages_needed = (n_past + n + page_size - 1) / page_size;
    batch.AddSeq(static_cast<int32_t>(n), static_cast<int32_t>(n_past),
                 std::span<const int32_t>(table.data(), static_cast<size_t>(pages_needed)));
    ops.BeginStep(batch);
    model.Embed(ops, ids, a);
    for (int i = 0; i < model.config().n_layers; ++i) model.ForwardLayer(model.layer(i), ops, kv->layer(i), a, n);
    std::vector<int32_t> rows(static_cast<size_t>(n));
    std::iota(rows.begin(), rows.end(), 0);
    Tensor l = logits.Rows(0, n);
    model.Logits(ops, a, rows, l);
    const size_t count = static_cast<size_t>(n * logits.cols);
    const size_t start = out->size();
    out->resize(start + count);
    if (l.dtype == DType::kF32) {
      ops.CopyToHost(l, out->data() + start);
    } else {
      std::vector<uint16_t> tmp(count);
      ops.CopyToHost(l, tmp.data());
      for (size_t i = 0; i < count; ++i) (*out)[start + i] = Bf16ToF32(tmp[i]);
    }
    n_past += n;
  }

  const HunyuanModel& model;
  Ops& ops;
  int page_size;
  std::unique_ptr<Buffer> act_buf, logit_buf;
  Activations a;
  std::unique_ptr<KvCache> kv;
  std::vector<int32_t> table;
  Tensor logits;
  int64_t n_past = 0;
};

}  // namespace

std::vector<float> ForwardLogits(const HunyuanModel& model, Ops& ops, std::span<const int32_t> ids, DType kv_type,
                                 int chunk) {
  const int64_t n = static_cast<int64_t>(ids.size());
  HYMT_CHECK(n > 0);
  const int64_t step = chunk > 0 ? chunk : n;
  OneSequence seq(model, ops, n, std::min(step, n), kv_type);
  std::vector<float> out;
  for (int64_t i = 0; i < n; i += step) seq.Feed(ids.subspan(i, std::min(step, n - i)), &out);
  return out;
}

std::vector<int32_t> GreedyContinuation(const HunyuanModel& model, Ops& ops, std::span<const int32_t> prompt, int n,
                                        DType kv_type) {
  const int64_t total = static_cast<int64_t>(prompt.size()) + n;
  OneSequence seq(model, ops, total, static_cast<int64_t>(prompt.size()), kv_type);
  std::vector<float> logits;
  seq.Feed(prompt, &logits);
  std::vector<int32_t> out;
  const int64_t vocab = seq.logits.cols;
  for (int i = 0; i < n; ++i) {
    const float* last = logits.data() + logits.size() - vocab;
    int32_t next = static_cast<int32_t>(std::max_element(last, last + vocab) - last);
    out.push_back(next);
    if (i + 1 == n) break;
    logits.clear();
    seq.Feed(std::span<const int32_t>(&out.back(), 1), &logits);
  }
  return out;
}

}  // namespace hymt
