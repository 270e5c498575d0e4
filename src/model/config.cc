#include "model/config.h"

#include <cmath>

#include "core/status.h"

namespace hymt {

double RopeSpec::Base(int head_dim) const {
  if (alpha <= 0.0) return theta;
  return theta * std::pow(alpha, static_cast<double>(head_dim) / static_cast<double>(head_dim - 2));
}

std::vector<float> ModelConfig::RopeInvFreq() const {
  // HF computes base ** (arange(0, d, 2).float() / d) with a Python-float base and f32 exponents;
  // the power is taken in f32 there. We follow that rounding: exponent in f32, power in double, result
  // rounded to f32, then 1/x in f32.
  const double base = rope.Base(head_dim);
  std::vector<float> inv(static_cast<size_t>(head_dim / 2));
  for (int i = 0; i < head_dim / 2; ++i) {
    float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    float p = static_cast<float>(std::pow(static_cast<float>(base), static_cast<double>(exponent)));
    inv[i] = 1.0f / p;
  }
  return inv;
}

int64_t ModelConfig::ParameterCount() const {
  int64_t per_layer = int64_t{hidden} * q_dim() * 2 + int64_t{hidden} * kv_dim() * 2 + int64_t{hidden} * ffn * 3 +
                      int64_t{hidden} * 2 + int64_t{head_dim} * 2;
  int64_t total = vocab_rows * hidden + per_layer * n_layers + hidden;
  if (!tied_output) total += vocab_rows * hidden;
  return total;
}

void ModelConfig::Validate(const std::string& where) const {
  auto require = [&](bool ok, const std::string& what) {
    if (!ok) Fail(ErrorCode::kCorruptData, where, ": ", what);
  };
  require(hidden > 0 && ffn > 0 && n_layers > 0 && n_heads > 0 && n_kv_heads > 0 && head_dim > 0,
          StrCat("sizes must be positive (hidden ", hidden, ", ffn ", ffn, ", layers ", n_layers, ", heads ",
                 n_heads, ", kv heads ", n_kv_heads, ", head_dim ", head_dim, ")"));
  require(n_heads % n_kv_heads == 0,
          StrCat("attention heads (", n_heads, ") must be a multiple of key/value heads (", n_kv_heads, ")"));
  require(head_dim % 2 == 0 && head_dim > 2, StrCat("head_dim must be even and > 2, found ", head_dim));
  require(n_layers <= kMaxLayers && hidden <= kMaxHidden && ffn <= kMaxFfn && head_dim <= kMaxHeadDim &&
              n_heads <= kMaxHeads,
          StrCat("implausibly large sizes (layers ", n_layers, ", hidden ", hidden, ", ffn ", ffn, ", heads ",
                 n_heads, ", head_dim ", head_dim, "; the limits are ", kMaxLayers, ", ", kMaxHidden, ", ",
                 kMaxFfn, ", ", kMaxHeads, ", ", kMaxHeadDim, ")"));
  require(rms_eps > 0 && rms_eps < 1, StrCat("rms_norm_eps out of range: ", rms_eps));
  require(rope.theta > 0 && std::isfinite(rope.theta),
          StrCat("rope_theta must be positive and finite, found ", rope.theta));
  // An alpha can push the effective base to 0 or infinity, which makes every rotation NaN.
  const double base = rope.Base(head_dim);
  require(base > 0 && std::isfinite(base),
          StrCat("the RoPE base (rope_theta ", rope.theta, ", alpha ", rope.alpha, ") is ", base,
                 "; it must be positive and finite"));
  require(max_positions >= 0, StrCat("max_position_embeddings must not be negative, found ", max_positions));
  require(vocab_rows > 0, "empty vocabulary");
}

}  // namespace hymt
