// A fixed pool of worker threads for data-parallel kernels.
//
// Decode runs a few hundred parallel regions per token, so dispatch latency matters: workers spin
// briefly on a generation counter before sleeping (std::atomic wait/notify, a futex on Linux).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace hymt {

class ThreadPool {
 public:
  // n_threads counts the calling thread: ThreadPool(1) runs everything inline.
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Runs fn(thread_index, n_threads) once on every thread (the caller is index 0); returns when all
  // are done. Not reentrant: fn must not call Run on the same pool.
  void Run(const std::function<void(int, int)>& fn);

  // Calls fn(begin, end) over [0, n) in chunks of about `grain` items, balanced dynamically.
  void ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void WorkerLoop(int index);

  int n_threads_;
  std::vector<std::thread> workers_;
  const std::function<void(int, int)>* job_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
};

// The process-wide pool for CPU kernels: HYMT_THREADS threads, else one per available core.
ThreadPool& DefaultThreadPool();
// Replaces the process-wide pool (call before any kernel runs, e.g. from --threads).
void SetDefaultThreads(int n_threads);
int AvailableCores();

}  // namespace hymt
