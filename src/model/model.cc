#include "model/model.h"

#include <cmath>

#include "core/status.h"

namespace hymt {

size_t Activations::Bytes(const ModelConfig& c, int64_t max_rows, DType dtype) {
  const int64_t cols = 3 * int64_t{c.hidden} + 2 * int64_t{c.q_dim()} + 2 * int64_t{c.kv_dim()} + 2 * int64_t{c.ffn};
  // Each tensor starts on a 256-byte boundary.
  return DTypeBytes(dtype, max_rows * cols) + 9 * 256;
}

Activations Activations::Carve(const ModelConfig& c, int64_t max_rows, DType dtype, DeviceId device, void* memory) {
  Activations a;
  a.max_rows = max_rows;
  char* p = static_cast<char*>(memory);
  auto take = [&](int64_t cols) {
    Tensor t;
    t.data = p;
    t.dtype = dtype;
    t.rows = max_rows;
    t.cols = cols;
    t.stride = cols;
    t.device = device;
    size_t bytes = DTypeBytes(dtype, max_rows * cols);
    p += (bytes + 255) / 256 * 256;
    return t;
  };
  a.x = take(c.hidden);
  a.h = take(c.hidden);
  a.q = take(c.q_dim());
  a.k = take(c.kv_dim());
  a.v = take(c.kv_dim());
  a.attn = take(c.q_dim());
  a.gate = take(c.ffn);
  a.up = take(c.ffn);
  a.proj = take(c.hidden);
  return a;
}

HunyuanModel::HunyuanModel(ModelConfig config, ModelWeights weights)
    : config_(std::move(config)), weights_(std::move(weights)) {}

void HunyuanModel::Embed(Ops& ops, std::span<const int32_t> ids, Activations& a) const {
  ops.Embed(weights_.embed, ids, a.x.Rows(0, static_cast<int64_t>(ids.size())));
}

void HunyuanModel::ForwardLayer(const LayerWeights& w, Ops& ops, const KvLayerView& kv, Activations& a,
                                int64_t n) const {
  const ModelConfig& c = config_;
  Tensor x = a.x.Rows(0, n), h = a.h.Rows(0, n), proj = a.proj.Rows(0, n);
  Tensor q = a.q.Rows(0, n), k = a.k.Rows(0, n), v = a.v.Rows(0, n), attn = a.attn.Rows(0, n);
  Tensor gate = a.gate.Rows(0, n), up = a.up.Rows(0, n);

  // 1-2. h = RMSNorm(x) * input_layernorm; q, k, v projections of h
  const Weight* qkv[] = {&w.wq, &w.wk, &w.wv};
  const Tensor qkv_out[] = {q, k, v};
  ops.NormMatMulGroup(x, w.attn_norm, c.rms_eps, h, qkv, qkv_out);
  // 3-4. rotate-half RoPE at each token's position, then the per-head q/k RMSNorm (after RoPE); the
  // cache stores k after its norm. 5. causal GQA attention over the paged cache
  ops.RopeNormKvAttention(q, k, v, c.n_heads, w.rope_inv_freq, &w.q_norm, &w.k_norm, c.rms_eps, kv,
                          1.0f / std::sqrt(static_cast<float>(c.head_dim)), attn);
  // o_proj, residual
  ops.MatMulAdd(attn, w.wo, proj, x);
  // 6. x += down(silu(gate(h)) * up(h)) with h = RMSNorm(x) * post_attention_layernorm
  ops.NormMatMulSwiGlu(x, w.ffn_norm, c.rms_eps, h, w.gate, w.up, up, gate);
  ops.MatMulAdd(gate, w.down, proj, x);
}

void HunyuanModel::Logits(Ops& ops, Activations& a, std::span<const int32_t> rows, Tensor logits) const {
  const int64_t n = static_cast<int64_t>(rows.size());
  HYMT_CHECK(n <= a.max_rows && logits.rows == n && logits.cols == weights_.head().rows);
  Tensor picked = a.proj.Rows(0, n);
  ops.GatherRows(a.x, rows, picked);
  Tensor h = a.h.Rows(0, n);
  ops.RmsNorm(picked, weights_.final_norm, config_.rms_eps, h);
  ops.MatMul(h, weights_.head(), logits);
}

}  // namespace hymt
