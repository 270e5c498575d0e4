// The files of web/ (the translation page), embedded into the binary at build time by
// cmake/embed_web.cmake, so the server needs no files at run time.
#pragma once

#include <cstddef>
#include <vector>

namespace hymt {

struct WebAsset {
  const char* name;  // file name inside web/, e.g. "index.html"
  const char* data;  // the bytes (followed by a NUL that `size` does not count)
  size_t size;
};

// Every embedded file, sorted by name.
const std::vector<WebAsset>& WebAssets();

}  // namespace hymt
