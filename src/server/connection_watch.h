// Noticing that a client hung up while its request is still being worked on, so that its work is
// cancelled and its KV pages come back at the next engine step.
//
// cpp-httplib 0.11 (Debian's) hands handlers no access to the connection. The connection's socket is
// found instead by its addresses (the pair of addresses identifies one TCP connection), which the
// library does report, among the process's open descriptors; a watcher thread then polls the registered
// sockets for a hang-up. The descriptor stays valid while it is watched because the library closes it
// only after the handler (or the streaming content provider) returns, and the watch ends before that.
// Limit: a client that half-closes its side after sending the request (shutdown(SHUT_WR)) reads as gone.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace hymt {

struct ConnectionAddress {
  std::string remote_addr;  // numeric, as getnameinfo(NI_NUMERICHOST) writes it
  int remote_port = -1;
  std::string local_addr;
  int local_port = -1;
};

// The descriptor of this process's TCP socket with these addresses, or -1 when there is none.
int FindConnectionSocket(const ConnectionAddress& address);

// True when the peer of socket `fd` has closed its side or the connection failed.
bool PeerHasClosed(int fd);

class ConnectionWatcher {
 public:
  // How often registered sockets are polled: the delay between a hang-up and the cancel flag.
  static constexpr int kPollMilliseconds = 100;

  ConnectionWatcher();
  ~ConnectionWatcher();
  ConnectionWatcher(const ConnectionWatcher&) = delete;
  ConnectionWatcher& operator=(const ConnectionWatcher&) = delete;

  // Unregisters on destruction.
  class Watch {
   public:
    Watch() = default;
    Watch(ConnectionWatcher* owner, uint64_t id) : owner_(owner), id_(id) {}
    Watch(Watch&& o) noexcept : owner_(o.owner_), id_(o.id_) { o.owner_ = nullptr; }
    Watch& operator=(Watch&& o) noexcept;
    ~Watch();
    // False when the socket was not found (the request then runs to its end or its deadline).
    bool active() const { return owner_ != nullptr; }

   private:
    ConnectionWatcher* owner_ = nullptr;
    uint64_t id_ = 0;
  };

  // Sets *gone to true once the client of `address` has hung up.
  Watch Add(const ConnectionAddress& address, std::shared_ptr<std::atomic<bool>> gone);

 private:
  struct Entry {
    uint64_t id;
    int fd;
    std::shared_ptr<std::atomic<bool>> gone;
  };
  void Remove(uint64_t id);
  void Loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Entry> entries_;
  uint64_t next_id_ = 1;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace hymt
