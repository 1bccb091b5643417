// `idem proxy`: the Idempotency-Key header in front of any HTTP API (http/proxy/proxy.h).
//
//   idem proxy --upstream http://127.0.0.1:8080 --listen 127.0.0.1:7080
//              --store sqlite://./idem-proxy.db [--client-header Authorization]
//
// The first line on stdout is "listening on HOST:PORT", as for `idem serve`. Several
// proxies act as one when they share a server store (postgres://, mysql://).
//
// Exit status: 0 after SIGTERM/SIGINT; 1 when the store cannot be opened or the
// address cannot be bound; 2 for malformed options.
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cli/commands.h"
#include "cli/reason.h"
#include "cli/server_command.h"
#include "core/absl_compat.h"
#include "http/api/api.h"
#include "http/server/metrics.h"
#include "http/proxy/proxy.h"
#include "http/server/server.h"
#include "http/client/upstream.h"
#include "idem/idem.h"
#include "idem/ttl.h"
#include "spdlog/spdlog.h"

namespace idem::cli {
namespace {

struct ProxyFlags {
  ServerFlags server{.listen = "127.0.0.1:7080", .store = "sqlite://./idem-proxy.db"};
  std::string upstream;
  std::vector<std::string> methods = {"POST", "PATCH"};
  std::vector<std::string> key_optional;
  std::string client_header;
  std::string fingerprint = "raw";
  std::string lease = "60s";
  std::string upstream_timeout = "30s";
  uint64_t max_response = 8 << 20;
  bool keep_set_cookie = false;
  std::string biz_type = "http";
  std::string admin_listen;  // "": no admin listener
};

int ProxyUsage(const std::string& why) {
  PrintReason("proxy: " + why);
  return kExitUsage;
}

// What the flags say, checked: every field is valid once ParseProxyFlags returns it.
struct ProxyPlan {
  http::ServerOptions server_options;
  http::UpstreamUrl upstream_url;
  http::ProxyOptions options;
  absl::Duration upstream_timeout;
};

// The errors of the Parse* helpers below are the usage line (ProxyUsage) as it is printed.
absl::Status ParseProxyMethods(const ProxyFlags& flags, http::ProxyOptions* options) {
  options->methods.clear();
  for (const std::string& list : flags.methods) {
    for (absl::string_view m : absl::StrSplit(list, ',', absl::SkipWhitespace())) {
      std::string method = absl::AsciiStrToUpper(absl::StripAsciiWhitespace(m));
      if (method.empty() || method.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZ-") !=
                                std::string::npos) {
        return absl::InvalidArgumentError("--methods '" + list +
                                          "': a method is a word such as POST");
      }
      if (method == "GET" || method == "HEAD" || method == "OPTIONS") {
        return absl::InvalidArgumentError("--methods: " + method +
                                          " is safe and needs no key; list the methods "
                                          "with effects (POST, PATCH, PUT, DELETE)");
      }
      options->methods.insert(method);
    }
  }
  return absl::OkStatus();
}

// --lease and --upstream-timeout, the one outlasting the other.
absl::Status ParseProxyTimes(const ProxyFlags& flags, ProxyPlan* plan) {
  absl::StatusOr<absl::Duration> lease = ParseTtlDuration(flags.lease, "--lease");
  absl::StatusOr<absl::Duration> timeout =
      ParseTtlDuration(flags.upstream_timeout, "--upstream-timeout");
  if (!lease.ok()) return lease.status();
  if (!timeout.ok()) return timeout.status();
  if (*timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--upstream-timeout must be more than 0");
  }
  if (*lease < absl::Milliseconds(100) || *lease > absl::Hours(1)) {
    return absl::InvalidArgumentError("--lease must be from 100ms to 1h");
  }
  // The lease must outlast the forwarded request, or a retry would be forwarded
  // while the first is still running upstream.
  if (*lease <= *timeout) {
    return absl::InvalidArgumentError("--lease (" + flags.lease +
                                      ") must be longer than --upstream-timeout (" +
                                      flags.upstream_timeout + ")");
  }
  plan->options.lease = *lease;
  plan->upstream_timeout = *timeout;
  return absl::OkStatus();
}

absl::StatusOr<ProxyPlan> ParseProxyFlags(const ProxyFlags& flags) {
  ProxyPlan plan;
  IDEM_ASSIGN_OR_RETURN(plan.server_options, ServerOptionsOf(flags.server));
  IDEM_ASSIGN_OR_RETURN(plan.upstream_url, http::ParseUpstreamUrl(flags.upstream));
  http::ProxyOptions& options = plan.options;
  IDEM_RETURN_IF_ERROR(ParseProxyMethods(flags, &options));
  for (const std::string& prefix : flags.key_optional) {
    if (!prefix.starts_with("/")) {
      return absl::InvalidArgumentError("--key-optional '" + prefix + "' must start with /");
    }
    options.optional_prefixes.push_back(prefix);
  }
  options.client_header = flags.client_header;
  // Claims and replays on one set of threads, upstream calls on another (Proxy).
  options.store_threads = flags.server.threads;
  options.upstream_threads = flags.server.threads;
  if (flags.fingerprint != "raw" && flags.fingerprint != "json") {
    return absl::InvalidArgumentError("--fingerprint '" + flags.fingerprint +
                                      "' must be raw or json");
  }
  options.canonical_json = flags.fingerprint == "json";
  options.keep_set_cookie = flags.keep_set_cookie;
  if (absl::Status s = ValidateBizType(flags.biz_type, KeyLimits{}); !s.ok()) {
    return absl::InvalidArgumentError("--biz-type '" + flags.biz_type + "': " + Str(s.message()));
  }
  options.biz_type = flags.biz_type;
  IDEM_RETURN_IF_ERROR(ParseProxyTimes(flags, &plan));
  IDEM_ASSIGN_OR_RETURN(options.retry_after_max, RetryAfterMaxOf(flags.server));
  if (flags.max_response < 1 || flags.max_response > (uint64_t{1} << 30)) {
    return absl::InvalidArgumentError("--max-response must be between 1 and 1073741824 bytes");
  }
  return plan;
}

// The first line `idem proxy` logs once it listens.
std::string ProxyBanner(const ProxyPlan& plan, const Store& store) {
  const std::string& client_header = plan.options.client_header;
  return absl::StrCat("proxying to http://", plan.upstream_url.authority,
                      plan.upstream_url.base_path, " with keys in ", AV(store.url()),
                      client_header.empty()
                          ? " (keys are global: one key space shared by every client)"
                          : " (keys per client, by a digest of the " + client_header + " header)",
                      ",");
}

int RunProxy(const ProxyFlags& flags) {
  BlockStopSignals();  // before any thread starts: see server_command.h
  absl::StatusOr<ProxyPlan> plan = ParseProxyFlags(flags);
  if (!plan.ok()) return ProxyUsage(Str(plan.status().message()));
  const http::ProxyOptions& options = plan->options;

  int exit_code = kExitOk;
  std::vector<std::string> warnings;
  std::unique_ptr<Store> store = OpenServerStore("proxy", flags.server, &warnings, &exit_code);
  if (store == nullptr) return exit_code;
  if (options.client_header.empty()) {
    warnings.push_back(
        "keys are global (no --client-header): every client shares one key space, so a "
        "client that sends another's Idempotency-Key and request is answered with the "
        "other's stored response; if the upstream authenticates its clients, restart with "
        "--client-header Authorization (or the header that names the client)");
  }
  GuardOptions guard_options;
  guard_options.lease = options.lease;
  Guard guard(*store, guard_options);
  http::Metrics metrics(http::BuildInfo{.version = std::string(Version())});
  const http::Upstream upstream(plan->upstream_url, {.timeout = plan->upstream_timeout,
                                                     .max_response_bytes = flags.max_response});
  http::Proxy proxy(guard, upstream, metrics, options);
  // Every request of the main listener goes to the Proxy's own threads
  // (Proxy::HandleAsync); the Server's worker pool is left one thread.
  plan->server_options.worker_threads = 1;
  http::Server server(proxy, plan->server_options);
  // Every path of the main listener is the upstream's; /healthz, /readyz (the store
  // answers) and /metrics (the proxy's counts) get a listener of their own. It is
  // the API's handler with no tenants, so any /v1/ call there is 401.
  std::unique_ptr<http::Api> admin;
  std::unique_ptr<http::Server> admin_server;
  if (!flags.admin_listen.empty()) {
    ServerFlags admin_flags = flags.server;
    admin_flags.listen = flags.admin_listen;
    admin_flags.threads = 2;
    admin_flags.max_connections = 64;
    absl::StatusOr<http::ServerOptions> admin_options = ServerOptionsOf(admin_flags);
    if (!admin_options.ok()) return ProxyUsage("--admin-listen '" + flags.admin_listen + "' must be HOST:PORT");
    admin = std::make_unique<http::Api>(guard, *store, metrics,
                                        http::ApiOptions{.watch_retention = false});
    admin_server = std::make_unique<http::Server>(*admin, *admin_options);
    if (absl::Status s = admin_server->Start(); !s.ok()) {
      PrintReason("proxy: --admin-listen: " + Str(s.message()));
      return kExitFailure;
    }
    spdlog::info("health, readiness and metrics on {}:{}", admin_server->address(),
                 admin_server->port());
  }
  const int status = ServeUntilSignal("proxy", server, ProxyBanner(*plan, *store), warnings);
  if (admin_server != nullptr) {
    admin_server->Shutdown();
    admin_server->Wait();
  }
  return status;
}

}  // namespace

CommandFn AddProxyCommand(CLI::App& root) {
  auto flags = std::make_shared<ProxyFlags>();
  CLI::App* sub =
      root.add_subcommand("proxy", "Put Idempotency-Key semantics in front of an HTTP API");
  sub->add_option("--upstream", flags->upstream, "The API behind the proxy, http://HOST[:PORT][/PATH]")
      ->type_name("URL")
      ->required();
  AddServerFlags(root, sub, &flags->server);
  sub->add_option("--methods", flags->methods,
                  "Methods that need an Idempotency-Key (comma-separated or repeated); others "
                  "pass through untouched")
      ->capture_default_str()
      ->delimiter(',');
  sub->add_option("--key-optional", flags->key_optional,
                  "A path prefix where a request without a key passes through untouched "
                  "(repeatable); with a key it is still deduplicated")
      ->type_name("PREFIX");
  sub->add_option("--client-header", flags->client_header,
                  "Keep keys per client, by a digest of this header (e.g. Authorization); a "
                  "request without it, or with it twice, is 400. Without this option keys are "
                  "global: one client that sends another's key and request gets its answer")
      ->type_name("NAME");
  sub->add_option("--fingerprint", flags->fingerprint,
                  "How a retry is recognised as the same request: raw (method, target and body "
                  "bytes) or json (the body's RFC 8785 canonical form: key order and "
                  "whitespace do not matter)")
      ->capture_default_str();
  sub->add_option("--lease", flags->lease,
                  "How long a forwarded request holds its key; if the proxy dies, the next "
                  "retry after it is forwarded again. Longer than --upstream-timeout")
      ->capture_default_str();
  sub->add_option("--upstream-timeout", flags->upstream_timeout,
                  "Time from a request's arrival to the upstream's whole answer (else 504, "
                  "and the key is released)")
      ->capture_default_str();
  sub->add_option("--max-response", flags->max_response,
                  "Largest upstream answer body in bytes, checked against Content-Length "
                  "and while it streams (else 502, nothing stored, and the key is released)")
      ->capture_default_str();
  sub->add_flag("--keep-set-cookie", flags->keep_set_cookie,
                "Store Set-Cookie with the answer and replay it (default: replays drop it)");
  sub->add_option("--biz-type", flags->biz_type, "The biz_type of the proxy's records")
      ->capture_default_str();
  sub->add_option("--admin-listen", flags->admin_listen,
                  "Address for /healthz, /readyz and /metrics, HOST:PORT (every path of "
                  "--listen belongs to the upstream)")
      ->type_name("HOST:PORT");
  return [flags] { return RunProxy(*flags); };
}

}  // namespace idem::cli
