// Helpers for the JSON files the readers validate (safetensors headers, index.json, config.json).
#pragma once

#include <string>

#include "core/json.h"

namespace hymt {

// Describes a JSON value for a "found ..." clause: its type and, for scalars, a short rendering
// (strings cut to 40 bytes), e.g. `string "abc"`, `number -3`, `array of 2`, `object`.
std::string JsonFoundText(const Json& value);

}  // namespace hymt
