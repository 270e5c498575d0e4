// A read-only memory-mapped file. Model weights are used in place from the mapping (zero copy).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace hymt {

class MappedFile {
 public:
  // Maps the whole file. Throws Error(kNotFound) if it cannot be opened, kCorruptData if it is
  // not a regular file.
  static MappedFile Open(const std::string& path);

  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

  // Hints the kernel to read ahead the whole mapping (used before streaming weights).
  void WillNeed() const;

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

// If [p, p + bytes) lies inside a live MappedFile, drops this process's resident pages of its whole pages
// (the file's pages stay in the page cache; reading them again maps them back) and returns true; else
// does nothing and returns false. For callers that have copied the bytes elsewhere (a backend's own
// layout of a weight), so that resident memory does not hold both.
bool ReleaseMappedPages(const void* p, size_t bytes);

// Asks the kernel to back the whole pages inside [p, p + bytes) of anonymous memory with transparent huge
// pages (Linux, "madvise" mode). Advice only: nothing changes where the kernel declines. For buffers that
// are streamed end to end (the CPU backend's packed weights, and the bandwidth probes that are their
// ceiling): with 4 KiB pages each page costs a TLB miss.
void AdviseHugePages(void* p, size_t bytes);

// Reads a whole (small) file into a string. Throws Error(kNotFound) when it cannot be read, and
// Error(kResourceExhausted) when it is larger than max_bytes.
std::string ReadFile(const std::string& path, size_t max_bytes = size_t{1} << 30);

bool FileExists(const std::string& path);
bool IsDirectory(const std::string& path);

// Joins two path parts with one '/'.
std::string JoinPath(const std::string& a, const std::string& b);

}  // namespace hymt
