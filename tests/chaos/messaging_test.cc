// Messaging chaos runs (messaging.h): consumer processes in one group
// on Kafka (the mock cluster) and on a Redis stream, killed, crashed at failpoints,
// stalled past their sessions, joined and removed, with the broker down, commit
// errors, forced rebalances and cut Redis connections, while events (some
// re-produced, some poison) keep coming. Each event's effect must happen once,
// none is lost, and the group consumes to the end. IDEM_CHAOS_SEED overrides the
// seed (a failure names the one to use).
//
// And the checker catches a consumer whose effect is outside the batch's
// transaction (an external call without a key): kills between that effect and
// the batch's commit repeat it, and kEffectOnce reports it.
#include "chaos/messaging.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <sstream>
#include <string>

#include "chaos/driver.h"

namespace idem::chaos {
namespace {

using ::testing::HasSubstr;

MessagingOptions Options(const std::string& transport, uint64_t seed) {
  MessagingOptions o;
  o.transport = transport;
  o.work_dir = std::string(IDEM_CHAOS_WORK_DIR) + "/messaging-" + transport + "-" +
               std::to_string(getpid());
  o.consumer_bin = CHAOS_CONSUMER;
  o.seed = seed;
  o.duration = std::chrono::seconds(20);
  return o;
}

MessagingResult ExpectClean(const MessagingOptions& o) {
  absl::StatusOr<MessagingResult> r = RunMessaging(o);
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return {};
  std::cout << r->Summary();
  for (const std::string& f : r->fault_log) std::cout << "  fault " << f << "\n";
  EXPECT_TRUE(r->report.ok()) << "seed=" << r->seed << " (rerun with IDEM_CHAOS_SEED="
                              << r->seed << "); files in " << o.work_dir << "\n"
                              << r->report.Table();
  EXPECT_TRUE(r->unexpected_exits.empty()) << r->Summary();
  // Not a run that did nothing: events flowed, some twice, and faults landed.
  EXPECT_GE(r->report.Get(kEffectOnce).checked, 500) << r->Summary();
  EXPECT_GT(r->produced, r->events) << "no event was re-produced";
  EXPECT_GE(r->faults.size(), 3u) << r->Summary();
  if (r->report.ok()) std::filesystem::remove_all(o.work_dir);
  return *std::move(r);
}

// Runs `body` (a Kafka run) in a child process and reports its failures here.
// librdkafka 2.0.2's mock cluster (Debian's; it runs in the test's process) can
// abort on its own assertion, `rdkafka_mock_cgrp.c: rd_kafka_mock_cgrp_member_sync_set:
// Assertion '!member->resp' failed`: its group coordinator takes a second SyncGroup
// from a member whose first is still parked (seen once in ~30 runs, in a clean-clone
// run of 2026-12-06; 12 repeats after it passed). That is the mock's bug, not idem's
// or the consumers': a child killed that way is reported on stderr and the run is
// repeated once with the same seed. Any other end of the child is the result.
void RunApartFromMockAborts(const std::string& name, const std::function<void()>& body) {
  for (int attempt = 1;; ++attempt) {
    std::filesystem::create_directories(IDEM_CHAOS_WORK_DIR);
    const std::string err_path =
        std::string(IDEM_CHAOS_WORK_DIR) + "/" + name + "-" + std::to_string(getpid()) + ".stderr";
    std::cout.flush();
    const pid_t pid = fork();
    ASSERT_GE(pid, 0) << "fork: " << std::strerror(errno);
    if (pid == 0) {
      const int fd = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (fd >= 0) dup2(fd, STDERR_FILENO);
      body();
      std::cout.flush();
      _exit(::testing::Test::HasFailure() ? 1 : 0);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    std::stringstream err;
    err << std::ifstream(err_path).rdbuf();
    std::filesystem::remove(err_path);
    std::cerr << err.str();
    const bool mock_abort = WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT &&
                            err.str().find("rdkafka_mock_cgrp.c") != std::string::npos;
    if (mock_abort && attempt == 1) {
      std::cerr << "messaging_test: librdkafka's mock cluster aborted (its bug, above);"
                   " the run is repeated once\n";
      continue;
    }
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << name << ": the run's child process "
        << (WIFSIGNALED(status) ? "was killed by signal " + std::to_string(WTERMSIG(status))
                                : "exited " + std::to_string(WEXITSTATUS(status)))
        << " (its failures and stderr above)";
    return;
  }
}

TEST(MessagingChaos, Kafka) {
  RunApartFromMockAborts("kafka", [] { ExpectClean(Options("kafka", SeedFromEnv(1511))); });
}

TEST(MessagingChaos, RedisStreams) { ExpectClean(Options("streams", SeedFromEnv(1512))); }

void CheckerCatchesAnEffectOutsideTheTransactionRun() {
  MessagingOptions o = Options("kafka", SeedFromEnv(1513));
  o.work_dir += "-bug";
  o.duration = std::chrono::seconds(12);
  o.external_effect = true;
  absl::StatusOr<MessagingResult> r = RunMessaging(o);
  ASSERT_TRUE(r.ok()) << r.status();
  std::cout << r->Summary();
  const PropertyResult& once = r->report.Get(kEffectOnce);
  EXPECT_GT(once.violations, 0) << r->Summary();
  EXPECT_THAT(once.first_example, HasSubstr(" effects (by ")) << r->Summary();
  // The rest held: nothing was lost, the group drained.
  EXPECT_EQ(r->report.Get(kNoneLost).violations, 0) << r->Summary();
  EXPECT_EQ(r->report.Get(kDrained).violations, 0) << r->Summary();
  EXPECT_THAT(r->Summary(), HasSubstr("seed=" + std::to_string(r->seed) + ": "));
  std::filesystem::remove_all(o.work_dir);
}

TEST(MessagingChaos, CheckerCatchesAnEffectOutsideTheTransaction) {
  RunApartFromMockAborts("kafka-bug", CheckerCatchesAnEffectOutsideTheTransactionRun);
}

}  // namespace
}  // namespace idem::chaos
