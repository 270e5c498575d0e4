// The CPU backend: every op of ops/ops.h on host memory, f32 activations, multithreaded over
// DefaultThreadPool(), with kernels compiled for several instruction sets and chosen at run time.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

#include "ops/ops.h"

namespace hymt {

namespace cpu {

// The instruction sets the kernels are compiled for (src/backends/cpu/kernels/*.cc, once each).
// kAvxVnni is AVX2 plus AVX-VNNI (the 256-bit vpdpbusd of Intel's client chips since Alder Lake, and of
// Zen 5): the AVX2 kernels, with vpdpbusd in the packed matmul.
enum class Isa { kGeneric, kAvx2, kAvxVnni, kAvx512 };

const char* IsaName(Isa isa);  // "generic", "avx2", "avxvnni", "avx512"
// Parses a name as printed by IsaName; returns false when unknown.
bool ParseIsa(std::string_view name, Isa* out);
// True when this CPU (and the OS) can run the kernels of `isa`.
bool IsaSupported(Isa isa);
// The ISA CreateCpuOps() uses: $HYMT_CPU_ISA when set (an error if the CPU lacks it), else the best
// one this CPU supports.
Isa DefaultIsa();

// Host memory the CPU backend holds besides the weights, the KV cache and the engine's activations, at
// most, for a model whose widest matmul input is k_max and whose heads are head_dim wide. Each buffer grows
// to what the largest step needs and is then kept, so the planner counts these bounds:
//   per_token: a step's activation rows quantised for the integer kernels (at most 1.5 k_max + 64 bytes a
//     row) and its RoPE tables (cos and sin, head_dim floats a row);
//   per_thread: the float GEMM's panels (kGemmScratchBytes), the packed GEMM's expanded row groups
//     (ExpandScratchBound, packed.h) and 64 KiB for the attention state and the norm weights in f32.
struct CpuScratch {
  uint64_t per_token = 0;
  uint64_t per_thread = 0;
};
CpuScratch CpuOpsScratchBytes(int64_t k_max, int64_t head_dim);

}  // namespace cpu

// Returns the CPU backend on DefaultIsa().
std::unique_ptr<Ops> CreateCpuOps();
// Returns the CPU backend running the kernels of `isa` (tests compare each ISA with the generic one).
// Throws Error(kUnsupported) when the CPU cannot run them.
std::unique_ptr<Ops> CreateCpuOps(cpu::Isa isa);

}  // namespace hymt
