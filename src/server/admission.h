// Who may send work, how often, and how much at once: API keys, a per-client rate limit and the
// bound on translation requests in flight. Each refusal is an HttpError with its status (401, 403,
// 429, 503) and, where waiting helps, a Retry-After.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace hymt {

class KeyChecker {
 public:
  // No keys: every request is allowed.
  explicit KeyChecker(std::vector<std::string> keys);
  bool required() const { return !keys_.empty(); }
  // Throws HttpError 401 when a key is required and none was given, 403 when the key is not one of
  // ours. Compares in time independent of where keys differ.
  void Check(const std::optional<std::string>& key) const;

 private:
  std::vector<std::string> keys_;
};

// A token bucket per client (the API key, else the remote address): `per_minute` requests per minute
// with bursts of up to `per_minute`. Thread-safe. The table of clients is bounded: when it is full,
// clients idle for a minute (whose buckets are full again) are forgotten.
class RateLimiter {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr size_t kMaxClients = 100000;

  explicit RateLimiter(int per_minute);  // 0: no limit
  // Takes one token for `client` or throws HttpError 429 with the seconds until one is available.
  void Take(const std::string& client, Clock::time_point now = Clock::now());

 private:
  struct Bucket {
    double tokens;
    Clock::time_point updated;
  };
  int per_minute_;
  std::mutex mu_;
  std::map<std::string, Bucket> buckets_;
};

// Bounds the translation and generation requests in flight (each holds HTTP and engine resources while
// it waits). Non-blocking: a request that finds the gate full is refused at once with 503.
class InflightGate {
 public:
  explicit InflightGate(int64_t limit) : limit_(limit) {}

  class Slot {
   public:
    Slot() = default;
    explicit Slot(InflightGate* gate) : gate_(gate) {}
    Slot(Slot&& o) noexcept : gate_(o.gate_) { o.gate_ = nullptr; }
    Slot& operator=(Slot&& o) noexcept;
    Slot(const Slot&) = delete;
    Slot& operator=(const Slot&) = delete;
    ~Slot();

   private:
    InflightGate* gate_ = nullptr;
  };

  // Throws HttpError 503 (Retry-After: 1) when `limit` requests are in flight.
  Slot Enter();
  int64_t in_flight() const;
  int64_t limit() const { return limit_; }

 private:
  void Leave();
  int64_t limit_;
  mutable std::mutex mu_;
  int64_t count_ = 0;
};

}  // namespace hymt
