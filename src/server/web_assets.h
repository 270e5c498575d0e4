// The web page's files (web/*), embedded into the binary at build time by cmake/embed_web.cmake.
#pragma once

#include <cstddef>
#include <vector>

namespace hymt {

struct WebAsset {
  const char* name;  // file name inside web/, e.g. "index.html"
  const char* data;  // contents (not NUL-terminated by contract; `size` bytes)
  size_t size;
};

// All embedded files, sorted by name.
const std::vector<WebAsset>& WebAssets();

}  // namespace hymt
