// Measures what each stored type costs in accuracy and encode time; prints the table in
// docs/QUANTIZATION.md.
//
//   build/bench/quant_error [--n ELEMENTS] [--seed S]
//
// For each type: bits per weight; the RMS of the round-trip error relative to the RMS of the input
// (QuantizeRow then DequantizeRow) on Gaussian data and on heavy-tailed data (Student's t with 3 degrees
// of freedom, whose rare large values stretch block ranges the way outlier weights do); and the encode
// speed of QuantizeRow on one core, as a ratio to the f32 -> bf16 conversion measured in the same run
// (the cheapest possible row encode) and as the single-core time to encode a 7.5 B-parameter model.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "quant/quant.h"

namespace {

using hymt::DType;

constexpr double kModelParams = 7.5e9;  // Hunyuan-MT-7B with its embedding (docs MODEL.md)

struct Data {
  const char* name;
  std::vector<float> values;
};

std::vector<float> Gaussian(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = normal(rng);
  return v;
}

// Student's t, 3 degrees of freedom: a normal over sqrt(chi-square(3) / 3).
std::vector<float> StudentT3(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::chi_squared_distribution<float> chi2(3.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = normal(rng) / std::sqrt(chi2(rng) / 3.0f);
  return v;
}

double RelativeRmse(DType t, const std::vector<float>& x, std::vector<uint8_t>* packed,
                    std::vector<float>* back) {
  const int64_t n = static_cast<int64_t>(x.size());
  hymt::QuantizeRow(t, x.data(), packed->data(), n);
  hymt::DequantizeRow(t, packed->data(), back->data(), n);
  double err = 0, ref = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double e = static_cast<double>((*back)[i]) - x[i];
    err += e * e;
    ref += static_cast<double>(x[i]) * x[i];
  }
  return std::sqrt(err / ref);
}

// CPU time of this thread: on a shared machine, wall time would count other processes' time slices.
double ThreadCpuNs() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec);
}

// Best of three: nanoseconds per element of QuantizeRow on one core.
double EncodeNsPerElement(DType t, const std::vector<float>& x, std::vector<uint8_t>* packed) {
  const int64_t n = static_cast<int64_t>(x.size());
  double best = 1e300;
  for (int rep = 0; rep < 3; ++rep) {
    const double start = ThreadCpuNs();
    hymt::QuantizeRow(t, x.data(), packed->data(), n);
    best = std::min(best, (ThreadCpuNs() - start) / static_cast<double>(n));
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t n = int64_t{1} << 22;
  uint64_t seed = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--n") == 0)
      n = std::atoll(argv[i + 1]);
    else if (std::strcmp(argv[i], "--seed") == 0)
      seed = std::strtoull(argv[i + 1], nullptr, 10);
  }
  n -= n % 256;  // whole blocks of every type
  if (n <= 0) {
    std::fprintf(stderr, "usage: quant_error [--n ELEMENTS (>= 256)] [--seed S]\n");
    return 2;
  }
  const std::vector<Data> data = {{"gaussian", Gaussian(n, seed)}, {"student-t3", StudentT3(n, seed + 1)}};
  const DType types[] = {DType::kBF16, DType::kF16,  DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1,
                         DType::kQ8_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kQ8_K};
  std::vector<uint8_t> packed(hymt::DTypeBytes(DType::kF32, n));
  std::vector<float> back(static_cast<size_t>(n));

  const double bf16_ns = EncodeNsPerElement(DType::kBF16, data[0].values, &packed);
  std::printf("quant_error: %lld elements per distribution, seed %llu\n", static_cast<long long>(n),
              static_cast<unsigned long long>(seed));
  std::printf("%-6s %6s %14s %14s %10s %14s %12s\n", "type", "bits", "rmse gaussian", "rmse t3", "encode ns",
              "x bf16 encode", "7.5B 1 core");
  for (DType t : types) {
    const hymt::DTypeInfo& info = hymt::GetDTypeInfo(t);
    const double bits = 8.0 * info.block_bytes / info.block_size;
    const double rmse_g = RelativeRmse(t, data[0].values, &packed, &back);
    const double rmse_t = RelativeRmse(t, data[1].values, &packed, &back);
    const double ns = EncodeNsPerElement(t, data[0].values, &packed);
    std::printf("%-6s %6.3f %14.3e %14.3e %10.2f %14.1f %11.0fs\n", info.name, bits, rmse_g, rmse_t, ns,
                ns / bf16_ns, ns * 1e-9 * kModelParams);
  }
  return 0;
}
