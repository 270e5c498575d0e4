// The translation cache over SQLite. One row per key: a 64-bit hash of the key is the rowid (one B-tree
// search per lookup) and the key itself is stored and compared, so a hash collision costs a miss,
// never a wrong translation.
#include "translate/cache.h"

#include <sqlite3.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <mutex>

#include "core/logging.h"
#include "core/status.h"

namespace hymt {
namespace {

constexpr int kSchemaVersion = 1;
constexpr int kBusyTimeoutMs = 5000;             // another process writing: wait this long, then skip
constexpr int64_t kSweepIntervalSeconds = 3600;  // how often Put deletes expired entries
constexpr double kPruneTarget = 0.9;             // over a bound, prune down to this fraction of it

constexpr const char* kCreateSql =
    "CREATE TABLE IF NOT EXISTS hymt_cache_meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);"
    "CREATE TABLE IF NOT EXISTS hymt_translations("
    "  hash INTEGER PRIMARY KEY,"   // 64-bit hash of the serialized key
    "  key BLOB NOT NULL,"          // the serialized key, compared on lookup
    "  translation BLOB NOT NULL,"  // bytes as given (BLOB: SQLite never touches the encoding)
    "  created INTEGER NOT NULL,"   // seconds since the epoch
    "  bytes INTEGER NOT NULL);"    // key + translation, for the size bound
    "CREATE INDEX IF NOT EXISTS hymt_translations_created ON hymt_translations(created);";

// Length-prefixed fields: no two different keys serialize alike.
std::string SerializeKey(const CacheKey& key) {
  std::string out = "hymt-cache-key-v1\n";
  for (const std::string* field : {&key.model, &key.source, &key.target, &key.options, &key.text}) {
    out += std::to_string(field->size());
    out += ':';
    out += *field;
    out += '\n';
  }
  return out;
}

// FNV-1a, then splitmix64's finalizer (FNV alone mixes its low bits poorly).
int64_t HashKey(std::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 31;
  return static_cast<int64_t>(h);
}

bool IsCorrupt(int rc) {
  int primary = rc & 0xFF;
  return primary == SQLITE_CORRUPT || primary == SQLITE_NOTADB;
}

// An error while opening: corruption, then what the user can fix, then ours.
[[noreturn]] void FailOpen(const std::string& path, int rc, const std::string& detail) {
  int primary = rc & 0xFF;
  if (IsCorrupt(rc))
    Fail(ErrorCode::kCorruptData, "translation cache ", path, " is not a valid SQLite database (", detail,
         "); delete it or choose another path");
  if (primary == SQLITE_CANTOPEN || primary == SQLITE_READONLY || primary == SQLITE_PERM ||
      primary == SQLITE_AUTH)
    Fail(ErrorCode::kInvalidArgument, "cannot open translation cache ", path, ": ", detail);
  Fail(ErrorCode::kInternal, "translation cache ", path, ": ", detail);
}

// A prepared statement. Use() starts a use and returns a guard that resets the statement when it goes
// out of scope: a statement left unreset would hold its read transaction open, pinning an old snapshot
// (stale reads, writes refused as busy) and keeping the WAL from being checkpointed.
class Statement {
 public:
  Statement(sqlite3* db, const char* sql) : db_(db) {
    rc_ = sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr);
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  struct Guard {
    sqlite3_stmt* stmt;
    ~Guard() { sqlite3_reset(stmt); }
  };

  int prepare_rc() const { return rc_; }
  [[nodiscard]] Guard Use() {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
    return Guard{stmt_};
  }
  void BindBlob(int i, std::string_view v) {
    sqlite3_bind_blob(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
  }
  void BindInt(int i, int64_t v) { sqlite3_bind_int64(stmt_, i, v); }
  int Step() { return sqlite3_step(stmt_); }
  int64_t Int(int col) const { return sqlite3_column_int64(stmt_, col); }
  std::string_view Blob(int col) const {
    const void* p = sqlite3_column_blob(stmt_, col);
    int n = sqlite3_column_bytes(stmt_, col);
    return p ? std::string_view(static_cast<const char*>(p), static_cast<size_t>(n)) : std::string_view();
  }
  std::string Error() const { return sqlite3_errmsg(db_); }

 private:
  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
  int rc_ = SQLITE_OK;
};

class SqliteCache : public TranslationCache {
 public:
  SqliteCache(sqlite3* db, const TranslationCacheOptions& options)
      : db_(db),
        options_(options),
        get_(db, "SELECT key, translation, created FROM hymt_translations WHERE hash=?1"),
        size_of_(db, "SELECT bytes FROM hymt_translations WHERE hash=?1"),
        put_(db,
             "INSERT OR REPLACE INTO hymt_translations(hash, key, translation, created, bytes) "
             "VALUES(?1, ?2, ?3, ?4, ?5)"),
        expire_(db, "DELETE FROM hymt_translations WHERE created <= ?1"),
        count_(db, "SELECT count(*), coalesce(sum(bytes), 0) FROM hymt_translations"),
        oldest_(db, "SELECT hash, bytes FROM hymt_translations ORDER BY created, hash"),
        delete_(db, "DELETE FROM hymt_translations WHERE hash=?1") {
    for (Statement* s : {&get_, &size_of_, &put_, &expire_, &count_, &oldest_, &delete_}) {
      if (s->prepare_rc() != SQLITE_OK) FailOpen(options_.path, s->prepare_rc(), s->Error());
    }
    std::lock_guard<std::mutex> lock(mu_);
    PruneLocked();
  }

  // close_v2 defers the close until the statements (members, destroyed after this body) are finalized.
  ~SqliteCache() override { sqlite3_close_v2(db_); }

  std::optional<std::string> Get(const CacheKey& key) override {
    // Serialized and hashed outside the lock: only SQLite work is serialized.
    std::string serialized = SerializeKey(key);
    std::lock_guard<std::mutex> lock(mu_);
    if (stats_.disabled) return std::nullopt;
    auto in_use = get_.Use();
    get_.BindInt(1, HashKey(serialized));
    int rc = get_.Step();
    std::optional<std::string> found;
    if (rc == SQLITE_ROW) {
      // Expired rows wait for Prune; a different key under the same hash is a collision.
      bool fresh = options_.ttl_seconds == 0 || get_.Int(2) > Now() - options_.ttl_seconds;
      if (fresh && get_.Blob(0) == serialized) found = std::string(get_.Blob(1));
    } else if (rc != SQLITE_DONE) {
      Report(rc, "lookup");
    }
    ++(found ? stats_.hits : stats_.misses);
    return found;
  }

  void Put(const CacheKey& key, std::string_view translation) override {
    std::string serialized = SerializeKey(key);
    int64_t hash = HashKey(serialized);
    int64_t bytes = static_cast<int64_t>(serialized.size() + translation.size());
    std::lock_guard<std::mutex> lock(mu_);
    if (stats_.disabled) return;
    // What the row replaces, if anything, to keep the counts right.
    int64_t replaced = -1;
    {
      auto in_use = size_of_.Use();
      size_of_.BindInt(1, hash);
      int rc = size_of_.Step();
      if (rc == SQLITE_ROW) replaced = size_of_.Int(0);
      if (rc != SQLITE_ROW && rc != SQLITE_DONE) return Report(rc, "lookup before insert");
    }
    auto in_use = put_.Use();
    put_.BindInt(1, hash);
    put_.BindBlob(2, serialized);
    put_.BindBlob(3, translation);
    put_.BindInt(4, Now());
    put_.BindInt(5, bytes);
    int rc = put_.Step();
    if (rc != SQLITE_DONE) return Report(rc, "insert");
    ++stats_.puts;
    if (replaced >= 0) {
      stats_.bytes += bytes - replaced;
    } else {
      ++stats_.entries;
      stats_.bytes += bytes;
    }
    // Pruning to 90% of a bound, not to the bound, keeps it from running on every Put.
    bool over = (options_.max_entries > 0 && stats_.entries > options_.max_entries) ||
                (options_.max_bytes > 0 && stats_.bytes > options_.max_bytes);
    if (over || Now() - last_sweep_ >= kSweepIntervalSeconds) PruneLocked();
  }

  void Prune() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stats_.disabled) PruneLocked();
  }

  CacheStats Stats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

 private:
  int64_t Now() const {
    if (options_.clock) return options_.clock();
    return std::chrono::duration_cast<std::chrono::seconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }

  // Logs an SQLite error; corruption turns the cache off (once, loudly).
  void Report(int rc, const char* what) {
    if (IsCorrupt(rc)) {
      if (!stats_.disabled)
        HYMT_LOG_ERROR("translation cache ", options_.path, " is corrupt (", sqlite3_errmsg(db_), " during ",
                       what, "); caching is off until restart; delete the file to start afresh");
      stats_.disabled = true;
      return;
    }
    HYMT_LOG_WARN("translation cache ", options_.path, ": ", what, " failed: ", sqlite3_errmsg(db_));
  }

  bool Exec(const char* sql, const char* what) {
    int rc = sqlite3_exec(db_, sql, nullptr, nullptr, nullptr);
    if (rc != SQLITE_OK) Report(rc, what);
    return rc == SQLITE_OK;
  }

  void PruneLocked() {
    int64_t now = Now();
    last_sweep_ = now;
    if (options_.ttl_seconds > 0) {
      auto in_use = expire_.Use();
      expire_.BindInt(1, now - options_.ttl_seconds);
      int rc = expire_.Step();
      if (rc != SQLITE_DONE) return Report(rc, "expiry");
      stats_.pruned += sqlite3_changes(db_);
    }
    // Recount: other processes may share the file.
    {
      auto in_use = count_.Use();
      int rc = count_.Step();
      if (rc != SQLITE_ROW) return Report(rc, "count");
      stats_.entries = count_.Int(0);
      stats_.bytes = count_.Int(1);
    }
    int64_t target_entries =
        options_.max_entries > 0 ? static_cast<int64_t>(options_.max_entries * kPruneTarget) : stats_.entries;
    int64_t target_bytes =
        options_.max_bytes > 0 ? static_cast<int64_t>(options_.max_bytes * kPruneTarget) : stats_.bytes;
    bool over = (options_.max_entries > 0 && stats_.entries > options_.max_entries) ||
                (options_.max_bytes > 0 && stats_.bytes > options_.max_bytes);
    if (!over) return;
    // Oldest first, until both counts are down to their targets.
    std::vector<int64_t> doomed;
    int64_t entries = stats_.entries, bytes = stats_.bytes;
    {
      auto in_use = oldest_.Use();
      int rc = SQLITE_ROW;
      while ((entries > target_entries || bytes > target_bytes) && (rc = oldest_.Step()) == SQLITE_ROW) {
        doomed.push_back(oldest_.Int(0));
        --entries;
        bytes -= oldest_.Int(1);
      }
      if (rc != SQLITE_ROW && rc != SQLITE_DONE) return Report(rc, "listing the oldest entries");
    }
    // One transaction: one fsync for the whole batch, and other processes never see half of it.
    if (!Exec("BEGIN IMMEDIATE", "pruning")) return;
    for (int64_t hash : doomed) {
      auto in_use = delete_.Use();
      delete_.BindInt(1, hash);
      int rc = delete_.Step();
      if (rc != SQLITE_DONE) {
        Report(rc, "pruning");
        Exec("ROLLBACK", "pruning");
        return;
      }
    }
    if (!Exec("COMMIT", "pruning")) return;
    stats_.pruned += static_cast<int64_t>(doomed.size());
    stats_.entries = entries;
    stats_.bytes = bytes;
  }

  sqlite3* db_;
  TranslationCacheOptions options_;
  mutable std::mutex mu_;
  CacheStats stats_;
  int64_t last_sweep_ = 0;
  Statement get_, size_of_, put_, expire_, count_, oldest_, delete_;
};

// Runs `sql` during Open, failing with the open error policy.
void OpenExec(sqlite3* db, const std::string& path, const char* sql) {
  char* message = nullptr;
  int rc = sqlite3_exec(db, sql, nullptr, nullptr, &message);
  std::string detail = message ? message : sqlite3_errstr(rc);
  sqlite3_free(message);
  if (rc != SQLITE_OK) FailOpen(path, rc, detail);
}

// The names of the tables in the file; the first read, so it is where a file that is not a database
// shows.
std::vector<std::string> Tables(sqlite3* db, const std::string& path) {
  Statement list(db, "SELECT name FROM sqlite_master WHERE type='table'");
  if (list.prepare_rc() != SQLITE_OK) FailOpen(path, list.prepare_rc(), list.Error());
  std::vector<std::string> names;
  auto in_use = list.Use();
  int rc;
  while ((rc = list.Step()) == SQLITE_ROW) names.emplace_back(list.Blob(0));
  if (rc != SQLITE_DONE) FailOpen(path, rc, list.Error());
  return names;
}

int SchemaVersion(sqlite3* db, const std::string& path) {
  Statement read(db, "SELECT value FROM hymt_cache_meta WHERE key='schema'");
  if (read.prepare_rc() != SQLITE_OK) FailOpen(path, read.prepare_rc(), read.Error());
  auto in_use = read.Use();
  int rc = read.Step();
  if (rc == SQLITE_ROW) return std::atoi(std::string(read.Blob(0)).c_str());
  if (rc != SQLITE_DONE) FailOpen(path, rc, read.Error());
  return 0;
}

}  // namespace

std::string CacheOptions(std::vector<std::pair<std::string, std::string>> options) {
  std::sort(options.begin(), options.end());
  std::string out;
  for (const auto& [name, value] : options) {
    out += std::to_string(name.size()) + ":" + name + "=" + std::to_string(value.size()) + ":" + value + ";";
  }
  return out;
}

std::unique_ptr<TranslationCache> TranslationCache::Open(const TranslationCacheOptions& options) {
  if (options.path.empty()) Fail(ErrorCode::kInvalidArgument, "translation cache: no path given");
  if (options.ttl_seconds < 0 || options.max_entries < 0 || options.max_bytes < 0)
    Fail(ErrorCode::kInvalidArgument, "translation cache ", options.path,
         ": ttl, max entries and max bytes must be >= 0 (0: none), got ", options.ttl_seconds, ", ",
         options.max_entries, ", ", options.max_bytes);
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(options.path.c_str(), &db,
                           SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    std::string detail = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    sqlite3_close_v2(db);
    FailOpen(options.path, rc, detail);
  }
  try {
    sqlite3_extended_result_codes(db, 1);
    sqlite3_busy_timeout(db, kBusyTimeoutMs);
    // The first read: a file that is not a database fails here. A database with other tables is not
    // ours to write into.
    std::vector<std::string> tables = Tables(db, options.path);
    bool ours = std::find(tables.begin(), tables.end(), "hymt_cache_meta") != tables.end();
    if (!tables.empty() && !ours)
      Fail(ErrorCode::kInvalidArgument, "translation cache ", options.path,
           " is an SQLite database of something else (tables: ", StrJoin(tables, ", "),
           "); give the cache a file of its own");
    // WAL: readers do not block the writer. A cache may lose its last writes in a power cut: NORMAL.
    {
      Statement wal(db, "PRAGMA journal_mode=WAL");
      auto in_use = wal.Use();
      rc = wal.Step();
      if (rc != SQLITE_ROW) FailOpen(options.path, rc, wal.Error());
      if (wal.Blob(0) != "wal")
        HYMT_LOG_WARN("translation cache ", options.path, ": WAL mode unavailable (journal mode ",
                      std::string(wal.Blob(0)), "); continuing without it");
    }
    OpenExec(db, options.path, "PRAGMA synchronous=NORMAL");
    if (ours) {
      int version = SchemaVersion(db, options.path);
      if (version != kSchemaVersion) {
        HYMT_LOG_WARN("translation cache ", options.path, " has schema version ", version,
                      ", this build uses ", kSchemaVersion, ": emptying it");
        OpenExec(db, options.path,
                 "DROP TABLE IF EXISTS hymt_translations; DROP TABLE IF EXISTS hymt_cache_meta;");
      }
    }
    OpenExec(db, options.path, kCreateSql);
    std::string set_version = "INSERT OR REPLACE INTO hymt_cache_meta(key, value) VALUES('schema', '" +
                              std::to_string(kSchemaVersion) + "')";
    OpenExec(db, options.path, set_version.c_str());
    auto cache = std::make_unique<SqliteCache>(db, options);
    db = nullptr;  // the cache owns the connection now
    if (cache->Stats().disabled)
      Fail(ErrorCode::kCorruptData, "translation cache ", options.path,
           " is corrupt (found while counting its entries); delete it or choose another path");
    return cache;
  } catch (...) {
    if (db) sqlite3_close_v2(db);
    throw;
  }
}

}  // namespace hymt
