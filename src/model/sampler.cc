#include "model/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/status.h"

namespace hymt {

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {}

int32_t Sampler::Sample(std::span<const float> logits, int32_t n_valid, std::span<const int32_t> history) {
  HYMT_CHECK(n_valid > 0 && n_valid <= static_cast<int32_t>(logits.size()));
  scratch_.assign(logits.begin(), logits.begin() + n_valid);
  std::vector<float>& s = scratch_;

  if (params_.repetition_penalty != 1.0f) {
    const float penalty = params_.repetition_penalty;
    // HF gathers each distinct token's score once, so a token seen twice is penalised once.
    std::vector<int32_t> seen(history.begin(), history.end());
    std::sort(seen.begin(), seen.end());
    seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
    for (int32_t id : seen) {
      if (id < 0 || id >= n_valid) continue;
      s[id] = s[id] < 0 ? s[id] * penalty : s[id] / penalty;
    }
  }

  if (params_.greedy()) {
    return static_cast<int32_t>(std::max_element(s.begin(), s.end()) - s.begin());
  }

  const float inv_t = 1.0f / params_.temperature;
  for (float& v : s) v *= inv_t;

  // Candidates in descending score order (only as many as top-k needs).
  order_.resize(s.size());
  std::iota(order_.begin(), order_.end(), 0);
  auto by_score = [&](int32_t a, int32_t b) { return s[a] > s[b] || (s[a] == s[b] && a < b); };
  size_t k = order_.size();
  if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < k) {
    k = static_cast<size_t>(params_.top_k);
    std::partial_sort(order_.begin(), order_.begin() + k, order_.end(), by_score);
  } else {
    std::sort(order_.begin(), order_.end(), by_score);
  }
  order_.resize(k);

  // Softmax over the candidates, then keep the smallest prefix whose mass reaches top_p.
  const float mx = s[order_[0]];
  std::vector<double> probs(k);
  double total = 0;
  for (size_t i = 0; i < k; ++i) {
    probs[i] = std::exp(static_cast<double>(s[order_[i]] - mx));
    total += probs[i];
  }
  size_t keep = k;
  if (params_.top_p < 1.0f) {
    double cum = 0;
    for (size_t i = 0; i < k; ++i) {
      cum += probs[i] / total;
      if (cum >= params_.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  double kept_total = 0;
  for (size_t i = 0; i < keep; ++i) kept_total += probs[i];
  std::uniform_real_distribution<double> uniform(0.0, kept_total);
  double u = uniform(rng_);
  for (size_t i = 0; i < keep; ++i) {
    u -= probs[i];
    if (u <= 0) return order_[i];
  }
  return order_[keep - 1];
}

}  // namespace hymt
