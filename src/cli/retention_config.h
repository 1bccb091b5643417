// The retention of each biz_type, as the --config file gives it: one
// top-level section per biz_type, read by `idem serve`, `idem purge` and
// `idem records`.
//
//   [retention.refund]
//   redelivery = "10m"       # upstream redelivery window
//   recon_cycle = "30d"      # reconciliation cycle (T+30: cross-month reversals)
//   confirm_window = "3d"    # downstream confirmation window (T+3 clearing)
//   margin = "60d"           # safety margin
//   ttl = "90d"              # optional: at least the derived TTL, else refused
//   tombstone = "90d"        # optional: how long a purged key's tombstone stays
//
// The derivation is `idem ttl`'s (include/idem/ttl.h). CLI11 reads the file; the
// reader RunCommandLine installs (ConfigReader) takes the [retention.*] items out
// before CLI11 matches the rest to subcommand options, so they are nobody's
// unknown keys.
//
// Thread safety: called from main's thread only.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "idem/retention.h"
#include "idem/ttl.h"

namespace CLI {
class App;
class Config;
}

namespace idem::cli {

// CLI11's TOML reader, keeping the [retention.*] items for RetentionFromConfig().
// With `root`, each value is first checked against the option it sets
// (cli/config_values.h); `root` must outlive the reader.
std::shared_ptr<CLI::Config> ConfigReader(const CLI::App* root = nullptr);

// The store of the [serve] section of the --config file read last by this process,
// as seen by a program without a `serve` subcommand (idem-worker), whose reader
// (ConfigReader with its root) sets this aside instead of refusing the section: one
// config file describes one deployment, and the server's names its store. Empty
// fields when the file does not set them; in `idem` itself, AddStoreOptions reads
// the serve subcommand's options instead (cli/secrets.h).
struct ServeStoreConfig {
  std::string url;            // [serve] store
  std::string password_file;  // [serve] store-password-file
};
ServeStoreConfig ServeStoreFromConfig();

// The policy of the [retention.*] sections of the --config file read last by this
// process (empty without one, or without such sections). Errors, each naming the
// section and key: kInvalidArgument for an unknown key, a missing window, a bad
// duration (exit 2); kFailedPrecondition for a ttl below the derived TTL, with
// CheckConfiguredTtl's message (exit 1). `*derivation`, when not null, is then set
// to the refused section's derivation (FormatDerivation), for the caller to print.
absl::StatusOr<RetentionPolicy> RetentionFromConfig(std::string* derivation = nullptr);

// The derivation as `idem ttl` prints it: each window, the dominant one marked,
// and "TTL = a + b = c (n days)".
std::string FormatDerivation(const TtlDerivation& d);

// What a purge did (or, dry run, would do), in one line: "3 expired records found,
// 2 tombstoned, 0 deleted, 1 old tombstones dropped, 1 kept, 0 step operations
// deleted (2 batches)".
std::string DescribePurge(const PurgeStats& stats, bool dry_run);

// One line per biz_type of `policy`: "refund: ttl 90d (derived 90d: reconciliation
// cycle 30d + safety margin 60d), tombstones 90d".
std::string DescribePolicy(const RetentionPolicy& policy);

}  // namespace idem::cli
