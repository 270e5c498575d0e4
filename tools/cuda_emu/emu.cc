// The CPU stand-in's runtime: fibers for CUDA threads, synchronous streams, recorded graphs, a plain
// cuBLAS GEMM. See include/emu_cuda.h.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

dim3 threadIdx, blockIdx, blockDim, gridDim;

// Saves the callee-saved registers on the current stack, stores the stack pointer in *save, switches to
// `next` and restores what it saved there (x86-64 System V). glibc's swapcontext would also make a
// signal-mask system call per switch, which dominated the emulator's time.
extern "C" void EmuSwitchStack(void** save, void* next);
asm(R"(
  .text
  .globl EmuSwitchStack
  .type EmuSwitchStack, @function
EmuSwitchStack:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size EmuSwitchStack, .-EmuSwitchStack
)");

void EmuCheckAligned(const void* p, size_t alignment) {
  if (reinterpret_cast<uintptr_t>(p) % alignment != 0) {
    std::fprintf(stderr, "cuda_emu: misaligned %zu-byte access at %p (block %u,%u,%u thread %u)\n", alignment,
                 p, blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x);
    std::abort();
  }
}

void EmuFail(const char* what) {
  std::fprintf(stderr, "cuda_emu: %s (block %u,%u,%u thread %u)\n", what, blockIdx.x, blockIdx.y, blockIdx.z,
               threadIdx.x);
  std::abort();
}

namespace emu {
namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAsan = true;
#else
constexpr bool kAsan = false;
#endif

constexpr size_t kStackBytes = size_t{256} << 10;
constexpr size_t kUsedStackBytes = size_t{32} << 10;

struct Fiber {
  void* sp = nullptr;
  bool done = false;
  bool waiting = false;
};
struct Barrier {
  int arrived = 0;
  unsigned generation = 0;
};

void* g_scheduler_sp = nullptr;
std::vector<Fiber> g_fibers;
std::vector<std::unique_ptr<char[]>> g_stacks;
std::vector<uint64_t> g_shuffle;
std::vector<Barrier> g_warp_barrier;
std::vector<int> g_warp_live;
Barrier g_block_barrier;
int g_block_live = 0;
int g_current = -1;
uint64_t g_progress = 0;
const std::function<void()>* g_body = nullptr;

// Context switches, annotated for AddressSanitizer (it must know which stack is current).
const void* g_main_bottom = nullptr;
size_t g_main_size = 0;
void* g_main_fake = nullptr;

void SchedulerToFiber(int t) {
  if constexpr (kAsan) __sanitizer_start_switch_fiber(&g_main_fake, g_stacks[t].get(), kStackBytes);
  EmuSwitchStack(&g_scheduler_sp, g_fibers[t].sp);
  if constexpr (kAsan) __sanitizer_finish_switch_fiber(g_main_fake, nullptr, nullptr);
}

// Back to the scheduler (from a fiber).
void Yield() {
  Fiber& f = g_fibers[g_current];
  f.waiting = true;
  void* fake = nullptr;
  if constexpr (kAsan) __sanitizer_start_switch_fiber(&fake, g_main_bottom, g_main_size);
  EmuSwitchStack(&f.sp, g_scheduler_sp);
  if constexpr (kAsan) __sanitizer_finish_switch_fiber(fake, &g_main_bottom, &g_main_size);
  g_fibers[g_current].waiting = false;
}

void Arrive(Barrier& b, int live) {
  const unsigned generation = b.generation;
  ++g_progress;
  if (++b.arrived >= live) {
    b.arrived = 0;
    ++b.generation;
    return;
  }
  while (b.generation == generation) Yield();
}

void Release(Barrier& b, int live) {
  if (b.arrived > 0 && b.arrived >= live) {
    b.arrived = 0;
    ++b.generation;
  }
}

void FiberEntry() {
  if constexpr (kAsan) __sanitizer_finish_switch_fiber(nullptr, &g_main_bottom, &g_main_size);
  (*g_body)();
  const int t = g_current;
  g_fibers[t].done = true;
  ++g_progress;
  --g_block_live;
  --g_warp_live[t / 32];
  // Exited threads count as arrived.
  Release(g_block_barrier, g_block_live);
  Release(g_warp_barrier[t / 32], g_warp_live[t / 32]);
  if constexpr (kAsan)
    __sanitizer_start_switch_fiber(nullptr, g_main_bottom, g_main_size);  // this fiber ends
  void* dead_sp;
  EmuSwitchStack(&dead_sp, g_scheduler_sp);
  __builtin_unreachable();
}

void RunBlock(const std::function<void()>& body) {
  const int n = static_cast<int>(blockDim.x * blockDim.y * blockDim.z);
  const int warps = (n + 31) / 32;
  if (n > 1024) {
    std::fprintf(stderr, "cuda_emu: block of %d threads\n", n);
    std::abort();
  }
  while (static_cast<int>(g_stacks.size()) < n) g_stacks.push_back(std::make_unique<char[]>(kStackBytes));
  g_fibers.assign(static_cast<size_t>(n), Fiber{});
  g_shuffle.assign(static_cast<size_t>(warps) * 32, 0);
  g_warp_barrier.assign(static_cast<size_t>(warps), Barrier{});
  g_warp_live.assign(static_cast<size_t>(warps), 0);
  for (int t = 0; t < n; ++t) ++g_warp_live[t / 32];
  g_block_barrier = Barrier{};
  g_block_live = n;
  g_body = &body;
  for (int t = 0; t < n; ++t) {
    // A fresh stack that EmuSwitchStack "returns" into FiberEntry from: six zero registers, the entry
    // address, and a fake return address so that FiberEntry starts with the ABI's alignment (rsp = 8 mod 16).
    // Frames of an earlier block's fibers never returned: clear their poisoning first (only the top of
    // the stack, where kernels' frames live; clearing all 256 KB per thread dominated large grids).
    if constexpr (kAsan)
      ASAN_UNPOISON_MEMORY_REGION(g_stacks[t].get() + kStackBytes - kUsedStackBytes, kUsedStackBytes);
    uintptr_t top = reinterpret_cast<uintptr_t>(g_stacks[t].get() + kStackBytes) & ~uintptr_t{15};
    void** sp = reinterpret_cast<void**>(top);
    *--sp = nullptr;
    *--sp = reinterpret_cast<void*>(&FiberEntry);
    for (int i = 0; i < 6; ++i) *--sp = nullptr;
    g_fibers[t].sp = sp;
  }
  for (;;) {
    bool any = false;
    const uint64_t before = g_progress;
    for (int t = 0; t < n; ++t) {
      if (g_fibers[t].done) continue;
      any = true;
      g_current = t;
      threadIdx = dim3(t % blockDim.x, (t / blockDim.x) % blockDim.y, t / (blockDim.x * blockDim.y));
      SchedulerToFiber(t);
    }
    if (!any) break;
    if (g_progress == before) {
      std::fprintf(stderr, "cuda_emu: deadlock in block (%u,%u,%u): threads wait at different barriers\n",
                   blockIdx.x, blockIdx.y, blockIdx.z);
      std::abort();
    }
  }
  g_current = -1;
}

// ---- streams, events, graphs ----
struct Graph {
  std::vector<std::function<void()>> ops;
};
cudaError_t g_last = cudaSuccess;
cudaError_t Err(cudaError_t e) {
  if (e != cudaSuccess) g_last = e;
  return e;
}

}  // namespace

int CurrentThread() {
  return g_current;
}
void Syncthreads() {
  Arrive(g_block_barrier, g_block_live);
}
void WarpSync() {
  Arrive(g_warp_barrier[g_current / 32], g_warp_live[g_current / 32]);
}
uint64_t& ShuffleSlot(int thread) {
  return g_shuffle[static_cast<size_t>(thread)];
}

namespace {
std::unique_ptr<uint4[]> g_dynamic_smem;
}  // namespace

uint4* DynamicSmem() {
  return g_dynamic_smem.get();
}

void SetDynamicSmem(size_t bytes) {
  g_dynamic_smem = bytes > 0 ? std::make_unique<uint4[]>((bytes + 15) / 16) : nullptr;
}

void RunGrid(dim3 grid, dim3 block, const std::function<void()>& body) {
  if (g_current >= 0) {
    std::fprintf(stderr, "cuda_emu: kernel launched from device code\n");
    std::abort();
  }
  gridDim = grid;
  blockDim = block;
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        blockIdx = dim3(x, y, z);
        RunBlock(body);
      }
}

}  // namespace emu

struct EmuStream {
  emu::Graph* capture = nullptr;
};
struct EmuEvent {};
struct EmuGraph : emu::Graph {};
struct EmuCublas {
  cudaStream_t stream = nullptr;
};

namespace emu {
void Enqueue(cudaStream_t s, std::function<void()> fn) {
  if (s != nullptr && s->capture != nullptr)
    s->capture->ops.push_back(std::move(fn));
  else
    fn();
}
}  // namespace emu

cudaError_t cudaGetDeviceCount(int* n) {
  *n = 1;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* d) {
  *d = 0;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int d) {
  return emu::Err(d == 0 ? cudaSuccess : cudaErrorInvalidValue);
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int d) {
  if (d != 0) return emu::Err(cudaErrorInvalidValue);
  std::memset(p, 0, sizeof(*p));
  std::snprintf(p->name, sizeof(p->name), "CPU emulation of an H200");
  p->multiProcessorCount = 132;  // the H200's, so that launch heuristics take the same branches
  p->totalGlobalMem = size_t{141} << 30;
  p->major = 9;
  return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total) {
  *free_bytes = size_t{140} << 30;
  *total = size_t{141} << 30;
  return cudaSuccess;
}
cudaError_t cudaMalloc(void** p, size_t bytes) {
  *p = nullptr;
  if (bytes > (size_t{1} << 40)) return emu::Err(cudaErrorMemoryAllocation);
  if (posix_memalign(p, 256, bytes == 0 ? 1 : bytes) != 0) return emu::Err(cudaErrorMemoryAllocation);
  return cudaSuccess;
}
cudaError_t cudaFree(void* p) {
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaMallocHost(void** p, size_t bytes) {
  return cudaMalloc(p, bytes);
}
cudaError_t cudaFreeHost(void* p) {
  return cudaFree(p);
}
cudaError_t cudaHostGetDevicePointer(void** dev, void* host, unsigned) {
  *dev = host;  // one address space, as under unified addressing
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind, cudaStream_t s) {
  emu::Enqueue(s, [=] { std::memcpy(dst, src, bytes); });
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t s) {
  emu::Enqueue(s, [=] { std::memset(dst, value, bytes); });
  return cudaSuccess;
}
cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                              size_t height, cudaMemcpyKind, cudaStream_t s) {
  if (width > dpitch || width > spitch) return emu::Err(cudaErrorInvalidValue);
  emu::Enqueue(s, [=] {
    for (size_t r = 0; r < height; ++r)
      std::memcpy(static_cast<char*>(dst) + r * dpitch, static_cast<const char*>(src) + r * spitch, width);
  });
  return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) {
  *s = new EmuStream;
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  delete s;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  return s != nullptr && s->capture != nullptr ? emu::Err(cudaErrorStreamCaptureUnsupported) : cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) {
  *e = new EmuEvent;
  return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t* e) {
  return cudaEventCreateWithFlags(e, 0);
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t, cudaEvent_t) {
  *ms = 1.0f;  // the emulator has no device clock
  return cudaSuccess;
}
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind) {
  std::memcpy(dst, src, bytes);
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete e;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t s) {
  // The backend never records events inside a capture; make it loud if that changes.
  return s != nullptr && s->capture != nullptr ? emu::Err(cudaErrorStreamCaptureUnsupported) : cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t) {
  return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t) {
  return cudaSuccess;  // work runs when it is issued: every recorded event has completed
}
// Every stream runs its work at once, so an event has always completed when a stream waits for it.
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t, unsigned) {
  return s != nullptr && s->capture != nullptr ? emu::Err(cudaErrorStreamCaptureUnsupported) : cudaSuccess;
}
cudaError_t cudaGetLastError() {
  const cudaError_t e = emu::g_last;
  emu::g_last = cudaSuccess;
  return e;
}
const char* cudaGetErrorName(cudaError_t e) {
  return e == cudaSuccess ? "cudaSuccess" : "cudaErrorEmulated";
}
const char* cudaGetErrorString(cudaError_t e) {
  return e == cudaErrorMemoryAllocation ? "out of memory" : "error";
}
cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode) {
  if (s->capture != nullptr) return emu::Err(cudaErrorInvalidValue);
  s->capture = new EmuGraph;
  return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* g) {
  if (s->capture == nullptr) return emu::Err(cudaErrorInvalidValue);
  *g = static_cast<EmuGraph*>(s->capture);
  s->capture = nullptr;
  return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t g, unsigned long long) {
  *exec = new EmuGraph(*g);
  return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t g) {
  delete g;
  return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t g) {
  delete g;
  return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t g, cudaStream_t s) {
  if (s->capture != nullptr) return emu::Err(cudaErrorInvalidValue);
  for (auto& op : g->ops) op();
  return cudaSuccess;
}

// ---- cuBLAS ----
cublasStatus_t cublasCreate(cublasHandle_t* h) {
  *h = new EmuCublas;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy(cublasHandle_t h) {
  delete h;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) {
  h->stream = s;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetWorkspace(cublasHandle_t, void*, size_t) {
  return CUBLAS_STATUS_SUCCESS;
}
const char* cublasGetStatusString(cublasStatus_t s) {
  return s == CUBLAS_STATUS_SUCCESS ? "success" : "error";
}

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void* alpha, const void* A, cudaDataType_t at, int lda, const void* B,
                            cudaDataType_t bt, int ldb, const void* beta, void* C, cudaDataType_t ct, int ldc,
                            cublasComputeType_t compute, cublasGemmAlgo_t) {
  if (ta != CUBLAS_OP_T || tb != CUBLAS_OP_N || at != CUDA_R_16BF || bt != CUDA_R_16BF ||
      (ct != CUDA_R_16BF && ct != CUDA_R_32F) || compute != CUBLAS_COMPUTE_32F || lda < k || ldb < k ||
      ldc < m)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  const float a = *static_cast<const float*>(alpha), b = *static_cast<const float*>(beta);
  emu::Enqueue(h->stream, [=] {
    const uint16_t* pa = static_cast<const uint16_t*>(A);
    const uint16_t* pb = static_cast<const uint16_t*>(B);
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < m; ++i) {
        float acc = 0;  // op(A)[i, p] = A[p + i lda]; B[p, j] = B[p + j ldb]
        for (int p = 0; p < k; ++p)
          acc += ::hymt::Bf16ToF32(pa[p + static_cast<size_t>(i) * lda]) *
                 ::hymt::Bf16ToF32(pb[p + static_cast<size_t>(j) * ldb]);
        const size_t c = i + static_cast<size_t>(j) * ldc;
        if (ct == CUDA_R_32F) {
          float* pc = static_cast<float*>(C);
          pc[c] = a * acc + (b != 0 ? b * pc[c] : 0.0f);
        } else {
          uint16_t* pc = static_cast<uint16_t*>(C);
          pc[c] = ::hymt::F32ToBf16(a * acc + (b != 0 ? b * ::hymt::Bf16ToF32(pc[c]) : 0.0f));
        }
      }
  });
  return CUBLAS_STATUS_SUCCESS;
}
