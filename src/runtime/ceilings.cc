#include "runtime/ceilings.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"

namespace hymt {

double MeasureHostReadBandwidth(size_t bytes, int repeats) {
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
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
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

}  // namespace hymt
