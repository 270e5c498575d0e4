#include "cli/args.h"

#include <cstdio>
#include <cstdlib>

#include "core/status.h"
#include "core/strings.h"

namespace hymt {

Args::Args(std::string usage) : usage_(std::move(usage)) {}

Args& Args::Option(const std::string& name, const std::string& help, const std::string& default_value,
                   bool repeated) {
  specs_[name] = Spec{help, default_value, true, repeated};
  order_.push_back(name);
  return *this;
}

Args& Args::Flag(const std::string& name, const std::string& help) {
  specs_[name] = Spec{help, "", false, false};
  order_.push_back(name);
  return *this;
}

bool Args::Parse(int argc, char** argv, int first) {
  bool options_done = false;
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i];
    // Single-letter options may be written "-o VALUE" as well as "--o VALUE".
    if (!options_done && a.size() == 2 && a[0] == '-' && specs_.count(a.substr(1))) a = "-" + a;
    if (options_done || a.size() < 3 || a.compare(0, 2, "--") != 0) {
      if (a == "--") {
        options_done = true;
        continue;
      }
      if (!options_done && a.size() >= 2 && a[0] == '-' && a != "-" && !(a[1] >= '0' && a[1] <= '9')) {
        if (a == "-h") {
          std::printf("%s", Help().c_str());
          return false;
        }
        Fail(ErrorCode::kInvalidArgument, "unknown option ", a, " (see --help)");
      }
      positional_.push_back(a);
      continue;
    }
    std::string name = a.substr(2), value;
    bool has_value = false;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    if (name == "help") {
      std::printf("%s", Help().c_str());
      return false;
    }
    auto it = specs_.find(name);
    if (it == specs_.end()) Fail(ErrorCode::kInvalidArgument, "unknown option --", name, " (see --help)");
    if (!it->second.takes_value) {
      if (has_value) Fail(ErrorCode::kInvalidArgument, "--", name, " takes no value");
      values_[name].push_back("1");
      continue;
    }
    if (!has_value) {
      if (i + 1 >= argc) Fail(ErrorCode::kInvalidArgument, "--", name, " needs a value");
      value = argv[++i];
    }
    auto& v = values_[name];
    if (!it->second.repeated) v.clear();
    v.push_back(value);
  }
  return true;
}

std::string Args::Get(const std::string& name) const {
  auto it = values_.find(name);
  if (it != values_.end() && !it->second.empty()) return it->second.back();
  auto s = specs_.find(name);
  HYMT_CHECK(s != specs_.end(), "undeclared option ", name);
  return s->second.default_value;
}

std::vector<std::string> Args::GetAll(const std::string& name) const {
  auto it = values_.find(name);
  return it == values_.end() ? std::vector<std::string>{} : it->second;
}

std::optional<bool> Args::TakesValue(const std::string& name) const {
  auto it = specs_.find(name);
  if (it == specs_.end()) return std::nullopt;
  return it->second.takes_value;
}

bool Args::Has(const std::string& name) const { return values_.count(name) > 0; }
bool Args::GetFlag(const std::string& name) const { return Has(name); }

int64_t Args::GetInt(const std::string& name) const {
  std::string v = Get(name);
  char* end = nullptr;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0') Fail(ErrorCode::kInvalidArgument, "--", name, " needs an integer, got '", v, "'");
  return x;
}

double Args::GetDouble(const std::string& name) const {
  std::string v = Get(name);
  char* end = nullptr;
  double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0') Fail(ErrorCode::kInvalidArgument, "--", name, " needs a number, got '", v, "'");
  return x;
}

uint64_t Args::GetBytes(const std::string& name) const {
  uint64_t b = 0;
  std::string v = Get(name);
  if (!ParseBytes(v, &b)) Fail(ErrorCode::kInvalidArgument, "--", name, " needs a size such as 6G or 512M, got '", v, "'");
  return b;
}

std::string Args::Help() const {
  std::string out = "usage: " + usage_ + "\n\noptions:\n";
  for (const std::string& name : order_) {
    const Spec& s = specs_.at(name);
    std::string left = "  --" + name + (s.takes_value ? " VALUE" : "");
    if (left.size() < 26) left.resize(26, ' ');
    out += left + " " + s.help;
    if (!s.default_value.empty()) out += " (default: " + s.default_value + ")";
    out += "\n";
  }
  out += "  --help                   show this help\n";
  return out;
}

}  // namespace hymt
