#include "recon/tables.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include "idem/fingerprint.h"
#include "idem/key.h"
#include "recon/recon_time.h"
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

// The columns recon_ticket gained after its first version, with their types (for
// CREATE TABLE and for ALTER TABLE … ADD COLUMN on an earlier table).
struct NewColumn {
  const char* name;
  std::string type;
};
std::vector<NewColumn> NewTicketColumns(const SqlDialect& d) {
  const bool mysql = IsMysql(d);
  const std::string big = d.name() == "sqlite" ? "INTEGER" : "BIGINT";
  // MySQL gives a TEXT column no DEFAULT; it fills '' in existing rows itself.
  const std::string text = mysql ? "TEXT NOT NULL" : "TEXT NOT NULL DEFAULT ''";
  return {{"id", mysql ? "VARCHAR(16) NOT NULL DEFAULT ''" : "TEXT NOT NULL DEFAULT ''"},
          {"http_status", big + " NOT NULL DEFAULT 0"},
          {"response", text},
          {"note", text},
          {"closed_at", big + " NOT NULL DEFAULT 0"}};
}

// Whether recon_ticket has `column` (a query naming it runs).
bool HasColumn(Store& store, const std::string& column) {
  absl::StatusOr<std::unique_ptr<StoreTransaction>> tx = store.Begin();
  if (!tx.ok()) return false;
  const bool ok = (*tx)->Query("SELECT " + column + " FROM recon_ticket WHERE 1 = 0").ok();
  (*tx)->Rollback();
  return ok;
}

// A recon_ticket of an earlier version gets the columns it lacks, and its rows
// their ids.
absl::Status UpgradeTicketTable(Store& store, const SqlDialect& d) {
  for (const NewColumn& c : NewTicketColumns(d)) {
    if (HasColumn(store, c.name)) continue;
    std::string sql = "ALTER TABLE recon_ticket ADD COLUMN " + std::string(c.name) + " " + c.type;
    if (IsMysql(d) && std::string_view(c.name) == "id") sql += ", ADD KEY recon_ticket_id (id)";
    absl::Status s =
        InTransaction(store, [&](StoreTransaction& tx) { return tx.Exec(sql).status(); });
    if (!s.ok()) return s;
  }
  // Rows without an id (an earlier version's, also when a run stopped between
  // adding the column and filling it): in batches, so memory stays bounded.
  const std::string without_id =
      "SELECT source, " + KeyCol(d) + ", class FROM recon_ticket WHERE id = '' LIMIT 500";
  const std::string set_id =
      "UPDATE recon_ticket SET id = ? WHERE source = ? AND " + KeyCol(d) + " = ? AND class = ?";
  for (;;) {
    absl::StatusOr<std::unique_ptr<StoreTransaction>> tx = store.Begin();
    if (!tx.ok()) return tx.status();
    absl::StatusOr<Rows> rows = (*tx)->Query(without_id);
    (*tx)->Rollback();
    if (!rows.ok()) return rows.status();
    if (rows->rows.empty()) return absl::OkStatus();
    int64_t changed = 0;
    absl::Status s = InTransaction(store, [&](StoreTransaction& tx) -> absl::Status {
      changed = 0;
      for (const std::vector<Value>& r : rows->rows) {
        const std::string source = Text(r[0]), key = Text(r[1]), cls = Text(r[2]);
        absl::StatusOr<int64_t> n = tx.Exec(set_id, {TicketId(source, cls, key), source, key, cls});
        if (!n.ok()) return n.status();
        changed += *n;
      }
      return absl::OkStatus();
    });
    if (!s.ok()) return s;
    if (changed == 0) return absl::InternalError("recon_ticket: the ids of its rows cannot be set");
  }
}

// A row of `SELECT * FROM recon_ticket` as a Ticket, by column name (so that a table
// of an earlier version, without the newer columns, reads too).
Ticket TicketOfRow(const std::vector<std::string>& columns, const std::vector<Value>& row) {
  Ticket t;
  for (size_t i = 0; i < columns.size() && i < row.size(); ++i) {
    const std::string& c = columns[i];
    const Value& v = row[i];
    if (c == "source")
      t.source = Text(v);
    else if (c == "key")
      t.key = Text(v);
    else if (c == "class")
      t.cls = Text(v);
    else if (c == "severity")
      t.severity = Text(v);
    else if (c == "action")
      t.action = Text(v);
    else if (c == "state")
      t.state = Text(v);
    else if (c == "detail")
      t.detail = Text(v);
    else if (c == "payload")
      t.payload = Text(v);
    else if (c == "attempts")
      t.attempts = Int(v);
    else if (c == "last_error")
      t.last_error = Text(v);
    else if (c == "run_id")
      t.run_id = Text(v);
    else if (c == "created_at")
      t.created_at_us = Int(v);
    else if (c == "updated_at")
      t.updated_at_us = Int(v);
    else if (c == "id")
      t.id = Text(v);
    else if (c == "http_status")
      t.http_status = Int(v);
    else if (c == "response")
      t.response = Text(v);
    else if (c == "note")
      t.note = Text(v);
    else if (c == "closed_at")
      t.closed_at_us = Int(v);
  }
  if (t.id.empty()) t.id = TicketId(t.source, t.cls, t.key);
  return t;
}

// The rows of `sql` (a SELECT * FROM recon_ticket …) as tickets.
absl::StatusOr<std::vector<Ticket>> QueryTickets(Store& store, const std::string& sql,
                                                 const std::vector<Value>& params) {
  absl::StatusOr<std::unique_ptr<StoreTransaction>> tx = store.Begin();
  if (!tx.ok()) return tx.status();
  absl::StatusOr<Rows> rows = (*tx)->Query(sql, params);
  (*tx)->Rollback();
  if (!rows.ok()) return rows.status();
  std::vector<Ticket> out;
  out.reserve(rows->rows.size());
  for (const std::vector<Value>& r : rows->rows) out.push_back(TicketOfRow(rows->columns, r));
  return out;
}

}  // namespace

std::string TicketId(std::string_view source, std::string_view cls, std::string_view key) {
  std::string bytes;
  bytes.reserve(source.size() + cls.size() + key.size() + 2);
  bytes.append(source).push_back('\0');
  bytes.append(cls).push_back('\0');
  bytes.append(key);
  return Fingerprint(bytes).substr(0, 12);
}

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
  std::string new_columns;
  for (const NewColumn& c : NewTicketColumns(**d))
    new_columns += std::string(c.name) + " " + c.type + ", ";
  const std::string ticket =
      "CREATE TABLE IF NOT EXISTS recon_ticket (source " + src + " NOT NULL, " + KeyCol(**d) + " " +
      key + " NOT NULL, class " + cls + " NOT NULL, severity " + cls + " NOT NULL, action " + cls +
      " NOT NULL, state " + cls + " NOT NULL, detail " + text + " NOT NULL, payload " + text +
      " NOT NULL, attempts " + big + " NOT NULL, last_error " + text + " NOT NULL, run_id " + cls +
      " NOT NULL, created_at " + big + " NOT NULL, updated_at " + big + " NOT NULL, " +
      new_columns + "PRIMARY KEY (source, " + KeyCol(**d) + ", class)" +
      (mysql ? ", KEY recon_ticket_id (id)" : "") + ")" + tail;
  const std::string watermark =
      "CREATE TABLE IF NOT EXISTS recon_watermark (source " + src + " NOT NULL PRIMARY KEY, upto " +
      big + " NOT NULL, last_success_at " + big + " NOT NULL, run_id " + cls + " NOT NULL)" + tail;
  absl::Status s = InTransaction(store, [&](StoreTransaction& tx) -> absl::Status {
    absl::StatusOr<int64_t> a = tx.Exec(ticket);
    if (!a.ok()) return a.status();
    return tx.Exec(watermark).status();
  });
  if (!s.ok()) return s;
  s = UpgradeTicketTable(store, **d);
  if (!s.ok() || mysql) return s;
  return InTransaction(store, [&](StoreTransaction& tx) {
    return tx.Exec("CREATE INDEX IF NOT EXISTS recon_ticket_id ON recon_ticket (id)").status();
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
          "created_at, updated_at, id, http_status, response, note, closed_at) "
          "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, '', '', 0)",
      "source");
  int64_t inserted = 0;
  constexpr size_t kBatch = 500;
  for (size_t begin = 0; begin < tickets.size(); begin += kBatch) {
    int64_t batch = 0;
    absl::Status s = InTransaction(store, [&](StoreTransaction& tx) -> absl::Status {
      batch = 0;
      for (size_t i = begin; i < std::min(tickets.size(), begin + kBatch); ++i) {
        const Ticket& t = tickets[i];
        const std::vector<Value> v = {t.source,        t.key,
                                      t.cls,           t.severity,
                                      t.action,        t.state,
                                      t.detail,        t.payload,
                                      t.attempts,      t.last_error,
                                      t.run_id,        t.created_at_us,
                                      t.created_at_us, TicketId(t.source, t.cls, t.key)};
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

absl::Status RecordAttempt(Store& store, const Ticket& t, const Attempt& attempt, int64_t now_us) {
  absl::StatusOr<const SqlDialect*> d = DialectOf(store);
  if (!d.ok()) return d.status();
  return InTransaction(store, [&](StoreTransaction& tx) -> absl::Status {
    const std::vector<Value> v = {attempt.state,
                                  attempt.last_error,
                                  attempt.http_status,
                                  attempt.response,
                                  now_us,
                                  t.source,
                                  t.key,
                                  t.cls};
    // Only a pending row: one a person closed meanwhile stays closed.
    return tx
        .Exec(
            "UPDATE recon_ticket SET state = ?, attempts = attempts + 1, last_error = ?, "
            "http_status = ?, response = ?, updated_at = ? WHERE source = ? AND " +
                KeyCol(**d) + " = ? AND class = ? AND state = 'pending'",
            v)
        .status();
  });
}

absl::Status CheckTicketTable(Store& store) {
  absl::StatusOr<const SqlDialect*> d = DialectOf(store);
  if (!d.ok()) return d.status();
  absl::StatusOr<std::unique_ptr<StoreTransaction>> tx = store.Begin();
  if (!tx.ok()) return tx.status();
  absl::StatusOr<Rows> rows = (*tx)->Query("SELECT COUNT(*) FROM recon_ticket WHERE 1 = 0");
  (*tx)->Rollback();
  if (rows.ok()) return absl::OkStatus();
  if (!NoTable(rows.status())) return rows.status();
  return absl::FailedPreconditionError(
      "the store " + std::string(store.url()) +
      " has no recon tickets (no recon_ticket table: no `idem recon` run has recorded there; "
      "is it the --store the runs use?)");
}

absl::StatusOr<std::vector<Ticket>> ListTickets(Store& store, std::string_view source, bool all,
                                                size_t limit, bool* more) {
  absl::StatusOr<const SqlDialect*> d = DialectOf(store);
  if (!d.ok()) return d.status();
  std::string sql = "SELECT * FROM recon_ticket WHERE 1 = 1";
  std::vector<Value> params;
  if (!source.empty()) {
    sql += " AND source = ?";
    params.push_back(std::string(source));
  }
  if (!all) sql += " AND state IN ('open', 'pending')";
  sql += " ORDER BY source, class, " + KeyCol(**d) + " LIMIT " + std::to_string(limit + 1);
  absl::StatusOr<std::vector<Ticket>> out = QueryTickets(store, sql, params);
  if (!out.ok()) return out.status();
  *more = out->size() > limit;
  if (*more) out->resize(limit);
  return out;
}

absl::StatusOr<std::vector<Ticket>> FindTickets(Store& store, const std::vector<std::string>& ids) {
  std::vector<Ticket> out;
  if (ids.empty()) return out;
  if (!HasColumn(store, "id")) {
    return absl::FailedPreconditionError(
        "recon_ticket in " + std::string(store.url()) +
        " is from an earlier version, without ticket ids: the next `idem recon` run there (or "
        "`idem recon tickets close`) adds them");
  }
  constexpr size_t kBatch = 100;
  for (size_t begin = 0; begin < ids.size(); begin += kBatch) {
    std::string sql = "SELECT * FROM recon_ticket WHERE id IN (";
    std::vector<Value> params;
    for (size_t i = begin; i < std::min(ids.size(), begin + kBatch); ++i) {
      sql += params.empty() ? "?" : ", ?";
      params.push_back(ids[i]);
    }
    absl::StatusOr<std::vector<Ticket>> some = QueryTickets(store, sql + ")", params);
    if (!some.ok()) return some.status();
    for (Ticket& t : *some) out.push_back(std::move(t));
  }
  return out;
}

absl::StatusOr<std::optional<Ticket>> FindTicket(Store& store, std::string_view id) {
  absl::StatusOr<std::vector<Ticket>> found = FindTickets(store, {std::string(id)});
  if (!found.ok()) return found.status();
  if (found->empty()) return std::optional<Ticket>();
  return std::optional<Ticket>(std::move(found->front()));
}

absl::StatusOr<Ticket> CloseTicket(Store& store, std::string_view id, std::string_view note,
                                   int64_t now_us) {
  if (absl::Status s = ValidateFieldValue("--note", note, kMaxNoteBytes); !s.ok()) return s;
  // A table of an earlier version gets the note and closed_at columns first.
  if (absl::Status s = EnsureTables(store); !s.ok()) return s;
  absl::StatusOr<std::optional<Ticket>> before = FindTicket(store, id);
  if (!before.ok()) return before.status();
  if (!before->has_value()) {
    return absl::NotFoundError("no ticket " + std::string(id) + " in " + std::string(store.url()));
  }
  const std::vector<Value> v = {std::string(note), now_us, now_us, std::string(id)};
  absl::StatusOr<int64_t> changed = 0;
  absl::Status s = InTransaction(store, [&](StoreTransaction& tx) -> absl::Status {
    changed = tx.Exec(
        "UPDATE recon_ticket SET state = 'closed', note = ?, closed_at = ?, updated_at = ? "
        "WHERE id = ? AND state IN ('open', 'pending')",
        v);
    return changed.status();
  });
  if (!s.ok()) return s;
  absl::StatusOr<std::optional<Ticket>> after = FindTicket(store, id);
  if (!after.ok()) return after.status();
  if (!after->has_value()) return absl::NotFoundError("no ticket " + std::string(id));
  const Ticket& t = **after;
  if (*changed == 0 && t.state == "closed") {
    return absl::FailedPreconditionError("ticket " + t.id + " is closed already (at " +
                                         FormatTimeUs(t.closed_at_us) + ": " + t.note + ")");
  }
  if (*changed == 0) {
    return absl::FailedPreconditionError("ticket " + t.id + " is " + t.state + " (its " + t.action +
                                         " was accepted): nothing to close");
  }
  return t;
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

absl::StatusOr<std::vector<ClassCount>> CountByClass(Store& store) {
  absl::StatusOr<std::unique_ptr<StoreTransaction>> tx = store.Begin();
  if (!tx.ok()) return tx.status();
  absl::StatusOr<Rows> rows = (*tx)->Query(
      "SELECT t.source, t.class, "
      "COUNT(CASE WHEN t.state IN ('open', 'pending') THEN 1 END), "
      "COUNT(CASE WHEN t.run_id = w.run_id THEN 1 END) "
      "FROM recon_ticket t LEFT JOIN recon_watermark w ON w.source = t.source "
      "GROUP BY t.source, t.class ORDER BY t.source, t.class");
  (*tx)->Rollback();
  if (!rows.ok()) return rows.status();
  std::vector<ClassCount> out;
  for (const std::vector<Value>& r : rows->rows) {
    out.push_back({.source = Text(r[0]), .cls = Text(r[1]), .unsettled = Int(r[2]),
                   .found_by_last_run = Int(r[3])});
  }
  return out;
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
  absl::StatusOr<std::vector<ClassCount>> counts = CountByClass(store);
  if (!counts.ok()) return out;
  out +=
      "# HELP idem_recon_open_tickets Differences recon found that are not settled (open "
      "tickets, pending replays and re-pushes)\n"
      "# TYPE idem_recon_open_tickets gauge\n";
  for (const ClassCount& c : *counts) {
    if (c.unsettled == 0) continue;
    out += "idem_recon_open_tickets{source=\"" + Label(c.source) + "\",class=\"" + Label(c.cls) +
           "\"} " + std::to_string(c.unsettled) + "\n";
  }
  return out;
}

}  // namespace idem::recon
