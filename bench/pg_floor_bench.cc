// What one more statement costs in a PostgreSQL transaction, without idem: the
// floor under any guard that records a key in the caller's transaction.
//
//   bare      BEGIN + INSERT ledger (one pipeline); COMMIT            2 round trips
//   +1 row    BEGIN + INSERT ledger + INSERT keys (one pipeline); COMMIT
//             the least a dedupe record can cost: one more row, no more round trips
//   +2 stmts  BEGIN + INSERT keys + INSERT ledger; UPDATE keys + COMMIT
//             the shape of idem's guarded transaction (claim, result write), in
//             plain SQL
//
// The three run in turn, one of each per iteration, over raw libpq with prepared
// statements. Besides the time per transaction it prints the backend's CPU per
// transaction, read from /proc/PID/stat of the server process (when the server
// runs on this machine and that file is readable; "-" otherwise).
//
//   source build/services/env.sh && build/bench/pg_floor_bench [--iterations=N]
#include <libpq-fe.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

[[noreturn]] void Die(PGconn* c, const std::string& what) {
  std::fprintf(stderr, "pg_floor_bench: %s: %s", what.c_str(), c ? PQerrorMessage(c) : "\n");
  std::exit(1);
}

void Exec(PGconn* c, const std::string& sql) {
  PGresult* r = PQexec(c, sql.c_str());
  const ExecStatusType st = PQresultStatus(r);
  PQclear(r);
  if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) Die(c, sql);
}

void Prepare(PGconn* c, const char* name, const std::string& sql, int nparams) {
  PGresult* r = PQprepare(c, name, sql.c_str(), nparams, nullptr);
  const ExecStatusType st = PQresultStatus(r);
  PQclear(r);
  if (st != PGRES_COMMAND_OK) Die(c, std::string("prepare ") + name);
}

// One statement of a pipeline: a prepared statement's name and its text
// parameters; `sync` ends a segment after it.
struct Step {
  const char* name;
  std::vector<std::string> params;
  bool sync = false;
};

// Sends the steps as one pipeline (one round trip) and reads every result.
void Pipeline(PGconn* c, const std::vector<Step>& steps) {
  if (PQenterPipelineMode(c) != 1) Die(c, "pipeline mode");
  int syncs = 0;
  for (const Step& s : steps) {
    std::vector<const char*> values;
    for (const std::string& p : s.params) values.push_back(p.c_str());
    if (PQsendQueryPrepared(c, s.name, static_cast<int>(values.size()), values.data(), nullptr,
                            nullptr, 0) != 1) {
      Die(c, std::string("send ") + s.name);
    }
    if (s.sync) {
      if (PQpipelineSync(c) != 1) Die(c, "sync");
      ++syncs;
    }
  }
  for (int seen = 0; seen < syncs;) {
    PGresult* r = PQgetResult(c);
    if (r == nullptr) continue;
    const ExecStatusType st = PQresultStatus(r);
    if (st == PGRES_PIPELINE_SYNC) {
      ++seen;
    } else if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
      std::fprintf(stderr, "pg_floor_bench: %s", PQresultErrorMessage(r));
      std::exit(1);
    }
    PQclear(r);
  }
  if (PQexitPipelineMode(c) != 1) Die(c, "leaving pipeline mode");
}

// The CPU time (user + system, µs) of process `pid`, or -1 when unreadable.
double ProcessCpuMicros(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream fields(stat.substr(close + 2));
  std::string f;
  long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && (fields >> f); ++i) {  // fields 14 and 15: utime, stime
    if (i == 14) utime = std::atoll(f.c_str());
    if (i == 15) stime = std::atoll(f.c_str());
  }
  return 1e6 * static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

}  // namespace

int main(int argc, char** argv) {
  long iterations = 3000;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    char* end = nullptr;
    if (arg.rfind("--iterations=", 0) == 0) {
      iterations = std::strtol(arg.c_str() + 13, &end, 10);
      if (*end == '\0' && iterations > 0) continue;
    }
    std::fprintf(stderr, "usage: pg_floor_bench [--iterations=N]   (N > 0; default 3000)\n");
    return 2;
  }
  const char* url = std::getenv("IDEM_TEST_POSTGRES_URL");
  if (url == nullptr || *url == '\0') {
    std::fprintf(stderr, "pg_floor_bench: IDEM_TEST_POSTGRES_URL is not set (scripts/services.sh "
                         "start DIR; source DIR/env.sh)\n");
    return 2;
  }
  PGconn* c = PQconnectdb(url);
  if (PQstatus(c) != CONNECTION_OK) Die(c, "connect");
  const std::string id = std::to_string(getpid());
  const std::string ledger = "floor_ledger_" + id, ledger2 = "floor_ledger2_" + id,
                    keys = "floor_keys_" + id;
  Exec(c, "CREATE TABLE " + ledger + " (order_no VARCHAR(64) PRIMARY KEY, amount INT NOT NULL)");
  Exec(c, "CREATE TABLE " + ledger2 + " (order_no VARCHAR(64) PRIMARY KEY, amount INT NOT NULL)");
  // As wide as idem_records, so "+2 stmts" writes what a guard writes.
  Exec(c, "CREATE TABLE " + keys +
              " (tenant TEXT NOT NULL, idem_key BYTEA NOT NULL, state SMALLINT NOT NULL, "
              "token BIGINT NOT NULL, result BYTEA, updated_at BIGINT NOT NULL, "
              "PRIMARY KEY (tenant, idem_key))");
  Prepare(c, "begin", "BEGIN", 0);
  Prepare(c, "commit", "COMMIT", 0);
  Prepare(c, "ledger", "INSERT INTO " + ledger + " (order_no, amount) VALUES ($1, 100)", 1);
  Prepare(c, "ledger2", "INSERT INTO " + ledger2 + " (order_no, amount) VALUES ($1, 100)", 1);
  Prepare(c, "claim",
          "INSERT INTO " + keys +
              " (tenant, idem_key, state, token, updated_at) VALUES ('default', "
              "convert_to($1, 'UTF8'), 0, 7, 1) ON CONFLICT DO NOTHING",
          1);
  Prepare(c, "finish",
          "UPDATE " + keys +
              " SET state = 1, result = '\\x7b7d', updated_at = 2 WHERE tenant = 'default' AND "
              "idem_key = convert_to($1, 'UTF8') AND token = 7 AND state = 0",
          1);
  PGresult* pid_res = PQexec(c, "SELECT pg_backend_pid()");
  const int backend = std::atoi(PQgetvalue(pid_res, 0, 0));
  PQclear(pid_res);

  enum { kBare, kOneRow, kTwoStatements, kVariants };
  const char* names[kVariants] = {"bare", "+1 row", "+2 stmts"};
  auto run = [&](int variant, const std::string& key) {
    switch (variant) {
      case kBare:
        Pipeline(c, {{"begin", {}}, {"ledger", {key}, true}});
        Pipeline(c, {{"commit", {}, true}});
        break;
      case kOneRow:
        Pipeline(c, {{"begin", {}}, {"ledger", {key}}, {"ledger2", {key}, true}});
        Pipeline(c, {{"commit", {}, true}});
        break;
      case kTwoStatements:
        Pipeline(c, {{"begin", {}}, {"claim", {key}}, {"ledger", {key}, true}});
        Pipeline(c, {{"finish", {key}}, {"commit", {}, true}});
        break;
    }
  };
  double wall[kVariants] = {}, cpu[kVariants] = {};
  bool cpu_known = ProcessCpuMicros(backend) >= 0;
  for (long i = 0; i < iterations; ++i) {
    for (int v = 0; v < kVariants; ++v) {
      const std::string key = std::to_string(v) + "-" + std::to_string(i);
      const double cpu0 = cpu_known ? ProcessCpuMicros(backend) : 0;
      const auto t0 = std::chrono::steady_clock::now();
      run(v, key);
      wall[v] += std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
                     .count();
      if (cpu_known) cpu[v] += ProcessCpuMicros(backend) - cpu0;
    }
  }
  Exec(c, "DROP TABLE " + ledger + ", " + ledger2 + ", " + keys);
  PQfinish(c);

  std::printf("PostgreSQL, raw libpq, %ld transactions of each (interleaved)\n\n", iterations);
  std::printf("%-10s %10s %7s %16s\n", "variant", "wall_us", "ratio", "backend_cpu_us");
  for (int v = 0; v < kVariants; ++v) {
    char cpu_text[32] = "-";
    if (cpu_known) std::snprintf(cpu_text, sizeof cpu_text, "%.1f", cpu[v] / iterations);
    std::printf("%-10s %10.1f %7.3f %16s\n", names[v], wall[v] / iterations, wall[v] / wall[kBare],
                cpu_text);
  }
  std::printf("\nbackend CPU comes from /proc in clock ticks (%ld per second): a mean over many "
              "transactions.\n",
              sysconf(_SC_CLK_TCK));
  return 0;
}
