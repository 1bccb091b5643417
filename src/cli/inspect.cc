// `idem inspect`: shows the dedupe record of one key.
//
//   idem inspect --store rocksdb://./idem-db --tenant default --biz-type refund --key R-1 [--json]
//
// The default store is `idem serve`'s (rocksdb://./idem-db).
//
// Read-only: it never creates a database file (OpenStore would) and never changes
// a record. Exit status: 0 the record was printed; 1 no record, another biz_type,
// or the store cannot be reached; 2 a malformed store URL, key or option.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
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
  std::string tenant = Request{}.tenant;
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

nlohmann::json Json(std::string_view store, const Record& r, absl::Time now) {
  nlohmann::json j = RecordJson(r);
  j["store"] = RedactStoreUrl(store);
  j["lease_live"] = r.lease_until != absl::InfinitePast() && r.lease_until > now;
  PutBytes(j, "result", r.result);
  PutBytes(j, "error", r.error);
  return j;
}

int RunInspect(const InspectFlags& flags) {
  Request request{.tenant = flags.tenant, .biz_type = flags.biz_type, .key = flags.key};
  // Validate what the user typed before touching the store: a bad key is usage.
  for (absl::Status s :
       {ValidateTenant(request.tenant), ValidateKey(request.key),
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
  absl::StatusOr<Record> record = guard.Get(request);
  if (!record.ok()) {
    const absl::Status& s = record.status();
    if (s.code() == absl::StatusCode::kNotFound) {
      PrintReason("no record for tenant " + Printable(request.tenant) + " key " +
                  Printable(request.key));
      return kExitFailure;
    }
    if (s.code() == absl::StatusCode::kInvalidArgument) {
      PrintReason(s.message());
      return kExitUsage;
    }
    if (s.code() == absl::StatusCode::kFailedPrecondition) {
      PrintReason("tenant " + Printable(request.tenant) + " key " + Printable(request.key) +
                  " is not of biz_type " + Printable(request.biz_type) + ": " +
                  std::string(s.message()));
      return kExitFailure;
    }
    PrintReason("store " + std::string((*store)->url()) + ": " + std::string(s.message()));
    return kExitFailure;
  }
  const absl::Time now = guard.options().clock->Now();
  if (flags.json) {
    std::printf("%s\n", Json((*store)->url(), *record, now).dump(2).c_str());
  } else {
    std::fputs(Human((*store)->url(), *record, now).c_str(), stdout);
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
  cmd->add_option("--tenant", flags->tenant, "Tenant of the key")->capture_default_str();
  cmd->add_option("--biz-type", flags->biz_type,
                  "Expected biz_type; another one is reported (exit 1). Empty: any");
  cmd->add_option("--key", flags->key, "The idempotency key (bytes, as given)")->required();
  cmd->add_flag("--json", flags->json, "Print the record as JSON");
  return [flags] { return RunInspect(*flags); };
}

}  // namespace idem::cli
