// An optional on-disk translation cache: the same segment, asked of the same model the same way, is
// answered from disk instead of the model, across restarts. SQLite in WAL mode, one file.
//
// Contracts:
// - Thread-safe: the server calls it from its HTTP threads (one connection behind a mutex; SQLite's
//   busy timeout lets several processes share the file).
// - The cache never fails a translation: after a successful Open, an SQLite error in Get or Put is
//   logged and reads as a miss / is skipped. Corruption found then (SQLITE_CORRUPT) turns the cache off
//   for the rest of the process, with one error in the log that names the file.
// - Open refuses, with Error(kCorruptData), a file that is not a readable SQLite database, and with
//   Error(kInvalidArgument) an SQLite database that holds other tables than the cache's: it never
//   deletes or rewrites a file that is not its own. (A cache file of another schema version is its own
//   and is emptied, with a warning.)
// - Expired entries (older than ttl) are never returned, and are deleted by Prune, which Put runs
//   when a bound is exceeded or an hour has passed since the last sweep. Beyond a bound, the oldest
//   entries go first (by insertion time), down to 90% of the bound.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hymt {

struct TranslationCacheOptions {
  std::string path;                      // the database file; created when missing
  int64_t ttl_seconds = 30 * 24 * 3600;  // 0: entries never expire
  int64_t max_entries = 1'000'000;       // 0: no bound
  int64_t max_bytes = int64_t{1} << 30;  // keys plus translations; 0: no bound
  std::function<int64_t()> clock;        // seconds since the epoch; empty: the system clock
};

// What makes two translations the same; every field is compared exactly.
struct CacheKey {
  std::string model;    // the model's identity (name and a fingerprint of its files and weight format)
  std::string source;   // source language code, after detection
  std::string target;   // target language code
  std::string options;  // everything else that changes the output, from CacheOptions()
  std::string text;     // the segment as the model gets it
};

// Canonical CacheKey::options from name/value pairs (glossary, context, prompt style, sampling when not
// greedy, ...): the order of the pairs does not matter, and no two different sets give the same text.
std::string CacheOptions(std::vector<std::pair<std::string, std::string>> options);

struct CacheStats {
  int64_t entries = 0;  // in the file, as of the last count
  int64_t bytes = 0;
  int64_t hits = 0;  // since Open, in this process
  int64_t misses = 0;
  int64_t puts = 0;
  int64_t pruned = 0;     // entries deleted by Prune (expired or over a bound)
  bool disabled = false;  // turned off after finding the file corrupt
};

class TranslationCache {
 public:
  // Opens the cache, creating the file when missing. Throws Error as described above, and
  // Error(kInvalidArgument) for negative bounds or a path SQLite cannot open (missing directory, no
  // permission), naming the path.
  static std::unique_ptr<TranslationCache> Open(const TranslationCacheOptions& options);

  virtual ~TranslationCache() = default;

  // The cached translation, or nullopt (absent, expired, a hash collision, or an SQLite error).
  virtual std::optional<std::string> Get(const CacheKey& key) = 0;
  // Stores (or replaces) a translation.
  virtual void Put(const CacheKey& key, std::string_view translation) = 0;
  // Deletes expired entries, then the oldest ones beyond the bounds.
  virtual void Prune() = 0;
  virtual CacheStats Stats() const = 0;
};

}  // namespace hymt
