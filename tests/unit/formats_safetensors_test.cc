#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/half.h"
#include "core/json.h"
#include "core/mapped_file.h"
#include "formats/hf_config.h"
#include "formats/safetensors.h"
#include "formats_test_helpers.h"
#include "test_util.h"

namespace hymt {
namespace {

using test::WriteBytes;

// A safetensors image: 8-byte little-endian header length, header, data.
std::string Image(std::string_view header, std::string_view data) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  out.append(header);
  out.append(data);
  return out;
}

std::unique_ptr<SafetensorsSource> ParseImage(const std::string& image,
                                              const std::string& name = "t.safetensors") {
  return SafetensorsSource::Parse(reinterpret_cast<const uint8_t*>(image.data()), image.size(), name);
}

std::string FixtureDir(const std::string& fixture, const std::string& variant) {
  return test::TestDataDir() + "/fixtures/" + fixture + "/" + variant;
}

TEST(Safetensors, ReadsSingleFileFixture) {
  const std::string dir = FixtureDir("tiny-gqa1", "f32");
  HfConfig config = LoadHfConfig(dir + "/config.json");
  auto src = SafetensorsSource::OpenFolder(dir);
  ASSERT_EQ(src->files().size(), 1u);
  EXPECT_EQ(src->files()[0], dir + "/model.safetensors");
  EXPECT_EQ(src->tensors().size(), 24u);
  EXPECT_EQ(src->metadata().at("format"), "pt");

  const TensorInfo& embed = src->Get("model.embed_tokens.weight");
  EXPECT_EQ(embed.dtype, DType::kF32);
  EXPECT_EQ(embed.shape, (std::vector<int64_t>{config.vocab_size, config.hidden_size}));
  EXPECT_EQ(embed.bytes, static_cast<size_t>(config.vocab_size * config.hidden_size * 4));
  EXPECT_EQ(ElementCount(embed), config.vocab_size * config.hidden_size);
  EXPECT_EQ(embed.file, dir + "/model.safetensors");
  EXPECT_EQ(src->Find("no.such.tensor"), nullptr);
  EXPECT_HYMT_ERROR(src->Get("no.such.tensor"), ErrorCode::kNotFound, "no.such.tensor");

  // Tensors are listed in data order; this writer leaves no gaps between them.
  const std::vector<TensorInfo>& all = src->tensors();
  for (size_t i = 1; i < all.size(); ++i)
    EXPECT_EQ(all[i - 1].data + all[i - 1].bytes, all[i].data) << all[i].name;
}

TEST(Safetensors, ShardedFolderFollowsTheIndex) {
  const std::string dir = FixtureDir("tiny-gqa4", "f32");
  auto src = SafetensorsSource::OpenFolder(dir);
  EXPECT_EQ(src->files().size(), 3u);
  Json index = Json::Parse(ReadFile(dir + "/model.safetensors.index.json"));
  const Json::Object& map = index.Find("weight_map")->AsObject();
  EXPECT_EQ(src->tensors().size(), map.size());
  for (const auto& [name, shard] : map) {
    const TensorInfo* info = src->Find(name);
    ASSERT_NE(info, nullptr) << name;
    EXPECT_EQ(info->file, dir + "/" + shard.AsString());
  }
  // The other ways to name the same checkpoint.
  EXPECT_EQ(SafetensorsSource::Open(dir)->tensors().size(), map.size());
  EXPECT_EQ(SafetensorsSource::Open(dir + "/model.safetensors.index.json")->tensors().size(), map.size());
  EXPECT_EQ(SafetensorsSource::Open(dir + "/model-00002-of-00003.safetensors")->files().size(), 1u);
}

// Every bf16 fixture holds exactly the round-to-nearest-even bf16 of its f32 twin, which checks data
// pointers and shapes across single files and shards.
TEST(Safetensors, Bf16FixturesAreRoundedF32Fixtures) {
  for (const char* fixture : {"tiny-gqa1", "tiny-gqa2", "tiny-gqa4"}) {
    auto f32 = SafetensorsSource::OpenFolder(FixtureDir(fixture, "f32"));
    auto bf16 = SafetensorsSource::OpenFolder(FixtureDir(fixture, "bf16"));
    ASSERT_EQ(f32->tensors().size(), bf16->tensors().size()) << fixture;
    for (const TensorInfo& a : f32->tensors()) {
      const TensorInfo& b = bf16->Get(a.name);
      ASSERT_EQ(a.dtype, DType::kF32);
      ASSERT_EQ(b.dtype, DType::kBF16);
      ASSERT_EQ(a.shape, b.shape) << a.name;
      const int64_t n = ElementCount(a);
      int64_t mismatches = 0;
      for (int64_t i = 0; i < n; ++i) {
        float x;
        uint16_t y;
        std::memcpy(&x, a.data + 4 * i, 4);
        std::memcpy(&y, b.data + 2 * i, 2);
        mismatches += F32ToBf16(x) != y;
      }
      EXPECT_EQ(mismatches, 0) << fixture << " " << a.name;
    }
  }
}

TEST(Safetensors, ReadsDemoModelAndReferenceFiles) {
  auto demo = SafetensorsSource::OpenFolder(test::SourceDir() + "/models/demo");
  EXPECT_EQ(demo->files().size(), 2u);
  EXPECT_EQ(demo->tensors().size(), 90u);
  for (const TensorInfo& t : demo->tensors()) EXPECT_EQ(t.dtype, DType::kBF16) << t.name;

  auto ref = SafetensorsSource::OpenFile(test::TestDataDir() + "/fixtures/tiny-gqa1/reference.safetensors");
  EXPECT_TRUE(ref->metadata().empty());
  const TensorInfo& ids = ref->Get("f32.prompt0.ids");
  EXPECT_EQ(ids.dtype, DType::kI32);
  EXPECT_EQ(ids.shape, (std::vector<int64_t>{68}));
  int32_t first;
  std::memcpy(&first, ids.data, 4);
  EXPECT_EQ(first, 1025);  // the fixture's <|startoftext|> (bos_token_id in its config)
}

TEST(Safetensors, AcceptsEveryReadableDTypeScalarsAndEmptyTensors) {
  const std::string header = R"({"__metadata__":{"format":"pt","note":"x"},)"
                             R"("a":{"dtype":"F8_E4M3","shape":[2,3],"data_offsets":[0,6]},)"
                             R"("b":{"dtype":"I64","shape":[1],"data_offsets":[6,14]},)"
                             R"("c":{"dtype":"U8","shape":[2],"data_offsets":[14,16]},)"
                             R"("d":{"dtype":"F16","shape":[],"data_offsets":[16,18]},)"
                             R"("e":{"dtype":"I8","shape":[0,5],"data_offsets":[18,18]},)"
                             R"("f":{"dtype":"I16","shape":[1],"data_offsets":[18,20]},)"
                             R"("g":{"dtype":"BF16","shape":[0],"data_offsets":[20,20]}})";
  auto src = ParseImage(Image(header, std::string(20, '\x01')));
  EXPECT_EQ(src->Get("a").dtype, DType::kF8E4M3);
  EXPECT_EQ(src->Get("b").dtype, DType::kI64);
  EXPECT_EQ(src->Get("c").dtype, DType::kU8);
  EXPECT_EQ(src->Get("d").shape, std::vector<int64_t>{});
  EXPECT_EQ(src->Get("d").bytes, 2u);
  EXPECT_EQ(src->Get("e").bytes, 0u);
  EXPECT_EQ(src->Get("f").dtype, DType::kI16);
  EXPECT_EQ(src->metadata().at("note"), "x");
  EXPECT_EQ(src->tensors().size(), 7u);

  DType d;
  for (const char* bad : {"F64", "BOOL", "U16", "U32", "U64", "F8_E5M2", "f32", ""})
    EXPECT_FALSE(ParseSafetensorsDType(bad, &d));
}

TEST(Safetensors, RejectsUnsupportedDTypeNamingTensorDTypeAndFile) {
  EXPECT_HYMT_ERROR(
      ParseImage(Image(R"({"w":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", std::string(8, 0)),
                 "weights.safetensors"),
      ErrorCode::kUnsupported, "'w'", "F64", "weights.safetensors");
}

struct BadHeader {
  const char* what;
  std::string header;
  size_t data_bytes;
  const char* expect;  // a part of the message
};

TEST(Safetensors, RejectsMalformedHeaders) {
  const std::vector<BadHeader> cases = {
      {"not JSON", "{\"a\":", 0, "not valid JSON"},
      {"not an object", "[1,2]", 0, "must be a JSON object"},
      {"entry not an object", R"({"a":3})", 0, "expected an object"},
      {"no dtype", R"({"a":{"shape":[1],"data_offsets":[0,4]}})", 4, "lacks \"dtype\""},
      {"no shape", R"({"a":{"dtype":"F32","data_offsets":[0,4]}})", 4, "lacks \"shape\""},
      {"no offsets", R"({"a":{"dtype":"F32","shape":[1]}})", 4, "lacks \"data_offsets\""},
      {"dtype a number", R"({"a":{"dtype":1,"shape":[1],"data_offsets":[0,4]}})", 4,
       "dtype must be a string"},
      {"shape a string", R"({"a":{"dtype":"F32","shape":"1","data_offsets":[0,4]}})", 4,
       "shape must be an array"},
      {"shape a float", R"({"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", 4,
       "non-negative integers"},
      {"negative dim", R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4,
       "non-negative integers"},
      {"huge dim", R"({"a":{"dtype":"F32","shape":[1e30],"data_offsets":[0,4]}})", 4,
       "non-negative integers"},
      {"overflowing shape", R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})",
       4, "too many elements"},
      {"bytes overflow", R"({"a":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,4]}})", 4,
       "too large"},
      {"three offsets", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}})", 8,
       "array of two integers"},
      {"offsets not array", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":4}})", 4,
       "array of two integers"},
      {"negative offset", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", 4, "non-negative"},
      {"string offset", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":["0",4]}})", 4, "non-negative"},
      {"size mismatch", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 8, "needs 8 bytes"},
      {"past the end", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4, "past the end"},
      {"out of order", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", 8, "out of order"},
      {"overlap",
       R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
       12, "overlap"},
      {"same range twice",
       R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
       4, "overlap"},
      {"duplicate name",
       R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
       8, "twice"},
      {"metadata not an object", R"({"__metadata__":[1]})", 0, "__metadata__ must be an object"},
      {"metadata value not a string", R"({"__metadata__":{"k":1}})", 0, "expected a string"},
  };
  for (const BadHeader& c : cases) {
    SCOPED_TRACE(c.what);
    EXPECT_HYMT_ERROR(ParseImage(Image(c.header, std::string(c.data_bytes, '\0')), "bad.safetensors"),
                      ErrorCode::kCorruptData, c.expect, "bad.safetensors");
  }
}

TEST(Safetensors, RejectsBadHeaderLengths) {
  EXPECT_HYMT_ERROR(ParseImage(std::string(5, '\0')), ErrorCode::kCorruptData, "8-byte header length");
  std::string absurd(16, '\0');
  absurd[7] = 0x40;  // 2^62
  EXPECT_HYMT_ERROR(ParseImage(absurd), ErrorCode::kCorruptData, "exceeds the limit");
  std::string past = Image("{}", "");
  past[0] = 100;
  EXPECT_HYMT_ERROR(ParseImage(past), ErrorCode::kCorruptData, "past the end of the file");
  EXPECT_EQ(ParseImage(Image("{}  ", ""))->tensors().size(), 0u);  // trailing spaces pad headers
}

// Cutting a real file anywhere must give an error (never a crash or a read past the end), and
// flipping any bit of its header must give an error or a consistent source.
TEST(Safetensors, TruncatedAndBitFlippedFilesNeverCrash) {
  const std::string image = ReadFile(FixtureDir("tiny-gqa1", "bf16") + "/model.safetensors");
  uint64_t header_len;
  std::memcpy(&header_len, image.data(), 8);
  for (size_t cut = 0; cut < image.size(); cut += (cut < header_len + 64 ? 1 : 997)) {
    std::string part = image.substr(0, cut);
    EXPECT_THROW(ParseImage(part), Error) << "cut at " << cut;
  }
  for (size_t byte = 0; byte < 8 + header_len; ++byte) {
    for (int bit = 0; bit < 8; bit += 3) {
      std::string flipped = image;
      flipped[byte] = static_cast<char>(flipped[byte] ^ (1 << bit));
      try {
        auto src = ParseImage(flipped);
        for (const TensorInfo& t : src->tensors()) {
          ASSERT_GE(t.data, reinterpret_cast<const uint8_t*>(flipped.data()));
          ASSERT_LE(t.data + t.bytes, reinterpret_cast<const uint8_t*>(flipped.data()) + flipped.size());
        }
      } catch (const Error&) {
      }
    }
  }
}

class SafetensorsFolder : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = test::TempDir(); }

  // Writes a shard holding 4-byte F32 tensors with the given names.
  void Shard(const std::string& file, const std::vector<std::string>& names) {
    std::string header = "{";
    for (size_t i = 0; i < names.size(); ++i) {
      if (i > 0) header += ",";
      header += "\"" + names[i] + "\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[" +
                std::to_string(4 * i) + "," + std::to_string(4 * i + 4) + "]}";
    }
    header += "}";
    WriteBytes(dir_ + "/" + file, Image(header, std::string(4 * names.size(), '\0')));
  }
  void Index(const std::string& json) { WriteBytes(dir_ + "/model.safetensors.index.json", json); }

  std::string dir_;
};

TEST_F(SafetensorsFolder, ReadsAGoodIndex) {
  Shard("s1.safetensors", {"a", "b"});
  Shard("s2.safetensors", {"c", "extra"});
  Index(
      R"({"metadata":{"total_size":16},"weight_map":{"a":"s1.safetensors","b":"s1.safetensors","c":"s2.safetensors"}})");
  auto src = SafetensorsSource::OpenFolder(dir_);
  EXPECT_EQ(src->tensors().size(), 4u);  // "extra" is kept although the index omits it
  EXPECT_EQ(src->Get("c").file, dir_ + "/s2.safetensors");
}

TEST_F(SafetensorsFolder, RejectsBadIndexes) {
  Shard("s1.safetensors", {"a", "b"});
  Shard("s2.safetensors", {"b", "c"});
  Shard("s3.safetensors", {"d"});
  Index(R"({"weight_map":{"a":"s1.safetensors","x":"missing.safetensors"}})");
  EXPECT_HYMT_ERROR(SafetensorsSource::OpenFolder(dir_), ErrorCode::kNotFound, "missing.safetensors");
  Index(R"({"weight_map":{"a":"s1.safetensors","z":"s1.safetensors"}})");
  EXPECT_HYMT_ERROR(SafetensorsSource::OpenFolder(dir_), ErrorCode::kCorruptData, "'z'", "s1.safetensors",
                    "no such tensor");
  Index(R"({"weight_map":{"a":"s1.safetensors","d":"s1.safetensors","q":"s3.safetensors"}})");
  EXPECT_HYMT_ERROR(SafetensorsSource::OpenFolder(dir_), ErrorCode::kCorruptData, "'d'", "s3.safetensors");
  Index(R"({"weight_map":{"a":"s1.safetensors","c":"s2.safetensors"}})");
  EXPECT_HYMT_ERROR(SafetensorsSource::OpenFolder(dir_), ErrorCode::kCorruptData, "'b'", "s1.safetensors",
                    "s2.safetensors");
  Index(R"({"weight_map":{"a":"../s1.safetensors"}})");
  EXPECT_HYMT_ERROR(SafetensorsSource::OpenFolder(dir_), ErrorCode::kCorruptData, "inside the folder");
  Index(R"({"weight_map":{"a":3}})");
  EXPECT_HYMT_ERROR(SafetensorsSource::OpenFolder(dir_), ErrorCode::kCorruptData, "expected a file name");
  Index(R"({"weight_map":[]})");
  EXPECT_HYMT_ERROR(SafetensorsSource::OpenFolder(dir_), ErrorCode::kCorruptData, "weight_map");
  Index(R"({"weight_map":)");
  EXPECT_HYMT_ERROR(SafetensorsSource::OpenFolder(dir_), ErrorCode::kCorruptData,
                    "model.safetensors.index.json", "invalid JSON");
}

TEST_F(SafetensorsFolder, ReportsAnEmptyFolderAndAMissingFile) {
  EXPECT_HYMT_ERROR(SafetensorsSource::OpenFolder(dir_), ErrorCode::kNotFound, "model.safetensors");
  EXPECT_HYMT_ERROR(SafetensorsSource::OpenFile(dir_ + "/nope.safetensors"), ErrorCode::kNotFound,
                    "nope.safetensors");
  Shard("model.safetensors", {"w"});
  EXPECT_EQ(SafetensorsSource::OpenFolder(dir_)->tensors().size(), 1u);
}

}  // namespace
}  // namespace hymt
