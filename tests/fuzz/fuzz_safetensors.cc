// Fuzz target: safetensors header parsing (SafetensorsSource::Parse on an in-memory image).
#include "core/status.h"
#include "formats/safetensors.h"
#include "harness.h"

namespace hymt::fuzz {

void FuzzSafetensors(const uint8_t* data, size_t size) {
  std::unique_ptr<SafetensorsSource> src;
  try {
    src = SafetensorsSource::Parse(data, size, "fuzz.safetensors");
  } catch (const Error&) {
    return;
  }
  CheckTensorsInside(*src, data, size);
  // Metadata comes out of the header, so it cannot be larger than the file.
  for (const auto& [key, value] : src->metadata()) HYMT_FUZZ_REQUIRE(key.size() + value.size() < size);
}

}  // namespace hymt::fuzz

HYMT_FUZZ_ENTRY(hymt::fuzz::FuzzSafetensors)
