// The packer of packed.h: scalar, run once per weight at load (PrepareWeight splits it over threads).
#include "backends/cpu/packed.h"

#include <algorithm>
#include <cstring>

#include "quant/blocks.h"

namespace hymt::cpu {
namespace {

constexpr size_t kQ8_0PackedBlock = 16 * 34;
constexpr size_t kQ4KPackedBlock = 64 + 192 + 2048;
constexpr size_t kQ6KPackedBlock = 32 + 256 + 2048 + 1024;
static_assert(kQ8_0PackedBlock == kPackRows * sizeof(BlockQ8_0));
static_assert(kQ4KPackedBlock == kPackRows * sizeof(BlockQ4_K));
static_assert(kQ6KPackedBlock == kPackRows * sizeof(BlockQ6_K));

size_t PackedBlockBytes(DType t) {
  switch (t) {
    case DType::kQ8_0:
      return kQ8_0PackedBlock;
    case DType::kQ4_K:
      return kQ4KPackedBlock;
    case DType::kQ6_K:
      return kQ6KPackedBlock;
    default:
      return 0;
  }
}

void StoreF16(uint8_t* dst, int r, uint16_t v) {
  std::memcpy(dst + 2 * r, &v, 2);
}

uint32_t Load32(const void* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
void Store32(uint8_t* p, uint32_t v) {
  std::memcpy(p, &v, 4);
}

// One packed block of 16 rows; row r's stored block is at rows[r] (null: a padding row, all zero).
// The loops move 4 inputs of a row (one 32-bit lane of the packed layout) at a time.
void PackQ8_0(const BlockQ8_0* const* rows, uint8_t* dst) {
  for (int r = 0; r < kPackRows; ++r) {
    const BlockQ8_0* b = rows[r];
    StoreF16(dst, r, b ? b->d : 0);
    for (int s = 0; s < 8; ++s)
      Store32(dst + 32 + 64 * s + 4 * r, (b ? Load32(b->qs + 4 * s) : 0) ^ 0x80808080u);
  }
}

// The codes (0..15) of a q4_K super-block in element order (blocks.h: sub-block j in the low nibbles of
// qs[32 (j / 2) ..] for even j, the high nibbles for odd j).
void Q4KCodes(const BlockQ4_K& b, uint8_t* code) {
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; l += 4) {
      const uint32_t v = Load32(b.qs + 32 * c + l);
      Store32(code + 64 * c + l, v & 0x0f0f0f0f);
      Store32(code + 64 * c + 32 + l, (v >> 4) & 0x0f0f0f0f);
    }
}

// The codes (0..63) of a q6_K super-block in element order (blocks.h: element 128 h + 32 k + l).
void Q6KCodes(const BlockQ6_K& b, uint8_t* code) {
  for (int h = 0; h < 2; ++h)
    for (int k = 0; k < 4; ++k)
      for (int l = 0; l < 32; l += 4) {
        const uint32_t low = (Load32(b.ql + 64 * h + 32 * (k % 2) + l) >> (4 * (k / 2))) & 0x0f0f0f0f;
        const uint32_t high = (Load32(b.qh + 32 * h + l) >> (2 * k)) & 0x03030303;
        Store32(code + 128 * h + 32 * k + l, low | high << 4);
      }
}

void PackQ4K(const BlockQ4_K* const* rows, uint8_t* dst) {
  uint8_t* scales = dst + 64;
  uint8_t* q = scales + 192;
  uint8_t code[kQKK];
  for (int r = 0; r < kPackRows; ++r) {
    const BlockQ4_K* b = rows[r];
    StoreF16(dst, r, b ? b->d : 0);
    StoreF16(dst + 32, r, b ? b->dmin : 0);
    for (int w = 0; w < 3; ++w) Store32(scales + 64 * w + 4 * r, b ? Load32(b->scales + 4 * w) : 0);
    if (b) {
      Q4KCodes(*b, code);
    } else {
      std::memset(code, 0, sizeof code);
    }
    for (int c = 0; c < 32; ++c)
      Store32(q + 64 * c + 4 * r, Load32(code + 8 * c) | Load32(code + 8 * c + 4) << 4);
  }
}

void PackQ6K(const BlockQ6_K* const* rows, uint8_t* dst) {
  // Per pair p of sub-blocks, at dst + 32 + 416 p: the 32 scale bytes, then each sub-block h = 2 p + e's
  // ql (128 bytes) and qh (64 bytes).
  auto sc = [&](int p) { return dst + 32 + 416 * p; };
  auto q = [&](int h) { return dst + 32 + 416 * (h / 2) + 32 + 192 * (h % 2); };
  uint8_t code[kQKK];
  for (int r = 0; r < kPackRows; ++r) {
    const BlockQ6_K* b = rows[r];
    StoreF16(dst, r, b ? b->d : 0);
    for (int j = 0; j < 16; ++j) sc(j / 2)[2 * r + j % 2] = static_cast<uint8_t>(b ? b->scales[j] : 0);
    if (b) {
      Q6KCodes(*b, code);
    } else {
      std::memset(code, 32, sizeof code);  // padding rows: code 32 is the value 0 (their scale is 0 anyway)
    }
    constexpr uint32_t kLow4 = 0x0f0f0f0f, kHigh2 = 0x03030303;
    for (int h = 0; h < 16; ++h) {
      for (int c = 0; c < 2; ++c) {
        const uint8_t* cc = code + 16 * h + 8 * c;
        Store32(q(h) + 64 * c + 4 * r, (Load32(cc) & kLow4) | (Load32(cc + 4) & kLow4) << 4);
      }
      uint32_t bits = 0;
      for (int j = 0; j < 4; ++j) bits |= ((Load32(code + 16 * h + 4 * j) >> 4) & kHigh2) << (2 * j);
      Store32(q(h) + 128 + 4 * r, bits);
    }
  }
}

template <typename Block, typename PackFn>
void PackGroupsAs(const uint8_t* src, size_t row_bytes, int64_t rows, int64_t k, int64_t g_begin,
                  int64_t g_end, int64_t block_size, uint8_t* dst, size_t group_bytes, PackFn pack) {
  const int64_t nb = k / block_size;
  const size_t block_bytes = group_bytes / static_cast<size_t>(nb);
  for (int64_t g = g_begin; g < g_end; ++g) {
    for (int64_t b = 0; b < nb; ++b) {
      const Block* blocks[kPackRows];
      for (int r = 0; r < kPackRows; ++r) {
        const int64_t row = g * kPackRows + r;
        blocks[r] = row < rows
                        ? reinterpret_cast<const Block*>(src + static_cast<size_t>(row) * row_bytes) + b
                        : nullptr;
      }
      pack(blocks, dst + static_cast<size_t>(g) * group_bytes + static_cast<size_t>(b) * block_bytes);
    }
  }
}

}  // namespace

bool HasPackedLayout(DType t) {
  return PackedBlockBytes(t) != 0;
}

size_t PackedGroupBytes(DType t, int64_t k) {
  return PackedBlockBytes(t) * static_cast<size_t>(k / GetDTypeInfo(t).block_size);
}

size_t GroupsPerBlock(size_t group_bytes) {
  return group_bytes >= kPackedBlockBytes ? 1 : kPackedBlockBytes / group_bytes;
}

size_t ExpandedGroupBytes(DType t, int64_t k) {
  const size_t blocks = static_cast<size_t>(k / kQKK);
  if (t == DType::kQ4_K) return blocks * kExpandedQ4KBlockBytes;
  if (t == DType::kQ6_K) return blocks * kExpandedQ6KBlockBytes;
  return 0;
}

// q6_k's pair kernel (two groups at once, where PairQ6KRowGroups) walks blocks of at least two groups.
size_t ExpandScratchBytes(DType t, int64_t k) {
  const size_t expanded = ExpandedGroupBytes(t, k);
  if (expanded == 0) return 0;
  const size_t groups = GroupsPerBlock(PackedGroupBytes(t, k));
  return (t == DType::kQ6_K ? std::max<size_t>(groups, 2) : groups) * expanded + 64;
}

size_t ExpandScratchBound(DType t, int64_t k_max) {
  const size_t per_block = ExpandedGroupBytes(t, kQKK);
  if (per_block == 0) return 0;
  const size_t packed =
      std::max(kPackedBlockBytes, PackedGroupBytes(t, k_max) * (t == DType::kQ6_K ? 2 : 1));
  const size_t block = PackedBlockBytes(t);  // one super-block of a group (16 rows), packed
  return (packed + block - 1) / block * per_block + 64;
}

size_t PackedBytes(DType t, int64_t rows, int64_t k) {
  return PackedGroupBytes(t, k) * static_cast<size_t>((rows + kPackRows - 1) / kPackRows);
}

void PackGroups(DType t, const uint8_t* src, size_t row_bytes, int64_t rows, int64_t k, int64_t g_begin,
                int64_t g_end, uint8_t* dst) {
  const size_t group = PackedGroupBytes(t, k);
  switch (t) {
    case DType::kQ8_0:
      return PackGroupsAs<BlockQ8_0>(src, row_bytes, rows, k, g_begin, g_end, kQK, dst, group, PackQ8_0);
    case DType::kQ4_K:
      return PackGroupsAs<BlockQ4_K>(src, row_bytes, rows, k, g_begin, g_end, kQKK, dst, group, PackQ4K);
    case DType::kQ6_K:
      return PackGroupsAs<BlockQ6_K>(src, row_bytes, rows, k, g_begin, g_end, kQKK, dst, group, PackQ6K);
    default:
      return;
  }
}

}  // namespace hymt::cpu
