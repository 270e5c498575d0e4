#include "formats/safetensors.h"

#include <algorithm>
#include <set>
#include <utility>

#include "core/json.h"
#include "core/status.h"
#include "core/strings.h"
#include "formats/json_util.h"

namespace hymt {
namespace {

constexpr const char* kIndexName = "model.safetensors.index.json";
constexpr const char* kSingleName = "model.safetensors";

struct SafetensorsDType {
  const char* name;
  DType dtype;
};
constexpr SafetensorsDType kDTypeNames[] = {
    {"F32", DType::kF32},        {"F16", DType::kF16}, {"BF16", DType::kBF16},
    {"F8_E4M3", DType::kF8E4M3}, {"I8", DType::kI8},   {"I16", DType::kI16},
    {"I32", DType::kI32},        {"I64", DType::kI64}, {"U8", DType::kU8},
};

// Reads a non-negative integer field of a tensor entry, failing with the file, tensor and field.
int64_t NonNegativeInt(const Json& v, const std::string& file, const std::string& tensor, const char* field) {
  if (!v.is_integer() || v.AsInt() < 0) {
    Fail(ErrorCode::kCorruptData, file, ": tensor '", tensor, "': ", field,
         " must hold non-negative integers, found ", JsonFoundText(v));
  }
  return v.AsInt();
}

// One tensor's byte range within the data section, for the overlap check.
struct Range {
  uint64_t begin;
  uint64_t end;
  size_t entry;  // index into the parsed entries
};

}  // namespace

bool ParseSafetensorsDType(std::string_view name, DType* out) {
  for (const SafetensorsDType& d : kDTypeNames) {
    if (name == d.name) {
      *out = d.dtype;
      return true;
    }
  }
  return false;
}

std::unique_ptr<SafetensorsSource> SafetensorsSource::Parse(const uint8_t* data, size_t size,
                                                            const std::string& name) {
  std::unique_ptr<SafetensorsSource> src(new SafetensorsSource());
  src->AddFile(data, size, name);
  return src;
}

std::unique_ptr<SafetensorsSource> SafetensorsSource::OpenFile(const std::string& path) {
  std::unique_ptr<SafetensorsSource> src(new SafetensorsSource());
  MappedFile map = MappedFile::Open(path);
  const uint8_t* data = map.data();
  size_t size = map.size();
  src->maps_.push_back(std::move(map));
  src->AddFile(data, size, path);
  return src;
}

std::unique_ptr<SafetensorsSource> SafetensorsSource::Open(const std::string& path) {
  if (IsDirectory(path)) return OpenFolder(path);
  if (EndsWith(path, ".index.json")) return OpenIndex(path);
  return OpenFile(path);
}

std::unique_ptr<SafetensorsSource> SafetensorsSource::OpenFolder(const std::string& dir) {
  std::string index = JoinPath(dir, kIndexName);
  if (FileExists(index)) return OpenIndex(index);
  std::string single = JoinPath(dir, kSingleName);
  if (FileExists(single)) return OpenFile(single);
  Fail(ErrorCode::kNotFound, dir, " has neither ", kIndexName, " nor ", kSingleName);
}

std::unique_ptr<SafetensorsSource> SafetensorsSource::OpenIndex(const std::string& index_path) {
  std::string dir = ".";
  if (size_t slash = index_path.rfind('/'); slash != std::string::npos) dir = index_path.substr(0, slash);
  Json index;
  try {
    index = Json::Parse(ReadFile(index_path, kSafetensorsMaxIndexBytes));
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kInvalidArgument) throw;
    Fail(ErrorCode::kCorruptData, index_path, ": ", e.what());
  }
  const Json* weight_map = index.Find("weight_map");
  if (weight_map == nullptr || !weight_map->is_object()) {
    Fail(ErrorCode::kCorruptData, index_path, ": expected an object \"weight_map\", found ",
         weight_map == nullptr ? std::string("nothing") : JsonFoundText(*weight_map));
  }

  // Shards in order of first mention; each must be a plain file name inside the folder.
  std::vector<std::string> shards;
  std::set<std::string> seen_names, seen_shards;  // sets: an index may list millions of entries
  for (const auto& [tensor, shard] : weight_map->AsObject()) {
    if (!shard.is_string()) {
      Fail(ErrorCode::kCorruptData, index_path, ": weight_map[\"", tensor,
           "\"]: expected a file name, found ", JsonFoundText(shard));
    }
    if (!seen_names.insert(tensor).second)
      Fail(ErrorCode::kCorruptData, index_path, ": weight_map lists tensor '", tensor, "' twice");
    const std::string& name = shard.AsString();
    if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos ||
        name.find('\\') != std::string::npos || name.find('\0') != std::string::npos) {
      Fail(ErrorCode::kCorruptData, index_path, ": weight_map[\"", tensor, "\"] names shard \"", name,
           "\"; expected a file name inside the folder");
    }
    if (seen_shards.insert(name).second) shards.push_back(name);
  }

  std::unique_ptr<SafetensorsSource> src(new SafetensorsSource());
  for (const std::string& shard : shards) {
    std::string path = JoinPath(dir, shard);
    if (!FileExists(path))
      Fail(ErrorCode::kNotFound, index_path, " names shard ", shard, ", which is missing from ", dir);
    MappedFile map = MappedFile::Open(path);
    const uint8_t* data = map.data();
    size_t size = map.size();
    src->maps_.push_back(std::move(map));
    src->AddFile(data, size, path);
  }
  for (const auto& [tensor, shard] : weight_map->AsObject()) {
    std::string path = JoinPath(dir, shard.AsString());
    const TensorInfo* info = src->Find(tensor);
    if (info == nullptr) {
      Fail(ErrorCode::kCorruptData, index_path, " maps tensor '", tensor, "' to ", path,
           ", which has no such tensor");
    }
    if (info->file != path) {
      Fail(ErrorCode::kCorruptData, index_path, " maps tensor '", tensor, "' to ", path, ", but it is in ",
           info->file);
    }
  }
  return src;
}

void SafetensorsSource::AddFile(const uint8_t* data, size_t size, const std::string& name) {
  if (size < 8) {
    Fail(ErrorCode::kCorruptData, name, ": file is ", size,
         " bytes; a safetensors file starts with an 8-byte header length");
  }
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | data[i];
  if (header_len > kSafetensorsMaxHeaderBytes) {
    Fail(ErrorCode::kCorruptData, name, ": header length ", header_len, " exceeds the limit of ",
         kSafetensorsMaxHeaderBytes, " bytes (not a safetensors file?)");
  }
  if (header_len > size - 8) {
    Fail(ErrorCode::kCorruptData, name, ": header length ", header_len, " runs past the end of the file (",
         size, " bytes)");
  }
  Json header;
  try {
    header = Json::Parse(std::string_view(reinterpret_cast<const char*>(data + 8), header_len));
  } catch (const Error& e) {
    Fail(ErrorCode::kCorruptData, name, ": header is not valid JSON: ", e.what());
  }
  if (!header.is_object()) {
    Fail(ErrorCode::kCorruptData, name, ": header must be a JSON object, found ", JsonFoundText(header));
  }
  const uint8_t* section = data + 8 + header_len;
  const uint64_t section_size = size - 8 - header_len;

  std::vector<TensorInfo> entries;
  std::vector<Range> ranges;
  std::set<std::string_view> names;
  for (const auto& [key, value] : header.AsObject()) {
    if (!names.insert(key).second) Fail(ErrorCode::kCorruptData, name, ": header lists '", key, "' twice");
    if (key == "__metadata__") {
      if (!value.is_object())
        Fail(ErrorCode::kCorruptData, name, ": __metadata__ must be an object, found ", JsonFoundText(value));
      for (const auto& [mk, mv] : value.AsObject()) {
        if (!mv.is_string()) {
          Fail(ErrorCode::kCorruptData, name, ": __metadata__[\"", mk, "\"]: expected a string, found ",
               JsonFoundText(mv));
        }
        metadata_.emplace(mk, mv.AsString());
      }
      continue;
    }
    if (!value.is_object()) {
      Fail(ErrorCode::kCorruptData, name, ": tensor '", key, "': expected an object, found ",
           JsonFoundText(value));
    }
    const Json* dtype = value.Find("dtype");
    const Json* shape = value.Find("shape");
    const Json* offsets = value.Find("data_offsets");
    if (dtype == nullptr || shape == nullptr || offsets == nullptr) {
      Fail(ErrorCode::kCorruptData, name, ": tensor '", key, "' lacks \"",
           dtype == nullptr ? "dtype" : (shape == nullptr ? "shape" : "data_offsets"), "\"");
    }
    if (!dtype->is_string()) {
      Fail(ErrorCode::kCorruptData, name, ": tensor '", key, "': dtype must be a string, found ",
           JsonFoundText(*dtype));
    }
    if (!shape->is_array()) {
      Fail(ErrorCode::kCorruptData, name, ": tensor '", key, "': shape must be an array, found ",
           JsonFoundText(*shape));
    }
    if (!offsets->is_array() || offsets->AsArray().size() != 2) {
      Fail(ErrorCode::kCorruptData, name, ": tensor '", key,
           "': data_offsets must be an array of two integers, found ", JsonFoundText(*offsets));
    }
    TensorInfo info;
    info.name = key;
    info.file = name;
    if (!ParseSafetensorsDType(dtype->AsString(), &info.dtype)) {
      Fail(ErrorCode::kUnsupported, name, ": tensor '", key, "' has dtype ", dtype->AsString(),
           ", which hymt does not read (supported: F32, F16, BF16, F8_E4M3, I8, I16, I32, I64, U8)");
    }
    // Element count and byte size, with every product checked for overflow.
    uint64_t elements = 1;
    for (const Json& d : shape->AsArray()) {
      int64_t dim = NonNegativeInt(d, name, key, "shape");
      info.shape.push_back(dim);
      if (__builtin_mul_overflow(elements, static_cast<uint64_t>(dim), &elements) || elements > INT64_MAX) {
        Fail(ErrorCode::kCorruptData, name, ": tensor '", key, "': shape ", ShapeString(info.shape),
             " has too many elements");
      }
    }
    uint64_t bytes = 0;
    if (__builtin_mul_overflow(elements, static_cast<uint64_t>(GetDTypeInfo(info.dtype).block_bytes),
                               &bytes)) {
      Fail(ErrorCode::kCorruptData, name, ": tensor '", key, "': shape ", ShapeString(info.shape),
           " is too large");
    }
    uint64_t begin = static_cast<uint64_t>(NonNegativeInt(offsets->AsArray()[0], name, key, "data_offsets"));
    uint64_t end = static_cast<uint64_t>(NonNegativeInt(offsets->AsArray()[1], name, key, "data_offsets"));
    if (end < begin) {
      Fail(ErrorCode::kCorruptData, name, ": tensor '", key, "': data_offsets [", begin, ", ", end,
           "] are out of order");
    }
    if (end > section_size) {
      Fail(ErrorCode::kCorruptData, name, ": tensor '", key, "': data_offsets [", begin, ", ", end,
           "] run past the end of the data section (", section_size, " bytes)");
    }
    if (end - begin != bytes) {
      Fail(ErrorCode::kCorruptData, name, ": tensor '", key, "': ", dtype->AsString(), " ",
           ShapeString(info.shape), " needs ", bytes, " bytes but data_offsets [", begin, ", ", end,
           "] hold ", end - begin);
    }
    info.data = section + begin;
    info.bytes = static_cast<size_t>(bytes);
    ranges.push_back({begin, end, entries.size()});
    entries.push_back(std::move(info));
  }

  // No two tensors may share bytes; empty tensors occupy nothing.
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  const Range* prev = nullptr;
  for (const Range& r : ranges) {
    if (r.begin == r.end) continue;
    if (prev != nullptr && r.begin < prev->end) {
      Fail(ErrorCode::kCorruptData, name, ": tensors '", entries[prev->entry].name, "' [", prev->begin, ", ",
           prev->end, ") and '", entries[r.entry].name, "' [", r.begin, ", ", r.end, ") overlap");
    }
    prev = &r;
  }

  for (const Range& r : ranges) {
    TensorInfo& info = entries[r.entry];
    if (const TensorInfo* other = table_.Find(info.name)) {
      Fail(ErrorCode::kCorruptData, "tensor '", info.name, "' appears in both ", other->file, " and ", name);
    }
    table_.Add(std::move(info));
  }
  files_.push_back(name);
}

}  // namespace hymt
