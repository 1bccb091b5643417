// Messaging chaos runs (issue 15 §1; messaging.h): consumer processes in one group
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
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>

#include "chaos/driver.h"
#include "chaos/messaging.h"

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

TEST(MessagingChaos, Kafka) { ExpectClean(Options("kafka", SeedFromEnv(1511))); }

TEST(MessagingChaos, RedisStreams) { ExpectClean(Options("streams", SeedFromEnv(1512))); }

TEST(MessagingChaos, CheckerCatchesAnEffectOutsideTheTransaction) {
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

}  // namespace
}  // namespace idem::chaos
