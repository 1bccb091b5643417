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

int RunList(const ListFlags& flags) {
  RecordQuery query;
  if (!flags.tenant.empty()) {
    if (absl::Status s = ValidateTenant(flags.tenant); !s.ok()) {
      PrintReason(absl::StrCat("records list: --tenant: ", s.message()));
      return kExitUsage;
    }
    query.tenant = flags.tenant;
  }
  if (!flags.biz_type.empty()) {
    if (absl::Status s = ValidateBizType(flags.biz_type); !s.ok()) {
      PrintReason(absl::StrCat("records list: --biz-type: ", s.message()));
      return kExitUsage;
    }
    query.biz_type = flags.biz_type;
  }
  if (!flags.state.empty()) {
    absl::StatusOr<RecordState> state = ParseState(flags.state);
    if (!state.ok()) {
      PrintReason(absl::StrCat("records list: ", state.status().message()));
      return kExitUsage;
    }
    query.states = {*state};
  }
  if (flags.limit < 1 || flags.limit > 1000000) {
    PrintReason("records list: --limit must be 1 … 1000000");
    return kExitUsage;
  }
  std::optional<absl::Duration> older_than;
  if (!flags.older_than.empty()) {
    absl::StatusOr<absl::Duration> d = ParseTtlDuration(flags.older_than, "--older-than");
    if (!d.ok()) {
      PrintReason(absl::StrCat("records list: ", d.status().message()));
      return kExitUsage;
    }
    older_than = *d;
  }
  if (flags.expired && flags.tombstones) {
    PrintReason(
        "records list: --expired lists records, --tombstones lists tombstones: one of them");
    return kExitUsage;
  }
  query.purged = flags.tombstones;
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
  // What purge keeps although its expires_at has passed: a TTL raised since.
  auto wanted = [&](const Record& r) {
    if (!flags.expired) return true;
    if (r.state == RecordState::kProcessing) return false;
    const BizRetention* p = policy->Find(r.biz_type);
    return p == nullptr || r.created_at + p->ttl() <= now;
  };
  std::vector<Record> out;
  while (static_cast<int>(out.size()) < flags.limit) {
    query.limit = std::min(1000, flags.limit - static_cast<int>(out.size()));
    absl::StatusOr<std::vector<Record>> page = (*store)->ListRecords(query);
    if (!page.ok()) {
      PrintReason(absl::StrCat("records list: store ", AV((*store)->url()), ": ",
                               RedactStoreSecrets(page.status(), flags.store).message()));
      return page.status().code() == absl::StatusCode::kUnimplemented ? kExitUsage : kExitFailure;
    }
    if (page->empty()) break;
    query.after = std::make_pair(page->back().tenant, page->back().key);
    const bool last = static_cast<int>(page->size()) < query.limit;
    for (Record& r : *page) {
      if (wanted(r)) out.push_back(std::move(r));
    }
    if (last) break;
  }
  if (flags.json) {
    nlohmann::json list = nlohmann::json::array();
    for (const Record& r : out) list.push_back(RecordJson(r));
    std::printf("%s\n", nlohmann::json{{"records", std::move(list)}}.dump(2).c_str());
  } else if (out.empty()) {
    std::printf("no records\n");
  } else {
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
  list->add_flag("--json", flags->json, "Print {\"records\":[…]} as JSON");
  return [flags] { return RunList(*flags); };
}

}  // namespace idem::cli
