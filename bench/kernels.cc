// The CPU kernel lab: measures the ceilings of this machine in the same run (host read bandwidth,
// register-resident FMA / vdpbf16ps / vpdpbusd peaks, thread pool dispatch), then the CPU backend's
// MatMul at the Hunyuan-MT-7B shapes for every weight type (GEMV: decode; GEMM: a 64-token prefill
// chunk) and decode attention, each as a ratio to its ceiling. Medians of repeats; spread in brackets.
//
//   build/bench/kernels [--quick] [--types bf16,q4_k,...] [--isa generic|avx2|avxvnni|avx512]
//   build/bench/kernels --sweep ROUNDS --types q8_0,q4_k     (decode sweeps next to the read probe only)
//   build/bench/kernels --ab-expand PAIRS --types q4_k,q6_k [--tokens 64]   (expanded row groups on / off)
//
// Threads: HYMT_THREADS (default: all available cores). Weights are random values of the real shapes;
// the GEMV working set is several times the last-level cache (copies of the matrix are cycled), so
// weights come from memory as in decode, where every layer's weights are read once per token.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#if defined(__x86_64__)
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12 warns inside its own AVX-512 headers (deliberately undefined registers).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#else
#include <immintrin.h>
#endif
#endif

#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/dispatch.h"
#include "backends/cpu/kernel_table.h"
#include "backends/cpu/packed.h"
#include "core/dtype.h"
#include "core/half.h"
#include "core/mapped_file.h"
#include "core/status.h"
#include "core/strings.h"
#include "core/thread_pool.h"
#include "ops/ops.h"
#include "quant/blocks.h"
#include "runtime/ceilings.h"

namespace hymt {
namespace {

using Clock = std::chrono::steady_clock;

// Wall time of one measured region.
class Stopwatch {
 public:
  Stopwatch() : t0_(Clock::now()) {}
  double Elapsed() const { return std::chrono::duration<double>(Clock::now() - t0_).count(); }

 private:
  Clock::time_point t0_;
};

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

struct Stats {
  double median = 0, min = 0, max = 0;
};
Stats Summarise(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.front(), v.back()};
}

// A fast generator for filling gigabytes (quality is irrelevant for speed measurements).
struct XorShift {
  uint64_t s = 0x9e3779b97f4a7c15ull;
  uint64_t Next() {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
  }
  // A value in [-1, 1] in steps of 1/1000 (activations, queries, cache rows).
  float NextSigned() { return static_cast<float>(static_cast<int64_t>(Next() % 2001) - 1000) / 1000.0f; }
};

struct AlignedBytes {
  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  std::unique_ptr<uint8_t, Free> p;
  size_t size = 0;
  explicit AlignedBytes(size_t n, size_t align = 64)
      : p(static_cast<uint8_t*>(std::aligned_alloc(align, (n + align - 1) / align * align))), size(n) {
    if (!p) Fail(ErrorCode::kResourceExhausted, "cannot allocate ", FormatBytes(n), " for the benchmark");
  }
  uint8_t* data() const { return p.get(); }
};

size_t LastLevelCacheBytes() {
  long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
  return static_cast<size_t>(std::max({l3, l2, 32L << 20}));
}

// Working sets are this many times the last-level cache, at least 1 GiB.
size_t WorkingSetBytes() {
  return std::max<size_t>(size_t{1} << 30, 4 * LastLevelCacheBytes());
}

// ---- ceilings
// -----------------------------------------------------------------------------------------------

// Multi-threaded read of a buffer several times the LLC with the thread pool: each thread sums its
// contiguous share in one stream, as the packed GEMVs read their weights (HostReadSum, the loop
// `hymt bench` times; four interleaved 256-bit streams per thread, as an earlier GEMV read, read under
// half of that on a Zen 5 host).
class ReadBandwidth {
 public:
  // On huge pages where the kernel gives them, as the packed weights the GEMVs read are (cpu_ops.cc).
  ReadBandwidth() : bytes_(WorkingSetBytes()), buf_(bytes_, size_t{2} << 20) {
    AdviseHugePages(buf_.data(), bytes_);
    DefaultThreadPool().Run([&](int t, int n) {  // first touch by the thread that will read it
      const size_t b = bytes_ / n * t, e = t + 1 == n ? bytes_ : bytes_ / n * (t + 1);
      std::memset(buf_.data() + b, 1, e - b);
    });
  }
  // GB/s per slice, median over `sweeps` sweeps of the buffer after a warm-up sweep.
  Stats Measure(int sweeps);

 private:
  size_t bytes_;
  AlignedBytes buf_;
};

// Read in slices of kSliceBytes, each timed on its own: the same time scale as one GEMV call (a few
// ms), so that on a shared machine the ceiling and the kernels see the same interference (a long pass
// is preempted more often than a short call, which would make the ratios look better than they are).
constexpr size_t kSliceBytes = size_t{32} << 20;

Stats ReadBandwidth::Measure(int sweeps) {
  const size_t slices = bytes_ / kSliceBytes;
  ThreadPool& pool = DefaultThreadPool();
  std::vector<uint64_t> sinks(pool.size() * 8);
  // Sweeps alternate between plain reads and reads with prefetch (HostReadSum); the kind with the higher
  // median is the ceiling.
  std::vector<double> gbs[2];
  for (int r = 0; r < 2 * sweeps + 1; ++r) {
    const bool prefetch = r % 2 == 1;
    for (size_t sl = 0; sl < slices; ++sl) {
      const uint8_t* p = buf_.data() + sl * kSliceBytes;
      Stopwatch watch;
      pool.Run([&](int t, int n) {
        const size_t part = kSliceBytes / n / 256 * 256;
        const size_t b = part * t, e = t + 1 == n ? kSliceBytes : part * (t + 1);
        sinks[t * 8] = HostReadSum(p + b, e - b, prefetch);
      });
      if (r > 0)
        gbs[prefetch].push_back(kSliceBytes / watch.Elapsed() / 1e9);  // the first sweep warms the TLB
    }
  }
  const Stats plain = Summarise(gbs[0]), prefetched = Summarise(gbs[1]);
  return prefetched.median > plain.median ? prefetched : plain;
}

#if defined(__x86_64__)
// Register-resident loops of one instruction with 16 independent accumulators (more than latency x
// throughput), so they run at the instruction's peak issue rate. (Unrolled explicitly: at -O2 the
// accumulator array would otherwise live in memory.) FLOPs per instruction: vdpbf16ps 16 lanes x 2
// pairs x 2. The f32 FMA and vpdpbusd loops are the ones `hymt bench` times (runtime/ceilings.h).
__attribute__((target("avx512f,avx512bf16"))) double PeakBf16(int64_t iters) {
  __m512 acc[16];
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i));
  const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80), b = (__m512bh)_mm512_set1_epi16(0x3a83);
  for (int64_t i = 0; i < iters; ++i)
#pragma GCC unroll 16
    for (int j = 0; j < 16; ++j) acc[j] = _mm512_dpbf16_ps(acc[j], a, b);
  float s = 0;
  for (int i = 0; i < 16; ++i) s += _mm512_reduce_add_ps(acc[i]);
  return s;
}
#endif

// GFLOP/s (or GOP/s) of fn(iters) on every thread of the pool at once; flops_per_iter per thread. Short
// runs (a few ms, like one GEMM call) and many of them, for the reason given at kSliceBytes.
template <typename Fn>
Stats Peak(Fn fn, double flops_per_iter, int repeats) {
  ThreadPool& pool = DefaultThreadPool();
  const int64_t iters = 500'000;
  repeats *= 10;
  std::vector<double> sink(pool.size() * 8), out;
  for (int r = 0; r < repeats + 1; ++r) {
    Stopwatch watch;
    pool.Run([&](int t, int) { sink[t * 8] = fn(iters); });
    if (r > 0) out.push_back(flops_per_iter * iters * pool.size() / watch.Elapsed() / 1e9);
  }
  return Summarise(out);
}

// Round trip of an empty parallel region (decode runs a few hundred per token).
Stats DispatchMicroseconds() {
  ThreadPool& pool = DefaultThreadPool();
  std::vector<double> us;
  for (int r = 0; r < 2000; ++r) {
    auto t0 = Clock::now();
    pool.Run([](int, int) {});
    us.push_back(Seconds(t0, Clock::now()) * 1e6);
  }
  return Summarise(us);
}

// ---- weights
// ------------------------------------------------------------------------------------------------

// Fills a weight of type t with random but valid values: finite floats of sensible magnitude, block
// scales that are normal f16 numbers (random quants otherwise).
void FillWeight(DType t, uint8_t* p, size_t bytes, XorShift& rng) {
  for (size_t i = 0; i + 8 <= bytes; i += 8) {
    uint64_t v = rng.Next();
    std::memcpy(p + i, &v, 8);
  }
  auto fix16 = [&](uint8_t* q, uint16_t mask, uint16_t bits) {
    uint16_t v;
    std::memcpy(&v, q, 2);
    v = static_cast<uint16_t>((v & mask) | bits);
    std::memcpy(q, &v, 2);
  };
  switch (t) {
    case DType::kF32:
      for (size_t i = 0; i + 4 <= bytes; i += 4) {
        uint32_t v;
        std::memcpy(&v, p + i, 4);
        v = (v & 0x807fffffu) | 0x3c000000u;  // |x| in [2^-7, 2^-6)
        std::memcpy(p + i, &v, 4);
      }
      return;
    case DType::kBF16:
      for (size_t i = 0; i + 2 <= bytes; i += 2) fix16(p + i, 0x807f, 0x3c00);
      return;
    case DType::kF16:
      for (size_t i = 0; i + 2 <= bytes; i += 2) fix16(p + i, 0x83ff, 0x2000);
      return;
    case DType::kF8E4M3:
      for (size_t i = 0; i < bytes; ++i)
        if ((p[i] & 0x7f) == 0x7f) p[i] = 0x3f;
      return;
    default:
      break;
  }
  const int bb = GetDTypeInfo(t).block_bytes;
  size_t scale_offset = 0;
  int n_scales = 1;
  if (t == DType::kQ4_1 || t == DType::kQ5_1 || t == DType::kQ4_K || t == DType::kQ5_K) n_scales = 2;
  if (t == DType::kQ6_K) scale_offset = offsetof(BlockQ6_K, d);
  for (size_t b = 0; b + bb <= bytes; b += bb)
    for (int s = 0; s < n_scales; ++s) fix16(p + b + scale_offset + 2 * s, 0x83ff, 0x1c00);  // |d| ~ 2^-8
}

// ---- MatMul
// -------------------------------------------------------------------------------------------------

struct Shape {
  int64_t n, k;
  const char* what;
};
constexpr Shape kShapes[] = {
    {4096, 4096, "q/o proj"},
    {1024, 4096, "k/v proj"},
    {14336, 4096, "gate/up"},
    {4096, 14336, "down"},
};

struct MatMulResult {
  Stats gemv_gbs;
  Stats gemm_gflops;
  bool packed = false;  // the weight was packed (packed.h): its GEMM is the int8 VNNI kernel
};

// `copies` copies of one random weight of type t and shape s (filled once, then copied), each prepared as
// the engine runs it: PrepareWeight packs q8_0 / q4_k / q6_k on AVX2 and AVX-512 (the packed copies take
// as much memory again).
struct WeightCopies {
  size_t bytes;         // of one stored copy
  AlignedBytes stored;  // the copies in the stored layout
  std::vector<Weight> prepared;
};
WeightCopies MakeWeightCopies(Ops& ops, DType t, const Shape& s, int copies, XorShift& rng) {
  const size_t bytes = DTypeBytes(t, s.k) * static_cast<size_t>(s.n);
  WeightCopies w{bytes, AlignedBytes(bytes * copies), {}};
  FillWeight(t, w.stored.data(), bytes, rng);
  for (int c = 1; c < copies; ++c) std::memcpy(w.stored.data() + bytes * c, w.stored.data(), bytes);
  for (int c = 0; c < copies; ++c) {
    Weight one;
    one.name = "bench";
    one.dtype = t;
    one.rows = s.n;
    one.cols = s.k;
    one.data = w.stored.data() + bytes * c;
    w.prepared.push_back(ops.PrepareWeight(one));
  }
  return w;
}

MatMulResult BenchMatMul(Ops& ops, DType t, const Shape& s, int gemv_calls, int gemm_calls, bool gemm) {
  const size_t bytes = DTypeBytes(t, s.k) * static_cast<size_t>(s.n);
  const int copies = static_cast<int>(std::max<size_t>(2, (WorkingSetBytes() + bytes - 1) / bytes));
  XorShift rng;
  const WeightCopies weights = MakeWeightCopies(ops, t, s, copies, rng);
  const std::vector<Weight>& prepared = weights.prepared;

  const int64_t max_tokens = 64;
  std::vector<float> x(max_tokens * s.k), out(max_tokens * s.n);
  for (auto& v : x) v = rng.NextSigned();
  auto run = [&](int64_t tokens, int copy) {
    Tensor xt{x.data(), DType::kF32, tokens, s.k, s.k, {}};
    Tensor ot{out.data(), DType::kF32, tokens, s.n, s.n, {}};
    ops.MatMul(xt, prepared[copy], ot);
  };

  MatMulResult r;
  r.packed = prepared[0].prepared != nullptr;
  std::vector<double> gbs;
  for (int i = 0; i < gemv_calls + 2; ++i) {
    Stopwatch watch;
    run(1, i % copies);
    if (i >= 2) gbs.push_back(bytes / watch.Elapsed() / 1e9);
  }
  r.gemv_gbs = Summarise(gbs);
  if (gemm) {
    std::vector<double> gf;
    for (int i = 0; i < gemm_calls + 1; ++i) {
      Stopwatch watch;
      run(max_tokens, i % copies);
      if (i >= 1) gf.push_back(2.0 * max_tokens * s.n * s.k / watch.Elapsed() / 1e9);
    }
    r.gemm_gflops = Summarise(gf);
  }
  return r;
}

// The GEMV kernel alone on weights that stay in L2 (32 rows x 4096 inputs), one thread, fastest of
// many calls: how many GB/s of weights one thread can consume when memory is not the limit. Decode
// is memory bound only if this exceeds the thread's share of the read bandwidth.
double GemvComputeGbs(const cpu::KernelTable& k, DType t) {
  const int64_t n = 32, kk = 4096;
  const size_t row_bytes = DTypeBytes(t, kk);
  AlignedBytes w(row_bytes * n);
  XorShift rng;
  FillWeight(t, w.data(), row_bytes * n, rng);
  std::vector<float> x(kk), out(n);
  for (auto& v : x) v = rng.NextSigned();
  cpu::MatMulArgs a;
  a.x = x.data();
  a.x_stride = kk;
  a.n_tokens = 1;
  a.k = kk;
  a.w = w.data();
  a.w_row_bytes = row_bytes;
  a.w_dtype = t;
  a.out = out.data();
  a.out_stride = n;
  const bool is_block = GetDTypeInfo(t).quantized;
  std::vector<uint8_t> xq(is_block ? k.quant_act_row_bytes(t, kk) : 0);
  if (is_block) k.quantize_act_row(t, x.data(), kk, xq.data());
  const bool packed = k.matmul_packed != nullptr && cpu::HasPackedLayout(t);
  AlignedBytes pw(packed ? cpu::PackedBytes(t, n, kk) : 0);
  if (packed) cpu::PackGroups(t, w.data(), row_bytes, n, kk, 0, n / cpu::kPackRows, pw.data());
  double best = 1e30;
  for (int r = 0; r < 400; ++r) {
    Stopwatch watch;
    if (packed) {
      cpu::MatMulArgs pa = a;
      pa.w = pw.data();
      k.matmul_packed(pa, xq.data(), xq.size(), 0, n);
    } else if (is_block) {
      k.gemv_quant(a, xq.data(), xq.size(), 0, n);
    } else {
      k.gemv_float(a, 0, n);
    }
    best = std::min(best, watch.Elapsed());
  }
  return static_cast<double>(row_bytes * n) / best / 1e9;
}

// ---- attention
// ----------------------------------------------------------------------------------------------

// Decode attention of one token at the 7B shape (32 q heads, 8 kv heads, head_dim 128) over `context`
// cached positions, cycling over 32 layers' caches (a token reads all of them). Returns GB/s of cache read.
Stats BenchAttention(Ops& ops, DType kv_type, int context, int calls) {
  const int n_kv = 8, n_heads = 32, hd = 128, page = 16, layers = 32;
  const int pages = (context + page) / page + 1;
  KvLayerView kv;
  kv.dtype = kv_type;
  kv.n_kv_heads = n_kv;
  kv.head_dim = hd;
  kv.page_size = page;
  kv.n_pages = pages;
  const size_t pool_bytes = kv.PageBytes() * pages;
  AlignedBytes k(pool_bytes * layers), v(pool_bytes * layers);
  XorShift rng;
  // Fill through KvWrite so every type holds valid values.
  std::vector<int32_t> table(pages);
  for (int i = 0; i < pages; ++i) table[i] = i;
  StepBatch fill;
  fill.page_size = page;
  fill.AddSeq(context + 1, 0, table);
  std::vector<float> kv_rows(static_cast<size_t>(context + 1) * n_kv * hd);
  for (auto& x : kv_rows) x = rng.NextSigned();
  Tensor rows{kv_rows.data(), DType::kF32, context + 1, n_kv * hd, n_kv * hd, {}};
  ops.BeginStep(fill);
  for (int l = 0; l < layers; ++l) {
    kv.k = k.data() + pool_bytes * l;
    kv.v = v.data() + pool_bytes * l;
    ops.KvWrite(rows, rows, kv);
  }
  StepBatch step;
  step.page_size = page;
  step.AddSeq(1, context, table);
  ops.BeginStep(step);
  std::vector<float> q(n_heads * hd, 0.01f), out(n_heads * hd);
  Tensor qt{q.data(), DType::kF32, 1, n_heads * hd, n_heads * hd, {}};
  Tensor ot{out.data(), DType::kF32, 1, n_heads * hd, n_heads * hd, {}};
  const double read = 2.0 * static_cast<double>(DTypeBytes(kv_type, hd)) * n_kv * (context + 1);
  std::vector<double> gbs;
  for (int i = 0; i < calls + layers; ++i) {
    kv.k = k.data() + pool_bytes * (i % layers);
    kv.v = v.data() + pool_bytes * (i % layers);
    Stopwatch watch;
    ops.Attention(qt, kv, n_heads, 0.088f, ot);
    if (i >= layers) gbs.push_back(read / watch.Elapsed() / 1e9);
  }
  return Summarise(gbs);
}

// Decode attention alone on a cache that stays in L2 (one task: one kv head, its 4 query heads of the 7B,
// head_dim 128, `context` positions), one thread, fastest of many calls: ns per cached position, the
// kernel's compute cost when memory is not the limit.
double AttentionComputeNs(const cpu::KernelTable& k, DType kv, int context) {
  const int hd = 128, ps = 16, group = 4;
  const size_t pos_bytes = DTypeBytes(kv, hd), head_bytes = pos_bytes * ps;
  const int pages = (context + ps - 1) / ps;
  AlignedBytes kp(head_bytes * pages), vp(head_bytes * pages);
  XorShift rng;
  std::vector<float> row(hd);
  auto fill = [&](uint8_t* dst) {
    for (auto& v : row) v = rng.NextSigned();
    k.convert_from_f32(kv, row.data(), dst, hd);
  };
  for (int p = 0; p < pages * ps; ++p) {
    fill(kp.data() + p * pos_bytes);
    fill(vp.data() + p * pos_bytes);
  }
  std::vector<int32_t> table(pages);
  for (int i = 0; i < pages; ++i) table[i] = i;
  std::vector<float> q(group * hd), out(group * hd), scratch(cpu::AttentionScratchFloats(group, hd, ps));
  for (auto& v : q) v = rng.NextSigned();
  cpu::AttentionTask t;
  t.q = q.data();
  t.out = out.data();
  t.group = group;
  t.head_dim = hd;
  t.scale = 0.088f;
  t.n_positions = context;
  t.pages = table.data();
  t.page_size = ps;
  t.k_pool = kp.data();
  t.v_pool = vp.data();
  t.page_bytes = head_bytes;  // one kv head per page here
  t.head_bytes = head_bytes;
  t.position_bytes = pos_bytes;
  t.kv_dtype = kv;
  double best = 1e30;
  for (int r = 0; r < 20000; ++r) {
    Stopwatch watch;
    k.attention(t, scratch.data());
    best = std::min(best, watch.Elapsed());
  }
  return best / context * 1e9;
}

std::string LoadAverage() {
  char buf[128] = {};
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fgets(buf, sizeof buf, f) == nullptr) buf[0] = 0;
    std::fclose(f);
  }
  std::string s(buf);
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s.empty() ? "?" : s;
}

std::string Spread(const Stats& s, int digits = 1) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "[%.*f-%.*f]", digits, s.min, digits, s.max);
  return buf;
}

// --sweep: the read probe alternated with decode-like sweeps, one token row through CpuOps::MatMul over
// 1.5 GiB of copies of the gate/up matrix (14336 x 4096) in each type, for `rounds` rounds, so that every
// type's rate sits next to a ceiling measured seconds before it. A q8_0 decode on a Zen 5 host read about
// a third less than q4_k's in every round (docs/BENCHMARKS.md, "Paired ceilings").
int Sweep(cpu::Isa isa, const std::vector<DType>& types, int rounds) {
  const Shape s = kShapes[2];
  const size_t total = size_t{3} << 29;
  auto ops = CreateCpuOps(isa);
  std::vector<WeightCopies> sets;
  XorShift rng;
  for (DType t : types) {
    const size_t bytes = DTypeBytes(t, s.k) * static_cast<size_t>(s.n);
    sets.push_back(MakeWeightCopies(*ops, t, s, static_cast<int>(std::max<size_t>(2, total / bytes)), rng));
  }
  std::vector<float> x(s.k), out(s.n);
  for (auto& v : x) v = rng.NextSigned();
  ReadBandwidth reader;
  std::printf(
      "decode sweeps (%s, %d threads): one token row through MatMul over %s of %lldx%lld copies per type,\n"
      "GB/s of weights read and %% of the read bandwidth measured just before (fastest slice of a sweep)\n",
      ops->name().c_str(), DefaultThreadPool().size(), FormatBytes(total).c_str(),
      static_cast<long long>(s.n), static_cast<long long>(s.k));
  for (int r = 0; r < rounds; ++r) {
    const double bw = reader.Measure(1).max;
    std::printf("round %d: read %.1f GB/s", r + 1, bw);
    for (const WeightCopies& set : sets) {
      Stopwatch watch;
      for (const Weight& w : set.prepared) {
        Tensor xt{x.data(), DType::kF32, 1, s.k, s.k, {}};
        Tensor ot{out.data(), DType::kF32, 1, s.n, s.n, {}};
        ops->MatMul(xt, w, ot);
      }
      const double gbs = static_cast<double>(set.bytes * set.prepared.size()) / watch.Elapsed() / 1e9;
      std::printf("  %s%s %.1f (%.0f%%)", DTypeName(set.prepared[0].dtype),
                  set.prepared[0].prepared != nullptr ? "*" : "", gbs, 100 * gbs / bw);
    }
    std::printf("\n");
    std::fflush(stdout);
  }
  return 0;
}

// --ab-expand PAIRS: the packed GEMM with and without expanded row groups (kernel_table.h,
// ExpandPackedGroups) at `tokens` token rows, the two alternated call by call on two copies of each weight,
// so that a busy or throttled host slows both alike; prints each mode's median rate and the median of the
// pairs' ratios. The 7B's shapes and the 1.8B's (hidden 2048, MLP 6144).
int AbExpand(cpu::Isa isa, const std::vector<DType>& types, int pairs, int64_t tokens) {
  auto ops = CreateCpuOps(isa);
  const Shape shapes[] = {{2048, 2048, "1.8B q/o"}, {6144, 2048, "1.8B gate/up"}, {2048, 6144, "1.8B down"},
                          {4096, 4096, "q/o"},      {14336, 4096, "gate/up"},     {4096, 14336, "down"}};
  std::printf("packed GEMM, %lld token rows, %d threads: expanded row groups on / off, %d alternated pairs\n",
              static_cast<long long>(tokens), DefaultThreadPool().size(), pairs);
  for (DType t : types) {
    for (const Shape& s : shapes) {
      XorShift rng;
      const WeightCopies w = MakeWeightCopies(*ops, t, s, 2, rng);
      std::vector<float> x(tokens * s.k), out(tokens * s.n);
      for (auto& v : x) v = rng.NextSigned();
      std::vector<double> rate[2], ratio;
      for (int i = 0; i < pairs; ++i) {
        double r[2];
        for (int m = 0; m < 2; ++m) {
          const int mode = (i + m) % 2;  // which goes first alternates
          cpu::SetExpandPackedGroups(mode);
          Tensor xt{x.data(), DType::kF32, tokens, s.k, s.k, {}};
          Tensor ot{out.data(), DType::kF32, tokens, s.n, s.n, {}};
          Stopwatch watch;
          ops->MatMul(xt, w.prepared[i % 2], ot);
          r[mode] = 2.0 * tokens * s.n * s.k / watch.Elapsed() / 1e9;
          rate[mode].push_back(r[mode]);
        }
        ratio.push_back(r[1] / r[0]);
      }
      std::printf("%-5s %-13s %6lldx%-6lld on %7.1f  off %7.1f GOP/s  on/off %.3f\n", DTypeName(t), s.what,
                  static_cast<long long>(s.n), static_cast<long long>(s.k), Summarise(rate[1]).median,
                  Summarise(rate[0]).median, Summarise(ratio).median);
      std::fflush(stdout);
    }
  }
  cpu::SetExpandPackedGroups(-1);
  return 0;
}

int Main(int argc, char** argv) {
  bool quick = false;
  std::vector<DType> types = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kF8E4M3,
                              DType::kQ8_0, DType::kQ4_0, DType::kQ4_1, DType::kQ5_0,
                              DType::kQ5_1, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};
  cpu::Isa isa = cpu::DefaultIsa();
  int sweep_rounds = 0, ab_pairs = 0;
  int64_t ab_tokens = 64;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--quick") {
      quick = true;
    } else if (a == "--sweep" && i + 1 < argc) {
      sweep_rounds = std::atoi(argv[++i]);
      if (sweep_rounds <= 0) Fail(ErrorCode::kInvalidArgument, "--sweep needs a number of rounds");
    } else if (a == "--ab-expand" && i + 1 < argc) {
      ab_pairs = std::atoi(argv[++i]);
      if (ab_pairs <= 0) Fail(ErrorCode::kInvalidArgument, "--ab-expand needs a number of pairs");
    } else if (a == "--tokens" && i + 1 < argc) {
      ab_tokens = std::atoll(argv[++i]);
      if (ab_tokens <= 0 || ab_tokens > 4096) Fail(ErrorCode::kInvalidArgument, "--tokens needs 1..4096");
    } else if (a == "--types" && i + 1 < argc) {
      types.clear();
      for (const std::string& name : StrSplit(argv[++i], ',')) {
        DType t;
        if (!ParseDType(name, &t)) Fail(ErrorCode::kInvalidArgument, "unknown type ", name);
        types.push_back(t);
      }
    } else if (a == "--isa" && i + 1 < argc) {
      if (!cpu::ParseIsa(argv[++i], &isa)) Fail(ErrorCode::kInvalidArgument, "unknown ISA ", argv[i]);
    } else {
      std::fprintf(stderr,
                   "usage: %s [--quick] [--types f32,bf16,q4_k,...] [--isa generic|avx2|avxvnni|avx512] "
                   "[--sweep ROUNDS] [--ab-expand PAIRS [--tokens N]]\n",
                   argv[0]);
      return 2;
    }
  }
  if (sweep_rounds > 0) return Sweep(isa, types, sweep_rounds);
  if (ab_pairs > 0) return AbExpand(isa, types, ab_pairs, ab_tokens);
  auto ops = CreateCpuOps(isa);
  const int repeats = quick ? 3 : 7;
  ThreadPool& pool = DefaultThreadPool();
  std::printf("hymt CPU kernel lab: backend %s, %d threads, LLC %s, working sets %s\n", ops->name().c_str(),
              pool.size(), FormatBytes(LastLevelCacheBytes()).c_str(),
              FormatBytes(WorkingSetBytes()).c_str());
  std::printf("load average at start: %s\n", LoadAverage().c_str());
  std::printf(
      "Ratios divide by ceilings measured in this run, next to each row, on the same time scale as\n"
      "the kernel calls. 'med' compares medians; 'best' compares the fastest call with the fastest\n"
      "ceiling run - on a machine shared with other processes that is the uncontended rate.\n\n");

  ReadBandwidth reader;
  const Stats bw = reader.Measure(quick ? 1 : 3);
  std::printf("ceilings (median [min-max]; bandwidth over 32 MiB slices, peaks over %d runs of ~3 ms)\n",
              repeats * 10);
  std::printf("  read bandwidth         %8.1f GB/s    %s\n", bw.median, Spread(bw).c_str());
  Stats fma{}, bf16{}, int8{};  // int8: vpdpbusd on AVX-512 and AVX-VNNI, vpmaddubsw on AVX2
#if defined(__x86_64__)
  // The ceilings of the kernels under test: with --isa avx2 on an AVX-512 host, the ymm ones.
  if (isa == cpu::Isa::kAvx512) {
    fma = Peak(&HostFmaLoopAvx512, kHostFmaLoopAvx512Flops, repeats);
    bf16 = Peak(&PeakBf16, 16 * 64, repeats);
    int8 = Peak(&HostVnniLoopAvx512, kHostVnniLoopAvx512Ops, repeats);
    std::printf("  f32 FMA (zmm) peak     %8.1f GFLOP/s %s\n", fma.median, Spread(fma).c_str());
    std::printf("  vdpbf16ps peak         %8.1f GFLOP/s %s\n", bf16.median, Spread(bf16).c_str());
    std::printf("  vpdpbusd peak          %8.1f GOP/s   %s\n", int8.median, Spread(int8).c_str());
  } else if (isa == cpu::Isa::kAvx2 || isa == cpu::Isa::kAvxVnni) {
    const bool vnni = isa == cpu::Isa::kAvxVnni;
    fma = Peak(&HostFmaLoopAvx2, kHostFmaLoopAvx2Flops, repeats);
    int8 = vnni ? Peak(&HostVnniLoopAvx2, kHostVnniLoopAvx2Ops, repeats)
                : Peak(&HostInt8LoopAvx2, kHostInt8LoopAvx2Ops, repeats);
    std::printf("  f32 FMA (ymm) peak     %8.1f GFLOP/s %s\n", fma.median, Spread(fma).c_str());
    std::printf("  %-21s %8.1f GOP/s   %s\n", vnni ? "vpdpbusd (ymm) peak" : "vpmaddubsw (ymm) peak",
                int8.median, Spread(int8).c_str());
  }
#endif
  const Stats dispatch = DispatchMicroseconds();
  std::printf("  pool dispatch          %8.2f us      %s\n\n", dispatch.median, Spread(dispatch, 2).c_str());

  std::printf("MatMul at the Hunyuan-MT-7B shapes (rows x inputs).\n");
  std::printf(
      "  GEMV: 1 token (decode): GB/s of weights read, %% of the read bandwidth (BW, measured just before\n");
  std::printf("        the type's rows).\n");
  std::printf(
      "  GEMM: 64 tokens (a prefill chunk): GFLOP/s, %% of the f32 FMA peak: floats and the block formats\n");
  std::printf(
      "        without a packed layout (dequantised into f32 panels); rows marked * are packed weights\n");
  std::printf(
      "        (q8_0, q4_k, q6_k on every ISA but generic): int8 GOP/s, %% of the int8 peak (vpdpbusd, or "
      "AVX2's\n"
      "        vpmaddubsw). GB/s and GOP/s count\n");
  std::printf("        the stored (file) size and shape.\n");
  std::printf("%-8s %-11s | %6s %6s %5s | %6s %6s %5s | %6s %5s | %6s %5s\n", "type", "shape", "BW", "GEMV",
              "med", "BW", "GEMV", "best", "GEMM", "med", "GEMM", "best");
  std::printf("%-8s %-11s | %6s %6s %5s | %6s %6s %5s | %6s %5s | %6s %5s\n", "", "", "med", "med", "",
              "best", "best", "", "med", "", "best", "");
  for (DType t : types) {
    const Stats local_bw = reader.Measure(1);
    for (const Shape& s : kShapes) {
      // A backend per shape: it owns the packed copies PrepareWeight makes, and frees them with it.
      const MatMulResult r = BenchMatMul(*CreateCpuOps(isa), t, s, quick ? 8 : 25, quick ? 3 : 7, true);
      char shape[32];
      std::snprintf(shape, sizeof shape, "%lldx%lld", static_cast<long long>(s.n),
                    static_cast<long long>(s.k));
      auto pct = [](double a, double b) { return b > 0 ? 100.0 * a / b : 0.0; };
      const Stats& peak = r.packed ? int8 : fma;
      std::printf(
          "%-7s%s %-11s | %6.1f %6.1f %4.0f%% | %6.1f %6.1f %4.0f%% | %6.1f %4.0f%% | %6.1f %4.0f%%\n",
          DTypeName(t), r.packed ? "*" : " ", shape, local_bw.median, r.gemv_gbs.median,
          pct(r.gemv_gbs.median, local_bw.median), local_bw.max, r.gemv_gbs.max,
          pct(r.gemv_gbs.max, local_bw.max), r.gemm_gflops.median, pct(r.gemm_gflops.median, peak.median),
          r.gemm_gflops.max, pct(r.gemm_gflops.max, peak.max));
      std::fflush(stdout);
    }
  }

  std::printf(
      "\nGEMV compute rate: the kernel alone on L2-resident weights (32 x 4096), one thread, fastest of\n");
  std::printf(
      "400 calls, as a multiple of one thread's share of the read bandwidth (%.1f GB/s / %d threads):\n",
      bw.median, pool.size());
  std::printf("above 1x the kernel can keep up with memory, so decode is memory bound.\n");
  std::printf("%-8s %12s %9s\n", "type", "GB/s/thread", "of share");
  const cpu::KernelTable& kt = cpu::GetKernels(isa);
  for (DType t : types) {
    const double gbs = GemvComputeGbs(kt, t);
    std::printf("%-8s %12.1f %8.1fx\n", DTypeName(t), gbs, gbs / (bw.median / pool.size()));
  }

  std::printf(
      "\nDecode attention (32 q heads, 8 kv heads, head_dim 128, one token, 32 layers' caches cycled);\n");
  std::printf("GB/s of K and V read, %% of the read bandwidth measured just before (BW)\n");
  std::printf("%-8s %8s | %6s %6s %5s | %6s %6s %5s\n", "kv", "context", "BW", "GB/s", "med", "BW", "GB/s",
              "best");
  for (DType kv : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0}) {
    const Stats local_bw = reader.Measure(1);
    for (int context : {512, 4096}) {
      const Stats a = BenchAttention(*ops, kv, context, quick ? 32 : 96);
      std::printf("%-8s %8d | %6.1f %6.1f %4.0f%% | %6.1f %6.1f %4.0f%%\n", DTypeName(kv), context,
                  local_bw.median, a.median, 100.0 * a.median / local_bw.median, local_bw.max, a.max,
                  100.0 * a.max / local_bw.max);
      std::fflush(stdout);
    }
  }
  std::printf(
      "\nDecode attention compute: one task (one kv head, 4 query heads, head_dim 128, 256 positions) on a\n"
      "cache in L2, one thread, fastest of 20000 calls: ns per cached position\n");
  for (DType kv : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0})
    std::printf("%-8s %8.2f ns\n", DTypeName(kv), AttentionComputeNs(kt, kv, 256));
  std::printf("\nload average at end: %s\n", LoadAverage().c_str());
  return 0;
}

}  // namespace
}  // namespace hymt

int main(int argc, char** argv) {
  try {
    return hymt::Main(argc, argv);
  } catch (const hymt::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
