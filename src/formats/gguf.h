// GGUF, llama.cpp's model file format: a reader (a TensorSource plus typed metadata) for versions 2
// and 3, and a writer (version 3). formats/ knows no architecture: keys and tensor names are opaque.
//
// Layout, all little-endian: magic "GGUF"; u32 version; u64 tensor count; u64 metadata count; the
// metadata (string key, u32 value type, value); the tensor infos (string name, u32 n_dims, u64 dims
// innermost first, u32 ggml type, u64 offset into the data section); zero padding to the alignment
// (metadata "general.alignment", u32, default 32); the data section. A string is a u64 byte length and
// the bytes; an array is a u32 element type, a u64 count and the elements.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/mapped_file.h"
#include "formats/tensor_source.h"

namespace hymt {

inline constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read as a little-endian u32
inline constexpr uint32_t kGgufVersion = 3;         // the version written; 2 and 3 are read
inline constexpr uint32_t kGgufDefaultAlignment = 32;
inline constexpr int kGgufMaxDims = 4;
// Reader limits: larger values are reported as corrupt data.
inline constexpr size_t kGgufMaxKeyBytes = 65535;         // the spec's bound on key length
inline constexpr size_t kGgufMaxTensorNameBytes = 65535;  // the reader's bound on tensor names
inline constexpr int kGgufMaxArrayDepth = 8;              // arrays of arrays nested deeper are rejected
inline constexpr uint64_t kGgufMaxTensors = uint64_t{1} << 24;
inline constexpr uint64_t kGgufMaxMetadataEntries = uint64_t{1} << 24;
// The writer refuses longer tensor names, which llama.cpp cannot load (GGML_MAX_NAME is 64 with NUL).
inline constexpr size_t kGgufWriterMaxTensorNameBytes = 63;

// Metadata value types, numbered as in the file.
enum class GgufType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};

// Short name of a value type: "u8", "i32", "f32", "bool", "string", "array", ...
const char* GgufTypeName(GgufType type);

// ggml's name for a tensor type id ("F32", "Q4_K", "IQ1_S", "TQ2_0", ...), or nullptr when unknown.
const char* GgmlTypeName(uint32_t ggml_type);
// The DType hymt reads a ggml type id as. Returns false for types hymt does not run (Q8_1, Q2_K,
// Q3_K, IQ*, TQ*, F64, MXFP4, unknown ids).
bool GgmlTypeToDType(uint32_t ggml_type, DType* out);
// The ggml type id of a DType. Returns false when GGUF has no such type (f8_e4m3, u8).
bool DTypeToGgmlType(DType dtype, uint32_t* out);

// One metadata value: a scalar, a string, or an array (of scalars, strings or arrays).
class GgufValue {
 public:
  GgufValue() = default;  // u8 0

  static GgufValue U8(uint8_t v);
  static GgufValue I8(int8_t v);
  static GgufValue U16(uint16_t v);
  static GgufValue I16(int16_t v);
  static GgufValue U32(uint32_t v);
  static GgufValue I32(int32_t v);
  static GgufValue F32(float v);
  static GgufValue Bool(bool v);
  static GgufValue String(std::string v);
  static GgufValue U64(uint64_t v);
  static GgufValue I64(int64_t v);
  static GgufValue F64(double v);
  // An array whose element type follows T: uint8_t, int8_t, uint16_t, int16_t, uint32_t, int32_t,
  // float, bool, uint64_t, int64_t, double or std::string.
  template <typename T>
  static GgufValue Array(const std::vector<T>& values);
  // An array of arrays; throws Error(kInvalidArgument) when an element is not an array.
  static GgufValue ArrayOfArrays(std::vector<GgufValue> arrays);

  GgufType type() const { return type_; }
  bool is_array() const { return type_ == GgufType::kArray; }

  // Scalar accessors. Each requires exactly its type and otherwise throws Error(kCorruptData)
  // "<what>: expected u32, found string"; `what` says where the value came from.
  uint8_t AsU8(std::string_view what = "value") const;
  int8_t AsI8(std::string_view what = "value") const;
  uint16_t AsU16(std::string_view what = "value") const;
  int16_t AsI16(std::string_view what = "value") const;
  uint32_t AsU32(std::string_view what = "value") const;
  int32_t AsI32(std::string_view what = "value") const;
  float AsF32(std::string_view what = "value") const;
  bool AsBool(std::string_view what = "value") const;
  const std::string& AsString(std::string_view what = "value") const;
  uint64_t AsU64(std::string_view what = "value") const;
  int64_t AsI64(std::string_view what = "value") const;
  double AsF64(std::string_view what = "value") const;
  // Any integer type; throws kCorruptData also for a u64 above INT64_MAX.
  int64_t AsInt(std::string_view what = "value") const;
  // f32 or f64.
  double AsFloat(std::string_view what = "value") const;

  // Array accessors; each throws Error(kCorruptData) naming `what` when this is not an array of the
  // required element type.
  GgufType array_type() const { return elem_type_; }  // meaningful only for arrays
  size_t array_size() const { return count_; }        // 0 for non-arrays
  // The elements, requiring element type T exactly (T as for Array()).
  template <typename T>
  std::vector<T> ArrayValues(std::string_view what = "value") const;
  const std::vector<std::string>& StringArray(std::string_view what = "value") const;
  const std::vector<GgufValue>& NestedArrays(std::string_view what = "value") const;
  // Elements of any integer element type (u64 elements must fit int64).
  std::vector<int64_t> IntArray(std::string_view what = "value") const;

  // A short rendering for diagnostics; arrays show at most `max_items` elements.
  std::string ToString(size_t max_items = 8) const;

  // Equal type and bit-identical contents (so NaNs with equal bits compare equal).
  bool operator==(const GgufValue& other) const;
  bool operator!=(const GgufValue& other) const { return !(*this == other); }

 private:
  friend class GgufReader;
  friend class GgufWriter;
  // A fixed-size scalar from its normalised bits (see scalar_).
  static GgufValue Scalar(GgufType t, uint64_t bits);
  [[noreturn]] void WrongType(std::string_view what, std::string_view expected) const;
  const GgufValue& Require(GgufType t, std::string_view what) const;
  const GgufValue& RequireArray(GgufType elem, std::string_view what) const;

  GgufType type_ = GgufType::kU8;
  uint64_t scalar_ = 0;  // scalar bits: integers sign/zero-extended, floats as IEEE bits, bool 0/1
  std::string string_;
  GgufType elem_type_ = GgufType::kU8;  // arrays only
  size_t count_ = 0;                    // arrays only
  std::vector<uint8_t> raw_;            // numeric and bool array elements, packed little-endian
  std::vector<std::string> strings_;    // string array elements
  std::vector<GgufValue> arrays_;       // nested array elements
};

// Ordered key/value metadata of a GGUF file, with typed getters. Getters throw Error(kNotFound)
// "<source>: metadata key 'k' is missing" and Error(kCorruptData) "<source>: metadata key 'k':
// expected u32, found i32".
class GgufMetadata {
 public:
  explicit GgufMetadata(std::string source = "gguf") : source_(std::move(source)) {}

  // Adds a key, or replaces its value in place when present.
  void Set(std::string key, GgufValue value);
  // Returns the value of `key`, or nullptr.
  const GgufValue* Find(std::string_view key) const;
  bool Has(std::string_view key) const { return Find(key) != nullptr; }
  // Returns the value of `key`; throws kNotFound when absent.
  const GgufValue& Get(std::string_view key) const;
  // "<source>: metadata key 'k'", for errors about a value found with Find.
  std::string Where(std::string_view key) const;

  const std::string& GetString(std::string_view key) const;
  bool GetBool(std::string_view key) const;
  uint32_t GetU32(std::string_view key) const;
  int32_t GetI32(std::string_view key) const;
  uint64_t GetU64(std::string_view key) const;
  int64_t GetI64(std::string_view key) const;
  float GetF32(std::string_view key) const;
  double GetF64(std::string_view key) const;
  int64_t GetInt(std::string_view key) const;   // any integer type
  double GetFloat(std::string_view key) const;  // f32 or f64
  // Requires an array (of any element type).
  const GgufValue& GetArray(std::string_view key) const;
  const std::vector<std::string>& GetStringArray(std::string_view key) const;
  std::vector<float> GetF32Array(std::string_view key) const;
  std::vector<int32_t> GetI32Array(std::string_view key) const;
  std::vector<int64_t> GetIntArray(std::string_view key) const;  // any integer element type

  const std::vector<std::pair<std::string, GgufValue>>& entries() const { return entries_; }
  size_t size() const { return entries_.size(); }
  const std::string& source() const { return source_; }

  // Same keys in the same order with equal values (the source name is not compared).
  bool operator==(const GgufMetadata& other) const { return entries_ == other.entries_; }

 private:
  std::string source_;  // names the file in errors
  std::vector<std::pair<std::string, GgufValue>> entries_;
  std::map<std::string, size_t, std::less<>> index_;
};

// A GGUF file opened for reading. Tensors point into the memory-mapped file.
class GgufFile final : public TensorSource {
 public:
  // Opens and validates a GGUF file. Throws Error(kNotFound) when it cannot be opened;
  // kCorruptData naming the file (and key or tensor) for any malformed or inconsistent field: bad
  // magic, truncation, counts or lengths that cannot fit the file, unknown value types, a bad
  // general.alignment, more than kGgufMaxDims dims, a first dim that is not a multiple of the block
  // size, misaligned, out-of-range or overlapping tensor data, duplicate keys or tensor names;
  // kUnsupported for versions other than 2 and 3, big-endian files, and tensor types hymt does not
  // run (the message names the tensor and the type, e.g. "IQ1_S"). Never reads out of bounds; every
  // count is checked against the bytes left before anything is allocated for it, so memory use is
  // bounded by a small multiple of the file size.
  static std::unique_ptr<GgufFile> Open(const std::string& path);

  // Parses an in-memory image named `name` in errors (for tests and fuzzers). The buffer is not
  // copied and must outlive the returned object. Throws as Open.
  static std::unique_ptr<GgufFile> Parse(const uint8_t* data, size_t size, const std::string& name);

  const TensorInfo* Find(std::string_view name) const override { return table_.Find(name); }
  // In the order of the file's tensor infos. Shapes are outermost first (GGUF dims reversed).
  const std::vector<TensorInfo>& tensors() const override { return table_.tensors(); }

  const GgufMetadata& metadata() const { return metadata_; }
  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // file offset of the data section
  const std::string& path() const { return path_; }

 private:
  friend class GgufReader;
  explicit GgufFile(std::string path) : metadata_(path), path_(std::move(path)) {}

  MappedFile map_;
  GgufMetadata metadata_;
  TensorTable table_;
  std::string path_;
  uint32_t version_ = 0;
  uint32_t alignment_ = kGgufDefaultAlignment;
  uint64_t data_offset_ = 0;
};

// Writes a GGUF v3 file: metadata, then tensors in the order added, each at an offset aligned to
// general.alignment (default 32) and followed by zero padding to the alignment.
class GgufWriter {
 public:
  // Fills `bytes` bytes at `dst` with a tensor's encoded data, when Write reaches that tensor.
  using Producer = std::function<void(uint8_t* dst, size_t bytes)>;

  GgufMetadata& metadata() { return metadata_; }
  const GgufMetadata& metadata() const { return metadata_; }
  // Sets general.alignment (u32). Requires a power of two; throws Error(kInvalidArgument) otherwise.
  void SetAlignment(uint32_t alignment);

  // Adds a tensor whose encoded bytes are at `data` (not copied: they must stay valid until Write
  // returns). `shape` is outermost first, as in TensorInfo. Throws Error(kInvalidArgument) for an
  // empty, over-long (kGgufWriterMaxTensorNameBytes) or duplicate name, a shape with no dims, more
  // than kGgufMaxDims dims or a negative dim, a last dim that is not a multiple of the block size, or
  // `bytes` other than the size of `shape` in `dtype`; Error(kUnsupported) for a dtype GGUF lacks.
  void AddTensor(std::string name, DType dtype, std::vector<int64_t> shape, const void* data, size_t bytes);
  // As above, with the bytes produced on demand (lets a converter encode one tensor at a time).
  void AddTensor(std::string name, DType dtype, std::vector<int64_t> shape, Producer produce);

  // The size in bytes of the file Write would produce. Throws as Write for bad metadata.
  uint64_t FileSize() const;

  // Writes the file (to a temporary beside `path`, renamed over it when complete). Throws
  // Error(kInvalidArgument) when general.alignment is set but is not a power-of-two u32, and
  // Error(kInternal) on an I/O error, leaving no partial file at `path`.
  void Write(const std::string& path) const;

 private:
  struct Tensor {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;  // outermost first
    size_t bytes;
    const void* data;  // borrowed, or nullptr when `produce` is set
    Producer produce;
  };
  void Add(Tensor tensor);
  // Appends a value's encoding, without the type tag that precedes a top-level value.
  static void PutValue(const GgufValue& v, std::string* out);
  uint32_t Alignment() const;
  // Serialises everything before the data section (without the final padding).
  std::string Header(uint32_t alignment) const;

  GgufMetadata metadata_{"GgufWriter"};
  std::vector<Tensor> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
};

}  // namespace hymt
