#include "translate/segmenter.h"

namespace hymt {
namespace {

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\v'; }

class LineSegmenter : public Segmenter {
 public:
  std::vector<Segment> Split(std::string_view text, const Language&) const override {
    std::vector<Segment> out;
    auto keep = [&](std::string_view s, bool translate) {
      if (s.empty()) return;
      if (!out.empty() && !out.back().translate && !translate) {
        out.back().text.append(s);
      } else {
        out.push_back(Segment{std::string(s), translate});
      }
    };
    size_t pos = 0;
    while (pos < text.size()) {
      size_t nl = text.find('\n', pos);
      size_t end = nl == std::string_view::npos ? text.size() : nl;
      std::string_view line = text.substr(pos, end - pos);
      size_t a = 0, b = line.size();
      while (a < b && IsSpace(line[a])) ++a;
      while (b > a && IsSpace(line[b - 1])) --b;
      keep(line.substr(0, a), false);
      keep(line.substr(a, b - a), true);
      keep(line.substr(b), false);
      if (nl != std::string_view::npos) keep("\n", false);
      pos = end + (nl == std::string_view::npos ? 0 : 1);
    }
    return out;
  }
};

}  // namespace

std::unique_ptr<Segmenter> CreateLineSegmenter() { return std::make_unique<LineSegmenter>(); }

}  // namespace hymt
