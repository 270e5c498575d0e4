// Picks the next token from logits: greedy, or sampling with the transformers logits pipeline
// (repetition penalty, then temperature, top-k, top-p), seedable.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "ops/ops.h"

namespace hymt {

struct SamplingParams {
  float temperature = 0.7f;          // <= 0 means greedy
  int top_k = 20;                    // <= 0: no limit
  float top_p = 0.6f;                // >= 1: no limit
  float repetition_penalty = 1.05f;  // 1: off; applies to prompt and generated tokens, as HF does
  uint64_t seed = 0;

  bool greedy() const { return temperature <= 0.0f; }
  static SamplingParams Greedy() {
    SamplingParams p;
    p.temperature = 0;
    p.top_k = 0;
    p.top_p = 1;
    p.repetition_penalty = 1;
    return p;
  }
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);

  // Returns the next token id in [0, n_valid): logits beyond n_valid (embedding rows without a token)
  // are never chosen. `history` holds the tokens the repetition penalty applies to (each once or more).
  // Ties in greedy mode go to the lowest id. Returns kNonFiniteLogits when the logits hold a NaN or inf.
  int32_t Sample(std::span<const float> logits, int32_t n_valid, std::span<const int32_t> history);

  // The spec for the next token (draws this step's random number), for Ops::SampleTokens.
  SampleSpec NextSpec(std::span<const int32_t> history);

  const SamplingParams& params() const { return params_; }

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<float> scratch_;
};

}  // namespace hymt
