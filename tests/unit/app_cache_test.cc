// The SQLite translation cache: hits and misses per key field, restarts, expiry, size bounds, threads,
// and files that are not (or no longer) a cache.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "core/status.h"
#include "test_util.h"
#include "translate/cache.h"

namespace hymt {
namespace {

CacheKey Key(std::string text, std::string target = "zh") {
  return CacheKey{"hy-mt-7b:q8_0:abc123", "en", std::move(target), CacheOptions({}), std::move(text)};
}

// A clock the test moves by hand.
struct FakeClock {
  std::shared_ptr<std::atomic<int64_t>> now = std::make_shared<std::atomic<int64_t>>(1'700'000'000);
  std::function<int64_t()> fn() const {
    auto n = now;
    return [n] { return n->load(); };
  }
};

TranslationCacheOptions Options(const std::string& dir, const FakeClock& clock) {
  TranslationCacheOptions o;
  o.path = dir + "/cache.sqlite";
  o.clock = clock.fn();
  return o;
}

TEST(TranslationCache, HitsMissesAndEveryKeyField) {
  FakeClock clock;
  auto cache = TranslationCache::Open(Options(test::TempDir(), clock));
  EXPECT_FALSE(cache->Get(Key("Hello")));
  cache->Put(Key("Hello"), "你好");
  EXPECT_EQ(cache->Get(Key("Hello")).value_or(""), "你好");
  // Any field that differs is another entry.
  CacheKey k = Key("Hello");
  for (std::string CacheKey::*field :
       {&CacheKey::model, &CacheKey::source, &CacheKey::target, &CacheKey::options, &CacheKey::text}) {
    CacheKey other = k;
    other.*field += "x";
    EXPECT_FALSE(cache->Get(other));
  }
  // Field boundaries matter: ("ab", "c") is not ("a", "bc").
  CacheKey shifted = k;
  shifted.model.pop_back();
  shifted.source = k.model.substr(k.model.size() - 1) + k.source;
  EXPECT_FALSE(cache->Get(shifted));
  // Replacing keeps one entry.
  cache->Put(Key("Hello"), "您好");
  EXPECT_EQ(cache->Get(Key("Hello")).value_or(""), "您好");
  EXPECT_EQ(cache->Stats().entries, 1);
  // Bytes go in and out untouched, invalid UTF-8 and NULs included.
  std::string odd("a\0b\xff\xfe", 5);
  cache->Put(Key(odd), odd);
  EXPECT_EQ(cache->Get(Key(odd)).value_or(""), odd);
  CacheStats stats = cache->Stats();
  EXPECT_EQ(stats.entries, 2);
  EXPECT_EQ(stats.puts, 3);
  EXPECT_GE(stats.hits, 3);
  EXPECT_GE(stats.misses, 7);
}

TEST(TranslationCache, OptionsAreCanonical) {
  EXPECT_EQ(CacheOptions({{"glossary", "a=b"}, {"style", "hy-mt"}}),
            CacheOptions({{"style", "hy-mt"}, {"glossary", "a=b"}}));
  EXPECT_NE(CacheOptions({{"a", "b;c=d"}}), CacheOptions({{"a", "b"}, {"c", "d"}}));
  EXPECT_NE(CacheOptions({}), CacheOptions({{"temperature", "0.7"}}));
}

TEST(TranslationCache, SurvivesRestartInWalMode) {
  FakeClock clock;
  std::string dir = test::TempDir();
  {
    auto cache = TranslationCache::Open(Options(dir, clock));
    cache->Put(Key("Good morning"), "早上好");
  }
  auto cache = TranslationCache::Open(Options(dir, clock));
  EXPECT_EQ(cache->Get(Key("Good morning")).value_or(""), "早上好");
  EXPECT_EQ(cache->Stats().entries, 1);
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((dir + "/cache.sqlite").c_str(), &db), SQLITE_OK);
  sqlite3_stmt* stmt = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &stmt, nullptr), SQLITE_OK);
  ASSERT_EQ(sqlite3_step(stmt), SQLITE_ROW);
  EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0)), "wal");
  sqlite3_finalize(stmt);
  sqlite3_close(db);
}

// Two connections on one file (as two server processes would have): each sees the other's writes.
TEST(TranslationCache, TwoConnectionsShareTheFile) {
  FakeClock clock;
  std::string dir = test::TempDir();
  auto a = TranslationCache::Open(Options(dir, clock));
  auto b = TranslationCache::Open(Options(dir, clock));
  std::thread writer([&] {
    for (int i = 0; i < 200; ++i) a->Put(Key("a" + std::to_string(i)), "A");
  });
  for (int i = 0; i < 200; ++i) b->Put(Key("b" + std::to_string(i)), "B");
  writer.join();
  EXPECT_EQ(b->Get(Key("a199")).value_or(""), "A");
  EXPECT_EQ(a->Get(Key("b199")).value_or(""), "B");
  EXPECT_EQ(a->Stats().puts + b->Stats().puts, 400);
}

TEST(TranslationCache, ExpiredEntriesAreIgnoredAndPruned) {
  FakeClock clock;
  TranslationCacheOptions options = Options(test::TempDir(), clock);
  options.ttl_seconds = 100;
  auto cache = TranslationCache::Open(options);
  cache->Put(Key("old"), "旧");
  *clock.now += 60;
  cache->Put(Key("new"), "新");
  *clock.now += 50;  // "old" is 110 s old, "new" 50 s
  EXPECT_FALSE(cache->Get(Key("old")));
  EXPECT_EQ(cache->Get(Key("new")).value_or(""), "新");
  EXPECT_EQ(cache->Stats().entries, 2);  // ignored, not yet deleted
  cache->Prune();
  EXPECT_EQ(cache->Stats().entries, 1);
  EXPECT_EQ(cache->Stats().pruned, 1);
  // ttl 0: nothing expires.
  options.ttl_seconds = 0;
  auto forever = TranslationCache::Open(options);
  *clock.now += 1'000'000;
  EXPECT_EQ(forever->Get(Key("new")).value_or(""), "新");
}

TEST(TranslationCache, EntryBoundDropsTheOldest) {
  FakeClock clock;
  TranslationCacheOptions options = Options(test::TempDir(), clock);
  options.max_entries = 100;
  auto cache = TranslationCache::Open(options);
  for (int i = 0; i < 250; ++i) {
    *clock.now += 1;
    cache->Put(Key("text " + std::to_string(i)), "译文 " + std::to_string(i));
    ASSERT_LE(cache->Stats().entries, 100);
  }
  EXPECT_TRUE(cache->Get(Key("text 249")));
  EXPECT_TRUE(cache->Get(Key("text 200")));
  EXPECT_FALSE(cache->Get(Key("text 0")));
  EXPECT_FALSE(cache->Get(Key("text 140")));
  EXPECT_GE(cache->Stats().pruned, 150);
}

TEST(TranslationCache, ByteBoundDropsTheOldest) {
  FakeClock clock;
  TranslationCacheOptions options = Options(test::TempDir(), clock);
  options.max_bytes = 20'000;
  auto cache = TranslationCache::Open(options);
  const std::string translation(900, 'x');
  for (int i = 0; i < 100; ++i) {
    *clock.now += 1;
    cache->Put(Key("t" + std::to_string(i)), translation);
    ASSERT_LE(cache->Stats().bytes, 20'000);
  }
  EXPECT_TRUE(cache->Get(Key("t99")));
  EXPECT_FALSE(cache->Get(Key("t0")));
  // A single entry over the bound does not stay.
  cache->Put(Key("huge"), std::string(30'000, 'y'));
  EXPECT_FALSE(cache->Get(Key("huge")));
  EXPECT_LE(cache->Stats().bytes, 20'000);
}

TEST(TranslationCache, ThreadSafe) {
  FakeClock clock;
  TranslationCacheOptions options = Options(test::TempDir(), clock);
  options.max_entries = 500;  // pruning runs while other threads read
  auto cache = TranslationCache::Open(options);
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 300; ++i) {
        std::string text = "thread " + std::to_string(t) + " item " + std::to_string(i);
        cache->Put(Key(text), "T:" + text);
        auto got = cache->Get(Key(text));
        if (got && *got != "T:" + text) ++wrong;
        auto other = cache->Get(Key("thread " + std::to_string((t + 1) % 8) + " item " + std::to_string(i)));
        if (other && other->rfind("T:thread", 0) != 0) ++wrong;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_LE(cache->Stats().entries, 500);
  EXPECT_EQ(cache->Stats().puts, 2400);
}

TEST(TranslationCache, RefusesFilesThatAreNotItsOwn) {
  FakeClock clock;
  std::string dir = test::TempDir();
  // Not a database at all.
  std::string garbage = dir + "/garbage.sqlite";
  {
    std::ofstream out(garbage, std::ios::binary);
    for (int i = 0; i < 5000; ++i) out << "this is not an sqlite database ";
  }
  TranslationCacheOptions options = Options(dir, clock);
  options.path = garbage;
  try {
    TranslationCache::Open(options);
    FAIL() << "opened a garbage file";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kCorruptData);
    EXPECT_NE(std::string(e.what()).find(garbage), std::string::npos) << e.what();
  }
  EXPECT_EQ(std::filesystem::file_size(garbage), 5000u * 31);  // left as it was
  // Somebody else's database.
  std::string foreign = dir + "/foreign.sqlite";
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(foreign.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "CREATE TABLE users(name TEXT); INSERT INTO users VALUES('ann');", nullptr,
                         nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  options.path = foreign;
  try {
    TranslationCache::Open(options);
    FAIL() << "opened a foreign database";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("users"), std::string::npos) << e.what();
  }
  // A path that cannot be created, and bad bounds.
  options.path = dir + "/no/such/dir/cache.sqlite";
  EXPECT_THROW(TranslationCache::Open(options), Error);
  options.path = dir + "/ok.sqlite";
  options.ttl_seconds = -1;
  EXPECT_THROW(TranslationCache::Open(options), Error);
}

TEST(TranslationCache, OlderSchemaIsEmptied) {
  FakeClock clock;
  std::string dir = test::TempDir();
  {
    auto cache = TranslationCache::Open(Options(dir, clock));
    cache->Put(Key("x"), "y");
  }
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((dir + "/cache.sqlite").c_str(), &db), SQLITE_OK);
  ASSERT_EQ(
      sqlite3_exec(db, "UPDATE hymt_cache_meta SET value='0' WHERE key='schema'", nullptr, nullptr, nullptr),
      SQLITE_OK);
  sqlite3_close(db);
  auto cache = TranslationCache::Open(Options(dir, clock));
  EXPECT_FALSE(cache->Get(Key("x")));
  EXPECT_EQ(cache->Stats().entries, 0);
}

// Pages overwritten behind the cache's back are found at Open, which reads every page of the table
// (counting entries and bytes) and of the index (sweeping expired entries): it refuses the file.
TEST(TranslationCache, CorruptPagesAreRefusedAtOpen) {
  FakeClock clock;
  std::string dir = test::TempDir();
  std::string path = dir + "/cache.sqlite";
  {
    auto cache = TranslationCache::Open(Options(dir, clock));
    for (int i = 0; i < 2000; ++i) cache->Put(Key("entry " + std::to_string(i)), std::string(200, 'z'));
  }
  {
    // Fold the WAL into the main file, then overwrite pages in the middle of it.
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    sqlite3_exec(db, "PRAGMA wal_checkpoint(TRUNCATE); PRAGMA journal_mode=DELETE;", nullptr, nullptr,
                 nullptr);
    sqlite3_close(db);
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(8192);
    for (int i = 0; i < 64 * 1024; ++i) f.put(static_cast<char>(i * 131 % 251));
  }
  try {
    TranslationCache::Open(Options(dir, clock));
    FAIL() << "opened a corrupt cache";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kCorruptData) << e.what();
  }
}

// An SQLite error after Open (here: the table dropped by another program) reads as a miss.
TEST(TranslationCache, ErrorsAfterOpenReadAsMisses) {
  FakeClock clock;
  std::string dir = test::TempDir();
  auto cache = TranslationCache::Open(Options(dir, clock));
  cache->Put(Key("a"), "b");
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((dir + "/cache.sqlite").c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "DROP TABLE hymt_translations", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  EXPECT_FALSE(cache->Get(Key("a")));
  cache->Put(Key("c"), "d");
  cache->Prune();
  EXPECT_FALSE(cache->Get(Key("c")));
  EXPECT_FALSE(cache->Stats().disabled);
}

}  // namespace
}  // namespace hymt
