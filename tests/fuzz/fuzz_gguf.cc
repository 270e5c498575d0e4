// Fuzz target: GGUF parsing (GgufFile::Parse on an in-memory image) and, for a file that names an
// architecture, loading it as a model and running a few tokens through the reference ops: the
// loader's reading of hyper-parameters, tokenizer keys and tensors is as exposed as the parser.
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "core/status.h"
#include "formats/gguf.h"
#include "harness.h"
#include "ops/ops.h"
#include "runtime/loader.h"
#include "runtime/oneshot.h"

namespace hymt::fuzz {
namespace {

// Models larger than this are loaded but not run, to keep executions fast (the seeds are a few KB).
constexpr int64_t kMaxRunWeightBytes = int64_t{1} << 20;

// LoadModel takes paths only: the image goes to one temporary file per process.
class TempModelFile {
 public:
  TempModelFile()
      : path_((std::filesystem::temp_directory_path() / StrCat("hymt-fuzz-", ::getpid(), ".gguf")).string()) {
  }
  ~TempModelFile() { std::remove(path_.c_str()); }
  const std::string& Write(const uint8_t* data, size_t size) {
    std::FILE* f = std::fopen(path_.c_str(), "wb");
    HYMT_FUZZ_REQUIRE(f != nullptr, "cannot write ", path_);
    const size_t written = size == 0 ? 0 : std::fwrite(data, 1, size, f);
    std::fclose(f);
    HYMT_FUZZ_REQUIRE(written == size, "short write to ", path_);
    return path_;
  }

 private:
  std::string path_;
};

// Whatever weights a fuzzed file holds (NaN, inf, huge), the forward must not crash on them.
void LoadAndRun(const uint8_t* data, size_t size) {
  static TempModelFile file;
  static std::unique_ptr<Ops> ops = CreateReferenceOps();
  LoadedModel m = LoadModel(file.Write(data, size));
  HYMT_FUZZ_REQUIRE(m.tokenizer->n_tokens() <= m.config.vocab_rows);
  HYMT_FUZZ_REQUIRE(!m.stop_ids.empty());
  if (m.WeightBytes() > kMaxRunWeightBytes) return;
  const std::vector<int32_t> ids = {0, static_cast<int32_t>(m.config.vocab_rows - 1), 0};
  std::vector<float> logits = ForwardLogits(*m.model, *ops, ids);
  HYMT_FUZZ_REQUIRE(logits.size() == ids.size() * static_cast<size_t>(m.config.vocab_rows));
}

}  // namespace

void FuzzGguf(const uint8_t* data, size_t size) {
  std::unique_ptr<GgufFile> file;
  try {
    file = GgufFile::Parse(data, size, "fuzz.gguf");
  } catch (const Error&) {
    return;
  }
  CheckTensorsInside(*file, data, size);
  const GgufMetadata& md = file->metadata();
  for (const auto& [key, value] : md.entries()) {
    HYMT_FUZZ_REQUIRE(md.Find(key) == &value, "key '", key, "' is not found by its name");
    HYMT_FUZZ_REQUIRE(!value.ToString().empty());
  }
  if (!md.Has("general.architecture")) return;
  try {
    LoadAndRun(data, size);
  } catch (const Error&) {
  }
}

}  // namespace hymt::fuzz

HYMT_FUZZ_ENTRY(hymt::fuzz::FuzzGguf)
