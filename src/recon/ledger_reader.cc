#include "recon/ledger_reader.h"

#include <array>
#include <cctype>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "idem/key.h"
#include "store/backend.h"

namespace idem::recon {
namespace {

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

class LedgerReader final : public StatementReader {
 public:
  LedgerReader(Store& store, std::string dialect, std::string query, const Normalizer& normalizer,
               int page_rows)
      : page_rows_(page_rows),
        store_(store),
        dialect_(std::move(dialect)),
        query_(std::move(query)),
        normalizer_(normalizer) {
    while (!query_.empty() &&
           (query_.back() == ';' || std::isspace(static_cast<unsigned char>(query_.back())))) {
      query_.pop_back();
    }
  }

  std::string_view name() const override { return "the ledger"; }

  absl::StatusOr<bool> Next(Row* row) override {
    while (at_ >= page_.rows.size()) {
      if (done_) return false;
      absl::Status s = Fetch();
      if (!s.ok()) return s;
    }
    absl::Status s = Convert(page_.rows[at_++], row);
    if (!s.ok()) return s;
    return true;
  }

  // On a store that streams a result (sqlite://), the query runs once, as written,
  // in the table's order: no key-ordered pages that fetch every row through the
  // key's index (the sorter puts the rows in key order anyway). Elsewhere Next().
  absl::Status ReadAll(const std::function<absl::Status(Row&)>& each) override {
    if (tx_ != nullptr || done_) return StatementReader::ReadAll(each);  // Next() began
    absl::Status s = Begin();
    if (!s.ok()) return s;
    bool paged = false;
    Row row;
    s = tx_->QueryPages(query_, {}, static_cast<size_t>(page_rows_), [&](Rows& page) {
      paged = true;
      if (!columns_checked_) {
        page_.columns = page.columns;
        absl::Status c = CheckColumns();
        if (!c.ok()) return c;
      }
      for (const std::vector<Value>& values : page.rows) {
        absl::Status c = Convert(values, &row);
        if (c.ok()) c = each(row);
        if (!c.ok()) return c;
      }
      return absl::OkStatus();
    });
    if (!paged && s.code() == absl::StatusCode::kUnimplemented) {
      return StatementReader::ReadAll(each);  // pages through Next() on this transaction
    }
    done_ = true;
    tx_->Rollback();  // read only: nothing to commit
    return s;
  }

 private:
  // One row of the query as a normalised Row; counts it (number_).
  absl::Status Convert(const std::vector<Value>& values, Row* row) {
    ++number_;
    std::array<std::string, kFieldCount> text;
    std::array<std::string_view, kFieldCount> raw{};
    for (int f = 0; f < kFieldCount; ++f) {
      if (index_[f] < 0) continue;
      const Value& v = values[index_[f]];
      if (v.is_null()) {
        if (f == static_cast<int>(Field::kCurrency) || f == static_cast<int>(Field::kStatus))
          continue;
        return Bad(values, std::string(kFieldNames[f]) + " is NULL");
      }
      if (v.is_int()) {
        text[f] = std::to_string(v.as_int());
      } else if (v.is_text()) {
        text[f] = v.as_text();
      } else if (v.is_blob()) {
        text[f] = v.as_blob();
      } else {
        return Bad(values, std::string(kFieldNames[f]) +
                               " is a floating-point value (REAL, FLOAT, DOUBLE, or NUMERIC on SQLite, which stores "
                               "it as REAL): "
                               "amounts are exact, select it as text (CAST(" +
                               std::string(kFieldNames[f]) + " AS TEXT))");
      }
      raw[f] = text[f];
    }
    absl::Status s = normalizer_.Normalize(raw, row);
    if (!s.ok()) return Bad(values, std::string(s.message()));
    row->source = 0;
    row->line = number_;
    return absl::OkStatus();
  }

  absl::Status Bad(const std::vector<Value>& values, std::string_view what) const {
    std::string key;
    const Value& k = values[index_[0]];
    if (k.is_text()) key = EscapeControl(k.as_text(), 60);  // one line, whatever it holds
    if (k.is_int()) key = std::to_string(k.as_int());
    return absl::InvalidArgumentError("the ledger, row " + std::to_string(number_) +
                                      (key.empty() ? "" : " (key " + key + ")") + ": " +
                                      std::string(what));
  }

  absl::Status Begin() {
    absl::StatusOr<std::unique_ptr<StoreTransaction>> tx = store_.Begin();
    if (!tx.ok()) return tx.status();
    tx_ = *std::move(tx);
    if (dialect_ == "sqlite") {
      // Pages walk the key's index and fetch each row from the table: with SQLite's
      // default 2 MiB page cache most of those fetches are system calls. A bigger
      // cache on this read-only connection (the ledger's, nothing else uses it)
      // keeps them in memory.
      absl::StatusOr<Rows> cache = tx_->Query("PRAGMA cache_size = -65536");
      if (!cache.ok()) return cache.status();
    }
    if (dialect_ == "postgres") {
      absl::StatusOr<Rows> declared =
          tx_->Query("DECLARE idem_recon_ledger NO SCROLL CURSOR FOR " + query_);
      if (!declared.ok()) return declared.status();
    }
    return absl::OkStatus();
  }

  absl::Status Fetch() {
    if (tx_ == nullptr) {
      absl::Status s = Begin();
      if (!s.ok()) return s;
    }
    at_ = 0;
    absl::StatusOr<Rows> rows;
    if (dialect_ == "postgres") {
      rows = tx_->Query("FETCH FORWARD " + std::to_string(page_rows_) + " FROM idem_recon_ledger");
      if (rows.ok() && rows->rows.size() < static_cast<size_t>(page_rows_)) done_ = true;
    } else {
      rows = KeysetPage();
    }
    if (!rows.ok()) return rows.status();
    page_ = *std::move(rows);
    if (!columns_checked_ && !page_.columns.empty()) {
      absl::Status s = CheckColumns();
      if (!s.ok()) return s;
    }
    if (done_) tx_->Rollback();  // read only: nothing to commit
    return absl::OkStatus();
  }

  // One page in key order. Rows of the page's last key are held back to the next
  // page (which starts at that key), so every key's rows come in one page and none
  // is read twice; a page that is one key only is read whole.
  absl::StatusOr<Rows> KeysetPage() {
    const bool mysql = dialect_ == "mysql";
    const std::string key = mysql ? "BINARY q.`key`" : "q.\"key\" COLLATE BINARY";
    std::string sql = "SELECT * FROM (" + query_ + ") AS q";
    std::vector<Value> params;
    if (next_from_.has_value()) {
      sql += " WHERE " + key + (after_ ? " > ?" : " >= ?");
      params.push_back(*next_from_);
    }
    after_ = false;
    sql += " ORDER BY " + key + " LIMIT " + std::to_string(page_rows_);
    absl::StatusOr<Rows> rows = tx_->Query(sql, params);
    if (!rows.ok()) return rows;
    if (!columns_checked_ && !rows->columns.empty()) {
      page_.columns = rows->columns;
      absl::Status s = CheckColumns();
      if (!s.ok()) return s;
    }
    if (rows->rows.size() < static_cast<size_t>(page_rows_)) {
      done_ = true;
      return rows;
    }
    const Value last = rows->rows.back()[index_[0]];
    size_t keep = rows->rows.size();
    while (keep > 0 && rows->rows[keep - 1][index_[0]] == last) --keep;
    if (keep == 0) {  // page_rows_ rows or more of one key
      std::string all = "SELECT * FROM (" + query_ + ") AS q WHERE " + key + " = ?";
      std::vector<Value> one = {Bound(last)};
      absl::StatusOr<Rows> whole = tx_->Query(all, one);
      if (!whole.ok()) return whole;
      next_from_ = Bound(last);
      after_ = true;
      return whole;
    }
    rows->rows.resize(keep);
    next_from_ = Bound(last);
    return rows;
  }

  // The key as the page query compares it: bytes on MySQL, itself on SQLite.
  Value Bound(const Value& key) const {
    if (dialect_ != "mysql") return key;
    if (key.is_int()) return Value(Blob{std::to_string(key.as_int())});
    if (key.is_text()) return Value(Blob{key.as_text()});
    return key;
  }

  absl::Status CheckColumns() {
    columns_checked_ = true;
    index_.fill(-1);
    for (size_t i = 0; i < page_.columns.size(); ++i) {
      const std::string name = Lower(page_.columns[i]);
      for (int f = 0; f < kFieldCount; ++f) {
        if (name == kFieldNames[f]) index_[f] = static_cast<int>(i);
      }
    }
    for (int f = 0; f < kFieldCount; ++f) {
      if ((f == 0 || normalizer_.compares(static_cast<Field>(f))) && index_[f] < 0) {
        return absl::InvalidArgumentError("the ledger query returns no column '" +
                                          std::string(kFieldNames[f]) + "' (name it with … AS " +
                                          std::string(kFieldNames[f]) + ")");
      }
      if (!normalizer_.compares(static_cast<Field>(f)) && f != 0) index_[f] = -1;
    }
    return absl::OkStatus();
  }

  const int page_rows_;
  Store& store_;
  const std::string dialect_;
  std::string query_;
  const Normalizer& normalizer_;
  std::unique_ptr<StoreTransaction> tx_;
  Rows page_;
  size_t at_ = 0;
  bool done_ = false;
  bool after_ = false;
  bool columns_checked_ = false;
  std::array<int, kFieldCount> index_{};
  std::optional<Value> next_from_;
  int64_t number_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<StatementReader>> OpenLedger(Store& store, std::string query,
                                                            const Normalizer& normalizer,
                                                            int page_rows) {
  const SqlDialect* dialect = Backend(store).sql_dialect();
  if (dialect == nullptr) {
    return absl::InvalidArgumentError("--ledger: the store " + std::string(store.url()) +
                                      " runs no SQL (use sqlite://, postgres:// or mysql://)");
  }
  return std::make_unique<LedgerReader>(store, std::string(dialect->name()), std::move(query),
                                        normalizer, page_rows);
}

}  // namespace idem::recon
