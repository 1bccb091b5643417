// `idem records list`: finds records, where `idem inspect` shows one.
//
//   idem records list --store URL [--tenant T] [--biz-type B] [--state S]
//                     [--older-than D] [--limit N] [--expired] [--tombstones] [--json]
//
// Read-only: opens the store as inspect does, so it never creates or changes
// anything. Records come in the store's key order (tenant, then key), without their
// result or error (`idem inspect` shows those). --older-than keeps records created
// more than D ago; --expired keeps what `idem purge` would remove now (past
// expires_at, finished, and past the [retention.<biz_type>] TTL of --config when it
// names the biz_type); --tombstones lists purged keys' tombstones instead of records.
// Exit status: 0 listed (also none); 1 the store cannot be reached or holds no idem
// schema; 2 bad usage.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/reason.h"
#include "cli/secrets.h"
#include "cli/retention_config.h"
#include "core/absl_compat.h"
#include "idem/idem.h"
#include "idem/retention.h"
#include "nlohmann/json.hpp"

namespace idem::cli {
namespace {

struct ListFlags {
  std::string store = std::string(DefaultServeStore());  // where `idem serve` keeps them
  std::string tenant;
  std::string biz_type;
  std::string state;
  std::string older_than;
  int limit = 100;
  bool expired = false;
  bool tombstones = false;
  bool json = false;
};

absl::StatusOr<RecordState> ParseState(const std::string& s) {
  for (RecordState state : {RecordState::kProcessing, RecordState::kSucceeded, RecordState::kFailed,
                            RecordState::kReleased}) {
    if (RecordStateName(state) == s) return state;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--state '", s, "' must be PROCESSING, SUCCEEDED, FAILED or RELEASED"));
}

std::string TimeText(absl::Time t) {
  if (t == absl::InfiniteFuture()) return "never";
  std::string s = FormatUtc(t);
  return s.empty() ? "-" : s;
}

// The query the filter flags ask for (without the times, which need the store's now).
// Errors are the usage line as printed after "records list: ".
absl::Status ParseRecordsListQuery(const ListFlags& flags, RecordQuery* query,
                                   std::optional<absl::Duration>* older_than) {
  if (!flags.tenant.empty()) {
    if (absl::Status s = ValidateTenant(flags.tenant); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--tenant: ", s.message()));
    }
    query->tenant = flags.tenant;
  }
  if (!flags.biz_type.empty()) {
    if (absl::Status s = ValidateBizType(flags.biz_type); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--biz-type: ", s.message()));
    }
    query->biz_type = flags.biz_type;
  }
  if (!flags.state.empty()) {
    IDEM_ASSIGN_OR_RETURN(RecordState state, ParseState(flags.state));
    query->states = {state};
  }
  if (flags.limit < 1 || flags.limit > 1000000) {
    return absl::InvalidArgumentError("--limit must be 1 … 1000000");
  }
  if (!flags.older_than.empty()) {
    IDEM_ASSIGN_OR_RETURN(*older_than, ParseTtlDuration(flags.older_than, "--older-than"));
  }
  if (flags.expired && flags.tombstones) {
    return absl::InvalidArgumentError(
        "--expired lists records, --tombstones lists tombstones: one of them");
  }
  query->purged = flags.tombstones;
  return absl::OkStatus();
}

// Pages through `query` until --limit records are kept in `out`; returns the exit
// status (kExitOk, or the failure it printed).
int FetchRecordsList(Store& store, const ListFlags& flags, RecordQuery query,
                     const RetentionPolicy& policy, absl::Time now, std::vector<Record>* out) {
  // What purge keeps although its expires_at has passed: a TTL raised since.
  auto wanted = [&](const Record& r) {
    if (!flags.expired) return true;
    if (r.state == RecordState::kProcessing) return false;
    const BizRetention* p = policy.Find(r.biz_type);
    return p == nullptr || r.created_at + p->ttl() <= now;
  };
  while (static_cast<int>(out->size()) < flags.limit) {
    query.limit = std::min(1000, flags.limit - static_cast<int>(out->size()));
    absl::StatusOr<std::vector<Record>> page = store.ListRecords(query);
    if (!page.ok()) {
      PrintReason(absl::StrCat("records list: store ", AV(store.url()), ": ",
                               RedactStoreSecrets(page.status(), flags.store).message()));
      return page.status().code() == absl::StatusCode::kUnimplemented ? kExitUsage : kExitFailure;
    }
    if (page->empty()) break;
    query.after = std::make_pair(page->back().tenant, page->back().key);
    const bool last = static_cast<int>(page->size()) < query.limit;
    for (Record& r : *page) {
      if (wanted(r)) out->push_back(std::move(r));
    }
    if (last) break;
  }
  return kExitOk;
}

void PrintRecordsList(const ListFlags& flags, std::string_view store,
                      const std::vector<Record>& out) {
  if (flags.json) {
    nlohmann::json list = nlohmann::json::array();
    for (const Record& r : out) list.push_back(RecordJson(r));
    std::printf("%s\n",
                nlohmann::json{{"store", RedactStoreUrl(store)}, {"records", std::move(list)}}
                    .dump(2)
                    .c_str());
  } else if (out.empty()) {
    std::printf("no records in %s\n", RedactStoreUrl(store).c_str());
  } else {
    std::printf("store %s\n", RedactStoreUrl(store).c_str());
    std::printf("%-12s %-12s %-28s %-10s %6s %-24s %-24s %s\n", "TENANT", "BIZ_TYPE", "KEY",
                "STATE", "TOKEN", "CREATED_AT", "UPDATED_AT",
                flags.tombstones ? "TOMBSTONE_UNTIL" : "EXPIRES_AT");
    for (const Record& r : out) {
      std::printf("%-12s %-12s %-28s %-10s %6lld %-24s %-24s %s\n", Printable(r.tenant).c_str(),
                  Printable(r.biz_type).c_str(), Printable(r.key).c_str(),
                  std::string(RecordStateName(r.state)).c_str(), static_cast<long long>(r.token),
                  TimeText(r.created_at).c_str(), TimeText(r.updated_at).c_str(),
                  TimeText(r.expires_at).c_str());
    }
  }
  std::fflush(stdout);
}

int RunList(const ListFlags& flags) {
  RecordQuery query;
  std::optional<absl::Duration> older_than;
  if (absl::Status s = ParseRecordsListQuery(flags, &query, &older_than); !s.ok()) {
    PrintReason(absl::StrCat("records list: ", s.message()));
    return kExitUsage;
  }
  std::string derivation;
  absl::StatusOr<RetentionPolicy> policy = RetentionFromConfig(&derivation);
  if (!policy.ok()) {
    if (!derivation.empty()) std::fputs(derivation.c_str(), stderr);
    PrintReason(absl::StrCat("records list: ", policy.status().message()));
    return policy.status().code() == absl::StatusCode::kFailedPrecondition ? kExitFailure
                                                                           : kExitUsage;
  }

  absl::StatusOr<std::unique_ptr<Store>> store = OpenReadOnlyStore(flags.store);
  if (!store.ok()) {
    PrintReason(
        absl::StrCat("records list: ", RedactStoreSecrets(store.status(), flags.store).message()));
    return ExitCodeForStoreError(store.status());
  }
  const absl::Time now = Clock::Real()->Now();
  if (older_than.has_value()) query.created_before = now - *older_than;
  if (flags.expired) {
    query.expires_by = now;
    if (query.states.empty()) {
      query.states = {RecordState::kSucceeded, RecordState::kFailed, RecordState::kReleased};
    }
  }
  std::vector<Record> out;
  if (int code = FetchRecordsList(**store, flags, query, *policy, now, &out); code != kExitOk) {
    return code;
  }
  PrintRecordsList(flags, (*store)->url(), out);
  return kExitOk;
}

}  // namespace

CommandFn AddRecordsCommand(CLI::App& root) {
  CLI::App* cmd = root.add_subcommand("records", "Find records (read-only)");
  cmd->require_subcommand(1, 1);
  CLI::App* list = cmd->add_subcommand(
      "list", "List records by tenant, biz_type, state and age, without their results");
  list->footer(
      "Read-only: creates and changes nothing. Exit status: 0 listed (also none), 1 store\n"
      "unreachable, 2 bad usage.");
  auto flags = std::make_shared<ListFlags>();
  AddStoreOptions(root, list,
                  {{"--store", &flags->store,
                    "Store URL: sqlite://PATH, rocksdb://DIR, postgres://…, mysql://… (never "
                    "creates a database)"}});
  list->add_option("--tenant", flags->tenant, "Only this tenant's records (default: every tenant)");
  list->add_option("--biz-type", flags->biz_type, "Only this biz_type");
  list->add_option("--state", flags->state,
                   "Only this state: PROCESSING, SUCCEEDED, FAILED or RELEASED");
  list->add_option("--older-than", flags->older_than, "Only records created more than D ago")
      ->type_name("DURATION");
  list->add_option("--limit", flags->limit, "At most this many records")->capture_default_str();
  list->add_flag("--expired", flags->expired, "Only what `idem purge` would remove now");
  list->add_flag("--tombstones", flags->tombstones, "List purged keys' tombstones instead");
  list->add_flag("--json", flags->json, "Print {\"store\":URL,\"records\":[…]} as JSON");
  return [flags] { return RunList(*flags); };
}

}  // namespace idem::cli
