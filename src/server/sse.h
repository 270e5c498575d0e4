// Server-sent events: a worker thread produces events while the HTTP thread writes them to the client.
// Partial results are coalesced (a slow client gets the latest text, not every intermediate one), and a
// client that stops reading is noticed by the failed write or the connection watcher and cancelled.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace hymt {

// "event: NAME\ndata: DATA\n\n" (no event line when name is empty). DATA must hold no newline (compact
// JSON never does).
std::string SseEvent(std::string_view name, std::string_view data);

class SseChannel {
 public:
  // Appends an event.
  void Push(std::string event);
  // Appends an event, or replaces the unsent event pushed with the same key (keeping its place).
  void PushLatest(uint64_t key, std::string event);
  // No more events will come.
  void Close();
  // Waits up to `wait` for events and moves them to *out in order. Returns false once the channel is
  // closed and every event has been taken.
  bool Take(std::vector<std::string>* out, std::chrono::milliseconds wait);

 private:
  struct Item {
    bool keyed;
    uint64_t key;
    std::string event;
  };
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> items_;
  bool closed_ = false;
};

// One streaming response: runs `work` on its own thread (started by the first Pump) and relays what
// it pushes. `work` must push its own final or error event; the channel is closed when it returns.
// The destructor cancels (sets `cancelled`) and joins the worker.
class SseStream {
 public:
  // How long the stream may stay silent before a comment line is sent (keeps proxies from timing out
  // and tells a dead connection early).
  static constexpr std::chrono::milliseconds kHeartbeat{2000};

  SseStream(std::function<void(SseChannel&)> work, std::shared_ptr<std::atomic<bool>> cancelled);
  ~SseStream();

  // Writes what is ready through `write`; returns false when the stream is over (or the client is gone:
  // a failed write sets `cancelled`). *done is set when every event was written.
  bool Pump(const std::function<bool(std::string_view)>& write, bool* done);

 private:
  std::function<void(SseChannel&)> work_;
  std::shared_ptr<std::atomic<bool>> cancelled_;
  SseChannel channel_;
  std::thread worker_;
};

}  // namespace hymt
