// A CPU stand-in for the parts of CUDA and cuBLAS that src/backends/cuda uses, so that the backend's
// kernels and its tests run (slowly) on a machine without a GPU. See tools/cuda_emu/run.sh.
//
// Device code: each CUDA thread of a block is a fiber; __syncthreads() and the warp shuffles are
// barriers between fibers; __shared__ variables become function statics (blocks run one at a time, so
// all threads of the running block share them). Kernel launches (rewritten from <<<...>>> by
// cu2cc.py) run the whole grid before returning. Streams are synchronous; graph capture records the
// operations and graph launch replays them (host memory is read at replay time, as on a GPU).
//
// This checks indexing, reductions, synchronisation structure and the host logic; it says nothing about
// speed, and it cannot see data races that need real concurrency.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <tuple>
#include <utility>

#include "core/half.h"

// ---- keywords ----
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...)
#define __restrict__

// ---- vector types ----
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
struct alignas(8) uint2 {
  unsigned x, y;
};
struct alignas(8) float2 {
  float x, y;
};
struct dim3 {
  unsigned x, y, z;
  dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) {
  return {a, b, c, d};
}
inline float2 make_float2(float a, float b) {
  return {a, b};
}

extern dim3 threadIdx, blockIdx, blockDim, gridDim;

// ---- half, bf16, fp8 (bit-exact round-to-nearest-even, via core/half.h) ----
struct __half {
  unsigned short x;
};
struct __half2 {
  unsigned short x, y;
};
struct __half2_raw {
  unsigned short x, y;
};
struct __nv_bfloat16 {
  unsigned short x;
};
typedef unsigned short __nv_fp8x2_storage_t;
enum __nv_fp8_interpretation_t { __NV_E4M3, __NV_E5M2 };
inline float __half2float(__half h) {
  return ::hymt::F16ToF32(h.x);
}
inline __half __ushort_as_half(unsigned short v) {
  return {v};
}
inline unsigned short __half_as_ushort(__half h) {
  return h.x;
}
inline __half __float2half_rn(float f) {
  return {::hymt::F32ToF16(f)};
}
inline float2 __half22float2(__half2 h) {
  return {::hymt::F16ToF32(h.x), ::hymt::F16ToF32(h.y)};
}
inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  return {::hymt::F32ToBf16(f)};
}
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 b) {
  return b.x;
}
inline float __bfloat162float(__nv_bfloat16 b) { return ::hymt::Bf16ToF32(b.x); }
inline __half2_raw __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t v, __nv_fp8_interpretation_t) {
  // e4m3 values are exact in f16.
  return {::hymt::F32ToF16(::hymt::F8E4M3ToF32(static_cast<uint8_t>(v & 0xff))),
          ::hymt::F32ToF16(::hymt::F8E4M3ToF32(static_cast<uint8_t>(v >> 8)))};
}

// ---- device intrinsics ----
void EmuCheckAligned(const void* p, size_t alignment);
// Reports a device-side failure the emulator detects (with the block and thread) and aborts.
void EmuFail(const char* what);
namespace emu {
int CurrentThread();
void Syncthreads();
void WarpSync();
uint64_t& ShuffleSlot(int thread);
}  // namespace emu

inline void __syncthreads() {
  emu::Syncthreads();
}
// Every thread of the block passes its predicate through its shuffle slot; all see the OR.
inline int __syncthreads_or(int predicate) {
  const int t = emu::CurrentThread();
  const int n = static_cast<int>(blockDim.x * blockDim.y * blockDim.z);
  emu::Syncthreads();
  emu::ShuffleSlot(t) = predicate != 0;
  emu::Syncthreads();
  int any = 0;
  for (int i = 0; i < n; ++i) any |= emu::ShuffleSlot(i) != 0;
  emu::Syncthreads();
  return any;
}
using std::isfinite;
template <typename T>
T __shfl_xor_sync(unsigned, T v, int lane_mask, int = 32) {
  static_assert(sizeof(T) <= 8);
  const int t = emu::CurrentThread();
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  emu::ShuffleSlot(t) = bits;
  emu::WarpSync();
  const uint64_t r = emu::ShuffleSlot((t & ~31) | ((t & 31) ^ lane_mask));
  emu::WarpSync();
  T out;
  std::memcpy(&out, &r, sizeof(T));
  return out;
}
template <typename T>
T __ldg(const T* p) {
  EmuCheckAligned(p, sizeof(T));
  return *p;
}
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
  uint8_t in[8];
  std::memcpy(in, &x, 4);
  std::memcpy(in + 4, &y, 4);
  unsigned r = 0;
  for (int n = 0; n < 4; ++n) r |= static_cast<unsigned>(in[(s >> (4 * n)) & 7]) << (8 * n);
  return r;
}
inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline float __int_as_float(int u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline int __float_as_int(float f) {
  int i;
  std::memcpy(&i, &f, 4);
  return i;
}
inline unsigned __float_as_uint(float f) {
  unsigned u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float __expf(float x) {
  return std::exp(x);
}
inline int __float2int_rn(float x) {
  return static_cast<int>(std::nearbyint(x));
}  // ties to even
inline int __dp4a(int a, int b, int c) {
  for (int i = 0; i < 4; ++i) c += static_cast<int8_t>(a >> (8 * i)) * static_cast<int8_t>(b >> (8 * i));
  return c;
}
inline float rsqrtf(float x) {
  return 1.0f / std::sqrt(x);
}
inline float __fmul_rn(float a, float b) {
  volatile float r = a * b;  // rounded to float here, never contracted with a later add
  return r;
}
inline float __fadd_rn(float a, float b) {
  volatile float r = a + b;
  return r;
}
// Blocks run one after another here, so a fence has nothing to order.
inline void __threadfence() {}
// Atomics: the fibers of a block switch only at barriers and shuffles, so a plain read-modify-write is
// atomic here.
template <typename T>
T atomicAdd(T* p, T v) {
  const T old = *p;
  *p = old + v;
  return old;
}
template <typename T>
T atomicSub(T* p, T v) {
  const T old = *p;
  *p = old - v;
  return old;
}
template <typename T>
T min(T a, T b) {
  return b < a ? b : a;
}
template <typename T>
T max(T a, T b) {
  return a < b ? b : a;
}

// ---- runtime API ----
enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorNoDevice = 100,
  cudaErrorStreamCaptureUnsupported = 900,
};
typedef struct EmuStream* cudaStream_t;
typedef struct EmuEvent* cudaEvent_t;
typedef struct EmuGraph* cudaGraph_t;
typedef struct EmuGraph* cudaGraphExec_t;
enum cudaMemcpyKind {
  cudaMemcpyHostToHost,
  cudaMemcpyHostToDevice,
  cudaMemcpyDeviceToHost,
  cudaMemcpyDeviceToDevice,
  cudaMemcpyDefault
};
enum cudaStreamCaptureMode {
  cudaStreamCaptureModeGlobal,
  cudaStreamCaptureModeThreadLocal,
  cudaStreamCaptureModeRelaxed
};
constexpr unsigned cudaStreamNonBlocking = 1;
constexpr unsigned cudaEventDefault = 0;
constexpr unsigned cudaEventDisableTiming = 2;
struct cudaDeviceProp {
  char name[256];
  int multiProcessorCount;
  size_t totalGlobalMem;
  int major, minor;
};

cudaError_t cudaGetDeviceCount(int* n);
cudaError_t cudaGetDevice(int* d);
cudaError_t cudaSetDevice(int d);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int d);
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total);
cudaError_t cudaMalloc(void** p, size_t bytes);
template <typename T> cudaError_t cudaMalloc(T** p, size_t bytes) { return cudaMalloc(reinterpret_cast<void**>(p), bytes); }
cudaError_t cudaFree(void* p);
cudaError_t cudaMallocHost(void** p, size_t bytes);
cudaError_t cudaFreeHost(void* p);
cudaError_t cudaHostGetDevicePointer(void** dev, void* host, unsigned flags);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind, cudaStream_t s);
cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t s);
cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                              size_t height, cudaMemcpyKind, cudaStream_t s);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned flags);
cudaError_t cudaEventCreate(cudaEvent_t* e);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = nullptr);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventQuery(cudaEvent_t e);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags);
cudaError_t cudaGetLastError();
const char* cudaGetErrorName(cudaError_t e);
const char* cudaGetErrorString(cudaError_t e);
cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* g);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t g, unsigned long long flags);
cudaError_t cudaGraphDestroy(cudaGraph_t g);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t g);
cudaError_t cudaGraphLaunch(cudaGraphExec_t g, cudaStream_t s);

namespace emu {
// Runs fn now, or records it when the stream is capturing.
void Enqueue(cudaStream_t s, std::function<void()> fn);
void RunGrid(dim3 grid, dim3 block, const std::function<void()>& body);

// The running launch's dynamic shared memory: a fresh allocation of exactly its bytes per launch (blocks
// run one at a time and share it, as __shared__ statics do), so the sanitizer sees overruns.
uint4* DynamicSmem();
void SetDynamicSmem(size_t bytes);

// What cu2cc.py writes for kernel<<<grid, block, smem, stream>>>(args...).
class Launcher {
 public:
  Launcher(dim3 grid, dim3 block, size_t smem = 0, cudaStream_t stream = nullptr)
      : grid_(grid), block_(block), smem_(smem), stream_(stream) {}
  template <typename... P, typename... A>
  void Run(void (*kernel)(P...), A&&... args) {
    std::tuple<std::decay_t<P>...> params(static_cast<P>(std::forward<A>(args))...);
    const dim3 grid = grid_, block = block_;
    const size_t smem = smem_;
    Enqueue(stream_, [kernel, params, grid, block, smem]() {
      SetDynamicSmem(smem);
      RunGrid(grid, block, [&]() { std::apply(kernel, params); });
    });
  }

 private:
  dim3 grid_, block_;
  size_t smem_;
  cudaStream_t stream_;
};
}  // namespace emu

// The emulator has no registers or SM to fill: it answers 2 blocks per SM for every kernel (what the
// decode GEMVs get on an H200), so that launchers that cap their grids by it take that branch.
inline cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* n, const void*, int, size_t) {
  *n = 2;
  return cudaSuccess;
}

// Device attributes the backend asks for outside kernels: the emulator has no memory interface to report.
enum cudaDeviceAttr {
  cudaDevAttrClockRate = 13,
  cudaDevAttrMultiProcessorCount = 16,
  cudaDevAttrMemoryClockRate = 36,
  cudaDevAttrGlobalMemoryBusWidth = 37
};
inline cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr, int) {
  *value = 0;
  return cudaErrorInvalidValue;
}

// Kernels may take more dynamic shared memory than the default 48 KiB once allowed; the emulator allocates
// whatever a launch asks for.
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
inline cudaError_t cudaFuncSetAttribute(const void*, cudaFuncAttribute, int) {
  return cudaSuccess;
}

// cudaLaunchKernelEx: the launch attributes (programmatic dependent launch) change nothing on streams
// that run each operation to completion in order.
enum cudaLaunchAttributeID { cudaLaunchAttributeProgrammaticStreamSerialization = 5 };
union cudaLaunchAttributeValue {
  int programmaticStreamSerializationAllowed;
};
struct cudaLaunchAttribute {
  cudaLaunchAttributeID id;
  cudaLaunchAttributeValue val;
};
struct cudaLaunchConfig_t {
  dim3 gridDim;
  dim3 blockDim;
  size_t dynamicSmemBytes;
  cudaStream_t stream;
  cudaLaunchAttribute* attrs;
  unsigned int numAttrs;
};
template <typename... P, typename... A>
cudaError_t cudaLaunchKernelEx(const cudaLaunchConfig_t* config, void (*kernel)(P...), A&&... args) {
  emu::Launcher(config->gridDim, config->blockDim, config->dynamicSmemBytes, config->stream)
      .Run(kernel, std::forward<A>(args)...);
  return cudaSuccess;
}

