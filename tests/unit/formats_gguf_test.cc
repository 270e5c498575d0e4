#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/mapped_file.h"
#include "formats/gguf.h"
#include "formats_test_helpers.h"
#include "test_util.h"

namespace hymt {
namespace {

// Builds GGUF bytes by hand, independently of GgufWriter, so the reader is checked against the spec.
struct Bytes {
  std::string s;
  Bytes& U8(uint8_t v) {
    s.push_back(static_cast<char>(v));
    return *this;
  }
  Bytes& U32(uint32_t v) {
    s.append(reinterpret_cast<const char*>(&v), 4);
    return *this;
  }
  Bytes& U64(uint64_t v) {
    s.append(reinterpret_cast<const char*>(&v), 8);
    return *this;
  }
  Bytes& F32(float v) { return U32(std::bit_cast<uint32_t>(v)); }
  Bytes& Str(std::string_view v) {
    U64(v.size());
    s.append(v);
    return *this;
  }
  // A metadata key and value type.
  Bytes& Key(std::string_view key, GgufType type) { return Str(key).U32(static_cast<uint32_t>(type)); }
  // A tensor info; dims innermost first, as stored.
  Bytes& Tensor(std::string_view name, std::vector<uint64_t> dims, uint32_t ggml_type, uint64_t offset) {
    Str(name).U32(static_cast<uint32_t>(dims.size()));
    for (uint64_t d : dims) U64(d);
    return U32(ggml_type).U64(offset);
  }
  Bytes& PadTo(size_t alignment) {
    while (s.size() % alignment != 0) s.push_back('\0');
    return *this;
  }
  Bytes& Fill(size_t n, char c = '\x5a') {
    s.append(n, c);
    return *this;
  }
};

Bytes Start(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
  Bytes b;
  b.U32(kGgufMagic).U32(version).U64(n_tensors).U64(n_kv);
  return b;
}

std::unique_ptr<GgufFile> ParseBytes(const std::string& s, const std::string& name = "t.gguf") {
  return GgufFile::Parse(reinterpret_cast<const uint8_t*>(s.data()), s.size(), name);
}

// A file with one tensor of the given ggml type and dims (innermost first) and `data` bytes of data.
std::string OneTensor(uint32_t type, std::vector<uint64_t> dims, uint64_t offset, size_t data) {
  Bytes b = Start(1, 0);
  b.Tensor("w", std::move(dims), type, offset).PadTo(32).Fill(data);
  return b.s;
}

TEST(Gguf, ReadsAHandBuiltFile) {
  Bytes b = Start(2, 5);
  b.Key("general.name", GgufType::kString).Str("tiny");
  b.Key("a.u32", GgufType::kU32).U32(7);
  b.Key("a.f32", GgufType::kF32).F32(1.5f);
  b.Key("a.tokens", GgufType::kArray).U32(static_cast<uint32_t>(GgufType::kString)).U64(2).Str("x").Str("yz");
  b.Key("a.flag", GgufType::kBool).U8(1);
  b.Tensor("first", {3, 2}, 0, 0);  // f32 [2, 3]: 24 bytes
  b.Tensor("second", {64}, 8, 32);  // q8_0 [64]: 2 blocks of 34 bytes
  b.PadTo(32);
  const size_t data_start = b.s.size();
  for (int i = 0; i < 6; ++i) b.F32(static_cast<float>(i));
  b.PadTo(32).Fill(68);
  auto f = ParseBytes(b.s);
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->alignment(), 32u);
  EXPECT_EQ(f->data_offset(), data_start);
  EXPECT_EQ(f->metadata().GetString("general.name"), "tiny");
  EXPECT_EQ(f->metadata().GetU32("a.u32"), 7u);
  EXPECT_EQ(f->metadata().GetF32("a.f32"), 1.5f);
  EXPECT_EQ(f->metadata().GetStringArray("a.tokens"), (std::vector<std::string>{"x", "yz"}));
  EXPECT_TRUE(f->metadata().GetBool("a.flag"));
  ASSERT_EQ(f->tensors().size(), 2u);
  const TensorInfo& first = f->Get("first");
  EXPECT_EQ(first.dtype, DType::kF32);
  EXPECT_EQ(first.shape, (std::vector<int64_t>{2, 3}));  // outermost first
  EXPECT_EQ(first.bytes, 24u);
  EXPECT_EQ(first.data, reinterpret_cast<const uint8_t*>(b.s.data()) + data_start);
  float last;
  std::memcpy(&last, first.data + 20, 4);
  EXPECT_EQ(last, 5.0f);
  const TensorInfo& second = f->Get("second");
  EXPECT_EQ(second.dtype, DType::kQ8_0);
  EXPECT_EQ(second.bytes, 68u);
  EXPECT_EQ(second.data, first.data + 32);
  EXPECT_EQ(second.file, "t.gguf");
}

TEST(Gguf, OpenReportsAMissingFile) {
  EXPECT_HYMT_ERROR(GgufFile::Open(test::TempDir() + "/none.gguf"), ErrorCode::kNotFound, "none.gguf");
}

TEST(Gguf, AcceptsVersion2AndEmptyFiles) {
  EXPECT_EQ(ParseBytes(Start(0, 0, 2).s)->version(), 2u);
  auto empty = ParseBytes(Start(0, 0).s);
  EXPECT_TRUE(empty->tensors().empty());
  EXPECT_EQ(empty->metadata().size(), 0u);
}

TEST(Gguf, HeaderErrors) {
  std::string bad_magic = Start(0, 0).s;
  bad_magic[0] = 'X';
  EXPECT_HYMT_ERROR(ParseBytes(bad_magic, "m.gguf"), ErrorCode::kCorruptData, "m.gguf", "not a GGUF file");
  EXPECT_HYMT_ERROR(ParseBytes(Start(0, 0, 1).s), ErrorCode::kUnsupported, "version 1");
  EXPECT_HYMT_ERROR(ParseBytes(Start(0, 0, 4).s), ErrorCode::kUnsupported, "version 4");
  EXPECT_HYMT_ERROR(ParseBytes(Start(0, 0, 0x03000000).s), ErrorCode::kUnsupported, "big-endian");
  EXPECT_HYMT_ERROR(ParseBytes(Start(uint64_t{1} << 60, 0).s), ErrorCode::kCorruptData, "tensor count");
  EXPECT_HYMT_ERROR(ParseBytes(Start(0, uint64_t{1} << 60).s), ErrorCode::kCorruptData, "metadata count");
  EXPECT_HYMT_ERROR(ParseBytes(Start(3, 0).Fill(40).s), ErrorCode::kCorruptData, "tensor count 3");
  EXPECT_HYMT_ERROR(ParseBytes("GGU"), ErrorCode::kCorruptData, "truncated", "magic");
  EXPECT_HYMT_ERROR(ParseBytes(""), ErrorCode::kCorruptData, "truncated");
}

TEST(Gguf, MetadataErrors) {
  auto kv = [](auto&& fill) {
    Bytes b = Start(0, 1);
    fill(b);
    return b.s;
  };
  EXPECT_HYMT_ERROR(ParseBytes(kv([](Bytes& b) { b.U64(uint64_t{1} << 40).Fill(16); })),
                    ErrorCode::kCorruptData, "key of metadata entry 0", "exceeds the limit");
  EXPECT_HYMT_ERROR(ParseBytes(kv([](Bytes& b) { b.U64(100).Fill(20); })), ErrorCode::kCorruptData,
                    "truncated");
  EXPECT_HYMT_ERROR(ParseBytes(kv([](Bytes& b) { b.Str("k").U32(13).U32(0); })), ErrorCode::kCorruptData,
                    "'k'", "unknown value type 13");
  EXPECT_HYMT_ERROR(ParseBytes(kv([](Bytes& b) { b.Key("k", GgufType::kU64).U32(1); })),
                    ErrorCode::kCorruptData, "truncated", "'k'");
  EXPECT_HYMT_ERROR(ParseBytes(kv([](Bytes& b) { b.Key("k", GgufType::kBool).U8(2); })),
                    ErrorCode::kCorruptData, "'k'", "bool");
  EXPECT_HYMT_ERROR(ParseBytes(kv([](Bytes& b) { b.Key("k", GgufType::kString).U64(uint64_t{1} << 62); })),
                    ErrorCode::kCorruptData, "truncated", "'k'");
  EXPECT_HYMT_ERROR(ParseBytes(kv([](Bytes& b) { b.Key("k", GgufType::kArray).U32(14).U64(0); })),
                    ErrorCode::kCorruptData, "'k'", "unknown array element type 14");
  // Counts that cannot fit the rest of the file fail before anything is allocated.
  for (GgufType t : {GgufType::kU8, GgufType::kU32, GgufType::kString, GgufType::kArray, GgufType::kF64}) {
    EXPECT_HYMT_ERROR(ParseBytes(kv([t](Bytes& b) {
                        b.Key("k", GgufType::kArray).U32(static_cast<uint32_t>(t)).U64(uint64_t{1} << 58);
                      })),
                      ErrorCode::kCorruptData, "'k'", "cannot fit");
  }
  EXPECT_HYMT_ERROR(
      ParseBytes(kv([](Bytes& b) {
        b.Key("k", GgufType::kArray).U32(static_cast<uint32_t>(GgufType::kBool)).U64(2).U8(0).U8(7);
      })),
      ErrorCode::kCorruptData, "'k'", "bool");
  // Arrays of arrays nest at most kGgufMaxArrayDepth deep.
  auto nested = [](int depth) {
    Bytes b = Start(0, 1);
    b.Key("k", GgufType::kArray);
    for (int i = 1; i < depth; ++i) b.U32(static_cast<uint32_t>(GgufType::kArray)).U64(1);
    b.U32(static_cast<uint32_t>(GgufType::kU8)).U64(1).U8(9);
    return b.s;
  };
  EXPECT_EQ(ParseBytes(nested(kGgufMaxArrayDepth))->metadata().GetArray("k").array_size(), 1u);
  EXPECT_HYMT_ERROR(ParseBytes(nested(kGgufMaxArrayDepth + 1)), ErrorCode::kCorruptData, "nested deeper");

  Bytes dup = Start(0, 2);
  dup.Key("k", GgufType::kU8).U8(1).Key("k", GgufType::kU8).U8(2);
  EXPECT_HYMT_ERROR(ParseBytes(dup.s), ErrorCode::kCorruptData, "'k'", "twice");
}

TEST(Gguf, AlignmentRules) {
  auto with_alignment = [](auto&& value) {
    Bytes b = Start(1, 1);
    value(b);
    b.Tensor("w", {4}, 0, 0);
    return b;
  };
  Bytes ok = with_alignment([](Bytes& b) { b.Key("general.alignment", GgufType::kU32).U32(64); });
  ok.PadTo(64).Fill(16);
  auto f = ParseBytes(ok.s);
  EXPECT_EQ(f->alignment(), 64u);
  EXPECT_EQ(f->data_offset() % 64, 0u);

  EXPECT_HYMT_ERROR(
      ParseBytes(with_alignment([](Bytes& b) { b.Key("general.alignment", GgufType::kU32).U32(48); })
                     .PadTo(64)
                     .Fill(16)
                     .s),
      ErrorCode::kCorruptData, "48", "power of two");
  EXPECT_HYMT_ERROR(
      ParseBytes(
          with_alignment([](Bytes& b) { b.Key("general.alignment", GgufType::kU32).U32(0); }).Fill(64).s),
      ErrorCode::kCorruptData, "power of two");
  EXPECT_HYMT_ERROR(
      ParseBytes(
          with_alignment([](Bytes& b) { b.Key("general.alignment", GgufType::kU64).U64(32); }).Fill(64).s),
      ErrorCode::kCorruptData, "general.alignment", "expected u32, found u64");
}

TEST(Gguf, TensorInfoErrors) {
  EXPECT_HYMT_ERROR(ParseBytes(OneTensor(0, {1, 1, 1, 1, 1}, 0, 4)), ErrorCode::kCorruptData, "'w'",
                    "5 dims");
  EXPECT_HYMT_ERROR(ParseBytes(OneTensor(0, {uint64_t{1} << 63}, 0, 4)), ErrorCode::kCorruptData, "'w'",
                    "dim 0");
  EXPECT_HYMT_ERROR(ParseBytes(OneTensor(0, {uint64_t{1} << 40, uint64_t{1} << 40}, 0, 4)),
                    ErrorCode::kCorruptData, "'w'", "too many elements");
  EXPECT_HYMT_ERROR(ParseBytes(OneTensor(0, {uint64_t{1} << 62}, 0, 4)), ErrorCode::kCorruptData, "'w'",
                    "too large");
  EXPECT_HYMT_ERROR(ParseBytes(OneTensor(12, {100, 2}, 0, 288)), ErrorCode::kCorruptData, "'w'",
                    "first dim 100", "Q4_K block size 256");
  EXPECT_HYMT_ERROR(ParseBytes(OneTensor(0, {4}, 16, 64)), ErrorCode::kCorruptData, "'w'", "offset 16",
                    "alignment 32");
  EXPECT_HYMT_ERROR(ParseBytes(OneTensor(0, {16}, 0, 63)), ErrorCode::kCorruptData, "'w'", "past the end");
  EXPECT_HYMT_ERROR(ParseBytes(OneTensor(0, {4}, uint64_t{1} << 63, 64)), ErrorCode::kCorruptData, "'w'",
                    "past the end");
  EXPECT_HYMT_ERROR(ParseBytes(OneTensor(0, {4}, 0, 0).substr(0, 60)), ErrorCode::kCorruptData,
                    "data section");
  EXPECT_EQ(ParseBytes(OneTensor(0, {16}, 0, 64))->Get("w").bytes, 64u);
  EXPECT_EQ(ParseBytes(OneTensor(0, {0, 5}, 0, 0))->Get("w").bytes, 0u);

  Bytes overlap = Start(2, 0);
  overlap.Tensor("a", {16}, 0, 0).Tensor("b", {16}, 0, 32).PadTo(32).Fill(128);
  EXPECT_HYMT_ERROR(ParseBytes(overlap.s), ErrorCode::kCorruptData, "'a'", "'b'", "overlap");
  Bytes same = Start(2, 0);
  same.Tensor("a", {8}, 0, 0).Tensor("b", {8}, 0, 0).PadTo(32).Fill(64);
  EXPECT_HYMT_ERROR(ParseBytes(same.s), ErrorCode::kCorruptData, "overlap");
  Bytes dup = Start(2, 0);
  dup.Tensor("a", {8}, 0, 0).Tensor("a", {8}, 0, 32).PadTo(32).Fill(64);
  EXPECT_HYMT_ERROR(ParseBytes(dup.s), ErrorCode::kCorruptData, "'a'", "twice");
}

TEST(Gguf, UnsupportedTypesAreNamed) {
  struct Case {
    uint32_t id;
    const char* name;
  };
  for (Case c : std::vector<Case>{{9, "Q8_1"},
                                  {10, "Q2_K"},
                                  {11, "Q3_K"},
                                  {16, "IQ2_XXS"},
                                  {19, "IQ1_S"},
                                  {23, "IQ4_XS"},
                                  {28, "F64"},
                                  {29, "IQ1_M"},
                                  {34, "TQ1_0"},
                                  {35, "TQ2_0"},
                                  {39, "MXFP4"},
                                  {4, "Q4_2"}}) {
    SCOPED_TRACE(c.name);
    EXPECT_HYMT_ERROR(ParseBytes(OneTensor(c.id, {256}, 0, 1024), "q.gguf"), ErrorCode::kUnsupported,
                      "q.gguf", "'w'", StrCat("type ", c.name, " (ggml type ", c.id, ")"));
  }
  EXPECT_HYMT_ERROR(ParseBytes(OneTensor(200, {256}, 0, 1024)), ErrorCode::kUnsupported, "'w'",
                    "unknown ggml type 200");
}

TEST(Gguf, TypeTables) {
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ4_0, DType::kQ4_1, DType::kQ5_0,
                  DType::kQ5_1, DType::kQ8_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kQ8_K,
                  DType::kI8, DType::kI16, DType::kI32, DType::kI64}) {
    uint32_t id;
    ASSERT_TRUE(DTypeToGgmlType(d, &id)) << DTypeName(d);
    DType back;
    ASSERT_TRUE(GgmlTypeToDType(id, &back));
    EXPECT_EQ(back, d);
  }
  uint32_t id;
  EXPECT_FALSE(DTypeToGgmlType(DType::kF8E4M3, &id));
  EXPECT_FALSE(DTypeToGgmlType(DType::kU8, &id));
  DTypeToGgmlType(DType::kBF16, &id);
  EXPECT_EQ(id, 30u);
  DTypeToGgmlType(DType::kQ6_K, &id);
  EXPECT_EQ(id, 14u);
  EXPECT_STREQ(GgmlTypeName(12), "Q4_K");
  EXPECT_STREQ(GgmlTypeName(35), "TQ2_0");
  EXPECT_EQ(GgmlTypeName(1000), nullptr);
}

// Every kind of value, for the round trip.
GgufMetadata AllValueKinds() {
  GgufMetadata m;
  m.Set("general.architecture", GgufValue::String("test"));
  m.Set("v.u8", GgufValue::U8(200));
  m.Set("v.i8", GgufValue::I8(-100));
  m.Set("v.u16", GgufValue::U16(60000));
  m.Set("v.i16", GgufValue::I16(-30000));
  m.Set("v.u32", GgufValue::U32(4000000000u));
  m.Set("v.i32", GgufValue::I32(-2000000000));
  m.Set("v.f32", GgufValue::F32(11158840.0f));
  m.Set("v.bool", GgufValue::Bool(true));
  m.Set("v.string", GgufValue::String("héllo\n\0x"));
  m.Set("v.empty_string", GgufValue::String(""));
  m.Set("v.u64", GgufValue::U64(~uint64_t{0}));
  m.Set("v.i64", GgufValue::I64(std::numeric_limits<int64_t>::min()));
  m.Set("v.f64", GgufValue::F64(-1e300));
  m.Set("v.nan", GgufValue::F32(std::numeric_limits<float>::quiet_NaN()));
  m.Set("a.u8", GgufValue::Array(std::vector<uint8_t>{1, 2, 255}));
  m.Set("a.i8", GgufValue::Array(std::vector<int8_t>{-1, 2}));
  m.Set("a.u16", GgufValue::Array(std::vector<uint16_t>{1, 65535}));
  m.Set("a.i16", GgufValue::Array(std::vector<int16_t>{-2, 3}));
  m.Set("a.u32", GgufValue::Array(std::vector<uint32_t>{7, 8, 9}));
  m.Set("a.i32", GgufValue::Array(std::vector<int32_t>{-7, 8}));
  m.Set("a.f32", GgufValue::Array(std::vector<float>{0.5f, -0.25f}));
  m.Set("a.bool", GgufValue::Array(std::vector<bool>{true, false, true}));
  m.Set("a.string", GgufValue::Array(std::vector<std::string>{"a", "", "Ġtoken"}));
  m.Set("a.u64", GgufValue::Array(std::vector<uint64_t>{1, ~uint64_t{0}}));
  m.Set("a.i64", GgufValue::Array(std::vector<int64_t>{-1, 1}));
  m.Set("a.f64", GgufValue::Array(std::vector<double>{1e-300}));
  m.Set("a.empty", GgufValue::Array(std::vector<uint32_t>{}));
  m.Set("a.nested",
        GgufValue::ArrayOfArrays({GgufValue::Array(std::vector<std::string>{"x", "y"}),
                                  GgufValue::Array(std::vector<int32_t>{1}),
                                  GgufValue::ArrayOfArrays({GgufValue::Array(std::vector<uint8_t>{})})}));
  return m;
}

// Deterministic pseudo-random bytes.
std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> out(n);
  for (uint8_t& b : out) b = static_cast<uint8_t>(rng());
  return out;
}

struct WrittenTensor {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

std::vector<WrittenTensor> AllTensorKinds() {
  std::vector<WrittenTensor> out;
  uint32_t seed = 1;
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ4_0, DType::kQ4_1, DType::kQ5_0,
                  DType::kQ5_1, DType::kQ8_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kQ8_K,
                  DType::kI8, DType::kI16, DType::kI32, DType::kI64}) {
    const int64_t cols = GetDTypeInfo(d).block_size * 2;
    std::vector<int64_t> shape = {3, cols};
    out.push_back({StrCat("t.", DTypeName(d)), d, shape, RandomBytes(DTypeBytes(d, 3 * cols), seed++)});
  }
  out.push_back({"t.4d", DType::kF32, {2, 1, 3, 5}, RandomBytes(120, seed++)});
  out.push_back({"t.1d", DType::kF16, {7}, RandomBytes(14, seed++)});
  out.push_back({"t.empty", DType::kF32, {0, 4}, {}});
  return out;
}

class GgufRoundTrip : public ::testing::TestWithParam<uint32_t> {};

TEST_P(GgufRoundTrip, WriterOutputReadsBackIdentically) {
  const uint32_t alignment = GetParam();
  const std::string path = test::TempDir() + "/rt.gguf";
  GgufWriter w;
  const GgufMetadata all = AllValueKinds();
  for (const auto& [k, v] : all.entries()) w.metadata().Set(k, v);
  if (alignment != kGgufDefaultAlignment) w.SetAlignment(alignment);
  std::vector<WrittenTensor> tensors = AllTensorKinds();
  for (size_t i = 0; i < tensors.size(); ++i) {
    const WrittenTensor& t = tensors[i];
    if (i % 2 == 0) {
      w.AddTensor(t.name, t.dtype, t.shape, t.bytes.data(), t.bytes.size());
    } else {
      w.AddTensor(t.name, t.dtype, t.shape, [&t](uint8_t* dst, size_t n) {
        ASSERT_EQ(n, t.bytes.size());
        if (n != 0) std::memcpy(dst, t.bytes.data(), n);
      });
    }
  }
  w.Write(path);
  EXPECT_FALSE(FileExists(path + ".tmp"));

  const std::string image = ReadFile(path);
  EXPECT_EQ(image.size(), w.FileSize());
  auto f = ParseBytes(image, path);
  EXPECT_EQ(f->version(), kGgufVersion);
  EXPECT_EQ(f->alignment(), alignment);
  EXPECT_TRUE(f->metadata() == w.metadata());
  ASSERT_EQ(f->tensors().size(), tensors.size());
  const uint8_t* base = reinterpret_cast<const uint8_t*>(image.data());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const WrittenTensor& want = tensors[i];
    const TensorInfo& got = f->tensors()[i];
    SCOPED_TRACE(want.name);
    EXPECT_EQ(got.name, want.name);
    EXPECT_EQ(got.dtype, want.dtype);
    EXPECT_EQ(got.shape, want.shape);
    ASSERT_EQ(got.bytes, want.bytes.size());
    if (got.bytes > 0) {
      EXPECT_EQ(std::memcmp(got.data, want.bytes.data(), got.bytes), 0);
    }
    EXPECT_EQ(static_cast<size_t>(got.data - base) % alignment, 0u);
  }

  // The file opened from disk agrees with the in-memory parse.
  auto opened = GgufFile::Open(path);
  EXPECT_TRUE(opened->metadata() == f->metadata());
  EXPECT_EQ(opened->path(), path);
  EXPECT_EQ(opened->Get("t.q4_k").shape, (std::vector<int64_t>{3, 512}));
}

INSTANTIATE_TEST_SUITE_P(Alignments, GgufRoundTrip, ::testing::Values(32u, 1u, 64u, 4096u));

TEST(Gguf, MetadataAccessors) {
  GgufMetadata m("src.gguf");
  const GgufMetadata all = AllValueKinds();
  for (const auto& [k, v] : all.entries()) m.Set(k, v);
  EXPECT_EQ(m.GetU32("v.u32"), 4000000000u);
  EXPECT_EQ(m.GetI32("v.i32"), -2000000000);
  EXPECT_EQ(m.GetU64("v.u64"), ~uint64_t{0});
  EXPECT_EQ(m.GetI64("v.i64"), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(m.GetF64("v.f64"), -1e300);
  EXPECT_EQ(m.GetF32("v.f32"), 11158840.0f);
  EXPECT_TRUE(std::isnan(m.GetF32("v.nan")));
  EXPECT_EQ(m.GetString("v.string"), std::string("héllo\n\0x"));
  EXPECT_EQ(m.GetInt("v.u8"), 200);
  EXPECT_EQ(m.GetInt("v.i8"), -100);
  EXPECT_EQ(m.GetInt("v.i16"), -30000);
  EXPECT_EQ(m.GetInt("v.u32"), 4000000000);
  EXPECT_EQ(m.GetFloat("v.f32"), 11158840.0);
  EXPECT_EQ(m.GetFloat("v.f64"), -1e300);
  EXPECT_EQ(m.Get("v.u16").AsU16(), 60000);
  EXPECT_EQ(m.Get("v.i8").AsI8(), -100);
  EXPECT_EQ(m.GetF32Array("a.f32"), (std::vector<float>{0.5f, -0.25f}));
  EXPECT_EQ(m.GetI32Array("a.i32"), (std::vector<int32_t>{-7, 8}));
  EXPECT_EQ(m.GetIntArray("a.u8"), (std::vector<int64_t>{1, 2, 255}));
  EXPECT_EQ(m.GetIntArray("a.i16"), (std::vector<int64_t>{-2, 3}));
  EXPECT_EQ(m.GetIntArray("a.empty"), std::vector<int64_t>{});
  EXPECT_EQ(m.GetArray("a.bool").ArrayValues<bool>(), (std::vector<bool>{true, false, true}));
  EXPECT_EQ(m.GetArray("a.f64").ArrayValues<double>(), std::vector<double>{1e-300});
  const std::vector<GgufValue>& nested = m.GetArray("a.nested").NestedArrays();
  ASSERT_EQ(nested.size(), 3u);
  EXPECT_EQ(nested[0].StringArray(), (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(nested[2].NestedArrays()[0].array_size(), 0u);
  EXPECT_EQ(m.GetArray("a.u32").ToString(), "[7, 8, 9]");
  EXPECT_EQ(m.GetArray("a.u32").ToString(2), "[7, 8, ... (3 u32 items)]");
  EXPECT_EQ(m.Get("v.i8").ToString(), "-100");
  EXPECT_EQ(m.Get("v.bool").ToString(), "true");

  EXPECT_HYMT_ERROR(m.GetU32("nope"), ErrorCode::kNotFound, "src.gguf", "'nope'", "missing");
  EXPECT_HYMT_ERROR(m.GetU32("v.i32"), ErrorCode::kCorruptData, "src.gguf", "'v.i32'",
                    "expected u32, found i32");
  EXPECT_HYMT_ERROR(m.GetString("v.u8"), ErrorCode::kCorruptData, "'v.u8'", "expected string, found u8");
  EXPECT_HYMT_ERROR(m.GetF32("v.f64"), ErrorCode::kCorruptData, "expected f32, found f64");
  EXPECT_HYMT_ERROR(m.GetInt("v.u64"), ErrorCode::kCorruptData, "'v.u64'", "does not fit");
  EXPECT_HYMT_ERROR(m.GetInt("v.f32"), ErrorCode::kCorruptData, "expected an integer, found f32");
  EXPECT_HYMT_ERROR(m.GetFloat("v.u8"), ErrorCode::kCorruptData, "expected f32 or f64, found u8");
  EXPECT_HYMT_ERROR(m.GetArray("v.u8"), ErrorCode::kCorruptData, "expected an array, found u8");
  EXPECT_HYMT_ERROR(m.GetStringArray("a.u32"), ErrorCode::kCorruptData, "'a.u32'",
                    "expected array of string, found array of u32");
  EXPECT_HYMT_ERROR(m.GetF32Array("a.f64"), ErrorCode::kCorruptData,
                    "expected array of f32, found array of f64");
  EXPECT_HYMT_ERROR(m.GetIntArray("a.string"), ErrorCode::kCorruptData, "array of integers");
  EXPECT_HYMT_ERROR(m.GetIntArray("a.u64"), ErrorCode::kCorruptData, "element 1");
  EXPECT_HYMT_ERROR(GgufValue::ArrayOfArrays({GgufValue::U8(1)}), ErrorCode::kInvalidArgument, "u8");

  // Set replaces in place and keeps the order.
  m.Set("v.u8", GgufValue::String("now a string"));
  EXPECT_EQ(m.entries()[1].first, "v.u8");
  EXPECT_EQ(m.GetString("v.u8"), "now a string");
  EXPECT_FALSE(m == AllValueKinds());
}

TEST(Gguf, WriterRejectsBadInput) {
  GgufWriter w;
  const std::vector<uint8_t> data(1024);
  EXPECT_HYMT_ERROR(w.AddTensor("", DType::kF32, {1}, data.data(), 4), ErrorCode::kInvalidArgument, "names");
  EXPECT_HYMT_ERROR(w.AddTensor(std::string(64, 'x'), DType::kF32, {1}, data.data(), 4),
                    ErrorCode::kInvalidArgument, "1 to 63 bytes");
  w.AddTensor(std::string(63, 'x'), DType::kF32, {1}, data.data(), 4);
  EXPECT_HYMT_ERROR(w.AddTensor(std::string(63, 'x'), DType::kF32, {1}, data.data(), 4),
                    ErrorCode::kInvalidArgument, "twice");
  EXPECT_HYMT_ERROR(w.AddTensor("f8", DType::kF8E4M3, {4}, data.data(), 4), ErrorCode::kUnsupported,
                    "f8_e4m3");
  EXPECT_HYMT_ERROR(w.AddTensor("u8", DType::kU8, {4}, data.data(), 4), ErrorCode::kUnsupported, "u8");
  EXPECT_HYMT_ERROR(w.AddTensor("s", DType::kF32, {}, data.data(), 4), ErrorCode::kInvalidArgument,
                    "1 to 4 dims");
  EXPECT_HYMT_ERROR(w.AddTensor("s", DType::kF32, {1, 1, 1, 1, 1}, data.data(), 4),
                    ErrorCode::kInvalidArgument, "1 to 4 dims");
  EXPECT_HYMT_ERROR(w.AddTensor("s", DType::kF32, {-1, 4}, data.data(), 4), ErrorCode::kInvalidArgument,
                    "invalid shape");
  EXPECT_HYMT_ERROR(w.AddTensor("s", DType::kQ8_0, {2, 48}, data.data(), 102), ErrorCode::kInvalidArgument,
                    "last dim 48", "block size 32");
  EXPECT_HYMT_ERROR(w.AddTensor("s", DType::kF16, {2, 3}, data.data(), 10), ErrorCode::kInvalidArgument,
                    "takes 12 bytes, got 10");
  EXPECT_HYMT_ERROR(w.AddTensor("s", DType::kF16, {2, 3}, GgufWriter::Producer()),
                    ErrorCode::kInvalidArgument, "producer");
  EXPECT_HYMT_ERROR(w.SetAlignment(48), ErrorCode::kInvalidArgument, "48");
  EXPECT_HYMT_ERROR(w.SetAlignment(0), ErrorCode::kInvalidArgument, "power of two");

  w.metadata().Set("general.alignment", GgufValue::String("32"));
  EXPECT_HYMT_ERROR(w.Write(test::TempDir() + "/x.gguf"), ErrorCode::kInvalidArgument, "general.alignment");
  w.metadata().Set("general.alignment", GgufValue::U32(32));
  EXPECT_HYMT_ERROR(w.Write(test::TempDir() + "/no/such/dir/x.gguf"), ErrorCode::kInternal, "x.gguf.tmp");

  // A producer that throws leaves no file behind.
  const std::string dir = test::TempDir();
  GgufWriter failing;
  failing.AddTensor("t", DType::kF32, {4}, [](uint8_t*, size_t) { Fail(ErrorCode::kCancelled, "stop"); });
  EXPECT_HYMT_ERROR(failing.Write(dir + "/f.gguf"), ErrorCode::kCancelled, "stop");
  EXPECT_FALSE(FileExists(dir + "/f.gguf"));
  EXPECT_FALSE(FileExists(dir + "/f.gguf.tmp"));
}

// A small written file with metadata and several tensors, for the damage tests.
std::string SmallFile() {
  const std::string path = test::TempDir() + "/small.gguf";
  GgufWriter w;
  w.metadata().Set("general.architecture", GgufValue::String("test"));
  w.metadata().Set("general.alignment", GgufValue::U32(32));
  w.metadata().Set("a.tokens", GgufValue::Array(std::vector<std::string>{"a", "bb", "ccc"}));
  w.metadata().Set("a.scores", GgufValue::Array(std::vector<float>{1, 2, 3}));
  w.metadata().Set("a.nested", GgufValue::ArrayOfArrays({GgufValue::Array(std::vector<int32_t>{1, 2})}));
  w.metadata().Set("a.eps", GgufValue::F32(1e-5f));
  static const std::vector<uint8_t> kData = RandomBytes(4096, 7);
  w.AddTensor("w.f32", DType::kF32, {2, 4}, kData.data(), 32);
  w.AddTensor("w.q8_0", DType::kQ8_0, {2, 32}, kData.data(), 68);
  w.AddTensor("w.q4_k", DType::kQ4_K, {1, 256}, kData.data(), 144);
  w.Write(path);
  return ReadFile(path);
}

// Cutting the file anywhere gives an error, except inside the padding after the last tensor, where
// the file is still complete; never a crash or a read past the end (run under ASan in CI).
TEST(Gguf, TruncatedAtEveryByte) {
  const std::string image = SmallFile();
  auto full = ParseBytes(image);
  const TensorInfo& last = full->tensors().back();
  const size_t complete =
      static_cast<size_t>(last.data + last.bytes - reinterpret_cast<const uint8_t*>(image.data()));
  for (size_t cut = 0; cut < image.size(); ++cut) {
    const std::string part = image.substr(0, cut);
    if (cut >= complete) {
      EXPECT_EQ(ParseBytes(part)->tensors().size(), 3u) << "cut at " << cut;
    } else {
      EXPECT_THROW(ParseBytes(part), Error) << "cut at " << cut;
    }
  }
}

// Flipping any single bit anywhere before the data section either fails cleanly or yields tensors
// that lie inside the buffer.
TEST(Gguf, BitFlipsInEveryHeaderField) {
  const std::string image = SmallFile();
  const size_t header_end = ParseBytes(image)->data_offset();
  size_t failures = 0;
  for (size_t byte = 0; byte < header_end; ++byte) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string damaged = image;
      damaged[byte] = static_cast<char>(damaged[byte] ^ (1 << bit));
      try {
        auto f = ParseBytes(damaged);
        const uint8_t* base = reinterpret_cast<const uint8_t*>(damaged.data());
        for (const TensorInfo& t : f->tensors()) {
          ASSERT_GE(t.data, base);
          ASSERT_LE(t.data + t.bytes, base + damaged.size());
          ASSERT_EQ(t.bytes, DTypeBytes(t.dtype, ElementCount(t)));
        }
      } catch (const Error&) {
        ++failures;
      }
    }
  }
  EXPECT_GT(failures, header_end * 4);  // most flips break something
}

// Random byte garbage after a valid magic and version never crashes the reader.
TEST(Gguf, RandomHeadersNeverCrash) {
  std::mt19937 rng(42);
  for (int i = 0; i < 2000; ++i) {
    Bytes b = Start(rng() % 4, rng() % 4);
    const size_t n = rng() % 256;
    for (size_t k = 0; k < n; ++k) b.U8(static_cast<uint8_t>(rng() % 4 == 0 ? rng() : rng() % 16));
    try {
      ParseBytes(b.s);
    } catch (const Error&) {
    }
  }
}

}  // namespace
}  // namespace hymt
