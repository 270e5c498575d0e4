#include "server/admission.h"

#include <algorithm>
#include <cmath>

#include "server/http_error.h"

namespace hymt {
namespace {

// Compares without returning early at the first difference, so the time taken does not tell an
// attacker how much of a guessed key was right.
bool SameKey(const std::string& a, const std::string& b) {
  unsigned diff = a.size() == b.size() ? 0u : 1u;
  const size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned>(x ^ y);
  }
  return diff == 0;
}

}  // namespace

KeyChecker::KeyChecker(std::vector<std::string> keys) : keys_(std::move(keys)) {}

void KeyChecker::Check(const std::optional<std::string>& key) const {
  if (keys_.empty()) return;
  if (!key || key->empty())
    throw HttpError(401, ErrorCode::kInvalidArgument,
                    "an API key is required (Authorization: Bearer KEY, or the api_key field)");
  bool ok = false;
  for (const std::string& k : keys_) ok |= SameKey(k, *key);
  if (!ok) throw HttpError(403, ErrorCode::kInvalidArgument, "invalid API key");
}

RateLimiter::RateLimiter(int per_minute) : per_minute_(per_minute) {}

void RateLimiter::Take(const std::string& client, Clock::time_point now) {
  if (per_minute_ <= 0) return;
  const double capacity = per_minute_;
  const double per_second = per_minute_ / 60.0;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = buckets_.find(client);
  if (it == buckets_.end()) {
    if (buckets_.size() >= kMaxClients) {
      for (auto b = buckets_.begin(); b != buckets_.end();)
        b = now - b->second.updated > std::chrono::minutes(1) ? buckets_.erase(b) : std::next(b);
      if (buckets_.size() >= kMaxClients)
        throw HttpError(429, ErrorCode::kUnavailable, "too many distinct clients; try again later", 60);
    }
    it = buckets_.emplace(client, Bucket{capacity, now}).first;
  }
  Bucket& b = it->second;
  const double elapsed = std::chrono::duration<double>(now - b.updated).count();
  b.tokens = std::min(capacity, b.tokens + elapsed * per_second);
  b.updated = now;
  if (b.tokens < 1.0) {
    const int wait = static_cast<int>(std::ceil((1.0 - b.tokens) / per_second));
    throw HttpError(429, ErrorCode::kUnavailable,
                    StrCat("rate limit of ", per_minute_, " requests per minute reached"), std::max(wait, 1));
  }
  b.tokens -= 1.0;
}

InflightGate::Slot& InflightGate::Slot::operator=(Slot&& o) noexcept {
  if (this != &o) {
    if (gate_) gate_->Leave();
    gate_ = o.gate_;
    o.gate_ = nullptr;
  }
  return *this;
}

InflightGate::Slot::~Slot() {
  if (gate_) gate_->Leave();
}

InflightGate::Slot InflightGate::Enter() {
  std::lock_guard<std::mutex> lock(mu_);
  if (count_ >= limit_)
    throw HttpError(503, ErrorCode::kUnavailable,
                    StrCat("the server is busy (", limit_, " requests in flight); try again shortly"), 1);
  ++count_;
  return Slot(this);
}

int64_t InflightGate::in_flight() const {
  std::lock_guard<std::mutex> lock(mu_);
  return count_;
}

void InflightGate::Leave() {
  std::lock_guard<std::mutex> lock(mu_);
  --count_;
}

}  // namespace hymt
