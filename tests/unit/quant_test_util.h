// Test data for the quant tests: a seeded generator that gives the same numbers with every standard
// library (std::normal_distribution does not), the distributions the budgets are stated for, and
// typed views of packed rows.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/half.h"
#include "quant/quant.h"

namespace hymt::test {

// splitmix64: tiny, fast, and identical everywhere.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }  // [0, 1)
  double Normal() {                                                           // Box-Muller
    const double u = 1.0 - Uniform(), v = Uniform();
    return std::sqrt(-2.0 * std::log(u)) * std::cos(6.283185307179586 * v);
  }
  // Student's t with 3 degrees of freedom: heavy tails, like outlier weights.
  double StudentT3() {
    double chi2 = 0;
    for (int i = 0; i < 3; ++i) {
      const double z = Normal();
      chi2 += z * z;
    }
    return Normal() / std::sqrt(chi2 / 3.0);
  }

 private:
  uint64_t state_;
};

enum class Dist { kGaussian, kStudentT3, kUniform };

inline const char* DistName(Dist d) {
  switch (d) {
    case Dist::kGaussian:
      return "gaussian";
    case Dist::kStudentT3:
      return "student-t3";
    case Dist::kUniform:
      return "uniform";
  }
  return "?";
}

// n values of distribution d times scale.
inline std::vector<float> RandomRow(Dist d, int64_t n, uint64_t seed, double scale = 1.0) {
  Rng rng(seed);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) {
    const double r = d == Dist::kGaussian    ? rng.Normal()
                     : d == Dist::kStudentT3 ? rng.StudentT3()
                                             : 2 * rng.Uniform() - 1;
    x = static_cast<float>(r * scale);
  }
  return v;
}

// A packed row of type t holding n values.
inline std::vector<uint8_t> PackedRow(DType t, int64_t n) {
  return std::vector<uint8_t>(DTypeBytes(t, n));
}

inline std::vector<uint8_t> Quantized(DType t, const std::vector<float>& x) {
  std::vector<uint8_t> q = PackedRow(t, static_cast<int64_t>(x.size()));
  QuantizeRow(t, x.data(), q.data(), static_cast<int64_t>(x.size()));
  return q;
}

inline std::vector<float> Dequantized(DType t, const void* q, int64_t n) {
  std::vector<float> y(static_cast<size_t>(n));
  DequantizeRow(t, q, y.data(), n);
  return y;
}

// Block b of a packed row, typed.
template <typename Block>
Block& BlockAt(std::vector<uint8_t>& row, int64_t b) {
  return reinterpret_cast<Block*>(row.data())[b];
}
template <typename Block>
const Block& BlockAt(const std::vector<uint8_t>& row, int64_t b) {
  return reinterpret_cast<const Block*>(row.data())[b];
}

}  // namespace hymt::test
