// `idem stuck`: the step operations a person should look at.
//
//   idem stuck --store postgres://idem@db/app [--limit 100] [--json]
//
// Lists operations that are due for a retry and not being run (a crashed runner,
// no worker), that have a step whose outcome is UNKNOWN (an external call whose
// answer was lost), or that are COMPENSATION_REQUIRED; oldest first, with their
// steps. `--resolve BIZ_KEY --note TEXT` marks a COMPENSATION_REQUIRED operation
// as settled by hand (COMPENSATED; its object lock is released).
// Exit status: 0 the list was printed (empty or not) or the operation resolved;
// 1 the store cannot be reached, or no such COMPENSATION_REQUIRED operation;
// 2 a malformed store URL or option.
#include <cstdio>
#include <memory>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/reason.h"
#include "cli/secrets.h"
#include "core/absl_compat.h"
#include "idem/idem.h"
#include "idem/steps.h"
#include "nlohmann/json.hpp"

namespace idem::cli {
namespace {

struct StuckFlags {
  std::string store = "sqlite://./idem.db";
  int limit = 100;
  bool json = false;
  std::string resolve;  // biz_key of a COMPENSATION_REQUIRED operation settled by hand
  std::string note;
};

// What `idem stuck` says of `op`, printable.
std::string Why(const OperationState& op, absl::Time now) { return Printable(StuckReason(op, now)); }

nlohmann::json Json(const OperationState& op, absl::Time now) {
  nlohmann::json j = nlohmann::json::object();
  PutBytes(j, "biz_key", op.biz_key);
  j["type"] = op.type;
  PutBytesOrNull(j, "object_key", op.object_key);
  j["status"] = std::string(OperationStatusName(op.status));
  j["why"] = Why(op, now);
  PutTime(j, "next_retry_at", op.next_retry_at);
  PutTime(j, "lease_until", op.lease_until);
  PutBytesOrNull(j, "last_error", op.last_error);
  PutTime(j, "created_at", op.created_at);
  PutTime(j, "updated_at", op.updated_at);
  nlohmann::json steps = nlohmann::json::array();
  for (const StepRecord& s : op.steps) {
    nlohmann::json st = {{"step_seq", s.step_seq},
                         {"name", s.name},
                         {"status", std::string(StepStatusName(s.status))},
                         {"retry_count", s.retry_count}};
    PutBytesOrNull(st, "request_id", s.request_id);
    PutTime(st, "next_retry_at", s.next_retry_at);
    PutBytesOrNull(st, "last_error", s.last_error);
    PutTime(st, "updated_at", s.updated_at);
    steps.push_back(std::move(st));
  }
  j["steps"] = std::move(steps);
  return j;
}

std::string Human(const OperationState& op, absl::Time now) {
  std::string out = absl::StrCat(Printable(op.biz_key), "  ", op.type, "  ",
                                 AV(OperationStatusName(op.status)), "  (", Why(op, now), ")\n");
  if (op.next_retry_at != absl::InfinitePast()) {
    absl::StrAppend(&out, "  next retry  ", FormatUtc(op.next_retry_at), "\n");
  }
  if (!op.last_error.empty()) absl::StrAppend(&out, "  last error  ", Printable(op.last_error), "\n");
  for (const StepRecord& s : op.steps) {
    absl::StrAppend(&out, "  ", s.step_seq, ". ", s.name, "  ", AV(StepStatusName(s.status)));
    if (s.retry_count > 0) absl::StrAppend(&out, "  retries ", s.retry_count);
    if (!s.request_id.empty()) absl::StrAppend(&out, "  request_id ", s.request_id);
    absl::StrAppend(&out, "\n");
  }
  return out;
}

int RunStuck(const StuckFlags& flags) {
  if (flags.limit < 1 || flags.limit > 100000) {
    PrintReason("stuck: --limit must be between 1 and 100000");
    return kExitUsage;
  }
  if (!flags.resolve.empty() && flags.note.empty()) {
    PrintReason("stuck: --resolve needs --note saying what was done by hand");
    return kExitUsage;
  }
  if (flags.resolve.empty() && !flags.note.empty()) {
    PrintReason("stuck: --note goes with --resolve BIZ_KEY");
    return kExitUsage;
  }
  // Listing only looks; --resolve writes (the operation's settlement).
  absl::StatusOr<std::unique_ptr<Store>> store =
      flags.resolve.empty() ? OpenReadOnlyStore(flags.store) : OpenExistingStore(flags.store);
  if (!store.ok()) {
    PrintReason(store.status().message());
    return ExitCodeForStoreError(store.status());
  }
  StepRunner runner(**store);
  if (!flags.resolve.empty()) {
    absl::StatusOr<OperationState> done = runner.Resolve(flags.resolve, flags.note);
    if (!done.ok()) {
      PrintReason("stuck --resolve: " + std::string(done.status().message()));
      return kExitFailure;
    }
    std::printf("resolved %s: %s\n", Printable(done->biz_key).c_str(),
                std::string(OperationStatusName(done->status)).c_str());
    return kExitOk;
  }
  absl::StatusOr<std::vector<OperationState>> stuck = runner.ListStuck(flags.limit);
  if (!stuck.ok()) {
    PrintReason(absl::StrCat("store ", std::string((*store)->url()), ": ",
                             std::string(stuck.status().message())));
    return stuck.status().code() == absl::StatusCode::kFailedPrecondition ? kExitUsage
                                                                          : kExitFailure;
  }
  const absl::Time now = runner.options().clock->Now();
  if (flags.json) {
    nlohmann::json list = nlohmann::json::array();
    for (const OperationState& op : *stuck) list.push_back(Json(op, now));
    std::printf("%s\n", nlohmann::json{{"store", RedactStoreUrl((*store)->url())},
                                        {"operations", std::move(list)}}
                           .dump(2)
                           .c_str());
    return kExitOk;
  }
  if (stuck->empty()) {
    std::printf("no stuck operations in %s\n", RedactStoreUrl((*store)->url()).c_str());
    return kExitOk;
  }
  for (const OperationState& op : *stuck) std::fputs(Human(op, now).c_str(), stdout);
  std::printf("%zu operation(s) in %s\n", stuck->size(), RedactStoreUrl((*store)->url()).c_str());
  return kExitOk;
}

}  // namespace

CommandFn AddStuckCommand(CLI::App& root) {
  CLI::App* cmd = root.add_subcommand(
      "stuck", "List step operations that are due, UNKNOWN or need compensation by hand");
  auto flags = std::make_shared<StuckFlags>();
  AddStoreOptions(root, cmd,
                  {{"--store", &flags->store, "Store URL: sqlite://PATH, postgres://…, mysql://…"}});
  cmd->add_option("--limit", flags->limit, "At most this many operations")->capture_default_str();
  cmd->add_flag("--json", flags->json, "Print the list as JSON");
  cmd->add_option("--resolve", flags->resolve,
                  "Mark this COMPENSATION_REQUIRED operation (biz_key) as settled by hand: it "
                  "becomes COMPENSATED and releases its object lock");
  cmd->add_option("--note", flags->note, "With --resolve: what was done (kept in last_error)");
  return [flags] { return RunStuck(*flags); };
}

}  // namespace idem::cli
