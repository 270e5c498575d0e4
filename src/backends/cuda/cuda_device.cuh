// Device-side helpers shared by the .cu files: number conversions, warp reductions, and the weight
// formats (how each prepared layout is loaded and dequantised).
//
// Two independent decoders exist per format on purpose:
//   - WeightElement(): one element at a time, written straight from ggml's dequantize_row_* loops. The
//     simple kernels use it, and the tests use the simple kernels as a second oracle on the device.
//   - Fmt<T>: the vectorised decoder of the fast kernels. A thread loads one "unit" (16-byte loads) and
//     decodes it as "pieces" of 8 consecutive elements, so every activation load is 16 bytes too.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>
#include <utility>

#include "backends/cuda/cuda_internal.h"

namespace hymt::cuda {

constexpr unsigned kFullMask = 0xffffffffu;

// ---- programmatic dependent launch (sm_90+) ----
// A kernel launched with Launch(..., pdl = true) may start while the kernel before it in the stream is
// still finishing: it must call PdlWait() before it reads anything earlier kernels wrote or writes
// anything. What it may do before: index arithmetic, loads of weights (no kernel writes them), of the
// step's batch (BeginStep's copy precedes the step's first kernel, which every later one starts after)
// and of KV cache positions before a sequence's n_past (written by earlier steps).
// PdlTrigger() lets the next such kernel start as soon as every block of this one has called it.
__device__ __forceinline__ void PdlWait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void PdlTrigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
// Kernels call PdlTrigger once: after their PdlWait, or, where the launch asks for it (pdl_early), at their
// start (GEMVs: after their first weight loads), so that the next kernel's blocks can become resident and
// run their own part before the wait while this one still waits. Its PdlWait still waits for the whole of
// this kernel (and so for every kernel before), so this changes when the next kernel starts, not what it
// reads. PdlTriggerIf(pdl_early) at the start and PdlTriggerIf(!pdl_early) after the wait.
__device__ __forceinline__ void PdlTriggerIf(bool c) {
  if (c) PdlTrigger();
}

// Asks L2 for the 128-byte line holding p (no register is written; a no-op where there is no GPU).
__device__ __forceinline__ void PrefetchL2(const void* p) {
#if defined(__CUDA_ARCH__)
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
#endif
}

// The block's dynamic shared memory (the launch's smem bytes), 16-byte aligned.
#ifdef HYMT_CUDA_EMU
inline uint4* DynamicSmem() {
  return ::emu::DynamicSmem();
}
#else
__device__ __forceinline__ uint4* DynamicSmem() {
  extern __shared__ uint4 dynamic_smem[];
  return dynamic_smem;
}
#endif

// True when kernels on the current device launch with programmatic dependent launch: sm_90+ and not
// turned off with HYMT_PDL=0.
bool PdlEnabled();
// Whether kernels of this level trigger their dependents early (PdlTriggerIf): PdlEnabled() and
// HYMT_PDL_EARLY at least the level, which is 0 none, kPdlEarlySmall the small kernels (the norms, RoPE +
// KV write, decode attention and its combine, the quantising launch; the default), kPdlEarlyGemv the GEMVs
// too.
constexpr int kPdlEarlySmall = 1, kPdlEarlyGemv = 2;
bool PdlEarly(int level);
// The current device's SM count (-1: unknown), asked once per device.
int SmCount();

// Launch attributes: programmatic dependent launch, and thread-block clusters of (1, 1, z) blocks (sm_90+;
// above 8 the kernel must allow non-portable cluster sizes).
inline cudaLaunchAttribute PdlAttribute() {
  cudaLaunchAttribute attr;
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  return attr;
}
#ifndef HYMT_CUDA_EMU
inline cudaLaunchAttribute ClusterAttribute(unsigned z) {
  cudaLaunchAttribute attr;
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = 1;
  attr.val.clusterDim.y = 1;
  attr.val.clusterDim.z = z;
  return attr;
}
#endif

// kernel<<<grid, block, smem, stream>>>(args...) with the first n of attrs.
template <typename... P, typename... A>
void LaunchWith(cudaLaunchAttribute* attrs, unsigned n, void (*kernel)(P...), dim3 grid, dim3 block,
                size_t smem, cudaStream_t stream, A&&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = attrs;
  config.numAttrs = n;
  CheckCuda(cudaLaunchKernelEx(&config, kernel, std::forward<A>(args)...), "cudaLaunchKernelEx", __FILE__,
            __LINE__);
}

// kernel<<<grid, block, smem, stream>>>(args...), as a programmatic dependent launch when pdl.
template <typename... P, typename... A>
void Launch(bool pdl, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
            A&&... args) {
  cudaLaunchAttribute attr[1] = {PdlAttribute()};
  LaunchWith(attr, pdl ? 1 : 0, kernel, grid, block, smem, stream, std::forward<A>(args)...);
}

// The same in thread-block clusters of (1, 1, cluster_z) blocks.
template <typename... P, typename... A>
void LaunchClusters(bool pdl, unsigned cluster_z, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem,
                    cudaStream_t stream, A&&... args) {
#ifdef HYMT_CUDA_EMU
  Fail(ErrorCode::kUnsupported, "cuda: thread-block clusters in the CPU emulator");
#else
  cudaLaunchAttribute attr[2] = {ClusterAttribute(cluster_z), PdlAttribute()};
  LaunchWith(attr, pdl ? 2 : 1, kernel, grid, block, smem, stream, std::forward<A>(args)...);
#endif
}

// ---- numbers ----
__device__ __forceinline__ float Bf16ToF32(uint16_t h) {
  return __uint_as_float(static_cast<uint32_t>(h) << 16);
}
// The two bf16 of a 32-bit word: element 0 is the low half (little-endian).
__device__ __forceinline__ float Bf16Lo(uint32_t w) {
  return __uint_as_float(w << 16);
}
__device__ __forceinline__ float Bf16Hi(uint32_t w) {
  return __uint_as_float(w & 0xffff0000u);
}
// Round to nearest even (NaN stays NaN).
__device__ __forceinline__ uint16_t F32ToBf16(float f) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(f));
}
// f rounded to bf16 and back: the value a bf16 tensor stores (what each op of HF's bf16 forward rounds to).
__device__ __forceinline__ float RoundBf16(float f) {
  return Bf16ToF32(F32ToBf16(f));
}
// silu(g) = g / (1 + e^-g) as HF's bf16 act_fn stores it: computed in f32, rounded to bf16. For g -> -inf
// the quotient goes to -0, for g -> +inf to g. expf, not __expf: the fast one's error grows with |g| (about
// 2 + 1.16 |g| ulp).
__device__ __forceinline__ float SiluBf16(float g) {
  return RoundBf16(g / (1.0f + expf(-g)));
}
__device__ __forceinline__ float F16ToF32(uint16_t h) {
  return __half2float(__ushort_as_half(h));
}
__device__ __forceinline__ uint16_t F32ToF16(float f) {
  return __half_as_ushort(__float2half_rn(f));
}
__device__ __forceinline__ uint32_t PackBf16(float lo, float hi) {
  return static_cast<uint32_t>(F32ToBf16(lo)) | (static_cast<uint32_t>(F32ToBf16(hi)) << 16);
}

// float8 e4m3fn -> f32, exact, written from the format (no infinities; 0x7f and 0xff are NaN).
__device__ __forceinline__ float F8E4M3ToF32(uint8_t v) {
  const uint32_t sign = static_cast<uint32_t>(v & 0x80u) << 24;
  const uint32_t exp = (v >> 3) & 0xfu;
  const uint32_t mant = v & 0x7u;
  if (exp == 0xf && mant == 0x7) return __uint_as_float(sign | 0x7fc00000u);
  if (exp == 0) {
    const float f = static_cast<float>(mant) * (1.0f / 512.0f);  // subnormal: mant * 2^-9
    return sign ? -f : f;
  }
  return __uint_as_float(sign | ((exp + 127 - 7) << 23) | (mant << 20));
}

// Byte k (0..3) of w as the float 2^23 + byte, built with one byte permute: the exponent byte 0x4b
// comes from the constant. Subtracting 2^23 (+ an offset) gives the integer exactly, without the slow
// integer-to-float conversion unit.
template <int k>
__device__ __forceinline__ float MagicByte(uint32_t w) {
  return __uint_as_float(__byte_perm(w, 0x4b000000u, 0x7440u | k));
}
constexpr float kMagic = 8388608.0f;  // 2^23

// Small integers as floats without the integer-to-float conversion unit (a quarter of the rate of an add
// on these GPUs, and its latency sits on the int8 GEMVs' dependency chains). In [2^23, 2^24) a float's ulp is
// 1, so the bits of 1.5 * 2^23 plus an integer |v| < 2^22 are the float 1.5 * 2^23 + v, and subtracting
// 1.5 * 2^23 gives v exactly: the value the conversion gives. A dp4a sum that starts at kDotInit instead of
// 0 ends as those bits, so only the subtraction remains.
constexpr int kDotInit = 0x4b400000;  // the bits of 1.5 * 2^23
constexpr float kDotInitF = 12582912.0f;
// A dp4a sum started at kDotInit, |sum - kDotInit| < 2^22, as the float of its integer.
__device__ __forceinline__ float DotToFloat(int s) {
  return __int_as_float(s) - kDotInitF;
}
// u < 2^23.
__device__ __forceinline__ float SmallUintToFloat(uint32_t u) {
  return __uint_as_float(u | 0x4b000000u) - kMagic;
}
// |v| < 2^22.
__device__ __forceinline__ float SmallIntToFloat(int v) {
  return __int_as_float(v + kDotInit) - kDotInitF;
}
// c + the products of the 4 unsigned bytes of a with the 4 signed bytes of b (dp4a.u32.s32; CUDA's __dp4a
// takes both signed or both unsigned).
__device__ __forceinline__ int Dp4aUS(uint32_t a, int b, int c) {
#if defined(HYMT_CUDA_EMU) || !defined(__CUDA_ARCH__)
  for (int i = 0; i < 4; ++i)
    c += static_cast<int>((a >> (8 * i)) & 0xffu) * static_cast<int>(static_cast<int8_t>(b >> (8 * i)));
  return c;
#else
  int d;
  asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
#endif
}

// 16-byte accesses (global or shared memory; p must be 16-byte aligned). The CPU emulator used to check
// kernels without a GPU (tools/cuda_emu) verifies the alignment here.
__device__ __forceinline__ uint4 Ld16(const void* p) {
#ifdef HYMT_CUDA_EMU
  EmuCheckAligned(p, 16);
#endif
  return *reinterpret_cast<const uint4*>(p);
}
__device__ __forceinline__ void St16(void* p, uint4 v) {
#ifdef HYMT_CUDA_EMU
  EmuCheckAligned(p, 16);
#endif
  *reinterpret_cast<uint4*>(p) = v;
}

// A 16-byte copy from global to shared memory that does not pass through registers (cp.async, sm_80+;
// a plain copy before). CopyAsyncWait() waits for the thread's copies; a __syncthreads() after it makes
// every thread's copies visible to the block.
__device__ __forceinline__ void CopyAsync16(void* smem, const void* gmem) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(gmem) : "memory");
#else
  St16(smem, Ld16(gmem));
#endif
}
__device__ __forceinline__ void CopyAsyncWait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_all;" ::: "memory");
#endif
}

// ---- bulk copies into shared memory (sm_90+: cp.async.bulk and an mbarrier) ----
// One thread asks for a range of global memory in shared memory (BulkCopy), the copy engine does it, and
// every thread waits on the barrier's phase (MbarWait) instead of on its own loads. The barrier: MbarInit
// once (count 1), then per phase one MbarExpect (the bytes the phase's copies bring) and its copies; a
// phase completes when they have all arrived, and MbarWait(bar, phase & 1) returns after that. Sizes and
// both addresses are multiples of 16. Where there is no sm_90 the kernels that use these are not
// launched; in the CPU emulator the copy is a plain memcpy and completes the phase at once.
__device__ __forceinline__ uint32_t SmemAddr(const void* p) {
#if defined(__CUDA_ARCH__)
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
#else
  return 0;
#endif
}
__device__ __forceinline__ void MbarInit(uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(SmemAddr(bar)) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#else
  *bar = 0;  // the emulator: the number of completed phases
#endif
}
__device__ __forceinline__ void MbarExpect(uint64_t* bar, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(SmemAddr(bar)), "r"(bytes)
               : "memory");
#else
  (void)bar, (void)bytes;
#endif
}
__device__ __forceinline__ void BulkCopy(void* smem, const void* gmem, uint32_t bytes, uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
          SmemAddr(smem)),
      "l"(gmem), "r"(bytes), "r"(SmemAddr(bar))
      : "memory");
#elif defined(HYMT_CUDA_EMU)
  EmuCheckAligned(smem, 16);
  EmuCheckAligned(gmem, 16);
  if (bytes % 16 != 0) EmuFail("a bulk copy of a size not a multiple of 16");
  memcpy(smem, gmem, bytes);
  (void)bar;
#else
  (void)smem, (void)gmem, (void)bytes, (void)bar;
#endif
}
// The emulator's copies are done when issued: the phase's last call (after its copies) completes it.
__device__ __forceinline__ void MbarIssued(uint64_t* bar) {
#if !defined(__CUDA_ARCH__)
  ++*bar;
#else
  (void)bar;
#endif
}
__device__ __forceinline__ void MbarWait(uint64_t* bar, uint32_t parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const uint32_t addr = SmemAddr(bar);
  uint32_t done = 0;
  while (!done) {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
        : "=r"(done)
        : "r"(addr), "r"(parity)
        : "memory");
  }
#elif defined(HYMT_CUDA_EMU)
  // Every copy completes when issued: a phase still open here was never asked for.
  if ((*bar & 1u) == parity) EmuFail("a wait on an mbarrier phase no copy was issued for");
#else
  (void)bar, (void)parity;
#endif
}

// Reads 8 bf16 (16 bytes, aligned) as floats.
__device__ __forceinline__ void LoadBf16x8(const uint16_t* p, float out[8]) {
  const uint4 v = Ld16(p);
  out[0] = Bf16Lo(v.x);
  out[1] = Bf16Hi(v.x);
  out[2] = Bf16Lo(v.y);
  out[3] = Bf16Hi(v.y);
  out[4] = Bf16Lo(v.z);
  out[5] = Bf16Hi(v.z);
  out[6] = Bf16Lo(v.w);
  out[7] = Bf16Hi(v.w);
}

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}
__device__ __forceinline__ float WarpMax(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
// `scratch` holds 32 floats; the function synchronises, so call it from every thread.
__device__ __forceinline__ float BlockSum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  v = WarpSum(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float t = lane < n_warps ? scratch[lane] : 0.0f;
  return WarpSum(t);
}

// 1 / RMS of a bf16 row of `cols` values (cols % 8 == 0, xr 16-byte aligned) for the whole block: each
// thread sums the squares of its 8-value chunks threadIdx.x, + blockDim.x, ... in order, then BlockSum.
// RmsNormVecKernel sums in the same order, and so does the GEMV's fused norm (identical bits).
__device__ __forceinline__ float RowRmsInv(const uint16_t* xr, int64_t cols, float eps, float* scratch) {
  float ss = 0.0f;
  for (int64_t c8 = threadIdx.x; c8 < cols / 8; c8 += blockDim.x) {
    float v[8];
    LoadBf16x8(xr + 8 * c8, v);
#pragma unroll
    for (int j = 0; j < 8; ++j) ss = fmaf(v[j], v[j], ss);
  }
  ss = BlockSum(ss, scratch);
  return rsqrtf(ss / static_cast<float>(cols) + eps);
}

// One normalised value as RmsNorm stores it: bf16(bf16(x * inv) * g).
__device__ __forceinline__ float RmsNormValue(float x, float inv, float g) {
  return Bf16ToF32(F32ToBf16(Bf16ToF32(F32ToBf16(x * inv)) * g));
}

// Element i of a KV cache pool of type T (bf16, f16 or f32) set from a bf16 value.
template <DType T>
__device__ __forceinline__ void StoreKv(void* pool, int64_t i, uint16_t bf16) {
  if constexpr (T == DType::kBF16) {
    static_cast<uint16_t*>(pool)[i] = bf16;
  } else if constexpr (T == DType::kF16) {
    static_cast<uint16_t*>(pool)[i] = F32ToF16(Bf16ToF32(bf16));
  } else {
    static_cast<float*>(pool)[i] = Bf16ToF32(bf16);
  }
}

// Vector weights (norm weights, inv_freq): element i of a [1, n] f32, f16 or bf16 weight.
__device__ __forceinline__ float VectorElement(const WeightView& w, int64_t i) {
  switch (w.dtype) {
    case DType::kF32:
      return static_cast<const float*>(w.data)[i];
    case DType::kF16:
      return F16ToF32(static_cast<const uint16_t*>(w.data)[i]);
    case DType::kBF16:
      return Bf16ToF32(static_cast<const uint16_t*>(w.data)[i]);
    default:
      return __int_as_float(0x7fc00000);  // rejected on the host; NaN makes a slip visible
  }
}

// ---- RoPE with the per-head q/k norm (norm.cu, and the decode attention that applies it itself) ----

// RoPE and the optional per-head norm of one head (head_dim values), by one warp. Lane holds pairs
// j = lane + 32 i (i < 4) of the rotate-half layout: x[j] and x[j + half] rotate by angle = float(pos) *
// inv_freq[j] (an f32 product, as HF computes it). The arithmetic is HF's bf16 forward, op by op
// (q * cos + rotate_half(q) * sin on bf16 tensors): cos and sin are computed in f32 and rounded to bf16,
// each product is rounded to bf16, then their sum. RopeLane holds what a lane needs besides the head's
// values (the angles' rounded cos and sin, the norm's weights): none of it comes from an earlier kernel,
// so the decode kernel computes it before PdlWait.
struct RopeLane {
  float c[4], s[4], g_lo[4], g_hi[4];
};

__device__ __forceinline__ RopeLane RopeLanePrepare(int head_dim, float pos, const WeightView& inv_freq,
                                                    const WeightView& norm, bool has_norm) {
  const int lane = threadIdx.x & 31;
  const int half = head_dim / 2;
  RopeLane r;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int j = lane + 32 * i;
    r.c[i] = r.s[i] = r.g_lo[i] = r.g_hi[i] = 0.0f;
    if (j < half) {
      const float angle = __fmul_rn(pos, VectorElement(inv_freq, j));
      sincosf(angle, &r.s[i], &r.c[i]);
      r.s[i] = RoundBf16(r.s[i]);
      r.c[i] = RoundBf16(r.c[i]);
      if (has_norm) {
        r.g_lo[i] = VectorElement(norm, j);
        r.g_hi[i] = VectorElement(norm, j + half);
      }
    }
  }
  return r;
}

// Applies RoPE and the optional norm to the head at src and writes it to dst (which may be src, or null).
// The rotated values are bf16 values (see RopeLane); with a norm they are normalised over the head like
// RmsNormKernel. `cache` (when not null) receives the same bf16 values: element d at cache[cache_index + d]
// (KV store).
template <DType C>
__device__ __forceinline__ void RopeNormApply(const uint16_t* src, uint16_t* dst, int head_dim,
                                              const RopeLane& r, bool has_norm, float eps, void* cache,
                                              int64_t cache_index) {
  const int lane = threadIdx.x & 31;
  const int half = head_dim / 2;
  float a[4], b[4];
  float ss = 0.0f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int j = lane + 32 * i;
    a[i] = b[i] = 0.0f;
    if (j < half) {
      const float x1 = Bf16ToF32(src[j]), x2 = Bf16ToF32(src[j + half]);
      // Products of two bf16 values and sums of two are exact in f32: only the roundings to bf16 remain.
      a[i] = RoundBf16(RoundBf16(x1 * r.c[i]) - RoundBf16(x2 * r.s[i]));
      b[i] = RoundBf16(RoundBf16(x2 * r.c[i]) + RoundBf16(x1 * r.s[i]));
      if (has_norm) ss = fmaf(a[i], a[i], fmaf(b[i], b[i], ss));
    }
  }
  float inv = 1.0f;
  if (has_norm) inv = rsqrtf(WarpSum(ss) / static_cast<float>(head_dim) + eps);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int j = lane + 32 * i;
    if (j < half) {
      uint16_t lo, hi;
      if (has_norm) {
        lo = F32ToBf16(Bf16ToF32(F32ToBf16(a[i] * inv)) * r.g_lo[i]);
        hi = F32ToBf16(Bf16ToF32(F32ToBf16(b[i] * inv)) * r.g_hi[i]);
      } else {
        lo = F32ToBf16(a[i]);
        hi = F32ToBf16(b[i]);
      }
      if (dst != nullptr) {
        dst[j] = lo;
        dst[j + half] = hi;
      }
      if (cache != nullptr) {
        StoreKv<C>(cache, cache_index + j, lo);
        StoreKv<C>(cache, cache_index + j + half, hi);
      }
    }
  }
}

// ---- the simple decoder: one element, straight from ggml's reference loops ----

// ggml get_scale_min_k4: the 6-bit scale and min of sub-block j (0..7) of a Q4_K super-block.
__device__ __forceinline__ void Q4KScaleMin(int j, const uint8_t* q, int* sc, int* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4);
  }
}

__device__ __forceinline__ float WeightElement(const WeightView& w, int64_t row, int64_t col) {
  const uint8_t* base = static_cast<const uint8_t*>(w.data);
  const int64_t K = w.cols, N = w.rows;
  switch (w.dtype) {
    case DType::kF32:
      return reinterpret_cast<const float*>(base)[row * K + col];
    case DType::kF16:
      return F16ToF32(reinterpret_cast<const uint16_t*>(base)[row * K + col]);
    case DType::kBF16:
      return Bf16ToF32(reinterpret_cast<const uint16_t*>(base)[row * K + col]);
    case DType::kF8E4M3:
      return F8E4M3ToF32(base[row * K + col]);
    case DType::kQ8_0: {
      // x = d * qs[i]
      const int8_t q = reinterpret_cast<const int8_t*>(base)[row * K + col];
      const uint16_t d = reinterpret_cast<const uint16_t*>(base + N * K)[row * (K / 32) + col / 32];
      return F16ToF32(d) * static_cast<float>(q);
    }
    case DType::kQ4_K: {
      // Split layout (cuda_internal.h): quant byte e of a super-block (element e in the low nibble, 128 + e
      // in the high one) is byte e % 16 of half (e % 32) / 16 of wide unit 4 b + e / 32; the 16-byte header
      // (d, dmin, scales) is in its own array.
      const int64_t b = col / 256;
      const int i = static_cast<int>(col % 256);
      const int high = i >= 128, e = i % 128;
      const uint8_t byte = base[row * (K / 2) + Q4KHalfOffset(4 * b + e / 32, (e % 32) / 16, K / 256) + e % 16];
      const uint8_t* hdr = base + N * K / 2 + (row * (K / 256) + b) * 16;
      const int q = high ? (byte >> 4) : (byte & 0xF);
      int sc, m;
      Q4KScaleMin(4 * high + e / 32, hdr + 4, &sc, &m);
      const float d = F16ToF32(reinterpret_cast<const uint16_t*>(hdr)[0]);
      const float dmin = F16ToF32(reinterpret_cast<const uint16_t*>(hdr)[1]);
      return d * static_cast<float>(sc) * static_cast<float>(q) - dmin * static_cast<float>(m);
    }
    case DType::kQ6_K: {
      // Split layout (cuda_internal.h): ql byte e of a super-block holds the low 4 bits of element e (low
      // nibble) and 128 + e (high); qh bytes 8p + 4h + c hold, at bits 2w, the top 2 bits of element
      // 128h + 16p + 4w + c; scale i / 16; x = d * sc * (q - 32).
      const int64_t b = col / 256;
      const int i = static_cast<int>(col % 256);
      const int high = i >= 128, e = i % 128, p = e / 16, w = (e % 16) / 4, c = e % 4;
      const uint8_t lowbyte = base[row * (K / 2) + b * 128 + e];
      const uint8_t hibyte = base[N * K / 2 + row * (K / 4) + b * 64 + 8 * p + 4 * high + c];
      const int8_t sc = reinterpret_cast<const int8_t*>(base + N * K * 3 / 4)[row * (K / 16) + b * 16 + i / 16];
      const uint16_t d = reinterpret_cast<const uint16_t*>(base + N * K * 13 / 16)[row * (K / 256) + b];
      const int low = high ? (lowbyte >> 4) : (lowbyte & 0xF);
      const int q = (low | (((hibyte >> (2 * w)) & 3) << 4)) - 32;
      return F16ToF32(d) * static_cast<float>(sc) * static_cast<float>(q);
    }
    default:
      return __int_as_float(0x7fc00000);
  }
}

// A weight load: through the read-only data cache from global memory (kNc), or a plain load (weights the
// bulk GEMV has copied into shared memory).
template <bool kNc, typename V>
__device__ __forceinline__ V LdW(const V* p) {
  if constexpr (kNc)
    return __ldg(p);
  else
    return *p;
}

// ---- the vectorised decoders ----
// Each Fmt<T> provides:
//   kUnitElems, kPieces      elements one thread loads at a time, and the 8-element pieces they form
//   Raw Load(w, row, u)      the loads of unit u of a row (all issued before any use); for q4_k, q6_k and
//                            q8_0 Load<false> reads with plain loads (weights copied into shared memory)
//   Ctx MakeCtx(raw, u)      per-unit values shared by the pieces (scales)
//   PieceCol(u, p)           column of the first of piece p's 8 consecutive elements
//   Dequant<p>(raw, ctx, u, out)  the 8 values of piece p (weight scale not applied)
// Units per row = cols / kUnitElems; cols must be a multiple of kUnitElems.
template <DType T>
struct Fmt;

struct NoCtx {};

template <>
struct Fmt<DType::kBF16> {
  static constexpr int kUnitElems = 8, kPieces = 1;
  struct Raw {
    uint4 v;
  };
  using Ctx = NoCtx;
  static __device__ __forceinline__ Raw Load(const WeightView& w, int64_t row, int u) {
    return {__ldg(reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(w.data) + row * w.cols) + u)};
  }
  static __device__ __forceinline__ Ctx MakeCtx(const Raw&, int) { return {}; }
  static __device__ __forceinline__ int PieceCol(int u, int) { return u * 8; }
  template <int p>
  static __device__ __forceinline__ void Dequant(const Raw& r, const Ctx&, int, float o[8]) {
    o[0] = Bf16Lo(r.v.x), o[1] = Bf16Hi(r.v.x), o[2] = Bf16Lo(r.v.y), o[3] = Bf16Hi(r.v.y);
    o[4] = Bf16Lo(r.v.z), o[5] = Bf16Hi(r.v.z), o[6] = Bf16Lo(r.v.w), o[7] = Bf16Hi(r.v.w);
  }
};

template <>
struct Fmt<DType::kF16> {
  static constexpr int kUnitElems = 8, kPieces = 1;
  struct Raw {
    uint4 v;
  };
  using Ctx = NoCtx;
  static __device__ __forceinline__ Raw Load(const WeightView& w, int64_t row, int u) {
    return {__ldg(reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(w.data) + row * w.cols) + u)};
  }
  static __device__ __forceinline__ Ctx MakeCtx(const Raw&, int) { return {}; }
  static __device__ __forceinline__ int PieceCol(int u, int) { return u * 8; }
  static __device__ __forceinline__ float2 Half2(uint32_t w) {
    __half2 h;
    memcpy(&h, &w, 4);
    return __half22float2(h);
  }
  template <int p>
  static __device__ __forceinline__ void Dequant(const Raw& r, const Ctx&, int, float o[8]) {
    const uint32_t words[4] = {r.v.x, r.v.y, r.v.z, r.v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = Half2(words[i]);
      o[2 * i] = f.x, o[2 * i + 1] = f.y;
    }
  }
};

template <>
struct Fmt<DType::kF32> {
  static constexpr int kUnitElems = 8, kPieces = 1;
  struct Raw {
    uint4 a, b;
  };
  using Ctx = NoCtx;
  static __device__ __forceinline__ Raw Load(const WeightView& w, int64_t row, int u) {
    const uint4* p = reinterpret_cast<const uint4*>(static_cast<const float*>(w.data) + row * w.cols) + 2 * u;
    return {__ldg(p), __ldg(p + 1)};
  }
  static __device__ __forceinline__ Ctx MakeCtx(const Raw&, int) { return {}; }
  static __device__ __forceinline__ int PieceCol(int u, int) { return u * 8; }
  template <int p>
  static __device__ __forceinline__ void Dequant(const Raw& r, const Ctx&, int, float o[8]) {
    o[0] = __uint_as_float(r.a.x), o[1] = __uint_as_float(r.a.y), o[2] = __uint_as_float(r.a.z);
    o[3] = __uint_as_float(r.a.w), o[4] = __uint_as_float(r.b.x), o[5] = __uint_as_float(r.b.y);
    o[6] = __uint_as_float(r.b.z), o[7] = __uint_as_float(r.b.w);
  }
};

template <>
struct Fmt<DType::kF8E4M3> {
  static constexpr int kUnitElems = 16, kPieces = 2;
  struct Raw {
    uint4 v;
  };
  using Ctx = NoCtx;
  static __device__ __forceinline__ Raw Load(const WeightView& w, int64_t row, int u) {
    return {__ldg(reinterpret_cast<const uint4*>(static_cast<const uint8_t*>(w.data) + row * w.cols) + u)};
  }
  static __device__ __forceinline__ Ctx MakeCtx(const Raw&, int) { return {}; }
  static __device__ __forceinline__ int PieceCol(int u, int p) { return u * 16 + p * 8; }
  // Two e4m3 -> two f32 (hardware conversion on sm_89+, the header's emulation before).
  static __device__ __forceinline__ float2 Pair(uint32_t bits16) {
    const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(bits16), __NV_E4M3);
    __half2 h2;
    memcpy(&h2, &h, 4);
    return __half22float2(h2);
  }
  template <int p>
  static __device__ __forceinline__ void Dequant(const Raw& r, const Ctx&, int, float o[8]) {
    const uint32_t w0 = p == 0 ? r.v.x : r.v.z, w1 = p == 0 ? r.v.y : r.v.w;
    const float2 a = Pair(w0 & 0xffffu), b = Pair(w0 >> 16), c = Pair(w1 & 0xffffu), d = Pair(w1 >> 16);
    o[0] = a.x, o[1] = a.y, o[2] = b.x, o[3] = b.y, o[4] = c.x, o[5] = c.y, o[6] = d.x, o[7] = d.y;
  }
};

template <>
struct Fmt<DType::kQ8_0> {
  static constexpr int kUnitElems = 16, kPieces = 2;
  struct Raw {
    uint4 q;
    uint16_t d;
  };
  struct Ctx {
    float d;
  };
  // One row's arrays (Row), and a unit's loads at 32-bit offsets from them (LoadRow): the int8 GEMV sets the
  // pointers once per row block instead of working the row's address out again per unit in 64-bit arithmetic.
  struct RowPtr {
    const uint4* q;
    const uint16_t* d;
  };
  static __device__ __forceinline__ RowPtr Row(const WeightView& w, int64_t row) {
    const uint8_t* base = static_cast<const uint8_t*>(w.data);
    return {reinterpret_cast<const uint4*>(base + row * w.cols),
            reinterpret_cast<const uint16_t*>(base + w.rows * w.cols) + row * (w.cols / 32)};
  }
  // Unit u (>= 0) of the row p points at.
  template <bool kNc = true>
  static __device__ __forceinline__ Raw LoadRow(const RowPtr& p, int u) {
    return {LdW<kNc>(p.q + u), LdW<kNc>(p.d + (u >> 1))};
  }
  template <bool kNc = true>
  static __device__ __forceinline__ Raw Load(const WeightView& w, int64_t row, int u) {
    return LoadRow<kNc>(Row(w, row), u);
  }
  static __device__ __forceinline__ Ctx MakeCtx(const Raw& r, int) { return {F16ToF32(r.d)}; }
  static __device__ __forceinline__ int PieceCol(int u, int p) { return u * 16 + p * 8; }
  template <int p>
  static __device__ __forceinline__ void Dequant(const Raw& r, const Ctx& c, int, float o[8]) {
    // Biasing each int8 by 128 (xor 0x80) makes it an unsigned byte for the magic conversion.
    const uint32_t w0 = (p == 0 ? r.q.x : r.q.z) ^ 0x80808080u, w1 = (p == 0 ? r.q.y : r.q.w) ^ 0x80808080u;
    constexpr float kOff = kMagic + 128.0f;
    o[0] = (MagicByte<0>(w0) - kOff) * c.d, o[1] = (MagicByte<1>(w0) - kOff) * c.d;
    o[2] = (MagicByte<2>(w0) - kOff) * c.d, o[3] = (MagicByte<3>(w0) - kOff) * c.d;
    o[4] = (MagicByte<0>(w1) - kOff) * c.d, o[5] = (MagicByte<1>(w1) - kOff) * c.d;
    o[6] = (MagicByte<2>(w1) - kOff) * c.d, o[7] = (MagicByte<3>(w1) - kOff) * c.d;
  }
};

// Q4_K, split layout (cuda_internal.h). Unit u = wide unit u: 64 elements of super-block u / 4, sub-blocks
// j = u % 4 (elements 32 j .. 32 j + 31: the low nibbles) and 4 + j (the same + 128: the high nibbles),
// which share the header's scale/min pair j, in two 16-byte halves qa and qb (bytes 0-15 and 16-31 of the
// unit), plus the super-block's 16-byte header. 32 threads on consecutive units read 512 contiguous bytes
// with each half's load. Pieces: 0-3 the low nibbles of qa bytes 0-7, qa 8-15, qb 0-7, qb 8-15; 4-7 the
// same high nibbles.
template <>
struct Fmt<DType::kQ4_K> {
  static constexpr int kUnitElems = 64, kPieces = 8;
  struct Raw {
    uint4 hdr, qa, qb;
  };
  struct Ctx {
    float d1, m1, d2, m2;  // scale and min of the unit's two sub-blocks
  };
  // One row's arrays, and a unit's loads from them (as Fmt<Q8_0>).
  struct RowPtr {
    const uint4* hdr;
    const uint8_t* qs;
    uint32_t nsb;
  };
  static __device__ __forceinline__ RowPtr Row(const WeightView& w, int64_t row) {
    const uint8_t* base = static_cast<const uint8_t*>(w.data);
    const int64_t nsb = w.cols / 256;
    return {reinterpret_cast<const uint4*>(base + w.rows * w.cols / 2) + row * nsb, base + row * (w.cols / 2),
            static_cast<uint32_t>(nsb)};
  }
  template <bool kNc = true>
  static __device__ __forceinline__ Raw LoadRow(const RowPtr& p, int u) {
    const uint32_t U = static_cast<uint32_t>(u);  // unsigned: the offsets' divisions are shifts
    return {LdW<kNc>(p.hdr + U / 4),
            LdW<kNc>(reinterpret_cast<const uint4*>(p.qs + Q4KHalfOffset<uint32_t>(U, 0, p.nsb))),
            LdW<kNc>(reinterpret_cast<const uint4*>(p.qs + Q4KHalfOffset<uint32_t>(U, 1, p.nsb)))};
  }
  template <bool kNc = true>
  static __device__ __forceinline__ Raw Load(const WeightView& w, int64_t row, int u) {
    return LoadRow<kNc>(Row(w, row), u);
  }
  // Scale and min of sub-blocks jj and 4 + jj (jj < 4) from the header's packed scales (bytes 4..15,
  // ggml's get_scale_min_k4): bytes jj, jj + 4 and jj + 8 of them hold both.
  static __device__ __forceinline__ Ctx SubScales(const uint4& h, int jj) {
    const float d = F16ToF32(h.x & 0xffffu), dmin = F16ToF32(h.x >> 16);
    const uint32_t by = (h.y >> (8 * jj)) & 0xffu, bz = (h.z >> (8 * jj)) & 0xffu,
                   bw = (h.w >> (8 * jj)) & 0xffu;
    const uint32_t s1 = by & 63u, m1 = bz & 63u;
    const uint32_t s2 = (bw & 0xfu) | ((by >> 6) << 4), m2 = (bw >> 4) | ((bz >> 6) << 4);
    return {d * SmallUintToFloat(s1), dmin * SmallUintToFloat(m1), d * SmallUintToFloat(s2),
            dmin * SmallUintToFloat(m2)};
  }
  static __device__ __forceinline__ Ctx MakeCtx(const Raw& r, int u) { return SubScales(r.hdr, u & 3); }
  static __device__ __forceinline__ int PieceCol(int u, int p) {
    return (u / 4) * 256 + (p >= 4 ? 128 : 0) + (u % 4) * 32 + (p % 4) * 8;
  }
  template <int p>
  static __device__ __forceinline__ void Dequant(const Raw& r, const Ctx& c, int, float o[8]) {
    constexpr int kShift = p >= 4 ? 4 : 0;
    const uint4& q = (p % 4) < 2 ? r.qa : r.qb;
    const uint32_t w0 = (p % 2 == 0 ? q.x : q.z) >> kShift & 0x0f0f0f0fu;
    const uint32_t w1 = (p % 2 == 0 ? q.y : q.w) >> kShift & 0x0f0f0f0fu;
    const float d = p >= 4 ? c.d2 : c.d1, m = p >= 4 ? c.m2 : c.m1;
    o[0] = d * (MagicByte<0>(w0) - kMagic) - m, o[1] = d * (MagicByte<1>(w0) - kMagic) - m;
    o[2] = d * (MagicByte<2>(w0) - kMagic) - m, o[3] = d * (MagicByte<3>(w0) - kMagic) - m;
    o[4] = d * (MagicByte<0>(w1) - kMagic) - m, o[5] = d * (MagicByte<1>(w1) - kMagic) - m;
    o[6] = d * (MagicByte<2>(w1) - kMagic) - m, o[7] = d * (MagicByte<3>(w1) - kMagic) - m;
  }
};

// Q6_K, split layout (cuda_internal.h). Unit u = piece p = u % 8 of super-block u / 8: ql bytes [16p, 16p+16)
// of the block (byte i: low 4 bits of element 16p + i in the low nibble, of 128 + 16p + i in the high),
// qh bytes [8p, 8p+8) (word h, byte c, bits 2w: top 2 bits of element 128h + 16p + 4w + c), the block's
// 16 scales and d. Pieces: 0 = elements 16p + 0..7, 1 = 16p + 8..15, 2 and 3 the same + 128.
template <>
struct Fmt<DType::kQ6_K> {
  static constexpr int kUnitElems = 32, kPieces = 4;
  struct Raw {
    uint4 ql;
    uint2 qh;
    uint4 sc;
    uint16_t d;
  };
  struct Ctx {
    float d1, d2;  // d * scale of the unit's two runs of 16 (scales p and 8 + p)
  };
  // One row's arrays, and a unit's loads from them (as Fmt<Q8_0>).
  struct RowPtr {
    const uint4* ql;
    const uint2* qh;
    const uint4* sc;
    const uint16_t* d;
  };
  static __device__ __forceinline__ RowPtr Row(const WeightView& w, int64_t row) {
    const int64_t K = w.cols, N = w.rows;
    const uint8_t* base = static_cast<const uint8_t*>(w.data);
    return {reinterpret_cast<const uint4*>(base + row * (K / 2)),
            reinterpret_cast<const uint2*>(base + N * K / 2 + row * (K / 4)),
            reinterpret_cast<const uint4*>(base + N * K * 3 / 4 + row * (K / 16)),
            reinterpret_cast<const uint16_t*>(base + N * K * 13 / 16) + row * (K / 256)};
  }
  template <bool kNc = true>
  static __device__ __forceinline__ Raw LoadRow(const RowPtr& p, int u) {
    return {LdW<kNc>(p.ql + u), LdW<kNc>(p.qh + u), LdW<kNc>(p.sc + (u >> 3)), LdW<kNc>(p.d + (u >> 3))};
  }
  template <bool kNc = true>
  static __device__ __forceinline__ Raw Load(const WeightView& w, int64_t row, int u) {
    return LoadRow<kNc>(Row(w, row), u);
  }
  static __device__ __forceinline__ Ctx MakeCtx(const Raw& r, int u) {
    const int p = u & 7;  // u >= 0
    const float d = F16ToF32(r.d);
    const int8_t s1 = static_cast<int8_t>(((p < 4 ? r.sc.x : r.sc.y) >> (8 * (p & 3))) & 0xffu);
    const int8_t s2 = static_cast<int8_t>(((p < 4 ? r.sc.z : r.sc.w) >> (8 * (p & 3))) & 0xffu);
    return {d * SmallIntToFloat(s1), d * SmallIntToFloat(s2)};
  }
  static __device__ __forceinline__ int PieceCol(int u, int p) {
    return (u / 8) * 256 + (p >= 2 ? 128 : 0) + (u % 8) * 16 + (p & 1) * 8;
  }
  // Word w (0..3) of the unit's 6-bit values (0..63, one per byte) of run h (0: elements 16p + 4w + c,
  // 1: the same + 128).
  template <int h>
  static __device__ __forceinline__ uint32_t Values(const Raw& r, int w, uint32_t ql_w) {
    const uint32_t low = (h == 0 ? ql_w : ql_w >> 4) & 0x0f0f0f0fu;
    return low | ((((h == 0 ? r.qh.x : r.qh.y) >> (2 * w)) & 0x03030303u) << 4);
  }
  template <int p>
  static __device__ __forceinline__ void Dequant(const Raw& r, const Ctx& c, int, float o[8]) {
    constexpr int h = p >= 2 ? 1 : 0, w0 = (p & 1) * 2;
    const uint32_t q0 = Values<h>(r, w0, (p & 1) == 0 ? r.ql.x : r.ql.z);
    const uint32_t q1 = Values<h>(r, w0 + 1, (p & 1) == 0 ? r.ql.y : r.ql.w);
    constexpr float kOff = kMagic + 32.0f;
    const float d = h == 0 ? c.d1 : c.d2;
    o[0] = d * (MagicByte<0>(q0) - kOff), o[1] = d * (MagicByte<1>(q0) - kOff);
    o[2] = d * (MagicByte<2>(q0) - kOff), o[3] = d * (MagicByte<3>(q0) - kOff);
    o[4] = d * (MagicByte<0>(q1) - kOff), o[5] = d * (MagicByte<1>(q1) - kOff);
    o[6] = d * (MagicByte<2>(q1) - kOff), o[7] = d * (MagicByte<3>(q1) - kOff);
  }
};

// Calls f(std::integral_constant<int, I>{}) for I = Begin .. End-1, unrolled at compile time (so that
// indices derived from I are constants and register arrays stay in registers).
template <int Begin, int End, typename F>
__device__ __forceinline__ void StaticFor(F&& f) {
  if constexpr (Begin < End) {
    f(std::integral_constant<int, Begin>{});
    StaticFor<Begin + 1, End>(f);
  }
}

// Calls f.template operator()<T>() for the weight types that have a vectorised decoder; returns false
// for the others.
template <typename F>
bool DispatchFmt(DType t, F&& f) {
  switch (t) {
    case DType::kBF16:
      f.template operator()<DType::kBF16>();
      return true;
    case DType::kF16:
      f.template operator()<DType::kF16>();
      return true;
    case DType::kF32:
      f.template operator()<DType::kF32>();
      return true;
    case DType::kF8E4M3:
      f.template operator()<DType::kF8E4M3>();
      return true;
    case DType::kQ8_0:
      f.template operator()<DType::kQ8_0>();
      return true;
    case DType::kQ4_K:
      f.template operator()<DType::kQ4_K>();
      return true;
    case DType::kQ6_K:
      f.template operator()<DType::kQ6_K>();
      return true;
    default:
      return false;
  }
}

// Elements per unit of the vectorised decoder (0: none).
inline int FmtUnitElems(DType t) {
  switch (t) {
    case DType::kBF16:
    case DType::kF16:
    case DType::kF32:
      return 8;
    case DType::kF8E4M3:
    case DType::kQ8_0:
      return 16;
    case DType::kQ6_K:
      return 32;
    case DType::kQ4_K:
      return 64;
    default:
      return 0;
  }
}

}  // namespace hymt::cuda
