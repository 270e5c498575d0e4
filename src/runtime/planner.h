// The memory planner: decides, before anything is allocated, the weight format, where every layer
// lives (GPU, CPU, or streamed to the GPU per step), how many KV pages exist, and how large a step may
// be, within the user's budgets. One planner for every device; `hymt plan`, `serve` and `translate`
// all use it, and nothing allocated while serving grows past what it decided.
//
// Rules (docs/ARCHITECTURE.md, "Memory", says the same):
//   1. A GPU budget covers everything the process holds on the device: the CUDA context, the backend's
//      fixed scratch (cuBLAS workspace, staging), activations, logits, KV pages, weights, the ring.
//   2. Formats: the stored one first. When the user named none and the checkpoint is a float one (f32,
//      f16, bf16, f8), q8_0 and then q4_k_m are tried too (quantised at load, on all cores).
//   3. Modes, first that fits: resident (every weight on the GPU) in the stored format, then q8_0, then
//      q4_k_m; else the smallest format either streamed (the first N layers resident, the rest copied
//      into a ring of GPU slots each step) or partial (the first N layers on the GPU, the rest computed
//      on the CPU), whichever the speed model predicts faster at the planned batch; else the CPU.
//   4. Streamed plans prefer large batches: every step moves the same weight bytes over PCIe whatever
//      its batch, so KV pages come first and resident layers take what is left when that is faster.
//   5. When nothing fits, Error(kResourceExhausted) names the smallest budget that would (found by
//      searching the planner itself, so the number is exactly what `--gpu-mem`/`--cpu-mem` needs).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "model/config.h"
#include "model/weights.h"

namespace hymt {

enum class LayerHome { kCpu, kGpu, kStreamed };
const char* LayerHomeName(LayerHome home);  // "cpu", "gpu", "streamed"

// What the CUDA context itself takes (module images, the driver's own heaps, cuBLAS's handle and the
// kernels it loads on first use), which only the driver reports. Measured on an H200 with CUDA 13
// (tools/device/budgets.sh, tests/gpu/cuda_streaming_test.cc): ~600 MiB once the context exists and up to
// ~40 MiB more once the 7B's GEMMs have run; 700 MiB keeps a margin.
constexpr uint64_t kGpuContextBytes = uint64_t{700} << 20;
// The decode steps' CUDA graphs (the engine keeps at most 8, kMaxCudaGraphs): each instantiated graph
// holds device memory for its ~650 kernel nodes, measured at about 4 MiB on the H200 (a 6 GiB run with
// 18 graphs alive held 6 MiB more than its plan); 64 MiB covers 8 with a margin.
constexpr uint64_t kGpuGraphBytes = uint64_t{64} << 20;
// The CUDA backend's fixed scratch with its default options (CudaOpsScratchBytes: cuBLAS workspace,
// dequantisation slab, attention partials, staging, sampling area, argmax parts; 93.6 MiB), rounded up.
// Session and `hymt plan` pass the real value when CUDA is built; a unit test holds this one above it.
constexpr uint64_t kGpuBackendScratchBytes = uint64_t{96} << 20;
// cudaMalloc hands out whole 2 MiB pages for large allocations: each weight of at least this size is
// counted rounded up to it.
constexpr uint64_t kGpuAllocGranularity = uint64_t{2} << 20;

// Rough speeds for the predictions (the benchmarks measure the real ones).
struct DeviceSpeeds {
  // The GPU the predictions describe: an H200 (4.8 TB/s memory interface, 132 SMs at 1.98 GHz) unless
  // GpuSpeedsForDevice set another's figures. GpuReadRate turns them into each weight type's read speed.
  double gpu_peak_bandwidth = 4.8e12;  // memory clock x 2 x bus width, bytes/s
  double gpu_sm_scale = 1.0;           // SMs x SM clock, relative to the H200's
  bool gpu_described = false;          // the two above come from a device (GpuSpeedsForDevice)
  double gpu_flops = 4.0e14;           // achieved bf16 matmul FLOP/s
  double pcie_bandwidth = 50e9;        // host -> device from pinned memory (BENCH.md: ~54 GB/s)
  double cpu_bandwidth = 20e9;         // weight-read bytes/s of the CPU kernels
  double cpu_flops = 2.0e11;           // CPU matmul FLOP/s
  // int8 ops/s (2 a multiply-add) of the CPU's packed matmuls, which take q8_0, q4_k and q6_k weights on
  // AVX2 and AVX-512 hosts (backends/cpu/packed.h); 0: those weights' arithmetic counts at cpu_flops.
  double cpu_int8_ops = 0;
  // What a layer (or the head) costs beyond its bytes and FLOPs: kernel launches and their tails on
  // the GPU, thread-pool dispatch on the CPU. Dominant only for small models. GPU: the 7B decode step
  // spends 8-11 us a layer on the small kernels and 19-75 us a step between graphs (docs/BENCHMARKS.md,
  // "Where a batch-1 step goes").
  double gpu_part_seconds = 10e-6;
  double cpu_part_seconds = 10e-6;
  bool cpu_measured = false;  // cpu_bandwidth and cpu_flops come from this host (MeasuredCpuSpeeds)
};

// How fast the CUDA backend's decode GEMVs read weights of type t on the GPU `s` describes, bytes/s: the
// lower of two limits. The memory's: a fraction of the interface's peak, measured on an H100 whose memory
// the kernels nearly keep up with (3741ca4, 7B batch-1 steps less the per-part costs: bf16 88.8%, q8_0
// 73.5%, q4_k_m 70.2% of 3.35 TB/s). The SMs': what the same kernels read on an H200, whose memory is
// 1.43x faster on the same 132 SMs (bf16 3.89, q8_0 3.14, q4_k_m 2.73 TB/s: below that fraction of its
// 4.8 TB/s, so something on the SMs' side bounds them), scaled by s.gpu_sm_scale. q6_k shares q4_k's
// kernel; f8_e4m3 (0.71 of bf16 on an H200) and types without a fast GEMV kernel (0.5) have only H200
// figures and take them as fractions of both limits.
double GpuReadRate(const DeviceSpeeds& s, DType t);

// The weights one decode step reads on the GPU, kept by how fast the GEMVs read them (GpuReadRate), and
// what the CUDA backend's MatMul does with them at a step's row count: up to 8 rows one GEMV pass reads
// them; matrices in other types than bf16 take a pass per 8 rows up to 32 rows and beyond that are expanded
// to bf16 slabs for cuBLAS (written, then read again: 4 bytes an element at bf16's rate); bf16 matrices go
// to cuBLAS from 9 rows, reading themselves once. The arithmetic, 2 FLOPs a weight a row at
// DeviceSpeeds::gpu_flops, overlaps the reads of the product that does it.
struct GpuReads {
  static constexpr int kKinds = 6;  // bf16, f16/f32, q8_0, q4_k/q6_k, f8_e4m3, other types
  std::array<double, kKinds> bytes{};
  double slab_elems = 0;  // elements of the matrices not stored as bf16
  void Add(DType t, double n_bytes, double matrix_elems);
  // Seconds of the products over these weights for `rows` token rows doing `flops`.
  double Seconds(const DeviceSpeeds& s, int64_t rows, double flops) const;
};

// `base` describing a GPU whose memory interface peaks at `peak` bytes/s (memory clock x 2 x bus width)
// and whose SMs run at `sm_clock_rate` (SM count x SM clock in Hz; 0: an H200's): fixed figures, no probe,
// so a device always gets the same plan. peak 0 or less: `base` unchanged. Only the GPU's figures change;
// plans that weigh the GPU against PCIe or the CPU weigh it as it is.
DeviceSpeeds GpuSpeedsForDevice(DeviceSpeeds base, double peak, double sm_clock_rate = 0);
inline constexpr double kH200SmClockRate = 132 * 1.98e9;

// The model's weights in one format, sized per part.
struct WeightFormat {
  std::string name;                       // "bf16", "q8_0", "q4_k_m", ... (a recipe name or a stored type)
  bool quantize_at_load = false;          // false: the stored format
  DType main_type = DType::kBF16;         // the type of most matrices (speed estimates, display)
  std::vector<uint64_t> layer_bytes;      // [n_layers] host bytes of each layer
  std::vector<uint64_t> layer_gpu_bytes;  // [n_layers] bytes on the GPU in its backend's layout
  uint64_t embed_bytes = 0, embed_gpu_bytes = 0;  // token embedding (the head too when tied)
  uint64_t head_bytes = 0, head_gpu_bytes = 0;    // untied output head and the final norm
  int64_t layer_params = 0;                       // parameters of one layer (compute estimates)
  // Of those, and of the head (the embedding when tied), the elements of matrices the CPU's packed int8
  // matmuls take (a type with a packed layout: DeviceSpeeds::cpu_int8_ops applies to them).
  int64_t layer_packed_params = 0, head_packed_params = 0;
  // The same bytes by how fast the GPU's decode GEMVs read them (GpuReads, GpuReadRate): what the
  // decode estimates take for a layer, the embedding (as a tied head) and the head on the GPU.
  std::vector<GpuReads> layer_gpu_reads;  // [n_layers]
  GpuReads embed_gpu_reads, head_gpu_reads;
  uint64_t rope_gpu_bytes = 0;  // the RoPE table on the GPU (derived, not stored; one per device)
};

// Device bytes of one tensor in a GPU backend's layout (CudaPreparedWeightBytes when CUDA is built).
using GpuBytesFn = std::function<uint64_t(DType type, int64_t rows, int64_t cols)>;
// Sizes every part of `config` given each tensor's type; gpu_bytes may be empty (then the stored size).
WeightFormat MeasureFormat(const ModelConfig& config, const std::string& name, bool quantize_at_load,
                           const std::function<DType(const TensorSpec&)>& type_of,
                           const GpuBytesFn& gpu_bytes);
// The stored type a tensor gets when a model is quantised at load to `weight_type`: a recipe name
// (q4_k_m, q8_0, ...: MixedTypeFor, the tied embedding typed as the output head) or a plain type
// (q4_k, q5_k, ...: every matrix). Norms stay f32. Throws Error(kInvalidArgument) for an unknown name.
DType LoadTypeFor(const std::string& weight_type, const ModelConfig& config, const TensorSpec& spec);
// True for the stored types the planner may quantise at load (f32, f16, bf16, f8_e4m3).
bool IsFloatFormat(DType type);
// The formats to plan with, preferred first: `weight_type` (quantised at load) when the user named one;
// else the stored format (tensor types from `stored`, named `stored_name` or its main type), followed,
// for a float checkpoint, by q8_0 and q4_k_m where they are smaller.
std::vector<WeightFormat> CandidateFormats(const ModelConfig& config,
                                           const std::function<DType(const TensorSpec&)>& stored,
                                           const std::string& stored_name, const std::string& weight_type,
                                           const GpuBytesFn& gpu_bytes);

// `base` with the CPU's speeds measured on this host, once per process (~0.1-0.3 s): the read bandwidth of a
// 256 MiB probe times the fraction of it the CPU decode GEMVs reach (kCpuReadFraction), and the f32 FMA
// peak times the fraction the GEMMs reach (kCpuFlopFraction), and the int8 peak of the packed matmuls' ISA
// times the fraction they reach (kCpuInt8Fraction). Callers use it where no GPU takes part, so
// the choice between GPU plans never depends on a probe; the prediction of a CPU plan then fits the host
// instead of a constant.
DeviceSpeeds MeasuredCpuSpeeds(DeviceSpeeds base = {});
// The CPU decode read 75-95% of the read bandwidth for packed q8_0/q4_k_m and 82% for bf16 on AVX-512 hosts,
// 58-85% with the AVX2 kernels (docs/BENCHMARKS.md); the f32 GEMM 45-70% of the FMA peak (the int8 GEMMs
// of packed weights do more).
inline constexpr double kCpuReadFraction = 0.8;
inline constexpr double kCpuFlopFraction = 0.5;
// The packed int8 matmuls: 16-row batched decode steps at 35% (1.8B q4_k_m) and 54% (7B) of the vpdpbusd
// peak on a Zen 5 host, counting the whole step as their arithmetic; prefill 54-68% (docs/BENCHMARKS.md,
// "CPU predictions of batched steps").
inline constexpr double kCpuInt8Fraction = 0.4;

struct PlanInput {
  ModelConfig config;
  // Candidate formats, preferred first: formats[0] is what the weights are (stored, or what the user
  // asked to quantise to); the others are offered to the planner to quantise to when that fits.
  std::vector<WeightFormat> formats;
  bool have_gpu = false;
  bool gpu_can_stream = true;  // the GPU backend implements the streaming ops
  uint64_t gpu_free = 0;       // what the device reports free (bytes)
  uint64_t gpu_budget = 0;     // user budget (0: gpu_free minus a margin; capped at gpu_free)
  uint64_t gpu_fixed_bytes = kGpuContextBytes + kGpuBackendScratchBytes;  // context + backend scratch
  // Reserved for the decode steps' CUDA graphs on plans with everything on the GPU (the only ones the
  // engine replays graphs for); 0 when graphs are off.
  uint64_t gpu_graph_bytes = kGpuGraphBytes;
  // The CPU backend's own buffers where it computes (cpu::CpuOpsScratchBytes, with its threads): a fixed
  // part and a part per token of a step.
  uint64_t cpu_scratch_fixed = 0;
  uint64_t cpu_scratch_per_token = 0;
  uint64_t cpu_available = 0;        // host memory available (0: unknown, no host limit)
  uint64_t cpu_budget = 0;           // user budget (0: available minus kCpuMargin)
  std::string device = "auto";       // auto | cpu | gpu (gpu: fail rather than fall back to the CPU)
  int max_seqs = 0;                  // 0: choose
  int max_context = 0;               // 0: choose
  int ring_depth = 0;                // streamed plans: slots in the ring (0: choose)
  int gpu_layers = -1;               // partial/streamed plans: layers resident on the GPU (-1: choose)
  std::string mode;                  // "" (choose), or resident | partial | streamed | cpu
  DType cpu_kv_type = DType::kF32;   // KV type when every layer is on the CPU
  DType gpu_kv_type = DType::kBF16;  // KV type when any layer is on the GPU (all layers share one type)
  DType gpu_activation_type = DType::kBF16;  // the GPU backend's activation type
  DeviceSpeeds speeds;
};

struct Plan {
  std::string mode;               // "cpu" | "resident" | "partial" | "streamed"
  WeightFormat format;            // the weights as they will run
  std::vector<LayerHome> layers;  // [n_layers]
  bool embed_on_gpu = false;
  bool head_on_gpu = false;
  int ring_depth = 0;            // streamed: GPU slots, each holding one layer
  uint64_t ring_slot_bytes = 0;  // streamed: bytes of one slot (the largest streamed layer)
  int max_seqs = 0;
  int max_context = 0;
  int max_step_tokens = 0;
  int page_size = 16;
  int64_t kv_pages = 0;
  DType kv_type = DType::kF32;
  uint64_t gpu_budget = 0;  // the budget this plan was made for (0 without a GPU)
  uint64_t cpu_budget = 0;
  // GPU: weights (resident layers, embedding, head), the ring, KV, activations + logits, context +
  // backend scratch. CPU: weights it computes with, the pinned copies streamed layers come from, KV,
  // activations + logits + the CPU backend's scratch.
  uint64_t gpu_weight_bytes = 0, gpu_ring_bytes = 0, gpu_kv_bytes = 0, gpu_scratch_bytes = 0,
           gpu_fixed_bytes = 0;
  uint64_t cpu_weight_bytes = 0, cpu_pinned_bytes = 0, cpu_kv_bytes = 0, cpu_scratch_bytes = 0;
  double predicted_decode_tok_s = 0;  // batch 1
  double predicted_batch_tok_s = 0;   // aggregate at predicted_batch sequences
  int predicted_batch = 1;            // sequences whose KV fits at a typical translation's length
  std::vector<std::string> notes;     // why choices were made

  uint64_t gpu_total() const {
    return gpu_weight_bytes + gpu_ring_bytes + gpu_kv_bytes + gpu_scratch_bytes + gpu_fixed_bytes;
  }
  uint64_t cpu_total() const {
    return cpu_weight_bytes + cpu_pinned_bytes + cpu_kv_bytes + cpu_scratch_bytes;
  }
  int CountLayers(LayerHome home) const;
  // A human-readable table (for `hymt plan` and the server's start-up log).
  std::string Table(const ModelConfig& config) const;
};

// Throws Error(kResourceExhausted) naming the smallest budget that would work when nothing fits,
// Error(kUnavailable) for --device cuda without a GPU, Error(kInvalidArgument) for bad inputs.
Plan MakePlan(const PlanInput& input);

}  // namespace hymt
