// One forward pass over one sequence, outside the engine: teacher-forced logits at every position.
// Used by parity tests and the `hymt forward` tool; allocates what the sequence needs and frees it.
#pragma once

#include <cstdint>

#include <span>
#include <vector>

#include "model/model.h"
#include "ops/ops.h"

namespace hymt {

// Returns [ids.size(), vocab_rows] f32 logits, row-major. `model`'s weights must be placed for `ops`.
// kv_type: the cache's stored type (default f32).
std::vector<float> ForwardLogits(const HunyuanModel& model, Ops& ops, std::span<const int32_t> ids,
                                 DType kv_type = DType::kF32, int chunk = 0);

// Greedy continuation of `prompt` for n tokens (no stop tokens), through the same path.
std::vector<int32_t> GreedyContinuation(const HunyuanModel& model, Ops& ops, std::span<const int32_t> prompt,
                                        int n, DType kv_type = DType::kF32);

}  // namespace hymt
