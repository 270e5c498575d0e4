#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/status.h"
#include "core/strings.h"
#include "formats/gguf.h"
#include "formats/gguf_internal.h"

namespace hymt {

using gguf_internal::AlignUp;
using gguf_internal::IsPowerOfTwo;
using gguf_internal::MinValueBytes;

namespace {

void Put32(uint32_t v, std::string* out) {
  out->append(reinterpret_cast<const char*>(&v), 4);
}
void Put64(uint64_t v, std::string* out) {
  out->append(reinterpret_cast<const char*>(&v), 8);
}
void PutString(std::string_view s, std::string* out) {
  Put64(s.size(), out);
  out->append(s);
}

}  // namespace

void GgufWriter::SetAlignment(uint32_t alignment) {
  if (!IsPowerOfTwo(alignment))
    Fail(ErrorCode::kInvalidArgument, "GGUF alignment ", alignment, " is not a power of two");
  metadata_.Set("general.alignment", GgufValue::U32(alignment));
}

void GgufWriter::AddTensor(std::string name, DType dtype, std::vector<int64_t> shape, const void* data,
                           size_t bytes) {
  Add(Tensor{std::move(name), dtype, std::move(shape), bytes, data, nullptr});
}

void GgufWriter::AddTensor(std::string name, DType dtype, std::vector<int64_t> shape, Producer produce) {
  if (!produce) Fail(ErrorCode::kInvalidArgument, "GGUF tensor '", name, "' has no data producer");
  Tensor t{std::move(name), dtype, std::move(shape), 0, nullptr, std::move(produce)};
  // The size follows from dtype and shape; Add checks them.
  t.bytes = SIZE_MAX;
  Add(std::move(t));
}

void GgufWriter::Add(Tensor t) {
  const std::string what = StrCat("GGUF tensor '", t.name, "'");
  if (t.name.empty() || t.name.size() > kGgufWriterMaxTensorNameBytes) {
    Fail(ErrorCode::kInvalidArgument, what, ": names must be 1 to ", kGgufWriterMaxTensorNameBytes, " bytes");
  }
  if (index_.count(t.name) != 0) Fail(ErrorCode::kInvalidArgument, what, " was added twice");
  uint32_t ggml_type;
  if (!DTypeToGgmlType(t.dtype, &ggml_type)) {
    Fail(ErrorCode::kUnsupported, what, ": GGUF has no type for ", DTypeName(t.dtype));
  }
  if (t.shape.empty() || t.shape.size() > static_cast<size_t>(kGgufMaxDims)) {
    Fail(ErrorCode::kInvalidArgument, what, ": shape ", ShapeString(t.shape), " must have 1 to ",
         kGgufMaxDims, " dims");
  }
  const DTypeInfo& dt = GetDTypeInfo(t.dtype);
  uint64_t elements = 1;
  for (int64_t d : t.shape) {
    if (d < 0 || __builtin_mul_overflow(elements, static_cast<uint64_t>(d), &elements) ||
        elements > static_cast<uint64_t>(INT64_MAX)) {
      Fail(ErrorCode::kInvalidArgument, what, ": invalid shape ", ShapeString(t.shape));
    }
  }
  if (t.shape.back() % dt.block_size != 0) {
    Fail(ErrorCode::kInvalidArgument, what, ": last dim ", t.shape.back(), " is not a multiple of the ",
         dt.name, " block size ", dt.block_size);
  }
  uint64_t expected = 0;
  if (__builtin_mul_overflow(elements / static_cast<uint64_t>(dt.block_size),
                             static_cast<uint64_t>(dt.block_bytes), &expected) ||
      expected > static_cast<uint64_t>(SIZE_MAX)) {
    Fail(ErrorCode::kInvalidArgument, what, ": shape ", ShapeString(t.shape), " is too large");
  }
  if (t.produce) {
    t.bytes = static_cast<size_t>(expected);
  } else if (t.bytes != expected) {
    Fail(ErrorCode::kInvalidArgument, what, ": ", dt.name, " ", ShapeString(t.shape), " takes ", expected,
         " bytes, got ", t.bytes);
  }
  index_.emplace(t.name, tensors_.size());
  tensors_.push_back(std::move(t));
}

uint32_t GgufWriter::Alignment() const {
  const GgufValue* a = metadata_.Find("general.alignment");
  if (a == nullptr) return kGgufDefaultAlignment;
  if (a->type() != GgufType::kU32 || !IsPowerOfTwo(a->AsU32())) {
    Fail(ErrorCode::kInvalidArgument, "GGUF general.alignment must be a power-of-two u32, found ",
         a->ToString(), " (", GgufTypeName(a->type()), ")");
  }
  return a->AsU32();
}

std::string GgufWriter::Header(uint32_t alignment) const {
  std::string out;
  Put32(kGgufMagic, &out);
  Put32(kGgufVersion, &out);
  Put64(tensors_.size(), &out);
  Put64(metadata_.size(), &out);
  for (const auto& [key, value] : metadata_.entries()) {
    PutString(key, &out);
    Put32(static_cast<uint32_t>(value.type()), &out);
    PutValue(value, &out);
  }
  uint64_t offset = 0;
  for (const Tensor& t : tensors_) {
    PutString(t.name, &out);
    Put32(static_cast<uint32_t>(t.shape.size()), &out);
    for (auto it = t.shape.rbegin(); it != t.shape.rend(); ++it) Put64(static_cast<uint64_t>(*it), &out);
    uint32_t ggml_type = 0;
    DTypeToGgmlType(t.dtype, &ggml_type);
    Put32(ggml_type, &out);
    Put64(offset, &out);
    offset += AlignUp(t.bytes, alignment);
  }
  return out;
}

uint64_t GgufWriter::FileSize() const {
  const uint32_t alignment = Alignment();
  uint64_t size = AlignUp(Header(alignment).size(), alignment);
  for (const Tensor& t : tensors_) size += AlignUp(t.bytes, alignment);
  return size;
}

void GgufWriter::Write(const std::string& path) const {
  const uint32_t alignment = Alignment();
  const std::string header = Header(alignment);
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) Fail(ErrorCode::kInternal, "cannot create ", tmp, ": ", std::strerror(errno));
  try {
    auto write = [&](const void* p, size_t n) {
      if (n != 0 && std::fwrite(p, 1, n, f) != n)
        Fail(ErrorCode::kInternal, "cannot write ", tmp, ": ", std::strerror(errno));
    };
    static const char kZeros[4096] = {};
    auto pad = [&](uint64_t written) {
      for (uint64_t n = AlignUp(written, alignment) - written; n > 0;) {
        const size_t chunk = static_cast<size_t>(std::min<uint64_t>(n, sizeof kZeros));
        write(kZeros, chunk);
        n -= chunk;
      }
    };
    write(header.data(), header.size());
    pad(header.size());
    std::vector<uint8_t> buffer;
    for (const Tensor& t : tensors_) {
      const void* bytes = t.data;
      if (t.produce) {
        buffer.resize(t.bytes);
        t.produce(buffer.data(), t.bytes);
        bytes = buffer.data();
      }
      write(bytes, t.bytes);
      pad(t.bytes);
    }
    if (std::fflush(f) != 0) Fail(ErrorCode::kInternal, "cannot write ", tmp, ": ", std::strerror(errno));
  } catch (...) {
    std::fclose(f);
    std::remove(tmp.c_str());
    throw;
  }
  if (std::fclose(f) != 0) {
    std::remove(tmp.c_str());
    Fail(ErrorCode::kInternal, "cannot write ", tmp, ": ", std::strerror(errno));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    Fail(ErrorCode::kInternal, "cannot rename ", tmp, " to ", path, ": ", std::strerror(err));
  }
}

void GgufWriter::PutValue(const GgufValue& v, std::string* out) {
  if (v.type_ == GgufType::kString) {
    PutString(v.string_, out);
  } else if (!v.is_array()) {
    // Little-endian: the low bytes of the normalised 64-bit representation.
    out->append(reinterpret_cast<const char*>(&v.scalar_), MinValueBytes(v.type_));
  } else {
    Put32(static_cast<uint32_t>(v.elem_type_), out);
    Put64(v.count_, out);
    for (const std::string& s : v.strings_) PutString(s, out);
    for (const GgufValue& a : v.arrays_) PutValue(a, out);
    out->append(reinterpret_cast<const char*>(v.raw_.data()), v.raw_.size());
  }
}

}  // namespace hymt
