// `idem serve`: the HTTP API of SPEC §11 over a store.
//
//   idem serve --listen 127.0.0.1:7070 --store sqlite://./idem.db --tenant acme:SECRET
//
// The first line on stdout is exactly "listening on HOST:PORT" (the bound port, also
// when --listen asked for port 0), flushed at once, so scripts and tests can wait
// for it. Logs go to stderr. Without --tenant a development tenant "dev" with a
// fresh random token is created and its token printed on stderr.
//
// Store down: claims, complete, fail and record reads answer 503 (fail closed), and
// /readyz is 503, until the store answers again; no restart is needed. --fail-open
// BIZ_TYPE (repeatable; TOML [serve] fail_open = ["..."]) lets claims of the named
// biz_types through unrecorded instead (201 with "degraded":true) — UNSAFE, see
// docs/operations.md.
//
// SIGTERM/SIGINT shut down gracefully (exit 0). Exit status: 1 when the store cannot
// be opened or the address cannot be bound; 2 for malformed options.
#include <sys/random.h>
#include <sys/resource.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "boost/asio/io_context.hpp"
#include "boost/asio/signal_set.hpp"
#include "cli/commands.h"
#include "cli/reason.h"
#include "idem/cache.h"
#include "idem/ttl.h"
#include "http/api.h"
#include "http/metrics.h"
#include "http/server.h"
#include "idem/idem.h"
#include "spdlog/spdlog.h"

namespace idem::cli {
namespace {


struct ServeFlags {
  std::string listen = "127.0.0.1:7070";
  std::string store = "sqlite://./idem.db";
  std::vector<std::string> tenants;
  uint64_t max_body = 1 << 20;
  int threads = 16;
  int io_threads = 2;
  int max_connections = 0;  // 0: sized from the descriptor limit (ConnectionCap)
  bool require_store_at_start = false;
  std::string header_timeout = "10s";
  bool metrics_token = false;
  std::vector<std::string> fail_open;
  std::string cache;            // redis://host:port, empty: no Redis tier
  uint64_t cache_entries = 100000;  // in-process L1 size, 0: off
  std::string cache_ttl = "24h";
};

std::string Str(absl::string_view s) { return std::string(s.data(), s.size()); }

// "HOST:PORT", "[v6]:PORT".
bool ParseListen(const std::string& listen, std::string* host, uint16_t* port) {
  size_t colon = listen.rfind(':');
  if (colon == std::string::npos || colon == 0) return false;
  std::string h = listen.substr(0, colon);
  std::string p = listen.substr(colon + 1);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  uint32_t n = 0;
  if (h.empty() || p.empty() || !absl::SimpleAtoi(absl::string_view(p.data(), p.size()), &n) ||
      n > 65535 || p.find_first_not_of("0123456789") != std::string::npos) {
    return false;
  }
  *host = h;
  *port = static_cast<uint16_t>(n);
  return true;
}

// 128 bits from the kernel's CSPRNG, as hex.
bool RandomToken(std::string* out) {
  unsigned char bytes[16];
  size_t got = 0;
  while (got < sizeof(bytes)) {
    ssize_t n = getrandom(bytes + got, sizeof(bytes) - got, 0);
    if (n <= 0) return false;
    got += static_cast<size_t>(n);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  out->clear();
  for (unsigned char b : bytes) {
    *out += kHex[b >> 4];
    *out += kHex[b & 0xF];
  }
  return true;
}

absl::Status ParseTenants(const std::vector<std::string>& specs,
                          std::vector<http::Tenant>* tenants) {
  std::set<std::string> names, tokens;
  for (const std::string& spec : specs) {
    size_t colon = spec.find(':');
    if (colon == std::string::npos) {
      return absl::InvalidArgumentError("--tenant '" + spec + "' must be NAME:TOKEN");
    }
    http::Tenant t{spec.substr(0, colon), spec.substr(colon + 1)};
    if (absl::Status s = ValidateTenant(t.name); !s.ok()) {
      return absl::InvalidArgumentError("--tenant '" + spec + "': " + Str(s.message()));
    }
    if (t.token.empty() || t.token.find_first_of(" \t\r\n") != std::string::npos) {
      return absl::InvalidArgumentError("--tenant '" + t.name +
                                        ":...': the token must be non-empty, without spaces");
    }
    if (!names.insert(t.name).second) {
      return absl::InvalidArgumentError("--tenant: tenant '" + t.name + "' is given twice");
    }
    if (!tokens.insert(t.token).second) {
      return absl::InvalidArgumentError("--tenant: two tenants share a token");
    }
    tenants->push_back(std::move(t));
  }
  return absl::OkStatus();
}

// Descriptors left to everything but client connections: the store's connections
// (pool= is at most 1024, usually 8), the database files, logs, the listener.
constexpr rlim_t kReservedDescriptors = 128;

// Raises the soft descriptor limit to the hard one (a systemd default is 1,024
// soft, 524,288 hard) and answers the connection cap: `requested`, or when 0 the
// limit minus kReservedDescriptors. A requested cap past what the limit allows is
// kept (the server then sheds at EMFILE) with a warning.
int ConnectionCap(int requested) {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0) return requested > 0 ? requested : 1024;
  if (lim.rlim_cur < lim.rlim_max) {
    rlimit raised = lim;
    raised.rlim_cur = lim.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) lim = raised;
  }
  const rlim_t files = std::min<rlim_t>(lim.rlim_cur, 1 << 24);
  const int derived =
      static_cast<int>(files > kReservedDescriptors + 16 ? files - kReservedDescriptors : 16);
  if (requested == 0) return derived;
  if (requested > derived) {
    spdlog::warn("--max-connections {} is more than the descriptor limit ({}) leaves for "
                 "connections ({}); past it new connections are shed as they arrive",
                 requested, static_cast<uint64_t>(files), derived);
  }
  return requested;
}

int RunServe(const ServeFlags& flags) {
  http::ServerOptions server_options;
  if (!ParseListen(flags.listen, &server_options.host, &server_options.port)) {
    PrintReason("serve: --listen '" + flags.listen + "' must be HOST:PORT (port 0-65535)");
    return kExitUsage;
  }
  if (flags.threads < 1 || flags.threads > 1024 || flags.io_threads < 1 || flags.io_threads > 256) {
    PrintReason("serve: --threads must be 1-1024 and --io-threads 1-256");
    return kExitUsage;
  }
  if (flags.max_body < 1 || flags.max_body > (uint64_t{1} << 30)) {
    PrintReason("serve: --max-body must be between 1 and 1073741824 bytes");
    return kExitUsage;
  }
  http::ApiOptions api_options;
  if (absl::Status s = ParseTenants(flags.tenants, &api_options.tenants); !s.ok()) {
    PrintReason("serve: " + Str(s.message()));
    return kExitUsage;
  }
  for (const std::string& biz_type : flags.fail_open) {
    if (absl::Status s = ValidateBizType(biz_type, KeyLimits{}); !s.ok()) {
      PrintReason("serve: --fail-open '" + biz_type + "': " + Str(s.message()));
      return kExitUsage;
    }
    api_options.fail_open.insert(biz_type);
  }
  api_options.max_body_bytes = flags.max_body;
  api_options.metrics_require_token = flags.metrics_token;
  server_options.max_body_bytes = flags.max_body;
  server_options.worker_threads = flags.threads;
  server_options.io_threads = flags.io_threads;
  if (flags.max_connections < 0) {
    PrintReason("serve: --max-connections must be 1 or more (0: from the descriptor limit)");
    return kExitUsage;
  }
  absl::StatusOr<absl::Duration> header_timeout =
      ParseTtlDuration(flags.header_timeout, "--header-timeout");
  if (!header_timeout.ok() || *header_timeout <= absl::ZeroDuration() ||
      *header_timeout > absl::Hours(1)) {
    PrintReason("serve: --header-timeout '" + flags.header_timeout +
                "' must be a duration from 1ms to 1h (e.g. 10s, 500ms)");
    return kExitUsage;
  }
  server_options.header_timeout = *header_timeout;
  server_options.max_connections = ConnectionCap(flags.max_connections);

  // A database that is down at start is waited for (readiness 503 until it
  // answers), as one that goes down later is; what no wait fixes fails here.
  absl::StatusOr<std::unique_ptr<Store>> store =
      OpenStore(flags.store, {.open_when_reachable = !flags.require_store_at_start});
  if (!store.ok()) {
    PrintReason("serve: cannot open store " + RedactStoreUrl(flags.store) + ": " +
                Str(store.status().message()));
    return kExitFailure;
  }
  if (absl::Status ping = (*store)->Ping(); !ping.ok() && IsStoreFault(ping)) {
    spdlog::warn("store {} is not reachable: {}; serving anyway: /readyz and requests answer "
                 "503 until it is (--require-store-at-start refuses to start instead)",
                 RedactStoreUrl(flags.store), Str(ping.message()));
  }

  // Cache tiers (SPEC §6): L1 on by default, Redis with --cache. They answer only
  // keys whose final state the store already decided; losing them changes speed only.
  if (flags.cache_entries > 0 || !flags.cache.empty()) {
    absl::StatusOr<absl::Duration> ttl = ParseTtlDuration(flags.cache_ttl, "--cache-ttl");
    if (!ttl.ok()) {
      PrintReason("serve: " + Str(ttl.status().message()));
      return kExitUsage;
    }
    CacheOptions cache_options;
    cache_options.l1_entries = flags.cache_entries;
    cache_options.redis_url = flags.cache;
    cache_options.ttl = *ttl;
    cache_options.log = [](std::string_view message) { spdlog::warn("cache: {}", message); };
    absl::StatusOr<std::unique_ptr<Store>> cached =
        NewCachingStore(*std::move(store), std::move(cache_options));
    if (!cached.ok()) {
      PrintReason("serve: --cache '" + RedactStoreUrl(flags.cache) + "': " + Str(cached.status().message()));
      return kExitUsage;
    }
    store = std::move(cached);
  }

  if (api_options.tenants.empty()) {
    http::Tenant dev{"dev", ""};
    if (!RandomToken(&dev.token)) {
      PrintReason("serve: cannot read the system random source for a development token");
      return kExitFailure;
    }
    std::fprintf(stderr, "development tenant \"dev\", token: %s\n", dev.token.c_str());
    std::fflush(stderr);
    api_options.tenants.push_back(std::move(dev));
  }

  Guard guard(**store);
  http::Metrics metrics(http::BuildInfo{.version = std::string(Version())});

  http::Api api(guard, **store, metrics, api_options);
  http::Server server(api, server_options);

  // Installed before the listening line, so a signal sent right after it is handled.
  boost::asio::io_context signal_ioc;
  boost::asio::signal_set signals(signal_ioc, SIGINT, SIGTERM);

  if (absl::Status s = server.Start(); !s.ok()) {
    PrintReason("serve: " + Str(s.message()));
    return kExitFailure;
  }
  std::string address = server.address();
  if (address.find(':') != std::string::npos) address = "[" + address + "]";
  std::printf("listening on %s:%u\n", address.c_str(), static_cast<unsigned>(server.port()));
  std::fflush(stdout);
  spdlog::info("serving store {} for {} tenant(s) on {}:{}, at most {} connections at once",
               (*store)->url(), api_options.tenants.size(), address, server.port(),
               server_options.max_connections);
  for (const std::string& biz_type : api_options.fail_open) {
    spdlog::warn("biz_type \"{}\" is fail-open: while the store is down its claims are let "
                 "through unrecorded, so duplicates may pass (UNSAFE)",
                 biz_type);
  }

  signals.async_wait([&](const boost::system::error_code& ec, int signo) {
    if (!ec) spdlog::info("signal {}: shutting down", signo);
    server.Shutdown();
  });
  signal_ioc.run();
  server.Wait();
  spdlog::info("stopped");
  return kExitOk;
}

}  // namespace

CommandFn AddServeCommand(CLI::App& root) {
  auto flags = std::make_shared<ServeFlags>();
  CLI::App* sub = root.add_subcommand("serve", "Run the HTTP API (SPEC §11)");
  sub->add_option("--listen", flags->listen, "Address to listen on, HOST:PORT (port 0: any)")
      ->capture_default_str();
  sub->add_option("--store", flags->store, "Store URL: sqlite://PATH, postgres://…, mysql://… or memory://")
      ->capture_default_str();
  sub->add_option("--tenant", flags->tenants,
                  "A tenant and its bearer token, NAME:TOKEN (repeatable); without any, a "
                  "development tenant \"dev\" with a random token is created")
      ->type_name("NAME:TOKEN")
      ->allow_extra_args(false);
  sub->add_option("--max-body", flags->max_body, "Largest request body in bytes (else 413)")
      ->capture_default_str();
  sub->add_option("--threads", flags->threads, "Worker threads running store calls")
      ->capture_default_str();
  sub->add_option("--io-threads", flags->io_threads, "Threads running network I/O")
      ->capture_default_str();
  sub->add_option("--max-connections", flags->max_connections,
                  "Connections served at once; past it new ones are answered 503 and closed "
                  "(0: the descriptor limit, raised to its hard maximum, minus 128)")
      ->capture_default_str();
  sub->add_option("--header-timeout", flags->header_timeout,
                  "Time from a request's first byte to the end of its header (else 408)")
      ->capture_default_str();
  sub->add_flag("--require-store-at-start", flags->require_store_at_start,
                "Exit 1 when the store cannot be reached at start (default: start, and answer "
                "503 until it can)");
  sub->add_flag("--metrics-token", flags->metrics_token,
                "Require a tenant's bearer token on /metrics");
  // "--fail_open" too: the TOML key the docs name is fail_open (CLI11 matches config
  // keys to long option names; the other keys use dashes, this one also snake_case).
  sub->add_option("--cache", flags->cache,
                  "Redis cache tier, redis://HOST:PORT[/DB]: answers duplicates of finished "
                  "keys; losing it never lets a duplicate through")
      ->type_name("URL");
  sub->add_option("--cache-entries,--cache_entries", flags->cache_entries,
                  "In-process cache (L1) size in records; 0 turns it off")
      ->capture_default_str();
  sub->add_option("--cache-ttl,--cache_ttl", flags->cache_ttl,
                  "How long finished records stay cached (keep it below the retention TTL)")
      ->capture_default_str();
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
