#include "ops/sampling.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "core/half.h"
#include "core/status.h"

namespace hymt {

int32_t SampleRow(std::span<const float> logits, int32_t n_valid, const SampleSpec& spec, std::vector<float>* scratch) {
  HYMT_CHECK(n_valid > 0 && n_valid <= static_cast<int32_t>(logits.size()));
  std::vector<float> local;
  std::vector<float>& s = scratch ? *scratch : local;
  s.assign(logits.begin(), logits.begin() + n_valid);
  // NaN breaks the orderings below (std::sort's requirements included); inf makes every probability NaN.
  for (float v : s)
    if (!std::isfinite(v)) return kNonFiniteLogits;

  if (spec.repetition_penalty != 1.0f && !spec.history.empty()) {
    std::vector<int32_t> seen(spec.history.begin(), spec.history.end());
    std::sort(seen.begin(), seen.end());
    seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
    for (int32_t id : seen) {
      if (id < 0 || id >= n_valid) continue;
      s[id] = s[id] < 0 ? s[id] * spec.repetition_penalty : s[id] / spec.repetition_penalty;
    }
  }
  if (spec.temperature <= 0) return static_cast<int32_t>(std::max_element(s.begin(), s.end()) - s.begin());

  const float inv_t = InverseTemperature(spec);
  for (float& v : s) v *= inv_t;
  std::vector<int32_t> order(s.size());
  std::iota(order.begin(), order.end(), 0);
  auto by_score = [&](int32_t a, int32_t b) { return s[a] > s[b] || (s[a] == s[b] && a < b); };
  size_t k = order.size();
  if (spec.top_k > 0 && static_cast<size_t>(spec.top_k) < k) {
    k = static_cast<size_t>(spec.top_k);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), by_score);
  } else {
    std::sort(order.begin(), order.end(), by_score);
  }
  std::vector<float> top(k);
  for (size_t i = 0; i < k; ++i) top[i] = s[order[i]];
  return SampleFromTopK(top, std::span<const int32_t>(order.data(), k), spec);
}

int32_t SampleFromTopK(std::span<const float> scores, std::span<const int32_t> ids, const SampleSpec& spec) {
  const size_t k = scores.size();
  HYMT_CHECK(k > 0 && ids.size() == k);
  const float mx = scores[0];
  std::vector<double> probs(k);
  double total = 0;
  for (size_t i = 0; i < k; ++i) {
    probs[i] = std::exp(static_cast<double>(scores[i] - mx));
    total += probs[i];
  }
  size_t keep = k;
  if (spec.top_p < 1.0f) {
    double cum = 0;
    for (size_t i = 0; i < k; ++i) {
      cum += probs[i] / total;
      if (cum >= spec.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  double kept = 0;
  for (size_t i = 0; i < keep; ++i) kept += probs[i];
  double u = spec.uniform * kept;
  for (size_t i = 0; i < keep; ++i) {
    u -= probs[i];
    if (u < 0) return ids[i];
  }
  return ids[keep - 1];
}

void Ops::SampleTokens(const Tensor& logits, std::span<const SampleSpec> specs, int32_t n_valid,
                       std::span<int32_t> out) {
  HYMT_CHECK(static_cast<int64_t>(specs.size()) == logits.rows && out.size() == specs.size());
  const size_t n = static_cast<size_t>(logits.rows * logits.cols);
  std::vector<float> host(n);
  if (logits.dtype == DType::kF32) {
    CopyToHost(logits, host.data());
  } else {
    HYMT_CHECK(logits.dtype == DType::kBF16, "logits in ", DTypeName(logits.dtype));
    std::vector<uint16_t> raw(n);
    CopyToHost(logits, raw.data());
    for (size_t i = 0; i < n; ++i) host[i] = Bf16ToF32(raw[i]);
  }
  std::vector<float> scratch;
  for (size_t r = 0; r < specs.size(); ++r) {
    std::span<const float> row(host.data() + r * logits.cols, static_cast<size_t>(logits.cols));
    out[r] = SampleRow(row, n_valid, specs[r], &scratch);
  }
}

}  // namespace hymt
