// The CPU backend's Ops implementation, shared by the launcher files: each op family defines its
// methods in its own file (matmul.cc, attention.cc, norm.cc, elementwise.cc; memory and copies in
// cpu_ops.cc), next to the kernels/ file with the same name.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <unordered_set>
#include <vector>

#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/dispatch.h"
#include "backends/cpu/kernel_table.h"
#include "core/thread_pool.h"

namespace hymt::cpu {

// A 64-byte aligned buffer that grows to the largest request and is then reused (scratch of one op;
// sized by the largest shape the model runs, so it stops growing after the first step).
class ScratchBuffer {
 public:
  void* Get(size_t bytes);
  // n_threads slices of bytes_each, each starting on its own cache lines; slice i for thread i.
  uint8_t* PerThread(int n_threads, size_t bytes_each, size_t* stride);

 private:
  struct Free {
    void operator()(void* p) const;
  };
  std::unique_ptr<void, Free> data_;
  size_t size_ = 0;
};

// Calls fn(begin, end, thread) over [0, n) in one contiguous chunk per thread, chunk boundaries at
// multiples of `align` (static partition: streaming kernels keep their own memory stream).
void ParallelChunks(ThreadPool& pool, int64_t n, int64_t align,
                    const std::function<void(int64_t, int64_t, int)>& fn);
// Calls fn(begin, end, thread) over [0, n) in chunks of `grain`, handed out dynamically (uneven work).
void ParallelDynamic(ThreadPool& pool, int64_t n, int64_t grain,
                     const std::function<void(int64_t, int64_t, int)>& fn);

class CpuOps : public Ops {
 public:
  explicit CpuOps(Isa isa);

  std::string name() const override;
  DeviceId device() const override { return DeviceId{}; }
  DType activation_dtype() const override { return DType::kF32; }

  std::unique_ptr<Buffer> Allocate(size_t bytes, const std::string& what) override;
  Weight PrepareWeight(const Weight& host) override;
  void CopyFromHost(const void* src, Tensor dst) override;
  void CopyToHost(const Tensor& src, void* dst) override;
  void Sync() override {}

  void BeginStep(const StepBatch& batch) override;

  void Embed(const Weight& table, std::span<const int32_t> ids, Tensor out) override;  // elementwise.cc
  void RmsNorm(const Tensor& x, const Weight& w, float eps, Tensor out) override;      // norm.cc
  void MatMul(const Tensor& x, const Weight& w, Tensor out) override;                  // matmul.cc
  void RopeNorm(Tensor x, int n_heads, int head_dim, const Weight& inv_freq, const Weight* norm,
                float eps) override;                                               // norm.cc
  void KvWrite(const Tensor& k, const Tensor& v, const KvLayerView& kv) override;  // attention.cc
  void Attention(const Tensor& q, const KvLayerView& kv, int n_heads, float scale, Tensor out) override;
  void SwiGlu(const Tensor& gate, const Tensor& up, Tensor out) override;                // elementwise.cc
  void Add(Tensor x, const Tensor& y) override;                                          // elementwise.cc
  void GatherRows(const Tensor& x, std::span<const int32_t> rows, Tensor out) override;  // elementwise.cc
  void MatMulGroup(const Tensor& x, std::span<const Weight* const> ws,
                   std::span<const Tensor> outs) override;  // matmul.cc
  void MatMulSwiGlu(const Tensor& x, const Weight& gate, const Weight& up, Tensor up_scratch,
                    Tensor out) override;  // matmul.cc

 private:
  // A [1, n] weight (norm weights, inv_freq) as f32: the weight's own memory when it is f32 with scale 1,
  // else converted into `buffer`.
  const float* VectorAsF32(const Weight& w, ScratchBuffer* buffer);
  // cos / sin of every row's position for one inv_freq table, [n_rows][half] each; cached per step.
  void RopeTables(const Weight& inv_freq, int half);

  // matmul.cc: the kernel arguments of x · wᵀ into out (shapes checked; a packed w's packed layout).
  MatMulArgs MatMulArgsFor(const Tensor& x, const Weight& w, Tensor out) const;
  // a's activation rows quantised for a.w_dtype's integer kernels, in act_scratch_ (xq_row bytes a row).
  const uint8_t* QuantizeActRows(const MatMulArgs& a, size_t* xq_row);
  // The packed product of a (its rows [0, n_rows)) on the thread pool.
  void RunPacked(const MatMulArgs& a, const uint8_t* xq, size_t xq_row, int64_t n_rows);
  // Whether the weights are all packed with one activation row format (MatMulGroup).
  bool SharesActRows(std::span<const Weight* const> ws) const;

  // Whether w.prepared is a packed layout (packed.h) this backend wrote. (Other backends that wrap this
  // one set prepared to the stored layout.)
  bool IsPacked(const Weight& w) const {
    return w.prepared != nullptr && packed_ptrs_.count(w.prepared) != 0;
  }

  Isa isa_;
  const KernelTable& k_;
  std::vector<std::unique_ptr<Buffer>> packed_;  // packed weights (PrepareWeight)
  std::unordered_set<const void*> packed_ptrs_;
  StepBatch batch_;

  ScratchBuffer gemm_scratch_;      // per-thread packed weight panels
  ScratchBuffer act_scratch_;       // quantised activations of one matmul
  ScratchBuffer attn_scratch_;      // per-thread softmax state
  ScratchBuffer vector_scratch_;    // norm weights converted to f32
  ScratchBuffer rope_tables_;       // cos then sin, [n_rows][half] each
  const void* rope_key_ = nullptr;  // the inv_freq the tables hold (reset by BeginStep)
  int rope_half_ = 0;
};

}  // namespace hymt::cpu
