// Shared by the tokenizer tests: the official vocabulary, FLORES lines and the golden file. Header-only
// because tests/CMakeLists.txt compiles only *_test.cc files.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "core/json.h"
#include "core/mapped_file.h"
#include "core/strings.h"
#include "core/utf8.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace hymt::test {

inline std::string Fnv1a64Hex(const std::vector<uint32_t>& values) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (uint32_t v : values) {
    for (int k = 0; k < 4; ++k) {
      h ^= (v >> (8 * k)) & 0xff;
      h *= 0x100000001b3ull;
    }
  }
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

inline std::string IdsHash(const std::vector<int32_t>& ids) {
  return Fnv1a64Hex(std::vector<uint32_t>(ids.begin(), ids.end()));
}

inline std::vector<std::string> ReadLines(const std::string& path) {
  std::string data = ReadFile(path);
  std::vector<std::string> lines;
  size_t pos = 0;
  while (pos <= data.size()) {
    size_t end = data.find('\n', pos);
    if (end == std::string::npos) end = data.size();
    lines.push_back(data.substr(pos, end - pos));
    pos = end + 1;
  }
  if (!lines.empty() && lines.back().empty()) lines.pop_back();
  return lines;
}

inline const std::map<std::string, std::vector<std::string>>& FloresLines() {
  static const auto* lines = [] {
    auto* out = new std::map<std::string, std::vector<std::string>>;
    std::string dir = SharedDataDir() + "/flores200-devtest";
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
      std::string name = entry.path().filename().string();
      if (name.size() > 4 && name.substr(name.size() - 4) == ".txt")
        (*out)[name.substr(0, name.size() - 4)] = ReadLines(entry.path().string());
    }
    return out;
  }();
  return *lines;
}

inline const Json& FloresGoldens() {
  static const Json* goldens =
      new Json(Json::Parse(ReadFile(TestDataDir() + "/tokenizer/flores_goldens.json")));
  return *goldens;
}

inline const Tokenizer& OfficialTokenizer() {
  static const Tokenizer* tokenizer =
      new Tokenizer(Tokenizer::FromTiktokenFile(SharedDataDir() + "/hunyuan/hy.tiktoken"));
  return *tokenizer;
}

// GPT-2's bytes_to_unicode: the byte-level spelling of raw bytes.
inline std::string ByteLevelSpelling(const std::string& bytes) {
  static const std::vector<std::string> table = [] {
    std::vector<std::string> t(256);
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
      AppendUtf8(static_cast<char32_t>(printable ? b : next++), &t[b]);
    }
    return t;
  }();
  std::string out;
  for (unsigned char c : bytes) out += table[c];
  return out;
}

inline void WriteTokenizerJsonFromRanks(const Tokenizer& tiktoken, const std::string& path) {
  const int32_t n_ranks = *tiktoken.TokenId("<|endoftext|>");
  std::unordered_map<std::string, int32_t> rank_of;
  for (int32_t r = 0; r < n_ranks; ++r) rank_of[tiktoken.TokenBytes(r)] = r;
  std::vector<std::tuple<int32_t, int32_t, int32_t>> merges;  // (rank of result, left rank, right rank)
  for (int32_t r = 0; r < n_ranks; ++r) {
    const std::string& t = tiktoken.TokenBytes(r);
    for (size_t k = 1; k < t.size(); ++k) {
      auto left = rank_of.find(t.substr(0, k)), right = rank_of.find(t.substr(k));
      if (left != rank_of.end() && right != rank_of.end())
        merges.emplace_back(r, left->second, right->second);
    }
  }
  std::sort(merges.begin(), merges.end());
  std::string json = "{\"version\":\"1.0\",\"added_tokens\":[";
  for (int32_t id = n_ranks; id < tiktoken.n_tokens(); ++id) {
    json += StrCat(id > n_ranks ? "," : "", "{\"id\":", id, ",\"content\":");
    AppendJsonString(tiktoken.TokenBytes(id), &json);
    json += ",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":true}";
  }
  json +=
      "],\"normalizer\":null,\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":"
      "\"Split\",";
  json += "\"pattern\":{\"Regex\":";
  AppendJsonString(kHunyuanSplitRegex, &json);
  json += "},\"behavior\":\"Isolated\",\"invert\":false},{\"type\":\"ByteLevel\",\"add_prefix_space\":false,";
  json +=
      "\"trim_offsets\":false,\"use_regex\":false}]},\"post_processor\":null,\"decoder\":{\"type\":"
      "\"ByteLevel\"},";
  json +=
      "\"model\":{\"type\":\"BPE\",\"dropout\":null,\"unk_token\":null,\"ignore_merges\":false,\"vocab\":{";
  for (int32_t r = 0; r < n_ranks; ++r) {
    if (r > 0) json += ",";
    AppendJsonString(ByteLevelSpelling(tiktoken.TokenBytes(r)), &json);
    json += StrCat(":", r);
  }
  json += "},\"merges\":[";
  for (size_t i = 0; i < merges.size(); ++i) {
    json += i > 0 ? ",[" : "[";
    AppendJsonString(ByteLevelSpelling(tiktoken.TokenBytes(std::get<1>(merges[i]))), &json);
    json += ",";
    AppendJsonString(ByteLevelSpelling(tiktoken.TokenBytes(std::get<2>(merges[i]))), &json);
    json += "]";
  }
  json += "]}}";
  std::ofstream(path, std::ios::binary) << json;
}

}  // namespace hymt::test
