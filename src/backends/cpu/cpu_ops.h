// The CPU backend: every op of ops/ops.h on host memory, f32 activations, multithreaded over
// DefaultThreadPool(), with kernels compiled for several instruction sets and chosen at run time.
#pragma once

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

}  // namespace cpu

// Returns the CPU backend on DefaultIsa().
std::unique_ptr<Ops> CreateCpuOps();
// Returns the CPU backend running the kernels of `isa` (tests compare each ISA with the generic one).
// Throws Error(kUnsupported) when the CPU cannot run them.
std::unique_ptr<Ops> CreateCpuOps(cpu::Isa isa);

}  // namespace hymt
