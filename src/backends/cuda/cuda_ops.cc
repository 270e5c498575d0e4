// CudaOps: argument checks, memory, weight upload, the step batch, graphs, and the choice of kernel
// for each op. The kernels and their launchers live in the .cu files (one per op family).
#include "backends/cuda/cuda_ops.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <exception>
#include <initializer_list>
#include <vector>

#include "backends/cuda/cuda_internal.h"
#include "backends/cuda/streaming.h"
#include "core/half.h"
#include "core/logging.h"
#include "core/status.h"
#include "ops/sampling.h"
#include "quant/blocks.h"
#include "quant/quant.h"

namespace hymt {
namespace cuda {

void CheckCuda(cudaError_t err, const char* what, const char* file, int line) {
  if (err == cudaSuccess) return;
  cudaGetLastError();  // clear a non-sticky error so that the next call does not report it again
  const ErrorCode code =
      err == cudaErrorMemoryAllocation ? ErrorCode::kResourceExhausted : ErrorCode::kInternal;
  Fail(code, "CUDA error ", cudaGetErrorName(err), " (", cudaGetErrorString(err), ") in ", what, " at ", file,
       ":", line);
}

}  // namespace cuda

namespace {

using cuda::BatchView;
using cuda::DevSeq;
using cuda::KvView;
using cuda::MatView;
using cuda::PrefillTile;
using cuda::WeightView;

#define HYMT_CUBLAS_CHECK(expr) CheckCublas((expr), #expr, __FILE__, __LINE__)
void CheckCublas(cublasStatus_t st, const char* what, const char* file, int line) {
  if (st == CUBLAS_STATUS_SUCCESS) return;
  const ErrorCode code =
      st == CUBLAS_STATUS_ALLOC_FAILED ? ErrorCode::kResourceExhausted : ErrorCode::kInternal;
  Fail(code, "cuBLAS error ", cublasGetStatusString(st), " in ", what, " at ", file, ":", line);
}

// Words BeginStep records in a graph's trace (its kind and ten values).
constexpr size_t kBeginStepWords = 12;
// Rows of a sequence up to which decode attention (flash decoding, one row at a time) is used; longer
// chunks go to the prefill kernel.
constexpr int kDecodeMaxRows = 4;
// Decode attention: at most this many splits (each row takes cuda::AttnRowSplits of them).
constexpr int kMaxSplits = 64;
// MatMul with weights other than bf16: up to this many rows run as GEMV passes of kGemvMaxRows (each
// reads the weight once); more rows dequantise slabs to bf16 for cuBLAS (~4.5 bytes per weight element
// moved, so the GEMV passes win up to ~8 passes for q4_k, ~4 for q8_0).
constexpr int kQuantGemvMaxRows = 32;
// Pinned chunks PrepareWeight streams weights through (two, so that one fills while one copies).
constexpr size_t kUploadChunkBytes = size_t{16} << 20;
constexpr size_t kStagingAlign = 256;
static_assert(kStagingAlign % 4 == 0, "staged int32 slots start on whole words (LaunchStageWords)");
// Tile heights of the prefill kernel for GQA groups 1, 2, 4, 8 (the kernel holds 64 (row, head) pairs).
constexpr int kTileVariants = 4;

size_t RoundUp(size_t v, size_t a) {
  return (v + a - 1) / a * a;
}
int64_t Ptr(const void* p) {
  return static_cast<int64_t>(reinterpret_cast<intptr_t>(p));
}
int64_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}
int NextPow2(int v) {
  int p = 1;
  while (p < v) p *= 2;
  return p;
}

// Makes `device` current on the calling thread (cheap when it already is).
void Bind(int device) {
  int current = -1;
  HYMT_CUDA_CHECK(cudaGetDevice(&current));
  if (current != device) HYMT_CUDA_CHECK(cudaSetDevice(device));
}

// ---- owning wrappers (destructors never throw) ----

class DeviceMemory {
 public:
  DeviceMemory() = default;
  DeviceMemory(size_t bytes, const std::string& what, int device) : size_(bytes) {
    if (bytes == 0) return;
    const cudaError_t err = cudaMalloc(&ptr_, bytes);
    if (err != cudaSuccess) {
      cudaGetLastError();
      ptr_ = nullptr;
      size_t free_bytes = 0, total = 0;
      cudaMemGetInfo(&free_bytes, &total);
      if (err == cudaErrorMemoryAllocation)
        Fail(ErrorCode::kResourceExhausted, "cannot allocate GPU memory for ", what, " on cuda:", device,
             ": needs ", FormatBytes(bytes), ", ", FormatBytes(free_bytes), " free of ", FormatBytes(total));
      cuda::CheckCuda(err, "cudaMalloc", __FILE__, __LINE__);
    }
  }
  DeviceMemory(DeviceMemory&& o) noexcept : ptr_(o.ptr_), size_(o.size_) { o.ptr_ = nullptr; }
  DeviceMemory& operator=(DeviceMemory&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(size_, o.size_);
    return *this;
  }
  ~DeviceMemory() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  void* get() const { return ptr_; }
  size_t size() const { return size_; }

 private:
  void* ptr_ = nullptr;
  size_t size_ = 0;
};

class PinnedMemory {
 public:
  PinnedMemory() = default;
  PinnedMemory(size_t bytes, const std::string& what) {
    const cudaError_t err = cudaMallocHost(&ptr_, bytes);
    if (err != cudaSuccess) {
      cudaGetLastError();
      ptr_ = nullptr;
      Fail(ErrorCode::kResourceExhausted, "cannot allocate ", FormatBytes(bytes),
           " of pinned host memory for ", what, ": ", cudaGetErrorString(err));
    }
  }
  PinnedMemory(PinnedMemory&& o) noexcept : ptr_(o.ptr_) { o.ptr_ = nullptr; }
  PinnedMemory& operator=(PinnedMemory&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    return *this;
  }
  ~PinnedMemory() {
    if (ptr_ != nullptr) cudaFreeHost(ptr_);
  }
  char* get() const { return static_cast<char*>(ptr_); }

 private:
  void* ptr_ = nullptr;
};

class Event {
 public:
  explicit Event(bool timing = false) {
    HYMT_CUDA_CHECK(cudaEventCreateWithFlags(&ev_, timing ? cudaEventDefault : cudaEventDisableTiming));
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event() { cudaEventDestroy(ev_); }
  cudaEvent_t get() const { return ev_; }

 private:
  cudaEvent_t ev_ = nullptr;
};

class CudaBuffer final : public Buffer {
 public:
  CudaBuffer(size_t bytes, const std::string& what, int device) : mem_(bytes, what, device) {}
  void* data() override { return mem_.get(); }
  size_t size() const override { return mem_.size(); }

 private:
  DeviceMemory mem_;
};

// Host memory staged for upload: a pinned area and its device twin at the same offsets. `done` is
// recorded after the latest eager upload, so the pinned bytes are free again once it has completed.
struct StagingArea {
  PinnedMemory host;
  DeviceMemory dev;
  const void* host_dev = nullptr;  // `host` as kernels address it (cudaHostGetDevicePointer); null: copies
  size_t capacity = 0;
  size_t used = 0;
  Event done;
  bool graph_pending = false;  // a graph launch's upload was the latest (eager staging waits for `done`)
};

// Device top-k sampling's buffers (pinned and device, the same layout): row specs | history tokens |
// k best scores | their ids | flags, for kSampleAreaRows rows per launch.
constexpr size_t kSampleAreaRows = 1024;
// MatMulAdd's sums of squares for the next RMSNorm (two buffers of kGemvSumsFloats; with int8 activations).
constexpr size_t kSumsBytes = 2 * cuda::kGemvSumsFloats * sizeof(float);
struct SampleLayout {
  size_t specs_offset = 0, history_offset = 0, scores_offset = 0, ids_offset = 0, flags_offset = 0, end_offset = 0;
  size_t history_capacity = 0;
  explicit SampleLayout(size_t history_tokens) : history_capacity(history_tokens) {
    history_offset = RoundUp(kSampleAreaRows * sizeof(cuda::TopKRowSpec), 256);
    scores_offset = RoundUp(history_offset + history_capacity * sizeof(int32_t), 256);
    ids_offset = scores_offset + kSampleAreaRows * cuda::kMaxTopK * sizeof(float);
    flags_offset = ids_offset + kSampleAreaRows * cuda::kMaxTopK * sizeof(int32_t);
    end_offset = flags_offset + kSampleAreaRows * sizeof(int32_t);
  }
};
struct SampleArea : SampleLayout {
  explicit SampleArea(size_t history_tokens, int device)
      : SampleLayout(history_tokens), host(end_offset, "sampling"), dev(end_offset, "sampling", device) {}
  PinnedMemory host;
  DeviceMemory dev;
};
size_t SampleAreaBytes(const CudaOpsOptions& o) {
  return SampleLayout(o.sampling_history_tokens).end_offset;
}

class GraphImpl final : public CudaGraph {
 public:
  ~GraphImpl() override {
    if (exec != nullptr) cudaGraphExecDestroy(exec);  // freed after completion if still running
  }
  cudaGraphExec_t exec = nullptr;
  std::vector<int64_t> trace;  // every op's arguments at capture, compared on replay
  const void* owner = nullptr;
  // Host data the ops staged during the capture, in order (where, how many bytes, the bound every
  // int32 value must stay below; -1: data FastReplay cannot supply), and the trace words of BeginStep.
  struct Slot {
    size_t offset = 0;
    size_t bytes = 0;
    int64_t bound = -1;
  };
  std::vector<Slot> slots;
  size_t begin_step_words = 0;
  int64_t kv_pages = -1;   // pages of the KV pool the captured ops use (FastReplay checks page ids)
  bool validated = false;  // replayed once through the ops (EndReplay): FastReplay may skip them
  // The staged bytes of both areas (from offset 0): not part of the graph, Launch uploads them just
  // before it, so the host may stage the next step as soon as this one's uploads have run.
  size_t batch_bytes = 0, ops_bytes = 0;
  bool reads_host = false;  // an op copies from pinned staging inside the graph (CopyFromHost)
};

// Where each region of a prepared weight goes: region i holds row_bytes[i] per row at base[i] (see the
// layouts in cuda_internal.h).
struct WeightLayout {
  int n_regions = 1;
  size_t row_bytes[4] = {};
  size_t base[4] = {};
  DType device_type = DType::kBF16;
  bool host_dequant = false;  // converted to bf16 on the host (formats without kernels)
  size_t total = 0;
};

WeightLayout LayoutFor(DType t, int64_t rows, int64_t cols) {
  WeightLayout l;
  const size_t n = static_cast<size_t>(rows), k = static_cast<size_t>(cols);
  auto set = [&](std::initializer_list<size_t> row_bytes) {
    l.n_regions = 0;
    size_t base = 0;
    for (size_t rb : row_bytes) {
      l.row_bytes[l.n_regions] = rb;
      l.base[l.n_regions] = base;
      base += rb * n;
      ++l.n_regions;
    }
    l.total = base;
  };
  switch (t) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
    case DType::kF8E4M3:
      l.device_type = t;
      set({DTypeBytes(t, cols)});
      break;
    case DType::kQ4_K:
      l.device_type = t;
      set({k / 2, k / 256 * 16});
      break;
    case DType::kQ8_0:
      l.device_type = t;
      set({k, k / 32 * 2});
      break;
    case DType::kQ6_K:
      l.device_type = t;
      set({k / 2, k / 4, k / 16, k / 256 * 2});
      break;
    default:
      l.device_type = DType::kBF16;
      l.host_dequant = true;
      set({k * 2});
      break;
  }
  return l;
}

// Writes rows [r0, r1) of a host weight in the device layout into `dst`: region i of the chunk at
// dst + sum_{i' < i} (r1 - r0) * row_bytes[i'].
void FillChunk(const Weight& host, const WeightLayout& l, int64_t r0, int64_t r1, char* dst,
               std::vector<float>& tmp) {
  const size_t src_row = DTypeBytes(host.dtype, host.cols);
  const char* src = static_cast<const char*>(host.data);
  const size_t nr = static_cast<size_t>(r1 - r0);
  char* region[4];
  size_t off = 0;
  for (int i = 0; i < l.n_regions; ++i) {
    region[i] = dst + off;
    off += nr * l.row_bytes[i];
  }
  const int64_t k = host.cols;
  for (int64_t r = r0; r < r1; ++r) {
    const char* s = src + static_cast<size_t>(r) * src_row;
    const size_t lr = static_cast<size_t>(r - r0);
    if (l.host_dequant) {
      tmp.resize(static_cast<size_t>(k));
      DequantizeRow(host.dtype, s, tmp.data(), k);
      uint16_t* d = reinterpret_cast<uint16_t*>(region[0] + lr * l.row_bytes[0]);
      for (int64_t i = 0; i < k; ++i) d[i] = F32ToBf16(tmp[static_cast<size_t>(i)]);
    } else if (host.dtype == DType::kQ8_0) {
      const BlockQ8_0* b = reinterpret_cast<const BlockQ8_0*>(s);
      int8_t* qs = reinterpret_cast<int8_t*>(region[0] + lr * l.row_bytes[0]);
      uint16_t* d = reinterpret_cast<uint16_t*>(region[1] + lr * l.row_bytes[1]);
      for (int64_t i = 0; i < k / kQK; ++i) {
        d[i] = b[i].d;
        std::memcpy(qs + i * kQK, b[i].qs, kQK);
      }
    } else if (host.dtype == DType::kQ4_K) {
      // ggml's 64-element groups (byte 32j + l: elements 64j + l low, 64j + 32 + l high) to the split
      // layout's wide units (cuda_internal.h): byte e of super-block i (elements e low, 128 + e high) is byte
      // e % 16 of half (e % 32) / 16 of unit 4 i + e / 32.
      const BlockQ4_K* b = reinterpret_cast<const BlockQ4_K*>(s);
      uint8_t* qs = reinterpret_cast<uint8_t*>(region[0] + lr * l.row_bytes[0]);
      uint8_t* hdr = reinterpret_cast<uint8_t*>(region[1] + lr * l.row_bytes[1]);
      auto nibble = [](const uint8_t* q, int e) {
        const uint8_t byte = q[32 * (e / 64) + e % 32];
        return e % 64 < 32 ? byte & 0xF : byte >> 4;
      };
      const int64_t nsb = k / kQKK;
      for (int64_t i = 0; i < nsb; ++i) {
        for (int e = 0; e < kQKK / 2; ++e)
          qs[cuda::Q4KHalfOffset(4 * i + e / 32, (e % 32) / 16, nsb) + e % 16] =
              static_cast<uint8_t>(nibble(b[i].qs, e) | nibble(b[i].qs, 128 + e) << 4);
        std::memcpy(hdr + i * 16, &b[i].d, 2);
        std::memcpy(hdr + i * 16 + 2, &b[i].dmin, 2);
        std::memcpy(hdr + i * 16 + 4, b[i].scales, 12);
      }
    } else if (host.dtype == DType::kQ6_K) {
      // ggml's halves of 128 (ql byte 64n + l + 32(g&1), nibble g/2, and qh byte 32n + l, bits 2g, hold
      // element 128n + 32g + l) to the split layout's runs of 16 (cuda_internal.h); scales and d as stored.
      const BlockQ6_K* b = reinterpret_cast<const BlockQ6_K*>(s);
      uint8_t* ql = reinterpret_cast<uint8_t*>(region[0] + lr * l.row_bytes[0]);
      uint8_t* qh = reinterpret_cast<uint8_t*>(region[1] + lr * l.row_bytes[1]);
      int8_t* sc = reinterpret_cast<int8_t*>(region[2] + lr * l.row_bytes[2]);
      uint16_t* d = reinterpret_cast<uint16_t*>(region[3] + lr * l.row_bytes[3]);
      for (int64_t i = 0; i < k / kQKK; ++i) {
        const BlockQ6_K& blk = b[i];
        auto low4 = [&](int e) {
          const int n = e / 128, g = (e % 128) / 32, l = e % 32;
          return (blk.ql[64 * n + l + 32 * (g & 1)] >> (g < 2 ? 0 : 4)) & 0xF;
        };
        auto high2 = [&](int e) {
          const int n = e / 128, g = (e % 128) / 32, l = e % 32;
          return (blk.qh[32 * n + l] >> (2 * g)) & 3;
        };
        uint8_t* qlb = ql + i * (kQKK / 2);
        uint8_t* qhb = qh + i * (kQKK / 4);
        for (int e = 0; e < kQKK / 2; ++e) qlb[e] = static_cast<uint8_t>(low4(e) | low4(128 + e) << 4);
        for (int p = 0; p < 8; ++p)
          for (int h = 0; h < 2; ++h)
            for (int c = 0; c < 4; ++c) {
              int v = 0;
              for (int w = 0; w < 4; ++w) v |= high2(128 * h + 16 * p + 4 * w + c) << (2 * w);
              qhb[8 * p + 4 * h + c] = static_cast<uint8_t>(v);
            }
        std::memcpy(sc + i * (kQKK / 16), blk.scales, kQKK / 16);
        d[i] = blk.d;
      }
    } else {
      std::memcpy(region[0] + lr * l.row_bytes[0], s, src_row);
    }
  }
}

enum OpCode : int64_t {
  kOpBeginStep = 1,
  kOpEmbed,
  kOpRmsNorm,
  kOpMatMul,
  kOpRopeNorm,
  kOpKvWrite,
  kOpAttention,
  kOpSwiGlu,
  kOpAdd,
  kOpGatherRows,
  kOpCopyFromHost,
  kOpMatMulGroup,
  kOpMatMulAdd,
  kOpMatMulSwiGlu,
  kOpRopeNormKv,
  kOpNormMatMulGroup,
  kOpNormMatMulSwiGlu,
  kOpRopeNormKvAttention,
};

class CudaOpsImpl final : public CudaOps {
 public:
  CudaOpsImpl(int device, const CudaOpsOptions& options) : device_(device), options_(options) {
    const int count = CudaDeviceCount();
    if (device < 0 || device >= count)
      Fail(ErrorCode::kInvalidArgument, "cuda:", device, " does not exist (", count, " CUDA devices)");
    HYMT_CUDA_CHECK(cudaSetDevice(device));
    cudaDeviceProp prop;
    HYMT_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    sm_count_ = prop.multiProcessorCount;
    cc_major_ = prop.major;
    HYMT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    HYMT_CUDA_CHECK(cudaStreamCreateWithFlags(&ids_stream_, cudaStreamNonBlocking));
    HYMT_CUBLAS_CHECK(cublasCreate(&cublas_));
    HYMT_CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
    cublas_ws_ = DeviceMemory(options.cublas_workspace_bytes, "the cuBLAS workspace", device);
    HYMT_CUBLAS_CHECK(cublasSetWorkspace(cublas_, cublas_ws_.get(), cublas_ws_.size()));
    dequant_ = DeviceMemory(options.dequant_scratch_bytes, "the GEMM dequantisation slab", device);
    attn_ = DeviceMemory(options.attention_scratch_bytes, "attention partial results", device);
    if (options.int8_activations) {
      act_ = DeviceMemory(options.activation_scratch_bytes, "int8 activations", device);
      sums_ = DeviceMemory(kSumsBytes, "sums of squares", device);
      HYMT_CUDA_CHECK(
          cudaMemsetAsync(sums_.get(), 0, sums_.size(), stream_));  // 0 parts until a launch writes them
    }
    sample_ = std::make_unique<SampleArea>(options.sampling_history_tokens, device);
    argmax_scratch_ = DeviceMemory(cuda::kArgmaxScratchBytes, "argmax parts", device);
    HYMT_CUDA_CHECK(cudaMemsetAsync(argmax_scratch_.get(), 0, argmax_scratch_.size(), stream_));
    for (StagingArea* area : {&batch_area_, &ops_area_}) {
      area->capacity = options.staging_bytes;
      area->host = PinnedMemory(options.staging_bytes, "step staging");
      area->dev = DeviceMemory(options.staging_bytes, "step staging", device);
      // The upload kernel copies whole words (LaunchStageWords): an area of whole words whose pinned memory
      // kernels can address. Otherwise Launch copies (StageByKernel).
      void* p = nullptr;
      if (area->capacity % 4 == 0 && cudaHostGetDevicePointer(&p, area->host.get(), 0) == cudaSuccess) {
        area->host_dev = p;
      } else {
        cudaGetLastError();
      }
    }
    HYMT_LOG_DEBUG("cuda:", device, " ", prop.name, ", ", sm_count_, " SMs, scratch ",
                   FormatBytes(ScratchBytes()));
  }

  ~CudaOpsImpl() override {
    cudaSetDevice(device_);
    if (mode_ == Mode::kCapture) {
      cudaGraph_t g = nullptr;
      cudaStreamEndCapture(stream_, &g);
      if (g != nullptr) cudaGraphDestroy(g);
    }
    cudaStreamSynchronize(stream_);
    if (ids_stream_ != nullptr) cudaStreamSynchronize(ids_stream_);
    cudaGetLastError();
    if (cublas_ != nullptr) cublasDestroy(cublas_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    if (ids_stream_ != nullptr) cudaStreamDestroy(ids_stream_);
  }

  std::string name() const override { return "cuda"; }
  DeviceId device() const override { return DeviceId{DeviceKind::kCuda, device_}; }
  DType activation_dtype() const override { return DType::kBF16; }

  // ---- memory ----
  std::unique_ptr<Buffer> Allocate(size_t bytes, const std::string& what) override {
    ExpectEager("Allocate");
    Bind(device_);
    return std::make_unique<CudaBuffer>(bytes, what, device_);
  }

  Weight PrepareWeight(const Weight& host) override {
    ExpectEager("PrepareWeight");
    if (host.device.kind == DeviceKind::kCuda) {
      HYMT_CUDA_EXPECT(host.device.index == device_, "weight ", host.name, " is on cuda:", host.device.index);
      return host;
    }
    HYMT_CUDA_EXPECT(host.data != nullptr && host.rows > 0 && host.cols > 0, "weight ", host.name);
    HYMT_CUDA_EXPECT(host.cols % GetDTypeInfo(host.dtype).block_size == 0, "weight ", host.name, ": ",
                     host.cols, " columns of ", DTypeName(host.dtype));
    if (host.dtype == DType::kI32) Fail(ErrorCode::kUnsupported, "cuda: weight ", host.name, " is i32");
    Bind(device_);
    const WeightLayout layout = LayoutFor(host.dtype, host.rows, host.cols);
    if (layout.host_dequant)
      HYMT_LOG_WARN("cuda: no kernels for ", DTypeName(host.dtype), "; ", host.name, " is converted to bf16");
    size_t row_bytes = 0;
    for (int i = 0; i < layout.n_regions; ++i) row_bytes += layout.row_bytes[i];
    if (row_bytes > kUploadChunkBytes)
      Fail(ErrorCode::kUnsupported, "cuda: weight ", host.name, " has rows of ", FormatBytes(row_bytes),
           " (limit ", FormatBytes(kUploadChunkBytes), ")");
    DeviceMemory mem(layout.total, "weight " + host.name, device_);
    char* dev = static_cast<char*>(mem.get());

    if (upload_chunks_[0].get() == nullptr)
      for (PinnedMemory& chunk : upload_chunks_) chunk = PinnedMemory(kUploadChunkBytes, "weight upload");
    const int64_t rows_per_chunk = static_cast<int64_t>(kUploadChunkBytes / row_bytes);
    std::vector<float> tmp;
    int which = 0;
    for (int64_t r0 = 0; r0 < host.rows; r0 += rows_per_chunk, which ^= 1) {
      const int64_t r1 = std::min(host.rows, r0 + rows_per_chunk);
      HYMT_CUDA_CHECK(cudaEventSynchronize(upload_done_[which].get()));  // its previous copy has finished
      char* chunk = upload_chunks_[which].get();
      FillChunk(host, layout, r0, r1, chunk, tmp);
      size_t off = 0;
      for (int i = 0; i < layout.n_regions; ++i) {
        const size_t bytes = static_cast<size_t>(r1 - r0) * layout.row_bytes[i];
        HYMT_CUDA_CHECK(cudaMemcpyAsync(dev + layout.base[i] + static_cast<size_t>(r0) * layout.row_bytes[i],
                                        chunk + off, bytes, cudaMemcpyHostToDevice, stream_));
        off += bytes;
      }
      HYMT_CUDA_CHECK(cudaEventRecord(upload_done_[which].get(), stream_));
    }
    Weight out = host;
    out.dtype = layout.device_type;
    out.data = dev;
    out.prepared = dev;
    out.device = device();
    weights_.push_back(std::move(mem));
    return out;
  }

  void CopyFromHost(const void* src, Tensor dst) override {
    const OpScope scope(*this);
    const size_t row = DTypeBytes(dst.dtype, dst.cols);
    const size_t total = row * static_cast<size_t>(dst.rows);
    Trace({kOpCopyFromHost, Ptr(dst.data), dst.rows, dst.cols, dst.stride, static_cast<int64_t>(dst.dtype)});
    if (total == 0) return;
    if (mode_ != Mode::kEager || total <= options_.staging_bytes / 4) {
      // Through pinned staging: asynchronous, and capturable (the graph copies from the pinned bytes).
      const auto staged = Stage(ops_area_, src, total, /*upload=*/false);
      if (!Launching()) return;
      HYMT_CUDA_CHECK(cudaMemcpy2DAsync(dst.data, dst.RowBytes(), staged.host, row, row,
                                        static_cast<size_t>(dst.rows), cudaMemcpyHostToDevice, stream_));
      if (mode_ == Mode::kEager) HYMT_CUDA_CHECK(cudaEventRecord(ops_area_.done.get(), stream_));
      return;
    }
    // Large copies: straight from the caller's memory, finished before returning (the caller may reuse it).
    HYMT_CUDA_CHECK(cudaMemcpy2DAsync(dst.data, dst.RowBytes(), src, row, row, static_cast<size_t>(dst.rows),
                                      cudaMemcpyHostToDevice, stream_));
    HYMT_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  void CopyToHost(const Tensor& src, void* dst) override {
    ExpectEager("CopyToHost");
    Bind(device_);
    const size_t row = DTypeBytes(src.dtype, src.cols);
    if (row == 0 || src.rows == 0) return;
    HYMT_CUDA_CHECK(cudaMemcpy2DAsync(dst, row, src.data, src.RowBytes(), row, static_cast<size_t>(src.rows),
                                      cudaMemcpyDeviceToHost, stream_));
    HYMT_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  void Sync() override {
    ExpectEager("Sync");
    Bind(device_);
    HYMT_CUDA_CHECK(cudaStreamSynchronize(stream_));
    HYMT_CUDA_CHECK(cudaStreamSynchronize(ids_stream_));
    uploader_.Sync();  // prefetched layer copies too (their slots may be freed next)
  }

  // ---- the step ----
  void BeginStep(const StepBatch& batch) override {
    const OpScope scope(*this);
    ValidateBatch(batch);
    sums_next_ = 0;  // every step (and its graph) uses the sums buffers in the same order
    if (mode_ != Mode::kEager) {
      HYMT_CUDA_EXPECT(!step_in_graph_, "one BeginStep per captured or replayed step");
      step_in_graph_ = true;
    } else {
      HYMT_CUDA_CHECK(cudaEventSynchronize(batch_area_.done.get()));
    }
    batch_ = batch;
    has_batch_ = true;
    validated_pages_ = -1;

    // Derived lists (host): rows for decode attention, prefill tiles for each tile height.
    decode_rows_.clear();
    for (auto& t : tiles_) t.clear();
    int max_ctx = 0;
    for (size_t s = 0; s < batch.seqs.size(); ++s) {
      const StepBatch::Seq& seq = batch.seqs[s];
      if (seq.n_rows <= kDecodeMaxRows) {
        for (int32_t r = 0; r < seq.n_rows; ++r) {
          decode_rows_.push_back(seq.first_row + r);
          max_ctx = std::max(max_ctx, seq.n_past + r + 1);
        }
      } else {
        for (int v = 0; v < kTileVariants; ++v) {
          const int h = cuda::PrefillTileRows(1 << v);
          for (int32_t r = 0; r < seq.n_rows; r += h)
            tiles_[v].push_back({static_cast<int32_t>(s), seq.first_row + r, std::min(h, seq.n_rows - r)});
        }
      }
    }
    ctx_bucket_ = std::max(cuda::kAttnSplitMinPositions, NextPow2(max_ctx));
    longest_ctx_ = max_ctx;
    one_row_per_seq_ =
        !batch.seqs.empty() && std::all_of(batch.seqs.begin(), batch.seqs.end(),
                                           [](const StepBatch::Seq& q) { return q.n_rows == 1; });

    // One upload: seqs | positions | row_seq | pages | decode rows | tiles x 4.
    std::vector<DevSeq> seqs;
    for (const StepBatch::Seq& s : batch.seqs)
      seqs.push_back({s.first_row, s.n_rows, s.n_past, s.first_page, s.n_pages});
    batch_area_.used = 0;
    char* host = batch_area_.host.get();
    char* dev = static_cast<char*>(batch_area_.dev.get());
    size_t off = 0;
    auto put = [&](const void* p, size_t bytes) -> const void* {
      off = RoundUp(off, 16);
      if (off + bytes > batch_area_.capacity)
        Fail(ErrorCode::kResourceExhausted, "cuda: the step batch needs more than ",
             FormatBytes(batch_area_.capacity), " of staging (CudaOpsOptions::staging_bytes)");
      if (bytes > 0) std::memcpy(host + off, p, bytes);
      const void* d = dev + off;
      off += bytes;
      return d;
    };
    view_.seqs = static_cast<const DevSeq*>(put(seqs.data(), seqs.size() * sizeof(DevSeq)));
    view_.positions = static_cast<const int32_t*>(put(batch.positions.data(), batch.positions.size() * 4));
    view_.row_seq = static_cast<const int32_t*>(put(batch.row_seq.data(), batch.row_seq.size() * 4));
    view_.pages = static_cast<const int32_t*>(put(batch.pages.data(), batch.pages.size() * 4));
    decode_rows_dev_ = static_cast<const int32_t*>(put(decode_rows_.data(), decode_rows_.size() * 4));
    for (int v = 0; v < kTileVariants; ++v)
      tiles_dev_[v] =
          static_cast<const PrefillTile*>(put(tiles_[v].data(), tiles_[v].size() * sizeof(PrefillTile)));
    batch_area_.used = off;

    Trace({kOpBeginStep, batch.n_rows(), static_cast<int64_t>(batch.seqs.size()),
           static_cast<int64_t>(batch.pages.size()), batch.page_size,
           static_cast<int64_t>(decode_rows_.size()), static_cast<int64_t>(tiles_[0].size()),
           static_cast<int64_t>(tiles_[1].size()), static_cast<int64_t>(tiles_[2].size()),
           static_cast<int64_t>(tiles_[3].size()), CtxBucketWord(), ClusterWord()});
    if (mode_ != Mode::kEager || off == 0) return;  // a graph's batch goes up in Launch
    HYMT_CUDA_CHECK(cudaMemcpyAsync(dev, host, off, cudaMemcpyHostToDevice, stream_));
    HYMT_CUDA_CHECK(cudaEventRecord(batch_area_.done.get(), stream_));
  }

  // ---- ops ----
  void Embed(const Weight& table, std::span<const int32_t> ids, Tensor out) override {
    const OpScope scope(*this);
    const WeightView w = View(table, "Embed");
    ExpectBf16(out, "Embed out");
    HYMT_CUDA_EXPECT(static_cast<int64_t>(ids.size()) == out.rows && out.cols == table.cols);
    for (int32_t id : ids)
      if (id < 0 || id >= table.rows)
        Fail(ErrorCode::kInvalidArgument, "token id ", id, " outside the embedding ", table.name, " (",
             table.rows, " rows)");
    Trace({kOpEmbed, Ptr(w.data), static_cast<int64_t>(w.dtype), w.rows, w.cols, Ptr(out.data), out.rows,
           out.stride, simple_});
    const auto staged = Stage(ops_area_, ids.data(), ids.size() * 4, true, table.rows);
    if (!Launching()) return;
    cuda::LaunchEmbed(w, static_cast<const int32_t*>(staged.dev), Mat(out), simple_, stream_);
  }

  void RmsNorm(const Tensor& x, const Weight& w, float eps, Tensor out) override {
    const OpScope scope(*this);
    const WeightView wv = VectorView(w, x.cols, "RmsNorm");
    ExpectBf16(x, "RmsNorm x");
    ExpectBf16(out, "RmsNorm out");
    HYMT_CUDA_EXPECT(out.rows == x.rows && out.cols == x.cols);
    Trace({kOpRmsNorm, Ptr(x.data), x.rows, x.cols, x.stride, Ptr(wv.data), Bits(eps), Ptr(out.data),
           out.stride});
    if (!Launching() || Skip(1)) return;
    cuda::LaunchRmsNorm(Mat(x), wv, eps, Mat(out), stream_);
  }

  void MatMul(const Tensor& x, const Weight& w, Tensor out) override {
    const OpScope scope(*this);
    const WeightView wv = View(w, "MatMul");
    ExpectBf16(x, "MatMul x");
    HYMT_CUDA_EXPECT(out.dtype == DType::kBF16 || out.dtype == DType::kF32, "MatMul out is ",
                     DTypeName(out.dtype));
    HYMT_CUDA_EXPECT(x.cols == w.cols && out.cols == w.rows && out.rows == x.rows, "matmul shapes x[", x.rows,
                     ",", x.cols, "] w[", w.rows, ",", w.cols, "] out[", out.rows, ",", out.cols, "]");
    const bool out_f32 = out.dtype == DType::kF32;
    Trace({kOpMatMul, Ptr(x.data), x.rows, x.cols, x.stride, Ptr(wv.data), static_cast<int64_t>(wv.dtype),
           wv.rows, wv.cols, Bits(wv.scale), Ptr(out.data), out.stride, out_f32, simple_});
    if (!Launching() || x.rows == 0) return;
    const MatView xm = Mat(x), om = Mat(out);
    if (simple_) {
      cuda::LaunchGemvSimple(wv, xm, om, out_f32, stream_);
      return;
    }
    if (x.rows <= GemvMaxRows(wv.dtype)) {
      if (!cuda::GemvFastSupported(wv, xm)) {
        cuda::LaunchGemvSimple(wv, xm, om, out_f32, stream_);
        return;
      }
      const cuda::GemvPart part{wv, om};
      RunGemv(std::span<const cuda::GemvPart>(&part, 1), xm, out_f32, cuda::GemvEpilogue::kStore, nullptr);
      return;
    }
    Gemm(wv, xm, om, out_f32);
  }

  // ---- fused ops: one GEMV launch (decode row counts) or one RoPE + KV kernel; otherwise the
  // default sequence of ops ----
  void MatMulGroup(const Tensor& x, std::span<const Weight* const> ws, std::span<const Tensor> outs) override {
    if (!GroupGemv(x, nullptr, 0.0f, ws, outs)) Ops::MatMulGroup(x, ws, outs);
  }

  // With fusion on (GemvNormFusable), every GEMV block normalises x itself; otherwise RmsNorm and the fused
  // products run one after the other.
  void NormMatMulGroup(const Tensor& x, const Weight& norm, float eps, Tensor h, std::span<const Weight* const> ws,
                       std::span<const Tensor> outs) override {
    if (!GroupGemv(x, &norm, eps, ws, outs)) Ops::NormMatMulGroup(x, norm, eps, h, ws, outs);
  }

  void NormMatMulSwiGlu(const Tensor& x, const Weight& norm, float eps, Tensor h, const Weight& gate,
                        const Weight& up, Tensor up_scratch, Tensor out) override {
    if (!SwiGluGemv(x, &norm, eps, gate, up, out)) Ops::NormMatMulSwiGlu(x, norm, eps, h, gate, up, up_scratch, out);
  }

  void MatMulAdd(const Tensor& x, const Weight& w, Tensor scratch, Tensor residual) override {
    const bool shapes = residual.dtype == DType::kBF16 && residual.rows == x.rows && residual.cols == w.rows;
    std::vector<cuda::GemvPart> parts;
    if (shapes && w.device.kind == DeviceKind::kCuda) parts.push_back({View(w, "MatMulAdd"), Mat(residual)});
    if (parts.empty() || !FusedGemv(x, parts, nullptr)) {
      Ops::MatMulAdd(x, w, scratch, residual);
      return;
    }
    const OpScope scope(*this);
    const WeightView& wv = parts[0].w;
    // One token row: the launch also writes the new residual's sum of squares in parts, for the RMSNorm
    // inside the next op's GEMV (NormSums).
    float* sums = nullptr;
    if (sums_.get() != nullptr && x.rows == 1 &&
        cuda::GemvSumsWritable(wv.dtype, 1, wv.rows, wv.cols, act_.size())) {
      sums = static_cast<float*>(sums_.get()) + sums_next_ * cuda::kGemvSumsFloats;
      sums_next_ ^= 1;
      sums_of_ = {residual.data, residual.cols, sums, op_serial_, 0};
    }
    Trace({kOpMatMulAdd, Ptr(x.data), x.rows, x.cols, x.stride, Ptr(wv.data), static_cast<int64_t>(wv.dtype),
           wv.rows, wv.cols, Bits(wv.scale), Ptr(residual.data), residual.stride, Ptr(sums)});
    if (!Launching() || Skip(wv.cols > wv.rows ? 64 : 16)) return;  // down_proj: wider than tall
    if (sums != nullptr) {
      sums_of_.parts =
          static_cast<int>(cuda::LaunchGemvParts(parts, Mat(x), false, cuda::GemvEpilogue::kAdd, nullptr,
                                                 act_.get(), act_.size(), stream_, nullptr, sums));
    } else {
      RunGemv(parts, Mat(x), false, cuda::GemvEpilogue::kAdd, nullptr);
    }
  }

  void MatMulSwiGlu(const Tensor& x, const Weight& gate, const Weight& up, Tensor up_scratch, Tensor out) override {
    if (!SwiGluGemv(x, nullptr, 0.0f, gate, up, out)) Ops::MatMulSwiGlu(x, gate, up, up_scratch, out);
  }

  void RopeNormKvWrite(Tensor q, Tensor k, const Tensor& v, int n_heads, const Weight& inv_freq,
                       const Weight* q_norm, const Weight* k_norm, float eps, const KvLayerView& kv) override {
    if (simple_) {
      Ops::RopeNormKvWrite(q, k, v, n_heads, inv_freq, q_norm, k_norm, eps, kv);
      return;
    }
    const OpScope scope(*this);
    ExpectBatch("RopeNormKvWrite");
    for (const Tensor* t : {static_cast<const Tensor*>(&q), static_cast<const Tensor*>(&k), &v})
      ExpectBf16(*t, "RopeNormKvWrite q, k, v");
    const KvView kvv = Kv(kv);
    const int hd = kv.head_dim;
    const int64_t width = static_cast<int64_t>(kv.n_kv_heads) * hd;
    HYMT_CUDA_EXPECT(hd % 2 == 0 && hd <= 256, "head_dim ", hd);
    HYMT_CUDA_EXPECT(q.rows == batch_.n_rows() && k.rows == q.rows && v.rows == q.rows &&
                     q.cols == static_cast<int64_t>(n_heads) * hd && k.cols == width && v.cols == width);
    const WeightView fv = VectorView(inv_freq, hd / 2, "RopeNormKvWrite inv_freq");
    WeightView qn, kn;
    if (q_norm != nullptr) qn = VectorView(*q_norm, hd, "RopeNormKvWrite q_norm");
    if (k_norm != nullptr) kn = VectorView(*k_norm, hd, "RopeNormKvWrite k_norm");
    Trace({kOpRopeNormKv, Ptr(q.data), q.rows, q.stride, Ptr(k.data), k.stride, Ptr(v.data), v.stride, n_heads,
           Ptr(fv.data), Ptr(q_norm != nullptr ? qn.data : nullptr), Ptr(k_norm != nullptr ? kn.data : nullptr),
           Bits(eps), Ptr(kv.k), Ptr(kv.v), static_cast<int64_t>(kv.dtype), kv.n_kv_heads, hd, kv.page_size,
           kv.n_pages});
    if (!Launching() || Skip(2)) return;
    cuda::LaunchRopeNormKv(Mat(q), Mat(k), Mat(v), n_heads, fv, q_norm != nullptr ? &qn : nullptr,
                           k_norm != nullptr ? &kn : nullptr, eps, kvv, view_, stream_);
  }

  void RopeNorm(Tensor x, int n_heads, int head_dim, const Weight& inv_freq, const Weight* norm,
                float eps) override {
    const OpScope scope(*this);
    ExpectBatch("RopeNorm");
    ExpectBf16(x, "RopeNorm x");
    HYMT_CUDA_EXPECT(x.cols == static_cast<int64_t>(n_heads) * head_dim && x.rows == batch_.n_rows());
    HYMT_CUDA_EXPECT(head_dim % 2 == 0 && head_dim <= 256, "head_dim ", head_dim);
    const WeightView fv = VectorView(inv_freq, head_dim / 2, "RopeNorm inv_freq");
    WeightView nv;
    if (norm != nullptr) nv = VectorView(*norm, head_dim, "RopeNorm norm");
    Trace({kOpRopeNorm, Ptr(x.data), x.rows, x.cols, x.stride, n_heads, head_dim, Ptr(fv.data),
           Ptr(norm != nullptr ? nv.data : nullptr), Bits(eps)});
    if (!Launching()) return;
    cuda::LaunchRopeNorm(Mat(x), n_heads, head_dim, fv, norm != nullptr ? &nv : nullptr, eps, view_.positions,
                         stream_);
  }

  void KvWrite(const Tensor& k, const Tensor& v, const KvLayerView& kv) override {
    const OpScope scope(*this);
    ExpectBatch("KvWrite");
    ExpectBf16(k, "KvWrite k");
    ExpectBf16(v, "KvWrite v");
    const KvView kvv = Kv(kv);
    const int64_t width = static_cast<int64_t>(kv.n_kv_heads) * kv.head_dim;
    HYMT_CUDA_EXPECT(k.rows == batch_.n_rows() && v.rows == k.rows && k.cols == width && v.cols == width);
    Trace({kOpKvWrite, Ptr(k.data), k.stride, Ptr(v.data), v.stride, Ptr(kv.k), Ptr(kv.v),
           static_cast<int64_t>(kv.dtype), kv.n_kv_heads, kv.head_dim, kv.page_size, kv.n_pages});
    if (!Launching()) return;
    cuda::LaunchKvWrite(Mat(k), Mat(v), kvv, view_, stream_);
  }

  // RoPE, the q/k norms and the KV write inside the decode attention kernel (AttentionArgs::Rope): one
  // launch fewer per layer on steps whose every sequence decodes one row, with HYMT_FUSE_ROPE_ATTN=1. Off
  // by default: on the H200 at the 7B shape a decode graph ran 1-2% longer with it (q4_k_m 2.085 against
  // 2.063 ms, q8_0 2.839 against 2.797, bf16 4.178 against 4.127; docs/BENCHMARKS.md), the attention
  // blocks waiting on the rotation that the separate kernel did beside the previous kernel's tail.
  void RopeNormKvAttention(Tensor q, Tensor k, const Tensor& v, int n_heads, const Weight& inv_freq,
                           const Weight* q_norm, const Weight* k_norm, float eps, const KvLayerView& kv,
                           float scale, Tensor out) override {
    static const bool fuse = cuda::EnvEquals("HYMT_FUSE_ROPE_ATTN", "1");
    if (!fuse || simple_ || !has_batch_ || !one_row_per_seq_ || Skip(2) || Skip(4)) {
      Ops::RopeNormKvAttention(q, k, v, n_heads, inv_freq, q_norm, k_norm, eps, kv, scale, out);
      return;
    }
    const OpScope scope(*this);
    cuda::AttentionArgs a;
    if (!AttentionSetup(q, kv, n_heads, scale, out, "RopeNormKvAttention", &a)) {
      Ops::RopeNormKvAttention(q, k, v, n_heads, inv_freq, q_norm, k_norm, eps, kv, scale, out);
      return;
    }
    for (const Tensor* t : {static_cast<const Tensor*>(&k), &v}) ExpectBf16(*t, "RopeNormKvAttention k, v");
    const int hd = kv.head_dim;
    const int64_t width = static_cast<int64_t>(kv.n_kv_heads) * hd;
    HYMT_CUDA_EXPECT(k.rows == q.rows && v.rows == q.rows && k.cols == width && v.cols == width);
    a.rope.on = true;
    a.rope.k = Mat(k);
    a.rope.v = Mat(v);
    a.rope.inv_freq = VectorView(inv_freq, hd / 2, "RopeNormKvAttention inv_freq");
    if (q_norm != nullptr) a.rope.q_norm = VectorView(*q_norm, hd, "RopeNormKvAttention q_norm");
    if (k_norm != nullptr) a.rope.k_norm = VectorView(*k_norm, hd, "RopeNormKvAttention k_norm");
    a.rope.has_q_norm = q_norm != nullptr;
    a.rope.has_k_norm = k_norm != nullptr;
    a.rope.eps = eps;
    // The fields that set what the kernel does (null norm views when there is no norm).
    Trace({kOpRopeNormKvAttention, Ptr(q.data), q.stride, Ptr(k.data), k.stride, Ptr(v.data), v.stride,
           Ptr(out.data), out.stride, Ptr(kv.k), Ptr(kv.v), static_cast<int64_t>(kv.dtype), kv.n_kv_heads, hd,
           kv.page_size, n_heads, Bits(scale), Ptr(a.rope.inv_freq.data), Ptr(a.rope.q_norm.data),
           Ptr(a.rope.k_norm.data), Bits(eps), a.n_decode, a.n_splits});
    if (!Launching() || q.rows == 0) return;
    cuda::LaunchAttentionFast(a, stream_);
  }

  void Attention(const Tensor& q, const KvLayerView& kv, int n_heads, float scale, Tensor out) override {
    const OpScope scope(*this);
    cuda::AttentionArgs a;
    const bool fast = AttentionSetup(q, kv, n_heads, scale, out, "Attention", &a);
    Trace({kOpAttention, Ptr(q.data), q.stride, Ptr(out.data), out.stride, Ptr(kv.k), Ptr(kv.v),
           static_cast<int64_t>(kv.dtype), kv.n_kv_heads, kv.head_dim, kv.page_size, n_heads, Bits(scale),
           fast, a.n_decode, a.n_tiles, a.n_splits});
    if (!Launching() || q.rows == 0 || Skip(4)) return;
    if (fast)
      cuda::LaunchAttentionFast(a, stream_);
    else
      cuda::LaunchAttentionSimple(a, stream_);
  }

  // Checks Attention's arguments and fills *a; true when the fast kernels take them (the decode and prefill
  // lists and the splits then set too).
  bool AttentionSetup(const Tensor& q, const KvLayerView& kv, int n_heads, float scale, const Tensor& out,
                      const char* op, cuda::AttentionArgs* out_args) {
    cuda::AttentionArgs& a = *out_args;
    ExpectBatch(op);
    ExpectBf16(q, op);
    ExpectBf16(out, op);
    const KvView kvv = Kv(kv);
    HYMT_CUDA_EXPECT(kv.n_kv_heads > 0 && n_heads % kv.n_kv_heads == 0, n_heads, " heads over ",
                     kv.n_kv_heads);
    const int64_t width = static_cast<int64_t>(n_heads) * kv.head_dim;
    HYMT_CUDA_EXPECT(q.rows == batch_.n_rows() && out.rows == q.rows && q.cols == width && out.cols == width);
    const int group = n_heads / kv.n_kv_heads;

    a.q = Mat(q);
    a.out = Mat(out);
    a.kv = kvv;
    a.batch = view_;
    a.n_heads = n_heads;
    attn_kv_heads_ = kv.n_kv_heads;
    a.scale = scale;
    const bool fast = !simple_ && cuda::AttentionFastSupported(kvv, n_heads) && Aligned16(q) &&
                      Aligned16(out) && reinterpret_cast<uintptr_t>(kv.k) % 16 == 0 &&
                      reinterpret_cast<uintptr_t>(kv.v) % 16 == 0;
    if (fast) {
      int v = 0;
      while ((1 << v) < group) ++v;  // tile variant for the group rounded up to a power of two
      a.decode_rows = decode_rows_dev_;
      a.n_decode = static_cast<int>(decode_rows_.size());
      a.tiles = tiles_dev_[v];
      a.n_tiles = static_cast<int>(tiles_[v].size());
      a.prefill_tensor_cores = options_.prefill_attention_tensor_cores &&
                               cuda::PrefillTensorCoresSupported(kvv, n_heads, cc_major_);
      a.n_splits = Splits(a.n_decode, n_heads, kv.n_kv_heads, kv.head_dim);
      // Few decode rows: the splits merge inside clusters of blocks (sm_90+), no combine launch.
      if (const int cluster = cuda::AttnClusterSplits(a.n_splits, cc_major_, longest_ctx_);
          cluster > 0 && !CtxBuckets()) {
        a.n_splits = cluster;
        a.cluster = true;
      }
      a.split_min = SplitMinPositions();
      a.partial_o = static_cast<float*>(attn_.get());
      a.partial_ml = a.partial_o + static_cast<size_t>(a.n_decode) * n_heads * a.n_splits * kv.head_dim;
    }
    return fast;
  }

  void SwiGlu(const Tensor& gate, const Tensor& up, Tensor out) override {
    const OpScope scope(*this);
    ExpectBf16(gate, "SwiGlu gate");
    ExpectBf16(up, "SwiGlu up");
    ExpectBf16(out, "SwiGlu out");
    HYMT_CUDA_EXPECT(up.rows == gate.rows && up.cols == gate.cols && out.rows == gate.rows &&
                     out.cols == gate.cols);
    Trace({kOpSwiGlu, Ptr(gate.data), gate.rows, gate.cols, gate.stride, Ptr(up.data), up.stride,
           Ptr(out.data), out.stride});
    if (!Launching()) return;
    cuda::LaunchSwiGlu(Mat(gate), Mat(up), Mat(out), stream_);
  }

  void Add(Tensor x, const Tensor& y) override {
    const OpScope scope(*this);
    ExpectBf16(x, "Add x");
    ExpectBf16(y, "Add y");
    HYMT_CUDA_EXPECT(y.rows == x.rows && y.cols == x.cols);
    Trace({kOpAdd, Ptr(x.data), x.rows, x.cols, x.stride, Ptr(y.data), y.stride});
    if (!Launching()) return;
    cuda::LaunchAdd(Mat(x), Mat(y), stream_);
  }

  void GatherRows(const Tensor& x, std::span<const int32_t> rows, Tensor out) override {
    const OpScope scope(*this);
    HYMT_CUDA_EXPECT(x.dtype == out.dtype && (x.dtype == DType::kBF16 || x.dtype == DType::kF32),
                     "GatherRows of ", DTypeName(x.dtype));
    HYMT_CUDA_EXPECT(static_cast<int64_t>(rows.size()) == out.rows && out.cols == x.cols);
    for (int32_t r : rows) HYMT_CUDA_EXPECT(r >= 0 && r < x.rows, "row ", r, " of ", x.rows);
    Trace({kOpGatherRows, Ptr(x.data), x.rows, x.cols, x.stride, static_cast<int64_t>(x.dtype), Ptr(out.data),
           out.rows, out.stride});
    const auto staged = Stage(ops_area_, rows.data(), rows.size() * 4, true, x.rows);
    if (!Launching()) return;
    cuda::LaunchGatherRows(Mat(x), x.dtype == DType::kF32 ? 4 : 2, static_cast<const int32_t*>(staged.dev),
                           Mat(out), stream_);
  }

  // Greedy rows are chosen on the device (one id per row comes back); sampled rows with top-k up to
  // kMaxTopK have their k best scores found on the device (k values per row come back) and the host
  // finishes them (SampleFromTopK); anything else (no top-k, a larger one) uses the host path.
  void SampleTokens(const Tensor& logits, std::span<const SampleSpec> specs, int32_t n_valid,
                    std::span<int32_t> out) override {
    const bool device = mode_ == Mode::kEager && (logits.dtype == DType::kBF16 || logits.dtype == DType::kF32);
    bool greedy = device, top_k = device;
    for (const SampleSpec& s : specs) {
      greedy &= s.temperature <= 0 && (s.repetition_penalty == 1.0f || s.history.empty());
      top_k &= s.temperature <= 0 || (s.top_k > 0 && s.top_k <= cuda::kMaxTopK);
    }
    if (greedy) {
      SampleGreedy(logits, specs, n_valid, out);
    } else if (top_k) {
      for (size_t r0 = 0; r0 < specs.size(); r0 += kSampleRows) {
        const size_t n = std::min(kSampleRows, specs.size() - r0);
        SampleTopK(logits.Rows(static_cast<int64_t>(r0), static_cast<int64_t>(n)), specs.subspan(r0, n), n_valid,
                   out.subspan(r0, n));
      }
    } else {
      Ops::SampleTokens(logits, specs, n_valid, out);
    }
  }

  void SampleGreedy(const Tensor& logits, std::span<const SampleSpec> specs, int32_t n_valid, std::span<int32_t> out) {
    HYMT_CUDA_EXPECT(static_cast<int64_t>(specs.size()) == logits.rows && out.size() == specs.size());
    CollectGreedy(LaunchGreedy(logits, n_valid), out);
  }

  int LaunchGreedy(const Tensor& logits, int32_t n_valid) override {
    const OpScope scope(*this);
    ExpectEager("LaunchGreedy");
    HYMT_CUDA_EXPECT(logits.dtype == DType::kBF16 || logits.dtype == DType::kF32);
    HYMT_CUDA_EXPECT(n_valid > 0 && n_valid <= logits.cols && logits.rows > 0);
    const int ticket = next_greedy_;
    GreedyIds& g = greedy_[ticket];
    HYMT_CUDA_EXPECT(!g.pending, "more than two greedy launches outstanding");
    const size_t bytes = static_cast<size_t>(logits.rows) * sizeof(int32_t);
    if (g.dev.size() < bytes) {
      g.dev = DeviceMemory(std::max<size_t>(bytes, kIdsCapacity), "sampled ids", device_);
      g.host = PinnedMemory(std::max<size_t>(bytes, kIdsCapacity), "sampled ids");
    }
    cuda::LaunchArgmaxRows(logits.data, logits.dtype == DType::kF32, logits.rows, logits.stride, n_valid,
                           static_cast<int32_t*>(g.dev.get()), argmax_scratch_.get(), stream_);
    // The ids' copy to the host on a stream of its own (HYMT_IDS_STREAM=0: on this one), so that the next
    // step's launch does not queue behind it. g.dev is written again only after CollectGreedy has waited
    // for the copy (a ticket is reused only once collected).
    static const bool own_stream = !cuda::EnvEquals("HYMT_IDS_STREAM", "0");
    cudaStream_t copy = own_stream ? ids_stream_ : stream_;
    if (own_stream) {
      HYMT_CUDA_CHECK(cudaEventRecord(g.ready.get(), stream_));
      HYMT_CUDA_CHECK(cudaStreamWaitEvent(copy, g.ready.get(), 0));
    }
    HYMT_CUDA_CHECK(cudaMemcpyAsync(g.host.get(), g.dev.get(), bytes, cudaMemcpyDeviceToHost, copy));
    HYMT_CUDA_CHECK(cudaEventRecord(g.done.get(), copy));
    g.rows = static_cast<size_t>(logits.rows);
    g.pending = true;
    next_greedy_ ^= 1;
    return ticket;
  }

  void CollectGreedy(int ticket, std::span<int32_t> out) override {
    Bind(device_);
    GreedyIds& g = Ticket(ticket);
    HYMT_CUDA_EXPECT(out.size() == g.rows, "CollectGreedy: ", out.size(), " ids for ", g.rows, " rows");
    g.pending = false;
    HYMT_CUDA_CHECK(cudaEventSynchronize(g.done.get()));
    std::memcpy(out.data(), g.host.get(), g.rows * sizeof(int32_t));
  }

  // At most kSampleRows rows. The history tokens of all rows go up in one copy with the row specs; when
  // they do not fit the sampling area, the host samples.
  void SampleTopK(const Tensor& logits, std::span<const SampleSpec> specs, int32_t n_valid, std::span<int32_t> out) {
    const OpScope scope(*this);
    HYMT_CUDA_EXPECT(static_cast<int64_t>(specs.size()) == logits.rows && out.size() == specs.size());
    HYMT_CUDA_EXPECT(n_valid > 0 && n_valid <= logits.cols);
    const size_t rows = specs.size();
    std::vector<cuda::TopKRowSpec> row_specs(rows);
    std::vector<int32_t> history;
    for (size_t r = 0; r < rows; ++r) {
      const SampleSpec& s = specs[r];
      const bool greedy = s.temperature <= 0;
      cuda::TopKRowSpec& d = row_specs[r];
      d.inv_temperature = greedy ? 1.0f : InverseTemperature(s);
      d.penalty = s.repetition_penalty;
      d.k = greedy ? 1 : s.top_k;
      d.history_begin = static_cast<int32_t>(history.size());
      if (s.repetition_penalty != 1.0f) {
        const size_t first = history.size();
        for (int32_t id : s.history)
          if (id >= 0 && id < n_valid) history.push_back(id);
        std::sort(history.begin() + static_cast<int64_t>(first), history.end());
        history.erase(std::unique(history.begin() + static_cast<int64_t>(first), history.end()), history.end());
      }
      d.history_count = static_cast<int32_t>(history.size()) - d.history_begin;
    }
    const SampleArea& a = *sample_;
    if (history.size() > a.history_capacity) {
      Ops::SampleTokens(logits, specs, n_valid, out);
      return;
    }
    char* host = a.host.get();
    std::memcpy(host + a.specs_offset, row_specs.data(), rows * sizeof(cuda::TopKRowSpec));
    std::memcpy(host + a.history_offset, history.data(), history.size() * sizeof(int32_t));
    char* dev = static_cast<char*>(a.dev.get());
    // specs and history are adjacent: one upload
    HYMT_CUDA_CHECK(cudaMemcpyAsync(dev + a.specs_offset, host + a.specs_offset,
                                    a.history_offset - a.specs_offset + history.size() * sizeof(int32_t),
                                    cudaMemcpyHostToDevice, stream_));
    auto* scores = reinterpret_cast<float*>(dev + a.scores_offset);
    auto* ids = reinterpret_cast<int32_t*>(dev + a.ids_offset);
    auto* flags = reinterpret_cast<int32_t*>(dev + a.flags_offset);
    cuda::LaunchTopKRows(logits.data, logits.dtype == DType::kF32, logits.rows, logits.stride, n_valid,
                         reinterpret_cast<const cuda::TopKRowSpec*>(dev + a.specs_offset),
                         reinterpret_cast<const int32_t*>(dev + a.history_offset), scores, ids, flags, stream_);
    // scores | ids | flags are adjacent: one download
    HYMT_CUDA_CHECK(cudaMemcpyAsync(host + a.scores_offset, dev + a.scores_offset, a.end_offset - a.scores_offset,
                                    cudaMemcpyDeviceToHost, stream_));
    HYMT_CUDA_CHECK(cudaStreamSynchronize(stream_));
    const float* hs = reinterpret_cast<const float*>(host + a.scores_offset);
    const int32_t* hi = reinterpret_cast<const int32_t*>(host + a.ids_offset);
    const int32_t* hf = reinterpret_cast<const int32_t*>(host + a.flags_offset);
    for (size_t r = 0; r < rows; ++r) {
      const SampleSpec& s = specs[r];
      if (hf[r] == 1) {
        out[r] = kNonFiniteLogits;
      } else if (hf[r] != 0) {  // too many ties at the k-th score: the host takes the row
        Ops::SampleTokens(logits.Rows(static_cast<int64_t>(r), 1), specs.subspan(r, 1), n_valid, out.subspan(r, 1));
      } else if (s.temperature <= 0) {
        out[r] = hi[r * cuda::kMaxTopK];
      } else {
        const size_t k = static_cast<size_t>(std::min(s.top_k, n_valid));
        out[r] = SampleFromTopK(std::span<const float>(hs + r * cuda::kMaxTopK, k),
                                std::span<const int32_t>(hi + r * cuda::kMaxTopK, k), s);
      }
    }
  }

  // ---- layer streaming (streaming.cu): staged in the PrepareWeight layout, copied as is ----
  bool CanStream() const override { return true; }
  std::unique_ptr<Buffer> AllocateStreamHost(size_t bytes, const std::string& what) override {
    return cuda::AllocatePinnedHost(bytes, what);
  }
  size_t StreamWeightBytes(const Weight& host) override {
    return LayoutFor(host.dtype, host.rows, host.cols).total;
  }
  Weight StageStreamWeight(const Weight& host, void* dst) override {
    HYMT_CUDA_EXPECT(host.data != nullptr && host.rows > 0 && host.cols > 0, "weight ", host.name);
    HYMT_CUDA_EXPECT(host.cols % GetDTypeInfo(host.dtype).block_size == 0, "weight ", host.name);
    if (host.dtype == DType::kI32) Fail(ErrorCode::kUnsupported, "cuda: weight ", host.name, " is i32");
    const WeightLayout layout = LayoutFor(host.dtype, host.rows, host.cols);
    std::vector<float> tmp;
    FillChunk(host, layout, 0, host.rows, static_cast<char*>(dst), tmp);
    Weight w = host;
    w.dtype = layout.device_type;
    w.data = dst;
    w.prepared = nullptr;
    return w;
  }
  uint64_t UploadAsync(const void* host, void* device_dst, size_t bytes) override {
    ExpectEager("UploadAsync");
    Bind(device_);
    return uploader_.Upload(stream_, host, device_dst, bytes);
  }
  void WaitUpload(uint64_t ticket) override {
    ExpectEager("WaitUpload");
    Bind(device_);
    uploader_.Wait(stream_, ticket);
  }

  // ---- graphs ----
  void BeginCapture() override {
    ExpectEager("BeginCapture");
    Bind(device_);
    ResetForGraph();
    trace_.clear();
    capture_slots_.clear();
    capture_failed_ = false;
    capture_reads_host_ = false;
    HYMT_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    mode_ = Mode::kCapture;
  }

  std::unique_ptr<CudaGraph> EndCapture() override {
    HYMT_CUDA_EXPECT(mode_ == Mode::kCapture, "EndCapture without BeginCapture");
    Bind(device_);
    mode_ = Mode::kEager;
    has_batch_ = step_in_graph_ && has_batch_;
    cudaGraph_t graph = nullptr;
    HYMT_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
    if (capture_failed_) {
      if (graph != nullptr) cudaGraphDestroy(graph);
      trace_.clear();
      has_batch_ = false;
      Fail(ErrorCode::kInvalidArgument, "cuda: an op failed during the capture; no graph was made");
    }
    auto g = std::make_unique<GraphImpl>();
    const cudaError_t err = cudaGraphInstantiate(&g->exec, graph, 0);
    cudaGraphDestroy(graph);
    HYMT_CUDA_CHECK(err);
    g->begin_step_words = trace_.empty() || trace_[0] != kOpBeginStep ? 0 : kBeginStepWords;
    g->kv_pages = validated_pages_;
    g->batch_bytes = batch_area_.used;
    g->ops_bytes = ops_area_.used;
    g->reads_host = capture_reads_host_;
    g->trace = std::move(trace_);
    g->slots = std::move(capture_slots_);
    g->owner = this;
    trace_.clear();
    capture_slots_.clear();
    Launch(*g);
    return g;
  }

  void BeginReplay(CudaGraph& graph) override {
    ExpectEager("BeginReplay");
    EnterReplay(OwnGraph(graph));
  }

  bool EndReplay() override {
    HYMT_CUDA_EXPECT(mode_ == Mode::kReplay, "EndReplay without BeginReplay");
    Bind(device_);
    mode_ = Mode::kEager;
    GraphImpl* g = replay_;
    replay_ = nullptr;
    const bool ok = replay_ok_ && replay_pos_ == g->trace.size() && batch_area_.used == g->batch_bytes &&
                    ops_area_.used == g->ops_bytes;
    if (!ok) {
      has_batch_ = false;  // the staged batch was never uploaded: the caller runs BeginStep again
      return false;
    }
    g->validated = true;
    Launch(*g);
    return true;
  }

  bool FastReplay(CudaGraph& graph, const StepBatch& batch, std::span<const std::span<const int32_t>> args,
                  int feed_ticket) override {
    ExpectEager("FastReplay");
    GraphImpl* g = OwnGraph(graph);
    if (!g->validated || g->begin_step_words == 0 || args.size() != g->slots.size()) return false;
    const GreedyIds* feed = nullptr;
    if (feed_ticket >= 0) {
      feed = &Ticket(feed_ticket);
      if (args.empty() || g->reads_host || g->slots[0].bytes != feed->rows * sizeof(int32_t)) return false;
    }
    for (size_t i = 0; i < args.size(); ++i)
      if (g->slots[i].bound < 0 || args[i].size() * sizeof(int32_t) != g->slots[i].bytes) return false;
    EnterReplay(g);
    try {
      BeginStep(batch);  // validates and stages the batch; its trace words must be the capture's
    } catch (...) {
      mode_ = Mode::kEager;
      replay_ = nullptr;
      has_batch_ = false;
      throw;
    }
    mode_ = Mode::kEager;
    replay_ = nullptr;
    if (!replay_ok_ || replay_pos_ != g->begin_step_words || batch_area_.used != g->batch_bytes) {
      has_batch_ = false;
      return false;
    }
    if (g->kv_pages >= 0) {  // what Kv() checks on the first KV op of a step
      for (const StepBatch::Seq& q : batch_.seqs) {
        const int32_t used = (q.n_past + q.n_rows + batch_.page_size - 1) / batch_.page_size;
        for (int32_t i = 0; i < used; ++i) {
          const int32_t p = batch_.pages[static_cast<size_t>(q.first_page + i)];
          if (p < 0 || p >= g->kv_pages) {
            has_batch_ = false;
            Fail(ErrorCode::kInvalidArgument, "cuda: KV page ", p, " of ", g->kv_pages);
          }
        }
      }
      validated_pages_ = g->kv_pages;
    }
    for (size_t i = 0; i < args.size(); ++i)
      for (int32_t v : args[i])
        if (v < 0 || v >= g->slots[i].bound) {
          has_batch_ = false;
          Fail(ErrorCode::kInvalidArgument, "cuda: graph argument ", v, " outside [0, ", g->slots[i].bound, ")");
        }
    for (size_t i = 0; i < args.size(); ++i)
      std::memcpy(ops_area_.host.get() + g->slots[i].offset, args[i].data(), g->slots[i].bytes);
    Launch(*g, feed);
    return true;
  }

  void* stream() const override { return stream_; }
  GraphTiming graph_timing() const override { return {graph_device_ns_.load(), graph_timed_.load()}; }
  size_t ScratchBytes() const override {
    return cublas_ws_.size() + dequant_.size() + attn_.size() + act_.size() + sums_.size() +
           batch_area_.dev.size() + ops_area_.dev.size() + sample_->dev.size() + argmax_scratch_.size();
  }
  void SetSimpleKernels(bool on) override { simple_ = on; }
  void Fill16(void* device_ptr, size_t n, uint16_t value) override {
    ExpectEager("Fill16");
    Bind(device_);
    cuda::LaunchFill16(device_ptr, static_cast<int64_t>(n), value, stream_);
  }

 private:
  enum class Mode { kEager, kCapture, kReplay };
  struct GreedyIds;

  GraphImpl* OwnGraph(CudaGraph& graph) const {
    auto* g = dynamic_cast<GraphImpl*>(&graph);
    HYMT_CUDA_EXPECT(g != nullptr && g->owner == this, "the graph was captured by another CudaOps");
    return g;
  }
  // Ops from here on are compared with g's trace instead of running (BeginReplay and FastReplay).
  void EnterReplay(GraphImpl* g) {
    Bind(device_);
    ResetForGraph();
    replay_ = g;
    replay_pos_ = 0;
    replay_ok_ = true;
    mode_ = Mode::kReplay;
  }

  // Every op starts with one: makes the device current and, when the op throws inside a capture or a
  // replay, marks that graph as failed (EndCapture throws, EndReplay returns false), so a half-recorded
  // step never runs.
  class OpScope {
   public:
    explicit OpScope(CudaOpsImpl& ops) : ops_(ops), exceptions_(std::uncaught_exceptions()) {
      Bind(ops.device_);
      ++ops.op_serial_;
    }
    OpScope(const OpScope&) = delete;
    OpScope& operator=(const OpScope&) = delete;
    ~OpScope() {
      if (std::uncaught_exceptions() > exceptions_) {
        if (ops_.mode_ == Mode::kCapture) ops_.capture_failed_ = true;
        if (ops_.mode_ == Mode::kReplay) ops_.replay_ok_ = false;
      }
    }

   private:
    CudaOpsImpl& ops_;
    int exceptions_;
  };
  struct Staged {
    const void* host = nullptr;
    const void* dev = nullptr;
  };

  // Calls that cannot be part of a graph; inside a capture or replay they also spoil that graph.
  void ExpectEager(const char* what) {
    if (mode_ == Mode::kEager) return;
    if (mode_ == Mode::kCapture) capture_failed_ = true;
    if (mode_ == Mode::kReplay) replay_ok_ = false;
    Fail(ErrorCode::kInvalidArgument, "cuda: ", what, " inside a graph capture or replay");
  }
  void ExpectBatch(const char* what) const {
    if (!has_batch_) Fail(ErrorCode::kInvalidArgument, "cuda: ", what, " before BeginStep (in this graph)");
  }
  static void ExpectBf16(const Tensor& t, const char* what) {
    if (t.dtype != DType::kBF16)
      Fail(ErrorCode::kUnsupported, "cuda: ", what, " is ", DTypeName(t.dtype),
           "; the CUDA backend computes in bf16");
    HYMT_CUDA_EXPECT(t.rows == 0 || (t.data != nullptr && t.stride >= t.cols), what);
  }
  static bool Aligned16(const Tensor& t) {
    return reinterpret_cast<uintptr_t>(t.data) % 16 == 0 && t.stride % 8 == 0;
  }
  static MatView Mat(const Tensor& t) { return MatView{t.data, t.rows, t.cols, t.stride}; }
  static MatView SubRows(MatView m, int64_t first, int64_t n, int elem_bytes) {
    m.data = static_cast<char*>(m.data) + first * m.stride * elem_bytes;
    m.rows = n;
    return m;
  }

  WeightView View(const Weight& w, const char* op) const {
    if (w.device.kind != DeviceKind::kCuda || w.device.index != device_ || w.data == nullptr)
      Fail(ErrorCode::kInvalidArgument, "cuda: ", op, ": weight ", w.name,
           " is not prepared for cuda:", device_, " (call PrepareWeight)");
    return WeightView{w.dtype, w.rows, w.cols, w.data, w.scale};
  }
  // A [1, n] vector weight (norm weights, inv_freq) in f32, f16 or bf16.
  WeightView VectorView(const Weight& w, int64_t n, const char* op) const {
    const WeightView v = View(w, op);
    HYMT_CUDA_EXPECT(w.rows == 1 && w.cols == n, op, ": weight ", w.name, " is [", w.rows, ",", w.cols,
                     "], want [1,", n, "]");
    if (w.dtype != DType::kF32 && w.dtype != DType::kF16 && w.dtype != DType::kBF16)
      Fail(ErrorCode::kUnsupported, "cuda: ", op, ": vector weight ", w.name, " is ", DTypeName(w.dtype));
    return v;
  }

  KvView Kv(const KvLayerView& kv) {
    if (kv.dtype != DType::kBF16 && kv.dtype != DType::kF16 && kv.dtype != DType::kF32)
      Fail(ErrorCode::kUnsupported, "cuda: KV cache of ", DTypeName(kv.dtype), " (bf16, f16 or f32)");
    HYMT_CUDA_EXPECT(kv.k != nullptr && kv.v != nullptr && kv.n_kv_heads > 0 && kv.head_dim > 0);
    HYMT_CUDA_EXPECT(kv.page_size == batch_.page_size, "KV pages of ", kv.page_size,
                     " positions, batch says ", batch_.page_size);
    // Every page a sequence uses this step must exist (checked once per step and pool size).
    if (validated_pages_ != kv.n_pages) {
      for (const StepBatch::Seq& s : batch_.seqs) {
        const int32_t used = (s.n_past + s.n_rows + batch_.page_size - 1) / batch_.page_size;
        for (int32_t i = 0; i < used; ++i) {
          const int32_t p = batch_.pages[static_cast<size_t>(s.first_page + i)];
          if (p < 0 || p >= kv.n_pages)
            Fail(ErrorCode::kInvalidArgument, "cuda: KV page ", p, " of ", kv.n_pages);
        }
      }
      validated_pages_ = kv.n_pages;
    }
    return KvView{kv.k, kv.v, kv.dtype, kv.n_kv_heads, kv.head_dim, kv.page_size};
  }

  void ValidateBatch(const StepBatch& b) const {
    const int32_t n = b.n_rows();
    HYMT_CUDA_EXPECT(b.page_size > 0 && static_cast<int32_t>(b.row_seq.size()) == n);
    for (size_t s = 0; s < b.seqs.size(); ++s) {
      const StepBatch::Seq& q = b.seqs[s];
      HYMT_CUDA_EXPECT(q.first_row >= 0 && q.n_rows >= 0 && q.first_row + q.n_rows <= n && q.n_past >= 0,
                       "sequence ", s);
      HYMT_CUDA_EXPECT(q.first_page >= 0 &&
                           q.first_page + q.n_pages <= static_cast<int32_t>(b.pages.size()) &&
                           static_cast<int64_t>(q.n_pages) * b.page_size >= q.n_past + q.n_rows,
                       "sequence ", s, " page table");
      for (int32_t r = 0; r < q.n_rows; ++r)
        HYMT_CUDA_EXPECT(b.row_seq[static_cast<size_t>(q.first_row + r)] == static_cast<int32_t>(s) &&
                             b.positions[static_cast<size_t>(q.first_row + r)] == q.n_past + r,
                         "row ", q.first_row + r, " of sequence ", s);
    }
  }

  // Decode attention's grid of splits: enough blocks to fill the GPU twice over, and what the scratch holds.
  // Each row takes as many of them as its own context asks for (cuda::AttnRowSplits: at least
  // SplitMinPositions() positions per split of its bucketed context), which the kernels work out on the
  // device, so the grid depends on the batch's shape alone and a step's graph replays while contexts grow
  // (to the page tables' padding, 1,024 tokens). HYMT_GRAPH_CTX_BUCKETS=1 (a measurement switch) caps the
  // grid by the batch's longest context bucket as before, which the step's graph then records
  // (CtxBucketWord): a graph is captured again at each power of two.
  int Splits(int n_decode, int n_heads, int n_kv_heads, int head_dim) const {
    if (n_decode == 0) return 1;
    const int want = WantSplits(n_decode, n_kv_heads);
    const size_t per_split = static_cast<size_t>(n_decode) * n_heads * (head_dim + 2) * sizeof(float);
    const int by_scratch = static_cast<int>(std::min<size_t>(kMaxSplits, attn_.size() / per_split));
    const int by_ctx = CtxBuckets() ? std::max(1, ctx_bucket_ / SplitMinPositions()) : kMaxSplits;
    return std::max(1, std::min({want, by_ctx, by_scratch}));
  }
  // The splits that fill the GPU twice over: at least 1, at most kMaxSplits.
  int WantSplits(int n_decode, int n_kv_heads) const {
    const int64_t blocks = std::max<int64_t>(1, static_cast<int64_t>(n_decode) * n_kv_heads);
    return static_cast<int>(std::clamp<int64_t>((2 * sm_count_ + blocks - 1) / blocks, 1, kMaxSplits));
  }
  static int SplitMinPositions() {
    static const int v = std::max(1, cuda::EnvInt("HYMT_ATTN_SPLIT_MIN", cuda::kAttnSplitMinPositions));
    return v;
  }
  static bool CtxBuckets() {
    static const bool v = cuda::EnvEquals("HYMT_GRAPH_CTX_BUCKETS", "1");
    return v;
  }
  // BeginStep's trace word for the contexts: 0, or under HYMT_GRAPH_CTX_BUCKETS=1 the longest one's bucket.
  int64_t CtxBucketWord() const { return CtxBuckets() ? ctx_bucket_ : 0; }
  // BeginStep's trace word for decode attention's clusters: the size the step's longest context takes
  // (AttnClusterSplits), so that a graph is captured again where the size changes with the context; 0
  // where the decode rows fill the GPU without splits (the kv heads of the last Attention; before any,
  // 1), so that a large batch is not captured again as its contexts grow.
  int64_t ClusterWord() const {
    if (decode_rows_.empty() || CtxBuckets()) return 0;
    const int want = WantSplits(static_cast<int>(decode_rows_.size()), std::max(1, attn_kv_heads_));
    return cuda::AttnClusterSplits(want, cc_major_, longest_ctx_);
  }

  // Row counts up to which MatMul runs GEMV passes for a weight type (above: GEMM).
  static int64_t GemvMaxRows(DType t) { return t == DType::kBF16 ? cuda::kGemvMaxRows : kQuantGemvMaxRows; }

  // True when a fused op's products run as GEMV launches: fast kernels on, x a bf16 decode-sized input
  // that every weight (and `up`) takes on the fast GEMV path, weights of one type and width; SwiGLU
  // (`up`) for one token row only (see gemv.cu).
  bool FusedGemv(const Tensor& x, std::span<const cuda::GemvPart> parts, const WeightView* up) const {
    if (simple_ || x.dtype != DType::kBF16 || x.rows == 0 || x.device.kind != DeviceKind::kCuda) return false;
    const MatView xm = Mat(x);
    const WeightView& w0 = parts[0].w;
    if (x.rows > GemvMaxRows(w0.dtype) || x.cols != w0.cols) return false;
    for (const cuda::GemvPart& p : parts)
      if (p.w.dtype != w0.dtype || p.w.cols != w0.cols || !cuda::GemvFastSupported(p.w, xm)) return false;
    return up == nullptr || (x.rows == 1 && cuda::GemvFastSupported(*up, xm));
  }

  // GEMV launches over x in passes of kGemvMaxRows token rows.
  void RunGemv(std::span<const cuda::GemvPart> parts, MatView x, bool out_f32, cuda::GemvEpilogue epi,
               const WeightView* up, const cuda::GemvNorm* norm = nullptr) {
    std::vector<cuda::GemvPart> pass(parts.begin(), parts.end());
    for (int64_t t0 = 0; t0 < x.rows; t0 += cuda::kGemvMaxRows) {
      const int64_t n = std::min<int64_t>(cuda::kGemvMaxRows, x.rows - t0);
      for (size_t i = 0; i < parts.size(); ++i) pass[i].out = SubRows(parts[i].out, t0, n, out_f32 ? 4 : 2);
      cuda::LaunchGemvParts(pass, SubRows(x, t0, n, 2), out_f32, epi, up, act_.get(), act_.size(), stream_, norm);
    }
  }

  // A fused norm (norm != null) for these products: the int8 GEMV takes it in every pass of RunGemv; with
  // `sums` (NormSums), from the sums of squares the op before wrote.
  bool NormFusable(const Tensor& x, const Weight* norm, DType t, const float* sums) const {
    const size_t act = act_.get() != nullptr ? act_.size() : 0;
    if (norm == nullptr) return false;
    if (sums != nullptr) return cuda::GemvSumsFusable(t, x.rows, x.cols, act);
    return cuda::GemvNormFusable(t, std::min<int64_t>(x.rows, cuda::kGemvMaxRows), x.cols, act);
  }

  // x's sums of squares where the op just before this one (no OpScope since) was a MatMulAdd that wrote them
  // for x; else null. Call it before the op's OpScope.
  const float* NormSums(const Tensor& x) const {
    // HYMT_NORM_SUMS=2 (a measurement switch): the sums are written but not used (RmsNorm runs).
    static const bool unused = cuda::EnvEquals("HYMT_NORM_SUMS", "2");
    if (unused) return nullptr;
    const SumsOf& s = sums_of_;
    return s.sums != nullptr && s.serial == op_serial_ && s.x == x.data && s.cols == x.cols && x.rows == 1
               ? s.sums
               : nullptr;
  }

  // MatMulGroup (norm == null) or NormMatMulGroup as one GEMV launch per pass; false when the default
  // sequence must run instead.
  bool GroupGemv(const Tensor& x, const Weight* norm, float eps, std::span<const Weight* const> ws,
                 std::span<const Tensor> outs) {
    HYMT_CUDA_EXPECT(ws.size() == outs.size() && !ws.empty(), ws.size(), " weights for ", outs.size(), " outputs");
    std::vector<cuda::GemvPart> parts;
    bool fused = ws.size() <= static_cast<size_t>(cuda::kGemvMaxParts);
    for (size_t i = 0; i < ws.size() && fused; ++i) {
      fused = ws[i]->device.kind == DeviceKind::kCuda && outs[i].dtype == DType::kBF16 &&
              outs[i].rows == x.rows && outs[i].cols == ws[i]->rows;
      if (fused) parts.push_back({View(*ws[i], "MatMulGroup"), Mat(outs[i])});
    }
    if (!fused) return false;
    // Weights of more than one type (a _K_M file's layers with a q6_k attn_v beside q4_k q and k): one
    // launch for both types where LaunchGemvTwoTypes takes them (one token row), else one launch per type,
    // each fused, instead of one per weight. The norm is then not fused.
    std::vector<std::vector<cuda::GemvPart>> runs;
    for (const cuda::GemvPart& p : parts) {
      auto it = std::find_if(runs.begin(), runs.end(), [&](const auto& r) { return r[0].w.dtype == p.w.dtype; });
      if (it == runs.end()) {
        runs.push_back({p});
      } else {
        it->push_back(p);
      }
    }
    // A norm over weights of two types is fused only from the sums of squares (NormSums).
    const float* sums = norm != nullptr ? NormSums(x) : nullptr;
    if (runs.size() > 1 && ((norm != nullptr && sums == nullptr) || cuda::GemvMixedGroups() == 0))
      return false;  // one launch a weight
    for (const std::vector<cuda::GemvPart>& r : runs) {
      if (!FusedGemv(x, r, nullptr)) return false;
      if (norm != nullptr && !NormFusable(x, norm, r[0].w.dtype, sums)) return false;
    }
    const OpScope scope(*this);
    cuda::GemvNorm nv{};
    std::vector<int64_t> words = {norm != nullptr ? kOpNormMatMulGroup : kOpMatMulGroup, Ptr(x.data), x.rows, x.cols,
                                  x.stride};
    if (norm != nullptr) {
      nv = {VectorView(*norm, x.cols, "NormMatMulGroup"), eps, sums, sums_of_.parts};
      words.insert(words.end(), {Ptr(nv.w.data), static_cast<int64_t>(nv.w.dtype), Bits(eps), Ptr(sums)});
    }
    for (const cuda::GemvPart& p : parts)
      words.insert(words.end(), {Ptr(p.w.data), static_cast<int64_t>(p.w.dtype), p.w.rows, p.w.cols, Bits(p.w.scale),
                                 Ptr(p.out.data), p.out.stride});
    Trace(words);
    if (!Launching() || Skip(8)) return true;
    if (runs.size() == 2 && cuda::LaunchGemvTwoTypes(runs[0], runs[1], Mat(x), act_.get(), act_.size(),
                                                     stream_, norm != nullptr ? &nv : nullptr))
      return true;
    for (const std::vector<cuda::GemvPart>& r : runs)
      RunGemv(r, Mat(x), false, cuda::GemvEpilogue::kStore, nullptr, norm != nullptr ? &nv : nullptr);
    return true;
  }

  // MatMulSwiGlu (norm == null) or NormMatMulSwiGlu as one GEMV launch; false when the default sequence must
  // run instead.
  bool SwiGluGemv(const Tensor& x, const Weight* norm, float eps, const Weight& gate, const Weight& up, Tensor out) {
    const bool shapes = out.dtype == DType::kBF16 && out.rows == x.rows && out.cols == gate.rows &&
                        up.rows == gate.rows && up.cols == gate.cols && up.dtype == gate.dtype &&
                        gate.device.kind == DeviceKind::kCuda && up.device.kind == DeviceKind::kCuda;
    if (!shapes) return false;
    std::vector<cuda::GemvPart> parts = {{View(gate, "MatMulSwiGlu"), Mat(out)}};
    const WeightView uv = View(up, "MatMulSwiGlu");
    const float* sums = norm != nullptr ? NormSums(x) : nullptr;
    if (!FusedGemv(x, parts, &uv) || (norm != nullptr && !NormFusable(x, norm, parts[0].w.dtype, sums)))
      return false;
    const OpScope scope(*this);
    const WeightView& gv = parts[0].w;
    cuda::GemvNorm nv{};
    std::vector<int64_t> words = {norm != nullptr ? kOpNormMatMulSwiGlu : kOpMatMulSwiGlu, Ptr(x.data), x.rows,
                                  x.cols, x.stride, Ptr(gv.data), static_cast<int64_t>(gv.dtype), gv.rows, gv.cols,
                                  Bits(gv.scale), Ptr(uv.data), Bits(uv.scale), Ptr(out.data), out.stride};
    if (norm != nullptr) {
      nv = {VectorView(*norm, x.cols, "NormMatMulSwiGlu"), eps, sums, sums_of_.parts};
      words.insert(words.end(), {Ptr(nv.w.data), static_cast<int64_t>(nv.w.dtype), Bits(eps), Ptr(sums)});
    }
    Trace(words);
    if (!Launching() || Skip(32)) return true;
    RunGemv(parts, Mat(x), false, cuda::GemvEpilogue::kSwiGlu, &uv, norm != nullptr ? &nv : nullptr);
    return true;
  }

  // out = x * W^T with tensor cores: bf16 weights directly, others through bf16 slabs of the weight.
  void Gemm(const WeightView& w, MatView x, MatView out, bool out_f32) {
    const float alpha = w.scale, beta = 0.0f;
    const cudaDataType_t out_type = out_f32 ? CUDA_R_32F : CUDA_R_16BF;
    const int elem = out_f32 ? 4 : 2;
    auto gemm = [&](const void* a, int64_t n0, int64_t ns) {
      // Column-major view: C[N, T] (= out row-major [T, N]) = op(A)[N, K] * B[K, T] with A = W (row-major
      // [N, K] is column-major [K, N], so transposed) and B = x (row-major [T, K] is column-major [K, T]).
      HYMT_CUBLAS_CHECK(cublasGemmEx(
          cublas_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(ns), static_cast<int>(x.rows),
          static_cast<int>(w.cols), &alpha, a, CUDA_R_16BF, static_cast<int>(w.cols), x.data, CUDA_R_16BF,
          static_cast<int>(x.stride), &beta, static_cast<char*>(out.data) + n0 * elem, out_type,
          static_cast<int>(out.stride), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    };
    if (w.dtype == DType::kBF16) {
      gemm(w.data, 0, w.rows);
      return;
    }
    const int64_t fit = static_cast<int64_t>(dequant_.size() / (static_cast<size_t>(w.cols) * 2));
    if (fit == 0)
      Fail(ErrorCode::kUnsupported, "cuda: a row of ", w.cols,
           " columns does not fit the dequantisation slab (", FormatBytes(dequant_.size()), ")");
    const int64_t slab = fit >= 64 ? fit / 64 * 64 : fit;
    uint16_t* scratch = static_cast<uint16_t*>(dequant_.get());
    for (int64_t n0 = 0; n0 < w.rows; n0 += slab) {
      const int64_t ns = std::min(slab, w.rows - n0);
      cuda::LaunchDequantRows(w, n0, ns, scratch, stream_);
      gemm(scratch, n0, ns);  // the next slab's dequantisation waits for this GEMM (same stream)
    }
  }

  // ---- staging and graphs ----
  // Copies `bytes` from src into the area's pinned host memory and (upload) on to its device copy. In a
  // capture, ops_area_ staging is recorded as a slot of the graph (bound: see GraphImpl::Slot), and the
  // upload is left to Launch.
  Staged Stage(StagingArea& area, const void* src, size_t bytes, bool upload, int64_t bound = -1) {
    if (mode_ == Mode::kReplay && !replay_ok_) return {};
    if (mode_ == Mode::kEager && area.graph_pending) {
      // A graph launched since: its upload of these bytes may not have run yet.
      HYMT_CUDA_CHECK(cudaEventSynchronize(area.done.get()));
      area.graph_pending = false;
    }
    size_t off = RoundUp(area.used, kStagingAlign);
    if (off + bytes > area.capacity) {
      if (bytes > area.capacity || mode_ != Mode::kEager)
        Fail(ErrorCode::kResourceExhausted, "cuda: op arguments need more than ", FormatBytes(area.capacity),
             " of staging in one ", mode_ == Mode::kEager ? "call" : "graph",
             " (CudaOpsOptions::staging_bytes)");
      HYMT_CUDA_CHECK(cudaEventSynchronize(area.done.get()));  // every earlier upload has read its bytes
      off = 0;
    }
    char* host = area.host.get() + off;
    char* dev = static_cast<char*>(area.dev.get()) + off;
    if (bytes > 0) std::memcpy(host, src, bytes);
    area.used = off + bytes;
    if (mode_ == Mode::kCapture && &area == &ops_area_) capture_slots_.push_back({off, bytes, bound});
    if (mode_ == Mode::kCapture && !upload) capture_reads_host_ = true;
    if (upload && bytes > 0 && mode_ == Mode::kEager) {
      HYMT_CUDA_CHECK(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, stream_));
      if (mode_ == Mode::kEager) HYMT_CUDA_CHECK(cudaEventRecord(area.done.get(), stream_));
    }
    return {host, dev};
  }

  // Graphs stage from offset 0 of both areas, so capture and replay use the same addresses.
  void ResetForGraph() {
    HYMT_CUDA_CHECK(cudaEventSynchronize(batch_area_.done.get()));
    HYMT_CUDA_CHECK(cudaEventSynchronize(ops_area_.done.get()));
    batch_area_.used = 0;
    ops_area_.used = 0;
    step_in_graph_ = false;
    has_batch_ = false;
  }

  // Uploads the graph's staged bytes (and the fed ids over the Embed slot), then launches it. The areas'
  // `done` follows the uploads, so the host may stage the next step while this one runs. The uploads are one
  // kernel reading the pinned areas (StageByKernel): on an H100 the time between two batch-1 decode graphs
  // went from 30-31 to 19 us against two copies from the host and one on the device (docs/BENCHMARKS.md).
  void Launch(GraphImpl& g, const GreedyIds* feed = nullptr) {
    ReadGraphTimes();
    if (StageByKernel(g)) {
      auto words = [](const StagingArea& a, size_t bytes) {
        return cuda::StageWords{reinterpret_cast<const int32_t*>(a.host_dev),
                                static_cast<int32_t*>(a.dev.get()),
                                static_cast<int64_t>(RoundUp(bytes, 4) / 4)};
      };
      // The fed ids' slot: int32 ids at a kStagingAlign offset, so whole words.
      const int32_t* fed = feed != nullptr ? static_cast<const int32_t*>(feed->dev.get()) : nullptr;
      const int64_t fed_first = fed != nullptr ? static_cast<int64_t>(g.slots[0].offset / 4) : 0;
      const int64_t fed_words = fed != nullptr ? static_cast<int64_t>(g.slots[0].bytes / 4) : 0;
      cuda::LaunchStageWords(words(batch_area_, g.batch_bytes), words(ops_area_, g.ops_bytes), fed, fed_first,
                             fed_words, stream_);
    } else {
      if (g.batch_bytes > 0)
        HYMT_CUDA_CHECK(cudaMemcpyAsync(batch_area_.dev.get(), batch_area_.host.get(), g.batch_bytes,
                                        cudaMemcpyHostToDevice, stream_));
      if (g.ops_bytes > 0)
        HYMT_CUDA_CHECK(cudaMemcpyAsync(ops_area_.dev.get(), ops_area_.host.get(), g.ops_bytes,
                                        cudaMemcpyHostToDevice, stream_));
      if (feed != nullptr)
        HYMT_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(ops_area_.dev.get()) + g.slots[0].offset,
                                        feed->dev.get(), g.slots[0].bytes, cudaMemcpyDeviceToDevice,
                                        stream_));
    }
    auto uploaded = [&] {
      HYMT_CUDA_CHECK(cudaEventRecord(batch_area_.done.get(), stream_));
      HYMT_CUDA_CHECK(cudaEventRecord(ops_area_.done.get(), stream_));
      batch_area_.graph_pending = ops_area_.graph_pending = true;
    };
    if (!g.reads_host) uploaded();
    GraphTimer& t = graph_timers_[next_timer_];
    next_timer_ = (next_timer_ + 1) % kGraphTimers;
    t.pending = false;  // a launch still running when its timer comes round again goes untimed
    HYMT_CUDA_CHECK(cudaEventRecord(t.begin.get(), stream_));
    HYMT_CUDA_CHECK(cudaGraphLaunch(g.exec, stream_));
    HYMT_CUDA_CHECK(cudaEventRecord(t.end.get(), stream_));
    t.pending = true;
    if (g.reads_host) uploaded();  // its copies from pinned staging run inside the graph
  }

  // True when Launch copies g's staged bytes with one kernel (LaunchStageWords) rather than two copies from
  // the host and one on the device: by default (HYMT_STAGE_KERNEL=0: the copies) where both areas have a
  // device address for their pinned memory (set at construction) and no copy runs inside the graph.
  bool StageByKernel(const GraphImpl& g) const {
    static const bool on = !cuda::EnvEquals("HYMT_STAGE_KERNEL", "0");
    return on && !g.reads_host && batch_area_.host_dev != nullptr && ops_area_.host_dev != nullptr;
  }

  // Adds the device time of every timed launch that has finished, oldest first; never waits.
  void ReadGraphTimes() {
    for (int i = 1; i <= kGraphTimers; ++i) {
      GraphTimer& t = graph_timers_[(next_timer_ + i) % kGraphTimers];
      if (!t.pending) continue;
      float ms = 0;
      if (cudaEventQuery(t.end.get()) != cudaSuccess) {
        cudaGetLastError();  // still running (not an error)
        break;
      }
      if (cudaEventElapsedTime(&ms, t.begin.get(), t.end.get()) == cudaSuccess) {
        graph_device_ns_.fetch_add(static_cast<int64_t>(static_cast<double>(ms) * 1e6));
        graph_timed_.fetch_add(1);
      } else {
        cudaGetLastError();
      }
      t.pending = false;
    }
  }

  // Records (capture) or checks (replay) an op's arguments.
  void Trace(std::initializer_list<int64_t> words) { Trace(std::span<const int64_t>(words.begin(), words.size())); }
  void Trace(std::span<const int64_t> words) {
    if (mode_ == Mode::kCapture) {
      trace_.insert(trace_.end(), words.begin(), words.end());
    } else if (mode_ == Mode::kReplay && replay_ok_) {
      for (int64_t w : words) {
        if (replay_pos_ >= replay_->trace.size() || replay_->trace[replay_pos_] != w) {
          replay_ok_ = false;
          return;
        }
        ++replay_pos_;
      }
    }
  }
  bool Launching() const { return mode_ != Mode::kReplay; }
  // Measurement only (wrong results): HYMT_DECODE_SKIP=bits leaves out RMSNorm (1), RoPE + KV write (2),
  // attention (4), the GEMVs of q, k and v (8), o_proj (16), gate and up (32), down_proj with the launch
  // that quantises its rows (64).
  static bool Skip(int bit) {
    static const int skip = cuda::EnvInt("HYMT_DECODE_SKIP", 0);
    return (skip & bit) != 0;
  }

  const int device_;
  const CudaOpsOptions options_;
  int sm_count_ = 0;
  int cc_major_ = 0;  // compute capability (major), for kernels that need sm_80+
  cudaStream_t stream_ = nullptr;
  cudaStream_t ids_stream_ = nullptr;  // the greedy ids' copies to the host (LaunchGreedy)
  cublasHandle_t cublas_ = nullptr;
  DeviceMemory cublas_ws_, dequant_, attn_, act_;
  StagingArea batch_area_, ops_area_;
  std::unique_ptr<SampleArea> sample_;
  PinnedMemory upload_chunks_[2];
  static constexpr size_t kIdsCapacity = 64 << 10;  // ids of up to 16k rows per SampleTokens call
  static constexpr size_t kSampleRows = kSampleAreaRows;  // rows per top-k launch
  // Greedy ids of LaunchGreedy, two tickets (device result, its host copy, the copy's completion).
  struct GreedyIds {
    DeviceMemory dev;
    PinnedMemory host;
    Event ready;  // the argmax has written dev (ids_stream_ waits for it)
    Event done;
    size_t rows = 0;
    bool pending = false;
  };
  GreedyIds greedy_[2];
  int next_greedy_ = 0;
  DeviceMemory
      argmax_scratch_;  // LaunchArgmaxRows's, for both tickets (their launches take turns on stream_)
  // Sums of squares of a one-row residual, written by MatMulAdd's GEMV for the next NormMatMul op (two
  // buffers in turn, from the first at each BeginStep), and whose they are: the residual's data and width,
  // the buffer, and the op serial of the MatMulAdd (valid only for the op right after it).
  DeviceMemory sums_;
  int sums_next_ = 0;
  struct SumsOf {
    const void* x = nullptr;
    int64_t cols = 0;
    const float* sums = nullptr;
    uint64_t serial = 0;
    int parts = 0;  // as the launch returned (0 where nothing was launched: a replay through the ops)
  } sums_of_;
  uint64_t op_serial_ = 0;  // OpScopes entered
  GreedyIds& Ticket(int ticket) {
    HYMT_CUDA_EXPECT(ticket == 0 || ticket == 1, "unknown greedy ticket ", ticket);
    HYMT_CUDA_EXPECT(greedy_[ticket].pending, "greedy ticket ", ticket, " is not outstanding");
    return greedy_[ticket];
  }
  Event upload_done_[2];
  std::vector<DeviceMemory> weights_;
  cuda::Uploader uploader_;  // layer streaming's copies (a stream of their own)
  bool simple_ = false;

  // The current step (host mirror and device view).
  StepBatch batch_;
  bool has_batch_ = false;
  int64_t validated_pages_ = -1;
  BatchView view_;
  std::vector<int32_t> decode_rows_;
  bool one_row_per_seq_ = false;  // every sequence of the step decodes one row (RopeNormKvAttention fuses)
  std::vector<PrefillTile> tiles_[kTileVariants];
  const int32_t* decode_rows_dev_ = nullptr;
  const PrefillTile* tiles_dev_[kTileVariants] = {};
  int ctx_bucket_ = cuda::kAttnSplitMinPositions;  // the longest decode context's bucket (HYMT_GRAPH_CTX_BUCKETS=1)
  int longest_ctx_ = 0;                            // the step's longest decode context, in positions
  int attn_kv_heads_ = 0;                          // the last Attention's kv heads (ClusterWord)

  Mode mode_ = Mode::kEager;
  // Device time of replayed graphs (events around each launch, read at later launches once finished).
  struct GraphTimer {
    Event begin{true}, end{true};
    bool pending = false;
  };
  static constexpr int kGraphTimers = 4;
  GraphTimer graph_timers_[kGraphTimers];
  int next_timer_ = 0;
  std::atomic<int64_t> graph_device_ns_{0}, graph_timed_{0};
  bool step_in_graph_ = false;
  bool capture_failed_ = false;
  bool capture_reads_host_ = false;
  std::vector<int64_t> trace_;
  GraphImpl* replay_ = nullptr;
  std::vector<GraphImpl::Slot> capture_slots_;
  size_t replay_pos_ = 0;
  bool replay_ok_ = false;
};

}  // namespace

int CudaDeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

std::string CudaDeviceName(int device) {
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    cudaGetLastError();
    return "";
  }
  return prop.name;
}

int64_t CudaProcessMemoryBytes() {
  FILE* p = popen("nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits 2>/dev/null", "r");
  if (p == nullptr) return -1;
  int64_t found = -1;
  long pid = 0, mib = 0;
  while (std::fscanf(p, "%ld, %ld", &pid, &mib) == 2)
    if (pid == static_cast<long>(getpid())) found = static_cast<int64_t>(mib) << 20;
  pclose(p);
  return found;
}

bool CudaMemoryInfo(int device, size_t* free_bytes, size_t* total_bytes) {
  int previous = -1;
  if (cudaGetDevice(&previous) != cudaSuccess || cudaSetDevice(device) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  const bool ok = cudaMemGetInfo(free_bytes, total_bytes) == cudaSuccess;
  if (!ok) cudaGetLastError();
  if (previous >= 0 && previous != device) cudaSetDevice(previous);
  return ok;
}

size_t CudaOpsScratchBytes(const CudaOpsOptions& o) {
  return o.cublas_workspace_bytes + o.dequant_scratch_bytes + o.attention_scratch_bytes +
         2 * o.staging_bytes + (o.int8_activations ? o.activation_scratch_bytes + kSumsBytes : 0) +
         SampleAreaBytes(o) + cuda::kArgmaxScratchBytes;
}

size_t CudaPreparedWeightBytes(DType dtype, int64_t rows, int64_t cols) {
  return LayoutFor(dtype, rows, cols).total;
}

double CudaReadBandwidth(int device, size_t bytes) { return cuda::MeasureReadBandwidth(device, bytes, 10); }

namespace {

// Two integer attributes of the device; false (and the error cleared) when it cannot say.
bool DeviceAttributes(int device, cudaDeviceAttr a, int* va, cudaDeviceAttr b, int* vb) {
  if (cudaDeviceGetAttribute(va, a, device) == cudaSuccess &&
      cudaDeviceGetAttribute(vb, b, device) == cudaSuccess)
    return true;
  (void)cudaGetLastError();
  return false;
}

}  // namespace

double CudaPeakMemoryBandwidth(int device) {
  int khz = 0, bits = 0;
  if (!DeviceAttributes(device, cudaDevAttrMemoryClockRate, &khz, cudaDevAttrGlobalMemoryBusWidth, &bits))
    return 0;
  return 2.0 * khz * 1e3 * bits / 8;  // double data rate
}

double CudaSmClockRate(int device) {
  int sms = 0, khz = 0;
  if (!DeviceAttributes(device, cudaDevAttrMultiProcessorCount, &sms, cudaDevAttrClockRate, &khz)) return 0;
  return static_cast<double>(sms) * khz * 1e3;
}

std::unique_ptr<Ops> CreateCudaOps(int device_index) {
  return CreateCudaOps(device_index, CudaOpsOptions{});
}

std::unique_ptr<Ops> CreateCudaOps(int device_index, const CudaOpsOptions& options) {
  return std::make_unique<CudaOpsImpl>(device_index, options);
}

CudaOps* AsCudaOps(Ops* ops) {
  return dynamic_cast<CudaOps*>(ops);
}

}  // namespace hymt
