// http/key_health.h: the server's key-health counters and its table of 422s, with a
// fixed clock; bounded labels and slots.
#include "http/api/key_health.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

namespace idem::http {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

const absl::Time kT0 = absl::FromUnixSeconds(1733050000);

TEST(KeyHealthTracker, CountsRegeneratedKeysWithinTheWindow) {
  KeyHealthTracker t({.window = absl::Minutes(10)});
  t.OnNewKey("acme", "refund", "k1", "fp", kT0);
  t.OnNewKey("acme", "refund", "k2", "fp", kT0 + absl::Minutes(3));   // regenerated
  t.OnNewKey("acme", "refund", "k3", "fp", kT0 + absl::Minutes(13));  // 10 min after k2
  t.OnNewKey("acme", "refund", "k4", "fp", kT0 + absl::Minutes(24));  // 11 min: a new request
  t.OnNewKey("beta", "refund", "k5", "fp", kT0 + absl::Minutes(24));  // another tenant
  t.OnNewKey("acme", "payout", "k6", "fp", kT0 + absl::Minutes(24));  // another biz_type
  t.OnNewKey("acme", "refund", "k7", "", kT0 + absl::Minutes(24));    // no fingerprint
  t.OnNewKey("acme", "refund", "k8", "", kT0 + absl::Minutes(24));
  EXPECT_EQ(t.regenerated("refund"), 2u);
  EXPECT_EQ(t.regenerated("payout"), 0u);
}

TEST(KeyHealthTracker, CountsShapesOfNewKeys) {
  KeyHealthTracker t;
  t.OnNewKey("acme", "refund", "550e8400-e29b-41d4-a716-446655440000", "a", kT0);
  t.OnNewKey("acme", "refund", "1733050000", "b", kT0);
  t.OnNewKey("acme", "refund", "1733050000123", "c", kT0);
  t.OnNewKey("acme", "refund", "orders-3-18842", "d", kT0);
  t.OnNewKey("acme", "refund", "refund:ORD-2024-0001", "e", kT0);
  EXPECT_EQ(t.shapes("refund", KeyShape::kUuid), 1u);
  EXPECT_EQ(t.shapes("refund", KeyShape::kEpochSeconds), 1u);
  EXPECT_EQ(t.shapes("refund", KeyShape::kEpochMillis), 1u);
  EXPECT_EQ(t.shapes("refund", KeyShape::kTopicPartitionOffset), 1u);
  const std::string text = t.Render(KeyHealthTracker::kWithBizTypes);
  EXPECT_THAT(text, HasSubstr("# TYPE idem_key_suspicious_shape_total counter\n"));
  EXPECT_THAT(text, HasSubstr("idem_key_suspicious_shape_total{tenant=\"acme\",biz_type=\"refund\","
                              "shape=\"uuid\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("idem_key_regenerated_total{tenant=\"acme\",biz_type=\"refund\"} 0\n"));
  EXPECT_THAT(text, HasSubstr(
                        "idem_key_fingerprint_mismatch_total{tenant=\"acme\",biz_type=\"refund\"} 0\n"));
}

TEST(KeyHealthTracker, RemembersMismatchedKeysPerTenant) {
  KeyHealthTracker t;
  t.OnMismatch("acme", "refund", "user-1", "b", kT0);
  t.OnMismatch("acme", "refund", "user-1", "c", kT0 + absl::Seconds(1));
  t.OnMismatch("acme", "refund", "user-1", "b", kT0 + absl::Seconds(2));  // seen already
  t.OnMismatch("acme", "payout", "user-1", "b", kT0);
  t.OnMismatch("beta", "refund", "secret-key", "b", kT0);
  EXPECT_EQ(t.mismatches("refund"), 4u);
  EXPECT_EQ(t.over_coarse("refund"), 2u);
  EXPECT_EQ(t.over_coarse("payout"), 1u);
  std::vector<KeyMismatches> acme = t.Mismatches("acme");
  ASSERT_EQ(acme.size(), 2u);
  EXPECT_EQ(acme[0].biz_type, "payout");
  EXPECT_EQ(acme[1].biz_type, "refund");
  EXPECT_EQ(acme[1].key, "user-1");
  EXPECT_EQ(acme[1].fingerprints, 3);  // the stored one, b and c
  EXPECT_EQ(acme[1].mismatches, 3);
  EXPECT_EQ(acme[1].first_at, kT0);
  EXPECT_EQ(acme[1].last_at, kT0 + absl::Seconds(2));
  for (const KeyMismatches& k : acme) EXPECT_NE(k.key, "secret-key");
  // Keys never become labels.
  EXPECT_THAT(t.Render(KeyHealthTracker::kWithBizTypes), Not(HasSubstr("user-1")));
}

TEST(KeyHealthTracker, FingerprintsAreCountedUpToTheCap) {
  KeyHealthTracker t;
  for (int i = 0; i < 20; ++i) t.OnMismatch("acme", "refund", "k", "f" + std::to_string(i), kT0);
  std::vector<KeyMismatches> m = t.Mismatches("acme");
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].fingerprints, KeyHealthTracker::kMaxFingerprints);
  EXPECT_EQ(m[0].mismatches, 20);
}

TEST(KeyHealthTracker, LabelsAndSlotsStayBounded) {
  KeyHealthTracker t({.fingerprint_slots = 8, .mismatch_slots = 4});
  for (int i = 0; i < 100; ++i) {
    const std::string biz = "biz-" + std::to_string(i);
    t.OnNewKey("acme", biz, "1733050000", "fp" + std::to_string(i), kT0);
    t.OnMismatch("acme", biz, "k" + std::to_string(i), "x", kT0);
  }
  EXPECT_EQ(t.shapes("biz-0", KeyShape::kEpochSeconds), 1u);
  EXPECT_EQ(t.shapes("biz-99", KeyShape::kEpochSeconds), 0u);  // counted as "other"
  EXPECT_EQ(t.shapes("other", KeyShape::kEpochSeconds), 100u - KeyHealthTracker::kMaxBizTypes);
  const std::string text = t.Render(KeyHealthTracker::kWithBizTypes);
  size_t series = 0;
  for (size_t at = text.find("idem_key_regenerated_total{"); at != std::string::npos;
       at = text.find("idem_key_regenerated_total{", at + 1)) {
    ++series;
  }
  EXPECT_EQ(series, KeyHealthTracker::kMaxBizTypes + 1);
  EXPECT_LE(t.Mismatches("acme").size(), 4u);
}

// One tenant used to take all 32 biz_type labels, so every other tenant's counted
// as "other": each tenant has a budget of its own now.
TEST(KeyHealthTracker, OneTenantCannotTakeAnotherTenantsLabels) {
  KeyHealthTracker t;
  for (int i = 0; i < 100; ++i) {
    t.OnNewKey("acme", "biz-" + std::to_string(i), "1733050000", "fp", kT0);
  }
  t.OnNewKey("beta", "refund", "1733050000", "fp", kT0);
  EXPECT_EQ(t.shapes("refund", KeyShape::kEpochSeconds), 1u);
  const std::string text = t.Render(KeyHealthTracker::kWithBizTypes);
  EXPECT_THAT(text, HasSubstr("idem_key_suspicious_shape_total{tenant=\"beta\",biz_type=\"refund\","
                              "shape=\"epoch_s\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("idem_key_suspicious_shape_total{tenant=\"acme\",biz_type=\"other\","
                              "shape=\"epoch_s\"} " +
                              std::to_string(100 - KeyHealthTracker::kMaxBizTypes) + "\n"));
}

// Without biz_types (an unauthenticated /metrics): each tenant's totals, and no name
// a client chose.
TEST(KeyHealthTracker, TenantOnlyLabelsShowNoBizTypeNames) {
  KeyHealthTracker t;
  t.OnNewKey("acme", "secret-project", "1733050000", "fp", kT0);
  t.OnNewKey("acme", "refund", "1733050001", "fp2", kT0);
  t.OnMismatch("acme", "refund", "k", "x", kT0);
  const std::string text = t.Render(KeyHealthTracker::kTenantOnly);
  EXPECT_THAT(text, Not(HasSubstr("secret-project")));
  EXPECT_THAT(text, Not(HasSubstr("biz_type=")));
  EXPECT_THAT(text, HasSubstr("idem_key_suspicious_shape_total{tenant=\"acme\",shape=\"epoch_s\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("idem_key_fingerprint_mismatch_total{tenant=\"acme\"} 1\n"));
}

}  // namespace
}  // namespace idem::http
