// Stand-ins until the text-processing work (branch textproc: ICU sentence segmenter, CLD2 language
// detector, `hymt detect`) reaches main; this file is deleted by the merge that brings it. Until then
// sentences are split at line breaks only and "auto" is refused (no detector).
#include <cstdio>

#include "cli/commands.h"
#include "translate/segmenter.h"

namespace hymt {

std::unique_ptr<Segmenter> CreateSentenceSegmenter() {
  return CreateLineSegmenter();
}

std::unique_ptr<LanguageDetector> CreateLanguageDetector() {
  return nullptr;
}

int RunDetect(int argc, char** argv) {
  std::fprintf(stderr, "hymt detect: language detection is not built into this version\n");
  return 2;
}

}  // namespace hymt
