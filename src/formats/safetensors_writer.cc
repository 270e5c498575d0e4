#include "formats/safetensors_writer.h"

#include <cstdio>
#include <cstring>
#include <vector>

#include "core/json.h"
#include "core/status.h"

namespace hymt {

const char* SafetensorsDTypeName(DType t) {
  switch (t) {
    case DType::kF32: return "F32";
    case DType::kF16: return "F16";
    case DType::kBF16: return "BF16";
    case DType::kF8E4M3: return "F8_E4M3";
    case DType::kI32: return "I32";
    default: Fail(ErrorCode::kUnsupported, "safetensors cannot hold ", DTypeName(t));
  }
}

void WriteSafetensors(const std::string& path, const std::vector<SafetensorsEntry>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  Json header = Json::MakeObject();
  if (!metadata.empty()) {
    Json md = Json::MakeObject();
    for (const auto& [k, v] : metadata) md.Set(k, Json(v));
    header.Set("__metadata__", std::move(md));
  }
  uint64_t offset = 0;
  std::vector<uint64_t> sizes;
  for (const SafetensorsEntry& t : tensors) {
    int64_t n = 1;
    Json shape = Json::MakeArray();
    for (int64_t d : t.shape) {
      n *= d;
      shape.Push(Json(d));
    }
    uint64_t bytes = DTypeBytes(t.dtype, n);
    Json e = Json::MakeObject();
    e.Set("dtype", Json(SafetensorsDTypeName(t.dtype)));
    e.Set("shape", std::move(shape));
    Json offsets = Json::MakeArray();
    offsets.Push(Json(offset));
    offsets.Push(Json(offset + bytes));
    e.Set("data_offsets", std::move(offsets));
    header.Set(t.name, std::move(e));
    sizes.push_back(bytes);
    offset += bytes;
  }
  std::string h = header.Dump();
  while (h.size() % 8 != 0) h.push_back(' ');  // data starts 8-byte aligned
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) Fail(ErrorCode::kInternal, "cannot write ", tmp);
  uint64_t len = h.size();
  uint8_t len_le[8];
  for (int i = 0; i < 8; ++i) len_le[i] = static_cast<uint8_t>(len >> (8 * i));
  bool ok = std::fwrite(len_le, 1, 8, f) == 8 && std::fwrite(h.data(), 1, h.size(), f) == h.size();
  std::vector<uint8_t> buf;
  for (size_t i = 0; ok && i < tensors.size(); ++i) {
    buf.resize(sizes[i]);
    tensors[i].fill(buf.data(), sizes[i]);
    ok = std::fwrite(buf.data(), 1, buf.size(), f) == buf.size();
  }
  ok = (std::fclose(f) == 0) && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    Fail(ErrorCode::kInternal, "failed writing ", path);
  }
}

}  // namespace hymt
