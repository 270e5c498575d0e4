// A CUDA injection library for hosts without Nsight Systems: loaded by the driver through
// CUDA_INJECTION64_PATH, it records every kernel's start and end on the device (CUPTI's activity API,
// kernels inside CUDA graphs included, one record each) and writes them at exit to the file named by
// HYMT_KERNEL_TRACE as CSV lines "start_ns,end_ns,grid_x,grid_y,grid_z,name" in start order, for
// tools/device/step_trace.py. Nothing in hymt links it.
//
//   g++ -shared -fPIC -O2 -I$CUDA/include tools/device/kernel_trace.cc -L$CUDA/lib64 -lcupti \
//       -Wl,-rpath,$CUDA/lib64 -o libkernel_trace.so
//   CUDA_INJECTION64_PATH=$PWD/libkernel_trace.so HYMT_KERNEL_TRACE=trace.csv hymt bench ...
#include <cupti.h>
#include <cxxabi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

namespace {

// The leading fields every kernel record version since the fourth shares (cupti_activity.h); the records
// a newer CUPTI writes only append fields, so this prefix reads all of them.
struct KernelRecordPrefix {
  CUpti_ActivityKind kind;
  uint8_t cache_config;
  uint8_t shared_memory_config;
  uint16_t registers_per_thread;
  uint32_t partitioned_cache_requested;
  uint32_t partitioned_cache_executed;
  uint64_t start;
  uint64_t end;
  uint64_t completed;
  uint32_t device_id;
  uint32_t context_id;
  uint32_t stream_id;
  int32_t grid[3];
  int32_t block[3];
  int32_t static_shared;
  int32_t dynamic_shared;
  uint32_t local_per_thread;
  uint32_t local_total;
  uint32_t correlation_id;
  int64_t grid_id;
  const char* name;
};

struct Row {
  uint64_t start, end;
  int32_t grid[3];
  std::string name;
};

std::mutex g_mu;
std::vector<Row> g_rows;
size_t g_dropped = 0;
constexpr size_t kBufferBytes = size_t{8} << 20;

std::string Demangle(const char* name) {
  if (!name) return "?";
  int status = 0;
  char* d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string s = status == 0 && d ? d : name;
  std::free(d);
  return s;
}

void CUPTIAPI BufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI BufferCompleted(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* rec = nullptr;
  std::vector<Row> rows;
  while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
    if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && rec->kind != CUPTI_ACTIVITY_KIND_KERNEL)
      continue;
    const auto* k = reinterpret_cast<const KernelRecordPrefix*>(rec);
    rows.push_back(Row{k->start, k->end, {k->grid[0], k->grid[1], k->grid[2]}, Demangle(k->name)});
  }
  size_t dropped = 0;
  cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped);
  std::free(buffer);
  std::lock_guard<std::mutex> lock(g_mu);
  g_dropped += dropped;
  g_rows.insert(g_rows.end(), rows.begin(), rows.end());
}

void WriteTrace() {
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  const char* path = std::getenv("HYMT_KERNEL_TRACE");
  std::lock_guard<std::mutex> lock(g_mu);
  std::sort(g_rows.begin(), g_rows.end(), [](const Row& a, const Row& b) { return a.start < b.start; });
  FILE* f = path ? std::fopen(path, "w") : nullptr;
  if (!f) {
    std::fprintf(stderr, "kernel_trace: cannot write %s\n", path ? path : "(HYMT_KERNEL_TRACE is not set)");
    return;
  }
  for (const Row& r : g_rows) {
    std::string name = r.name;
    std::replace(name.begin(), name.end(), '\n', ' ');
    std::fprintf(f, "%llu,%llu,%d,%d,%d,%s\n", static_cast<unsigned long long>(r.start),
                 static_cast<unsigned long long>(r.end), r.grid[0], r.grid[1], r.grid[2], name.c_str());
  }
  std::fclose(f);
  std::fprintf(stderr, "kernel_trace: %zu kernels written to %s (%zu records dropped)\n", g_rows.size(), path,
               g_dropped);
}

}  // namespace

extern "C" int InitializeInjection() {
  if (cuptiActivityRegisterCallbacks(BufferRequested, BufferCompleted) != CUPTI_SUCCESS ||
      cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) {
    std::fprintf(stderr, "kernel_trace: CUPTI did not start\n");
    return 0;
  }
  std::atexit(WriteTrace);
  return 1;
}
