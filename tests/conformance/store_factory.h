// The backends every conformance test runs against. Each factory returns a fresh,
// empty store; `dir` is a scratch directory that lives as long as the test.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "idem/cache.h"
#include "idem/idem.h"
#include "store/mysql/mysql_test_db.h"

namespace idem::testing {

struct Backend {
  std::string name;  // a GoogleTest-friendly name
  // Returns the URL of a fresh store whose files live under `dir`.
  std::function<std::string(const std::string& dir)> url;
  // URL parameters that make bulk tests fast on this backend ("" for none).
  std::string fast_params;
  // Wraps the opened store (a decorator such as the cache tier); null: none.
  std::function<absl::StatusOr<std::unique_ptr<Store>>(std::unique_ptr<Store>)> wrap;
};

// Opens `url` (made by backend.url) and applies backend.wrap, if any.
inline absl::StatusOr<std::unique_ptr<Store>> OpenBackendStore(const Backend& backend,
                                                               const std::string& url) {
  absl::StatusOr<std::unique_ptr<Store>> store = OpenStore(url);
  if (!store.ok() || !backend.wrap) return store;
  return backend.wrap(*std::move(store));
}

// The cache decorator (SPEC §6) with an in-process L1 only: it must change no
// outcome of the suite. The Redis tier is covered by tests/integration/cache_test.
inline absl::StatusOr<std::unique_ptr<Store>> WrapWithCache(std::unique_ptr<Store> store) {
  return NewCachingStore(std::move(store), CacheOptions{});
}

// Test names show the backend, not the struct's bytes.
inline void PrintTo(const Backend& backend, std::ostream* os) { *os << backend.name; }

// `url` with `params` ("a=1&b=2") appended.
inline std::string WithParams(const std::string& url, const std::string& params) {
  if (params.empty()) return url;
  return url + (url.find('?') == std::string::npos ? "?" : "&") + params;
}

// PostgreSQL from IDEM_TEST_POSTGRES_URL (scripts/services.sh start DIR; source
// DIR/env.sh). Every test directory gets a schema of its own on the shared test
// database, selected with libpq's options=-csearch_path, so each test starts empty.
// The schema's name is kept in the directory: every store a test opens (also in a
// forked child) lands in the same schema. Schemas are not dropped; the test server
// is thrown away by scripts/services.sh.
inline std::string PostgresUrl(const std::string& dir) {
  const char* base = std::getenv("IDEM_TEST_POSTGRES_URL");
  if (base == nullptr || *base == '\0') {
    ADD_FAILURE() << "IDEM_TEST_POSTGRES_URL is not set: run `scripts/services.sh start "
                     "build/services` and `source build/services/env.sh` first";
    return "postgres://IDEM_TEST_POSTGRES_URL-is-not-set.invalid:1/none?connect_timeout=1";
  }
  const std::string marker = dir + "/postgres_schema";
  std::string schema;
  {
    std::ifstream in(marker);
    std::getline(in, schema);
  }
  if (schema.empty()) {
    std::random_device rd;
    schema = "t_" + std::to_string(getpid()) + "_" + std::to_string(rd());
    absl::StatusOr<std::unique_ptr<Store>> admin = OpenStore(base);
    absl::Status s = admin.status();
    if (s.ok()) {
      absl::StatusOr<std::unique_ptr<StoreTransaction>> tx = (*admin)->Begin();
      s = tx.status();
      if (s.ok()) s = (*tx)->Exec("CREATE SCHEMA " + schema).status();
      if (s.ok()) s = (*tx)->Commit();
    }
    if (!s.ok()) {
      ADD_FAILURE() << "cannot create schema " << schema << " on IDEM_TEST_POSTGRES_URL: " << s;
      return base;
    }
    std::ofstream(marker) << schema << "\n";
  }
  return WithParams(base, "options=-csearch_path%3D" + schema);
}

// MariaDB/MySQL from IDEM_TEST_MYSQL_URL: a database of its own per test (named
// after `dir`, so every call of one test gets the same one). Without that variable
// the test fails: a backend silently left out would look like a passing one.
inline std::string MysqlTestUrl(const std::string& dir) {
  const std::string base = mysql::testing::BaseUrl();
  if (base.empty()) {
    ADD_FAILURE() << "IDEM_TEST_MYSQL_URL is not set: run `scripts/services.sh start "
                     "build/services` and `source build/services/env.sh` first";
    return "mysql://unset";
  }
  absl::StatusOr<std::string> url = mysql::testing::FreshDatabaseUrl(base, dir);
  if (!url.ok()) {
    ADD_FAILURE() << "cannot create the test database: " << url.status();
    return "mysql://unset";
  }
  return *url;
}

// The backends with SQL (Transaction::Exec/Query): business rows live there.
inline std::vector<Backend> SqlBackends() {
  return {
      {"sqlite", [](const std::string& dir) { return "sqlite://" + dir + "/idem.db"; },
       "synchronous=normal"},
      {"postgres", PostgresUrl, ""},
      {"mysql", MysqlTestUrl, ""},
      // Without idem's stored procedures: the classic statements (a user without
      // CREATE ROUTINE, TiDB, sharded Vitess).
      {"mysql_classic",
       [](const std::string& dir) { return WithParams(MysqlTestUrl(dir), "procedures=off"); },
       ""},
      {"sqlite_cached", [](const std::string& dir) { return "sqlite://" + dir + "/idem.db"; },
       "synchronous=normal", WrapWithCache},
  };
}

// Every backend: the reference memory:// store and the SQL ones.
inline std::vector<Backend> AllBackends() {
  std::vector<Backend> all = {
      {"memory", [](const std::string&) { return std::string("memory://"); }}};
  for (Backend& b : SqlBackends()) all.push_back(std::move(b));
  all.push_back({"memory_cached", [](const std::string&) { return std::string("memory://"); }, "",
                 WrapWithCache});
  return all;
}

}  // namespace idem::testing
