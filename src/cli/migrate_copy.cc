// `idem migrate --from URL --to URL`: copies every record (tombstones included) of
// one store into another, e.g. an earlier default sqlite://./idem.db into
// rocksdb://./idem-db (docs/cli.md). The source is opened read-only and
// never changed; each record is inserted into the destination only where the
// destination has none for its (tenant, key), so a second run copies nothing and a
// run cut short is finished by running it again. A destination record that differs
// from the source's is kept and reported, and the run exits 1: two stores that
// disagree about a key need a person, never a silent overwrite.
//
// Output on stdout, one "name: value" per line:
//   from: sqlite://./idem.db
//   to: rocksdb://./idem-db
//   records: 1234 (copied 1230, already there 4, differing 0)
//   action: copied            (or "nothing to copy", "would copy" with --dry-run)
// Stop the servers on both stores first: records written to the source during the
// copy may be missed (run it again after stopping them), and rocksdb:// allows one
// process per directory anyway. A rocksdb:// source that a running process (idem
// serve) holds is refused: its read-only open would take no lock and copy a store
// that is changing under it.
#include "cli/migrate_copy.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cli/common.h"
#include "cli/reason.h"
#include "core/absl_compat.h"
#include "idem/idem.h"
#include "store/backend.h"

namespace idem::cli {
namespace {

// The fields a copy must carry over unchanged.
bool SameRecord(const Record& a, const Record& b) {
  return a.tenant == b.tenant && a.key == b.key && a.biz_type == b.biz_type &&
         a.fingerprint == b.fingerprint && a.state == b.state && a.token == b.token &&
         a.result == b.result && a.error == b.error && a.lease_until == b.lease_until &&
         a.created_at == b.created_at && a.expires_at == b.expires_at &&
         a.purged_at == b.purged_at;
}

struct Counts {
  int64_t records = 0, copied = 0, present = 0, differing = 0;
};

int CopyFail(const absl::Status& raw, std::string_view what, std::string_view url) {
  const absl::Status status = RedactStoreSecrets(raw, url);
  PrintReason(absl::StrCat("migrate: ", AV(what), " ", RedactStoreUrl(url), ": ",
                           status.message()));
  return status.code() == absl::StatusCode::kInvalidArgument ? kExitUsage : kExitFailure;
}

// OK unless `url` is a rocksdb:// directory another process has open for writing.
// RocksDB holds a POSIX record lock (fcntl F_SETLK, F_WRLCK) on DIR/LOCK while it
// has the database open; F_GETLK reports another process's lock without taking it.
absl::Status CheckRocksdbSourceNotHeld(std::string_view url) {
  constexpr std::string_view kScheme = "rocksdb://";
  if (!url.starts_with(kScheme)) return absl::OkStatus();
  std::string_view dir = url.substr(kScheme.size());
  dir = dir.substr(0, dir.find('?'));  // as the rocksdb:// parser reads it: not decoded
  const std::string lock_file = absl::StrCat(AV(dir), "/LOCK");
  const int fd = ::open(lock_file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::OkStatus();  // no database, or none open: the open says which
  struct flock query {};
  query.l_type = F_WRLCK;
  query.l_whence = SEEK_SET;
  const int rc = ::fcntl(fd, F_GETLK, &query);
  const int err = errno;
  ::close(fd);
  if (rc != 0) {
    return absl::UnavailableError(absl::StrCat("cannot check whether another process holds ",
                                               lock_file, ": ", std::strerror(err)));
  }
  if (query.l_type == F_UNLCK) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "rocksdb directory '", AV(dir), "' is held by another process (pid ", query.l_pid,
      ", e.g. the idem serve using it): stop it first, or the copy would miss what it writes"));
}

// The helpers below return kExitOk, or the exit status of the failure they printed.

// The full records (with result and error, which a listing leaves out) of `listed`.
int ReadMigrateCopyPage(Store& source, const std::string& from, const std::vector<Record>& listed,
                        std::vector<Record>* full) {
  full->reserve(listed.size());
  for (const Record& l : listed) {
    absl::StatusOr<std::optional<Record>> r = source.Get(l.tenant, l.key);
    if (!r.ok()) return CopyFail(r.status(), "reading a record of", from);
    if (r->has_value()) full->push_back(**std::move(r));
  }
  return kExitOk;
}

// --dry-run: counts what a copy of `full` would do, changing nothing.
int CountMigrateCopyPage(Store& destination, const std::string& to, const std::vector<Record>& full,
                         Counts* counts) {
  for (const Record& r : full) {
    absl::StatusOr<std::optional<Record>> there = destination.Get(r.tenant, r.key);
    if (!there.ok()) return CopyFail(there.status(), "reading", to);
    if (!there->has_value()) {
      ++counts->copied;
    } else if (SameRecord(**there, r)) {
      ++counts->present;
    } else {
      ++counts->differing;
    }
  }
  return kExitOk;
}

// Inserts what the destination lacks of `full`, reporting what differs.
int WriteMigrateCopyPage(Store& destination, const std::string& to, const std::vector<Record>& full,
                         Counts* counts) {
  // One destination transaction per page: a crash loses at most the page, which
  // the next run copies.
  absl::StatusOr<std::unique_ptr<StoreTransaction>> tx = destination.Begin();
  if (!tx.ok()) return CopyFail(tx.status(), "writing to", to);
  Counts page_counts;
  for (const Record& r : full) {
    absl::StatusOr<std::optional<Record>> existing = Records(*(*tx)).InsertOrLoad(r);
    if (!existing.ok()) {
      (*tx)->Rollback();
      return CopyFail(existing.status(), "writing to", to);
    }
    if (!existing->has_value()) {
      ++page_counts.copied;
    } else if (SameRecord(**existing, r)) {
      ++page_counts.present;
    } else {
      ++page_counts.differing;
      std::fprintf(stderr, "migrate: differs, kept the destination's: tenant %s key %s\n",
                   Printable(r.tenant).c_str(), Printable(r.key).c_str());
    }
  }
  if (absl::Status s = (*tx)->Commit(); !s.ok()) return CopyFail(s, "committing to", to);
  counts->copied += page_counts.copied;
  counts->present += page_counts.present;
  counts->differing += page_counts.differing;
  return kExitOk;
}

int ReportMigrateCopy(const std::string& from, const std::string& to, bool dry_run,
                      const Counts& counts) {
  std::printf("from: %s\n", RedactStoreUrl(from).c_str());
  std::printf("to: %s\n", RedactStoreUrl(to).c_str());
  std::printf("records: %lld (%s %lld, already there %lld, differing %lld)\n",
              static_cast<long long>(counts.records), dry_run ? "would copy" : "copied",
              static_cast<long long>(counts.copied), static_cast<long long>(counts.present),
              static_cast<long long>(counts.differing));
  std::printf("action: %s\n", dry_run              ? "would copy (dry run: nothing changed)"
                              : counts.copied == 0 ? "nothing to copy"
                                                   : "copied");
  std::fflush(stdout);
  if (counts.differing > 0) {
    PrintReason(absl::StrCat("migrate: ", counts.differing,
                             " record(s) differ between the stores; the destination's were kept "
                             "(listed above)"));
    return kExitFailure;
  }
  return kExitOk;
}

}  // namespace

int RunMigrateCopy(const std::string& from, const std::string& to, bool dry_run, int batch) {
  if (from == to) {
    PrintReason("migrate: --from and --to name the same store");
    return kExitUsage;
  }
  if (absl::Status held = CheckRocksdbSourceNotHeld(from); !held.ok()) {
    return CopyFail(held, "opening --from", from);
  }
  absl::StatusOr<std::unique_ptr<Store>> source = OpenReadOnlyStore(from);
  if (!source.ok()) return CopyFail(source.status(), "opening --from", from);
  std::unique_ptr<Store> destination;
  if (!dry_run) {
    absl::StatusOr<std::unique_ptr<Store>> opened = OpenStore(to);
    if (!opened.ok()) return CopyFail(opened.status(), "opening --to", to);
    destination = *std::move(opened);
  } else if (absl::StatusOr<std::unique_ptr<Store>> opened = OpenReadOnlyStore(to); opened.ok()) {
    destination = *std::move(opened);  // what is there already, if anything
  }

  Counts counts;
  RecordQuery query;
  query.limit = batch;
  while (true) {
    absl::StatusOr<std::vector<Record>> page = (*source)->ListRecords(query);
    if (!page.ok()) return CopyFail(page.status(), "listing the records of", from);
    if (page->empty()) break;
    query.after = std::make_pair(page->back().tenant, page->back().key);
    std::vector<Record> full;
    if (int code = ReadMigrateCopyPage(**source, from, *page, &full); code != kExitOk) return code;
    counts.records += static_cast<int64_t>(full.size());
    if (destination == nullptr) {
      counts.copied += static_cast<int64_t>(full.size());
      continue;
    }
    const int code = dry_run ? CountMigrateCopyPage(*destination, to, full, &counts)
                             : WriteMigrateCopyPage(*destination, to, full, &counts);
    if (code != kExitOk) return code;
  }
  return ReportMigrateCopy(from, to, dry_run, counts);
}

}  // namespace idem::cli
