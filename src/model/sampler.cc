#include "model/sampler.h"

#include "ops/sampling.h"

namespace hymt {

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {}

SampleSpec Sampler::NextSpec(std::span<const int32_t> history) {
  SampleSpec spec;
  spec.temperature = params_.temperature;
  spec.top_k = params_.top_k;
  spec.top_p = params_.top_p;
  spec.repetition_penalty = params_.repetition_penalty;
  spec.history = history;
  if (!params_.greedy()) spec.uniform = std::uniform_real_distribution<double>(0.0, 1.0)(rng_);
  return spec;
}

int32_t Sampler::Sample(std::span<const float> logits, int32_t n_valid, std::span<const int32_t> history) {
  return SampleRow(logits, n_valid, NextSpec(history), &scratch_);
}

}  // namespace hymt
