// Translated files waiting to be downloaded (POST /translate_file answers with a URL into this store).
// Held in memory, bounded in count and bytes, each for a limited time: when a new file does not fit,
// expired files go first, then the oldest ones.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>

namespace hymt {

struct StoredFile {
  std::string name;          // the download name (already safe: see SafeFileName)
  std::string content_type;  // e.g. "text/html; charset=utf-8"
  std::string data;
};

class FileStore {
 public:
  using Clock = std::chrono::steady_clock;
  FileStore(size_t max_files, size_t max_bytes, std::chrono::seconds ttl);

  // Stores a file and returns its id (32 random hex digits, unguessable). Throws
  // Error(kResourceExhausted) when the file alone is larger than the whole store.
  std::string Put(StoredFile file, Clock::time_point now = Clock::now());
  // The file, or nullopt when the id is unknown or expired.
  std::optional<StoredFile> Get(const std::string& id, Clock::time_point now = Clock::now());

  size_t bytes() const;
  size_t count() const;

 private:
  struct Entry {
    std::string id;
    StoredFile file;
    Clock::time_point expires;
  };
  void DropExpired(Clock::time_point now);

  const size_t max_files_, max_bytes_;
  const std::chrono::seconds ttl_;
  mutable std::mutex mu_;
  std::deque<Entry> entries_;  // oldest first
  size_t bytes_ = 0;
};

}  // namespace hymt
