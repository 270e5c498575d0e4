// What the packed matmuls (matmul_packed.cc for AVX-512, matmul_packed_avx2.cc for the avx2 and avxvnni
// builds) share: the prefetch of the blocks a group's first tile reads from memory, the block loop, the
// per-thread scratch of the expanded row groups, and the vpshufb tables that spread a q4_k row's scale bytes
// over its 32-bit lane. Included inside each build's own namespace.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/simd.h"
#include "backends/cpu/packed.h"

namespace hymt::cpu::HYMT_ISA {
namespace {

// When kStream (the block at p, of `bytes`, is about to be read from memory): asks for the lines that
// start inside the same span kPrefetchAhead bytes further on, so that consecutive blocks ask for each
// line once.
template <bool kStream>
inline void PrefetchAhead(const uint8_t* p, size_t bytes) {
  if constexpr (kStream) {
    const uintptr_t begin = reinterpret_cast<uintptr_t>(p) + kPrefetchAhead;
    for (uintptr_t line = (begin + 63) & ~uintptr_t{63}; line < begin + bytes; line += 64)
      PrefetchLine(reinterpret_cast<const void*>(line));
  }
}

// Groups a block of the prefill loop covers (one with a single token tile). The loop runs every token
// tile over a block of groups before the next block, instead of every tile over one group: a block's
// weights (kPackedBlockBytes at most, packed.h; in L2) are read from memory once, and each tile's activation
// rows, which at 512 tokens of a 14336-wide row are 8 MiB (far beyond L2), once per block instead of once per
// group. Results are unchanged: each (group, tile) product is computed as before.
inline int64_t PackedBlockGroups(const MatMulArgs& a, size_t group_bytes, int token_tile) {
  if (a.n_tokens <= token_tile) return 1;
  return static_cast<int64_t>(GroupsPerBlock(group_bytes));
}

// This thread's scratch for the expanded copies of a block of row groups (`bytes` from ExpandScratchBytes,
// which includes the alignment), 64-byte aligned, kept for the thread's life: ~0.55 MiB at the 7B's widths.
// Its own type, not a std::unique_ptr: the kernel files are built with their ISA's flags and must define no
// symbol outside their namespace (a shared template instance could be picked for code that runs on any CPU).
struct ExpandBuffer {
  uint8_t* data = nullptr;
  size_t size = 0;
  ~ExpandBuffer() { delete[] data; }
};
inline uint8_t* ExpandScratch(size_t bytes) {
  thread_local ExpandBuffer buf;
  if (buf.size < bytes) {
    delete[] buf.data;
    buf.size = bytes;
    buf.data = new uint8_t[buf.size];
  }
  return reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(buf.data) + 63) & ~uintptr_t{63});
}

// vpshufb indices (within each 128-bit lane) that zero-extend byte j of every 32-bit lane (byte[j]), and
// that widen bytes 2 e and 2 e + 1 of every 32-bit lane to an int16 pair (pair[e]). A row is a 512-bit
// register's worth; a 256-bit kernel loads its first half (the pattern repeats per 128-bit lane).
struct ScaleShuffles {
  alignas(64) uint8_t byte[4][64];
  alignas(64) uint8_t pair[2][64];
  constexpr ScaleShuffles() : byte{}, pair{} {
    for (int i = 0; i < 64; ++i) {
      const int lane = i / 4 % 4, k = i % 4;
      for (int j = 0; j < 4; ++j) byte[j][i] = k == 0 ? static_cast<uint8_t>(4 * lane + j) : 0x80;
      for (int e = 0; e < 2; ++e)
        pair[e][i] = k % 2 == 0 ? static_cast<uint8_t>(4 * lane + 2 * e + k / 2) : 0x80;
    }
  }
};
constexpr ScaleShuffles kScaleShuffles;

}  // namespace
}  // namespace hymt::cpu::HYMT_ISA
