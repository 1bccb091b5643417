#include "demo/refund_demo.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/failpoint.h"
#include "demo/demo_internal.h"
#include "idem/guard.h"
#include "idem/idem.h"
#include "idem/retry.h"
#include "idem/status.h"
#include "idem/steps.h"
#include "nlohmann/json.hpp"

namespace idem::refund {
namespace internal {

std::string Errno(std::string_view what) {
  return absl::StrCat(std::string(what), ": ", std::strerror(errno));
}

void CloseFd(int& fd) {
  if (fd >= 0) close(fd);
  fd = -1;
}

// fork + exec of `exe args...`. With `capture_stdout` its stdout is a pipe to
// us; with `kill_pipes` it gets two more pipes, whose numbers are appended to
// its arguments as --events-fd N --acks-fd M. stderr is shared.
absl::StatusOr<Child> Spawn(const std::string& exe, std::vector<std::string> args,
                            bool capture_stdout, bool kill_pipes) {
  int out[2] = {-1, -1}, events[2] = {-1, -1}, acks[2] = {-1, -1};
  if (capture_stdout && pipe2(out, O_CLOEXEC) != 0) return absl::UnavailableError(Errno("pipe"));
  if (kill_pipes && (pipe2(events, O_CLOEXEC) != 0 || pipe2(acks, O_CLOEXEC) != 0)) {
    return absl::UnavailableError(Errno("pipe"));
  }
  if (kill_pipes) {
    args.push_back("--events-fd");
    args.push_back(std::to_string(events[1]));
    args.push_back("--acks-fd");
    args.push_back(std::to_string(acks[0]));
  }
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(exe.c_str()));
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  fflush(stdout);
  fflush(stderr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return absl::UnavailableError(Errno("fork"));
  if (pid == 0) {
    // The children must not outlive the demo: a demo stopped by SIGTERM (timeout,
    // CI) would leave the channel serving forever. The parent may already be gone.
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(127);
    if (capture_stdout) dup2(out[1], STDOUT_FILENO);  // dup2 clears close-on-exec
    if (kill_pipes) {
      fcntl(events[1], F_SETFD, 0);
      fcntl(acks[0], F_SETFD, 0);
    }
    execv(exe.c_str(), argv.data());
    std::fprintf(stderr, "idem: cannot run %s: %s\n", exe.c_str(), std::strerror(errno));
    _exit(127);
  }
  Child c;
  c.pid = pid;
  if (capture_stdout) {
    close(out[1]);
    c.stdout_fd = out[0];
  }
  if (kill_pipes) {
    close(events[1]);
    close(acks[0]);
    c.events_fd = events[0];
    c.acks_fd = acks[1];
  }
  return c;
}

// Reads one '\n'-terminated line from `fd` (buffered in `buf`) within `timeout`.
// std::nullopt at EOF.
absl::StatusOr<std::optional<std::string>> ReadLine(int fd, std::string& buf,
                                                    absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    if (size_t nl = buf.find('\n'); nl != std::string::npos) {
      std::string line = buf.substr(0, nl);
      buf.erase(0, nl + 1);
      return line;
    }
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return absl::DeadlineExceededError("no line in time");
    pollfd p{fd, POLLIN, 0};
    const int r = poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return absl::UnavailableError(Errno("poll"));
    if (r == 0) continue;
    char chunk[4096];
    const ssize_t n = read(fd, chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return absl::UnavailableError(Errno("read"));
    if (n == 0) return std::optional<std::string>();
    buf.append(chunk, static_cast<size_t>(n));
  }
}

int WaitExit(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

}  // namespace internal

namespace {

using internal::Child;
using internal::CloseFd;
using internal::Errno;
using internal::ReadLine;
using internal::Spawn;
using internal::WaitExit;
using internal::kChannelFaultDelay;
using internal::kChannelTimeout;
using internal::kNaiveMaxDeliveries;
using internal::kRunnerLease;

// The fake payment channel, a separate process for the demo's lifetime.
class ChannelProcess {
 public:
  static absl::StatusOr<ChannelProcess> Start(const DemoOptions& o) {
    IDEM_ASSIGN_OR_RETURN(
        Child c,
        Spawn(o.self_exe,
              {"channel", "--listen", "127.0.0.1:0", "--fault-rate",
               absl::StrCat(o.fault_rate), "--seed", absl::StrCat(o.seed), "--response-delay-ms",
               absl::StrCat(absl::ToInt64Milliseconds(kChannelFaultDelay))},
              /*capture_stdout=*/true, /*kill_pipes=*/false));
    ChannelProcess p;
    p.child_ = c;
    std::string buf;
    absl::StatusOr<std::optional<std::string>> line = ReadLine(c.stdout_fd, buf, absl::Seconds(15));
    constexpr std::string_view kPrefix = "listening on ";
    if (!line.ok() || !line->has_value() || !(*line)->starts_with(kPrefix)) {
      p.Stop();
      return absl::UnavailableError(
          "the fake payment channel did not start (no \"listening on\" line)");
    }
    p.address_ = (*line)->substr(kPrefix.size());
    return p;
  }
  ChannelProcess() = default;
  ChannelProcess(ChannelProcess&& o) noexcept { *this = std::move(o); }
  ChannelProcess& operator=(ChannelProcess&& o) noexcept {
    std::swap(child_, o.child_);
    std::swap(address_, o.address_);
    return *this;
  }
  ~ChannelProcess() { Stop(); }

  std::string url() const { return "http://" + address_; }

  void Stop() {
    if (child_.pid > 0) {
      kill(child_.pid, SIGTERM);
      WaitExit(child_.pid);
      child_.pid = -1;
    }
    CloseFd(child_.stdout_fd);
  }

 private:
  Child child_;
  std::string address_;
};

// The binary to start the children with: /proc/self/exe resolved, so `ps` shows
// them as idem, not as /proc/self/exe.
std::string ResolveExe(const std::string& exe) {
  char buf[4096];
  const ssize_t n = readlink(exe.c_str(), buf, sizeof(buf) - 1);
  if (n <= 0) return exe;
  return std::string(buf, static_cast<size_t>(n));
}

std::string RunPrefix(const std::string& run_id) { return absl::StrCat("R-", run_id, "-"); }

// The biz_keys of one run, as a bytewise range [lo, hi): keys are bytes (BLOB,
// BYTEA, VARBINARY), which compare bytewise everywhere, while LIKE does not work on
// SQLite blobs. The prefix ends in '-', so hi is the same prefix ending in '.'.
std::pair<Value, Value> RunKeyRange(const std::string& run_id) {
  std::string lo = absl::StrCat("refund:", RunPrefix(run_id));
  std::string hi = lo;
  hi.back() = static_cast<char>(hi.back() + 1);
  return {Value(Blob{std::move(lo)}), Value(Blob{std::move(hi)})};
}

absl::StatusOr<std::string> DefaultStore() {
  const char* tmp = std::getenv("TMPDIR");
  std::string dir = absl::StrCat(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp",
                                 "/idem-refund-demo-XXXXXX");
  if (mkdtemp(dir.data()) == nullptr) return absl::UnavailableError(Errno("mkdtemp " + dir));
  return absl::StrCat("sqlite://", dir, "/demo.db");
}

// Counts per order_no of `table` for one run.
absl::StatusOr<std::map<std::string, int64_t>> CountByOrder(Store& store, std::string_view table,
                                                            const std::string& run_id) {
  IDEM_ASSIGN_OR_RETURN(std::unique_ptr<StoreTransaction> tx, store.Begin());
  IDEM_ASSIGN_OR_RETURN(
      Rows rows, tx->Query(absl::StrCat("SELECT order_no, COUNT(*) FROM ", std::string(table),
                                        " WHERE run_id = ? GROUP BY order_no"),
                           {Value(run_id)}));
  tx->Rollback();
  std::map<std::string, int64_t> out;
  for (const auto& r : rows.rows) {
    const std::string key = r[0].is_blob() ? r[0].as_blob() : r[0].as_text();
    out[key] = r[1].is_int() ? r[1].as_int() : 0;
  }
  return out;
}

// The final status of every operation of the run, by order_no.
absl::StatusOr<std::map<std::string, std::string>> OperationStatuses(Store& store,
                                                                     const std::string& run_id) {
  IDEM_ASSIGN_OR_RETURN(std::unique_ptr<StoreTransaction> tx, store.Begin());
  IDEM_ASSIGN_OR_RETURN(
      Rows rows,
      tx->Query("SELECT biz_key, status FROM idem_operations WHERE biz_key >= ? AND biz_key < ?",
                {RunKeyRange(run_id).first, RunKeyRange(run_id).second}));
  tx->Rollback();
  std::map<std::string, std::string> out;
  for (const auto& r : rows.rows) {
    std::string biz_key = r[0].is_blob() ? r[0].as_blob() : r[0].as_text();
    std::string status = r[1].is_blob() ? r[1].as_blob() : r[1].as_text();
    out[biz_key.substr(std::string_view("refund:").size())] = status;
  }
  return out;
}

// What every order should have: 1 of each effect when done, 0 when undone.
// `status` per order: "SUCCESS", "COMPENSATED", "COMPENSATION_REQUIRED", or
// anything else for an order that never finished.
absl::Status Audit(Store& store, const ChannelClient& channel, const std::string& run_id,
                   int orders, const std::map<std::string, std::string>& status,
                   DemoReport& report) {
  IDEM_ASSIGN_OR_RETURN(ChannelStats stats, channel.Stats());
  IDEM_ASSIGN_OR_RETURN(auto ledger, CountByOrder(store, "demo_refund_ledger", run_id));
  IDEM_ASSIGN_OR_RETURN(auto inbox, CountByOrder(store, "demo_refund_inbox", run_id));
  report.orders = orders;
  report.channel_calls = stats.reversals;
  report.channel_cancelled = stats.cancelled;
  report.channel_timeouts = stats.timeout_faults;
  report.channel_lost = stats.lost_faults;
  report.channel_busy = stats.busy_faults;
  auto count = [](const std::map<std::string, int64_t>& m, const std::string& k) -> int64_t {
    auto it = m.find(k);
    return it == m.end() ? 0 : it->second;
  };
  for (int i = 1; i <= orders; ++i) {
    const Order o = DemoOrder(run_id, i);
    auto st = status.find(o.order_no);
    const std::string s = st == status.end() ? "" : st->second;
    const int64_t rev = count(stats.by_order, o.order_no);
    const int64_t led = count(ledger, o.order_no);
    const int64_t msg = count(inbox, o.order_no);
    report.channel_reversals += rev > 0 ? 1 : 0;
    report.ledger_rows += led;
    report.notifications += msg;
    if (s == "SUCCESS") {
      report.channel_duplicates += std::max<int64_t>(0, rev - 1);
      report.ledger_duplicates += std::max<int64_t>(0, led - 1);
      report.notification_duplicates += std::max<int64_t>(0, msg - 1);
      if (rev == 0 || led == 0 || msg == 0) ++report.missing;
    } else if (s == "COMPENSATED") {
      // Undone: anything left is an effect too many.
      ++report.compensated;
      report.channel_duplicates += rev;
      report.ledger_duplicates += led;
      report.notification_duplicates += msg;
    } else if (s == "COMPENSATION_REQUIRED") {
      ++report.manual;  // a person decides; only more than one of an effect is wrong
      report.channel_duplicates += std::max<int64_t>(0, rev - 1);
      report.ledger_duplicates += std::max<int64_t>(0, led - 1);
      report.notification_duplicates += std::max<int64_t>(0, msg - 1);
    } else {
      ++report.missing;
      report.channel_duplicates += std::max<int64_t>(0, rev - 1);
      report.ledger_duplicates += std::max<int64_t>(0, led - 1);
      report.notification_duplicates += std::max<int64_t>(0, msg - 1);
    }
  }
  return absl::OkStatus();
}

// The step machine, in a child process the demo may SIGKILL at any step failpoint.
absl::Status RunWithStepMachine(const DemoOptions& o, const std::string& store_url,
                                const ChannelProcess& channel, const std::string& run_id,
                                DemoReport& report) {
  // Three failpoints per step (before the call, after it, after the journal
  // update): spread the per-step probability over them.
  const double per_point = o.kill_runner > 0 ? 1.0 - std::pow(1.0 - o.kill_runner, 1.0 / 3) : 0;
  std::mt19937_64 rng(o.seed ^ 0x6b696c6cULL);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  const absl::Time deadline = absl::Now() + o.deadline;
  for (int generation = 0;; ++generation) {
    IDEM_ASSIGN_OR_RETURN(
        Child c,
        Spawn(o.self_exe,
              {"refund-runner", "--store", store_url, "--channel", channel.url(),
               "--run-id", run_id, "--orders", absl::StrCat(o.orders), "--fault-rate",
               absl::StrCat(o.fault_rate), "--seed", absl::StrCat(o.seed * 1000003 + generation)},
              /*capture_stdout=*/false, /*kill_pipes=*/true));
    std::string buf;
    bool killed = false;
    for (;;) {
      const absl::Duration left = deadline - absl::Now();
      absl::StatusOr<std::optional<std::string>> line =
          ReadLine(c.events_fd, buf, std::max(left, absl::Milliseconds(1)));
      if (!line.ok() || !line->has_value()) {
        if (!line.ok()) kill(c.pid, SIGKILL);
        const int code = WaitExit(c.pid);
        CloseFd(c.events_fd);
        CloseFd(c.acks_fd);
        if (!line.ok()) {
          return absl::DeadlineExceededError(absl::StrCat(
              "the refund runner did not finish within ", absl::FormatDuration(o.deadline)));
        }
        if (code != 0) {
          return absl::InternalError(
              absl::StrCat("the refund runner exited with status ", code, " (see above)"));
        }
        return absl::OkStatus();
      }
      if (per_point > 0 && uniform(rng) < per_point) {
        kill(c.pid, SIGKILL);
        WaitExit(c.pid);
        CloseFd(c.events_fd);
        CloseFd(c.acks_fd);
        ++report.runner_kills;
        killed = true;
        break;
      }
      if (write(c.acks_fd, "g", 1) != 1) {
        // The runner is gone (it will show as EOF on the next read).
      }
    }
    if (!killed) break;
  }
  return absl::OkStatus();
}

// The incident's design: dedupe by (topic, partition, offset) + consumer instance.
// A failed delivery is redelivered at a new offset, so the dedupe key changes and
// every step runs again.
absl::Status RunNaive(const DemoOptions& o, Store& store, const ChannelProcess& channel_process,
                      const std::string& run_id, std::map<std::string, std::string>& status,
                      DemoReport& report) {
  IDEM_ASSIGN_OR_RETURN(ChannelClient channel,
                        ChannelClient::FromUrl(channel_process.url(), kChannelTimeout));
  FaultInjector faults(o.fault_rate, o.seed * 1000003);
  Guard guard(store);
  int64_t offset = 0;
  for (int i = 1; i <= o.orders; ++i) {
    const Order order = DemoOrder(run_id, i);
    for (int delivery = 1; delivery <= kNaiveMaxDeliveries; ++delivery) {
      ++report.deliveries;
      const std::string key = absl::StrCat("refunds-0@", offset++, "#consumer-1");
      absl::StatusOr<Result> r = guard.Run(
          {.biz_type = "refund-message", .key = key},
          [&](Transaction& tx) {
            return internal::NaiveRefundEffect(channel, faults, key, order, tx);
          });
      if (r.ok()) {
        status[order.order_no] = "SUCCESS";
        break;
      }
      if (!IsRetryable(r.status())) break;  // dead-lettered: what is done stays done
    }
  }
  return absl::OkStatus();
}

}  // namespace

Order DemoOrder(const std::string& run_id, int i) {
  Order o;
  o.run_id = run_id;
  o.order_no = absl::StrFormat("%s%06d", RunPrefix(run_id), i);
  o.amount = 1000 + (i * 37) % 9000;
  return o;
}

absl::Status ValidateDemoOptions(const DemoOptions& o) {
  if (o.orders < 1 || o.orders > 100000) {
    return absl::InvalidArgumentError(
        absl::StrCat("--orders ", o.orders, ": must be between 1 and 100000"));
  }
  if (!(o.fault_rate >= 0 && o.fault_rate <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--fault-rate ", o.fault_rate, ": must be between 0 and 1"));
  }
  if (o.transport != "direct" && o.transport != "kafka") {
    return absl::InvalidArgumentError(
        absl::StrCat("--transport ", o.transport, ": must be direct or kafka"));
  }
  if (!(o.kill_runner >= 0 && o.kill_runner <= 0.9)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--kill-runner ", o.kill_runner,
                     ": must be between 0 and 0.9 (at 1 no step could finish)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<DemoReport> RunRefundDemo(const DemoOptions& given) {
  IDEM_RETURN_IF_ERROR(ValidateDemoOptions(given));
  DemoOptions options = given;
  options.self_exe = ResolveExe(given.self_exe);
  const absl::Time started = absl::Now();
  DemoReport report;
  std::string store_url = options.store;
  if (store_url.empty()) {
    IDEM_ASSIGN_OR_RETURN(store_url, DefaultStore());
  }
  IDEM_ASSIGN_OR_RETURN(std::unique_ptr<Store> store, OpenStore(store_url));
  if (!store->SupportsSql()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--store ", store_url,
        ": the demo keeps its journal, ledger and inbox in SQL; use sqlite://, postgres:// or "
        "mysql://"));
  }
  report.store = std::string(store->url());
  IDEM_RETURN_IF_ERROR(CreateDemoTables(*store));
  {
    // The journal tables exist before the first runner and the audit read them.
    StepRunner journal(*store);
    IDEM_RETURN_IF_ERROR(journal.Migrate());
  }
  // A run id keeps this run's rows apart from earlier runs on the same store.
  const std::string run_id =
      absl::StrFormat("%x%04x", absl::ToUnixMicros(absl::Now()), options.seed & 0xffff);
  IDEM_ASSIGN_OR_RETURN(ChannelProcess channel, ChannelProcess::Start(options));
  IDEM_ASSIGN_OR_RETURN(ChannelClient client,
                        ChannelClient::FromUrl(channel.url(), absl::Seconds(5)));
  std::map<std::string, std::string> status;
  if (options.transport == "kafka") {
    IDEM_ASSIGN_OR_RETURN(std::string records, DefaultStore());
    IDEM_RETURN_IF_ERROR(internal::RunOverKafka(options, store_url, records, channel.url(),
                                                run_id, report));
    if (options.naive) {
      IDEM_ASSIGN_OR_RETURN(status, internal::NaiveStatuses(*store, run_id));
    } else {
      IDEM_ASSIGN_OR_RETURN(status, OperationStatuses(*store, run_id));
    }
  } else if (options.naive) {
    IDEM_RETURN_IF_ERROR(RunNaive(options, *store, channel, run_id, status, report));
  } else {
    IDEM_RETURN_IF_ERROR(RunWithStepMachine(options, store_url, channel, run_id, report));
    IDEM_ASSIGN_OR_RETURN(status, OperationStatuses(*store, run_id));
  }
  IDEM_RETURN_IF_ERROR(Audit(*store, client, run_id, options.orders, status, report));
  channel.Stop();
  report.seconds = absl::ToDoubleSeconds(absl::Now() - started);
  return report;
}

bool ReportIsClean(const DemoReport& r) {
  return r.channel_duplicates == 0 && r.ledger_duplicates == 0 && r.notification_duplicates == 0 &&
         r.missing == 0;
}

std::string FormatReport(const DemoOptions& o, const DemoReport& r) {
  const bool kafka = o.transport == "kafka";
  std::string out =
      kafka ? absl::StrFormat(
                  "refund demo over Kafka (mock cluster, %s): %d orders, fault rate %.2f, kill "
                  "rate %.2f, seed %d\nstore: %s\n\n",
                  o.naive ? "naive: dedupe by (topic, partition, offset) + consumer id"
                          : "idem runner keyed by {order_no}:{action}, step machine",
                  o.orders, o.fault_rate, o.kill_runner, o.seed, r.store)
      : o.naive ? absl::StrFormat(
                    "refund demo (naive: dedupe by message offset): %d orders, fault rate %.2f, "
                    "seed %d%s\nstore: %s\n\n",
                    o.orders, o.fault_rate, o.seed,
                    // The naive consumer runs in the demo's own process: nothing to kill.
                    o.kill_runner > 0 ? " (--kill-runner: no runner process in this mode)" : "",
                    r.store)
              : absl::StrFormat(
                    "refund demo (idem step machine): %d orders, fault rate %.2f, kill rate "
                    "%.2f, seed %d\nstore: %s\n\n",
                    o.orders, o.fault_rate, o.kill_runner, o.seed, r.store);
  out += absl::StrFormat("  %-22s %10s %12s\n", "effect", "orders/rows", "duplicates");
  out += absl::StrFormat("  %-22s %10d %12d\n", "channel reversals", r.channel_reversals,
                         r.channel_duplicates);
  out += absl::StrFormat("  %-22s %10d %12d\n", "ledger rows", r.ledger_rows, r.ledger_duplicates);
  out += absl::StrFormat("  %-22s %10d %12d\n", "notifications", r.notifications,
                         r.notification_duplicates);
  out += "\n";
  out += absl::StrFormat("  %-32s %d\n", "missing (lost steps)", r.missing);
  out += absl::StrFormat("  %-32s %d\n", "compensated", r.compensated);
  out += absl::StrFormat("  %-32s %d\n", "manual (compensation required)", r.manual);
  if (kafka) {
    out += absl::StrFormat("  %-32s %d\n", "consumer kills", r.runner_kills);
    out += absl::StrFormat("  %-32s %d\n", "consumers joined (rebalance)", r.rebalance_joins);
  } else if (o.naive) {
    out += absl::StrFormat("  %-32s %d\n", "message deliveries", r.deliveries);
  } else {
    out += absl::StrFormat("  %-32s %d\n", "runner kills", r.runner_kills);
  }
  out += absl::StrFormat(
      "  channel: %d reversal calls made, %d cancelled; injected %d timeouts, %d lost answers, "
      "%d busy\n",
      r.channel_calls, r.channel_cancelled, r.channel_timeouts, r.channel_lost, r.channel_busy);
  out += absl::StrFormat("  %.1f s\n", r.seconds);
  out += ReportIsClean(r) ? "result: every effect exactly once\n"
                          : "result: DUPLICATE OR MISSING EFFECTS (see above)\n";
  return out;
}

std::string ReportJson(const DemoReport& r) {
  nlohmann::ordered_json j;
  j["orders"] = r.orders;
  j["channel_reversals"] = r.channel_reversals;
  j["channel_duplicates"] = r.channel_duplicates;
  j["ledger_rows"] = r.ledger_rows;
  j["ledger_duplicates"] = r.ledger_duplicates;
  j["notifications"] = r.notifications;
  j["notification_duplicates"] = r.notification_duplicates;
  j["missing"] = r.missing;
  j["compensated"] = r.compensated;
  j["manual"] = r.manual;
  j["runner_kills"] = r.runner_kills;
  return j.dump();
}

namespace {
int g_events_fd = -1;
int g_acks_fd = -1;

// Reports a step failpoint to the demo and waits for its verdict: a byte to go
// on, or a SIGKILL.
void ReportToParent(const char* name) {
  if (std::strncmp(name, "steps.", 6) != 0 && std::strncmp(name, "kafka.", 6) != 0) return;
  std::string line = absl::StrCat(name, "\n");
  if (write(g_events_fd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) _exit(3);
  char verdict = 0;
  ssize_t n;
  while ((n = read(g_acks_fd, &verdict, 1)) < 0 && errno == EINTR) {
  }
  if (n != 1) _exit(3);  // the demo is gone
}

absl::StatusOr<int64_t> OpenOperations(Store& store, const std::string& run_id) {
  IDEM_ASSIGN_OR_RETURN(std::unique_ptr<StoreTransaction> tx, store.Begin());
  IDEM_ASSIGN_OR_RETURN(
      Rows rows,
      tx->Query("SELECT COUNT(*) FROM idem_operations WHERE biz_key >= ? AND biz_key < ?"
                " AND status IN (?, ?)",
                {RunKeyRange(run_id).first, RunKeyRange(run_id).second, Value("PENDING"),
                 Value("COMPENSATING")}));
  tx->Rollback();
  if (rows.rows.empty() || !rows.rows[0][0].is_int()) return 0;
  return rows.rows[0][0].as_int();
}
}  // namespace

namespace internal {
absl::StatusOr<std::string> NaiveRefundEffect(const ChannelClient& channel, FaultInjector& faults,
                                              const std::string& key, const Order& order,
                                              Transaction& tx) {
  IDEM_RETURN_IF_ERROR(channel.Reverse(key, order.order_no, order.amount).status());
  IDEM_RETURN_IF_ERROR(tx.Exec("INSERT INTO demo_refund_ledger (order_no, biz_type,"
                               " amount, run_id) VALUES (?, 'refund', ?, ?)",
                               {order.order_no, order.amount, order.run_id})
                           .status());
  if (faults.Fire()) return absl::DeadlineExceededError("ledger: statement timeout");
  if (faults.Fire()) return absl::UnavailableError("inbox: unavailable");
  IDEM_RETURN_IF_ERROR(
      tx.Exec("INSERT INTO demo_refund_inbox (message_id, order_no, run_id) VALUES (?, ?, ?)",
              {absl::StrCat("msg-", order.order_no), order.order_no, order.run_id})
          .status());
  return std::string("done");
}

void ReportFailpointsToParent(int events_fd, int acks_fd) {
  g_events_fd = events_fd;
  g_acks_fd = acks_fd;
  SetFailpointHook(&ReportToParent);
}
}  // namespace internal

absl::Status RunRefundRunner(const RunnerOptions& o) {
  if (o.run_id.empty() || o.orders < 1) {
    return absl::InvalidArgumentError("refund-runner needs --run-id and --orders >= 1");
  }
  IDEM_ASSIGN_OR_RETURN(std::unique_ptr<Store> store, OpenStore(o.store));
  IDEM_ASSIGN_OR_RETURN(ChannelClient channel,
                        ChannelClient::FromUrl(o.channel_url, kChannelTimeout));
  FaultInjector faults(o.fault_rate, o.seed);
  StepRunnerOptions ro;
  ro.lease = kRunnerLease;
  ro.lock_retry = absl::Milliseconds(20);
  StepRunner runner(*store, ro);
  IDEM_RETURN_IF_ERROR(runner.Register(RefundOperation(channel, &faults)));
  if (o.events_fd >= 0 && o.acks_fd >= 0) {
    internal::ReportFailpointsToParent(o.events_fd, o.acks_fd);
  }
  const absl::Time deadline = absl::Now() + o.deadline;
  for (int i = 1; i <= o.orders; ++i) {
    const Order order = DemoOrder(o.run_id, i);
    absl::StatusOr<OperationState> op = runner.Run({.type = std::string(kRefundType),
                                                    .biz_key = BizKeyOf(order),
                                                    .input = EncodeOrder(order),
                                                    .object_key = order.order_no});
    // Busy (a killed predecessor's lease), lost leases and store hiccups are left
    // to the resume loop below; anything else is a bug worth stopping for.
    if (!op.ok() && !IsRetryable(op.status())) return op.status();
  }
  for (;;) {
    absl::StatusOr<int> resumed = runner.ResumeDue(100);
    if (!resumed.ok() && !IsRetryable(resumed.status())) return resumed.status();
    IDEM_ASSIGN_OR_RETURN(int64_t open, OpenOperations(*store, o.run_id));
    if (open == 0) return absl::OkStatus();
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(open, " refunds still open after ", absl::FormatDuration(o.deadline)));
    }
    if (!resumed.ok() || *resumed == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace idem::refund
