// The narrow op interface the model is written against.
//
// The Hunyuan forward (src/model) is written once over this interface; each backend (the scalar
// reference in ops_ref.cc, src/backends/cpu, src/backends/cuda) implements it. ops/ knows nothing of
// Hunyuan: these are the generic pieces of a decoder-only transformer over a paged KV cache.
//
// Conventions
// - Activations are 2-D row-major tensors, one row per token of the current step.
// - Weights are [rows = output features, cols = input features], in their stored type; MatMul computes
//   out = x · Wᵀ. A backend may keep its own layout of a weight (PrepareWeight).
// - A step processes the tokens of several sequences at once (continuous batching). BeginStep tells the
//   backend where each sequence's rows are, their positions and their KV page tables; every op until the
//   next BeginStep refers to that batch.
// - Ops are asynchronous on devices that are; Sync() waits. Host pointers passed in are read before the
//   call returns.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace hymt {

enum class DeviceKind : uint8_t { kCpu, kCuda };

struct DeviceId {
  DeviceKind kind = DeviceKind::kCpu;
  int index = 0;
  bool operator==(const DeviceId&) const = default;
};

std::string DeviceName(DeviceId d);  // "cpu", "cuda:0"

// A 2-D row-major view of activations on one device. Does not own memory.
struct Tensor {
  void* data = nullptr;
  DType dtype = DType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t stride = 0;  // elements from one row to the next (>= cols)
  DeviceId device;

  template <typename T>
  T* As() const {
    return static_cast<T*>(data);
  }
  // Rows [begin, begin + n) as a view.
  Tensor Rows(int64_t begin, int64_t n) const;
  // Same memory seen as [rows, cols] (requires a contiguous tensor of the same element count).
  Tensor Reshaped(int64_t new_rows, int64_t new_cols) const;
  size_t RowBytes() const { return DTypeBytes(dtype, stride); }
};

// A weight tensor in its stored type. Does not own memory: data points into a mapped file, a buffer
// held by the runtime, or a backend's prepared copy.
struct Weight {
  std::string name;              // e.g. "model.layers.3.mlp.up_proj.weight"
  DType dtype = DType::kF32;
  int64_t rows = 0;              // output features (1 for vectors such as norm weights)
  int64_t cols = 0;              // input features
  const void* data = nullptr;
  float scale = 1.0f;            // per-tensor multiplier (FP8 weight_scale); 1 for other types
  DeviceId device;
  const void* prepared = nullptr;  // backend-specific layout, owned by that backend (may be null)

  size_t bytes() const { return DTypeBytes(dtype, cols) * static_cast<size_t>(rows); }
  bool empty() const { return data == nullptr && prepared == nullptr; }
};

// One layer's KV cache: fixed-size pages; page p of the K pool holds, for each kv head, page_size
// consecutive positions of head_dim values: layout [n_pages][n_kv_heads][page_size][head_dim].
// For q8_0 the head_dim values of one position are head_dim/32 blocks.
struct KvLayerView {
  void* k = nullptr;
  void* v = nullptr;
  DType dtype = DType::kF32;  // f32, f16, bf16 or q8_0
  int n_kv_heads = 0;
  int head_dim = 0;
  int page_size = 0;
  int64_t n_pages = 0;

  size_t PageBytes() const {
    return DTypeBytes(dtype, head_dim) * static_cast<size_t>(page_size) * static_cast<size_t>(n_kv_heads);
  }
};

// Where each sequence's tokens are in the current step. Built on the host by the runtime.
struct StepBatch {
  struct Seq {
    int32_t first_row = 0;    // first activation row of this sequence in the step
    int32_t n_rows = 0;       // its tokens in this step (a prompt chunk, or 1 when decoding)
    int32_t n_past = 0;       // its tokens already in the KV cache before this step
    int32_t first_page = 0;   // offset of its page table in `pages`
    int32_t n_pages = 0;      // pages covering positions [0, n_past + n_rows)
  };
  int32_t page_size = 16;
  std::vector<Seq> seqs;
  std::vector<int32_t> positions;  // [n_rows] position of each row within its sequence
  std::vector<int32_t> row_seq;    // [n_rows] index into seqs
  std::vector<int32_t> pages;      // concatenated page tables

  int32_t n_rows() const { return static_cast<int32_t>(positions.size()); }
  // Appends a sequence with n_rows new tokens after n_past cached ones, using the given page table.
  void AddSeq(int32_t n_rows, int32_t n_past, std::span<const int32_t> page_table);
};

// What Ops::SampleTokens writes for a row of logits that is not all finite.
inline constexpr int32_t kNonFiniteLogits = -1;

// How one row of logits is turned into a token (see Ops::SampleTokens).
struct SampleSpec {
  float temperature = 0;            // <= 0: greedy
  int top_k = 0;                    // <= 0: no limit
  float top_p = 1;                  // >= 1: no limit
  float repetition_penalty = 1;     // 1: off
  double uniform = 0;               // the draw, in [0, 1), made by the caller's seeded generator
  std::span<const int32_t> history;  // tokens the repetition penalty applies to (host)
};

// Device memory owned by a backend; freed when destroyed.
class Buffer {
 public:
  virtual ~Buffer() = default;
  virtual void* data() = 0;
  virtual size_t size() const = 0;
};

class Ops {
 public:
  virtual ~Ops() = default;

  virtual std::string name() const = 0;
  virtual DeviceId device() const = 0;
  // The type this backend computes activations in (f32 on the CPU, bf16 on CUDA).
  virtual DType activation_dtype() const = 0;

  // ---- memory ----
  // Allocates device memory; throws Error(kResourceExhausted) naming `what` when it fails.
  virtual std::unique_ptr<Buffer> Allocate(size_t bytes, const std::string& what) = 0;
  // Returns the weight as this backend will use it: on its device, in a type its kernels support
  // (converting or repacking if needed; storage is held by the backend until it is destroyed).
  // `host` is readable host memory.
  virtual Weight PrepareWeight(const Weight& host) = 0;
  // Host <-> device copies of whole tensors (dst and src have equal shape and type).
  virtual void CopyFromHost(const void* src, Tensor dst) = 0;
  virtual void CopyToHost(const Tensor& src, void* dst) = 0;
  virtual void Sync() = 0;

  // ---- the step ----
  virtual void BeginStep(const StepBatch& batch) = 0;

  // ---- ops ----
  // out[i, :] = table[ids[i], :] converted to out's type. ids (host) has out.rows entries.
  virtual void Embed(const Weight& table, std::span<const int32_t> ids, Tensor out) = 0;

  // Row-wise RMSNorm: out = x / sqrt(mean(x²) + eps) * w, w of shape [1, cols]. The normalised value
  // is rounded to out's type before the multiply by w (as HF does). x and out may alias.
  virtual void RmsNorm(const Tensor& x, const Weight& w, float eps, Tensor out) = 0;

  // out[t, n] = sum_k x[t, k] * W[n, k] * w.scale. x.cols == W.cols, out.cols == W.rows.
  virtual void MatMul(const Tensor& x, const Weight& w, Tensor out) = 0;

  // In place on x [rows, n_heads * head_dim]: rotary embedding in rotate-half (NeoX) style at each
  // row's position (pairs j and j + head_dim/2; angle = float(pos) * inv_freq[j] in f32; inv_freq is
  // [1, head_dim/2] f32), then, when norm is non-null, RMSNorm of each head over head_dim with weight
  // norm [1, head_dim] (the Hunyuan q/k norm, which comes after RoPE).
  virtual void RopeNorm(Tensor x, int n_heads, int head_dim, const Weight& inv_freq, const Weight* norm,
                        float eps) = 0;

  // Stores each row's k and v ([rows, n_kv_heads * head_dim]) into the cache at its position.
  virtual void KvWrite(const Tensor& k, const Tensor& v, const KvLayerView& kv) = 0;

  // Causal attention: for each row r of sequence s at position p, and each query head h,
  // out[r, h] = softmax_j(q[r, h] · K[s, j, h / group] * scale) · V[s, j, h / group] over j = 0..p,
  // with group = n_heads / n_kv_heads. Softmax in f32. KvWrite for this step must come first.
  virtual void Attention(const Tensor& q, const KvLayerView& kv, int n_heads, float scale, Tensor out) = 0;

  // out = silu(gate) * up, element-wise. out may alias gate.
  virtual void SwiGlu(const Tensor& gate, const Tensor& up, Tensor out) = 0;

  // x += y, element-wise.
  virtual void Add(Tensor x, const Tensor& y) = 0;

  // ---- fused ops ----
  // Each is exactly the sequence of ops its default implementation runs (ops_common.cc), in fewer passes
  // on a backend that overrides it, with the same rounding: a decode step runs about half as many
  // kernels on a GPU.
  // outs[i] = x · ws[i]ᵀ for weights that read the same x (q, k and v): one MatMul per weight.
  virtual void MatMulGroup(const Tensor& x, std::span<const Weight* const> ws, std::span<const Tensor> outs);
  // residual += x · Wᵀ (the product rounded to the activation type first): MatMul(x, w, scratch), then
  // Add(residual, scratch). scratch is [x.rows, w.rows] and its contents are undefined afterwards.
  virtual void MatMulAdd(const Tensor& x, const Weight& w, Tensor scratch, Tensor residual);
  // out = silu(x · gateᵀ) * (x · upᵀ): MatMul(x, gate, out), MatMul(x, up, up_scratch), then
  // SwiGlu(out, up_scratch, out). up_scratch's contents are undefined afterwards.
  virtual void MatMulSwiGlu(const Tensor& x, const Weight& gate, const Weight& up, Tensor up_scratch, Tensor out);
  // RmsNorm(x, norm, eps, h), then MatMulGroup(h, ws, outs). h's contents are undefined afterwards (a
  // backend may normalise x inside the products instead of writing h).
  virtual void NormMatMulGroup(const Tensor& x, const Weight& norm, float eps, Tensor h,
                               std::span<const Weight* const> ws, std::span<const Tensor> outs);
  // RmsNorm(x, norm, eps, h), then MatMulSwiGlu(h, gate, up, up_scratch, out); h as above.
  virtual void NormMatMulSwiGlu(const Tensor& x, const Weight& norm, float eps, Tensor h, const Weight& gate,
                                const Weight& up, Tensor up_scratch, Tensor out);
  // RopeNorm(q, n_heads, ..., q_norm), RopeNorm(k, kv.n_kv_heads, ..., k_norm), then KvWrite(k, v, kv).
  virtual void RopeNormKvWrite(Tensor q, Tensor k, const Tensor& v, int n_heads, const Weight& inv_freq,
                               const Weight* q_norm, const Weight* k_norm, float eps, const KvLayerView& kv);
  // RopeNormKvWrite(q, k, v, ...), then Attention(q, kv, n_heads, scale, out). q's and k's contents are
  // undefined afterwards (a backend may rotate them inside the attention instead of writing them back).
  virtual void RopeNormKvAttention(Tensor q, Tensor k, const Tensor& v, int n_heads, const Weight& inv_freq,
                                   const Weight* q_norm, const Weight* k_norm, float eps,
                                   const KvLayerView& kv, float scale, Tensor out);

  // out[i, :] = x[rows[i], :]; rows (host) has out.rows entries.
  virtual void GatherRows(const Tensor& x, std::span<const int32_t> rows, Tensor out) = 0;

  // Picks the next token of each row of logits [rows, vocab] (f32 or the activation type): the
  // transformers pipeline of model/sampler.h — repetition penalty over the row's history, then greedy
  // (argmax, lowest id on ties) or temperature, top-k, top-p and a draw at the row's uniform number.
  // Only ids < n_valid are chosen. Writes one id per row to `out` (host), or kNonFiniteLogits for a row
  // whose logits [0, n_valid) hold a NaN or an infinity (damaged weights: no token is meaningful, and
  // NaN scores cannot be ordered). The default implementation copies the logits to the host and
  // samples there; devices override it to copy back ids only.
  virtual void SampleTokens(const Tensor& logits, std::span<const SampleSpec> specs, int32_t n_valid,
                            std::span<int32_t> out);

  // ---- layer streaming (optional: the defaults throw Error(kUnsupported)) ----
  // A streamed layer's weights stay in host memory, already in this backend's device layout, and are
  // copied into a device buffer (a ring slot, runtime/streamer.h) before each use. The copy of a slot's
  // weight is the staged Weight with `data` (and `prepared`) pointing into the slot and `device` set to
  // this device; nothing is repacked at run time.
  virtual bool CanStream() const { return false; }
  // Host memory that UploadAsync reads at full speed (pinned on CUDA). Not device memory.
  virtual std::unique_ptr<Buffer> AllocateStreamHost(size_t bytes, const std::string& what);
  // Bytes `host` takes in this backend's device layout (what PrepareWeight would allocate for it).
  virtual size_t StreamWeightBytes(const Weight& host);
  // Writes `host` in the device layout to `dst` (host memory of StreamWeightBytes(host) bytes) and
  // returns it as staged there: data = dst, dtype = the device type.
  virtual Weight StageStreamWeight(const Weight& host, void* dst);
  // Starts copying `bytes` from `host` (AllocateStreamHost memory) to `device_dst` (device memory from
  // Allocate). The copy begins only after every op enqueued before this call has finished on the device,
  // so it may overwrite memory those ops read. Returns a ticket for WaitUpload; tickets increase.
  virtual uint64_t UploadAsync(const void* host, void* device_dst, size_t bytes);
  // Makes every op enqueued after this call wait for the copy of `ticket` (on a device with queues this
  // returns at once; the host does not wait). A ticket stays valid for kUploadTicketWindow later uploads.
  virtual void WaitUpload(uint64_t ticket);
  static constexpr uint64_t kUploadTicketWindow = 64;
};

// The scalar reference implementation (host memory, accumulates in double): the test oracle for
// every backend, and never fast.
std::unique_ptr<Ops> CreateReferenceOps();

}  // namespace hymt
