// Internal interface of the CUDA backend: the plain structs the kernels take and the launchers each .cu
// file exports to cuda_ops.cc. No CUDA C++ here (only the runtime API types), so host-only .cc files
// include it too.
//
// Device layouts of prepared weights (PrepareWeight writes them, every kernel reads them):
//   f32, f16, bf16, f8_e4m3  as stored: row-major, row r at data + r * DTypeBytes(dtype, cols).
//   q4_k   split into two arrays:
//          qs  u8   [rows][cols / 2]      the quant bytes, in "wide units" (below)
//          hdr      [rows][cols / 256][16] at data + rows * cols / 2: d, dmin (f16), the 12 scale bytes
//          Wide unit U of a row (4 per super-block): the 32 bytes whose byte 32 j + i (j = U % 4, i < 32) holds
//          element 32 j + i of super-block U / 4 in its low nibble and element 128 + 32 j + i in its high one,
//          i.e. sub-blocks j and 4 + j, which share one scale/min pair of the header. A thread of the GEMV
//          takes one wide unit (the header decoded once for 64 weights) as two 16-byte halves, stored so that
//          32 threads on consecutive units read 512 contiguous bytes per load: in spans of 8 super-blocks
//          (1,024 bytes; the last span of a row has m <= 8), half h of the span's unit t sits at
//          64 m h + 16 t (Q4KHalfOffset).
//   q8_0   split into two arrays (34-byte blocks would break 16-byte loads):
//          qs  int8 [rows][cols]          at data
//          d   f16  [rows][cols / 32]     at data + rows * cols
//   q6_k   split into four arrays (210-byte blocks), the quant bits reordered inside each super-block
//          into 8 pieces p of 32 elements (16p + i and 128 + 16p + i, i < 16):
//          ql  u8   [rows][cols / 2]      at data: byte e = low 4 bits of element e | of 128 + e << 4
//          qh  u8   [rows][cols / 4]      at data + rows * cols / 2: byte 8p + 4h + c, bits 2w = top 2
//                                         bits of element 128h + 16p + 4w + c
//          sc  int8 [rows][cols / 16]     at data + rows * cols * 3 / 4
//          d   f16  [rows][cols / 256]    at data + rows * cols * 13 / 16
// Sizes are unchanged by the split, so a prepared weight takes Weight::bytes() of device memory.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <span>
#include <type_traits>

#include "core/dtype.h"
#include "core/status.h"

namespace hymt::cuda {

// Byte offset, within a q4_k row of nsb super-blocks (layout above), of half h (0 or 1: quant bytes
// 32 (U % 4) + 16 h .. + 16 of super-block U / 4) of wide unit U. Host and device (constexpr); the int8
// GEMV's loop takes it in 32-bit unsigned arithmetic (I = uint32_t).
template <typename I = int64_t>
constexpr I Q4KHalfOffset(std::type_identity_t<I> U, int h, std::type_identity_t<I> nsb) {
  const I span = U / 32, t = U % 32;
  const I m = nsb - 8 * span < 8 ? nsb - 8 * span : 8;
  return span * 1024 + 64 * m * static_cast<I>(h) + 16 * t;
}

// Throws Error(kInternal), or kResourceExhausted for out-of-memory, naming the call, file and line.
void CheckCuda(cudaError_t err, const char* what, const char* file, int line);

}  // namespace hymt::cuda

#define HYMT_CUDA_CHECK(expr) ::hymt::cuda::CheckCuda((expr), #expr, __FILE__, __LINE__)
// After every kernel launch: a bad launch configuration shows up here, not at the next sync.
#define HYMT_CUDA_CHECK_LAUNCH() \
  ::hymt::cuda::CheckCuda(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)
// Argument checks of the CUDA backend throw (the runtime reports them) instead of aborting.
#define HYMT_CUDA_EXPECT(cond, ...)                                                        \
  do {                                                                                     \
    if (!(cond))                                                                           \
      ::hymt::Fail(::hymt::ErrorCode::kInvalidArgument, "cuda: ", __FILE__, ":", __LINE__, \
                   ": " #cond __VA_OPT__(, ": ", ) __VA_ARGS__);                           \
  } while (0)

namespace hymt::cuda {

// A prepared weight on the device (layouts above).
struct WeightView {
  DType dtype = DType::kBF16;
  int64_t rows = 0;
  int64_t cols = 0;
  const void* data = nullptr;
  float scale = 1.0f;
};

// A 2-D activation on the device: bf16 unless a launcher says otherwise.
struct MatView {
  void* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t stride = 0;  // elements
};

// One sequence of the step as the kernels see it (a copy of StepBatch::Seq).
struct DevSeq {
  int32_t first_row;
  int32_t n_rows;
  int32_t n_past;
  int32_t first_page;
  int32_t n_pages;
};

// The step's batch in device memory (uploaded by BeginStep). Kernels read per-step values from here,
// never from launch arguments, so that a captured graph replays correctly with new positions.
struct BatchView {
  const DevSeq* seqs = nullptr;        // [n_seqs]
  const int32_t* positions = nullptr;  // [n_rows]
  const int32_t* row_seq = nullptr;    // [n_rows]
  const int32_t* pages = nullptr;      // concatenated page tables
};

struct KvView {
  void* k = nullptr;
  void* v = nullptr;
  DType dtype = DType::kBF16;  // bf16, f16 or f32
  int n_kv_heads = 0;
  int head_dim = 0;
  int page_size = 0;
};

// A tile of query rows of one sequence for the prefill attention kernel.
struct PrefillTile {
  int32_t seq;
  int32_t first_row;  // activation row of the tile's first query
  int32_t n_rows;     // <= the kernel's tile height
};

// ---- embed.cu ----
// out[i, :] = dequant(table[ids[i], :]) as bf16. ids is a device array of out.rows entries.
void LaunchEmbed(const WeightView& table, const int32_t* ids, MatView out, bool simple, cudaStream_t stream);
// out[i, :] = dequant(w[row0 + i, :]) as bf16 for i < n (the GEMM path's slab); out is [n, w.cols].
void LaunchDequantRows(const WeightView& w, int64_t row0, int64_t n, uint16_t* out, cudaStream_t stream);

// ---- norm.cu ----
void LaunchRmsNorm(MatView x, const WeightView& w, float eps, MatView out, cudaStream_t stream);
void LaunchRopeNorm(MatView x, int n_heads, int head_dim, const WeightView& inv_freq, const WeightView* norm,
                    float eps, const int32_t* positions, cudaStream_t stream);
// RopeNorm of q (n_heads) and k (kv.n_kv_heads), then k and v into the cache (KvWrite), in one launch.
void LaunchRopeNormKv(MatView q, MatView k, MatView v, int n_heads, const WeightView& inv_freq,
                      const WeightView* q_norm, const WeightView* k_norm, float eps, const KvView& kv,
                      BatchView batch, cudaStream_t stream);

// ---- elementwise.cu ----
void LaunchSwiGlu(MatView gate, MatView up, MatView out, cudaStream_t stream);
void LaunchAdd(MatView x, MatView y, cudaStream_t stream);
// Copies whole rows of elem_bytes-sized elements: out[i] = x[rows[i]] (rows: device array).
void LaunchGatherRows(MatView x, int elem_bytes, const int32_t* rows, MatView out, cudaStream_t stream);
// Fills n 16-bit values at p (tests and the bench poison buffers with it).
void LaunchFill16(void* p, int64_t n, uint16_t value, cudaStream_t stream);
// A replayed step's staged words (cuda_ops.cc, Launch): words [0, batch.words) of batch.src into batch.dst,
// then those of ops, except words [feed_first, feed_first + feed_words) of ops, which come from `feed` (the
// greedy ids of the step before, on the device). The sources are pinned host memory, read over the bus. One
// kernel between two decode graphs instead of two host-to-device copies and a device-to-device one.
struct StageWords {
  const int32_t* src = nullptr;
  int32_t* dst = nullptr;
  int64_t words = 0;
};
void LaunchStageWords(StageWords batch, StageWords ops, const int32_t* feed, int64_t feed_first,
                      int64_t feed_words, cudaStream_t stream);

// ---- kv.cu ----
void LaunchKvWrite(MatView k, MatView v, const KvView& kv, BatchView batch, cudaStream_t stream);

// ---- gemv.cu ----
constexpr int kGemvMaxRows = 8;
constexpr int kGemvMaxParts = 3;
// What a GEMV launch does with each product (see gemv.cu): store it; add it (rounded to bf16) to out,
// the residual add; or, for a gate and an up weight, store silu(gate) * up (each rounded to bf16 first).
enum class GemvEpilogue : uint8_t { kStore, kAdd, kSwiGlu };
// One weight of a GEMV launch and where its product goes.
struct GemvPart {
  WeightView w;
  MatView out;
};
// True when the fast GEMV kernel takes this weight type and these shapes/alignments.
bool GemvFastSupported(const WeightView& w, MatView x);
// True for the weight types with an int8-activation GEMV (Q4_K, Q6_K, Q8_0).
bool GemvInt8Supported(DType t);
// Blocks per SM of the int8-activation GEMV's grid (each block loops over row blocks); 0: one block per row
// block; -1 (the start): HYMT_GEMV_BLOCKS_PER_SM, or 4. For tests and tuning.
void SetGemvBlocksPerSm(int n);
// The backend's tuning switches, read from the environment: the integer value of `name` (fallback when
// unset), and whether it is set to exactly `value`.
int EnvInt(const char* name, int fallback);
bool EnvEquals(const char* name, const char* value);
// Row width from which the int8 GEMVs with rows in shared memory take their int8 rows from a separate
// quantising launch instead of every block quantising them itself; -1 (the start): HYMT_GEMV_PREQUANT_K,
// or 8192 (a negative HYMT_GEMV_PREQUANT_K: never). For tests and tuning.
void SetGemvPrequantMinK(int64_t k);
// Whether one-token-row Q4_K, Q6_K and Q8_0 GEMVs stream their weights through shared memory with bulk
// copies (sm_90+; gemv.cu, GemvBulkKernel, slower than the default register kernel where measured): 1 on,
// 0 off, -1 (the start) off unless HYMT_GEMV_BULK=1. For tests and tuning.
void SetGemvBulk(int on);
// Whether one-token-row int8 GEMVs take the bulk-copy kernel now (SetGemvBulk, HYMT_GEMV_BULK, sm_90+).
bool GemvBulkEnabled();
// out[t, n] = sum_k x[t, k] * W[n, k] * w.scale for t < x.rows <= kGemvMaxRows, reading W once.
// out is bf16, or f32 when out_f32. With act_scratch (at least GemvActScratchBytes), Q4_K, Q6_K and Q8_0
// weights take the int8-activation kernel (x rounded to int8 per 16 values; dp4a dot products).
void LaunchGemv(const WeightView& w, MatView x, MatView out, bool out_f32, void* act_scratch,
                size_t act_scratch_bytes, cudaStream_t stream);
// The same for up to kGemvMaxParts weights of one type and width over the same x, in one launch, with an
// epilogue: kAdd adds into each part's out (bf16); kSwiGlu takes one part (the gate) and `up` (same shape).
// With `norm`, x is first normalised as RmsNorm(x, norm->w, norm->eps) would (identical bits), by every
// block into shared memory: only where GemvNormFusable says so. With norm->sums as well (one token row,
// where GemvSumsFusable says so), the row's sum of squares comes from the sum_parts parts that the kAdd
// launch that stored x wrote (`sums_out`, below), summed in a fixed order: RmsNorm's bits but for that order.
// `sums_out` (kAdd, one token row, where GemvSumsWritable says so; kGemvSumsFloats floats): each block
// writes the sum of squares of the values it stored, for the next launch's norm->sums; the launch returns
// how many parts it wrote (0 without sums_out).
struct GemvNorm {
  WeightView w;
  float eps;
  const float* sums = nullptr;
  int sum_parts = 0;
};
constexpr int kGemvSumsFloats = 8192;
int64_t LaunchGemvParts(std::span<const GemvPart> parts, MatView x, bool out_f32, GemvEpilogue epi,
                        const WeightView* up, void* act_scratch, size_t act_scratch_bytes,
                        cudaStream_t stream, const GemvNorm* norm = nullptr, float* sums_out = nullptr);
// Whether an RMSNorm before a GEMV over `rows` rows of `cols` of type t can be fused by the sums of squares
// another launch wrote (GemvNorm::sums), and whether a kAdd launch of weights of type t, `n` rows, over
// `rows` rows can write them (sums_out). Both: one token row on the int8 path whose blocks quantise their
// own rows (no bulk copies), and the switch on (SetGemvNormSums; HYMT_NORM_SUMS=1). Off by default: on an
// H100 the q4_k_m batch-1 graph took 2.389 ms with its first form (the parts summed one load at a time)
// against 2.281 without; the current form is not measured (docs/BENCHMARKS.md, "The
// greedy argmax split over blocks, and the RMSNorm from sums of squares"). HYMT_NORM_SUMS=2, a measurement
// switch: the sums are written but the RMSNorm still runs.
bool GemvSumsFusable(DType t, int64_t rows, int64_t cols, size_t act_scratch_bytes);
bool GemvSumsWritable(DType t, int64_t rows, int64_t n, int64_t cols, size_t act_scratch_bytes);
// 1 on, 0 off, -1 (the start) the environment's choice (HYMT_NORM_SUMS=1 or 2 on).
void SetGemvNormSums(int on);
// True when LaunchGemvParts can fuse the RMSNorm for this weight type, rows (one pass) and width: fusion is
// on and the normalised rows fit in shared memory (46 KiB; int8 activations, or bf16 for the other types).
// Fusion is off by default: on an H200 at the 7B shape a separate (vectorised) RmsNorm launch is faster
// than every block normalising the row again (batch-1 decode bf16 207 vs 227 tok/s, q4_k_m 349 vs 367,
// q8_0 290 vs 300; docs/BENCHMARKS.md). HYMT_FUSE_NORM=1 or SetGemvFuseNorm(1) turns it on, 0 off, -1
// back to the environment's choice.
bool GemvNormFusable(DType t, int64_t rows, int64_t cols, size_t act_scratch_bytes);
void SetGemvFuseNorm(int on);
size_t GemvActScratchBytes(int64_t rows, int64_t cols);
// A group of weights of two types over one x (a _K_M file's q4_k q and k beside a q6_k v): 0 one launch per
// weight, 1 one LaunchGemvParts per type, 2 (the default) one launch for both types where
// LaunchGemvTwoTypes takes them, else as 1. SetGemvMixedGroups(-1): HYMT_GEMV_MIXED_GROUPS, or 2.
int GemvMixedGroups();
void SetGemvMixedGroups(int mode);
// Under mode 2: a's and b's products (kStore, bf16 outputs) in one launch, bit for bit the per-type
// launches; false, with nothing launched, where it does not apply (one token row of q4_k and q6_k parts of
// one width on the path whose blocks quantise their own activations; otherwise the caller launches per
// type).
bool LaunchGemvTwoTypes(std::span<const GemvPart> a, std::span<const GemvPart> b, MatView x,
                        void* act_scratch, size_t act_scratch_bytes, cudaStream_t stream,
                        const GemvNorm* norm = nullptr);
// How many launches LaunchGemvTwoTypes has made in this process (tests check that it ran).
int64_t GemvTwoTypeLaunches();
// The simple reference kernel (any row count, any alignment): one block per output element.
void LaunchGemvSimple(const WeightView& w, MatView x, MatView out, bool out_f32, cudaStream_t stream);

// ---- attention.cu ----
// Decode attention: a row's context is split into one part per split_min positions of its length rounded
// up to a power of two (at least kAttnSplitMinPositions), within the grid's splits.
constexpr int kAttnSplitMinPositions = 16;
__host__ __device__ inline int AttnRowSplits(int ctx, int split_min, int grid_splits) {
  int bucket = kAttnSplitMinPositions;
  while (bucket < ctx) bucket *= 2;
  const int s = bucket / split_min;
  return s < 1 ? 1 : (s < grid_splits ? s : grid_splits);
}

struct AttentionArgs {
  MatView q;    // [rows, n_heads * head_dim]
  MatView out;  // same shape
  KvView kv;
  BatchView batch;
  int n_heads = 0;
  float scale = 0;
  // Decode path: rows handled one by one with the context split across blocks (flash decoding).
  const int32_t* decode_rows = nullptr;  // device [n_decode]
  int n_decode = 0;
  // The grid's splits per (row, kv head). A row takes the first AttnRowSplits(ctx, split_min, n_splits) of
  // them, worked out on the device from its own context, so that the grid (and a CUDA graph holding it)
  // stays the same while contexts grow; the others return at once.
  int n_splits = 1;
  int split_min = kAttnSplitMinPositions;
  float* partial_o = nullptr;   // [n_decode][n_heads][n_splits][head_dim]
  float* partial_ml = nullptr;  // [n_decode][n_heads][n_splits][2]
  // Prefill path: tiles of query rows sharing each K/V tile.
  const PrefillTile* tiles = nullptr;  // device [n_tiles]
  int n_tiles = 0;
  bool prefill_tensor_cores = false;  // the tiles on tensor cores (only where PrefillTensorCoresSupported)
  // Decode steps whose every sequence has one row (no prefill tiles): the decode kernel applies RoPE and
  // the q/k norms itself (RopeNormKvKernel's arithmetic) and stores the step's k and v into the cache,
  // instead of a RopeNormKv launch before it. q holds the projections before RoPE; q and k are not
  // written.
  struct Rope {
    bool on = false;
    MatView k, v;  // the step's k and v projections [rows, n_kv_heads * head_dim]
    WeightView inv_freq, q_norm, k_norm;
    bool has_q_norm = false, has_k_norm = false;
    float eps = 0;
  } rope;
  bool pdl_early = false;  // the decode kernels trigger their dependents at their start (PdlTriggerIf)
  // The n_splits blocks of each (kv head, row) run as one thread-block cluster and merge the splits
  // themselves (no combine launch; AttnClusterSplits says when).
  bool cluster = false;
};
// Decode attention's splits merged inside clusters: the cluster size (the grid's splits) for a device of
// compute capability cc_major.x where the combine launch would run (want_splits > 1) and the step's longest
// decode context is longest_ctx positions, or 0: off below sm_90, in the CPU emulator, and where
// HYMT_ATTN_CLUSTER (or SetAttnCluster, tests; -1 returns to the variable) is 0. HYMT_ATTN_CLUSTER=16 or 8
// takes that size; the default, kAttnClusterByContext, takes 8 while the longest context is at most
// HYMT_ATTN_CLUSTER_CTX positions (kAttnClusterSmallCtx; the extra blocks of 16 have little or nothing to
// do there) and 16 beyond. 8 where the device cannot run clusters of 16 (cudaOccupancyMaxActiveClusters),
// 0 where it cannot run 8.
constexpr int kAttnClusterByContext = 1;
constexpr int kAttnClusterSmallCtx = 256;
int AttnClusterSplits(int want_splits, int cc_major, int longest_ctx);
void SetAttnCluster(int size);
// How many decode attention launches have run in clusters in this process (tests check that they ran).
int64_t AttnClusterLaunches();
// True when the fast decode and prefill kernels take this head_dim, group and KV type.
bool AttentionFastSupported(const KvView& kv, int n_heads);
// True when the tensor-core prefill kernel takes this cache and group on a device of compute capability
// cc_major.x: sm_80+ (bf16 mma), a bf16 cache, and AttentionFastSupported; false in the CPU emulator.
bool PrefillTensorCoresSupported(const KvView& kv, int n_heads, int cc_major);
// Rows of one prefill tile for a GQA group size (the kernel handles 64 (row, head) pairs per block).
int PrefillTileRows(int group);
void LaunchAttentionFast(const AttentionArgs& args, cudaStream_t stream);
// The simple kernel: one warp per (row, head), every row of the batch (rows = q.rows).
void LaunchAttentionSimple(const AttentionArgs& args, cudaStream_t stream);

// Sampling on the device (sample.cu): per row, the k best scores after the repetition penalty and the
// temperature, best first (ties: lowest id first), for the host's top-p and draw (SampleFromTopK).
constexpr int kMaxTopK = 64;
struct TopKRowSpec {
  float inv_temperature;  // 1 / temperature as the host computes it (InverseTemperature)
  float penalty;          // the repetition penalty (1: none)
  int32_t k;              // 1..kMaxTopK
  int32_t history_begin;  // the row's history tokens: sorted, distinct, < n_valid, at history[begin..)
  int32_t history_count;
};
// out_scores / out_ids: [rows][kMaxTopK]; flags[r]: 0 done, 1 non-finite logits, 2 too many ties (the host
// samples the row itself).
void LaunchTopKRows(const void* logits, bool f32, int64_t rows, int64_t row_stride, int32_t n_valid,
                    const TopKRowSpec* specs, const int32_t* history, float* out_scores, int32_t* out_ids,
                    int32_t* flags, cudaStream_t stream);

// Row-wise argmax over logits[rows, n_valid] (bf16, or f32 when `f32`), lowest index on ties, into out[rows].
// With `scratch` (kArgmaxScratchBytes, 16-byte aligned, zeroed once before its first use; the launches leave
// it so), rows of up to kArgmaxSplitRows 16-byte-aligned rows are split over up to kArgmaxMaxParts blocks
// each (HYMT_ARGMAX_SPLIT=0: one block a row); one launch either way. A scratch serves one launch at a time
// (launches on one stream take turns).
constexpr int kArgmaxSplitRows = 64;
constexpr int kArgmaxMaxParts = 64;
constexpr size_t kArgmaxScratchBytes = 4 * kArgmaxSplitRows + 12 * size_t{kArgmaxSplitRows} * kArgmaxMaxParts;
void LaunchArgmaxRows(const void* logits, bool f32, int64_t rows, int64_t row_stride, int32_t n_valid,
                      int32_t* out, void* scratch, cudaStream_t stream);

// Device read bandwidth in GB/s: a read-only pass over `bytes` (median of `repeats` after warm-ups).
double MeasureReadBandwidth(int device, size_t bytes, int repeats);

}  // namespace hymt::cuda
