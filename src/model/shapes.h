// The real shapes of the Hunyuan translation models, for random-weight checkpoints and for planning
// before a download.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "model/config.h"

namespace hymt {

// "hunyuan-7b" (Hunyuan-MT-7B, Chimera, HY-MT1.5-7B, Hy-MT2-7B), "hy-1.8b" (HY-MT1.5/Hy-MT2 1.8B) and
// "tiny" (a few-MB model for tests). Throws Error(kInvalidArgument) listing the names otherwise.
ModelConfig ShapeConfig(std::string_view name);
std::vector<std::string> ShapeNames();

}  // namespace hymt
