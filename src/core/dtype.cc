#include "core/dtype.h"

#include <array>

namespace hymt {
namespace {

// Indexed by DType. Block sizes and bytes follow ggml's definitions.
constexpr std::array<DTypeInfo, 18> kInfo = {{
    {"f32", 1, 4, false},
    {"f16", 1, 2, false},
    {"bf16", 1, 2, false},
    {"f8_e4m3", 1, 1, false},
    {"i32", 1, 4, false},
    {"q4_0", 32, 18, true},
    {"q4_1", 32, 20, true},
    {"q5_0", 32, 22, true},
    {"q5_1", 32, 24, true},
    {"q8_0", 32, 34, true},
    {"q4_k", 256, 144, true},
    {"q5_k", 256, 176, true},
    {"q6_k", 256, 210, true},
    {"q8_k", 256, 292, true},
    {"i8", 1, 1, false},
    {"i16", 1, 2, false},
    {"i64", 1, 8, false},
    {"u8", 1, 1, false},
}};
static_assert(kInfo.size() == static_cast<size_t>(DType::kU8) + 1, "one entry per DType");

}  // namespace

const DTypeInfo& GetDTypeInfo(DType t) { return kInfo[static_cast<size_t>(t)]; }

bool ParseDType(std::string_view name, DType* out) {
  for (size_t i = 0; i < kInfo.size(); ++i) {
    if (name == kInfo[i].name) {
      *out = static_cast<DType>(i);
      return true;
    }
  }
  return false;
}

}  // namespace hymt
