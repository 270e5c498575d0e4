// The CUDA backend: ops.h on one NVIDIA GPU, with bf16 activations and f32 accumulation.
//
// Types. Activations are bf16 (activation_dtype()); MatMul may also write f32 (for logits). Weights keep
// their stored type on the device: f32, f16, bf16, f8_e4m3 (with Weight::scale), q8_0, q4_k and q6_k
// have kernels; other block formats are dequantised to bf16 by PrepareWeight. The KV cache is bf16
// (default), f16 or f32 (q8_0: not yet).
//
// Memory. Besides what callers Allocate and the weights PrepareWeight uploads, an instance holds fixed
// scratch sized by CudaOpsOptions (allocated at creation; CudaOpsScratchBytes says how much), plus the
// CUDA context and cuBLAS's handle, which only the driver can report (CudaMemoryInfo before and after).
//
// Streams and threads. One instance owns one stream; ops are asynchronous and ordered on it. Host
// arguments (ids, rows, the StepBatch) are copied into pinned staging memory before a call returns.
// Use an instance from one thread at a time; each call makes its device current on that thread.
//
// Errors. Every CUDA and cuBLAS call is checked: a failure throws Error(kInternal), out-of-memory
// Error(kResourceExhausted) saying how much was needed and how much was free; bad arguments throw
// Error(kInvalidArgument) or kUnsupported. Nothing aborts.
//
// CUDA graphs (decode steps whose shapes repeat). Capture a whole step, BeginStep included:
//
//   cuda->BeginCapture();  ops->BeginStep(batch);  model.Forward(...);  graph = cuda->EndCapture();
//
// EndCapture instantiates the graph and launches it once, so the captured step is also computed. A later
// step with the same shapes replays it:
//
//   cuda->BeginReplay(*graph);  ops->BeginStep(batch2);  model.Forward(...);
//   if (!cuda->EndReplay()) { /* shapes differed: nothing ran; run the step eagerly or capture again */ }
//
// In replay mode the ops only copy their host arguments (token ids, positions, page tables) into the
// staging buffers the graph reads and compare their arguments with the captured ones; EndReplay launches
// the graph if every op matched. What must match: every tensor pointer and shape, weight, the number
// of rows and sequences, page-table length and the attention split count (which depends on the longest
// context rounded up to a power of two). Positions and page contents may change. Buffers a graph uses
// must stay allocated while it may be replayed. Inside a capture or replay, CopyToHost, Sync,
// PrepareWeight and Allocate throw.
#pragma once

#include <cstdint>

#include <cstddef>
#include <memory>
#include <string>

#include "ops/ops.h"

namespace hymt {

// Number of CUDA devices this process can use; 0 when there is no driver or no GPU (never throws).
int CudaDeviceCount();
// The device's name ("NVIDIA H200"); empty when it cannot be queried.
std::string CudaDeviceName(int device);
// Free and total device memory as the driver reports them (cudaMemGetInfo), for the planner. False when
// the device cannot be queried. Creates the device's context if the process has none yet.
bool CudaMemoryInfo(int device, size_t* free_bytes, size_t* total_bytes);

// The device's peak memory bandwidth in bytes/s from its memory clock and bus width (no transfer); 0 when
// the device cannot say.
double CudaPeakMemoryBandwidth(int device);
// The device's SM count times its SM clock in Hz (the planner's measure of how fast its SMs decode
// weights); 0 when the device cannot say.
double CudaSmClockRate(int device);

// Device memory this process holds as the driver reports it (nvidia-smi: context, library workspaces
// and every allocation), in bytes; -1 when the driver does not list the process (no nvidia-smi, or a
// PID namespace it cannot see into).
int64_t CudaProcessMemoryBytes();

// Device read bandwidth in GB/s measured now (a read-only kernel over `bytes`, 2 GiB by default; anything
// several times the L2 will do): the ceiling decode divides by. The buffer is freed before it returns.
double CudaReadBandwidth(int device, size_t bytes = size_t{2} << 30);

// Fixed scratch an instance allocates at creation. Every size is a named limit: exceeding one is a clear
// error, never a silent allocation.
struct CudaOpsOptions {
  size_t cublas_workspace_bytes = size_t{32} << 20;   // cuBLAS workspace (fixed so graphs can capture GEMMs)
  size_t dequant_scratch_bytes = size_t{32} << 20;    // bf16 slab of a quantised weight for the GEMM path
  size_t attention_scratch_bytes = size_t{16} << 20;  // split-K partial results of decode attention
  size_t staging_bytes = size_t{4} << 20;  // per staging area (step batch; op arguments): pinned + device
  // Q4_K, Q6_K and Q8_0 decode GEMVs with int8 activations (dp4a), as llama.cpp does: the activation rows are
  // rounded to int8 per 16 values (error <= max|x| / 254 per value). Off: the weights are decoded to f32
  // instead (exact activations, but more instructions per weight than an SM issues at full bandwidth).
  bool int8_activations = true;
  size_t activation_scratch_bytes = size_t{1} << 20;  // the int8 activations of one GEMV call
  // Sampling on the device (top-k up to 64): the repetition-penalty history tokens of one call's rows
  // (4 bytes each); more, and the host samples.
  size_t sampling_history_tokens = size_t{1} << 20;
  // Prefill attention on tensor cores (bf16 mma.sync, f32 scores, softmax and accumulation) where the
  // device has them (sm_80+) and the KV cache is bf16. The softmax weights are rounded to bf16 before
  // they multiply V (output error <= 2^-8 sum_j w_j |v_j| on top of the f32 kernel's). Off: the
  // CUDA-core kernel, f32 throughout and about ten times slower.
  bool prefill_attention_tensor_cores = true;
};

// Device bytes an instance with these options allocates itself.
size_t CudaOpsScratchBytes(const CudaOpsOptions& options);
// Device bytes PrepareWeight allocates for a weight of this type and shape.
size_t CudaPreparedWeightBytes(DType dtype, int64_t rows, int64_t cols);

// A captured step (opaque). Destroy it before the CudaOps that made it.
class CudaGraph {
 public:
  virtual ~CudaGraph() = default;
};

// The CUDA-specific surface of the backend (Ops plus graphs and test hooks).
class CudaOps : public Ops {
 public:
  virtual void BeginCapture() = 0;
  virtual std::unique_ptr<CudaGraph> EndCapture() = 0;
  virtual void BeginReplay(CudaGraph& graph) = 0;
  // True when the graph was launched; false when the ops since BeginReplay differed from the capture.
  virtual bool EndReplay() = 0;
  // Replays a graph without running its ops again: stages `batch` as BeginStep does and `args` into the
  // host data the captured ops staged, in their order (token ids for Embed, rows for GatherRows), and
  // launches. Only for a graph that EndReplay has launched once and whose BeginStep matches `batch`'s
  // shapes, so that the ops would have staged exactly this (false otherwise: run the ops). Throws
  // Error(kInvalidArgument) for an argument outside what its op accepts.
  virtual bool FastReplay(CudaGraph& graph, const StepBatch& batch,
                          std::span<const std::span<const int32_t>> args, int feed_ticket) = 0;
  bool FastReplay(CudaGraph& graph, const StepBatch& batch, std::span<const std::span<const int32_t>> args) {
    return FastReplay(graph, batch, args, -1);
  }
  // feed_ticket >= 0: the step after one whose tokens are still on their way. The Embed ids (args[0],
  // which must hold valid ids of the right count as placeholders) come on the device from that
  // LaunchGreedy's result, copied just before the graph runs (an id outside the table, as for
  // non-finite logits, reads row 0; such a step is discarded by its caller anyway).

  // Greedy token choice on the device without waiting: starts the argmax of every row of `logits` (the
  // rows below n_valid compete) and the copy of the ids to the host, and returns a ticket. CollectGreedy
  // waits for that copy and writes the ids (kNonFiniteLogits for a row holding NaN or inf). At most two
  // tickets are outstanding; each must be collected once.
  virtual int LaunchGreedy(const Tensor& logits, int32_t n_valid) = 0;
  virtual void CollectGreedy(int ticket, std::span<int32_t> out) = 0;

  // The cudaStream_t all ops run on (for events in benchmarks and tests).
  virtual void* stream() const = 0;
  // Device time of graph launches, from events recorded around each: the sum and the number timed (a
  // launch is read at a later launch once it has finished, so the latest ones are not counted yet). Any
  // thread may ask.
  struct GraphTiming {
    int64_t device_ns = 0;
    int64_t launches = 0;
  };
  virtual GraphTiming graph_timing() const = 0;
  // Device bytes of this instance's fixed scratch.
  virtual size_t ScratchBytes() const = 0;
  // Tests: route every op through the simple kernels (the on-device oracle of the fast ones).
  virtual void SetSimpleKernels(bool on) = 0;
  // Tests and benchmarks: fill n 16-bit elements at a device pointer (NaN poisoning, random-free data).
  virtual void Fill16(void* device_ptr, size_t n, uint16_t value) = 0;
};

// A backend on CUDA device `device_index`. Throws Error(kInvalidArgument) when there is no such device.
std::unique_ptr<Ops> CreateCudaOps(int device_index);
std::unique_ptr<Ops> CreateCudaOps(int device_index, const CudaOpsOptions& options);
// The CUDA view of an Ops made by CreateCudaOps; nullptr for other backends.
CudaOps* AsCudaOps(Ops* ops);

}  // namespace hymt
