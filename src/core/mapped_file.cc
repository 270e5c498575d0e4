#include "core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <utility>

#include "core/status.h"

namespace hymt {
namespace {

// The live mappings (start -> size), for ReleaseMappedPages.
std::mutex& MappingsMutex() {
  static std::mutex m;
  return m;
}
std::map<const uint8_t*, size_t>& Mappings() {
  static std::map<const uint8_t*, size_t> m;
  return m;
}

void Unmap(const uint8_t* data, size_t size) {
  {
    std::lock_guard<std::mutex> lock(MappingsMutex());
    Mappings().erase(data);
  }
  ::munmap(const_cast<uint8_t*>(data), size);
}

}  // namespace

MappedFile MappedFile::Open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) Fail(ErrorCode::kNotFound, "cannot open ", path, ": ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    Fail(ErrorCode::kCorruptData, path, " is not a regular file");
  }
  MappedFile f;
  f.path_ = path;
  f.size_ = static_cast<size_t>(st.st_size);
  if (f.size_ > 0) {
    void* p = ::mmap(nullptr, f.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      Fail(ErrorCode::kInternal, "cannot map ", path, ": ", std::strerror(err));
    }
    f.data_ = static_cast<const uint8_t*>(p);
    std::lock_guard<std::mutex> lock(MappingsMutex());
    Mappings()[f.data_] = f.size_;
  }
  ::close(fd);
  return f;
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      path_(std::move(other.path_)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) Unmap(data_, size_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    path_ = std::move(other.path_);
  }
  return *this;
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) Unmap(data_, size_);
}

void MappedFile::WillNeed() const {
  if (data_ != nullptr) ::madvise(const_cast<uint8_t*>(data_), size_, MADV_WILLNEED);
}

bool ReleaseMappedPages(const void* p, size_t bytes) {
  const auto* begin = static_cast<const uint8_t*>(p);
  {
    std::lock_guard<std::mutex> lock(MappingsMutex());
    auto it = Mappings().upper_bound(begin);
    if (it == Mappings().begin()) return false;
    --it;
    if (begin + bytes > it->first + it->second) return false;
  }
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t first = (reinterpret_cast<uintptr_t>(begin) + page - 1) / page * page;
  const uintptr_t last = (reinterpret_cast<uintptr_t>(begin) + bytes) / page * page;
  // A private read-only mapping that was never written: dropping its pages loses nothing.
  if (last > first) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
  return true;
}

void AdviseHugePages(void* p, size_t bytes) {
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t first = (reinterpret_cast<uintptr_t>(p) + page - 1) / page * page;
  const uintptr_t last = (reinterpret_cast<uintptr_t>(p) + bytes) / page * page;
  if (last > first) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
}

std::string ReadFile(const std::string& path, size_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) Fail(ErrorCode::kNotFound, "cannot open ", path, ": ", std::strerror(errno));
  in.seekg(0, std::ios::end);
  std::streamoff n = in.tellg();
  if (n < 0) Fail(ErrorCode::kInternal, "cannot read ", path);
  if (static_cast<uint64_t>(n) > max_bytes)
    Fail(ErrorCode::kResourceExhausted, path, " is ", n, " bytes; the limit for this file is ", max_bytes);
  in.seekg(0);
  std::string s(static_cast<size_t>(n), '\0');
  if (n > 0 && !in.read(s.data(), n)) Fail(ErrorCode::kInternal, "cannot read ", path);
  return s;
}

bool FileExists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool IsDirectory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string JoinPath(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  if (a.back() == '/') return a + b;
  return a + "/" + b;
}

}  // namespace hymt
