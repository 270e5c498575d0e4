// Picks the kernels for this CPU from cpuid. Each ISA's table is defined in kernels/table.cc, which
// is compiled once per ISA into its own namespace.
#include "backends/cpu/dispatch.h"

#include <cpuid.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/packed.h"
#include "core/status.h"

namespace hymt::cpu {

namespace generic {
const KernelTable& Kernels();
}
namespace avx2 {
const KernelTable& Kernels();
}
namespace avxvnni {
const KernelTable& Kernels();
}
namespace avx512 {
const KernelTable& Kernels();
}

namespace {

struct CpuFeatures {
  bool avx2 = false;
  bool avxvnni = false;
  bool avx512 = false;
};

// XCR0: which register states the OS saves on a context switch.
uint64_t ReadXcr0() {
  uint32_t eax, edx;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}

CpuFeatures Detect() {
  CpuFeatures f;
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = c & (1u << 27), fma = c & (1u << 12), f16c = c & (1u << 29);
  if (!osxsave) return f;
  const uint64_t xcr0 = ReadXcr0();
  const bool os_avx = (xcr0 & 0x6) == 0x6;       // SSE and AVX state
  const bool os_avx512 = (xcr0 & 0xe6) == 0xe6;  // plus opmask, ZMM_Hi256, Hi16_ZMM
  if (__get_cpuid_max(0, nullptr) < 7) return f;
  __cpuid_count(7, 0, a, b, c, d);
  const bool avx2 = b & (1u << 5), bmi2 = b & (1u << 8);
  const bool avx512f = b & (1u << 16), avx512dq = b & (1u << 17), avx512bw = b & (1u << 30),
             avx512vl = b & (1u << 31), avx512vnni = c & (1u << 11);
  unsigned a1, b1, c1, d1;
  __cpuid_count(7, 1, a1, b1, c1, d1);
  const bool avx512bf16 = a1 & (1u << 5), avxvnni = a1 & (1u << 4);
  f.avx2 = os_avx && avx2 && fma && f16c && bmi2;
  f.avxvnni = f.avx2 && avxvnni;
  f.avx512 = f.avx2 && os_avx512 && avx512f && avx512dq && avx512bw && avx512vl && avx512vnni && avx512bf16;
  return f;
}

const CpuFeatures& Features() {
  static const CpuFeatures features = Detect();
  return features;
}

}  // namespace

const char* IsaName(Isa isa) {
  switch (isa) {
    case Isa::kGeneric:
      return "generic";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvxVnni:
      return "avxvnni";
    case Isa::kAvx512:
      return "avx512";
  }
  return "?";
}

namespace {

// A kernel choice that tests set (1 or 0; -1 restores the default) over a default made once.
class KernelSwitch {
 public:
  void Set(int on) { set_.store(on, std::memory_order_relaxed); }
  bool Get(bool fallback) const {
    const int set = set_.load(std::memory_order_relaxed);
    return set >= 0 ? set != 0 : fallback;
  }

 private:
  std::atomic<int> set_{-1};
};
KernelSwitch g_q6k_pairs, g_expand;

// 1 or 0 when the environment variable `name` starts with '1' or '0', else -1.
int EnvSwitch(const char* name) {
  const char* env = std::getenv(name);
  return env != nullptr && (*env == '0' || *env == '1') ? *env - '0' : -1;
}

bool IsIntelCpu() {
  unsigned a, b, c, d;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return false;
  char vendor[12];
  std::memcpy(vendor, &b, 4);
  std::memcpy(vendor + 4, &d, 4);
  std::memcpy(vendor + 8, &c, 4);
  return std::memcmp(vendor, "GenuineIntel", 12) == 0;
}

}  // namespace

void SetPairQ6KRowGroups(int on) {
  g_q6k_pairs.Set(on);
}

bool PairQ6KRowGroups() {
  static const bool pairs = [] {
    const int env = EnvSwitch("HYMT_CPU_Q6K_PAIRS");
    return env >= 0 ? env == 1 : !IsIntelCpu();
  }();
  return g_q6k_pairs.Get(pairs);
}

void SetExpandPackedGroups(int on) {
  g_expand.Set(on);
}

bool ExpandPackedGroups() {
  static const bool on = EnvSwitch("HYMT_CPU_EXPAND") != 0;
  return g_expand.Get(on);
}

CpuScratch CpuOpsScratchBytes(int64_t k_max, int64_t head_dim) {
  CpuScratch s;
  s.per_token = static_cast<uint64_t>(k_max) * 3 / 2 + 64 + static_cast<uint64_t>(head_dim) * sizeof(float);
  s.per_thread = kGemmScratchBytes + (size_t{64} << 10) +
                 std::max(ExpandScratchBound(DType::kQ4_K, k_max), ExpandScratchBound(DType::kQ6_K, k_max));
  return s;
}

bool ParseIsa(std::string_view name, Isa* out) {
  for (Isa isa : {Isa::kGeneric, Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512}) {
    if (name == IsaName(isa)) {
      *out = isa;
      return true;
    }
  }
  return false;
}

bool IsaSupported(Isa isa) {
  switch (isa) {
    case Isa::kGeneric:
      return true;
    case Isa::kAvx2:
      return Features().avx2;
    case Isa::kAvxVnni:
      return Features().avxvnni;
    case Isa::kAvx512:
      return Features().avx512;
  }
  return false;
}

Isa DefaultIsa() {
  if (const char* env = std::getenv("HYMT_CPU_ISA"); env != nullptr && *env != '\0') {
    Isa isa;
    if (!ParseIsa(env, &isa))
      Fail(ErrorCode::kInvalidArgument, "HYMT_CPU_ISA=", env, ": expected generic, avx2, avxvnni or avx512");
    if (!IsaSupported(isa)) Fail(ErrorCode::kUnsupported, "HYMT_CPU_ISA=", env, ": this CPU cannot run it");
    return isa;
  }
  if (IsaSupported(Isa::kAvx512)) return Isa::kAvx512;
  if (IsaSupported(Isa::kAvxVnni)) return Isa::kAvxVnni;
  if (IsaSupported(Isa::kAvx2)) return Isa::kAvx2;
  return Isa::kGeneric;
}

const KernelTable& GetKernels(Isa isa) {
  HYMT_CHECK(IsaSupported(isa), "kernels for ", IsaName(isa), " on a CPU without it");
  switch (isa) {
    case Isa::kGeneric:
      return generic::Kernels();
    case Isa::kAvx2:
      return avx2::Kernels();
    case Isa::kAvxVnni:
      return avxvnni::Kernels();
    case Isa::kAvx512:
      return avx512::Kernels();
  }
  return generic::Kernels();
}

}  // namespace hymt::cpu
