// core/key_analysis.h: regenerated-key chains and shape counts on records with
// known answers.
#include "core/key_analysis.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

namespace idem {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1733050000);

Record R(std::string tenant, std::string biz_type, std::string key, std::string fingerprint,
         absl::Duration after) {
  Record r;
  r.tenant = std::move(tenant);
  r.biz_type = std::move(biz_type);
  r.key = std::move(key);
  r.fingerprint = std::move(fingerprint);
  r.created_at = kT0 + after;
  return r;
}

std::vector<Record> Traffic() {
  return {
      // A chain of three keys for one request, 2 min apart: one group, three keys.
      R("acme", "refund", "k-a1", "fa", absl::Minutes(0)),
      R("acme", "refund", "k-a2", "fa", absl::Minutes(2)),
      R("acme", "refund", "k-a3", "fa", absl::Minutes(4)),
      // The same fingerprint again 30 min later under one key: not part of it.
      R("acme", "refund", "k-a4", "fa", absl::Minutes(34)),
      // Two keys 11 min apart: outside the 10 min window.
      R("acme", "refund", "k-b1", "fb", absl::Minutes(0)),
      R("acme", "refund", "k-b2", "fb", absl::Minutes(11)),
      // The same fingerprint in another biz_type and another tenant: separate.
      R("acme", "payout", "k-c1", "fb", absl::Minutes(1)),
      R("beta", "refund", "k-c2", "fb", absl::Minutes(1)),
      // A pair exactly 10 min apart (the window is inclusive).
      R("beta", "refund", "k-d1", "fd", absl::Minutes(0)),
      R("beta", "refund", "k-d2", "fd", absl::Minutes(10)),
      // No fingerprint: never grouped.
      R("beta", "refund", "k-e1", "", absl::Minutes(0)),
      R("beta", "refund", "k-e2", "", absl::Minutes(0)),
      // Shapes.
      R("acme", "refund", "550e8400-e29b-41d4-a716-446655440000", "u1", absl::Minutes(0)),
      R("acme", "refund", "f47ac10b-58cc-4372-a567-0e02b2c3d479", "u2", absl::Minutes(0)),
      R("beta", "refund", "1733050000", "e1", absl::Minutes(0)),
      R("beta", "refund", "1733050000123", "e2", absl::Minutes(0)),
      R("beta", "refund", "orders-3-18842", "t1", absl::Minutes(0)),
  };
}

TEST(KeyAnalysis, FindsChainsWithinTheWindowAndShapes) {
  KeyAnalysis a({.window = absl::Minutes(10), .examples = 2});
  for (const Record& r : Traffic()) a.Add(r);
  KeyAnalysisReport rep = a.Finish();
  EXPECT_EQ(rep.records, 17);
  EXPECT_EQ(rep.regenerated_groups, 2);
  EXPECT_EQ(rep.regenerated_keys, 5);
  ASSERT_EQ(rep.regenerated.size(), 2u);
  EXPECT_EQ(rep.regenerated[0].tenant, "acme");
  EXPECT_EQ(rep.regenerated[0].fingerprint, "fa");
  EXPECT_EQ(rep.regenerated[0].keys, 3);
  EXPECT_EQ(rep.regenerated[0].first_at, kT0);
  EXPECT_EQ(rep.regenerated[0].last_at, kT0 + absl::Minutes(4));
  ASSERT_EQ(rep.regenerated[0].examples.size(), 2u);  // at most `examples`
  EXPECT_EQ(rep.regenerated[0].examples[0].key, "k-a1");
  EXPECT_EQ(rep.regenerated[0].examples[1].key, "k-a2");
  EXPECT_EQ(rep.regenerated[1].tenant, "beta");
  EXPECT_EQ(rep.regenerated[1].fingerprint, "fd");
  EXPECT_EQ(rep.regenerated[1].keys, 2);

  ASSERT_EQ(rep.shapes[0].shape, KeyShape::kUuid);
  EXPECT_EQ(rep.shapes[0].keys, 2);
  ASSERT_EQ(rep.shapes[0].examples.size(), 2u);
  EXPECT_EQ(rep.shapes[0].examples[0].key, "550e8400-e29b-41d4-a716-446655440000");
  EXPECT_EQ(rep.shapes[1].shape, KeyShape::kEpochSeconds);
  EXPECT_EQ(rep.shapes[1].keys, 1);
  EXPECT_EQ(rep.shapes[2].shape, KeyShape::kEpochMillis);
  EXPECT_EQ(rep.shapes[2].keys, 1);
  EXPECT_EQ(rep.shapes[3].shape, KeyShape::kTopicPartitionOffset);
  EXPECT_EQ(rep.shapes[3].keys, 1);
  EXPECT_EQ(rep.shapes[3].examples[0].key, "orders-3-18842");
}

TEST(KeyAnalysis, TheOrderOfRecordsDoesNotMatter) {
  std::vector<Record> records = Traffic();
  KeyAnalysis first({.window = absl::Minutes(10), .examples = 1});
  for (const Record& r : records) first.Add(r);
  const KeyAnalysisReport want = first.Finish();
  std::mt19937 rng(7);
  for (int round = 0; round < 5; ++round) {
    std::shuffle(records.begin(), records.end(), rng);
    KeyAnalysis a({.window = absl::Minutes(10), .examples = 1});
    for (const Record& r : records) a.Add(r);
    KeyAnalysisReport got = a.Finish();
    EXPECT_EQ(got.regenerated_keys, want.regenerated_keys);
    ASSERT_EQ(got.regenerated.size(), 1u);
    EXPECT_EQ(got.regenerated[0].examples[0].key, want.regenerated[0].examples[0].key);
    for (size_t i = 0; i < got.shapes.size(); ++i) {
      EXPECT_EQ(got.shapes[i].keys, want.shapes[i].keys);
      EXPECT_EQ(got.shapes[i].examples[0].key, want.shapes[i].examples[0].key);
    }
  }
}

TEST(KeyAnalysis, NoRecordsNoFindings) {
  KeyAnalysisReport rep = KeyAnalysis({}).Finish();
  EXPECT_EQ(rep.records, 0);
  EXPECT_EQ(rep.regenerated_groups, 0);
  EXPECT_TRUE(rep.regenerated.empty());
  for (const ShapeFinding& s : rep.shapes) EXPECT_EQ(s.keys, 0);
}

}  // namespace
}  // namespace idem
