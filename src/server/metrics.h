// Counters for GET /metrics and a writer for the Prometheus text exposition format (version 0.0.4).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

namespace hymt {

// Requests by route and status code, with their total time. Thread-safe. Routes are the server's
// route names (never raw paths, so the number of series stays bounded).
class RequestCounters {
 public:
  void Record(const std::string& route, int status, double seconds);

  struct Entry {
    int64_t count = 0;
    double seconds = 0;
  };
  std::map<std::pair<std::string, int>, Entry> Snapshot() const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, Entry> counts_;
};

// Builds the exposition text: each metric family gets its HELP and TYPE lines once, before its first
// sample.
class PrometheusWriter {
 public:
  // type: "counter" or "gauge". labels: already formatted, e.g. {"route", "/translate"} pairs.
  void Sample(const std::string& name, const char* type, const std::string& help, double value,
              const std::map<std::string, std::string>& labels = {});
  const std::string& text() const { return out_; }

 private:
  std::string out_;
  std::map<std::string, bool> declared_;
};

}  // namespace hymt
