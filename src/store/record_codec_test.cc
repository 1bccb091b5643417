// The record encoding the key/value stores share (the cache tiers, rocksdb://).
#include "store/record_codec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "testing/status_matchers.h"

namespace idem::store {
namespace {

using ::idem::testing::StatusIs;
using ::testing::HasSubstr;

Record EveryField() {
  return Record{.tenant = std::string("t\0", 2),
                .biz_type = "refund",
                .key = std::string("\xff\0k", 3),
                .fingerprint = "fp",
                .state = RecordState::kFailed,
                .token = 7,
                .lease_until = absl::InfinitePast(),
                .result = "",
                .error = std::string("e\0", 2),
                .created_at = absl::FromUnixMicros(1767225600000001),
                .updated_at = absl::InfiniteFuture(),
                .expires_at = absl::FromUnixMicros(1774987200000002),
                .purged_at = absl::FromUnixMicros(1767225600000003)};
}

TEST(RecordCodecTest, EveryFieldRoundTrips) {
  for (RecordState state : {RecordState::kProcessing, RecordState::kSucceeded,
                            RecordState::kFailed, RecordState::kReleased}) {
    Record r = EveryField();
    r.state = state;
    r.result = std::string(70000, '\x01');
    const std::string bytes = EncodeRecord(r);
    EXPECT_EQ(bytes[0], static_cast<char>(kRecordFormatVersion));
    ASSERT_OK_AND_ASSIGN(Record back, DecodeRecord(bytes));
    EXPECT_EQ(back, r);
    ASSERT_OK_AND_ASSIGN(RecordHead head, DecodeRecordHead(bytes));
    EXPECT_EQ(head.state, r.state);
    EXPECT_EQ(head.token, r.token);
    EXPECT_EQ(head.lease_until, r.lease_until);
    EXPECT_EQ(head.created_at, r.created_at);
    EXPECT_EQ(head.updated_at, r.updated_at);
    EXPECT_EQ(head.expires_at, r.expires_at);
    EXPECT_EQ(head.purged_at, r.purged_at);
    EXPECT_TRUE(head.purged());
  }
}

// Format 1 (before retention) is still read: such a record is kept for ever and
// is not a tombstone.
TEST(RecordCodecTest, FormatOneIsReadWithoutRetention) {
  Record r = EveryField();
  const std::string v2 = EncodeRecord(r);
  // Version 1 is version 2 without expires_at and purged_at (the two u64s after
  // updated_at, at bytes 34 … 49).
  const std::string v1 = std::string(1, '\x01') + v2.substr(1, 33) + v2.substr(50);
  ASSERT_OK_AND_ASSIGN(Record back, DecodeRecord(v1));
  r.expires_at = absl::InfiniteFuture();
  r.purged_at = absl::InfinitePast();
  EXPECT_EQ(back, r);
  ASSERT_OK_AND_ASSIGN(RecordHead head, DecodeRecordHead(v1));
  EXPECT_EQ(head.version, 1);
  EXPECT_EQ(head.expires_at, absl::InfiniteFuture());
  EXPECT_FALSE(head.purged());
}

// Tenant and key are opaque bytes: the name never lets one pair pass for another.
TEST(RecordCodecTest, NamesKeepTheTenantKeyBoundary) {
  EXPECT_NE(RecordKey("ab", "c"), RecordKey("a", "bc"));
  EXPECT_NE(RecordKey("", "1:ab"), RecordKey("1", "ab"));
  EXPECT_NE(RecordKey("1:a", "b"), RecordKey("1", ":ab"));
  EXPECT_NE(RecordKey(std::string("a\0", 2), "b"), RecordKey("a", std::string("\0b", 2)));
}

// Another format version is refused by name, never guessed; damaged bytes too.
TEST(RecordCodecTest, UnknownVersionAndDamageAreFailedPrecondition) {
  std::string bytes = EncodeRecord(EveryField());
  bytes[0] = static_cast<char>(kRecordFormatVersion + 1);
  absl::Status newer = DecodeRecord(bytes).status();
  EXPECT_THAT(newer, StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(std::string(newer.message()), HasSubstr("format version 3"));
  EXPECT_THAT(DecodeRecordHead(bytes), StatusIs(absl::StatusCode::kFailedPrecondition));

  const std::string good = EncodeRecord(EveryField());
  for (size_t n = 0; n < good.size(); ++n) {
    EXPECT_THAT(DecodeRecord(good.substr(0, n)), StatusIs(absl::StatusCode::kFailedPrecondition))
        << n;
  }
  EXPECT_THAT(DecodeRecord(good + "x"), StatusIs(absl::StatusCode::kFailedPrecondition));
  std::string bad_state = good;
  bad_state[1] = 9;
  EXPECT_THAT(DecodeRecord(bad_state), StatusIs(absl::StatusCode::kFailedPrecondition));
}

}  // namespace
}  // namespace idem::store
