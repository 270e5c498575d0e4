// Hugging Face safetensors checkpoints as a TensorSource: one file, or a folder of shards listed by
// model.safetensors.index.json. Data is used in place from the memory-mapped files (zero copy).
//
// File layout: an 8-byte little-endian header length N, N bytes of JSON, then the data section. The
// JSON maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]} with offsets relative
// to the data section; the optional "__metadata__" entry maps strings to strings.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/mapped_file.h"
#include "formats/tensor_source.h"

namespace hymt {

// Headers longer than this are rejected before parsing (the reference implementation's limit).
inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;
// model.safetensors.index.json files longer than this are rejected.
inline constexpr size_t kSafetensorsMaxIndexBytes = size_t{64} << 20;

// Maps a safetensors dtype string ("F32", "BF16", "F8_E4M3", "I64", "U8", ...) to a DType. Returns
// false for strings hymt does not read (F64, BOOL, U16/U32/U64, F8_E5M2, unknown names).
bool ParseSafetensorsDType(std::string_view name, DType* out);

class SafetensorsSource final : public TensorSource {
 public:
  // Opens one .safetensors file. Throws Error(kNotFound) when it cannot be opened, kCorruptData
  // naming the file (and tensor) when the header is malformed or inconsistent with the file, and
  // kUnsupported naming the tensor, its dtype and the file for a dtype hymt does not read.
  static std::unique_ptr<SafetensorsSource> OpenFile(const std::string& path);

  // Opens a checkpoint folder: the shards listed by model.safetensors.index.json when present, else
  // model.safetensors. Besides OpenFile's errors, throws kNotFound when the folder has neither file or
  // the index names a missing shard, and kCorruptData when the index is malformed, names a shard
  // outside the folder, maps a tensor to a shard that lacks it, or two shards hold the same name.
  // Tensors present in a shard but absent from the index are kept (as transformers loads them).
  static std::unique_ptr<SafetensorsSource> OpenFolder(const std::string& dir);

  // Opens `path` as a folder when it is a directory, as an index when it ends in ".index.json", and
  // as a single file otherwise.
  static std::unique_ptr<SafetensorsSource> Open(const std::string& path);

  // Parses an in-memory image named `name` in errors (for tests and fuzzers). The buffer is not
  // copied and must outlive the returned source. Throws as OpenFile.
  static std::unique_ptr<SafetensorsSource> Parse(const uint8_t* data, size_t size, const std::string& name);

  const TensorInfo* Find(std::string_view name) const override { return table_.Find(name); }
  // Tensors of each file in data-offset order, files in the order read.
  const std::vector<TensorInfo>& tensors() const override { return table_.tensors(); }

  // The files read, in order.
  const std::vector<std::string>& files() const { return files_; }
  // The "__metadata__" entries of all files; on a key that two files disagree on, the first wins.
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  SafetensorsSource() = default;
  static std::unique_ptr<SafetensorsSource> OpenIndex(const std::string& index_path);
  // Validates one file image and adds its tensors.
  void AddFile(const uint8_t* data, size_t size, const std::string& name);

  std::vector<MappedFile> maps_;  // keep the mappings the tensors point into alive
  std::vector<std::string> files_;
  std::map<std::string, std::string> metadata_;
  TensorTable table_;
};

}  // namespace hymt
