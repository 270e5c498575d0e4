#include "server/sse.h"

namespace hymt {

std::string SseEvent(std::string_view name, std::string_view data) {
  std::string out;
  if (!name.empty()) {
    out += "event: ";
    out += name;
    out += '\n';
  }
  out += "data: ";
  out += data;
  out += "\n\n";
  return out;
}

void SseChannel::Push(std::string event) {
  std::lock_guard<std::mutex> lock(mu_);
  items_.push_back(Item{false, 0, std::move(event)});
  cv_.notify_all();
}

void SseChannel::PushLatest(uint64_t key, std::string event) {
  std::lock_guard<std::mutex> lock(mu_);
  for (Item& it : items_) {
    if (it.keyed && it.key == key) {
      it.event = std::move(event);
      return;
    }
  }
  items_.push_back(Item{true, key, std::move(event)});
  cv_.notify_all();
}

void SseChannel::Close() {
  std::lock_guard<std::mutex> lock(mu_);
  closed_ = true;
  cv_.notify_all();
}

bool SseChannel::Take(std::vector<std::string>* out, std::chrono::milliseconds wait) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, wait, [&] { return closed_ || !items_.empty(); });
  for (Item& it : items_) out->push_back(std::move(it.event));
  items_.clear();
  return !(closed_ && out->empty());
}

SseStream::SseStream(std::function<void(SseChannel&)> work, std::shared_ptr<std::atomic<bool>> cancelled)
    : work_(std::move(work)), cancelled_(std::move(cancelled)) {}

SseStream::~SseStream() {
  cancelled_->store(true);
  if (worker_.joinable()) worker_.join();
}

bool SseStream::Pump(const std::function<bool(std::string_view)>& write, bool* done) {
  *done = false;
  if (!worker_.joinable()) {
    worker_ = std::thread([this] {
      work_(channel_);
      channel_.Close();
    });
  }
  std::vector<std::string> events;
  if (!channel_.Take(&events, kHeartbeat)) {
    *done = true;
    return false;
  }
  if (events.empty()) events.push_back(": keep-alive\n\n");
  for (const std::string& e : events) {
    if (!write(e)) {
      cancelled_->store(true);
      return false;
    }
  }
  return true;
}

}  // namespace hymt
