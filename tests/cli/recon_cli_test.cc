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
#include "idem/idem.h"
#include "recon/fields.h"
#include "recon/ledger_reader.h"
#include "recon/tables.h"
#include "http/client/upstream.h"
#include "store/backend.h"
#include "testing/idem_process.h"
#include "testing/status_matchers.h"
#include "testing/temp_dir.h"

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

  // Args() without its --store (and the store's password file): recon's default store.
  static std::vector<std::string> WithoutStore(std::vector<std::string> args) {
    for (const char* option : {"--store", "--store-password-file"}) {
      auto at = std::find(args.begin(), args.end(), option);
      if (at != args.end()) args.erase(at, at + 2);
    }
    return args;
  }

  // The ledger database as it is: every table's name and every row of each (as
  // text, sorted), by the connection of a user that can write there.
  std::vector<std::string> Snapshot() {
    const std::string dialect(::idem::Backend(*store_).sql_dialect()->name());
    const std::string tables =
        dialect == "sqlite"   ? "SELECT name FROM sqlite_master ORDER BY name"
        : dialect == "mysql" ? "SELECT table_name FROM information_schema.tables WHERE "
                               "table_schema = DATABASE() ORDER BY table_name"
                             : "SELECT table_name::text FROM information_schema.tables WHERE "
                               "table_schema = current_schema() ORDER BY table_name";
    std::vector<std::string> out;
    absl::StatusOr<std::unique_ptr<StoreTransaction>> tx = store_->Begin();
    if (!tx.ok()) return {"cannot begin: " + std::string(tx.status().message())};
    absl::StatusOr<Rows> names = (*tx)->Query(tables);
    if (!names.ok()) return {"cannot list tables: " + std::string(names.status().message())};
    for (const std::vector<Value>& name : names->rows) {
      const std::string table = name[0].is_text() ? name[0].as_text() : name[0].as_blob();
      out.push_back("table " + table);
      if (table.starts_with("sqlite_")) continue;
      absl::StatusOr<Rows> rows = (*tx)->Query("SELECT * FROM " + table);
      if (!rows.ok()) continue;  // an index of sqlite_master
      std::vector<std::string> lines;
      for (const std::vector<Value>& row : rows->rows) {
        std::string line = table + ":";
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
      out.insert(out.end(), lines.begin(), lines.end());
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
  Receiver receiver;
  const std::vector<std::string> replay = {"--replay-url", receiver.url("/replay")};

  RunResult own = RunIdemIn(dir_.path(), WithoutStore(Args(bill, replay)));
  ASSERT_EQ(own.exit_code, 0) << own.err;
  EXPECT_EQ(LastLine(own.out), kDayJson);
  EXPECT_THAT(own.out, HasSubstr("5 new ticket/action row(s), 1 replay/re-push sent, 0 pending"));
  EXPECT_EQ(Snapshot(), before);

  const std::string other = "sqlite://" + dir_.file("recon-state.db");
  RunResult named = RunIdemIn(dir_.path(), WithoutStore(Args(bill, {"--store", other,
                                                                    replay[0], replay[1]})));
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
       "{\"out_trade_no\":\"" + jsonl_injected +
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
    RunResult r = RunIdemIn(dir_.path(),
                       Args(Statement(c.name, c.bytes), {"--replay-url", receiver.url("/replay")}));
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
                     "{\"out_trade_no\":\"" + key + "\",\"total_fee\":1}\n")));
  ExpectOneLineFailure(jsonl, 1);
  EXPECT_THAT(jsonl.err, HasSubstr("huge.jsonl:2: a line longer than 1 MiB: refused"));
  RunResult csv = RunIdemIn(
      dir_.path(),
      Args(Statement("huge.csv", "out_trade_no,total_fee,fee_type,trade_state,trade_time\n"
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
                               "ticket " + id + "): not sent: key holds"));
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
  auto scrape = [&] {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(serve.port()));
    std::string out;
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
      const std::string req = "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
      (void)!write(fd, req.data(), req.size());
      char buf[8192];
      ssize_t n;
      while ((n = read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
    }
    close(fd);
    return out;
  };
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

INSTANTIATE_TEST_SUITE_P(Backends, Recon, ::testing::ValuesIn(Backends()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace idem::testing
