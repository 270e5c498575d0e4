// The files of web/, embedded into the binary at build time by cmake/embed_web.cmake.
#pragma once

#include <cstddef>
#include <vector>

namespace hymt {

struct WebAsset {
  const char* name;  // file name inside web/, e.g. "index.html"
  const char* data;  // the bytes (followed by a NUL that is not counted in size)
  size_t size;
};

// Every file of web/, sorted by name.
const std::vector<WebAsset>& WebAssets();

}  // namespace hymt
