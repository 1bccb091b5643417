// `idem serve`: the HTTP API (docs/openapi.yaml) over a store.
//
//   idem serve --listen 127.0.0.1:7070 --store rocksdb://./idem-db --tenants-file FILE
//
// Without --store (or IDEM_STORE, or the config's store) the records go to
// rocksdb://./idem-db (cli/common.h DefaultServeStore); next to an earlier
// version's default ./idem.db it refuses to start instead (LegacyDefaultStoreInTheWay).
//
// The first line on stdout is exactly "listening on HOST:PORT" (the bound port, also
// when --listen asked for port 0), flushed at once, so scripts and tests can wait
// for it. Logs go to stderr. Without any tenant (--tenant, --tenants-file,
// IDEM_TENANTS; cli/secrets.h) a development tenant "dev" with a fresh random token
// is created and its token printed on stderr. Secrets stay off the command line:
// tenants as token hashes, the store password from --store-password-file or
// IDEM_STORE_PASSWORD; one left in `ps` or in a file others may read is warned about.
//
// Store down: claims, complete, fail and record reads answer 503 (fail closed), and
// /readyz is 503, until the store answers again; no restart is needed. --fail-open
// BIZ_TYPE (repeatable; TOML [serve] fail_open = ["..."]) lets claims of the named
// biz_types through unrecorded instead (201 with "degraded":true) — UNSAFE, see
// docs/operations.md.
//
// SIGTERM/SIGINT shut down gracefully (exit 0). Exit status: 1 when the store cannot
// be opened or the address cannot be bound; 2 for malformed options.

#include <algorithm>
#include <cstdlib>
#include <cstdio>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cli/commands.h"
#include "cli/reason.h"
#include "cli/retention_config.h"
#include "cli/scheduled_purge.h"
#include "cli/secrets.h"
#include "core/tokens.h"
#include "cli/server_command.h"
#include "core/absl_compat.h"
#include "idem/cache.h"
#include "idem/ttl.h"
#include "http/api/api.h"
#include "http/server/metrics.h"
#include "recon/tables.h"
#include "store/backend.h"
#include "http/server/server.h"
#include "idem/idem.h"
#include "spdlog/spdlog.h"

namespace idem::cli {
namespace {


struct ServeFlags {
  ServerFlags server{.listen = "127.0.0.1:7070"};
  std::vector<std::string> tenants;
  std::string tenants_file;
  bool metrics_token = false;
  std::vector<std::string> fail_open;
  std::string cache;            // redis://host:port, empty: no Redis tier
  std::string cache_password_file;
  uint64_t cache_entries = CacheOptions{}.l1_entries;  // in-process L1 size, 0: off
  uint64_t cache_bytes = CacheOptions{}.l1_bytes;      // in-process L1 bytes, 0: off
  uint64_t cache_max_entry_bytes = CacheOptions{}.max_entry_bytes;
  std::string cache_ttl = "24h";
  std::string wait_poll_max = "250ms";
  std::string key_window = "10m";  // key health: regenerated keys (docs/keys.md)
  // Retention: a purge every this long, in the background; "": none.
  std::string purge_every;
  int purge_batch = 100;
  double purge_max_rate = 0;
  bool purge_no_tombstones = false;
  // The operator console (/console/): off unless --console; its admins apart from
  // the tenants, each optionally held to one tenant (ADMIN:TENANT).
  bool console = false;
  std::vector<std::string> console_admins;
  std::string console_admins_file;
  std::vector<std::string> console_scopes;
};

// The API's options from the flags: tenants (secrets kept off the command line where
// they can be, warned about where other local users can read them), fail-open
// biz_types, body and wait limits, key health. On bad input: the reason printed,
// *exit_code set, nullopt.
std::optional<http::ApiOptions> ServeApiOptions(const ServeFlags& flags,
                                                std::vector<std::string>* warnings,
                                                int* exit_code) {
  const char* tenants_env = std::getenv("IDEM_TENANTS");
  http::ApiOptions api_options;
  absl::StatusOr<std::vector<http::Tenant>> tenants =
      LoadTenants({.specs = flags.tenants,
                   .file = flags.tenants_file,
                   .env = tenants_env != nullptr ? tenants_env : "",
                   .config_file = ConfigFile(flags.server)},
                  warnings);
  if (!tenants.ok()) {
    PrintReason("serve: " + Str(tenants.status().message()));
    *exit_code =
        tenants.status().code() == absl::StatusCode::kInvalidArgument ? kExitUsage : kExitFailure;
    return std::nullopt;
  }
  api_options.tenants = *std::move(tenants);
  *exit_code = kExitUsage;  // every refusal below is bad usage
  for (const std::string& biz_type : flags.fail_open) {
    if (absl::Status s = ValidateBizType(biz_type, KeyLimits{}); !s.ok()) {
      PrintReason("serve: --fail-open '" + biz_type + "': " + Str(s.message()));
      return std::nullopt;
    }
    api_options.fail_open.insert(biz_type);
  }
  api_options.max_body_bytes = flags.server.max_body;
  absl::StatusOr<absl::Duration> poll_max = ParseTtlDuration(flags.wait_poll_max, "--wait-poll-max");
  if (!poll_max.ok() || *poll_max < api_options.wait_poll_min || *poll_max > absl::Minutes(1)) {
    PrintReason("serve: --wait-poll-max '" + flags.wait_poll_max + "': " +
                (poll_max.ok() ? std::string("must be between 15ms and 1m")
                               : Str(poll_max.status().message())));
    return std::nullopt;
  }
  api_options.wait_poll_max = *poll_max;
  absl::StatusOr<absl::Duration> key_window = ParseTtlDuration(flags.key_window, "--key-window");
  if (!key_window.ok() || *key_window <= absl::ZeroDuration()) {
    PrintReason("serve: " + (key_window.ok() ? std::string("--key-window must be longer than 0s")
                                             : Str(key_window.status().message())));
    return std::nullopt;
  }
  api_options.key_health.window = *key_window;
  api_options.metrics_require_token = flags.metrics_token;
  absl::StatusOr<absl::Duration> retry_after_max = RetryAfterMaxOf(flags.server);
  if (!retry_after_max.ok()) {
    PrintReason("serve: " + Str(retry_after_max.status().message()));
    return std::nullopt;
  }
  api_options.retry_after_max = *retry_after_max;
  *exit_code = kExitOk;
  return api_options;
}

// The console's admins from the flags, each with the tenant it is held to; nullopt
// (the reason printed, *exit_code set) on bad input, or when the console is on and
// has no admin: a console anyone could open is never started.
std::optional<std::vector<http::ConsoleAdmin>> ServeConsoleAdmins(
    const ServeFlags& flags, const std::vector<http::Tenant>& tenants,
    std::vector<std::string>* warnings, int* exit_code) {
  if (!flags.console) {
    if (!flags.console_admins.empty() || !flags.console_admins_file.empty() ||
        !flags.console_scopes.empty()) {
      warnings->push_back("console admins are configured but the console is off (--console)");
    }
    return std::vector<http::ConsoleAdmin>{};
  }
  const char* env = std::getenv("IDEM_CONSOLE_ADMINS");
  absl::StatusOr<std::vector<http::Tenant>> admins =
      LoadTenants({.specs = flags.console_admins,
                   .file = flags.console_admins_file,
                   .env = env != nullptr ? env : "",
                   .config_file = ConfigFile(flags.server),
                   .noun = "console admin",
                   .option = "--console-admin",
                   .file_option = "--console-admins-file",
                   .file_noun = "console admins file",
                   .env_name = "IDEM_CONSOLE_ADMINS"},
                  warnings);
  if (!admins.ok()) {
    PrintReason("serve: " + Str(admins.status().message()));
    *exit_code =
        admins.status().code() == absl::StatusCode::kInvalidArgument ? kExitUsage : kExitFailure;
    return std::nullopt;
  }
  *exit_code = kExitUsage;
  if (admins->empty()) {
    PrintReason(
        "serve: --console needs at least one admin: --console-admin NAME:sha256:HEX, "
        "--console-admins-file FILE or IDEM_CONSOLE_ADMINS (`idem token new` makes a token "
        "and its hash)");
    return std::nullopt;
  }
  std::vector<http::ConsoleAdmin> out;
  for (http::Tenant& admin : *admins) {
    out.push_back({.name = std::move(admin.name), .token_sha256 = std::move(admin.token_sha256)});
  }
  for (const std::string& scope : flags.console_scopes) {
    const size_t colon = scope.find(':');
    const std::string name = scope.substr(0, colon);
    const std::string tenant = colon == std::string::npos ? "" : scope.substr(colon + 1);
    auto admin = std::find_if(out.begin(), out.end(), [&](const auto& a) { return a.name == name; });
    const bool known_tenant = std::any_of(tenants.begin(), tenants.end(),
                                          [&](const http::Tenant& t) { return t.name == tenant; });
    if (colon == std::string::npos || admin == out.end() || !known_tenant) {
      PrintReason("serve: --console-scope '" + scope +
                  "': expected ADMIN:TENANT, an admin of the console and a tenant of the server");
      return std::nullopt;
    }
    if (!admin->tenant.empty()) {
      PrintReason("serve: --console-scope: admin '" + name + "' is held to a tenant twice");
      return std::nullopt;
    }
    admin->tenant = tenant;
  }
  *exit_code = kExitOk;
  return out;
}

// The retention policy and the background purge's schedule (none without --purge-every).
struct ServeRetention {
  RetentionPolicy policy;
  std::optional<absl::Duration> purge_every;
};

// Retention: a configured TTL below the derived one is refused, with the derivation
// that shows why, before anything starts. On bad input: the reason printed,
// *exit_code set, nullopt.
std::optional<ServeRetention> ServeRetentionOf(const ServeFlags& flags, int* exit_code) {
  std::string derivation;
  absl::StatusOr<RetentionPolicy> retention = RetentionFromConfig(&derivation);
  if (!retention.ok()) {
    if (!derivation.empty()) std::fputs(derivation.c_str(), stderr);
    PrintReason("serve: " + Str(retention.status().message()));
    *exit_code = retention.status().code() == absl::StatusCode::kFailedPrecondition ? kExitFailure
                                                                                    : kExitUsage;
    return std::nullopt;
  }
  ServeRetention out{.policy = *std::move(retention)};
  if (!flags.purge_every.empty()) {
    absl::StatusOr<absl::Duration> every = ParseTtlDuration(flags.purge_every, "--purge-every");
    if (!every.ok() || *every < absl::Seconds(1)) {
      PrintReason("serve: " + (every.ok() ? std::string("--purge-every must be 1s or more")
                                          : Str(every.status().message())));
      *exit_code = kExitUsage;
      return std::nullopt;
    }
    out.purge_every = *every;
  }
  if (flags.purge_batch < 1 || flags.purge_batch > 10000 || flags.purge_max_rate < 0) {
    PrintReason("serve: --purge-batch must be 1 … 10000 and --purge-max-rate 0 or more");
    *exit_code = kExitUsage;
    return std::nullopt;
  }
  return out;
}

// `store` behind the cache tiers: L1 on by default, Redis with --cache. They answer
// only keys whose final state the store already decided; losing them changes speed
// only. On bad input: the reason printed, *exit_code set, null.
std::unique_ptr<Store> WithServeCache(std::unique_ptr<Store> store, const ServeFlags& flags,
                                      std::vector<std::string>* warnings, int* exit_code) {
  *exit_code = kExitUsage;
  std::string cache_url = flags.cache;
  if (!flags.cache.empty()) {
    absl::StatusOr<std::string> url = UrlWithSecret(
        "--cache", flags.cache, flags.cache_password_file, ConfigFile(flags.server), warnings);
    if (!url.ok()) {
      PrintReason("serve: " + Str(url.status().message()));
      if (url.status().code() != absl::StatusCode::kInvalidArgument) *exit_code = kExitFailure;
      return nullptr;
    }
    cache_url = *std::move(url);
  } else if (!flags.cache_password_file.empty()) {
    PrintReason("serve: --cache-password-file needs --cache redis://…");
    return nullptr;
  }
  if (flags.cache_max_entry_bytes == 0) {
    PrintReason("serve: --cache-max-entry-bytes must be 1 or more");
    return nullptr;
  }
  if ((flags.cache_entries > 0 && flags.cache_bytes > 0) || !cache_url.empty()) {
    absl::StatusOr<absl::Duration> ttl = ParseTtlDuration(flags.cache_ttl, "--cache-ttl");
    if (!ttl.ok()) {
      PrintReason("serve: " + Str(ttl.status().message()));
      return nullptr;
    }
    CacheOptions cache_options;
    cache_options.l1_entries = flags.cache_bytes > 0 ? flags.cache_entries : 0;
    cache_options.l1_bytes = flags.cache_bytes;
    cache_options.max_entry_bytes = flags.cache_max_entry_bytes;
    cache_options.redis_url = cache_url;
    cache_options.ttl = *ttl;
    cache_options.log = [](std::string_view message) { spdlog::warn("cache: {}", message); };
    absl::StatusOr<std::unique_ptr<Store>> cached =
        NewCachingStore(std::move(store), std::move(cache_options));
    if (!cached.ok()) {
      PrintReason("serve: --cache '" + RedactStoreUrl(cache_url) + "': " +
                  Str(RedactStoreSecrets(cached.status(), cache_url).message()));
      return nullptr;
    }
    store = *std::move(cached);
  }
  *exit_code = kExitOk;
  return store;
}

// Without any tenant: a development tenant "dev" with a fresh random token, printed on
// stderr. False (the reason printed) when the system's random source cannot be read.
bool AddServeDevelopmentTenant(http::ApiOptions* api_options) {
  std::string token;
  if (!NewToken(&token)) {
    PrintReason("serve: cannot read the system random source for a development token");
    return false;
  }
  std::fprintf(stderr, "development tenant \"dev\", token: %s\n", token.c_str());
  std::fflush(stderr);
  api_options->tenants.push_back(http::Tenant::WithToken("dev", token));
  return true;
}

// What the server runs with that the operator must know: the fail-open biz_types and
// the retention policy (and that other biz_types keep their records until purged).
void LogServeSettings(const http::ApiOptions& api_options, const RetentionPolicy& retention) {
  for (const std::string& biz_type : api_options.fail_open) {
    spdlog::warn("biz_type \"{}\" is fail-open: while the store is down its claims are let "
                 "through unrecorded, so duplicates may pass (UNSAFE)",
                 biz_type);
  }
  if (retention.empty()) return;  // said among the warnings (RunServe)
  const std::string described = DescribePolicy(retention);
  for (absl::string_view line : absl::StrSplit(described, '\n', absl::SkipEmpty())) {
    spdlog::info("retention: {}", std::string(line.data(), line.size()));
  }
  spdlog::info("retention: any other biz_type's records are kept until purged; each is logged "
               "when its first record is made (idem_biz_types_without_retention counts them)");
}

int RunServe(const ServeFlags& flags) {
  BlockStopSignals();  // before any thread starts: see server_command.h
  absl::StatusOr<http::ServerOptions> server_options = ServerOptionsOf(flags.server);
  if (!server_options.ok()) {
    PrintReason("serve: " + Str(server_options.status().message()));
    return kExitUsage;
  }
  std::vector<std::string> warnings;
  int exit_code = kExitOk;
  std::optional<http::ApiOptions> api_options = ServeApiOptions(flags, &warnings, &exit_code);
  if (!api_options.has_value()) return exit_code;
  std::optional<std::vector<http::ConsoleAdmin>> console_admins =
      ServeConsoleAdmins(flags, api_options->tenants, &warnings, &exit_code);
  if (!console_admins.has_value()) return exit_code;
  std::optional<ServeRetention> retention = ServeRetentionOf(flags, &exit_code);
  if (!retention.has_value()) return exit_code;
  std::unique_ptr<Store> store = OpenServerStore("serve", flags.server, &warnings, &exit_code);
  if (store == nullptr) return exit_code;
  store = WithServeCache(std::move(store), flags, &warnings, &exit_code);
  if (store == nullptr) return exit_code;
  if (api_options->tenants.empty() && !AddServeDevelopmentTenant(&*api_options)) {
    return kExitFailure;
  }

  Guard guard(*store, GuardOptions{.retention = retention->policy});
  http::Metrics metrics(http::BuildInfo{.version = std::string(Version())});
  metrics.AddSection([&store] { return recon::RenderReconMetrics(*store); });
  metrics.AddSection([&store] { return Backend(*store).RenderMetrics(); });

  std::unique_ptr<http::Console> console;
  std::string console_note;
  if (flags.console) {
    http::ConsoleOptions console_options{.admins = *std::move(console_admins)};
    for (const http::Tenant& t : api_options->tenants) console_options.tenants.push_back(t.name);
    const size_t admins = console_options.admins.size();
    console = std::make_unique<http::Console>(*store, std::move(console_options));
    api_options->console = console.get();
    console_note = absl::StrCat("console: pages under /console/ for ", admins,
                                " admin(s); serve them to people through TLS only");
  }
  http::Api api(guard, *store, metrics, *api_options);
  http::Server server(api, *server_options);
  LogServeSettings(*api_options, retention->policy);
  std::vector<std::string> notes;
  if (!console_note.empty()) notes.push_back(console_note);
  if (retention->policy.empty()) {
    // The default, said once the server is up (a failed start stays one line); an
    // info, not a warning: idem_biz_types_without_retention is what alerts use.
    notes.push_back(
        "retention: none configured, so every biz_type's records are kept until purged; to "
        "set one, add a [retention.<biz_type>] section to the config file (docs/retention.md)");
  }
  std::unique_ptr<ScheduledPurge> purge;
  if (retention->purge_every.has_value()) {
    PurgeOptions options;
    options.batch = flags.purge_batch;
    options.max_rate = flags.purge_max_rate;
    options.tombstones = !flags.purge_no_tombstones;
    options.policy = &retention->policy;
    purge = std::make_unique<ScheduledPurge>(*store, options, *retention->purge_every, metrics);
  }
  return ServeUntilSignal("serve", server,
                          absl::StrCat("serving store ", AV(store->url()), " for ",
                                       api_options->tenants.size(), " tenant(s), at most ",
                                       server_options->max_connections, " connections at once,"),
                          warnings, notes);
}

}  // namespace

CommandFn AddServeCommand(CLI::App& root) {
  auto flags = std::make_shared<ServeFlags>();
  CLI::App* sub = root.add_subcommand(
      "serve", "Run the HTTP API: claims, records, health and metrics — one binary, one store");
  AddServerFlags(root, sub, &flags->server);
  sub->add_option("--tenant", flags->tenants,
                  "A tenant and its token's hash, NAME:sha256:HEX (idem token hash), or for "
                  "development NAME:TOKEN (visible in ps; warned); repeatable. Also "
                  "IDEM_TENANTS. Without any tenant, a development tenant \"dev\" with a random "
                  "token is created")
      ->type_name("NAME:HASH")
      ->allow_extra_args(false);
  sub->add_option("--tenants-file", flags->tenants_file,
                  "File of tenants, one \"NAME sha256:HEX\" per line (idem token new makes "
                  "both), '#' comments")
      ->type_name("FILE");
  sub->add_flag("--metrics-token", flags->metrics_token,
                "Require a tenant's bearer token on /metrics");
  // "--fail_open" too: the TOML key the docs name is fail_open (CLI11 matches config
  // keys to long option names; the other keys use dashes, this one also snake_case).
  sub->add_option("--cache", flags->cache,
                  "Redis cache tier, redis://HOST:PORT[/DB]: answers duplicates of finished "
                  "keys; losing it never lets a duplicate through")
      ->type_name("URL");
  sub->add_option("--cache-password-file", flags->cache_password_file,
                  "File holding the Redis password on one line, written into the --cache URL "
                  "(else IDEM_CACHE_PASSWORD; keeps it out of ps)")
      ->type_name("FILE");
  sub->add_option("--cache-entries,--cache_entries", flags->cache_entries,
                  "In-process cache (L1): at most this many records; 0 turns it off")
      ->capture_default_str();
  sub->add_option("--cache-bytes,--cache_bytes", flags->cache_bytes,
                  "In-process cache (L1): at most this many bytes of records (results, keys "
                  "and bookkeeping), least recently used evicted first; 0 turns it off")
      ->capture_default_str();
  sub->add_option("--cache-max-entry-bytes,--cache_max_entry_bytes", flags->cache_max_entry_bytes,
                  "A finished record larger than this is cached in no tier (its duplicates "
                  "are answered by the store)")
      ->capture_default_str();
  sub->add_option("--cache-ttl,--cache_ttl", flags->cache_ttl,
                  "How long finished records stay cached (keep it below the retention TTL)")
      ->capture_default_str();
  sub->add_option("--wait-poll-max,--wait_poll_max", flags->wait_poll_max,
                  "Longest pause between the reads of a claim that waits (wait_ms) on a key "
                  "another request holds (15ms … 1m): each waiter costs the store one plain read "
                  "per pause at most. On postgres:// a waiter is also woken at once when any "
                  "process finishes the key (LISTEN/NOTIFY), so this can be long there")
      ->capture_default_str();
  sub->add_option("--key-window,--key_window", flags->key_window,
                  "Key health: a new key whose request fingerprint had another new key less "
                  "than this before counts as regenerated (idem_key_regenerated_total; "
                  "docs/keys.md)")
      ->capture_default_str();
  sub->add_option("--purge-every,--purge_every", flags->purge_every,
                  "Purge records past their retention this often, in the background (as idem "
                  "purge does; the way to purge a rocksdb:// store, which serve holds). Default: "
                  "never")
      ->type_name("DURATION");
  sub->add_option("--purge-batch,--purge_batch", flags->purge_batch,
                  "Records per purge transaction")
      ->capture_default_str();
  sub->add_option("--purge-max-rate,--purge_max_rate", flags->purge_max_rate,
                  "At most this many records purged per second (0: no limit)")
      ->capture_default_str();
  sub->add_flag("--purge-no-tombstones,--purge_no_tombstones", flags->purge_no_tombstones,
                "Purge without leaving tombstones: a very late duplicate then runs again "
                "(UNSAFE)");
  sub->add_flag("--console", flags->console,
                "Serve the operator console under /console/ (find records, see one): needs "
                "an admin (--console-admin, --console-admins-file or IDEM_CONSOLE_ADMINS); "
                "docs/console.md");
  sub->add_option("--console-admin,--console_admin", flags->console_admins,
                  "A console admin and its token's hash, NAME:sha256:HEX (idem token new); "
                  "repeatable. Also IDEM_CONSOLE_ADMINS")
      ->type_name("NAME:HASH")
      ->allow_extra_args(false);
  sub->add_option("--console-admins-file,--console_admins_file", flags->console_admins_file,
                  "File of console admins, one \"NAME sha256:HEX\" per line, '#' comments")
      ->type_name("FILE");
  sub->add_option("--console-scope,--console_scope", flags->console_scopes,
                  "Hold a console admin to one tenant, ADMIN:TENANT: it sees only that "
                  "tenant's records; repeatable")
      ->type_name("ADMIN:TENANT")
      ->allow_extra_args(false);
  sub->add_option("--fail-open,--fail_open", flags->fail_open,
                  "UNSAFE, for low-value traffic only: while the store is down, claims of this "
                  "biz_type answer 201 {\"outcome\":\"acquired\",\"token\":0,\"degraded\":true} "
                  "without any record, so duplicates may pass (repeatable; counted in "
                  "idem_fail_open_total). Every other biz_type fails closed with 503")
      ->type_name("BIZ_TYPE")
      ->allow_extra_args(false);
  return [flags] { return RunServe(*flags); };
}

}  // namespace idem::cli
