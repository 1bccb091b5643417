// What the long-running HTTP commands (`idem serve`, `idem proxy`) share: the
// server's options, the store opened for a server (password off the command line,
// started while the database is down), and running until SIGTERM/SIGINT.
//
// Thread safety: plain functions, called from main's thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "cli/common.h"
#include "http/server/server.h"
#include "idem/store.h"

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace idem::cli {

struct ServerFlags {
  std::string listen;  // the default is the command's
  uint64_t max_body = 1 << 20;
  int threads = 16;
  int io_threads = 2;  // beast's; lean runs one loop per core unless --io-threads is given
  std::string http = "lean";  // --http: the engine, lean or beast
  int max_connections = 0;  // 0: sized from the descriptor limit
  std::string header_timeout = "10s";
  // The longest Retry-After of a 409 in_progress, in seconds (RetryAfterMaxOf).
  int retry_after_max = 1;
  // The store.
  std::string store = std::string(DefaultServeStore());  // cli/common.h
  std::string store_password_file;
  bool require_store_at_start = false;
  const CLI::Option* config = nullptr;  // the root's --config, for the file's name
  const CLI::Option* store_option = nullptr;  // --store, to tell a default from a choice
  const CLI::Option* io_threads_option = nullptr;  // --io-threads, likewise
};

// Adds --listen, --http (also IDEM_HTTP), --max-body, --threads, --io-threads, --max-connections,
// --header-timeout, --retry-after-max, --store (also IDEM_STORE),
// --store-password-file and --require-store-at-start to `sub`; `flags` keeps the values (and their defaults).
void AddServerFlags(CLI::App& root, CLI::App* sub, ServerFlags* flags);

// Parses `listen`, "HOST:PORT" or "[v6]:PORT" (port 0-65535; 0: any). False when
// it is neither.
bool ParseListen(const std::string& listen, std::string* host, uint16_t* port);

// The server options of `flags`, after checking them (the soft descriptor limit is
// raised to the hard one on the way). Errors are kInvalidArgument naming the option.
absl::StatusOr<http::ServerOptions> ServerOptionsOf(const ServerFlags& flags);

// --retry-after-max as a duration (http::InProgressRetryAfter's cap): whole seconds
// from 1 to 3600, else kInvalidArgument naming the option and the value.
absl::StatusOr<absl::Duration> RetryAfterMaxOf(const ServerFlags& flags);

// The --config file given, or "".
std::string ConfigFile(const ServerFlags& flags);

// Opens flags.store for a server: the password from --store-password-file or
// IDEM_STORE_PASSWORD, a database that is down at start waited for (unless
// --require-store-at-start); warnings for secrets in `ps` or readable files are
// added to `warnings`. On failure prints "CMD: reason" and sets `*exit_code`.
std::unique_ptr<Store> OpenServerStore(std::string_view cmd, const ServerFlags& flags,
                                       std::vector<std::string>* warnings, int* exit_code);

// Blocks SIGINT and SIGTERM in the calling thread and so in every thread started
// after it (a thread inherits its creator's mask). A server command calls it first,
// before opening the store starts any thread: ServeUntilSignal then takes the
// signals with sigwait() in the thread that waits for them. With a handler instead,
// the kernel hands a process-wide signal to any thread that does not block it;
// under ThreadSanitizer, which defers a signal until that thread next enters an
// intercepted call, a worker parked on a futex kept a SIGTERM for good and the
// server did not stop. A signal that arrives during start-up waits for the sigwait.
void BlockStopSignals();

// For a command that runs a loop of its own (bridge kafka) rather than a Server:
// calls `stop` on every SIGINT or SIGTERM, from a thread that takes them with
// sigwait(). BlockStopSignals() must have run first, before any thread started.
// The destructor wakes that thread and joins it; `stop` is not called then.
class StopOnSignal {
 public:
  explicit StopOnSignal(std::function<void()> stop);
  ~StopOnSignal();
  StopOnSignal(const StopOnSignal&) = delete;
  StopOnSignal& operator=(const StopOnSignal&) = delete;

 private:
  std::atomic<bool> done_{false};
  std::function<void()> stop_;
  std::thread thread_;  // last: starts after what it reads
};

// Starts `server`, prints "listening on HOST:PORT" on stdout (the first line, which
// scripts wait for), logs `what`, `notes` (info) and `warnings` and serves until
// SIGTERM or SIGINT; returns the exit status (1 when the address cannot be bound).
// The notes and warnings wait until the server is up, so that a failed start stays
// one line.
int ServeUntilSignal(std::string_view cmd, http::Server& server, std::string_view what,
                     const std::vector<std::string>& warnings,
                     const std::vector<std::string>& notes = {});

}  // namespace idem::cli
