#include "server/file_store.h"

#include <random>

#include "core/status.h"

namespace hymt {
namespace {

std::string RandomId() {
  // random_device reads the kernel's generator: ids cannot be predicted from earlier ones.
  static thread_local std::random_device rd;
  static const char kHex[] = "0123456789abcdef";
  std::string id;
  for (int i = 0; i < 4; ++i) {
    uint32_t v = rd();
    for (int j = 0; j < 8; ++j) {
      id += kHex[v & 15];
      v >>= 4;
    }
  }
  return id;
}

}  // namespace

FileStore::FileStore(size_t max_files, size_t max_bytes, std::chrono::seconds ttl)
    : max_files_(max_files), max_bytes_(max_bytes), ttl_(ttl) {}

void FileStore::DropExpired(Clock::time_point now) {
  // Expiry times grow with position (one ttl for all), so expired entries are at the front.
  while (!entries_.empty() && entries_.front().expires <= now) {
    bytes_ -= entries_.front().file.data.size();
    entries_.pop_front();
  }
}

std::string FileStore::Put(StoredFile file, Clock::time_point now) {
  if (file.data.size() > max_bytes_)
    Fail(ErrorCode::kResourceExhausted, "the translated file (", file.data.size(),
         " bytes) is larger than the download store (", max_bytes_, " bytes)");
  std::lock_guard<std::mutex> lock(mu_);
  DropExpired(now);
  while (!entries_.empty() && (entries_.size() >= max_files_ || bytes_ + file.data.size() > max_bytes_)) {
    bytes_ -= entries_.front().file.data.size();
    entries_.pop_front();
  }
  Entry e;
  e.id = RandomId();
  e.expires = now + ttl_;
  bytes_ += file.data.size();
  e.file = std::move(file);
  entries_.push_back(std::move(e));
  return entries_.back().id;
}

std::optional<StoredFile> FileStore::Get(const std::string& id, Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  DropExpired(now);
  for (const Entry& e : entries_)
    if (e.id == id) return e.file;
  return std::nullopt;
}

size_t FileStore::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

size_t FileStore::count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

}  // namespace hymt
