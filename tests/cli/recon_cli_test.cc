// `idem recon` as a black box: a CSV/JSONL statement against a ledger in a
// SQL store, the JSON line, the summary, tickets and replays that reruns do not
// repeat, the watermark and `recon status`, bad input that writes nothing, the HTML
// report. Built twice: on SQLite (recon_cli_test, label unit) and on PostgreSQL and
// MariaDB (recon_sql_test, label integration; IDEM_TEST_POSTGRES_URL and
// IDEM_TEST_MYSQL_URL from build/services/env.sh, failing without them).
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "conformance/store_factory.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "http/client/upstream.h"
#include "idem/idem.h"
#include "nlohmann/json.hpp"
#include "recon/fields.h"
#include "recon/ledger_reader.h"
#include "recon/tables.h"
#include "store/backend.h"
#include "testing/idem_process.h"
#include "testing/status_matchers.h"
#include "testing/temp_dir.h"

#ifndef IDEM_TEST_UPSTREAM
#define IDEM_TEST_UPSTREAM ""
#endif

namespace idem::testing {
namespace {

using ::testing::HasSubstr;

// An HTTP endpoint that answers every POST 200 and keeps each request's
// Idempotency-Key (the replay and re-push receiver), and every byte it was sent.
class Receiver {
 public:
  Receiver() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    listen(fd_, 16);
    socklen_t len = sizeof addr;
    getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { Serve(); });
  }
  ~Receiver() {
    stop_ = true;
    shutdown(fd_, SHUT_RDWR);
    close(fd_);
    thread_.join();
  }
  std::string url(const std::string& path) const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }
  std::vector<std::string> keys(const std::string& path) {
    std::lock_guard<std::mutex> lock(mu_);
    return keys_[path];
  }
  // Every byte received, on every connection, in order.
  std::string received() {
    std::lock_guard<std::mutex> lock(mu_);
    return received_;
  }
  int connections() {
    std::lock_guard<std::mutex> lock(mu_);
    return connections_;
  }

 private:
  void Serve() {
    while (!stop_) {
      const int c = accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      std::string req;
      char buf[4096];
      size_t need = std::string::npos;
      while (true) {
        const ssize_t n = read(c, buf, sizeof buf);
        if (n <= 0) break;
        req.append(buf, static_cast<size_t>(n));
        const size_t end = req.find("\r\n\r\n");
        if (end != std::string::npos && need == std::string::npos) {
          size_t length = 0;
          std::string lower = req.substr(0, end);
          for (char& ch : lower) ch = static_cast<char>(std::tolower(ch));
          const size_t cl = lower.find("content-length:");
          if (cl != std::string::npos) length = std::stoul(lower.substr(cl + 15));
          need = end + 4 + length;
        }
        if (need != std::string::npos && req.size() >= need) break;
      }
      const size_t sp = req.find(' ');
      const std::string path = req.substr(sp + 1, req.find(' ', sp + 1) - sp - 1);
      std::string key;
      const size_t k = req.find("Idempotency-Key: ");
      if (k != std::string::npos) key = req.substr(k + 17, req.find("\r\n", k) - k - 17);
      {
        std::lock_guard<std::mutex> lock(mu_);
        keys_[path].push_back(key);
        received_ += req;
        ++connections_;
      }
      const std::string answer =
          "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}";
      (void)!write(c, answer.data(), answer.size());
      close(c);
    }
  }
  int fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex mu_;
  std::map<std::string, std::vector<std::string>> keys_;
  std::string received_;
  int connections_ = 0;
};

// The whole answer (status line, headers, body) to GET `path` on 127.0.0.1:port.
std::string HttpGet(uint16_t port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  std::string out;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    const std::string req = "GET " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    (void)!write(fd, req.data(), req.size());
    char buf[8192];
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return out;
}

struct Backend {
  std::string name;
  std::string (*url)(const std::string& dir);
};

[[maybe_unused]] std::string SqliteUrl(const std::string& dir) {
  return "sqlite://" + dir + "/shop.db";
}

std::vector<Backend> Backends() {
#ifdef IDEM_RECON_SQL_SERVERS
  return {{"postgres", &PostgresUrl}, {"mariadb", &MysqlTestUrl}};
#else
  return {{"sqlite", &SqliteUrl}};
#endif
}

void PrintTo(const Backend& b, std::ostream* os) { *os << b.name; }

// `url` without the password of user:password@, and that password ("" for none):
// the commands take it from a file, as they tell a user to.
std::pair<std::string, std::string> SplitPassword(const std::string& url) {
  const size_t scheme = url.find("://");
  const size_t at = url.find('@', scheme == std::string::npos ? 0 : scheme + 3);
  if (scheme == std::string::npos || at == std::string::npos) return {url, ""};
  const size_t colon = url.find(':', scheme + 3);
  if (colon == std::string::npos || colon > at) return {url, ""};
  std::string password;
  for (size_t i = colon + 1; i < at; ++i) {
    if (url[i] == '%' && i + 2 < at) {
      password.push_back(static_cast<char>(std::stoi(url.substr(i + 1, 2), nullptr, 16)));
      i += 2;
    } else {
      password.push_back(url[i]);
    }
  }
  return {url.substr(0, colon) + url.substr(at), password};
}

class Recon : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    url_ = GetParam().url(dir_.path());
    std::tie(bare_url_, std::ignore) = SplitPassword(url_);
    std::ofstream(dir_.file("db-password")) << SplitPassword(url_).second << "\n";
    chmod(dir_.file("db-password").c_str(), 0600);  // else idem warns that others may read it
    absl::StatusOr<std::unique_ptr<Store>> store = OpenStore(url_);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    mysql_ = ::idem::Backend(*store_).sql_dialect()->name() == "mysql";
    Sql("CREATE TABLE ledger (order_no VARCHAR(64) NOT NULL, amount VARCHAR(32) NOT NULL, "
        "currency VARCHAR(8) NOT NULL, status VARCHAR(16) NOT NULL, created_at VARCHAR(32) NOT "
        "NULL)");
  }

  void Sql(const std::string& sql, std::vector<Value> params = {}) {
    absl::StatusOr<std::unique_ptr<StoreTransaction>> tx = store_->Begin();
    ASSERT_TRUE(tx.ok()) << tx.status();
    absl::StatusOr<int64_t> n = (*tx)->Exec(sql, params);
    ASSERT_TRUE(n.ok()) << n.status() << " " << sql;
    ASSERT_TRUE((*tx)->Commit().ok());
  }
  int64_t Count(const std::string& sql) {
    absl::StatusOr<std::unique_ptr<StoreTransaction>> tx = store_->Begin();
    if (!tx.ok()) return -1;
    absl::StatusOr<Rows> rows = (*tx)->Query(sql);
    (*tx)->Rollback();
    if (!rows.ok()) return -1;  // e.g. no such table
    return rows->rows[0][0].is_int() ? rows->rows[0][0].as_int()
                                     : std::stoll(rows->rows[0][0].as_text());
  }
  void Ledger(const std::string& key, const std::string& amount, const std::string& status,
              const std::string& time, const std::string& currency = "CNY") {
    Sql("INSERT INTO ledger VALUES (?, ?, ?, ?, ?)", {key, amount, currency, status, time});
  }
  std::string Statement(const std::string& name, const std::string& bytes) {
    std::ofstream(dir_.file(name), std::ios::binary) << bytes;
    return dir_.file(name);
  }
  std::string Query() const {
    const std::string k = mysql_ ? "`key`" : "key";
    return "SELECT order_no AS " + k +
           ", amount AS amount, currency AS currency, status AS "
           "status, created_at AS time FROM ledger";
  }
  std::vector<std::string> Args(const std::string& statement, std::vector<std::string> more = {}) {
    std::vector<std::string> a = {
        "recon",
        "--source",
        "wx",
        "--statement",
        statement,
        "--map",
        "key=out_trade_no,amount=total_fee,currency=fee_type,status=trade_state,time=trade_time",
        "--upstream-scale",
        "2",
        "--tz",
        "Asia/Shanghai",
        "--ledger",
        bare_url_,
        "--ledger-query",
        Query(),
        "--status-map",
        "SUCCESS=PAID,REFUND=REFUNDED",
        "--intermediate",
        "PENDING,PROCESSING",
        "--day",
        "2024-06-18",
        "--json",
        "--store",
        bare_url_};
    for (const std::string& p : PasswordArgs("--ledger-password-file")) a.push_back(p);
    for (const std::string& p : PasswordArgs("--store-password-file")) a.push_back(p);
    a.insert(a.end(), more.begin(), more.end());
    return a;
  }
  // A day with one key of every class.
  std::string Day() {
    Ledger("R-1", "12.50", "PAID", "2024-06-18 10:00:00");    // matched
    Ledger("R-3", "3.00", "PENDING", "2024-06-18 10:02:00");  // status_mismatch (stuck)
    Ledger("R-4", "4.01", "PAID", "2024-06-18 10:03:00");     // amount_mismatch
    Ledger("R-5", "5.00", "PAID", "2024-06-18 10:04:00");     // duplicate (local)
    Ledger("R-5", "5.00", "PAID", "2024-06-18 10:04:00");
    Ledger("R-6", "6.00", "PAID", "2024-06-18 10:05:00");  // missing_upstream
    Ledger("R-9", "9.00", "PAID", "2024-06-19 10:05:00");  // another day
    return Statement("bill.csv",
                     "out_trade_no,total_fee,fee_type,trade_state,trade_time\r\n"
                     "R-1,1250,CNY,SUCCESS,2024-06-18 10:00:00\r\n"
                     "R-2,200,CNY,SUCCESS,2024-06-18 10:01:00\r\n"  // missing_local
                     "R-3,300,CNY,SUCCESS,2024-06-18 10:02:00\r\n"
                     "R-4,400,CNY,SUCCESS,2024-06-18 10:03:00\r\n"
                     "R-5,500,CNY,SUCCESS,2024-06-18 10:04:00\r\n"
                     "R-8,800,CNY,SUCCESS,2024-06-17 23:59:59\r\n");  // the day before
  }
  static std::string LastLine(const std::string& out) {
    std::string s = out;
    if (!s.empty() && s.back() == '\n') s.pop_back();
    return s.substr(s.rfind('\n') + 1);
  }

  // `idem recon tickets SUB args…` on the store of Args() (with its password file).
  RunResult Tickets(const std::string& sub, std::vector<std::string> args) {
    std::vector<std::string> a = {"recon", "tickets", sub, "--store", bare_url_};
    for (const std::string& p : PasswordArgs("--store-password-file")) a.push_back(p);
    a.insert(a.end(), args.begin(), args.end());
    return RunIdemIn(dir_.path(), a);
  }
  // The ticket of the one row of `sql` (a SELECT id FROM recon_ticket …).
  std::string TicketIdWhere(const std::string& where) {
    absl::StatusOr<std::unique_ptr<StoreTransaction>> tx = store_->Begin();
    if (!tx.ok()) return "";
    absl::StatusOr<Rows> rows = (*tx)->Query("SELECT id FROM recon_ticket WHERE " + where);
    (*tx)->Rollback();
    if (!rows.ok() || rows->rows.size() != 1) return "";
    const Value& v = rows->rows[0][0];
    return v.is_text() ? v.as_text() : v.is_blob() ? v.as_blob() : "";
  }
  // A file of this test's directory holding `bytes`, with `mode`.
  std::string PrivateFile(const std::string& name, const std::string& bytes, mode_t mode = 0600) {
    std::ofstream(dir_.file(name), std::ios::binary) << bytes;
    chmod(dir_.file(name).c_str(), mode);
    return dir_.file(name);
  }

  // Args() without its --store (and the store's password file): recon's default store.
  static std::vector<std::string> WithoutStore(std::vector<std::string> args) {
    for (const char* option : {"--store", "--store-password-file"}) {
      auto at = std::find(args.begin(), args.end(), option);
      if (at != args.end()) args.erase(at, at + 2);
    }
    return args;
  }

  // The ledger database as it is, by the connection of a user that can write there:
  // its schema (every table's columns with their types, nullability and defaults,
  // and its indexes) and every row of every table (as text, sorted).
  std::vector<std::string> Snapshot() {
    const std::string dialect(::idem::Backend(*store_).sql_dialect()->name());
    const std::string tables =
        dialect == "sqlite"  ? "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"
        : dialect == "mysql" ? "SELECT table_name FROM information_schema.tables WHERE "
                               "table_schema = DATABASE() ORDER BY table_name"
                             : "SELECT table_name::text FROM information_schema.tables WHERE "
                               "table_schema = current_schema() ORDER BY table_name";
    const std::string schema =
        dialect == "sqlite" ? "SELECT type, name, tbl_name, COALESCE(sql, '') FROM sqlite_master"
        : dialect == "mysql"
            ? "SELECT table_name, column_name, ordinal_position, column_type, is_nullable, "
              "COALESCE(column_default, 'NULL'), column_key, extra FROM information_schema.columns "
              "WHERE table_schema = DATABASE() UNION ALL SELECT table_name, index_name, "
              "seq_in_index, column_name, non_unique, '', '', '' FROM "
              "information_schema.statistics WHERE table_schema = DATABASE()"
            : "SELECT table_name::text, column_name::text, ordinal_position::text, "
              "data_type::text, is_nullable::text, COALESCE(column_default::text, 'NULL') FROM "
              "information_schema.columns WHERE table_schema = current_schema() UNION ALL "
              "SELECT tablename::text, indexname::text, indexdef, '', '', '' FROM pg_indexes "
              "WHERE schemaname = current_schema()";
    std::vector<std::string> out;
    absl::StatusOr<std::unique_ptr<StoreTransaction>> tx = store_->Begin();
    if (!tx.ok()) return {"cannot begin: " + std::string(tx.status().message())};
    auto lines_of = [](const std::string& prefix, const Rows& rows) {
      std::vector<std::string> lines;
      for (const std::vector<Value>& row : rows.rows) {
        std::string line = prefix;
        for (const Value& v : row) {
          line += v.is_null()     ? std::string("|NULL")
                  : v.is_int()    ? "|" + std::to_string(v.as_int())
                  : v.is_double() ? "|" + std::to_string(v.as_double())
                  : v.is_text()   ? "|" + v.as_text()
                                  : "|blob:" + v.as_blob();
        }
        lines.push_back(line);
      }
      std::sort(lines.begin(), lines.end());
      return lines;
    };
    absl::StatusOr<Rows> columns = (*tx)->Query(schema);
    if (!columns.ok())
      return {"cannot read the schema: " + std::string(columns.status().message())};
    out = lines_of("schema:", *columns);
    absl::StatusOr<Rows> names = (*tx)->Query(tables);
    if (!names.ok()) return {"cannot list tables: " + std::string(names.status().message())};
    for (const std::vector<Value>& name : names->rows) {
      const std::string table = name[0].is_text() ? name[0].as_text() : name[0].as_blob();
      out.push_back("table " + table);
      if (table.starts_with("sqlite_")) continue;
      absl::StatusOr<Rows> rows = (*tx)->Query("SELECT * FROM " + table);
      if (!rows.ok()) return {"cannot read " + table + ": " + std::string(rows.status().message())};
      for (std::string& line : lines_of(table + ":", *rows)) out.push_back(std::move(line));
    }
    (*tx)->Rollback();
    return out;
  }

  // --ledger-password-file when the URL has a password (the servers' test URLs).
  std::vector<std::string> PasswordArgs(const std::string& option) const {
    if (bare_url_ == url_) return {};
    return {option, dir_.file("db-password")};
  }

  TempDir dir_;
  std::string url_;
  std::string bare_url_;  // url_ without its password
  std::unique_ptr<Store> store_;
  bool mysql_ = false;
};

constexpr char kDayJson[] =
    "{\"source\":\"wx\",\"from\":\"2024-06-17T16:00:00Z\",\"to\":\"2024-06-18T16:00:00Z\","
    "\"upstream_rows\":5,\"local_rows\":6,\"matched\":1,\"missing_local\":1,"
    "\"missing_upstream\":1,\"status_mismatch\":1,\"amount_mismatch\":1,\"duplicate\":1}";

TEST_P(Recon, TenRunsOneResultNoExtraTicketsOrReplays) {
  const std::string bill = Day();
  Receiver receiver;
  const std::vector<std::string> args =
      Args(bill, {"--replay-url", receiver.url("/replay"), "--repush-url", receiver.url("/repush"),
                  "--report", dir_.file("report.html")});
  std::string first;
  for (int run = 0; run < 10; ++run) {
    RunResult r = RunIdemIn(dir_.path(), args);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(LastLine(r.out), kDayJson);
    if (run == 0) {
      first = r.out;
      EXPECT_THAT(r.out, HasSubstr("5 new ticket/action row(s), 2 replay/re-push sent, 0 pending"));
    } else {
      EXPECT_THAT(r.out, HasSubstr("0 new ticket/action row(s), 0 replay/re-push sent, 0 pending"));
    }
  }
  EXPECT_THAT(receiver.keys("/replay"), ::testing::ElementsAre("R-2"));
  EXPECT_THAT(receiver.keys("/repush"), ::testing::ElementsAre("R-3"));
  EXPECT_EQ(Count("SELECT COUNT(*) FROM recon_ticket"), 5);
  EXPECT_EQ(Count("SELECT COUNT(*) FROM recon_ticket WHERE severity = 'high'"), 2);
  EXPECT_EQ(Count("SELECT COUNT(*) FROM recon_ticket WHERE state = 'done'"), 2);
  EXPECT_EQ(Count("SELECT COUNT(*) FROM recon_ticket WHERE class = 'missing_upstream' AND "
                  "action = 'ticket' AND state = 'open'"),
            1);
  EXPECT_EQ(Count("SELECT COUNT(*) FROM recon_watermark WHERE source = 'wx'"), 1);
  const std::string html = ReadWholeFile(dir_.file("report.html"));
  EXPECT_THAT(html, HasSubstr("<svg"));
  EXPECT_THAT(html, HasSubstr("R-6"));

  std::vector<std::string> status = {"recon",   "status",  "--source",  "wx",
                                     "--store", bare_url_, "--max-age", "15m"};
  for (const std::string& p : PasswordArgs("--store-password-file")) status.push_back(p);
  RunResult fresh = RunIdemIn(dir_.path(), status);
  EXPECT_EQ(fresh.err, "");
  EXPECT_EQ(fresh.exit_code, 0) << fresh.err;
  EXPECT_THAT(fresh.out, HasSubstr("up to 2024-06-18T16:00:00Z"));
  Sql("UPDATE recon_watermark SET last_success_at = 1000000");
  RunResult stale = RunIdemIn(dir_.path(), status);
  EXPECT_EQ(stale.exit_code, 1);
  EXPECT_THAT(stale.err, HasSubstr("older than 15m"));
  status[3] = "other";
  RunResult never = RunIdemIn(dir_.path(), status);
  EXPECT_EQ(never.exit_code, 1);
  EXPECT_THAT(never.err, HasSubstr("never completed"));
}

// The ledger is only read: with recon's default store, with another --store and
// with replays, the ledger (whose user could write there) keeps its tables and rows.
TEST_P(Recon, LedgerIsNeverWrittenWithoutStoreWithStoreAndWithReplay) {
  const std::string bill = Day();
  const std::vector<std::string> before = Snapshot();
  ASSERT_THAT(before, ::testing::Contains("table ledger"));
  ASSERT_THAT(before, ::testing::Contains(HasSubstr("order_no")));  // the schema is in it
  Receiver receiver;
  const std::vector<std::string> replay = {"--replay-url", receiver.url("/replay")};

  RunResult own = RunIdemIn(dir_.path(), WithoutStore(Args(bill, replay)));
  ASSERT_EQ(own.exit_code, 0) << own.err;
  EXPECT_EQ(LastLine(own.out), kDayJson);
  EXPECT_THAT(own.out, HasSubstr("5 new ticket/action row(s), 1 replay/re-push sent, 0 pending"));
  EXPECT_EQ(Snapshot(), before);

  const std::string other = "sqlite://" + dir_.file("recon-state.db");
  RunResult named =
      RunIdemIn(dir_.path(), WithoutStore(Args(bill, {"--store", other, replay[0], replay[1]})));
  ASSERT_EQ(named.exit_code, 0) << named.err;
  EXPECT_THAT(named.out, HasSubstr("5 new ticket/action row(s), 1 replay/re-push sent, 0 pending"));
  EXPECT_EQ(Snapshot(), before);

  RunResult again = RunIdemIn(dir_.path(), WithoutStore(Args(bill)));
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_THAT(again.out, HasSubstr("0 new ticket/action row(s), 0 replay/re-push sent, 0 pending"));
  EXPECT_EQ(Snapshot(), before);
  EXPECT_THAT(receiver.keys("/replay"), ::testing::ElementsAre("R-2", "R-2"));

  // The tickets and the watermark are in recon's own stores, and `recon status`
  // without --store reads the default one.
  for (const std::string& state : {std::string("sqlite://" + dir_.file("idem-recon.db")), other}) {
    absl::StatusOr<std::unique_ptr<Store>> store = OpenStore(state);
    ASSERT_TRUE(store.ok()) << store.status();
    absl::StatusOr<std::unique_ptr<StoreTransaction>> tx = (*store)->Begin();
    ASSERT_TRUE(tx.ok()) << tx.status();
    absl::StatusOr<Rows> n = (*tx)->Query("SELECT COUNT(*) FROM recon_ticket");
    ASSERT_TRUE(n.ok()) << n.status() << " " << state;
    EXPECT_EQ(n->rows[0][0].as_int(), 5) << state;
  }
  RunResult status =
      RunIdemIn(dir_.path(), {"recon", "status", "--source", "wx", "--max-age", "15m"});
  EXPECT_EQ(status.exit_code, 0) << status.err;
  EXPECT_THAT(status.out, HasSubstr("up to 2024-06-18T16:00:00Z"));
}

// The ledger's connection (read-only store options) is refused every change by
// the database itself, whatever SQL reaches it: no table created, no row changed.
TEST_P(Recon, LedgerConnectionRefusesWrites) {
  Ledger("R-1", "12.50", "PAID", "2024-06-18 10:00:00");
  const std::vector<std::string> before = Snapshot();
  absl::StatusOr<std::unique_ptr<Store>> ledger =
      OpenStore(url_, StoreOptions{.read_only = true, .require_schema = false});
  ASSERT_TRUE(ledger.ok()) << ledger.status();
  for (const char* sql : {"CREATE TABLE recon_probe (a INT)", "UPDATE ledger SET amount = '0'",
                          "DELETE FROM ledger"}) {
    absl::StatusOr<std::unique_ptr<StoreTransaction>> tx = (*ledger)->Begin();
    ASSERT_TRUE(tx.ok()) << tx.status();
    absl::StatusOr<int64_t> n = (*tx)->Exec(sql, {});
    absl::Status commit = n.ok() ? (*tx)->Commit() : absl::OkStatus();
    EXPECT_FALSE(n.ok() && commit.ok()) << sql;
  }
  EXPECT_EQ(Snapshot(), before);
}

TEST_P(Recon, DryRunWritesNothing) {
  const std::string bill = Day();
  RunResult r = RunIdemIn(dir_.path(), Args(bill, {"--dry-run"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(LastLine(r.out), kDayJson);
  EXPECT_THAT(r.out, HasSubstr("dry run: nothing written"));
  EXPECT_EQ(Count("SELECT COUNT(*) FROM recon_ticket"), -1);  // no table
  EXPECT_EQ(Count("SELECT COUNT(*) FROM recon_watermark"), -1);
}

TEST_P(Recon, BadInputNamesFileAndLineAndWritesNothing) {
  Day();
  const std::string header = "out_trade_no,total_fee,fee_type,trade_state,trade_time\n";
  const std::string good = "R-1,1250,CNY,SUCCESS,2024-06-18 10:00:00\n";
  struct Case {
    std::string name, bytes, want;
  } cases[] = {
      {"amount.csv", header + good + "R-2,12x,CNY,SUCCESS,2024-06-18 10:00:00\n",
       "amount.csv:3: malformed amount '12x'"},
      {"column.csv", "out_trade_no,fee,fee_type,trade_state,trade_time\n" + good,
       "column.csv:1: no column 'total_fee'"},
      {"utf8.csv", header + good + "R-\xc3\x28,1,CNY,SUCCESS,2024-06-18 10:00:00\n",
       "utf8.csv:3: invalid UTF-8 in key"},
      {"truncated.csv", header + good + "R-2,200,CN",
       "truncated.csv:3: the last line is truncated"},
      {"status.csv", header + good + "R-2,200,CNY,LOST,2024-06-18 10:00:00\n",
       "status.csv:3: unknown status 'LOST'"},
      {"time.csv", header + "R-2,200,CNY,SUCCESS,18/06/2024\n", "time.csv:2: malformed time"},
  };
  for (const Case& c : cases) {
    RunResult r = RunIdemIn(dir_.path(), Args(Statement(c.name, c.bytes)));
    ExpectOneLineFailure(r, 1);
    EXPECT_THAT(r.err, HasSubstr(c.want)) << c.name;
  }
  // The ledger's own bad rows name the row and key.
  Ledger("R-7", "1,5", "PAID", "2024-06-18 11:00:00");
  RunResult r = RunIdemIn(dir_.path(), Args(Statement("ok.csv", header + good)));
  ExpectOneLineFailure(r, 1);
  EXPECT_THAT(r.err, HasSubstr("(key R-7): malformed amount '1,5'"));
  EXPECT_EQ(Count("SELECT COUNT(*) FROM recon_ticket"), -1);
  EXPECT_EQ(Count("SELECT COUNT(*) FROM recon_watermark"), -1);
}

// A statement key that could not be sent as it is in the replay's Idempotency-Key
// header is refused where it is read, with its file and line: the injected header
// and the smuggled second request never reach the replay target, nothing is counted
// as sent and no ticket is written or closed. A key that would become another key
// once a peer strips it ("INJ1\r\n…" arriving as the real INJ1, "R-1 " as R-1) is
// refused, never cut down.
TEST_P(Recon, KeyThatCannotBeAHeaderIsRefusedWithItsLineAndNothingIsSent) {
  Day();
  Ledger("INJ1", "1.00", "PAID", "2024-06-18 10:06:00");
  const std::string header = "out_trade_no,total_fee,fee_type,trade_state,trade_time\r\n";
  const std::string good = "R-1,1250,CNY,SUCCESS,2024-06-18 10:00:00\r\n";
  const std::string injected =
      "INJ1\r\nAuthorization: Bearer attacker\r\n\r\nPOST /smuggled-by-recon HTTP/1.1\r\n"
      "Host: x\r\nContent-Length: 0\r\n\r\n";
  const std::string jsonl_injected =
      "INJ1\\r\\nAuthorization: Bearer attacker\\r\\n\\r\\nPOST /smuggled-by-recon HTTP/1.1"
      "\\r\\nHost: x\\r\\nContent-Length: 0\\r\\n\\r\\n";
  struct Case {
    std::string name, bytes, want;
  } cases[] = {
      {"inj.csv", header + good + "\"" + injected + "\",100,CNY,SUCCESS,2024-06-18 10:06:00\r\n",
       "inj.csv:3: key holds the control character \\r at byte 4"},
      {"inj.jsonl",
       "{\"out_trade_no\":\"R-1\",\"total_fee\":1250,\"fee_type\":\"CNY\",\"trade_state\":"
       "\"SUCCESS\",\"trade_time\":\"2024-06-18 10:00:00\"}\n"
       "{\"out_trade_no\":\"" +
           jsonl_injected +
           "\",\"total_fee\":100,\"fee_type\":\"CNY\",\"trade_state\":\"SUCCESS\","
           "\"trade_time\":\"2024-06-18 10:06:00\"}\n",
       "inj.jsonl:2: key holds the control character \\r at byte 4"},
      {"nul.csv", header + good + std::string("R-\0X,100,CNY,SUCCESS,2024-06-18 10:06:00\n", 41),
       "nul.csv:3: key holds the control character \\x00 at byte 2"},
      {"esc.csv", header + good + "R-\x1b[31m,100,CNY,SUCCESS,2024-06-18 10:06:00\n",
       "esc.csv:3: key holds the control character \\x1B at byte 2"},
      {"space.csv", header + good + "R-1 ,100,CNY,SUCCESS,2024-06-18 10:06:00\n",
       "space.csv:3: key starts or ends with a space"},
      {"long.csv", header + good + std::string(256, 'K') + ",100,CNY,SUCCESS,2024-06-18 10:06:00\n",
       "long.csv:3: key is 256 bytes, over the limit of 255"},
  };
  Receiver receiver;
  for (const Case& c : cases) {
    RunResult r = RunIdemIn(
        dir_.path(), Args(Statement(c.name, c.bytes), {"--replay-url", receiver.url("/replay")}));
    ExpectOneLineFailure(r, 1);  // one line: the key's CR and LF are shown escaped
    EXPECT_THAT(r.err, HasSubstr(c.want)) << c.name;
    EXPECT_THAT(r.err, ::testing::Not(HasSubstr("attacker"))) << c.name;
  }
  EXPECT_EQ(receiver.connections(), 0);
  EXPECT_THAT(receiver.received(), ::testing::Not(HasSubstr("smuggled-by-recon")));
  EXPECT_THAT(receiver.received(), ::testing::Not(HasSubstr("Authorization")));
  EXPECT_EQ(Count("SELECT COUNT(*) FROM recon_ticket"), -1);  // nothing written, nothing closed
  EXPECT_EQ(Count("SELECT COUNT(*) FROM recon_watermark"), -1);
}

// A line without an end is refused once it passes 1 MiB, naming its line, before
// the rest of it is buffered (a 64 MiB key took 480 MB).
TEST_P(Recon, OverlongLineIsRefusedBeforeItIsBuffered) {
  Day();
  const std::string key(64 << 20, 'K');
  RunResult jsonl = RunIdemIn(
      dir_.path(),
      Args(Statement("huge.jsonl",
                     "{\"out_trade_no\":\"R-1\",\"total_fee\":1250,\"fee_type\":\"CNY\","
                     "\"trade_state\":\"SUCCESS\",\"trade_time\":\"2024-06-18 10:00:00\"}\n"
                     "{\"out_trade_no\":\"" +
                         key + "\",\"total_fee\":1}\n")));
  ExpectOneLineFailure(jsonl, 1);
  EXPECT_THAT(jsonl.err, HasSubstr("huge.jsonl:2: a line longer than 1 MiB: refused"));
  RunResult csv = RunIdemIn(
      dir_.path(), Args(Statement("huge.csv",
                                  "out_trade_no,total_fee,fee_type,trade_state,trade_time\n"
                                  "R-1,1250,CNY,SUCCESS,2024-06-18 10:00:00\n\"" +
                                      key + "\",1,CNY,SUCCESS,2024-06-18 10:00:00\n")));
  ExpectOneLineFailure(csv, 1);
  EXPECT_THAT(csv.err, HasSubstr("huge.csv:3: a record longer than 1 MiB: refused"));
}

// A pending replay whose key was stored before the readers refused such keys is
// refused when it is sent: it stays pending with the reason (escaped, on one line),
// counted as not sent, and the target hears nothing.
TEST_P(Recon, StoredPendingReplayWithABadKeyIsNotSent) {
  const std::string bill = Day();
  ASSERT_OK(recon::EnsureTables(*store_));
  recon::Ticket bad{.source = "wx",
                    .key = "OLD\r\nX-Injected: 1",
                    .cls = "missing_local",
                    .severity = "normal",
                    .action = "replay",
                    .state = "pending",
                    .detail = "",
                    .payload = "{}",
                    .run_id = "old",
                    .created_at_us = 1};
  ASSERT_OK_AND_ASSIGN(const int64_t added, recon::InsertTickets(*store_, {bad}));
  ASSERT_EQ(added, 1);
  Receiver receiver;
  RunResult r = RunIdemIn(dir_.path(), Args(bill, {"--replay-url", receiver.url("/replay"),
                                                   "--repush-url", receiver.url("/repush")}));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.out, HasSubstr("2 replay/re-push sent, 1 pending"));
  const std::string id = recon::TicketId("wx", "missing_local", bad.key);
  EXPECT_THAT(r.err, HasSubstr("first: replay of OLD\\r\\nX-Injected: 1 (missing_local, ticket " +
                               id + "): not sent: key holds the control character \\r at byte 3"));
  EXPECT_THAT(r.out, HasSubstr("  not done: replay of OLD\\r\\nX-Injected: 1 (missing_local, "
                               "ticket " +
                               id + "): not sent: key holds"));
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_THAT(receiver.received(), ::testing::Not(HasSubstr("X-Injected")));
  EXPECT_THAT(receiver.keys("/replay"), ::testing::ElementsAre("R-2"));
  EXPECT_EQ(Count("SELECT COUNT(*) FROM recon_ticket WHERE state = 'pending' AND run_id = 'old'"),
            1);
}

#ifndef IDEM_RECON_SQL_SERVERS
// The HTTP client refuses, whoever its caller, a request whose header name is not a
// token or whose header value, method or target holds CR, LF or NUL: kInvalidArgument
// naming the header, and no connection is made.
TEST(UpstreamTest, RefusesHeaderLinesInAnyValueAndSendsNothing) {
  Receiver receiver;
  absl::StatusOr<http::UpstreamUrl> url = http::ParseUpstreamUrl(receiver.url("/in"));
  ASSERT_OK(url.status());
  const http::Upstream upstream(*url, {.timeout = absl::Seconds(5)});
  auto request = [](std::vector<std::pair<std::string, std::string>> headers) {
    http::HttpRequest r;
    r.method = "POST";
    r.body = "{}";
    r.request_id = "t";
    r.headers = std::move(headers);
    return r;
  };
  struct Case {
    http::HttpRequest request;
    std::string target, want;
  } cases[] = {
      {request({{"Idempotency-Key", "K\r\nAuthorization: Bearer attacker"}}), "",
       "the value of header 'Idempotency-Key' holds CR, LF or NUL"},
      {request({{"Idempotency-Key", "K\nX: 1"}}), "", "header 'Idempotency-Key'"},
      {request({{"Idempotency-Key", std::string("K\0X", 3)}}), "", "header 'Idempotency-Key'"},
      {request({{"X-A: b\r\nX-B", "1"}}), "", "the header name 'X-A: b\\r\\nX-B' is not a token"},
      {request({{"Authorization: Bearer attacker", "1"}}), "", "is not a token"},
      {request({}), "/x HTTP/1.1\r\nX: 1\r\n\r\nGET /y", "the target '/in/x HTTP/1.1\\r\\n"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<http::UpstreamResponse> r = upstream.Send(c.request, c.target);
    EXPECT_THAT(r, StatusIs(absl::StatusCode::kInvalidArgument)) << c.want;
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(c.want));
    EXPECT_THAT(upstream.RequestBytes(c.request, c.target).status(),
                StatusIs(absl::StatusCode::kInvalidArgument));
  }
  http::HttpRequest bad_id = request({});
  bad_id.request_id = "r\r\nX: 1";
  absl::StatusOr<http::UpstreamResponse> refused = upstream.Send(bad_id, "");
  EXPECT_THAT(refused, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("'X-Request-Id'"));
  EXPECT_EQ(receiver.connections(), 0);
  // A clean request still goes, its key as it was given.
  absl::StatusOr<http::UpstreamResponse> ok =
      upstream.Send(request({{"Idempotency-Key", "K-1"}}), "");
  ASSERT_OK(ok.status());
  EXPECT_EQ(ok->status, 200);
  EXPECT_THAT(receiver.keys("/in"), ::testing::ElementsAre("K-1"));
}
#endif

TEST_P(Recon, JsonlAndHotWindowFromTheWatermark) {
  Ledger("J-1", "1.00", "PAID", "2024-06-18T02:00:00Z");
  const std::string bill =
      Statement("bill.jsonl",
                "{\"out_trade_no\":\"J-1\",\"total_fee\":100,\"fee_type\":\"CNY\",\"trade_state\":"
                "\"SUCCESS\",\"trade_time\":\"2024-06-18T10:00:00+08:00\"}\n"
                "{\"out_trade_no\":\"J-2\",\"total_fee\":200,\"fee_type\":\"CNY\",\"trade_state\":"
                "\"SUCCESS\",\"trade_time\":\"2024-06-18T10:00:01+08:00\"}\n");
  std::vector<std::string> args = Args(bill);
  const auto day = std::find(args.begin(), args.end(), "--day");
  args.erase(day, day + 2);  // no window
  RunResult r = RunIdemIn(dir_.path(), args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(LastLine(r.out), HasSubstr("\"from\":null"));
  EXPECT_THAT(LastLine(r.out), HasSubstr("\"matched\":1,\"missing_local\":1"));
  // Hot: from the watermark (now - 1m, just written) minus the overlap: 2024 is long
  // before, so nothing is in the window.
  std::vector<std::string> hot = args;
  hot.insert(hot.end(), {"--hot", "5m"});
  r = RunIdemIn(dir_.path(), hot);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(LastLine(r.out), HasSubstr("\"upstream_rows\":0,\"local_rows\":0"));
}

// The ledger read in pages of 5 rows: every row comes exactly once, also the rows
// of a key that straddles a page boundary, a key with more rows than a page, and
// keys equal but for case (MariaDB's default collation would call them equal);
// pulled (Next: key-ordered pages) and pushed (ReadAll: one streamed pass on
// SQLite, the same pages elsewhere), with each row's number counted alike.
TEST_P(Recon, LedgerPagesReadEveryRowOnce) {
  std::map<std::string, int> want;
  for (int i = 0; i < 40; ++i) {
    char key[16];
    std::snprintf(key, sizeof key, "P-%03d", i);
    const int copies = i == 4 ? 3 : i == 9 ? 12 : 1;
    for (int c = 0; c < copies; ++c) Ledger(key, "1", "PAID", "2024-06-18 10:00:00");
    want[key] = copies;
  }
  Ledger("p-005", "1", "PAID", "2024-06-18 10:00:00");
  want["p-005"] = 1;
  recon::StatusRules rules;
  absl::StatusOr<recon::ColumnMap> map = recon::ParseColumnMap("key=k,amount=a,status=s,time=t");
  ASSERT_TRUE(map.ok());
  recon::Normalizer norm(recon::Side::kLocal, *map, 0, absl::UTCTimeZone(), rules);
  for (int page : {5, 1000}) {
    absl::StatusOr<std::unique_ptr<recon::StatementReader>> reader =
        recon::OpenLedger(*store_, Query(), norm, page);
    ASSERT_TRUE(reader.ok()) << reader.status();
    std::map<std::string, int> got;
    recon::Row row;
    while (true) {
      absl::StatusOr<bool> more = (*reader)->Next(&row);
      ASSERT_TRUE(more.ok()) << more.status();
      if (!*more) break;
      ++got[row.key];
    }
    EXPECT_EQ(got, want) << "page " << page;

    reader = recon::OpenLedger(*store_, Query(), norm, page);
    ASSERT_TRUE(reader.ok()) << reader.status();
    std::map<std::string, int> pushed;
    std::set<int64_t> numbers;
    ASSERT_OK((*reader)->ReadAll([&](recon::Row& r) {
      ++pushed[r.key];
      numbers.insert(r.line);
      return absl::OkStatus();
    }));
    EXPECT_EQ(pushed, want) << "page " << page;
    ASSERT_EQ(numbers.size(), 54u);  // 38 single keys + 3 + 12 + p-005, numbered 1 … 54
    EXPECT_EQ(*numbers.begin(), 1);
    EXPECT_EQ(*numbers.rbegin(), 54);

    // An error of the consumer ends the read and is what ReadAll returns.
    reader = recon::OpenLedger(*store_, Query(), norm, page);
    ASSERT_TRUE(reader.ok()) << reader.status();
    int taken = 0;
    absl::Status stop = (*reader)->ReadAll([&](recon::Row&) {
      return ++taken == 7 ? absl::UnavailableError("disk full") : absl::OkStatus();
    });
    EXPECT_EQ(stop.code(), absl::StatusCode::kUnavailable);
    EXPECT_EQ(taken, 7);
  }
}

// A query without a compared column is refused by name, even when the ledger has
// no row to read (the pushed read sees the columns of an empty result too).
TEST_P(Recon, LedgerMissingColumnIsNamedOnAnEmptyLedger) {
  recon::StatusRules rules;
  absl::StatusOr<recon::ColumnMap> map = recon::ParseColumnMap("key=k,amount=a");
  ASSERT_TRUE(map.ok());
  recon::Normalizer norm(recon::Side::kLocal, *map, 0, absl::UTCTimeZone(), rules);
  const std::string k = mysql_ ? "`key`" : "key";
  absl::StatusOr<std::unique_ptr<recon::StatementReader>> reader =
      recon::OpenLedger(*store_, "SELECT order_no AS " + k + " FROM ledger", norm);
  ASSERT_TRUE(reader.ok()) << reader.status();
  absl::Status s = (*reader)->ReadAll([](recon::Row&) { return absl::OkStatus(); });
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("returns no column 'amount'"));
}

// An exact decimal column (PostgreSQL NUMERIC, MySQL DECIMAL) is read exactly: as a
// double, 1234567890123456.78 came back as ...456.75 and PostgreSQL's was refused.
// SQLite's NUMERIC affinity stores it as REAL, which is refused, naming the fix.
TEST_P(Recon, ExactDecimalColumnsAreReadExactly) {
  Sql("CREATE TABLE ledger_dec (order_no VARCHAR(64) NOT NULL, amount NUMERIC(20,2) NOT NULL)");
  Sql("INSERT INTO ledger_dec VALUES ('D-1', 1234567890123456.78), ('D-2', -0.10)");
  recon::StatusRules rules;
  absl::StatusOr<recon::ColumnMap> map = recon::ParseColumnMap("key=k,amount=a");
  ASSERT_TRUE(map.ok());
  recon::Normalizer norm(recon::Side::kLocal, *map, 0, absl::UTCTimeZone(), rules);
  const std::string k = mysql_ ? "`key`" : "key";
  absl::StatusOr<std::unique_ptr<recon::StatementReader>> reader = recon::OpenLedger(
      *store_, "SELECT order_no AS " + k + ", amount AS amount FROM ledger_dec", norm);
  ASSERT_TRUE(reader.ok()) << reader.status();
  std::map<std::string, std::string> amounts;
  absl::Status s = (*reader)->ReadAll([&](recon::Row& row) {
    amounts[row.key] = row.amount;
    return absl::OkStatus();
  });
  if (GetParam().name == std::string("sqlite")) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("CAST(amount AS TEXT)"));
    return;
  }
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(amounts["D-1"], "1234567890123456.78");
  EXPECT_EQ(amounts["D-2"], "-0.1");
}

// `idem serve`'s /metrics: no sample before recon made its table, then the last
// success of the source (an alarm when recon stops running).
TEST_P(Recon, ServeExportsTheLastSuccess) {
  const std::string bill = Day();
  ServeProcess serve(dir_.file("serve.err"));
  ASSERT_THAT(serve.Start({"--listen", "127.0.0.1:0", "--store", url_, "--tenant", "t:tok"}),
              ::testing::StartsWith("listening on "))
      << serve.stderr_text();
  auto scrape = [&] { return HttpGet(serve.port(), "/metrics"); };
  std::string metrics = scrape();
  EXPECT_THAT(metrics, HasSubstr("# TYPE idem_recon_last_success_timestamp_seconds gauge"));
  EXPECT_THAT(metrics, ::testing::Not(HasSubstr("idem_recon_last_success_timestamp_seconds{")));
  const int64_t before = absl::ToUnixSeconds(absl::Now());
  RunResult r = RunIdemIn(dir_.path(), Args(bill));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  metrics = scrape();
  const std::string series = "idem_recon_last_success_timestamp_seconds{source=\"wx\"} ";
  const size_t at = metrics.find(series);
  ASSERT_NE(at, std::string::npos) << metrics;
  const double value = std::stod(metrics.substr(at + series.size()));
  EXPECT_GE(value, static_cast<double>(before));
  EXPECT_LE(value, static_cast<double>(before + 60));
  // No URL for replays or re-pushes here: all five differences are open tickets.
  EXPECT_THAT(metrics,
              HasSubstr("idem_recon_open_tickets{source=\"wx\",class=\"amount_mismatch\"} 1\n"));
  EXPECT_THAT(metrics,
              HasSubstr("idem_recon_open_tickets{source=\"wx\",class=\"missing_local\"} 1\n"));
  EXPECT_EQ(serve.Stop(), 0) << serve.stderr_text();
}

TEST_P(Recon, ProgressLineOnStderrForBigStatements) {
  std::string bytes = "out_trade_no,total_fee,fee_type,trade_state,trade_time\n";
  for (int i = 0; i < 150000; ++i) {
    bytes += "B-" + std::to_string(i) + ",100,CNY,SUCCESS,2024-06-18 10:00:00\n";
  }
  RunResult r = RunIdemIn(dir_.path(), Args(Statement("big.csv", bytes), {"--dry-run"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("recon: read 100000 upstream, "));
  EXPECT_THAT(LastLine(r.out), HasSubstr("\"upstream_rows\":150000,\"local_rows\":0,\"matched\":0,"
                                         "\"missing_local\":150000"));
  RunResult small = RunIdemIn(dir_.path(), Args(Day(), {"--dry-run"}));
  EXPECT_EQ(small.err, "");
}

TEST_P(Recon, UsageErrors) {
  const std::string bill = Day();
  for (std::vector<std::string> extra :
       std::vector<std::vector<std::string>>{{"--on", "missing_upstream=replay"},
                                             {"--on", "missing_local=replay"},
                                             {"--from", "2024-06-18 00:00:00"},
                                             {"--tz", "Mars/Base"}}) {
    RunResult r = RunIdemIn(dir_.path(), Args(bill, extra));
    ExpectOneLineFailure(r, 2);
  }
  if (GetParam().name == "sqlite") {  // a password for a URL that takes none
    std::ofstream(dir_.file("pw")) << "secret\n";
    RunResult r = RunIdemIn(dir_.path(), Args(bill, {"--ledger-password-file", dir_.file("pw")}));
    ExpectOneLineFailure(r, 2);
    EXPECT_THAT(r.err, HasSubstr("which takes none"));
    EXPECT_THAT(r.err, ::testing::Not(HasSubstr("secret")));
  }
}

// `idem recon tickets`: list (open by default, --all), show and close, in the store
// the runs use, naming it; closing needs a note, is recorded with its time, and a
// second close or an unknown id is an error. A rerun does not reopen a closed ticket
// and its report shows each row's ticket as the CLI does.
TEST_P(Recon, TicketsListShowCloseAndTheReportShareOneLifecycle) {
  const std::string bill = Day();
  RunResult run = RunIdemIn(dir_.path(), Args(bill));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const std::string id = TicketIdWhere("class = 'missing_upstream'");
  ASSERT_EQ(id, recon::TicketId("wx", "missing_upstream", "R-6"));

  RunResult list = Tickets("list", {});
  ASSERT_EQ(list.exit_code, 0) << list.err;
  EXPECT_THAT(list.out,
              HasSubstr("store " + RedactStoreUrl(bare_url_) + ": 5 open or pending ticket(s)\n"));
  EXPECT_THAT(list.out, HasSubstr("  " + id + "  open  ticket  missing_upstream  wx  R-6  "));
  EXPECT_EQ(list.err, "");

  RunResult show = Tickets("show", {id, "--json"});
  ASSERT_EQ(show.exit_code, 0) << show.err;
  const nlohmann::json shown = nlohmann::json::parse(show.out);
  EXPECT_EQ(shown["store"], RedactStoreUrl(bare_url_));
  EXPECT_EQ(shown["ticket"]["id"], id);
  EXPECT_EQ(shown["ticket"]["key"], "R-6");
  EXPECT_EQ(shown["ticket"]["state"], "open");
  EXPECT_TRUE(shown["ticket"]["note"].is_null());

  // Closing: a note is required, and bounded.
  ExpectOneLineFailure(Tickets("close", {id}), 2);
  ExpectOneLineFailure(Tickets("close", {id, "--note", "  "}), 2);
  ExpectOneLineFailure(Tickets("close", {id, "--note", std::string(2001, 'n')}), 2);
  ExpectOneLineFailure(Tickets("close", {id, "--note", "a\x1b[2Jb"}), 2);
  const int64_t before = absl::ToUnixMicros(absl::Now());
  RunResult close = Tickets("close", {id, "--note", "refunded by hand, case 4711", "--json"});
  ASSERT_EQ(close.exit_code, 0) << close.err;
  const nlohmann::json closed = nlohmann::json::parse(close.out);
  EXPECT_EQ(closed["ticket"]["state"], "closed");
  EXPECT_EQ(closed["ticket"]["note"], "refunded by hand, case 4711");
  EXPECT_EQ(Count("SELECT COUNT(*) FROM recon_ticket WHERE state = 'closed' AND note = "
                  "'refunded by hand, case 4711' AND closed_at >= " +
                  std::to_string(before)),
            1);
  RunResult again = Tickets("close", {id, "--note", "twice"});
  ExpectOneLineFailure(again, 1);
  EXPECT_THAT(again.err, HasSubstr("ticket " + id + " is closed already"));
  EXPECT_THAT(again.err, HasSubstr("refunded by hand, case 4711"));
  RunResult missing = Tickets("close", {"000000000000", "--note", "x"});
  ExpectOneLineFailure(missing, 1);
  EXPECT_THAT(missing.err, HasSubstr("no ticket 000000000000 in " + RedactStoreUrl(bare_url_)));
  ExpectOneLineFailure(Tickets("show", {"000000000000"}), 1);

  RunResult open = Tickets("list", {"--json"});
  ASSERT_EQ(open.exit_code, 0) << open.err;
  EXPECT_EQ(nlohmann::json::parse(open.out)["tickets"].size(), 4u);
  RunResult all = Tickets("list", {"--all"});
  ASSERT_EQ(all.exit_code, 0) << all.err;
  EXPECT_THAT(all.out, HasSubstr(": 5 ticket(s)\n"));
  EXPECT_THAT(all.out, HasSubstr(id + "  closed  ticket  missing_upstream  wx  R-6  "));
  EXPECT_THAT(all.out, HasSubstr("[closed: refunded by hand, case 4711]"));

  // A rerun adds nothing and reopens nothing; its report shows the states.
  RunResult rerun = RunIdemIn(dir_.path(), Args(bill, {"--report", dir_.file("report.html")}));
  ASSERT_EQ(rerun.exit_code, 0) << rerun.err;
  EXPECT_THAT(rerun.out, HasSubstr("0 new ticket/action row(s)"));
  EXPECT_EQ(Count("SELECT COUNT(*) FROM recon_ticket WHERE state = 'closed'"), 1);
  const std::string html = ReadWholeFile(dir_.file("report.html"));
  EXPECT_THAT(html, HasSubstr("<span class=\"ticket\" data-state=\"closed\">" + id +
                              " ticket closed</span><br><small class=\"closed\">closed "));
  EXPECT_THAT(html, HasSubstr(": refunded by hand, case 4711</small>"));
  EXPECT_THAT(html,
              HasSubstr("<span class=\"ticket\" data-state=\"open\">" +
                        recon::TicketId("wx", "amount_mismatch", "R-4") + " ticket open</span>"));
}

// list and show never create a store: a missing one, or one no run recorded in,
// is an error naming it, and nothing is made.
TEST_P(Recon, TicketsNeverCreateAStore) {
  RunResult none = RunIdemIn(dir_.path(), {"recon", "tickets", "list"});
  ExpectOneLineFailure(none, 1);
  EXPECT_THAT(none.err, HasSubstr("sqlite://./idem-recon.db"));
  EXPECT_THAT(none.err, HasSubstr("no `idem recon` run has recorded there"));
  struct stat st;
  EXPECT_NE(stat(dir_.file("idem-recon.db").c_str(), &st), 0);
  ExpectOneLineFailure(RunIdemIn(dir_.path(), {"recon", "tickets", "show", "abc"}), 1);
  ExpectOneLineFailure(RunIdemIn(dir_.path(), {"recon", "tickets", "close", "abc", "--note", "x"}),
                       1);
  EXPECT_NE(stat(dir_.file("idem-recon.db").c_str(), &st), 0);
  // The ledger's database: there, but without recon's tables.
  const std::vector<std::string> before = Snapshot();
  RunResult empty = Tickets("list", {});
  ExpectOneLineFailure(empty, 1);
  EXPECT_THAT(empty.err, HasSubstr("has no recon tickets"));
  EXPECT_THAT(empty.err, HasSubstr(RedactStoreUrl(bare_url_)));
  EXPECT_EQ(Snapshot(), before);
}

// A recon_ticket of an earlier version (without ids, refusals or notes) gets its
// new columns and ids on the next run, and keeps its rows.
TEST_P(Recon, TicketTableOfAnEarlierVersionIsUpgraded) {
  const std::string key = mysql_ ? "`key` VARBINARY(512)" : "\"key\" TEXT";
  const std::string big = "BIGINT";
  const std::string text = mysql_ ? "VARCHAR(255)" : "TEXT";
  Sql("CREATE TABLE recon_ticket (source " + text + " NOT NULL, " + key + " NOT NULL, class " +
      text + " NOT NULL, severity " + text + " NOT NULL, action " + text + " NOT NULL, state " +
      text + " NOT NULL, detail " + text + " NOT NULL, payload " + text + " NOT NULL, attempts " +
      big + " NOT NULL, last_error " + text + " NOT NULL, run_id " + text +
      " NOT NULL, created_at " + big + " NOT NULL, updated_at " + big +
      " NOT NULL, PRIMARY KEY (source, " + (mysql_ ? "`key`" : "\"key\"") + ", class))");
  Sql("INSERT INTO recon_ticket VALUES ('wx', 'OLD-1', 'missing_upstream', 'normal', 'ticket', "
      "'open', 'old', '{}', 0, '', 'old', 1, 1)");
  const std::string old_id = recon::TicketId("wx", "missing_upstream", "OLD-1");
  RunResult before = Tickets("list", {});  // read-only: read as it is
  ASSERT_EQ(before.exit_code, 0) << before.err;
  EXPECT_THAT(before.out, HasSubstr(old_id + "  open"));
  RunResult show = Tickets("show", {old_id});
  ExpectOneLineFailure(show, 1);
  EXPECT_THAT(show.err, HasSubstr("is from an earlier version, without ticket ids"));
  RunResult close = Tickets("close", {old_id, "--note", "gone"});  // upgrades it first
  EXPECT_EQ(close.exit_code, 0) << close.err;
  EXPECT_EQ(TicketIdWhere("run_id = 'old'"), old_id);
  RunResult run = RunIdemIn(dir_.path(), Args(Day()));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("5 new ticket/action row(s)"));
  EXPECT_EQ(Count("SELECT COUNT(*) FROM recon_ticket WHERE state = 'open'"), 5);
  EXPECT_EQ(Count("SELECT COUNT(*) FROM recon_ticket WHERE state = 'closed' AND note = 'gone'"), 1);
}

// Replay headers come from --replay-header-file or IDEM_RECON_REPLAY_HEADERS and go
// with every replay and re-push; a bad line is refused with its file and line before
// anything is read or sent, and a file another user could change is refused.
TEST_P(Recon, ReplayHeadersFromAFileOrTheEnvironmentAreCheckedBeforeAnythingIsSent) {
  const std::string bill = Day();
  Receiver receiver;
  const std::vector<std::string> urls = {"--replay-url", receiver.url("/replay"), "--repush-url",
                                         receiver.url("/repush")};
  auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> a = urls;
    a.insert(a.end(), more.begin(), more.end());
    return Args(bill, a);
  };
  struct Bad {
    std::string bytes;
    std::string line;
    std::string why;
  };
  for (const Bad& bad : std::vector<Bad>{
           {"# ok\nAuthorization: Bearer a\nBad Name: x\n", ":3: ", "is not a token"},
           {"\nX-A: a\x01"
            "b\n",
            ":2: ", "the value of X-A holds the control character \\x01"},
           {"X-A: a\rX-Injected: 1\n", ":1: ", "the value of X-A holds the control character \\r"},
           {"Content-Length: 5\n", ":1: ", "Content-Length is set by recon itself"},
           {"idempotency-key: K\n", ":1: ", "is set by recon itself"},
           {"X-A: 1\nx-a: 2\n", ":2: ", "x-a is given twice"},
           {"no colon here\n", ":1: ", "not a header line"},
           {"X-A: " + std::string(5000, 'v') + "\n", ":1: ", "the value of X-A"},
           {std::string(20000, '#'), "", "longer than 16384 bytes"}}) {
    const std::string file = PrivateFile("headers", bad.bytes);
    RunResult r = RunIdemIn(dir_.path(), with({"--replay-header-file", file}));
    ExpectOneLineFailure(r, 2);
    EXPECT_THAT(r.err, HasSubstr(file + bad.line)) << bad.bytes.substr(0, 40);
    EXPECT_THAT(r.err, HasSubstr(bad.why));
    EXPECT_THAT(r.err, ::testing::Not(HasSubstr("Bearer a")));
  }
  setenv("IDEM_RECON_REPLAY_HEADERS", "Authorization: Bearer env\nX-B:\x7f", 1);
  RunResult env_bad = RunIdemIn(dir_.path(), with({}));
  ExpectOneLineFailure(env_bad, 2);
  EXPECT_THAT(env_bad.err, HasSubstr("IDEM_RECON_REPLAY_HEADERS:2: the value of X-B"));
  RunResult both =
      RunIdemIn(dir_.path(), with({"--replay-header-file", PrivateFile("h", "X-A: 1")}));
  ExpectOneLineFailure(both, 2);
  EXPECT_THAT(both.err, HasSubstr("are both set"));
  unsetenv("IDEM_RECON_REPLAY_HEADERS");
  RunResult empty = RunIdemIn(dir_.path(), with({"--replay-header-file", PrivateFile("e", "#\n")}));
  ExpectOneLineFailure(empty, 2);
  EXPECT_THAT(empty.err, HasSubstr(dir_.file("e") + ": holds no header"));
  mkdir(dir_.file("folder").c_str(), 0700);
  RunResult folder = RunIdemIn(dir_.path(), with({"--replay-header-file", dir_.file("folder")}));
  ExpectOneLineFailure(folder, 1);
  EXPECT_THAT(folder.err, HasSubstr(dir_.file("folder") + ": cannot be read"));
  RunResult writable =
      RunIdemIn(dir_.path(), with({"--replay-header-file", PrivateFile("w", "X-A: 1\n", 0666)}));
  ExpectOneLineFailure(writable, 1);
  EXPECT_THAT(writable.err, HasSubstr("replay header file " + dir_.file("w")));
  EXPECT_EQ(receiver.connections(), 0);
  EXPECT_EQ(Count("SELECT COUNT(*) FROM recon_ticket"), -1);  // nothing written

  // Readable by others: sent, with a warning.
  const std::string file = PrivateFile(
      "headers", "# the receiver's token\n\nAuthorization:  Bearer s3cret \r\nX-Tenant: shop\n",
      0644);
  RunResult r = RunIdemIn(dir_.path(), with({"--replay-header-file", file}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("idem: warning: replay header file " + file));
  EXPECT_THAT(r.err, ::testing::Not(HasSubstr("s3cret")));
  const std::string received = receiver.received();
  EXPECT_THAT(received, HasSubstr("\r\nAuthorization: Bearer s3cret\r\nX-Tenant: shop\r\n"));
  EXPECT_EQ(receiver.connections(), 2);  // the replay of R-2 and the re-push of R-3
  for (const char* path : {"/replay", "/repush"}) {
    EXPECT_EQ(receiver.keys(path).size(), 1u) << path;
  }
  // From the environment, for the next run's (new) replay.
  Sql("DELETE FROM recon_ticket");
  setenv("IDEM_RECON_REPLAY_HEADERS", "Authorization: Bearer from-env", 1);
  RunResult env = RunIdemIn(dir_.path(), with({}));
  unsetenv("IDEM_RECON_REPLAY_HEADERS");
  ASSERT_EQ(env.exit_code, 0) << env.err;
  EXPECT_THAT(receiver.received().substr(received.size()),
              HasSubstr("\r\nAuthorization: Bearer from-env\r\n"));
}

// A replay behind `idem proxy --client-header Authorization` in front of an API that
// checks the token: with the wrong token it is refused, and the run says so with
// the status and the first bytes of the answer (escaped) in its text, its JSON, its
// report and the ticket; with the right one the next run sends it and it is done.
TEST_P(Recon, ReplayThroughAnAuthenticatedProxyRefusedThenAccepted) {
  ASSERT_STRNE(IDEM_TEST_UPSTREAM, "") << "built without idem-test-upstream";
  const std::string bill = Day();
  ServeProcess upstream(dir_.file("upstream.err"));
  ASSERT_THAT(upstream.StartProgram({IDEM_TEST_UPSTREAM}), ::testing::StartsWith("listening on "));
  ServeProcess proxy(dir_.file("proxy.err"));
  ASSERT_THAT(
      proxy.StartProgram({IdemBinary(), "proxy", "--listen", "127.0.0.1:0", "--upstream",
                          "http://127.0.0.1:" + std::to_string(upstream.port()), "--store",
                          "sqlite://" + dir_.file("proxy.db"), "--client-header", "Authorization"}),
      ::testing::StartsWith("listening on "))
      << proxy.stderr_text();
  const std::vector<std::string> replay = {
      "--replay-url",
      "http://127.0.0.1:" + std::to_string(proxy.port()) + "/auth/good/replay",
      "--replay-header-file",
      PrivateFile("headers", "Authorization: Bearer wrong\n"),
      "--report",
      dir_.file("report.html")};
  const std::string id = recon::TicketId("wx", "missing_local", "R-2");

  RunResult refused = RunIdemIn(dir_.path(), Args(bill, replay));
  EXPECT_EQ(refused.exit_code, 1) << refused.err;
  const std::string excerpt =
      "{\"error\":\"unauthorized\"}\\r\\nX-Forged: 1\\x1B[2J" + std::string(159, 'x') + "…";
  EXPECT_THAT(refused.out, HasSubstr("  not done: replay of R-2 (missing_local, ticket " + id +
                                     "): HTTP 401: " + excerpt + "\n"));
  EXPECT_THAT(refused.err, HasSubstr("first: replay of R-2 (missing_local, ticket " + id +
                                     "): HTTP 401: " + excerpt));
  EXPECT_EQ(std::count(refused.err.begin(), refused.err.end(), '\n'), 1) << refused.err;
  const nlohmann::json line = nlohmann::json::parse(LastLine(refused.out));
  ASSERT_EQ(line["failed_actions"].size(), 1u) << LastLine(refused.out);
  EXPECT_EQ(line["failed_actions"][0]["ticket"], id);
  EXPECT_EQ(line["failed_actions"][0]["key"], "R-2");
  EXPECT_EQ(line["failed_actions"][0]["action"], "replay");
  EXPECT_EQ(line["failed_actions"][0]["http_status"], 401);
  EXPECT_EQ(line["failed_actions"][0]["response"], excerpt);
  EXPECT_EQ(Count("SELECT COUNT(*) FROM recon_ticket WHERE id = '" + id +
                  "' AND state = 'pending' AND http_status = 401 AND attempts = 1"),
            1);
  const std::string html = ReadWholeFile(dir_.file("report.html"));
  EXPECT_THAT(html, HasSubstr("<span class=\"ticket\" data-state=\"pending\">" + id +
                              " replay pending</span><br><small class=\"refused\">HTTP 401: "
                              "{&quot;error&quot;:&quot;unauthorized&quot;}\\r\\nX-Forged: 1"));
  RunResult show = Tickets("show", {id});
  ASSERT_EQ(show.exit_code, 0) << show.err;
  EXPECT_THAT(show.out, HasSubstr("  refused: HTTP 401: " + excerpt + "\n"));

  // The right token: the pending replay is sent again and accepted.
  PrivateFile("headers", "Authorization: Bearer good\n");
  RunResult accepted = RunIdemIn(dir_.path(), Args(bill, replay));
  ASSERT_EQ(accepted.exit_code, 0) << accepted.err << accepted.out;
  EXPECT_THAT(accepted.out,
              HasSubstr("0 new ticket/action row(s), 1 replay/re-push sent, 0 pending"));
  EXPECT_EQ(LastLine(accepted.out), kDayJson);
  RunResult done = Tickets("show", {id, "--json"});
  ASSERT_EQ(done.exit_code, 0) << done.err;
  const nlohmann::json ticket = nlohmann::json::parse(done.out)["ticket"];
  EXPECT_EQ(ticket["state"], "done");
  EXPECT_EQ(ticket["attempts"], 2);
  EXPECT_TRUE(ticket["http_status"].is_null());
  EXPECT_THAT(HttpGet(upstream.port(), "/count"), ::testing::EndsWith("\r\n\r\n{\"effects\":1}"));
}

INSTANTIATE_TEST_SUITE_P(Backends, Recon, ::testing::ValuesIn(Backends()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace idem::testing
