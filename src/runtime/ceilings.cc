#include "runtime/ceilings.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#include "core/mapped_file.h"
#include "core/status.h"
#include "core/thread_pool.h"

namespace hymt {

namespace {

std::vector<double> ReadPasses(size_t bytes, int repeats);

}  // namespace

#if defined(__x86_64__)
// Sixteen (twelve) independent accumulators, more than FMA latency x throughput, so the loop issues at
// the instruction's peak rate; 2 FLOPs per lane.
__attribute__((target("avx512f,fma"))) float HostFmaLoopAvx512(int64_t iters) {
  __m512 acc[16];
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i));
  const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(1e-3f);
  for (int64_t i = 0; i < iters; ++i)
#pragma GCC unroll 16
    for (int j = 0; j < 16; ++j) acc[j] = _mm512_fmadd_ps(acc[j], a, b);
  float s = 0;
  for (int i = 0; i < 16; ++i) s += _mm512_reduce_add_ps(acc[i]);
  return s;
}
__attribute__((target("avx2,fma"))) float HostFmaLoopAvx2(int64_t iters) {
  __m256 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm256_set1_ps(static_cast<float>(i));
  const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(1e-3f);
  for (int64_t i = 0; i < iters; ++i)
#pragma GCC unroll 12
    for (int j = 0; j < 12; ++j) acc[j] = _mm256_fmadd_ps(acc[j], a, b);
  alignas(32) float out[8];
  __m256 s = acc[0];
  for (int i = 1; i < 12; ++i) s = _mm256_add_ps(s, acc[i]);
  _mm256_store_ps(out, s);
  return out[0];
}
__attribute__((target("avx512f,avx512vnni"))) double HostVnniLoopAvx512(int64_t iters) {
  __m512i acc[16];
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_set1_epi32(i);
  const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-2);
  for (int64_t i = 0; i < iters; ++i)
#pragma GCC unroll 16
    for (int j = 0; j < 16; ++j) acc[j] = _mm512_dpbusd_epi32(acc[j], a, b);
  int64_t s = 0;
  for (int i = 0; i < 16; ++i) s += _mm512_reduce_add_epi32(acc[i]);
  return static_cast<double>(s);
}
// The int8 peaks of AVX2 without and with AVX-VNNI, on 12 ymm accumulators, in assembly (GCC 12 kept some
// of twelve accumulator variables on the stack, which halved the rate on a Zen 5 host).
//   AVX2: vpmaddubsw into int16 accumulators, each product taking its accumulator's bytes as the unsigned
//     operand so that nothing is loop-invariant: twelve chains of vpmaddubsw + vpaddw (4-6 cycles)
//     against 12 multiplies an iteration on the two pipes that take them.
//   AVX-VNNI: vpdpbusd into int32 accumulators, VEX-encoded (the EVEX form needs AVX-512).
// The accumulators' values only keep the loop live.
#define HYMT_INT8_STEP(n) "vpmaddubsw %[b], %" #n ", %[t]\n\tvpaddw %[t], %" #n ", %" #n "\n\t"
#define HYMT_VNNI_STEP(n) "%{vex%} vpdpbusd %[b], %[a], %" #n "\n\t"
#define HYMT_TWELVE(STEP) \
  STEP(0) STEP(1) STEP(2) STEP(3) STEP(4) STEP(5) STEP(6) STEP(7) STEP(8) STEP(9) STEP(10) STEP(11)
#define HYMT_TWELVE_OPERANDS                                                                             \
  : "+x"(a0), "+x"(a1), "+x"(a2), "+x"(a3), "+x"(a4), "+x"(a5), "+x"(a6), "+x"(a7), "+x"(a8), "+x"(a9), \
    "+x"(a10), "+x"(a11), [t] "=&x"(t)                                                                  \
  : [a] "x"(a), [b] "x"(b)
template <bool kVnni>
__attribute__((target("avx2"))) double Int8LoopAvx2(int64_t iters) {
  __m256i a0 = _mm256_set1_epi32(0), a1 = _mm256_set1_epi32(1), a2 = _mm256_set1_epi32(2),
          a3 = _mm256_set1_epi32(3), a4 = _mm256_set1_epi32(4), a5 = _mm256_set1_epi32(5),
          a6 = _mm256_set1_epi32(6), a7 = _mm256_set1_epi32(7), a8 = _mm256_set1_epi32(8),
          a9 = _mm256_set1_epi32(9), a10 = _mm256_set1_epi32(10), a11 = _mm256_set1_epi32(11);
  const __m256i a = _mm256_set1_epi8(3), b = _mm256_set1_epi8(-2);
  __m256i t;
  for (int64_t i = 0; i < iters; ++i) {
    if constexpr (kVnni) {
      asm(HYMT_TWELVE(HYMT_VNNI_STEP) HYMT_TWELVE_OPERANDS);
    } else {
      asm(HYMT_TWELVE(HYMT_INT8_STEP) HYMT_TWELVE_OPERANDS);
    }
  }
  const __m256i s = _mm256_add_epi32(
      _mm256_add_epi32(_mm256_add_epi32(_mm256_add_epi32(a0, a1), _mm256_add_epi32(a2, a3)),
                       _mm256_add_epi32(_mm256_add_epi32(a4, a5), _mm256_add_epi32(a6, a7))),
      _mm256_add_epi32(_mm256_add_epi32(a8, a9), _mm256_add_epi32(a10, a11)));
  alignas(32) int32_t out[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(out), s);
  int64_t sum = 0;
  for (int32_t v : out) sum += v;
  return static_cast<double>(sum);
}
#undef HYMT_TWELVE_OPERANDS
#undef HYMT_TWELVE
#undef HYMT_VNNI_STEP
#undef HYMT_INT8_STEP
double HostInt8LoopAvx2(int64_t iters) {
  return Int8LoopAvx2<false>(iters);
}
double HostVnniLoopAvx2(int64_t iters) {
  return Int8LoopAvx2<true>(iters);
}
#endif

namespace {

// The fastest of `repeats` timed runs of loop(iters) on every pool thread at once, in G(FL)OP/s.
template <typename Loop>
double PoolPeak(Loop loop, double ops_per_iter, int repeats) {
  ThreadPool& pool = DefaultThreadPool();
  const int64_t iters = 200'000;
  std::vector<double> sink(static_cast<size_t>(pool.size()) * 16);
  double best = 0;
  for (int r = 0; r < repeats + 1; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    pool.Run([&](int t, int) { sink[static_cast<size_t>(t) * 16] = loop(iters); });
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0) best = std::max(best, ops_per_iter * static_cast<double>(iters) * pool.size() / secs / 1e9);
  }
  return best;
}

}  // namespace

double MeasureHostVnniPeak(int repeats) {
#if defined(__x86_64__)
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512vnni")) return 0;
  return PoolPeak(HostVnniLoopAvx512, kHostVnniLoopAvx512Ops, repeats);
#else
  (void)repeats;
  return 0;
#endif
}

double MeasureHostAvx2Int8Peak(int repeats) {
#if defined(__x86_64__)
  if (!__builtin_cpu_supports("avx2")) return 0;
  return PoolPeak(HostInt8LoopAvx2, kHostInt8LoopAvx2Ops, repeats);
#else
  (void)repeats;
  return 0;
#endif
}

double MeasureHostAvxVnniPeak(int repeats) {
#if defined(__x86_64__)
  // AVX-VNNI is CPUID.(EAX=7, ECX=1):EAX bit 4 (read directly: clang 14's __builtin_cpu_supports does
  // not know it).
  unsigned a = 0, b = 0, c = 0, d = 0;
  const bool avxvnni = __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 4)) != 0;
  if (!__builtin_cpu_supports("avx2") || !avxvnni) return 0;
  return PoolPeak(HostVnniLoopAvx2, kHostVnniLoopAvx2Ops, repeats);
#else
  (void)repeats;
  return 0;
#endif
}

double MeasureHostFmaPeak(int repeats, bool avx512) {
#if defined(__x86_64__)
  float (*loop)(int64_t) = nullptr;
  double flops_per_iter = 0;
  if (avx512 && __builtin_cpu_supports("avx512f")) {
    loop = HostFmaLoopAvx512;
    flops_per_iter = kHostFmaLoopAvx512Flops;
  } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    loop = HostFmaLoopAvx2;
    flops_per_iter = kHostFmaLoopAvx2Flops;
  }
  if (loop == nullptr) return 0;
  return PoolPeak(loop, flops_per_iter, repeats);
#else
  (void)repeats, (void)avx512;
  return 0;
#endif
}

double MeasureHostReadBandwidth(size_t bytes, int repeats) {
  std::vector<double> rates = ReadPasses(bytes, repeats);
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

double MeasureHostReadBandwidthBest(size_t bytes, int repeats) {
  std::vector<double> rates = ReadPasses(bytes, repeats);
  return *std::max_element(rates.begin(), rates.end());
}

namespace {

// Sums n words with the widest loads the CPU has (the library is built for the baseline ISA, whose
// 16-byte loads cannot keep a core's share of memory bandwidth busy); independent accumulators keep
// enough loads in flight. With kPrefetch the vector loops also ask for the lines 8 KiB ahead,
// as the packed GEMVs do (backends/cpu/kernels/simd.h): on a virtual machine whose hardware prefetchers
// stopped short, the plain loop read less than those GEMVs did.
constexpr int64_t kProbeAheadWords = 8192 / 8;
uint64_t ReadSumScalar(const uint64_t* p, int64_t n) {
  uint64_t acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) acc[k] += p[i + k];
  for (; i < n; ++i) acc[0] += p[i];
  uint64_t s = 0;
  for (uint64_t v : acc) s += v;
  return s;
}
#if defined(__x86_64__)
template <bool kPrefetch>
__attribute__((target("avx512f"))) uint64_t ReadSum512(const uint64_t* p, int64_t n) {
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    if constexpr (kPrefetch) {
      for (int l = 0; l < 4; ++l)
        _mm_prefetch(reinterpret_cast<const char*>(p + i + kProbeAheadWords + 8 * l), _MM_HINT_T0);
    }
    a0 = _mm512_add_epi64(a0, _mm512_load_si512(p + i));
    a1 = _mm512_add_epi64(a1, _mm512_load_si512(p + i + 8));
    a2 = _mm512_add_epi64(a2, _mm512_load_si512(p + i + 16));
    a3 = _mm512_add_epi64(a3, _mm512_load_si512(p + i + 24));
  }
  const __m512i a = _mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3));
  return static_cast<uint64_t>(_mm512_reduce_add_epi64(a)) + ReadSumScalar(p + i, n - i);
}
template <bool kPrefetch>
__attribute__((target("avx2"))) uint64_t ReadSum256(const uint64_t* p, int64_t n) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    if constexpr (kPrefetch) {  // an iteration reads two 64-byte lines
      _mm_prefetch(reinterpret_cast<const char*>(p + i + kProbeAheadWords), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(p + i + kProbeAheadWords + 8), _MM_HINT_T0);
    }
    a0 = _mm256_add_epi64(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_add_epi64(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 4)));
    a2 = _mm256_add_epi64(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 8)));
    a3 = _mm256_add_epi64(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 12)));
  }
  alignas(32) uint64_t out[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(out),
                     _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3)));
  return out[0] + out[1] + out[2] + out[3] + ReadSumScalar(p + i, n - i);
}
#endif

// GB/s of each of 2 x `repeats` passes over a buffer of `bytes`, after a warm-up pass: plain and
// prefetching passes alternately (HostReadSum), so that the fastest is the most either way of reading got.
std::vector<double> ReadPasses(size_t bytes, int repeats) {
  // On huge pages where the kernel gives them, as the packed weights are.
  constexpr size_t kHugePage = size_t{2} << 20;
  bytes = std::max(kHugePage, bytes / kHugePage * kHugePage);
  auto* data = static_cast<uint64_t*>(std::aligned_alloc(kHugePage, bytes));
  if (data == nullptr)
    Fail(ErrorCode::kResourceExhausted, "cannot allocate ", bytes, " bytes to measure bandwidth");
  AdviseHugePages(data, bytes);
  const int64_t n = static_cast<int64_t>(bytes / 8);
  ThreadPool& pool = DefaultThreadPool();
  // Touch every page first (with distinct values, so nothing is a shared zero page).
  pool.ParallelFor(n, 1 << 16, [&](int64_t a, int64_t b) {
    for (int64_t i = a; i < b; ++i) data[i] = static_cast<uint64_t>(i) * 0x9e3779b97f4a7c15ull;
  });
  std::vector<double> rates;
  std::vector<uint64_t> sums(static_cast<size_t>(pool.size()) * 8);
  for (int r = 0; r < 2 * repeats + 1; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    pool.Run([&](int t, int nt) {
      const int64_t begin = n * t / nt / 8 * 8, end = t + 1 == nt ? n : n * (t + 1) / nt / 8 * 8;
      // keep the reads from being optimised away
      sums[static_cast<size_t>(t) * 8] =
          HostReadSum(data + begin, static_cast<size_t>(end - begin) * 8, r % 2 == 0);
    });
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0) rates.push_back(static_cast<double>(bytes) / secs / 1e9);  // the first pass is a warm-up
  }
  std::free(data);
  return rates;
}

}  // namespace

// The chunks callers pass start at multiples of 64 bytes, as the vector loads need.
uint64_t HostReadSum(const void* p, size_t bytes, bool prefetch) {
  const auto* w = static_cast<const uint64_t*>(p);
  const auto n = static_cast<int64_t>(bytes / 8);
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx512f")) return prefetch ? ReadSum512<true>(w, n) : ReadSum512<false>(w, n);
  if (__builtin_cpu_supports("avx2")) return prefetch ? ReadSum256<true>(w, n) : ReadSum256<false>(w, n);
#endif
  (void)prefetch;
  return ReadSumScalar(w, n);
}

int64_t PeakResidentBytes() {
  std::ifstream in("/proc/self/status");
  std::string key;
  while (in >> key) {
    if (key == "VmHWM:") {
      int64_t kb = 0;
      in >> kb;
      return kb * 1024;
    }
    std::string rest;
    std::getline(in, rest);
  }
  return 0;
}

}  // namespace hymt

namespace hymt {

void ResetPeakResident() {
  // Linux: writing 5 to clear_refs resets the peak RSS (VmHWM) to the current RSS.
  std::ofstream("/proc/self/clear_refs") << "5";
}

double MeasureHostInt8Peak(cpu::Isa isa, int repeats) {
  switch (isa) {
    case cpu::Isa::kAvx512:
      return MeasureHostVnniPeak(repeats);
    case cpu::Isa::kAvxVnni:
      return MeasureHostAvxVnniPeak(repeats);
    case cpu::Isa::kAvx2:
      return MeasureHostAvx2Int8Peak(repeats);
    case cpu::Isa::kGeneric:
      break;
  }
  return 0;
}

const char* HostInt8PeakName(cpu::Isa isa) {
  switch (isa) {
    case cpu::Isa::kAvx512:
      return "avx512-vnni";
    case cpu::Isa::kAvxVnni:
      return "avx-vnni";
    case cpu::Isa::kAvx2:
      return "avx2";
    case cpu::Isa::kGeneric:
      break;
  }
  return "";
}

}  // namespace hymt
