// The thread pool under TSan's eye: results written by workers must be visible to the caller when Run
// returns (the kernels rely on it for every op), every index must be visited once, and pools must start
// and stop cleanly while their workers are between spinning and sleeping.
#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "core/thread_pool.h"

namespace hymt {
namespace {

TEST(ThreadPoolStress, WorkersResultsAreVisibleAndEveryIndexRunsOnce) {
  ThreadPool pool(4);
  std::vector<int> out;  // plain ints: the pool's own synchronisation must publish them
  for (int round = 0; round < 2000; ++round) {
    const int64_t n = 1 + round % 97;
    out.assign(static_cast<size_t>(n), 0);
    pool.ParallelFor(n, 1 + round % 5, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) out[i] += static_cast<int>(i) + round;
    });
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out[i], i + round) << "round " << round << " index " << i;
  }
}

TEST(ThreadPoolStress, RunGivesEveryThreadItsIndex) {
  ThreadPool pool(3);
  std::vector<int> hits(3);
  for (int round = 0; round < 1000; ++round) {
    pool.Run([&](int index, int n) {
      ASSERT_EQ(n, 3);
      ++hits[index];
    });
  }
  EXPECT_EQ(hits, (std::vector<int>{1000, 1000, 1000}));
}

TEST(ThreadPoolStress, PoolsStartAndStopWhileIdleOrBusy) {
  for (int i = 0; i < 200; ++i) {
    ThreadPool pool(1 + i % 4);
    std::atomic<int64_t> sum{0};
    if (i % 2) pool.ParallelFor(100, 3, [&](int64_t b, int64_t e) { sum += e - b; });
    EXPECT_EQ(sum.load(), i % 2 ? 100 : 0);
  }  // destroyed right away: workers may still be spinning or only just asleep
}

}  // namespace
}  // namespace hymt
