// `idem worker`: resumes step operations after crashes (docs/steps.md).
//
//   idem worker --store postgres://idem@db/app --refund-channel http://127.0.0.1:9000
//               [--store-password-file FILE] [--interval 1s] [--batch 100] [--once]
//
// The store (and its password file) defaults to the --config file's [serve] ones,
// as for every subcommand that opens a store (AddStoreOptions).
//
// Every --interval it resumes the operations that are due (PENDING or
// COMPENSATING, next_retry_at passed, no live lease), of the types this binary
// knows: the refund example's (examples/refund), against --refund-channel. Several
// workers may share a PostgreSQL/MariaDB store (FOR UPDATE SKIP LOCKED). An
// application's own operation types are resumed inside the application with
// idem::Worker. Runs until SIGINT/SIGTERM (exit 0); --once makes one pass and
// prints how many operations it resumed.
// Exit status: 0 stopped by a signal or --once done; 1 the store cannot be reached;
// 2 bad usage.
#include <signal.h>

#include <cstdio>
#include <memory>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/reason.h"
#include "cli/secrets.h"
#include "demo/builtin_operations.h"
#include "idem/idem.h"
#include "idem/steps.h"
#include "idem/ttl.h"
#include "spdlog/spdlog.h"

namespace idem::cli {
namespace {

struct WorkerFlags {
  std::string store = "sqlite://./idem.db";
  std::string refund_channel;
  std::string interval = "1s";
  int batch = 100;
  bool once = false;
};

int RunWorker(const WorkerFlags& flags) {
  absl::StatusOr<absl::Duration> interval = ParseTtlDuration(flags.interval, "--interval");
  if (!interval.ok() || *interval <= absl::ZeroDuration()) {
    PrintReason(interval.ok() ? "worker: --interval must be positive"
                              : "worker: " + std::string(interval.status().message()));
    return kExitUsage;
  }
  if (flags.batch < 1 || flags.batch > 10000) {
    PrintReason("worker: --batch must be between 1 and 10000");
    return kExitUsage;
  }
  if (flags.refund_channel.empty()) {
    PrintReason(
        "worker: no operation types to resume: give --refund-channel URL for the refund "
        "example's operations (an application resumes its own types with idem::Worker)");
    return kExitUsage;
  }
  absl::StatusOr<std::unique_ptr<BuiltinOperations>> builtins =
      BuiltinOperations::Create(flags.refund_channel);
  if (!builtins.ok()) {
    PrintReason("worker: --refund-channel: " + std::string(builtins.status().message()));
    return kExitUsage;
  }
  // A worker resumes what runners left in an existing store: a mistyped SQLite
  // path must not become a new, empty database polled forever.
  absl::StatusOr<std::unique_ptr<Store>> store = OpenExistingStore(flags.store);
  if (!store.ok()) {
    PrintReason(RedactStoreSecrets(store.status(), flags.store).message());
    return ExitCodeForStoreError(store.status());
  }
  StepRunner runner(**store);
  if (absl::Status s = (*builtins)->RegisterWith(runner); !s.ok()) {
    PrintReason("worker: " + std::string(s.message()));
    return kExitFailure;
  }
  if (absl::Status s = runner.Migrate(); !s.ok()) {
    PrintReason("worker: store " + std::string((*store)->url()) + ": " + std::string(s.message()));
    return s.code() == absl::StatusCode::kFailedPrecondition ? kExitUsage : kExitFailure;
  }
  if (flags.once) {
    absl::StatusOr<int> n = runner.ResumeDue(flags.batch);
    if (!n.ok()) {
      PrintReason("worker: " + std::string(n.status().message()));
      return kExitFailure;
    }
    std::printf("resumed %d operation(s) in %s\n", *n,
                RedactStoreUrl((*store)->url()).c_str());
    return kExitOk;
  }
  // Block the stop signals before the worker thread starts, so it inherits the
  // mask and sigwait below is the one place they arrive.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  Worker worker(runner, WorkerOptions{.interval = *interval, .batch = flags.batch});
  worker.Start();
  spdlog::info("worker: resuming due operations of {} every {}", (*store)->url(),
               absl::FormatDuration(*interval));
  int signo = 0;
  sigwait(&stop, &signo);
  spdlog::info("signal {}: stopping after the pass in flight", signo);
  worker.Stop();
  spdlog::info("stopped after {} pass(es), {} operation(s) resumed", worker.passes(),
               worker.resumed());
  return kExitOk;
}

}  // namespace

CommandFn AddWorkerCommand(CLI::App& root) {
  CLI::App* cmd =
      root.add_subcommand("worker", "Resume due step operations (after crashes and retries)");
  auto flags = std::make_shared<WorkerFlags>();
  AddStoreOptions(root, cmd,
                  {{"--store", &flags->store,
                    "Store URL: sqlite://PATH, postgres://…, mysql://… (never creates one)"}});
  cmd->add_option("--refund-channel,--refund_channel", flags->refund_channel,
                  "Payment channel URL (http://HOST:PORT) of the refund example's operations");
  cmd->add_option("--interval", flags->interval, "Time between passes (e.g. 500ms, 1s)")
      ->capture_default_str();
  cmd->add_option("--batch", flags->batch, "Operations per pass at most")->capture_default_str();
  cmd->add_flag("--once", flags->once, "Make one pass, print how many it resumed, and exit");
  return [flags] { return RunWorker(*flags); };
}

}  // namespace idem::cli
