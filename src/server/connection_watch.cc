#include "server/connection_watch.h"

#include <dirent.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>

namespace hymt {
namespace {

// The numeric address and port of a socket address, as cpp-httplib reports them.
bool Describe(const sockaddr_storage& addr, socklen_t len, std::string* ip, int* port) {
  if (addr.ss_family == AF_INET) {
    *port = ntohs(reinterpret_cast<const sockaddr_in*>(&addr)->sin_port);
  } else if (addr.ss_family == AF_INET6) {
    *port = ntohs(reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_port);
  } else {
    return false;
  }
  std::array<char, NI_MAXHOST> host{};
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, host.data(), host.size(), nullptr, 0,
                  NI_NUMERICHOST) != 0)
    return false;
  *ip = host.data();
  return true;
}

}  // namespace

int FindConnectionSocket(const ConnectionAddress& address) {
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return -1;
  int found = -1;
  const int own = dirfd(dir);
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    const int fd = std::atoi(e->d_name);
    if (fd == own) continue;
    sockaddr_storage peer{}, local{};
    socklen_t peer_len = sizeof peer, local_len = sizeof local;
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) continue;
    std::string ip;
    int port = -1;
    if (!Describe(peer, peer_len, &ip, &port) || port != address.remote_port || ip != address.remote_addr)
      continue;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) != 0) continue;
    if (!Describe(local, local_len, &ip, &port) || port != address.local_port || ip != address.local_addr)
      continue;
    found = fd;
    break;
  }
  closedir(dir);
  return found;
}

bool PeerHasClosed(int fd) {
  pollfd p{};
  p.fd = fd;
  p.events = POLLRDHUP;
  if (poll(&p, 1, 0) <= 0) return false;
  return (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

ConnectionWatcher::Watch& ConnectionWatcher::Watch::operator=(Watch&& o) noexcept {
  if (this != &o) {
    if (owner_) owner_->Remove(id_);
    owner_ = o.owner_;
    id_ = o.id_;
    o.owner_ = nullptr;
  }
  return *this;
}

ConnectionWatcher::Watch::~Watch() {
  if (owner_) owner_->Remove(id_);
}

ConnectionWatcher::ConnectionWatcher() : thread_([this] { Loop(); }) {}

ConnectionWatcher::~ConnectionWatcher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

ConnectionWatcher::Watch ConnectionWatcher::Add(const ConnectionAddress& address,
                                                std::shared_ptr<std::atomic<bool>> gone) {
  const int fd = FindConnectionSocket(address);
  if (fd < 0) return Watch();
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t id = next_id_++;
  entries_.push_back(Entry{id, fd, std::move(gone)});
  cv_.notify_all();
  return Watch(this, id);
}

void ConnectionWatcher::Remove(uint64_t id) {
  // Under the mutex: once this returns, the loop no longer polls the descriptor (which the HTTP
  // library may then close and the kernel hand out again).
  std::lock_guard<std::mutex> lock(mu_);
  entries_.erase(std::remove_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.id == id; }),
                 entries_.end());
}

void ConnectionWatcher::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    if (entries_.empty()) {
      cv_.wait(lock, [&] { return stopping_ || !entries_.empty(); });
      continue;
    }
    for (const Entry& e : entries_)
      if (!e.gone->load() && PeerHasClosed(e.fd)) e.gone->store(true);
    cv_.wait_for(lock, std::chrono::milliseconds(kPollMilliseconds), [&] { return stopping_; });
  }
}

}  // namespace hymt
