// The packer of packed.h: scalar, run once per weight at load (PrepareWeight splits it over threads).
#include "backends/cpu/packed.h"

#include <cstring>

#include "quant/blocks.h"

namespace hymt::cpu {
namespace {

constexpr size_t kQ8_0PackedBlock = 16 * 34;
constexpr size_t kQ4KPackedBlock = 64 + 128 + 128 + 2048;
constexpr size_t kQ6KPackedBlock = 32 + 256 + 2048 + 1024;
static_assert(kQ8_0PackedBlock == kPackRows * sizeof(BlockQ8_0));
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

// One packed block of 16 rows; row r's stored block is at rows[r] (null: a padding row, all zero).
void PackQ8_0(const BlockQ8_0* const* rows, uint8_t* dst) {
  for (int r = 0; r < kPackRows; ++r) {
    const BlockQ8_0* b = rows[r];
    StoreF16(dst, r, b ? b->d : 0);
    for (int i = 0; i < 32; ++i)
      dst[32 + 64 * (i / 4) + 4 * r + i % 4] = static_cast<uint8_t>((b ? b->qs[i] : 0) + 128);
  }
}

void PackQ4K(const BlockQ4_K* const* rows, uint8_t* dst) {
  uint8_t* sc = dst + 64;
  uint8_t* mn = sc + 128;
  uint8_t* q = mn + 128;
  for (int r = 0; r < kPackRows; ++r) {
    const BlockQ4_K* b = rows[r];
    StoreF16(dst, r, b ? b->d : 0);
    StoreF16(dst + 32, r, b ? b->dmin : 0);
    for (int j = 0; j < 8; ++j) {
      int s = 0, m = 0;
      if (b) GetKScaleMin(b->scales, j, &s, &m);
      sc[32 * (j / 2) + 2 * r + j % 2] = static_cast<uint8_t>(s);
      mn[32 * (j / 2) + 2 * r + j % 2] = static_cast<uint8_t>(m);
    }
    for (int c = 0; c < 32; ++c)
      for (int i = 0; i < 4; ++i) {
        const int lo = b ? Q4KCode(*b, 8 * c + i) : 0, hi = b ? Q4KCode(*b, 8 * c + 4 + i) : 0;
        q[64 * c + 4 * r + i] = static_cast<uint8_t>(lo | hi << 4);
      }
  }
}

void PackQ6K(const BlockQ6_K* const* rows, uint8_t* dst) {
  uint8_t* sc = dst + 32;
  uint8_t* ql = sc + 256;
  uint8_t* qh = ql + 2048;
  for (int r = 0; r < kPackRows; ++r) {
    const BlockQ6_K* b = rows[r];
    StoreF16(dst, r, b ? b->d : 0);
    for (int j = 0; j < 16; ++j) sc[32 * (j / 2) + 2 * r + j % 2] = static_cast<uint8_t>(b ? b->scales[j] : 0);
    // Padding rows get code 32 (value 0); their scale is 0 anyway.
    auto code = [&](int e) { return b ? Q6KCode(*b, e) : 32; };
    for (int c = 0; c < 32; ++c)
      for (int i = 0; i < 4; ++i)
        ql[64 * c + 4 * r + i] = static_cast<uint8_t>((code(8 * c + i) & 0xf) | (code(8 * c + 4 + i) & 0xf) << 4);
    for (int h = 0; h < 16; ++h)
      for (int i = 0; i < 4; ++i) {
        int bits = 0;
        for (int j = 0; j < 4; ++j) bits |= (code(16 * h + 4 * j + i) >> 4) << (2 * j);
        qh[64 * h + 4 * r + i] = static_cast<uint8_t>(bits);
      }
  }
}

template <typename Block, typename PackFn>
void PackGroupsAs(const uint8_t* src, size_t row_bytes, int64_t rows, int64_t k, int64_t g_begin, int64_t g_end,
                  int64_t block_size, uint8_t* dst, size_t group_bytes, PackFn pack) {
  const int64_t nb = k / block_size;
  const size_t block_bytes = group_bytes / static_cast<size_t>(nb);
  for (int64_t g = g_begin; g < g_end; ++g) {
    for (int64_t b = 0; b < nb; ++b) {
      const Block* blocks[kPackRows];
      for (int r = 0; r < kPackRows; ++r) {
        const int64_t row = g * kPackRows + r;
        blocks[r] = row < rows ? reinterpret_cast<const Block*>(src + static_cast<size_t>(row) * row_bytes) + b
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
