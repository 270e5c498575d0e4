#include "runtime/ceilings.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "core/status.h"
#include "core/thread_pool.h"

namespace hymt {

namespace {

std::vector<double> ReadPasses(size_t bytes, int repeats);

#if defined(__x86_64__)
// Sixteen (twelve) independent accumulators, more than FMA latency x throughput, so the loop issues at
// the instruction's peak rate; 2 FLOPs per lane.
__attribute__((target("avx512f,fma"))) float FmaLoop512(int64_t iters) {
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
__attribute__((target("avx2,fma"))) float FmaLoop256(int64_t iters) {
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
#endif

}  // namespace

double MeasureHostFmaPeak(int repeats) {
#if defined(__x86_64__)
  float (*loop)(int64_t) = nullptr;
  double flops_per_iter = 0;
  if (__builtin_cpu_supports("avx512f")) {
    loop = FmaLoop512;
    flops_per_iter = 16 * 16 * 2;
  } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    loop = FmaLoop256;
    flops_per_iter = 12 * 8 * 2;
  }
  if (loop == nullptr) return 0;
  ThreadPool& pool = DefaultThreadPool();
  const int64_t iters = 200'000;
  std::vector<float> sink(static_cast<size_t>(pool.size()) * 16);
  double best = 0;
  for (int r = 0; r < repeats + 1; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    pool.Run([&](int t, int) { sink[static_cast<size_t>(t) * 16] = loop(iters); });
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0) best = std::max(best, flops_per_iter * static_cast<double>(iters) * pool.size() / secs / 1e9);
  }
  return best;
#else
  (void)repeats;
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

// GB/s of each of `repeats` passes over a buffer of `bytes`, after a warm-up pass.
std::vector<double> ReadPasses(size_t bytes, int repeats) {
  bytes = bytes / 4096 * 4096;
  auto* data = static_cast<uint64_t*>(std::aligned_alloc(4096, bytes));
  if (data == nullptr) Fail(ErrorCode::kResourceExhausted, "cannot allocate ", bytes, " bytes to measure bandwidth");
  const int64_t n = static_cast<int64_t>(bytes / 8);
  ThreadPool& pool = DefaultThreadPool();
  // Touch every page first (with distinct values, so nothing is a shared zero page).
  pool.ParallelFor(n, 1 << 16, [&](int64_t a, int64_t b) {
    for (int64_t i = a; i < b; ++i) data[i] = static_cast<uint64_t>(i) * 0x9e3779b97f4a7c15ull;
  });
  std::vector<double> rates;
  std::vector<uint64_t> sums(static_cast<size_t>(pool.size()) * 8);
  for (int r = 0; r < repeats + 1; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    pool.Run([&](int t, int nt) {
      const int64_t begin = n * t / nt, end = n * (t + 1) / nt;
      // Eight independent accumulators keep enough loads in flight; the compiler vectorises the loop.
      uint64_t acc[8] = {};
      int64_t i = begin;
      for (; i + 8 <= end; i += 8)
        for (int k = 0; k < 8; ++k) acc[k] += data[i + k];
      for (; i < end; ++i) acc[0] += data[i];
      uint64_t s = 0;
      for (uint64_t v : acc) s += v;
      sums[static_cast<size_t>(t) * 8] = s;  // keep the reads from being optimised away
    });
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0) rates.push_back(static_cast<double>(bytes) / secs / 1e9);  // the first pass is a warm-up
  }
  std::free(data);
  return rates;
}

}  // namespace

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

}  // namespace hymt
