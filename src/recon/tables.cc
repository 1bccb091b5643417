#include "recon/tables.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include "store/backend.h"

namespace idem::recon {
namespace {

bool IsMysql(const SqlDialect& d) { return d.name() == "mysql"; }

// `key` is reserved in MySQL.
std::string KeyCol(const SqlDialect& d) { return IsMysql(d) ? "`key`" : "\"key\""; }

absl::StatusOr<const SqlDialect*> DialectOf(Store& store) {
  const SqlDialect* d = Backend(store).sql_dialect();
  if (d == nullptr) {
    return absl::InvalidArgumentError("the store " + std::string(store.url()) +
                                      " runs no SQL: recon keeps its tickets and watermark in "
                                      "sqlite://, postgres:// or mysql://");
  }
  return d;
}

// Runs `fn` in one transaction and commits it.
template <typename Fn>
absl::Status InTransaction(Store& store, Fn fn) {
  absl::StatusOr<std::unique_ptr<StoreTransaction>> tx = store.Begin();
  if (!tx.ok()) return tx.status();
  absl::Status s = fn(**tx);
  if (!s.ok()) {
    (*tx)->Rollback();
    return s;
  }
  return (*tx)->Commit();
}

bool NoTable(const absl::Status& s) {
  const std::string m(s.message());
  return m.find("no such table") != std::string::npos ||
         m.find("does not exist") != std::string::npos ||
         m.find("doesn't exist") != std::string::npos;
}

std::string Text(const Value& v) {
  if (v.is_text()) return v.as_text();
  if (v.is_blob()) return v.as_blob();
  if (v.is_int()) return std::to_string(v.as_int());
  return "";
}
int64_t Int(const Value& v) {
  if (v.is_int()) return v.as_int();
  if (v.is_text()) return std::stoll(v.as_text());
  return 0;
}

}  // namespace

absl::Status EnsureTables(Store& store) {
  absl::StatusOr<const SqlDialect*> d = DialectOf(store);
  if (!d.ok()) return d.status();
  const bool mysql = IsMysql(**d);
  const std::string text = mysql ? "TEXT" : "TEXT";
  const std::string big = mysql ? "BIGINT" : (*d)->name() == "sqlite" ? "INTEGER" : "BIGINT";
  const std::string src = mysql ? "VARCHAR(128)" : "TEXT";
  const std::string key = mysql ? "VARBINARY(512)" : "TEXT";
  const std::string cls = mysql ? "VARCHAR(32)" : "TEXT";
  const std::string tail = mysql ? " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4" : "";
  const std::string ticket =
      "CREATE TABLE IF NOT EXISTS recon_ticket (source " + src + " NOT NULL, " + KeyCol(**d) + " " +
      key + " NOT NULL, class " + cls + " NOT NULL, severity " + cls + " NOT NULL, action " + cls +
      " NOT NULL, state " + cls + " NOT NULL, detail " + text + " NOT NULL, payload " + text +
      " NOT NULL, attempts " + big + " NOT NULL, last_error " + text + " NOT NULL, run_id " + cls +
      " NOT NULL, created_at " + big + " NOT NULL, updated_at " + big +
      " NOT NULL, PRIMARY KEY (source, " + KeyCol(**d) + ", class))" + tail;
  const std::string watermark =
      "CREATE TABLE IF NOT EXISTS recon_watermark (source " + src + " NOT NULL PRIMARY KEY, upto " +
      big + " NOT NULL, last_success_at " + big + " NOT NULL, run_id " + cls + " NOT NULL)" + tail;
  return InTransaction(store, [&](StoreTransaction& tx) -> absl::Status {
    absl::StatusOr<int64_t> a = tx.Exec(ticket);
    if (!a.ok()) return a.status();
    return tx.Exec(watermark).status();
  });
}

absl::StatusOr<std::vector<Watermark>> ReadWatermarks(Store& store) {
  std::vector<Watermark> out;
  if (Backend(store).sql_dialect() == nullptr) return out;
  absl::StatusOr<std::unique_ptr<StoreTransaction>> tx = store.Begin();
  if (!tx.ok()) return tx.status();
  absl::StatusOr<Rows> rows = (*tx)->Query(
      "SELECT source, upto, last_success_at, run_id FROM recon_watermark ORDER BY source");
  (*tx)->Rollback();
  if (!rows.ok()) {
    if (NoTable(rows.status())) return out;
    return rows.status();
  }
  for (const std::vector<Value>& r : rows->rows) {
    out.push_back(Watermark{Text(r[0]), Int(r[1]), Int(r[2]), Text(r[3])});
  }
  return out;
}

absl::StatusOr<std::optional<Watermark>> ReadWatermark(Store& store, std::string_view source) {
  absl::StatusOr<std::vector<Watermark>> all = ReadWatermarks(store);
  if (!all.ok()) return all.status();
  for (Watermark& w : *all) {
    if (w.source == source) return std::optional<Watermark>(std::move(w));
  }
  return std::optional<Watermark>();
}

absl::Status WriteWatermark(Store& store, const Watermark& w) {
  absl::StatusOr<const SqlDialect*> d = DialectOf(store);
  if (!d.ok()) return d.status();
  return InTransaction(store, [&](StoreTransaction& tx) -> absl::Status {
    const std::vector<Value> insert = {w.source, w.upto_us, w.last_success_at_us, w.run_id};
    absl::StatusOr<int64_t> n = tx.Exec(
        (*d)->KeepExisting("INSERT INTO recon_watermark (source, upto, last_success_at, run_id) "
                           "VALUES (?, ?, ?, ?)",
                           "source"),
        insert);
    if (!n.ok()) return n.status();
    if (*n == 1) return absl::OkStatus();
    const std::vector<Value> update = {w.upto_us, w.upto_us, w.last_success_at_us, w.run_id,
                                       w.source};
    return tx
        .Exec(
            "UPDATE recon_watermark SET upto = CASE WHEN upto > ? THEN upto ELSE ? END, "
            "last_success_at = ?, run_id = ? WHERE source = ?",
            update)
        .status();
  });
}

absl::StatusOr<int64_t> InsertTickets(Store& store, const std::vector<Ticket>& tickets) {
  absl::StatusOr<const SqlDialect*> d = DialectOf(store);
  if (!d.ok()) return d.status();
  const std::string sql = (*d)->KeepExisting(
      "INSERT INTO recon_ticket (source, " + KeyCol(**d) +
          ", class, severity, action, state, detail, payload, attempts, last_error, run_id, "
          "created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
      "source");
  int64_t inserted = 0;
  constexpr size_t kBatch = 500;
  for (size_t begin = 0; begin < tickets.size(); begin += kBatch) {
    int64_t batch = 0;
    absl::Status s = InTransaction(store, [&](StoreTransaction& tx) -> absl::Status {
      batch = 0;
      for (size_t i = begin; i < std::min(tickets.size(), begin + kBatch); ++i) {
        const Ticket& t = tickets[i];
        const std::vector<Value> v = {t.source,       t.key,        t.cls,    t.severity,
                                      t.action,       t.state,      t.detail, t.payload,
                                      t.attempts,     t.last_error, t.run_id, t.created_at_us,
                                      t.created_at_us};
        absl::StatusOr<int64_t> n = tx.Exec(sql, v);
        if (!n.ok()) return n.status();
        batch += *n == 1 ? 1 : 0;
      }
      return absl::OkStatus();
    });
    if (!s.ok()) return s;
    inserted += batch;
  }
  return inserted;
}

absl::StatusOr<std::vector<Ticket>> PendingActions(Store& store, std::string_view source) {
  absl::StatusOr<const SqlDialect*> d = DialectOf(store);
  if (!d.ok()) return d.status();
  std::vector<Ticket> out;
  absl::StatusOr<std::unique_ptr<StoreTransaction>> tx = store.Begin();
  if (!tx.ok()) return tx.status();
  const std::vector<Value> v = {std::string(source)};
  absl::StatusOr<Rows> rows =
      (*tx)->Query("SELECT " + KeyCol(**d) +
                       ", class, action, payload, attempts FROM recon_ticket WHERE "
                       "source = ? AND state = 'pending' ORDER BY " +
                       KeyCol(**d) + ", class",
                   v);
  (*tx)->Rollback();
  if (!rows.ok()) return rows.status();
  for (const std::vector<Value>& r : rows->rows) {
    Ticket t;
    t.source = std::string(source);
    t.key = Text(r[0]);
    t.cls = Text(r[1]);
    t.action = Text(r[2]);
    t.payload = Text(r[3]);
    t.attempts = Int(r[4]);
    t.state = "pending";
    out.push_back(std::move(t));
  }
  return out;
}

absl::Status RecordAttempt(Store& store, const Ticket& t, std::string_view state,
                           std::string_view last_error, int64_t now_us) {
  absl::StatusOr<const SqlDialect*> d = DialectOf(store);
  if (!d.ok()) return d.status();
  return InTransaction(store, [&](StoreTransaction& tx) -> absl::Status {
    const std::vector<Value> v = {
        std::string(state), std::string(last_error), now_us, t.source, t.key, t.cls};
    return tx
        .Exec(
            "UPDATE recon_ticket SET state = ?, attempts = attempts + 1, last_error = ?, "
            "updated_at = ? WHERE source = ? AND " +
                KeyCol(**d) + " = ? AND class = ?",
            v)
        .status();
  });
}

absl::StatusOr<int64_t> CountTickets(Store& store, std::string_view source) {
  absl::StatusOr<std::unique_ptr<StoreTransaction>> tx = store.Begin();
  if (!tx.ok()) return tx.status();
  const std::vector<Value> v = {std::string(source)};
  absl::StatusOr<Rows> rows = (*tx)->Query("SELECT COUNT(*) FROM recon_ticket WHERE source = ?", v);
  (*tx)->Rollback();
  if (!rows.ok()) return rows.status();
  return rows->rows.empty() ? 0 : Int(rows->rows[0][0]);
}

}  // namespace idem::recon

namespace idem::recon {

namespace {

std::string Label(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out.push_back('\\');
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out.push_back(c);
  }
  return out;
}

}  // namespace

std::string RenderReconMetrics(Store& store) {
  std::string out =
      "# HELP idem_recon_last_success_timestamp_seconds Unix time of the last successful "
      "idem recon run of each source\n"
      "# TYPE idem_recon_last_success_timestamp_seconds gauge\n";
  absl::StatusOr<std::vector<Watermark>> marks = ReadWatermarks(store);
  if (!marks.ok() || marks->empty()) return out;  // no samples: no table, no SQL, store down
  for (const Watermark& w : *marks) {
    char value[48];
    std::snprintf(value, sizeof value, "%lld.%06lld",
                  static_cast<long long>(w.last_success_at_us / 1000000),
                  static_cast<long long>(w.last_success_at_us % 1000000));
    out += "idem_recon_last_success_timestamp_seconds{source=\"" + Label(w.source) + "\"} " +
           value + "\n";
  }
  // The tickets a person has to look at (and actions not yet done), by class: an
  // amount_mismatch here is an alarm: money moved by a different amount.
  absl::StatusOr<std::unique_ptr<StoreTransaction>> tx = store.Begin();
  if (!tx.ok()) return out;
  absl::StatusOr<Rows> open = (*tx)->Query(
      "SELECT source, class, COUNT(*) FROM recon_ticket WHERE state <> 'done' GROUP BY source, "
      "class ORDER BY source, class");
  (*tx)->Rollback();
  if (!open.ok()) return out;
  out +=
      "# HELP idem_recon_open_tickets Differences recon found that are not settled (open "
      "tickets, pending replays and re-pushes)\n"
      "# TYPE idem_recon_open_tickets gauge\n";
  for (const std::vector<Value>& r : open->rows) {
    out += "idem_recon_open_tickets{source=\"" + Label(Text(r[0])) + "\",class=\"" +
           Label(Text(r[1])) + "\"} " + std::to_string(Int(r[2])) + "\n";
  }
  return out;
}

}  // namespace idem::recon
