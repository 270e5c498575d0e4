// Measuring the hardware ceilings that benchmarks divide by, in the same run as the benchmark.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backends/cpu/cpu_ops.h"

namespace hymt {

// Host read bandwidth in GB/s (1e9 bytes/s): every thread of the default pool sums its share of a
// buffer of `bytes` (make it several times the last-level cache); median of 2 x `repeats` passes after a
// warm-up pass, half of them with software prefetch (as the packed GEMVs read; the hardware prefetchers
// of some virtual machines stop short of the memory's rate).
double MeasureHostReadBandwidth(size_t bytes = size_t{1} << 30, int repeats = 5);
// The fastest of those passes: the most the memory system gave in this run. Benchmarks on a shared
// machine divide by it, so that a pass slowed by other jobs does not lower the ceiling.
double MeasureHostReadBandwidthBest(size_t bytes = size_t{1} << 30, int repeats = 5);

// f32 FMA peak of the host in GFLOP/s over every thread of the default pool: register-resident FMA loops
// (AVX-512 where the CPU has it and `avx512`, else AVX2 + FMA: the ceiling of kernels built for AVX2), the
// fastest of `repeats` runs of a few ms. 0 when the CPU has neither.
double MeasureHostFmaPeak(int repeats = 30, bool avx512 = true);

// int8 dot-product peak of the host in GOP/s (2 per multiply-add) over every thread of the default pool:
// register-resident AVX-512 VNNI vpdpbusd loops (64 multiply-adds per instruction), the fastest of
// `repeats` runs of a few ms. 0 when the CPU lacks AVX-512 VNNI. The ceiling of the int8 matmuls of
// packed block weights (backends/cpu/packed.h).
double MeasureHostVnniPeak(int repeats = 30);
// The same for AVX2 without VNNI: register-resident vpmaddubsw loops (32 multiply-adds per instruction,
// into int16 pairs; the kernels widen the pairs to int32 with vpmaddwd, every 1-8 of them, which this
// peak leaves out). 0 without AVX2. The ceiling of the packed matmuls' AVX2 kernels
// (kernels/matmul_packed_avx2.cc).
double MeasureHostAvx2Int8Peak(int repeats = 30);
// The same for AVX-VNNI: register-resident 256-bit vpdpbusd loops. 0 without AVX-VNNI. The ceiling of
// the packed matmuls' avxvnni kernels.
double MeasureHostAvxVnniPeak(int repeats = 30);
// The int8 ceiling of the packed matmuls on `isa` (backends/cpu/packed.h), in GOP/s: AVX-512 VNNI's or
// AVX-VNNI's vpdpbusd, or AVX2's vpmaddubsw; 0 for the generic kernels, which have no packed layout.
double MeasureHostInt8Peak(cpu::Isa isa, int repeats = 30);
// Its name as benchmarks print it ("avx512-vnni", "avx-vnni", "avx2"; empty for the generic kernels).
const char* HostInt8PeakName(cpu::Isa isa);

#if defined(__x86_64__)
// The loops MeasureHostFmaPeak times, for benchmarks that time them their own way: iters iterations of
// register-resident FMAs (16 zmm accumulators: 512 FLOPs per iteration; 12 ymm: 192). The result
// depends on every accumulator. Call only where the CPU has the instructions.
float HostFmaLoopAvx512(int64_t iters);
float HostFmaLoopAvx2(int64_t iters);
inline constexpr double kHostFmaLoopAvx512Flops = 16 * 16 * 2;
inline constexpr double kHostFmaLoopAvx2Flops = 12 * 8 * 2;
// The loop MeasureHostVnniPeak times: 16 zmm accumulators of vpdpbusd, 2048 ops per iteration.
double HostVnniLoopAvx512(int64_t iters);
inline constexpr double kHostVnniLoopAvx512Ops = 16 * 64 * 2;
// The loop MeasureHostAvx2Int8Peak times: 12 ymm accumulators of vpmaddubsw, 768 ops per iteration.
double HostInt8LoopAvx2(int64_t iters);
inline constexpr double kHostInt8LoopAvx2Ops = 12 * 32 * 2;
// The loop MeasureHostAvxVnniPeak times: 12 ymm accumulators of vpdpbusd, 768 ops per iteration. Call
// only where the CPU has AVX-VNNI.
double HostVnniLoopAvx2(int64_t iters);
inline constexpr double kHostVnniLoopAvx2Ops = 12 * 32 * 2;
#endif

// The read loop of the bandwidth probes: sums the 64-bit words of [p, p + bytes) (p 64-byte aligned,
// bytes a multiple of 8) with the widest loads the CPU has; with `prefetch` it also asks for the lines
// 8 KiB ahead, as the packed GEMVs do. The result depends on every word, so the reads stay.
uint64_t HostReadSum(const void* p, size_t bytes, bool prefetch);

// Peak resident memory of this process (VmHWM), in bytes.
int64_t PeakResidentBytes();
// Resets that peak to the current resident size (so a measurement buffer freed before does not count).
void ResetPeakResident();

}  // namespace hymt
