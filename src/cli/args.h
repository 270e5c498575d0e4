// A small command-line parser shared by the subcommands: --name value, --name=value, boolean flags,
// repeated options and positional arguments, with a generated --help.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace hymt {

class Args {
 public:
  // usage: the first line of --help, e.g. "hymt translate [options] [TEXT...]".
  explicit Args(std::string usage);

  // Declares an option taking a value (repeatable when `repeated`), or a boolean flag.
  Args& Option(const std::string& name, const std::string& help, const std::string& default_value = "",
               bool repeated = false);
  Args& Flag(const std::string& name, const std::string& help);

  // Parses argv[first..]. Throws Error(kInvalidArgument) naming an unknown option or a missing value.
  // Returns false when --help was given (the help text was printed to stdout).
  bool Parse(int argc, char** argv, int first = 1);

  std::string Get(const std::string& name) const;        // value or default
  std::vector<std::string> GetAll(const std::string& name) const;
  bool Has(const std::string& name) const;               // given on the command line
  bool GetFlag(const std::string& name) const;
  int64_t GetInt(const std::string& name) const;         // throws on a non-integer
  double GetDouble(const std::string& name) const;
  uint64_t GetBytes(const std::string& name) const;      // "6G", "512M", ...
  const std::vector<std::string>& positional() const { return positional_; }
  // Whether a declared option takes a value (false for a flag); nullopt when `name` is not declared.
  std::optional<bool> TakesValue(const std::string& name) const;
  std::string Help() const;

 private:
  struct Spec {
    std::string help;
    std::string default_value;
    bool takes_value = true;
    bool repeated = false;
  };
  std::string usage_;
  std::vector<std::string> order_;
  std::map<std::string, Spec> specs_;
  std::map<std::string, std::vector<std::string>> values_;
  std::vector<std::string> positional_;
};

}  // namespace hymt
