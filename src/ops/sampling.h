// The host reference of token selection (Ops::SampleTokens): the transformers logits pipeline.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "ops/ops.h"

namespace hymt {

// Chooses one token from logits[0, n_valid) per spec: repetition penalty (each distinct history token
// once: score / p if positive, score * p if negative), then argmax when greedy (lowest id on ties), else
// temperature, top-k, top-p (the smallest prefix of the sorted distribution whose mass reaches top_p)
// and the draw at spec.uniform. Returns kNonFiniteLogits when logits[0, n_valid) hold a NaN or an
// infinity. `scratch` avoids allocations across calls.
int32_t SampleRow(std::span<const float> logits, int32_t n_valid, const SampleSpec& spec,
                  std::vector<float>* scratch = nullptr);

// The part of SampleRow after top-k (temperature > 0): `scores` are the k best penalised scores times
// 1 / temperature, best first (ties: lowest id first), `ids` their tokens. Applies top-p and draws at
// spec.uniform exactly as SampleRow does; a device that finds the k best itself hands them over here.
int32_t SampleFromTopK(std::span<const float> scores, std::span<const int32_t> ids, const SampleSpec& spec);

// The f32 value 1 / temperature SampleRow multiplies scores by (a device must use the same).
inline float InverseTemperature(const SampleSpec& spec) {
  return 1.0f / spec.temperature;
}

}  // namespace hymt
