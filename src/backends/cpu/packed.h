// Row-interleaved ("packed") layouts of the block formats q8_0, q4_k and q6_k, written once by
// CpuOps::PrepareWeight and read by the AVX-512 VNNI matmul (kernels/matmul_packed.cc) and, as two
// halves of 8 rows, by the AVX2 one (kernels/matmul_packed_avx2.cc).
//
// Why: in the stored (ggml) layout a row's blocks are decoded one at a time, and a 32-input block of one
// row fills a quarter of a 512-bit register; the per-block work (scale conversion, horizontal sums) then
// costs more than the bytes take to arrive from memory. Packed, 16 rows (kPackRows) share each
// instruction: one 64-byte register holds 4 consecutive inputs of each of 16 rows (one 32-bit lane per
// row), so one vpdpbusd with 4 broadcast activation bytes advances all 16 rows' dot products, and the
// per-block scales arrive as one vector per 16 rows.
//
// A packed weight is its row groups one after another (group g at g * PackedGroupBytes(t, k)); the last
// group is padded with zero rows. Within a group, the packed blocks of the format follow in input order:
//   q8_0, 32 inputs, 544 bytes (= 16 x 34):
//     d[16] f16 | q[8][16][4] u8: q[s][r][i] = code of row r, input 4 s + i, plus 128 (unsigned, for
//     vpdpbusd; the kernel subtracts 128 * sum(x) per block).
//   q4_k, 256 inputs, 2304 bytes (= 16 x 144):
//     d[16] f16 | dmin[16] f16 | scales[3][16][4] u8 | q[32][16][4] u8:
//     scales[w][r] = bytes 4 w .. 4 w + 3 of row r's 12 packed 6-bit scales and mins (as stored);
//     q[c][r][i] = code(r, 8 c + i) | code(r, 8 c + 4 + i) << 4.
//   q6_k, 256 inputs, 3360 bytes (= 16 x 210):
//     d[16] f16 | then per pair p < 8 of sub-blocks (16 inputs each), 416 bytes: sc[16][2] i8, and for
//     sub-blocks h = 2 p, 2 p + 1 in turn ql[2][16][4] u8, qh[16][4] u8:
//     sc[r][e] = scale of sub-block 2 p + e of row r;
//     ql[c][r][i] of sub-block h = low4(code(r, 16 h + 8 c + i)) | low4(code(r, 16 h + 8 c + 4 + i)) << 4;
//     qh[r][i] of sub-block h = sum over j < 4 of high2(code(r, 16 h + 4 j + i)) << 2 j.
//     Everything is in the order the kernel reads it, so a block is one forward stream (with the scales,
//     low bits and high bits in three regions, a decode GEMV from memory ran at a third of the bandwidth
//     on a Zen 4 host).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace hymt::cpu {

constexpr int64_t kPackRows = 16;

// Whether t has a packed layout.
bool HasPackedLayout(DType t);
// Bytes of one packed group of kPackRows rows of k inputs (k a whole number of t's blocks).
size_t PackedGroupBytes(DType t, int64_t k);
// Bytes of a packed [rows, k] weight (rows rounded up to whole groups).
size_t PackedBytes(DType t, int64_t rows, int64_t k);
// The packed GEMM's block of row groups (kernels/packed_common.h, PackedBlockGroups): as many groups as fit
// in this many bytes, or one group when a group is larger.
constexpr size_t kPackedBlockBytes = size_t{256} << 10;
size_t GroupsPerBlock(size_t group_bytes);
// The packed GEMMs' expanded copy of a q4_k / q6_k row group (kernels/matmul_packed.cc; the AVX2 kernels'
// two half groups take the same bytes), per 256 inputs.
constexpr size_t kExpandedQ4KBlockBytes = 4928;
constexpr size_t kExpandedQ6KBlockBytes = 5120;
// Bytes of one group's expanded copy at k inputs (0: t has none).
size_t ExpandedGroupBytes(DType t, int64_t k);
// Bytes of one thread's scratch for the expanded copies of a block of groups at k inputs, alignment
// included (0: t has none). MatMulPacked allocates exactly this.
size_t ExpandScratchBytes(DType t, int64_t k);
// The most ExpandScratchBytes(t, k) can be for any k up to k_max (a block of groups holds at most
// max(kPackedBlockBytes, one group; q6_k: two groups) packed bytes; smaller k can round to more of them
// than k_max does).
size_t ExpandScratchBound(DType t, int64_t k_max);
// Writes groups [g_begin, g_end) of the weight `src` ([rows, k] in t's stored layout, rows row_bytes
// apart) into `dst` (the whole packed weight).
void PackGroups(DType t, const uint8_t* src, size_t row_bytes, int64_t rows, int64_t k, int64_t g_begin,
                int64_t g_end, uint8_t* dst);

}  // namespace hymt::cpu
