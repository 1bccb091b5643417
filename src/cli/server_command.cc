#include "cli/server_command.h"

#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "cli/commands.h"
#include "cli/reason.h"
#include "cli/secrets.h"
#include "core/absl_compat.h"
#include "http/server/problem.h"
#include "idem/idem.h"
#include "idem/ttl.h"
#include "spdlog/spdlog.h"

namespace idem::cli {

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

namespace {

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

// Caps glibc's malloc arenas at max(2, cores) unless the operator set
// MALLOC_ARENA_MAX. glibc gives up to 8 per core, and a server whose pool and
// RocksDB threads each take one keeps every arena's freed pages: on rocksdb:// with
// 3 M records, 3 s of replays of old keys grew the resident set from 38 to 124 MiB
// with the default and to 74 MiB with 2 arenas (bench/rss.sh, docs/benchmarks.md);
// the per-thread caches (tcache) keep small allocations off the arena locks.
void LimitMallocArenas() {
  if (std::getenv("MALLOC_ARENA_MAX") != nullptr) return;
  const unsigned cores = std::thread::hardware_concurrency();
  mallopt(M_ARENA_MAX, static_cast<int>(std::max(2u, cores)));
}

}  // namespace

void AddServerFlags(CLI::App& root, CLI::App* sub, ServerFlags* flags) {
  flags->config = root.get_config_ptr();
  sub->add_option("--listen", flags->listen, "Address to listen on, HOST:PORT (port 0: any)")
      ->capture_default_str();
  flags->store_option = sub->add_option("--store", flags->store,
                  "Store URL: sqlite://PATH, rocksdb://DIR, postgres://…, mysql://… or "
                  "memory:// (also IDEM_STORE); keep a password out of it with "
                  "--store-password-file")
      ->envname("IDEM_STORE")
      ->capture_default_str();
  sub->add_option("--store-password-file", flags->store_password_file,
                  "File holding the store's password on one line, written into the --store "
                  "URL (else IDEM_STORE_PASSWORD; keeps it out of ps)")
      ->type_name("FILE");
  sub->add_option("--max-body", flags->max_body, "Largest request body in bytes (else 413)")
      ->capture_default_str();
  sub->add_option("--threads", flags->threads,
                  "Worker threads running the blocking calls (store, upstream)")
      ->capture_default_str();
  flags->io_threads_option =
      sub->add_option("--io-threads", flags->io_threads,
                      "Threads running network I/O: lean's event loops (unless given: one "
                      "per core it may run on) or beast's io_contexts")
          ->capture_default_str();
  sub->add_option("--http", flags->http,
                  "HTTP engine: lean (one epoll loop per I/O thread that parses, answers and "
                  "writes each request it can on that thread) or beast (Boost.Beast, the "
                  "engine before lean) (also IDEM_HTTP)")
      ->envname("IDEM_HTTP")
      ->capture_default_str();
  sub->add_option("--max-connections", flags->max_connections,
                  "Connections served at once; past it new ones are answered 503 and closed "
                  "(0: the descriptor limit, raised to its hard maximum, minus 128)")
      ->capture_default_str();
  sub->add_option("--header-timeout", flags->header_timeout,
                  "Time from a request's first byte to the end of its header (else 408)")
      ->capture_default_str();
  sub->add_option("--retry-after-max", flags->retry_after_max,
                  "Longest Retry-After, in whole seconds (1-3600), of a 409 in_progress "
                  "answered while another request holds the key: the holder's lease time left, "
                  "capped at this. Short, so a client asks again soon: most effects finish in "
                  "well under a second, and the lease is for crash recovery, not a polling "
                  "interval")
      ->capture_default_str();
  sub->add_flag("--require-store-at-start", flags->require_store_at_start,
                "Exit 1 when the store cannot be reached at start (default: start, and answer "
                "503 until it can)");
}

absl::StatusOr<http::ServerOptions> ServerOptionsOf(const ServerFlags& flags) {
  http::ServerOptions options;
  if (!ParseListen(flags.listen, &options.host, &options.port)) {
    return absl::InvalidArgumentError("--listen '" + flags.listen +
                                      "' must be HOST:PORT (port 0-65535)");
  }
  if (flags.threads < 1 || flags.threads > 1024 || flags.io_threads < 1 || flags.io_threads > 256) {
    return absl::InvalidArgumentError("--threads must be 1-1024 and --io-threads 1-256");
  }
  if (flags.max_body < 1 || flags.max_body > (uint64_t{1} << 30)) {
    return absl::InvalidArgumentError("--max-body must be between 1 and 1073741824 bytes");
  }
  if (flags.max_connections < 0) {
    return absl::InvalidArgumentError(
        "--max-connections must be 1 or more (0: from the descriptor limit)");
  }
  absl::StatusOr<absl::Duration> header_timeout =
      ParseTtlDuration(flags.header_timeout, "--header-timeout");
  if (!header_timeout.ok() || *header_timeout <= absl::ZeroDuration() ||
      *header_timeout > absl::Hours(1)) {
    return absl::InvalidArgumentError("--header-timeout '" + flags.header_timeout +
                                      "' must be a duration from 1ms to 1h (e.g. 10s, 500ms)");
  }
  if (flags.http == "beast") {
    options.engine = http::HttpEngine::kBeast;
  } else if (flags.http == "lean") {
    options.engine = http::HttpEngine::kLean;
  } else {
    return absl::InvalidArgumentError("--http '" + flags.http + "' must be lean or beast");
  }
  options.max_body_bytes = flags.max_body;
  options.worker_threads = flags.threads;
  options.io_threads = flags.io_threads;
  const bool io_threads_given =
      flags.io_threads_option != nullptr && flags.io_threads_option->count() > 0;
  if (options.engine == http::HttpEngine::kLean && !io_threads_given) {
    // One loop per core this process may run on (taskset, a cgroup's cpuset), not
    // per core of the machine: two loops on one core only take turns.
    cpu_set_t cpus;
    CPU_ZERO(&cpus);
    const int usable = sched_getaffinity(0, sizeof cpus, &cpus) == 0
                           ? CPU_COUNT(&cpus)
                           : static_cast<int>(std::thread::hardware_concurrency());
    options.io_threads = std::clamp(usable, 1, 256);
  }
  options.header_timeout = *header_timeout;
  options.max_connections = ConnectionCap(flags.max_connections);
  LimitMallocArenas();
  return options;
}

absl::StatusOr<absl::Duration> RetryAfterMaxOf(const ServerFlags& flags) {
  const absl::Duration most = absl::Seconds(flags.retry_after_max);
  if (most < absl::Seconds(1) || most > http::kLongestRetryAfterMax) {
    return absl::InvalidArgumentError(
        absl::StrCat("--retry-after-max ", flags.retry_after_max,
                     ": must be whole seconds from 1 to ",
                     absl::ToInt64Seconds(http::kLongestRetryAfterMax)));
  }
  return most;
}

std::string ConfigFile(const ServerFlags& flags) {
  return flags.config != nullptr && !flags.config->results().empty()
             ? flags.config->results().back()
             : "";
}

std::unique_ptr<Store> OpenServerStore(std::string_view cmd, const ServerFlags& flags,
                                       std::vector<std::string>* warnings, int* exit_code) {
  const std::string prefix = std::string(cmd) + ": ";
  const bool store_given = flags.store_option != nullptr && flags.store_option->count() > 0;
  if (std::string legacy = LegacyDefaultStoreInTheWay(flags.store, store_given); !legacy.empty()) {
    PrintReason(prefix + legacy);
    *exit_code = kExitFailure;
    return nullptr;
  }
  absl::StatusOr<std::string> url = UrlWithSecret("--store", flags.store, flags.store_password_file, ConfigFile(flags), warnings);
  if (!url.ok()) {
    PrintReason(prefix + Str(url.status().message()));
    *exit_code = url.status().code() == absl::StatusCode::kInvalidArgument ? kExitUsage
                                                                           : kExitFailure;
    return nullptr;
  }
  // A database that is down at start is waited for (readiness 503 until it
  // answers), as one that goes down later is; what no wait fixes fails here.
  absl::StatusOr<std::unique_ptr<Store>> store =
      OpenStore(*url, {.open_when_reachable = !flags.require_store_at_start});
  if (!store.ok()) {
    PrintReason(prefix + "cannot open store " + RedactStoreUrl(*url) + ": " +
                Str(RedactStoreSecrets(store.status(), *url).message()));
    *exit_code = kExitFailure;
    return nullptr;
  }
  if (absl::Status ping = (*store)->Ping(); !ping.ok() && IsStoreFault(ping)) {
    spdlog::warn("store {} is not reachable: {}; serving anyway: /readyz and requests answer "
                 "503 until it is (--require-store-at-start refuses to start instead)",
                 RedactStoreUrl(*url), Str(RedactStoreSecrets(ping, *url).message()));
  }
  return *std::move(store);
}

namespace {

sigset_t StopSignalSet() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

}  // namespace

void BlockStopSignals() {
  const sigset_t set = StopSignalSet();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

StopOnSignal::StopOnSignal(std::function<void()> stop)
    : stop_(std::move(stop)), thread_([this] {
        const sigset_t set = StopSignalSet();
        while (true) {
          int signo = 0;
          if (sigwait(&set, &signo) != 0) continue;
          if (done_.load()) return;
          spdlog::info("signal {}: stopping", signo);
          stop_();
        }
      }) {}

StopOnSignal::~StopOnSignal() {
  done_.store(true);
  // Blocked in that thread too, so this SIGTERM goes to its sigwait and nowhere else.
  pthread_kill(thread_.native_handle(), SIGTERM);
  thread_.join();
}

int ServeUntilSignal(std::string_view cmd, http::Server& server, std::string_view what,
                     const std::vector<std::string>& warnings,
                     const std::vector<std::string>& notes) {
  // Blocked before any thread started (BlockStopSignals), so the kernel keeps a
  // SIGTERM sent at any time, even before the listening line, for the sigwait below.
  BlockStopSignals();
  if (absl::Status s = server.Start(); !s.ok()) {
    PrintReason(std::string(cmd) + ": " + Str(s.message()));
    return kExitFailure;
  }
  std::string address = server.address();
  if (address.find(':') != std::string::npos) address = "[" + address + "]";
  std::printf("listening on %s:%u\n", address.c_str(), static_cast<unsigned>(server.port()));
  std::fflush(stdout);
  spdlog::info("{} on {}:{}", what, address, server.port());
  for (const std::string& note : notes) spdlog::info("{}", note);
  for (const std::string& warning : warnings) spdlog::warn("{}", warning);
  const sigset_t set = StopSignalSet();
  int signo = 0;
  while (sigwait(&set, &signo) != 0) {
  }
  spdlog::info("signal {}: shutting down", signo);
  server.Shutdown();
  server.Wait();
  spdlog::info("stopped");
  return kExitOk;
}

}  // namespace idem::cli
