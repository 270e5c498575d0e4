// The entry points of the per-ISA CPU kernels, as a table of plain function pointers.
//
// Every src/backends/cpu/kernels/*.cc is compiled once per instruction set into namespace
// hymt::cpu::<isa> (generic, avx2, avx512) and fills that ISA's KernelTable (kernels/table.cc);
// dispatch.cc picks a table from cpuid. The launchers (src/backends/cpu/*.cc, compiled once) check
// shapes, split the work over the thread pool and call these on sub-ranges; a kernel never allocates,
// never throws and never calls back into the thread pool.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "quant/blocks.h"

namespace hymt::cpu {

// out[t, n] = scale * sum_k x[t, k] * W[n, k], for t < n_tokens and the rows n a kernel is given.
struct MatMulArgs {
  const float* x = nullptr;  // [n_tokens, k], rows x_stride floats apart
  int64_t x_stride = 0;
  int64_t n_tokens = 0;
  int64_t k = 0;
  const uint8_t* w = nullptr;  // [n, k] in w_dtype, rows w_row_bytes apart
  size_t w_row_bytes = 0;
  DType w_dtype = DType::kF32;
  float scale = 1.0f;
  float* out = nullptr;  // [n_tokens, n], rows out_stride floats apart
  int64_t out_stride = 0;
};

// Up to this many tokens a matmul streams each weight row once and dots it with every token (GEMV,
// memory bound: decode); above it, weight panels are converted to f32 (dequantised for the block
// formats) and a register-tiled GEMM runs (compute bound: prefill, large decode batches). Weights that
// PrepareWeight packed (packed.h) take neither path: matmul_packed serves every token count.
constexpr int kGemvMaxTokens = 4;
// Whether the AVX-512 packed GEMM runs q6_k row groups two at a time (Q6KGroup2, 6-token tiles) rather
// than one (8-token tiles). Pairs halve the activation broadcasts, which held a Zen 5 core back; on Intel
// cores every 512-bit integer op shares the two vpdpbusd ports, and one group's 8-token tiles spend fewer
// of them per product (docs/BENCHMARKS.md). So: pairs except on Intel CPUs; HYMT_CPU_Q6K_PAIRS=0|1 overrides.
bool PairQ6KRowGroups();
// 1 or 0 sets the choice (tests run both), -1 restores the default.
void SetPairQ6KRowGroups(int on);
// Whether the packed GEMMs' later token tiles read a copy of each q4_k / q6_k row group that their first
// tile expanded (nibbles and 6-bit codes as bytes, scales as floats) instead of unpacking the group again per
// tile (matmul_packed.cc; matmul_packed_avx2.cc, per half group), from the token counts where it pays
// (each file's ExpandMinTokens). The results are the same bit for bit. On by default; HYMT_CPU_EXPAND=0 turns
// it off.
bool ExpandPackedGroups();
// 1 or 0 sets the choice (tests run both), -1 restores the default.
void SetExpandPackedGroups(int on);
// Per-thread scratch of the GEMM (a packed panel of the weight and a staging area), in bytes.
constexpr size_t kGemmScratchBytes = size_t{640} << 10;
// Row ranges handed to matmul kernels start at multiples of this (a whole GEMM register tile, whole
// packed row groups, and whole cache lines of every weight type).
constexpr int64_t kMatMulRowAlign = 64;

// Activations of the integer GEMV, one row per token, quantised exactly as quant/'s QuantizeRow does
// (quant/quant_dot.h: d = max|x| / 127, codes rounded to nearest even within [-127, 127]):
//  simple formats (q4_0, q4_1, q5_0, q5_1, q8_0): n/32 BlockQ8_0 (f16 scale), padded to a multiple of
//    4 bytes (Q8ActFloatsOffset; a block is 34 bytes), followed by three arrays of n/32 for the kernels:
//    d (f32: the f16 scale widened), s = d * sum(qs) (f32; folds the offset of q4_0/q5_0 and the min of
//    q4_1/q5_1 into one multiply per block) and c = -128 * sum(qs) (int32; the packed q8_0 kernel
//    stores its weights plus 128, packed.h);
//  K formats (q4_k, q5_k, q6_k): n/256 BlockQ8_K (f32 scale, bsums), followed by n/256 x 8 int16: the
//    sums of 32 consecutive qs (the packed q4_k kernel's mins), and n/256 x 16 int32: -32 x bsums (the
//    packed q6_k kernel starts each sub-block's sum there, so that the codes' offset 32 is folded in).
// Both row sizes are multiples of 4 bytes, so that rows packed one after another keep their arrays aligned.
struct Q8ActRow {
  const BlockQ8_0* blocks;
  const float* d;
  const float* s;
  const int32_t* c;
};
constexpr size_t Q8ActFloatsOffset(int64_t k) {
  return (static_cast<size_t>(k / 32) * sizeof(BlockQ8_0) + alignof(float) - 1) / alignof(float) *
         alignof(float);
}
inline Q8ActRow ViewQ8ActRow(const void* row, int64_t k) {
  const auto* d = reinterpret_cast<const float*>(static_cast<const uint8_t*>(row) + Q8ActFloatsOffset(k));
  return {static_cast<const BlockQ8_0*>(row), d, d + k / 32,
          reinterpret_cast<const int32_t*>(d + 2 * (k / 32))};
}
struct Q8KActRow {
  const BlockQ8_K* blocks;
  const int16_t* bsum32;  // [n/256][8]
  const int32_t* off16;   // [n/256][16]
};
inline Q8KActRow ViewQ8KActRow(const void* row, int64_t k) {
  const auto* blocks = static_cast<const BlockQ8_K*>(row);
  const auto* bsum32 = reinterpret_cast<const int16_t*>(blocks + k / 256);
  return {blocks, bsum32, reinterpret_cast<const int32_t*>(bsum32 + 8 * (k / 256))};
}

// One (row, kv head) of attention: the `group` query heads that share kv head `kv_head` attend to
// positions [0, n_positions) of one sequence through its page table.
struct AttentionTask {
  const float* q = nullptr;  // [group, head_dim]
  float* out = nullptr;      // [group, head_dim]
  int group = 1;
  int head_dim = 0;
  float scale = 1.0f;
  int32_t n_positions = 0;
  const int32_t* pages = nullptr;  // the sequence's page table
  int page_size = 0;
  const uint8_t* k_pool = nullptr;  // [n_pages][n_kv_heads][page_size][head_dim] in kv_dtype
  const uint8_t* v_pool = nullptr;
  size_t page_bytes = 0;      // one page of one pool
  size_t head_bytes = 0;      // one kv head within a page: page_size positions
  size_t position_bytes = 0;  // one position of one head: head_dim values
  int kv_head = 0;
  DType kv_dtype = DType::kF32;
};
// Floats of scratch one attention task needs: per query head one page of scores, the accumulators and
// the running max and sum.
inline size_t AttentionScratchFloats(int group, int head_dim, int page_size) {
  const size_t g = static_cast<size_t>(group), hd = static_cast<size_t>(head_dim),
               ps = static_cast<size_t>(page_size);
  return g * (ps + hd + 2);
}

struct KernelTable {
  const char* isa = nullptr;

  // ---- matmul_float.cc ----
  // GEMV for weights in f32, f16, bf16 or f8_e4m3 and up to kGemvMaxTokens tokens: rows [n_begin, n_end).
  void (*gemv_float)(const MatMulArgs& a, int64_t n_begin, int64_t n_end) = nullptr;
  // GEMM for every weight type (plain floats and the block formats), any number of tokens; `scratch`
  // holds kGemmScratchBytes, 64-byte aligned, for this thread.
  void (*gemm)(const MatMulArgs& a, int64_t n_begin, int64_t n_end, void* scratch) = nullptr;

  // ---- matmul_quant.cc: GEMV for the ggml block formats with int8 activations ----
  // Bytes of one quantised activation row of k inputs for weights of type w (see Q8ActRow).
  size_t (*quant_act_row_bytes)(DType w, int64_t k) = nullptr;
  void (*quantize_act_row)(DType w, const float* x, int64_t k, void* dst) = nullptr;
  // As gemv_float, with x already quantised (rows xq_row_bytes apart; a.x is unused). Any number of
  // tokens works (in groups); the launcher uses it up to kGemvMaxTokens.
  void (*gemv_quant)(const MatMulArgs& a, const void* xq, size_t xq_row_bytes, int64_t n_begin,
                     int64_t n_end) = nullptr;
  // The matmul of a packed weight (packed.h; a.w is the packed weight, a.w_dtype q8_0, q4_k or q6_k)
  // with x quantised as for gemv_quant, for any number of tokens (decode and prefill alike): rows
  // [n_begin, n_end), n_begin a multiple of kPackRows. Null where the ISA has no such kernel (then
  // weights are not packed).
  void (*matmul_packed)(const MatMulArgs& a, const void* xq, size_t xq_row_bytes, int64_t n_begin,
                        int64_t n_end) = nullptr;

  // ---- convert.cc: rows between f32 and stored types ----
  // dst = src * scale for t in f32, f16, bf16, f8_e4m3.
  void (*convert_to_f32)(DType t, const void* src, float* dst, int64_t n, float scale) = nullptr;
  // Encodes n f32 values as t in f32, f16, bf16 or q8_0 (the KV cache types), rounding to nearest
  // even; q8_0 follows the ggml reference (d = max|x| / 127 stored as f16, q = round(x / d)).
  void (*convert_from_f32)(DType t, const float* src, void* dst, int64_t n) = nullptr;

  // ---- norm.cc ----
  // out = float(x / sqrt(mean(x^2) + eps)) * w over one row of n values (x and out may alias).
  void (*rms_norm_row)(const float* x, int64_t n, const float* w, float eps, float* out) = nullptr;
  // One row of n_heads heads in place: rotate-half RoPE with the row's cos/sin ([head_dim / 2] each),
  // then, when norm_w is non-null, RMSNorm of each head with norm_w [head_dim].
  void (*rope_norm_row)(float* x, int n_heads, int head_dim, const float* cos, const float* sin,
                        const float* norm_w, float eps) = nullptr;

  // ---- elementwise.cc ----
  void (*swiglu)(const float* gate, const float* up, float* out, int64_t n) = nullptr;  // out may alias gate
  void (*add)(float* x, const float* y, int64_t n) = nullptr;

  // ---- attention.cc ----
  // `scratch` holds AttentionScratchFloats(group, head_dim, page_size) floats.
  void (*attention)(const AttentionTask& t, float* scratch) = nullptr;
};

}  // namespace hymt::cpu
