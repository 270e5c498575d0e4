#include <bit>
#include <cstring>
#include <type_traits>

#include "core/status.h"
#include "core/strings.h"
#include "formats/gguf.h"
#include "formats/gguf_internal.h"

namespace hymt {

static_assert(std::endian::native == std::endian::little,
              "GGUF is read and written in place: little-endian only");

namespace gguf_internal {

// ggml's type ids (ggml.h). Ids 4, 5 and 31-33, 36-38 were removed from ggml; their names are kept
// so that old files get a clear message.
constexpr GgmlType kGgmlTypes[] = {
    {0, "F32", true, DType::kF32},          {1, "F16", true, DType::kF16},
    {2, "Q4_0", true, DType::kQ4_0},        {3, "Q4_1", true, DType::kQ4_1},
    {4, "Q4_2", false, DType::kF32},        {5, "Q4_3", false, DType::kF32},
    {6, "Q5_0", true, DType::kQ5_0},        {7, "Q5_1", true, DType::kQ5_1},
    {8, "Q8_0", true, DType::kQ8_0},        {9, "Q8_1", false, DType::kF32},
    {10, "Q2_K", false, DType::kF32},       {11, "Q3_K", false, DType::kF32},
    {12, "Q4_K", true, DType::kQ4_K},       {13, "Q5_K", true, DType::kQ5_K},
    {14, "Q6_K", true, DType::kQ6_K},       {15, "Q8_K", true, DType::kQ8_K},
    {16, "IQ2_XXS", false, DType::kF32},    {17, "IQ2_XS", false, DType::kF32},
    {18, "IQ3_XXS", false, DType::kF32},    {19, "IQ1_S", false, DType::kF32},
    {20, "IQ4_NL", false, DType::kF32},     {21, "IQ3_S", false, DType::kF32},
    {22, "IQ2_S", false, DType::kF32},      {23, "IQ4_XS", false, DType::kF32},
    {24, "I8", true, DType::kI8},           {25, "I16", true, DType::kI16},
    {26, "I32", true, DType::kI32},         {27, "I64", true, DType::kI64},
    {28, "F64", false, DType::kF32},        {29, "IQ1_M", false, DType::kF32},
    {30, "BF16", true, DType::kBF16},       {31, "Q4_0_4_4", false, DType::kF32},
    {32, "Q4_0_4_8", false, DType::kF32},   {33, "Q4_0_8_8", false, DType::kF32},
    {34, "TQ1_0", false, DType::kF32},      {35, "TQ2_0", false, DType::kF32},
    {36, "IQ4_NL_4_4", false, DType::kF32}, {37, "IQ4_NL_4_8", false, DType::kF32},
    {38, "IQ4_NL_8_8", false, DType::kF32}, {39, "MXFP4", false, DType::kF32},
};

const GgmlType* FindGgmlType(uint32_t id) {
  for (const GgmlType& t : kGgmlTypes)
    if (t.id == id) return &t;
  return nullptr;
}

size_t MinValueBytes(GgufType t) {
  switch (t) {
    case GgufType::kU8:
    case GgufType::kI8:
    case GgufType::kBool:
      return 1;
    case GgufType::kU16:
    case GgufType::kI16:
      return 2;
    case GgufType::kU32:
    case GgufType::kI32:
    case GgufType::kF32:
      return 4;
    case GgufType::kU64:
    case GgufType::kI64:
    case GgufType::kF64:
    case GgufType::kString:
      return 8;
    case GgufType::kArray:
      return 12;
  }
  return 1;
}

uint64_t LoadScalarBits(GgufType t, const uint8_t* p) {
  switch (t) {
    case GgufType::kI8:
      return static_cast<uint64_t>(static_cast<int64_t>(static_cast<int8_t>(p[0])));
    case GgufType::kI16: {
      int16_t v;
      std::memcpy(&v, p, 2);
      return static_cast<uint64_t>(static_cast<int64_t>(v));
    }
    case GgufType::kI32: {
      int32_t v;
      std::memcpy(&v, p, 4);
      return static_cast<uint64_t>(static_cast<int64_t>(v));
    }
    default: {
      uint64_t v = 0;
      std::memcpy(&v, p, MinValueBytes(t));
      return v;
    }
  }
}

}  // namespace gguf_internal

using gguf_internal::FindGgmlType;
using gguf_internal::GgmlType;
using gguf_internal::kGgmlTypes;
using gguf_internal::LoadScalarBits;
using gguf_internal::MinValueBytes;

namespace {

// The value type of an array element of C++ type T.
template <typename T>
constexpr GgufType GgufTypeOf() {
  if constexpr (std::is_same_v<T, uint8_t>) return GgufType::kU8;
  if constexpr (std::is_same_v<T, int8_t>) return GgufType::kI8;
  if constexpr (std::is_same_v<T, uint16_t>) return GgufType::kU16;
  if constexpr (std::is_same_v<T, int16_t>) return GgufType::kI16;
  if constexpr (std::is_same_v<T, uint32_t>) return GgufType::kU32;
  if constexpr (std::is_same_v<T, int32_t>) return GgufType::kI32;
  if constexpr (std::is_same_v<T, float>) return GgufType::kF32;
  if constexpr (std::is_same_v<T, bool>) return GgufType::kBool;
  if constexpr (std::is_same_v<T, std::string>) return GgufType::kString;
  if constexpr (std::is_same_v<T, uint64_t>) return GgufType::kU64;
  if constexpr (std::is_same_v<T, int64_t>) return GgufType::kI64;
  if constexpr (std::is_same_v<T, double>) return GgufType::kF64;
}

}  // namespace

const char* GgufTypeName(GgufType type) {
  switch (type) {
    case GgufType::kU8:
      return "u8";
    case GgufType::kI8:
      return "i8";
    case GgufType::kU16:
      return "u16";
    case GgufType::kI16:
      return "i16";
    case GgufType::kU32:
      return "u32";
    case GgufType::kI32:
      return "i32";
    case GgufType::kF32:
      return "f32";
    case GgufType::kBool:
      return "bool";
    case GgufType::kString:
      return "string";
    case GgufType::kArray:
      return "array";
    case GgufType::kU64:
      return "u64";
    case GgufType::kI64:
      return "i64";
    case GgufType::kF64:
      return "f64";
  }
  return "unknown";
}

const char* GgmlTypeName(uint32_t ggml_type) {
  const GgmlType* t = FindGgmlType(ggml_type);
  return t == nullptr ? nullptr : t->name;
}

bool GgmlTypeToDType(uint32_t ggml_type, DType* out) {
  const GgmlType* t = FindGgmlType(ggml_type);
  if (t == nullptr || !t->readable) return false;
  *out = t->dtype;
  return true;
}

bool DTypeToGgmlType(DType dtype, uint32_t* out) {
  for (const GgmlType& t : kGgmlTypes) {
    if (t.readable && t.dtype == dtype) {
      *out = t.id;
      return true;
    }
  }
  return false;
}

GgufValue GgufValue::U8(uint8_t v) {
  return Scalar(GgufType::kU8, v);
}
GgufValue GgufValue::I8(int8_t v) {
  return Scalar(GgufType::kI8, static_cast<uint64_t>(int64_t{v}));
}
GgufValue GgufValue::U16(uint16_t v) {
  return Scalar(GgufType::kU16, v);
}
GgufValue GgufValue::I16(int16_t v) {
  return Scalar(GgufType::kI16, static_cast<uint64_t>(int64_t{v}));
}
GgufValue GgufValue::U32(uint32_t v) {
  return Scalar(GgufType::kU32, v);
}
GgufValue GgufValue::I32(int32_t v) {
  return Scalar(GgufType::kI32, static_cast<uint64_t>(int64_t{v}));
}
GgufValue GgufValue::F32(float v) {
  return Scalar(GgufType::kF32, std::bit_cast<uint32_t>(v));
}
GgufValue GgufValue::Bool(bool v) {
  return Scalar(GgufType::kBool, v ? 1 : 0);
}
GgufValue GgufValue::U64(uint64_t v) {
  return Scalar(GgufType::kU64, v);
}
GgufValue GgufValue::I64(int64_t v) {
  return Scalar(GgufType::kI64, static_cast<uint64_t>(v));
}
GgufValue GgufValue::F64(double v) {
  return Scalar(GgufType::kF64, std::bit_cast<uint64_t>(v));
}

GgufValue GgufValue::String(std::string v) {
  GgufValue out;
  out.type_ = GgufType::kString;
  out.string_ = std::move(v);
  return out;
}

template <typename T>
GgufValue GgufValue::Array(const std::vector<T>& values) {
  GgufValue out;
  out.type_ = GgufType::kArray;
  out.elem_type_ = GgufTypeOf<T>();
  out.count_ = values.size();
  if constexpr (std::is_same_v<T, std::string>) {
    out.strings_ = values;
  } else if constexpr (std::is_same_v<T, bool>) {
    for (bool b : values) out.raw_.push_back(b ? 1 : 0);
  } else {
    out.raw_.resize(values.size() * sizeof(T));
    if (!values.empty()) std::memcpy(out.raw_.data(), values.data(), out.raw_.size());
  }
  return out;
}

GgufValue GgufValue::ArrayOfArrays(std::vector<GgufValue> arrays) {
  for (const GgufValue& a : arrays) {
    if (!a.is_array())
      Fail(ErrorCode::kInvalidArgument, "an array of arrays got an element of type ", GgufTypeName(a.type()));
  }
  GgufValue out;
  out.type_ = GgufType::kArray;
  out.elem_type_ = GgufType::kArray;
  out.count_ = arrays.size();
  out.arrays_ = std::move(arrays);
  return out;
}

void GgufValue::WrongType(std::string_view what, std::string_view expected) const {
  std::string found = GgufTypeName(type_);
  if (is_array()) found = StrCat("array of ", GgufTypeName(elem_type_));
  Fail(ErrorCode::kCorruptData, what, ": expected ", expected, ", found ", found);
}

const GgufValue& GgufValue::Require(GgufType t, std::string_view what) const {
  if (type_ != t) WrongType(what, GgufTypeName(t));
  return *this;
}

const GgufValue& GgufValue::RequireArray(GgufType elem, std::string_view what) const {
  if (!is_array() || elem_type_ != elem) WrongType(what, StrCat("array of ", GgufTypeName(elem)));
  return *this;
}

uint8_t GgufValue::AsU8(std::string_view what) const {
  return static_cast<uint8_t>(Require(GgufType::kU8, what).scalar_);
}
int8_t GgufValue::AsI8(std::string_view what) const {
  return static_cast<int8_t>(Require(GgufType::kI8, what).scalar_);
}
uint16_t GgufValue::AsU16(std::string_view what) const {
  return static_cast<uint16_t>(Require(GgufType::kU16, what).scalar_);
}
int16_t GgufValue::AsI16(std::string_view what) const {
  return static_cast<int16_t>(Require(GgufType::kI16, what).scalar_);
}
uint32_t GgufValue::AsU32(std::string_view what) const {
  return static_cast<uint32_t>(Require(GgufType::kU32, what).scalar_);
}
int32_t GgufValue::AsI32(std::string_view what) const {
  return static_cast<int32_t>(Require(GgufType::kI32, what).scalar_);
}
float GgufValue::AsF32(std::string_view what) const {
  return std::bit_cast<float>(static_cast<uint32_t>(Require(GgufType::kF32, what).scalar_));
}
bool GgufValue::AsBool(std::string_view what) const {
  return Require(GgufType::kBool, what).scalar_ != 0;
}
const std::string& GgufValue::AsString(std::string_view what) const {
  return Require(GgufType::kString, what).string_;
}
uint64_t GgufValue::AsU64(std::string_view what) const {
  return Require(GgufType::kU64, what).scalar_;
}
int64_t GgufValue::AsI64(std::string_view what) const {
  return static_cast<int64_t>(Require(GgufType::kI64, what).scalar_);
}
double GgufValue::AsF64(std::string_view what) const {
  return std::bit_cast<double>(Require(GgufType::kF64, what).scalar_);
}

int64_t GgufValue::AsInt(std::string_view what) const {
  switch (type_) {
    case GgufType::kU8:
    case GgufType::kI8:
    case GgufType::kU16:
    case GgufType::kI16:
    case GgufType::kU32:
    case GgufType::kI32:
    case GgufType::kI64:
      return static_cast<int64_t>(scalar_);
    case GgufType::kU64:
      if (scalar_ > static_cast<uint64_t>(INT64_MAX))
        Fail(ErrorCode::kCorruptData, what, ": ", scalar_, " does not fit a signed 64-bit integer");
      return static_cast<int64_t>(scalar_);
    default:
      WrongType(what, "an integer");
  }
}

double GgufValue::AsFloat(std::string_view what) const {
  if (type_ == GgufType::kF32) return AsF32(what);
  if (type_ == GgufType::kF64) return AsF64(what);
  WrongType(what, "f32 or f64");
}

template <typename T>
std::vector<T> GgufValue::ArrayValues(std::string_view what) const {
  RequireArray(GgufTypeOf<T>(), what);
  if constexpr (std::is_same_v<T, std::string>) {
    return strings_;
  } else if constexpr (std::is_same_v<T, bool>) {
    std::vector<bool> out;
    for (uint8_t b : raw_) out.push_back(b != 0);
    return out;
  } else {
    std::vector<T> out(count_);
    if (count_ != 0) std::memcpy(out.data(), raw_.data(), count_ * sizeof(T));
    return out;
  }
}

const std::vector<std::string>& GgufValue::StringArray(std::string_view what) const {
  return RequireArray(GgufType::kString, what).strings_;
}

const std::vector<GgufValue>& GgufValue::NestedArrays(std::string_view what) const {
  return RequireArray(GgufType::kArray, what).arrays_;
}

std::vector<int64_t> GgufValue::IntArray(std::string_view what) const {
  if (!is_array()) WrongType(what, "an array of integers");
  switch (elem_type_) {
    case GgufType::kU8:
    case GgufType::kI8:
    case GgufType::kU16:
    case GgufType::kI16:
    case GgufType::kU32:
    case GgufType::kI32:
    case GgufType::kU64:
    case GgufType::kI64:
      break;
    default:
      WrongType(what, "an array of integers");
  }
  const size_t width = MinValueBytes(elem_type_);
  std::vector<int64_t> out(count_);
  for (size_t i = 0; i < count_; ++i) {
    uint64_t bits = LoadScalarBits(elem_type_, raw_.data() + i * width);
    if (elem_type_ == GgufType::kU64 && bits > static_cast<uint64_t>(INT64_MAX))
      Fail(ErrorCode::kCorruptData, what, ": element ", i, " (", bits,
           ") does not fit a signed 64-bit integer");
    out[i] = static_cast<int64_t>(bits);
  }
  return out;
}

std::string GgufValue::ToString(size_t max_items) const {
  switch (type_) {
    case GgufType::kU8:
    case GgufType::kU16:
    case GgufType::kU32:
    case GgufType::kU64:
      return StrCat(scalar_);
    case GgufType::kI8:
    case GgufType::kI16:
    case GgufType::kI32:
    case GgufType::kI64:
      return StrCat(static_cast<int64_t>(scalar_));
    case GgufType::kF32:
      return StrCat(AsF32());
    case GgufType::kF64:
      return StrCat(AsF64());
    case GgufType::kBool:
      return scalar_ != 0 ? "true" : "false";
    case GgufType::kString:
      return StrCat('"', string_, '"');
    case GgufType::kArray:
      break;
  }
  std::string out = "[";
  const size_t shown = std::min(count_, max_items);
  for (size_t i = 0; i < shown; ++i) {
    if (i > 0) out += ", ";
    if (elem_type_ == GgufType::kString) {
      out += StrCat('"', strings_[i], '"');
    } else if (elem_type_ == GgufType::kArray) {
      out += arrays_[i].ToString(max_items);
    } else {
      size_t width = MinValueBytes(elem_type_);
      out += Scalar(elem_type_, LoadScalarBits(elem_type_, raw_.data() + i * width)).ToString();
    }
  }
  if (shown < count_) out += StrCat(", ... (", count_, " ", GgufTypeName(elem_type_), " items)");
  return out + "]";
}

bool GgufValue::operator==(const GgufValue& other) const {
  if (type_ != other.type_) return false;
  if (!is_array()) return scalar_ == other.scalar_ && string_ == other.string_;
  return elem_type_ == other.elem_type_ && count_ == other.count_ && raw_ == other.raw_ &&
         strings_ == other.strings_ && arrays_ == other.arrays_;
}

GgufValue GgufValue::Scalar(GgufType t, uint64_t bits) {
  GgufValue v;
  v.type_ = t;
  v.scalar_ = bits;
  return v;
}

#define HYMT_GGUF_ARRAY_TYPE(T)                                         \
  template GgufValue GgufValue::Array<T>(const std::vector<T>& values); \
  template std::vector<T> GgufValue::ArrayValues<T>(std::string_view what) const;
HYMT_GGUF_ARRAY_TYPE(uint8_t)
HYMT_GGUF_ARRAY_TYPE(int8_t)
HYMT_GGUF_ARRAY_TYPE(uint16_t)
HYMT_GGUF_ARRAY_TYPE(int16_t)
HYMT_GGUF_ARRAY_TYPE(uint32_t)
HYMT_GGUF_ARRAY_TYPE(int32_t)
HYMT_GGUF_ARRAY_TYPE(float)
HYMT_GGUF_ARRAY_TYPE(bool)
HYMT_GGUF_ARRAY_TYPE(uint64_t)
HYMT_GGUF_ARRAY_TYPE(int64_t)
HYMT_GGUF_ARRAY_TYPE(double)
HYMT_GGUF_ARRAY_TYPE(std::string)
#undef HYMT_GGUF_ARRAY_TYPE

// ---- GgufMetadata --------------------------------------------------------------------------------

void GgufMetadata::Set(std::string key, GgufValue value) {
  auto it = index_.find(key);
  if (it != index_.end()) {
    entries_[it->second].second = std::move(value);
    return;
  }
  index_.emplace(key, entries_.size());
  entries_.emplace_back(std::move(key), std::move(value));
}

const GgufValue* GgufMetadata::Find(std::string_view key) const {
  auto it = index_.find(key);
  return it == index_.end() ? nullptr : &entries_[it->second].second;
}

std::string GgufMetadata::Where(std::string_view key) const {
  return StrCat(source_, ": metadata key '", key, "'");
}

const GgufValue& GgufMetadata::Get(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) Fail(ErrorCode::kNotFound, Where(key), " is missing");
  return *v;
}

const std::string& GgufMetadata::GetString(std::string_view key) const {
  return Get(key).AsString(Where(key));
}
bool GgufMetadata::GetBool(std::string_view key) const {
  return Get(key).AsBool(Where(key));
}
uint32_t GgufMetadata::GetU32(std::string_view key) const {
  return Get(key).AsU32(Where(key));
}
int32_t GgufMetadata::GetI32(std::string_view key) const {
  return Get(key).AsI32(Where(key));
}
uint64_t GgufMetadata::GetU64(std::string_view key) const {
  return Get(key).AsU64(Where(key));
}
int64_t GgufMetadata::GetI64(std::string_view key) const {
  return Get(key).AsI64(Where(key));
}
float GgufMetadata::GetF32(std::string_view key) const {
  return Get(key).AsF32(Where(key));
}
double GgufMetadata::GetF64(std::string_view key) const {
  return Get(key).AsF64(Where(key));
}
int64_t GgufMetadata::GetInt(std::string_view key) const {
  return Get(key).AsInt(Where(key));
}
double GgufMetadata::GetFloat(std::string_view key) const {
  return Get(key).AsFloat(Where(key));
}

const GgufValue& GgufMetadata::GetArray(std::string_view key) const {
  const GgufValue& v = Get(key);
  if (!v.is_array())
    Fail(ErrorCode::kCorruptData, Where(key), ": expected an array, found ", GgufTypeName(v.type()));
  return v;
}

const std::vector<std::string>& GgufMetadata::GetStringArray(std::string_view key) const {
  return Get(key).StringArray(Where(key));
}
std::vector<float> GgufMetadata::GetF32Array(std::string_view key) const {
  return Get(key).ArrayValues<float>(Where(key));
}
std::vector<int32_t> GgufMetadata::GetI32Array(std::string_view key) const {
  return Get(key).ArrayValues<int32_t>(Where(key));
}
std::vector<int64_t> GgufMetadata::GetIntArray(std::string_view key) const {
  return Get(key).IntArray(Where(key));
}

}  // namespace hymt
