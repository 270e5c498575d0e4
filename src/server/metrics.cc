#include "server/metrics.h"

#include <cmath>
#include <cstdio>

namespace hymt {
namespace {

// Label values escape backslash, double quote and newline (the exposition format's rule).
void AppendLabelValue(const std::string& v, std::string* out) {
  for (char c : v) {
    if (c == '\\' || c == '"') {
      out->push_back('\\');
      out->push_back(c);
    } else if (c == '\n') {
      out->append("\\n");
    } else {
      out->push_back(c);
    }
  }
}

}  // namespace

void RequestCounters::Record(const std::string& route, int status, double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  Entry& e = counts_[{route, status}];
  ++e.count;
  e.seconds += seconds;
}

std::map<std::pair<std::string, int>, RequestCounters::Entry> RequestCounters::Snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counts_;
}

void PrometheusWriter::Sample(const std::string& name, const char* type, const std::string& help,
                              double value, const std::map<std::string, std::string>& labels) {
  if (!declared_[name]) {
    declared_[name] = true;
    out_ += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  }
  out_ += name;
  if (!labels.empty()) {
    out_ += '{';
    bool first = true;
    for (const auto& [k, v] : labels) {
      if (!first) out_ += ',';
      first = false;
      out_ += k + "=\"";
      AppendLabelValue(v, &out_);
      out_ += '"';
    }
    out_ += '}';
  }
  char buf[64];
  if (std::floor(value) == value && std::fabs(value) < 1e15) {
    std::snprintf(buf, sizeof buf, " %.0f\n", value);
  } else {
    std::snprintf(buf, sizeof buf, " %.6g\n", value);
  }
  out_ += buf;
}

}  // namespace hymt
