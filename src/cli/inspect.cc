// `idem inspect`: shows the dedupe record of one key.
//
//   idem inspect --store rocksdb://./idem-db [--tenant T] [--biz-type refund] --key R-1 [--json]
//
// The default store is `idem serve`'s (rocksdb://./idem-db). Without --tenant the
// key is looked up in every tenant of the store, and every record found is shown
// with its tenant; the store's tenants are found by skipping from one to the next
// in ListRecords' order (one read per tenant, not a scan of every record).
//
// Read-only: it never creates a database file (OpenStore would) and never changes
// a record. Exit status: 0 the record was printed; 1 no record, another biz_type,
// or the store cannot be reached; 2 a malformed store URL, key or option.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/reason.h"
#include "cli/secrets.h"
#include "core/absl_compat.h"
#include "idem/idem.h"
#include "nlohmann/json.hpp"

namespace idem::cli {
namespace {

struct InspectFlags {
  std::string store = std::string(DefaultServeStore());  // where `idem serve` keeps them
  std::string tenant;  // empty: every tenant
  std::string biz_type;
  std::string key;
  bool json = false;
};

std::string Human(std::string_view store, const Record& r, absl::Time now) {
  std::string out;
  auto row = [&out](std::string_view name, std::string_view value) {
    out += std::string(name) + std::string(13 - name.size(), ' ') + std::string(value) + "\n";
  };
  auto bytes = [](std::string_view b) {
    if (b.empty()) return std::string("-");
    return Printable(b) + " (" + std::to_string(b.size()) + " bytes)";
  };
  row("store", RedactStoreUrl(store));
  row("tenant", Printable(r.tenant));
  row("biz_type", Printable(r.biz_type));
  row("key", Printable(r.key));
  row("state", RecordStateName(r.state));
  row("token", std::to_string(r.token));
  if (r.lease_until == absl::InfinitePast()) {
    row("lease_until", "-");
  } else {
    row("lease_until", FormatUtc(r.lease_until) + (r.lease_until > now ? " (live)" : " (expired)"));
  }
  row("fingerprint", r.fingerprint.empty() ? "-" : Printable(r.fingerprint));
  row("result", bytes(r.result));
  row("error", bytes(r.error));
  row("created_at", r.created_at == absl::InfinitePast() ? "-" : FormatUtc(r.created_at));
  row("updated_at", r.updated_at == absl::InfinitePast() ? "-" : FormatUtc(r.updated_at));
  row("expires_at", r.expires_at == absl::InfiniteFuture() ? "never" : FormatUtc(r.expires_at));
  if (r.purged()) row("purged_at", FormatUtc(r.purged_at) + " (a tombstone: the record expired)");
  return out;
}

nlohmann::json Json(std::string_view store, const Record& r, absl::Time now,
                    RawJsonValues& raw) {
  nlohmann::json j = RecordJson(r);
  j["store"] = RedactStoreUrl(store);
  j["lease_live"] = r.lease_until != absl::InfinitePast() && r.lease_until > now;
  PutStored(j, "result", r.result, r.state == RecordState::kSucceeded || !r.result.empty(), raw);
  PutStored(j, "error", r.error, r.state == RecordState::kFailed || !r.error.empty(), raw);
  return j;
}

// Tenants are looked up one by one; a store with more is searched with --tenant.
constexpr size_t kMaxTenantsSearched = 10000;
// How many of them a "no record" line names.
constexpr size_t kTenantsNamed = 10;

// The tenants of `store` in its order, at most kMaxTenantsSearched (*more is set
// when there are others). Each step asks for the first record after every key of
// the tenant before: a key of 0xFF bytes longer than any key sorts after them in
// every store's order (tenants, then key bytes); a longer key still is only listed
// again as the same tenant, and the search moves past it.
absl::StatusOr<std::vector<std::string>> ListTenants(Store& store, bool* more) {
  static const std::string kPastEveryKey(4096, '\xff');
  std::vector<std::string> tenants;
  RecordQuery query;
  query.limit = 1;
  *more = false;
  while (true) {
    IDEM_ASSIGN_OR_RETURN(std::vector<Record> page, store.ListRecords(query));
    if (page.empty()) break;
    Record& r = page.front();
    if (!tenants.empty() && tenants.back() == r.tenant) {
      query.after = std::make_pair(std::move(r.tenant), std::move(r.key));
      continue;
    }
    if (tenants.size() == kMaxTenantsSearched) {
      *more = true;
      break;
    }
    tenants.push_back(r.tenant);
    query.after = std::make_pair(std::move(r.tenant), kPastEveryKey);
  }
  return tenants;
}

// "a, b, c" of the first kTenantsNamed tenants, then "… (N in all)".
std::string TenantsNamed(const std::vector<std::string>& tenants, bool more) {
  std::string out;
  for (size_t i = 0; i < tenants.size() && i < kTenantsNamed; ++i) {
    absl::StrAppend(&out, i == 0 ? "" : ", ", Printable(tenants[i]));
  }
  if (more) {
    absl::StrAppend(&out, ", … (more than ", tenants.size(), ")");
  } else if (tenants.size() > kTenantsNamed) {
    absl::StrAppend(&out, ", … (", tenants.size(), " in all)");
  }
  return out;
}

// The record of `request`, std::nullopt when there is none; kFailedPrecondition
// (another biz_type) and kInvalidArgument as the line to print, kUnavailable for
// any other failure of the store.
absl::StatusOr<std::optional<Record>> LookUp(Guard& guard, std::string_view store,
                                             const Request& request) {
  absl::StatusOr<Record> record = guard.Get(request);
  if (record.ok()) return std::optional<Record>(*std::move(record));
  if (record.status().code() == absl::StatusCode::kNotFound) return std::optional<Record>();
  const absl::Status& s = record.status();
  if (s.code() == absl::StatusCode::kFailedPrecondition) {
    return absl::FailedPreconditionError(
        absl::StrCat("tenant ", Printable(request.tenant), " key ", Printable(request.key),
                     " is not of biz_type ", Printable(request.biz_type), ": ", s.message()));
  }
  if (s.code() == absl::StatusCode::kInvalidArgument) return s;
  return absl::UnavailableError(absl::StrCat("store ", AV(store), ": ", s.message()));
}

int PrintLookUpError(const absl::Status& s) {
  PrintReason(s.message());
  return s.code() == absl::StatusCode::kInvalidArgument ? kExitUsage : kExitFailure;
}

// Without --tenant: every tenant's record of the key.
int InspectEveryTenant(const InspectFlags& flags, Store& store, Guard& guard) {
  bool more = false;
  absl::StatusOr<std::vector<std::string>> tenants = ListTenants(store, &more);
  if (!tenants.ok()) {
    PrintReason(absl::StrCat("store ", AV(store.url()), ": cannot list its tenants (",
                             tenants.status().message(), "); give --tenant"));
    return tenants.status().code() == absl::StatusCode::kUnimplemented ? kExitUsage
                                                                       : kExitFailure;
  }
  std::vector<Record> found;
  absl::Status other_biz_type;
  for (const std::string& tenant : *tenants) {
    absl::StatusOr<std::optional<Record>> r = LookUp(
        guard, store.url(), {.tenant = tenant, .biz_type = flags.biz_type, .key = flags.key});
    if (r.ok()) {
      if (r->has_value()) found.push_back(**std::move(r));
    } else if (r.status().code() == absl::StatusCode::kFailedPrecondition) {
      other_biz_type = r.status();
    } else {
      return PrintLookUpError(r.status());
    }
  }
  if (found.empty()) {
    if (!other_biz_type.ok()) return PrintLookUpError(other_biz_type);
    PrintReason(absl::StrCat(
        "no record for ", Printable(flags.key), " in any tenant",
        tenants->empty() ? " (this store holds no records)"
                         : absl::StrCat(" (tenants in this store: ",
                                        TenantsNamed(*tenants, more), ")"),
        more ? "; give --tenant to look in the others" : ""));
    return kExitFailure;
  }
  const absl::Time now = guard.options().clock->Now();
  if (flags.json) {
    RawJsonValues raw;
    nlohmann::json records = nlohmann::json::array();
    for (const Record& r : found) {
      nlohmann::json j = Json(store.url(), r, now, raw);
      j.erase("store");
      records.push_back(std::move(j));
    }
    nlohmann::json out = {{"store", RedactStoreUrl(store.url())}, {"records", std::move(records)}};
    if (more) out["tenants_searched"] = tenants->size();
    std::printf("%s\n", raw.Dump(out, 2).c_str());
  } else {
    for (size_t i = 0; i < found.size(); ++i) {
      if (i > 0) std::fputs("\n", stdout);
      std::fputs(Human(store.url(), found[i], now).c_str(), stdout);
    }
    if (more) {
      std::printf("(searched the first %zu tenants; give --tenant to look in the others)\n",
                  tenants->size());
    }
  }
  return kExitOk;
}

int RunInspect(const InspectFlags& flags) {
  Request request{.tenant = flags.tenant, .biz_type = flags.biz_type, .key = flags.key};
  // Validate what the user typed before touching the store: a bad key is usage.
  for (absl::Status s :
       {request.tenant.empty() ? absl::OkStatus() : ValidateTenant(request.tenant),
        ValidateKey(request.key),
        request.biz_type.empty() ? absl::OkStatus() : ValidateBizType(request.biz_type)}) {
    if (!s.ok()) {
      PrintReason(s.message());
      return kExitUsage;
    }
  }
  absl::StatusOr<std::unique_ptr<Store>> store = OpenReadOnlyStore(flags.store);
  if (!store.ok()) {
    PrintReason(store.status().message());
    return ExitCodeForStoreError(store.status());
  }
  Guard guard(**store);
  if (flags.tenant.empty()) return InspectEveryTenant(flags, **store, guard);
  absl::StatusOr<std::optional<Record>> record = LookUp(guard, (*store)->url(), request);
  if (!record.ok()) return PrintLookUpError(record.status());
  if (!record->has_value()) {
    PrintReason("no record for tenant " + Printable(request.tenant) + " key " +
                Printable(request.key));
    return kExitFailure;
  }
  const absl::Time now = guard.options().clock->Now();
  if (flags.json) {
    RawJsonValues raw;
    std::printf("%s\n", raw.Dump(Json((*store)->url(), **record, now, raw), 2).c_str());
  } else {
    std::fputs(Human((*store)->url(), **record, now).c_str(), stdout);
  }
  return kExitOk;
}

}  // namespace

CommandFn AddInspectCommand(CLI::App& root) {
  CLI::App* cmd = root.add_subcommand("inspect", "Show the dedupe record of one key (read-only)");
  cmd->footer(
      "Exit status: 0 printed, 1 no record / another biz_type / store unreachable, 2 bad usage.");
  auto flags = std::make_shared<InspectFlags>();
  AddStoreOptions(root, cmd,
                  {{"--store", &flags->store,
                    "Store URL: sqlite://PATH, rocksdb://DIR, postgres://…, mysql://… (never "
                    "creates a database)"}});
  cmd->add_option("--tenant", flags->tenant,
                  "Tenant of the key (default: look in every tenant of the store)");
  cmd->add_option("--biz-type", flags->biz_type,
                  "Expected biz_type; another one is reported (exit 1). Empty: any");
  cmd->add_option("--key", flags->key, "The idempotency key (bytes, as given)")->required();
  cmd->add_flag("--json", flags->json,
                "Print the record as JSON (without --tenant: {\"store\":URL,\"records\":[…]})");
  return [flags] { return RunInspect(*flags); };
}

}  // namespace idem::cli
