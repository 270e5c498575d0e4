#include "formats/gguf.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>

#include "core/status.h"
#include "core/strings.h"
#include "formats/gguf_internal.h"

namespace hymt {

using gguf_internal::AlignUp;
using gguf_internal::FindGgmlType;
using gguf_internal::GgmlType;
using gguf_internal::IsFixedSize;
using gguf_internal::IsPowerOfTwo;
using gguf_internal::kMaxValueType;
using gguf_internal::LoadScalarBits;
using gguf_internal::MinValueBytes;

namespace {

// The fewest bytes a tensor info (empty name, no dims) and a metadata entry (empty key, u8) occupy;
// counts in the header are checked against them before anything is allocated.
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 4 + 8;
constexpr uint64_t kMinMetadataEntryBytes = 8 + 4 + 1;

// A tensor info as read, before its data range is checked.
struct PendingTensor {
  TensorInfo info;
  uint64_t offset;  // within the data section
};

}  // namespace

// Parses a GGUF image into a GgufFile; every read is bounds-checked against the image.
class GgufReader {
 public:
  GgufReader(const uint8_t* data, size_t size, GgufFile* file)
      : data_(data), size_(size), file_(file), name_(file->path_) {}

  void Read() {
    const uint32_t magic = U32("the magic");
    if (magic != kGgufMagic) Corrupt("not a GGUF file: it starts with bytes ", HexBytes(4), ", not \"GGUF\"");
    const uint32_t version = U32("the version");
    if (version != 2 && version != 3) {
      const uint32_t swapped = __builtin_bswap32(version);
      if (swapped >= 1 && swapped <= 3) {
        Fail(ErrorCode::kUnsupported, name_, ": big-endian GGUF files are not supported");
      }
      Fail(ErrorCode::kUnsupported, name_, ": GGUF version ", version,
           " is not supported (hymt reads 2 and 3)");
    }
    file_->version_ = version;
    const uint64_t n_tensors = U64("the tensor count");
    const uint64_t n_kv = U64("the metadata count");
    if (n_tensors > kGgufMaxTensors || n_tensors > Left() / kMinTensorInfoBytes) {
      Corrupt("tensor count ", n_tensors, " cannot fit in the file");
    }
    if (n_kv > kGgufMaxMetadataEntries || n_kv > Left() / kMinMetadataEntryBytes) {
      Corrupt("metadata count ", n_kv, " cannot fit in the file");
    }

    GgufMetadata& meta = file_->metadata_;
    for (uint64_t i = 0; i < n_kv; ++i) {
      std::string key = Str(StrCat("the key of metadata entry ", i), kGgufMaxKeyBytes);
      if (meta.Has(key)) Corrupt("metadata key '", key, "' appears twice");
      const uint32_t type = U32(StrCat("the value type of '", key, "'"));
      if (type > kMaxValueType) Corrupt("metadata key '", key, "' has unknown value type ", type);
      GgufValue value = Value(static_cast<GgufType>(type), key, 0);
      meta.Set(std::move(key), std::move(value));
    }
    if (const GgufValue* a = meta.Find("general.alignment")) {
      const uint32_t alignment = a->AsU32(meta.Where("general.alignment"));
      if (!IsPowerOfTwo(alignment)) Corrupt("general.alignment ", alignment, " is not a power of two");
      file_->alignment_ = alignment;
    }

    std::vector<PendingTensor> pending;
    std::map<std::string_view, size_t> names;
    for (uint64_t i = 0; i < n_tensors; ++i) pending.push_back(TensorInfoAt(i));
    for (size_t i = 0; i < pending.size(); ++i) {
      if (!names.emplace(pending[i].info.name, i).second)
        Corrupt("tensor '", pending[i].info.name, "' appears twice");
    }

    const uint64_t data_offset = AlignUp(pos_, file_->alignment_);
    if (n_tensors > 0 && data_offset > size_) {
      Corrupt("the data section would start at byte ", data_offset, ", past the end of the file (", size_,
              " bytes)");
    }
    file_->data_offset_ = data_offset;
    CheckRanges(pending, n_tensors > 0 ? size_ - data_offset : 0);
    for (PendingTensor& p : pending) {
      p.info.data = data_ + data_offset + p.offset;
      file_->table_.Add(std::move(p.info));
    }
  }

 private:
  template <typename... Args>
  [[noreturn]] void Corrupt(const Args&... args) const {
    Fail(ErrorCode::kCorruptData, name_, ": ", args...);
  }

  // The first n bytes of the image in hex, e.g. "47 47 55 46".
  std::string HexBytes(size_t n) const {
    std::string out;
    for (size_t i = 0; i < n && i < size_; ++i) {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%02x", data_[i]);
      out += (i > 0 ? " " : "") + std::string(buf);
    }
    return out;
  }

  uint64_t Left() const { return size_ - pos_; }

  // Fails unless `n` more bytes can be read.
  void Need(uint64_t n, std::string_view what) const {
    if (n > Left()) {
      Corrupt("truncated at byte ", pos_, " while reading ", what, " (", n, " bytes needed, ", Left(),
              " left)");
    }
  }

  uint32_t U32(std::string_view what) {
    Need(4, what);
    uint32_t v;
    std::memcpy(&v, data_ + pos_, 4);
    pos_ += 4;
    return v;
  }

  uint64_t U64(std::string_view what) {
    Need(8, what);
    uint64_t v;
    std::memcpy(&v, data_ + pos_, 8);
    pos_ += 8;
    return v;
  }

  std::string Str(std::string_view what, uint64_t max_len) {
    const uint64_t len = U64(what);
    if (len > max_len) Corrupt(what, ": length ", len, " exceeds the limit of ", max_len, " bytes");
    Need(len, what);
    std::string s(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(len));
    pos_ += len;
    return s;
  }

  // Reads a value of type `t` (for an array: its element type, count and elements).
  GgufValue Value(GgufType t, const std::string& key, int depth) {
    if (t == GgufType::kString) return GgufValue::String(Str(StrCat("the value of '", key, "'"), UINT64_MAX));
    if (IsFixedSize(t)) {
      const size_t n = MinValueBytes(t);
      Need(n, StrCat("the value of '", key, "'"));
      if (t == GgufType::kBool && data_[pos_] > 1)
        Corrupt("metadata key '", key, "': bool byte ", int{data_[pos_]});
      GgufValue v = GgufValue::Scalar(t, LoadScalarBits(t, data_ + pos_));
      pos_ += n;
      return v;
    }
    if (depth >= kGgufMaxArrayDepth)
      Corrupt("metadata key '", key, "': arrays nested deeper than ", kGgufMaxArrayDepth);
    const uint32_t elem = U32(StrCat("the array type of '", key, "'"));
    if (elem > kMaxValueType) Corrupt("metadata key '", key, "': unknown array element type ", elem);
    const GgufType elem_type = static_cast<GgufType>(elem);
    const uint64_t count = U64(StrCat("the array length of '", key, "'"));
    const uint64_t min_bytes = MinValueBytes(elem_type);
    if (count > Left() / min_bytes) {
      Corrupt("metadata key '", key, "': an array of ", count, " ", GgufTypeName(elem_type),
              " cannot fit in the remaining ", Left(), " bytes");
    }
    GgufValue v;
    v.type_ = GgufType::kArray;
    v.elem_type_ = elem_type;
    v.count_ = static_cast<size_t>(count);
    if (IsFixedSize(elem_type)) {
      const size_t n = static_cast<size_t>(count * min_bytes);
      v.raw_.assign(data_ + pos_, data_ + pos_ + n);
      pos_ += n;
      if (elem_type == GgufType::kBool) {
        for (uint8_t b : v.raw_)
          if (b > 1) Corrupt("metadata key '", key, "': bool byte ", int{b});
      }
    } else if (elem_type == GgufType::kString) {
      const std::string what = StrCat("an element of '", key, "'");
      v.strings_.reserve(v.count_);
      for (uint64_t i = 0; i < count; ++i) v.strings_.push_back(Str(what, UINT64_MAX));
    } else {
      v.arrays_.reserve(v.count_);
      for (uint64_t i = 0; i < count; ++i) v.arrays_.push_back(Value(GgufType::kArray, key, depth + 1));
    }
    return v;
  }

  PendingTensor TensorInfoAt(uint64_t i) {
    PendingTensor p;
    TensorInfo& info = p.info;
    info.name = Str(StrCat("the name of tensor ", i), kGgufMaxTensorNameBytes);
    info.file = name_;
    const std::string what = StrCat("tensor '", info.name, "'");
    const uint32_t n_dims = U32(what);
    if (n_dims > kGgufMaxDims)
      Corrupt(what, " has ", n_dims, " dims; at most ", kGgufMaxDims, " are allowed");
    std::vector<int64_t> dims;  // innermost first, as stored
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t dim = U64(what);
      if (dim > static_cast<uint64_t>(INT64_MAX)) Corrupt(what, ": dim ", d, " is ", dim);
      dims.push_back(static_cast<int64_t>(dim));
    }
    info.shape.assign(dims.rbegin(), dims.rend());
    const uint32_t type = U32(what);
    p.offset = U64(what);

    const GgmlType* ggml = FindGgmlType(type);
    if (ggml == nullptr) {
      Fail(ErrorCode::kUnsupported, name_, ": ", what, " has unknown ggml type ", type);
    }
    if (!ggml->readable) {
      Fail(ErrorCode::kUnsupported, name_, ": ", what, " has type ", ggml->name, " (ggml type ", type,
           "), which hymt does not run");
    }
    info.dtype = ggml->dtype;
    const DTypeInfo& dt = GetDTypeInfo(info.dtype);
    const uint64_t ne0 = dims.empty() ? 1 : static_cast<uint64_t>(dims[0]);
    if (ne0 % static_cast<uint64_t>(dt.block_size) != 0) {
      Corrupt(what, ": first dim ", ne0, " is not a multiple of the ", ggml->name, " block size ",
              dt.block_size);
    }
    // bytes = rows * (ne0 / block_size) * block_bytes, and elements must fit int64.
    uint64_t elements = ne0;
    uint64_t rows = 1;
    for (size_t d = 1; d < dims.size(); ++d) {
      if (__builtin_mul_overflow(rows, static_cast<uint64_t>(dims[d]), &rows) ||
          __builtin_mul_overflow(elements, static_cast<uint64_t>(dims[d]), &elements) ||
          elements > static_cast<uint64_t>(INT64_MAX)) {
        Corrupt(what, ": shape ", ShapeString(info.shape), " has too many elements");
      }
    }
    uint64_t row_bytes = 0;
    uint64_t bytes = 0;
    if (__builtin_mul_overflow(ne0 / static_cast<uint64_t>(dt.block_size),
                               static_cast<uint64_t>(dt.block_bytes), &row_bytes) ||
        __builtin_mul_overflow(rows, row_bytes, &bytes) || bytes > static_cast<uint64_t>(SIZE_MAX)) {
      Corrupt(what, ": shape ", ShapeString(info.shape), " is too large");
    }
    info.bytes = static_cast<size_t>(bytes);
    if (p.offset % file_->alignment_ != 0) {
      Corrupt(what, ": data offset ", p.offset, " is not a multiple of the alignment ", file_->alignment_);
    }
    return p;
  }

  // Every tensor's bytes must lie inside the data section and no two may share bytes.
  void CheckRanges(const std::vector<PendingTensor>& pending, uint64_t section_size) const {
    std::vector<size_t> order;
    for (size_t i = 0; i < pending.size(); ++i) {
      const PendingTensor& p = pending[i];
      if (p.offset > section_size || p.info.bytes > section_size - p.offset) {
        Corrupt("tensor '", p.info.name, "': data [", p.offset, ", ", p.offset + p.info.bytes,
                ") runs past the end of the data section (", section_size, " bytes)");
      }
      if (p.info.bytes > 0) order.push_back(i);
    }
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return pending[a].offset < pending[b].offset; });
    for (size_t k = 1; k < order.size(); ++k) {
      const PendingTensor& a = pending[order[k - 1]];
      const PendingTensor& b = pending[order[k]];
      if (b.offset < a.offset + a.info.bytes) {
        Corrupt("tensors '", a.info.name, "' [", a.offset, ", ", a.offset + a.info.bytes, ") and '",
                b.info.name, "' [", b.offset, ", ", b.offset + b.info.bytes, ") overlap");
      }
    }
  }

  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  GgufFile* file_;
  const std::string& name_;
};

std::unique_ptr<GgufFile> GgufFile::Open(const std::string& path) {
  std::unique_ptr<GgufFile> file(new GgufFile(path));
  file->map_ = MappedFile::Open(path);
  GgufReader(file->map_.data(), file->map_.size(), file.get()).Read();
  return file;
}

std::unique_ptr<GgufFile> GgufFile::Parse(const uint8_t* data, size_t size, const std::string& name) {
  std::unique_ptr<GgufFile> file(new GgufFile(name));
  GgufReader(data, size, file.get()).Read();
  return file;
}

}  // namespace hymt
