// The `idem` binary: one root command with git-style subcommands. The
// built-in ones are here; `idem NAME` for any other NAME runs the program idem-NAME
// when one is installed beside it (cli/external.h: the refund example's `demo` and
// `worker`). What the subcommands share (--config, --version, exit statuses) is
// RunCommandLine (cli/command_line.cc).
#include <malloc.h>
#include <sys/prctl.h>

#include <csignal>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "cli/commands.h"
#include "cli/external.h"
#include "cli/reason.h"
#include "core/absl_compat.h"
#include "core/failpoint.h"
#include "store/write_stage.h"

namespace idem::cli {
namespace {

constexpr std::string_view kBuiltins[] = {"serve", "inspect", "ttl", "migrate", "stuck", "token", "proxy",
                                          "diagnose", "recon", "bridge", "purge", "records", "keys"};

bool IsBuiltin(std::string_view name) {
  for (std::string_view b : kBuiltins) {
    if (b == name) return true;
  }
  return false;
}

// External subcommands the documentation promises: what provides them (for a clear
// message when they are not installed) and their line in `idem --help`.
struct KnownExternal {
  std::string_view name;
  std::string_view what;
  std::string_view help;
};
constexpr KnownExternal kKnownExternals[] = {
    {"demo", "the refund example's demo (the program idem-demo; build it with "
             "`scripts/build.sh idem-demo`)",
     "Runnable demonstrations (see `idem demo refund`; the refund example's idem-demo)"},
    {"worker", "the refund example's step worker (the program idem-worker; build it with "
               "`scripts/build.sh idem-worker`)",
     "Resume due step operations of the refund example (its idem-worker)"},
};

// The external subcommands found, as help entries: CLI11 lists them with the
// built-in ones (and in "a subcommand is required"); they are never parsed, since
// Main runs the program before CLI11 sees the command line.
std::vector<std::pair<std::string, std::string>> ExternalHelp() {
  std::vector<std::pair<std::string, std::string>> out;
  for (const std::string& name : ListExternalCommands()) {
    if (IsBuiltin(name)) continue;
    std::string help = absl::StrCat("The program idem-", name);
    for (const KnownExternal& known : kKnownExternals) {
      if (known.name == name) help = std::string(known.help);
    }
    out.emplace_back(name, std::move(help));
  }
  return out;
}

// A core file of a server held the store's password 6 times and a tenant's token 9
// times, and a dumpable process's memory (/proc/PID/mem) is open to every process
// of its user. So `idem` is not dumpable (no core file; only root may read its
// memory) unless IDEM_ALLOW_CORE_DUMPS=1 asks for one, to debug a crash. A program
// it execs (an external subcommand) is dumpable again: execve resets the flag.
void ProtectSecretsInMemory() {
  const char* allow = std::getenv("IDEM_ALLOW_CORE_DUMPS");
  if (allow != nullptr && std::string_view(allow) == "1") return;
  // Cannot fail with these arguments (EINVAL is for other values).
  prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
}

// Large buffers (request bodies and results up to the body limit, RocksDB's
// memtable blocks) are mapped for themselves and returned to the kernel when freed.
// glibc's default raises the mapping threshold to the largest block freed so far,
// after which every later large body stays in a heap arena per thread: a server
// that stored 600 results of 1 MB kept ~30 MB more resident than with a fixed
// threshold. Requests of the usual size (a few hundred bytes) are not affected.
void BoundMallocRetention() { mallopt(M_MMAP_THRESHOLD, 128 * 1024); }

int Main(int argc, char** argv) {
  ProtectSecretsInMemory();
  BoundMallocRetention();
#ifdef NDEBUG
  // Debian's abseil is built with its debug checks on: every absl::Mutex lock would
  // record lock order in a global graph (a lock of its own, ~1,000 instructions a
  // claim). Debug builds and the tests keep the check.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
#endif
  // The subcommand is the first argument that is not the root's --config FILE.
  int i = 1;
  while (i < argc) {
    std::string_view a = argv[i];
    if (a == "--config") {
      i += 2;
    } else if (a.starts_with("--config=")) {
      ++i;
    } else {
      break;
    }
  }
  if (i < argc && argv[i][0] != '-' && !IsBuiltin(argv[i])) {
    if (std::optional<std::string> path = FindExternalCommand(argv[i])) {
      return ExecExternalCommand(*path, argc, argv, i);
    }
    for (const KnownExternal& known : kKnownExternals) {
      if (known.name == argv[i]) {
        // StrCat, not operator+: GCC 12 at -O3 misreports -Wrestrict on "'" + string.
        PrintReason(absl::StrCat("'", AV(known.name), "' is ", AV(known.what),
                                 " and is not installed here: no program idem-", AV(known.name),
                                 " in ", absl::StrJoin(ExternalCommandDirs(), " or ")));
        return kExitFailure;
      }
    }
  }
  // A write past a file size limit (ulimit -f, systemd's LimitFSIZE) fails with EFBIG,
  // which a store reports (503, nothing acknowledged), instead of SIGXFSZ ending the
  // process in the middle of a request.
  std::signal(SIGXFSZ, SIG_IGN);
  // In a build made for the tests the store's write stages are failpoints too
  // (IDEM_FAILPOINTS=rocksdb.wal.before_sync=kill@N, ...).
  if (internal::g_failpoints_active.load(std::memory_order_relaxed)) {
    store::SetWriteStageHook([](const char* stage) { IDEM_FAILPOINT(stage); });
  }
  return RunCommandLine(argc, argv,
                        {&AddServeCommand, &AddInspectCommand, &AddTtlCommand, &AddMigrateCommand,
                         &AddStuckCommand, &AddTokenCommand, &AddProxyCommand,
                         &AddDiagnoseCommand, &AddReconCommand, &AddBridgeCommand,
                         &AddPurgeCommand, &AddRecordsCommand, &AddKeysCommand},
                        ExternalHelp());
}

}  // namespace
}  // namespace idem::cli

int main(int argc, char** argv) { return idem::cli::Main(argc, argv); }
