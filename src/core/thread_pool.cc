#include "core/thread_pool.h"

#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <mutex>

#include "core/status.h"

namespace hymt {
namespace {

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Spinning keeps dispatch latency in the microseconds when the cores are ours; when they are not (other
// processes, the server's HTTP threads), a spinning thread steals the time slice of the thread it waits
// for, so spins are short, yield now and then, and end in a futex wait.
constexpr int kSpinIterations = 4000;
constexpr int kYieldEvery = 256;

}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
  workers_.reserve(n_threads_ - 1);
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  generation_.fetch_add(1);
  generation_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::WorkerLoop(int index) {
  uint64_t seen = 0;
  while (true) {
    uint64_t gen = generation_.load(std::memory_order_acquire);
    for (int spin = 0; gen == seen && spin < kSpinIterations; ++spin) {
      if (spin % kYieldEvery == kYieldEvery - 1) {
        sched_yield();
      } else {
        CpuRelax();
      }
      gen = generation_.load(std::memory_order_acquire);
    }
    if (gen == seen) {
      generation_.wait(seen, std::memory_order_acquire);
      continue;
    }
    seen = gen;
    if (stop_.load()) return;
    (*job_)(index, n_threads_);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
  }
}

void ThreadPool::Run(const std::function<void(int, int)>& fn) {
  if (n_threads_ == 1) {
    fn(0, 1);
    return;
  }
  job_ = &fn;
  pending_.store(n_threads_ - 1, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  fn(0, n_threads_);
  for (int spin = 0;; ++spin) {
    int left = pending_.load(std::memory_order_acquire);
    if (left == 0) break;
    if (spin < kSpinIterations) {
      if (spin % kYieldEvery == kYieldEvery - 1) {
        sched_yield();
      } else {
        CpuRelax();
      }
    } else {
      pending_.wait(left, std::memory_order_acquire);
    }
  }
  job_ = nullptr;
}

void ThreadPool::ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  if (n_threads_ == 1 || n <= grain) {
    fn(0, n);
    return;
  }
  std::atomic<int64_t> next{0};
  Run([&](int, int) {
    while (true) {
      int64_t begin = next.fetch_add(grain, std::memory_order_relaxed);
      if (begin >= n) return;
      fn(begin, std::min(n, begin + grain));
    }
  });
}

int AvailableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

namespace {
std::mutex g_pool_mu;
std::unique_ptr<ThreadPool> g_pool;

int DefaultThreadCount() {
  if (const char* env = std::getenv("HYMT_THREADS")) {
    int n = std::atoi(env);
    if (n > 0) return n;
  }
  return AvailableCores();
}
}  // namespace

ThreadPool& DefaultThreadPool() {
  std::lock_guard<std::mutex> lock(g_pool_mu);
  if (!g_pool) g_pool = std::make_unique<ThreadPool>(DefaultThreadCount());
  return *g_pool;
}

void SetDefaultThreads(int n_threads) {
  std::lock_guard<std::mutex> lock(g_pool_mu);
  g_pool = std::make_unique<ThreadPool>(n_threads > 0 ? n_threads : DefaultThreadCount());
}

}  // namespace hymt
