// `idem purge`: removes dedupe records past their retention (docs/retention.md,
// include/idem/retention.h), in small transactions with pauses between them.
//
//   idem purge --store URL [--dry-run] [--batch N] [--max-rate R] [--pause D]
//              [--no-tombstones] [--tombstone-ttl D] [--no-journal] [--json]
//
// A record goes once its expires_at (set at its claim from its biz_type's TTL) has
// passed, and, for a biz_type with a [retention.*] section in --config, once its
// created_at plus that TTL has too; never a PROCESSING record. By default it leaves
// a tombstone, so a very late duplicate is answered `expired` (HTTP 410) instead of
// running again; tombstones go when their own time is up. The step journal's
// finished operations (SUCCESS, COMPENSATED) of an op_type with a [retention.*]
// section go once updated_at plus its TTL has passed; never one still running or
// waiting for a person. A progress line goes to stderr after every batch; the totals
// to stdout at the end (one JSON object with --json). --dry-run only counts and
// opens the store read-only. A rocksdb:// directory is locked by the `idem serve`
// using it: purge there with serve's --purge-every.
// Exit status: 0 done; 1 the store cannot be reached (what committed before stays);
// 2 bad usage or configuration.
#include <cstdio>
#include <memory>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/match.h"
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

struct PurgeFlags {
  std::string store = std::string(DefaultServeStore());  // where `idem serve` keeps them
  bool dry_run = false;
  int batch = 100;
  double max_rate = 0;
  std::string pause = "10ms";
  bool no_tombstones = false;
  std::string tombstone_ttl;
  bool no_journal = false;
  bool json = false;
};

int RunPurge(const PurgeFlags& flags) {
  std::string derivation;
  absl::StatusOr<RetentionPolicy> policy = RetentionFromConfig(&derivation);
  if (!policy.ok()) {
    if (!derivation.empty()) std::fputs(derivation.c_str(), stderr);
    PrintReason(absl::StrCat("purge: ", policy.status().message()));
    return policy.status().code() == absl::StatusCode::kFailedPrecondition ? kExitFailure
                                                                           : kExitUsage;
  }
  PurgeOptions options;
  options.batch = flags.batch;
  options.max_rate = flags.max_rate;
  options.dry_run = flags.dry_run;
  options.tombstones = !flags.no_tombstones;
  options.journal = !flags.no_journal;
  options.policy = &*policy;
  if (flags.batch < 1 || flags.batch > 10000) {
    PrintReason("purge: --batch must be 1 … 10000");
    return kExitUsage;
  }
  if (flags.max_rate < 0) {
    PrintReason("purge: --max-rate must not be negative (0: no limit)");
    return kExitUsage;
  }
  absl::StatusOr<absl::Duration> pause = ParseTtlDuration(flags.pause, "--pause");
  if (!pause.ok()) {
    PrintReason(absl::StrCat("purge: ", pause.status().message()));
    return kExitUsage;
  }
  options.pause = *pause;
  if (!flags.tombstone_ttl.empty()) {
    absl::StatusOr<absl::Duration> t = ParseTtlDuration(flags.tombstone_ttl, "--tombstone-ttl");
    if (!t.ok() || *t <= absl::ZeroDuration()) {
      PrintReason(absl::StrCat("purge: ", t.ok() ? "--tombstone-ttl must be more than 0s"
                                                 : std::string(t.status().message())));
      return kExitUsage;
    }
    options.tombstone_ttl = *t;
  }
  // A dry run changes nothing, so it opens the store as inspect does; a real one
  // never creates a missing SQLite file either.
  absl::StatusOr<std::unique_ptr<Store>> store =
      flags.dry_run ? OpenReadOnlyStore(flags.store) : OpenExistingStore(flags.store);
  if (!store.ok()) {
    std::string reason(RedactStoreSecrets(store.status(), flags.store).message());
    if (absl::StrContains(reason, "another process has this database open")) {
      // One process per rocksdb:// directory: the server holding it purges it.
      absl::StrAppend(&reason,
                      "; a store `idem serve` holds is purged by the server itself: run it with "
                      "--purge-every (e.g. 1h) or purge-every in its config's [serve] section");
    }
    PrintReason(absl::StrCat("purge: ", reason));
    return ExitCodeForStoreError(store.status());
  }
  options.progress = [&](const PurgeStats& s) {
    std::fprintf(stderr, "purge: %s\n", DescribePurge(s, flags.dry_run).c_str());
    std::fflush(stderr);
  };
  absl::StatusOr<PurgeStats> stats = Purge(**store, options);
  if (!stats.ok()) {
    PrintReason(absl::StrCat("purge: store ", AV((*store)->url()), ": ",
                             RedactStoreSecrets(stats.status(), flags.store).message()));
    return stats.status().code() == absl::StatusCode::kInvalidArgument ? kExitUsage : kExitFailure;
  }
  if (flags.json) {
    nlohmann::json j = {{"store", RedactStoreUrl((*store)->url())},
                        {"dry_run", flags.dry_run},
                        {"scanned", stats->scanned},
                        {"tombstoned", stats->tombstoned},
                        {"deleted", stats->deleted},
                        {"tombstones_dropped", stats->tombstones_dropped},
                        {"kept", stats->kept},
                        {"operations_deleted", stats->operations_deleted},
                        {"batches", stats->batches}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("store %s: %s%s\n", RedactStoreUrl((*store)->url()).c_str(),
                DescribePurge(*stats, flags.dry_run).c_str(),
                flags.dry_run ? " (dry run: nothing changed)" : "");
  }
  std::fflush(stdout);
  return kExitOk;
}

}  // namespace

CommandFn AddPurgeCommand(CLI::App& root) {
  CLI::App* cmd =
      root.add_subcommand("purge", "Remove records past their retention, leaving tombstones");
  cmd->footer(
      "Records go after their expires_at (and, for a biz_type with a [retention.<biz_type>]\n"
      "section in --config, after created_at + its TTL); PROCESSING records never do.\n"
      "Exit status: 0 done, 1 store unreachable, 2 bad usage or configuration.");
  auto flags = std::make_shared<PurgeFlags>();
  AddStoreOptions(root, cmd,
                  {{"--store", &flags->store,
                    "Store URL: sqlite://PATH, postgres://…, mysql://…, rocksdb://DIR (not while "
                    "idem serve has it: use serve --purge-every)"}});
  cmd->add_flag("--dry-run", flags->dry_run, "Count what would go; change nothing");
  cmd->add_option("--batch", flags->batch, "Records per transaction (1 … 10000)")
      ->capture_default_str();
  cmd->add_option("--max-rate", flags->max_rate,
                  "At most this many records changed per second (0: no limit)")
      ->capture_default_str();
  cmd->add_option("--pause", flags->pause, "Pause after every batch")->capture_default_str();
  cmd->add_flag("--no-tombstones", flags->no_tombstones,
                "Delete outright: a very late duplicate then runs again (UNSAFE)");
  cmd->add_option("--tombstone-ttl", flags->tombstone_ttl,
                  "How long tombstones stay (default: the biz_type's tombstone, else as long "
                  "as the record was kept)")
      ->type_name("DURATION");
  cmd->add_flag("--no-journal", flags->no_journal, "Leave the step journal alone");
  cmd->add_flag("--json", flags->json, "Print the totals as one JSON object");
  return [flags] { return RunPurge(*flags); };
}

}  // namespace idem::cli
