// The CPU backend: construction, memory, copies and the step. The ops live in one file per family
// (matmul.cc, attention.cc, norm.cc, elementwise.cc), each next to its kernels/ file.
#include "backends/cpu/cpu_ops.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "backends/cpu/cpu_ops_impl.h"
#include "backends/cpu/packed.h"
#include "core/mapped_file.h"
#include "core/status.h"

namespace hymt {
namespace cpu {

void ScratchBuffer::Free::operator()(void* p) const {
  std::free(p);
}

void* ScratchBuffer::Get(size_t bytes) {
  if (bytes > size_) {
    size_t rounded = (bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded);
    if (p == nullptr)
      Fail(ErrorCode::kResourceExhausted, "cannot allocate ", FormatBytes(bytes), " of CPU scratch");
    data_.reset(p);
    size_ = rounded;
  }
  return data_.get();
}

uint8_t* ScratchBuffer::PerThread(int n_threads, size_t bytes_each, size_t* stride) {
  *stride = (bytes_each + 127) / 128 * 128;  // whole cache-line pairs: no false sharing with neighbours
  return static_cast<uint8_t*>(Get(*stride * static_cast<size_t>(n_threads)));
}

void ParallelChunks(ThreadPool& pool, int64_t n, int64_t align,
                    const std::function<void(int64_t, int64_t, int)>& fn) {
  if (n <= 0) return;
  const int64_t n_units = (n + align - 1) / align;
  const int n_threads = static_cast<int>(std::min<int64_t>(pool.size(), n_units));
  if (n_threads <= 1) {
    fn(0, n, 0);
    return;
  }
  pool.Run([&](int thread, int) {
    if (thread >= n_threads) return;
    const int64_t begin = std::min(n, n_units * thread / n_threads * align);
    const int64_t end = std::min(n, n_units * (thread + 1) / n_threads * align);
    if (begin < end) fn(begin, end, thread);
  });
}

void ParallelDynamic(ThreadPool& pool, int64_t n, int64_t grain,
                     const std::function<void(int64_t, int64_t, int)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  if (pool.size() == 1 || n <= grain) {
    fn(0, n, 0);
    return;
  }
  std::atomic<int64_t> next{0};
  pool.Run([&](int thread, int) {
    while (true) {
      const int64_t begin = next.fetch_add(grain, std::memory_order_relaxed);
      if (begin >= n) return;
      fn(begin, std::min(n, begin + grain), thread);
    }
  });
}

namespace {

class HostBuffer : public Buffer {
 public:
  HostBuffer(size_t bytes, const std::string& what) : size_(bytes) {
    const size_t rounded = (bytes + 63) / 64 * 64;
    data_ = rounded == 0 ? nullptr : std::aligned_alloc(64, rounded);
    if (rounded != 0 && data_ == nullptr)
      Fail(ErrorCode::kResourceExhausted, "cannot allocate ", FormatBytes(bytes), " of host memory for ",
           what);
  }
  ~HostBuffer() override { std::free(data_); }
  void* data() override { return data_; }
  size_t size() const override { return size_; }

 private:
  void* data_;
  size_t size_;
};

}  // namespace

CpuOps::CpuOps(Isa isa) : isa_(isa), k_(GetKernels(isa)) {}

std::string CpuOps::name() const {
  return StrCat("cpu-", IsaName(isa_));
}

std::unique_ptr<Buffer> CpuOps::Allocate(size_t bytes, const std::string& what) {
  return std::make_unique<HostBuffer>(bytes, what);
}

namespace {

constexpr size_t kPackSliceBytes = size_t{64} << 20;

}  // namespace

// Weights of q8_0, q4_k and q6_k are repacked for the AVX-512 VNNI and AVX2 kernels (packed.h); every
// other weight, and every weight on the generic kernels, is used in place (zero copy: the float GEMVs
// reach 80-100% of the read bandwidth from the mapped layout). When a packed weight's source is a mapped file, its pages
// leave this process's resident memory (they stay in the page cache; Embed on a tied table maps back
// the rows it reads), so that resident memory does not hold both layouts.
Weight CpuOps::PrepareWeight(const Weight& host) {
  HYMT_CHECK(host.device.kind == DeviceKind::kCpu, "CPU weights must be in host memory: ", host.name);
  if (k_.matmul_packed == nullptr || !HasPackedLayout(host.dtype) || host.data == nullptr ||
      host.cols % GetDTypeInfo(host.dtype).block_size != 0)
    return host;
  auto buf = Allocate(PackedBytes(host.dtype, host.rows, host.cols), "packed weight " + host.name);
  auto* dst = static_cast<uint8_t*>(buf->data());
  // Huge pages where the kernel allows them (transparent huge pages in "madvise" mode): decode streams
  // every packed byte once per token, and with 4 KiB pages each page costs a TLB miss.
  AdviseHugePages(dst, buf->size());
  const auto* src = static_cast<const uint8_t*>(host.data);
  const size_t row_bytes = DTypeBytes(host.dtype, host.cols);
  const int64_t n_groups = (host.rows + kPackRows - 1) / kPackRows;
  // In slices of about kPackSliceBytes, each slice's source released as soon as it is packed: a large
  // table (the embedding) is then never resident twice.
  const int64_t slice = std::max<int64_t>(1, static_cast<int64_t>(kPackSliceBytes / (row_bytes * kPackRows)));
  for (int64_t g0 = 0; g0 < n_groups; g0 += slice) {
    const int64_t g1 = std::min(n_groups, g0 + slice);
    ParallelDynamic(DefaultThreadPool(), g1 - g0, 16, [&](int64_t begin, int64_t end, int) {
      PackGroups(host.dtype, src, row_bytes, host.rows, host.cols, g0 + begin, g0 + end, dst);
    });
    const int64_t r0 = g0 * kPackRows, r1 = std::min(host.rows, g1 * kPackRows);
    ReleaseMappedPages(src + static_cast<size_t>(r0) * row_bytes, static_cast<size_t>(r1 - r0) * row_bytes);
  }
  Weight w = host;
  w.prepared = dst;
  packed_ptrs_.insert(dst);
  packed_.push_back(std::move(buf));
  return w;
}

void CpuOps::CopyFromHost(const void* src, Tensor dst) {
  const size_t row = DTypeBytes(dst.dtype, dst.cols);
  if (dst.stride == dst.cols) {
    std::memcpy(dst.data, src, row * static_cast<size_t>(dst.rows));
    return;
  }
  for (int64_t r = 0; r < dst.rows; ++r)
    std::memcpy(static_cast<char*>(dst.data) + r * dst.RowBytes(), static_cast<const char*>(src) + r * row,
                row);
}

void CpuOps::CopyToHost(const Tensor& src, void* dst) {
  const size_t row = DTypeBytes(src.dtype, src.cols);
  if (src.stride == src.cols) {
    std::memcpy(dst, src.data, row * static_cast<size_t>(src.rows));
    return;
  }
  for (int64_t r = 0; r < src.rows; ++r)
    std::memcpy(static_cast<char*>(dst) + r * row, static_cast<const char*>(src.data) + r * src.RowBytes(),
                row);
}

void CpuOps::BeginStep(const StepBatch& batch) {
  batch_ = batch;
  rope_key_ = nullptr;  // positions changed: the cos/sin tables are stale
}

}  // namespace cpu

std::unique_ptr<Ops> CreateCpuOps() {
  return CreateCpuOps(cpu::DefaultIsa());
}

std::unique_ptr<Ops> CreateCpuOps(cpu::Isa isa) {
  if (!cpu::IsaSupported(isa))
    Fail(ErrorCode::kUnsupported, "the CPU backend for ", cpu::IsaName(isa),
         " needs instructions this CPU lacks");
  return std::make_unique<cpu::CpuOps>(isa);
}

}  // namespace hymt
