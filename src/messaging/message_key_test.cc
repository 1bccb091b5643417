#include "idem/messaging/message_key.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace idem::messaging {
namespace {

using ::testing::HasSubstr;

Message WithPayload(std::string payload) {
  Message m;
  m.payload = std::move(payload);
  return m;
}

TEST(MessageKeyTest, HeaderKey) {
  auto k = MessageKey::Parse(MessageKey::Kind::kHeader, "event_id");
  ASSERT_TRUE(k.ok());
  Message m;
  m.headers = {{"trace", "t"}, {"event_id", "E-1"}};
  EXPECT_EQ(*k->Derive(m), "E-1");
  m.headers = {{"trace", "t"}};
  EXPECT_THAT(k->Derive(m).status().message(), HasSubstr("no header 'event_id'"));
  m.headers = {{"event_id", ""}};
  EXPECT_EQ(k->Derive(m).status().code(), absl::StatusCode::kInvalidArgument);
}

// A key that could not go into an Idempotency-Key header as it is (the bridge sends
// it there) is refused, not cut down to one that can: from a header, a field or a
// template alike.
TEST(MessageKeyTest, KeyThatCannotBeAHeaderIsRefused) {
  auto header = MessageKey::Parse(MessageKey::Kind::kHeader, "event_id");
  ASSERT_TRUE(header.ok());
  Message m;
  for (const std::string& bad : {std::string("E-1\r\nX-Injected: 1"), std::string("E-1\n"),
                                 std::string("E\0-1", 4), std::string(" E-1"),
                                 std::string(256, 'E')}) {
    m.headers = {{"event_id", bad}};
    EXPECT_EQ(header->Derive(m).status().code(), absl::StatusCode::kInvalidArgument);
  }
  m.headers = {{"event_id", std::string(255, 'E')}};
  EXPECT_TRUE(header->Derive(m).ok());
  auto field = MessageKey::ParseTagged("template:{order_no}:{version}");
  ASSERT_TRUE(field.ok());
  absl::StatusOr<std::string> k =
      field->Derive(WithPayload(R"({"order_no":"R-1\r\nX: 1","version":3})"));
  EXPECT_EQ(k.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(k.status().message(),
              HasSubstr("the key from template:{order_no}:{version} is refused: key holds the "
                        "control character \\r at byte 3"));
}

TEST(MessageKeyTest, JsonFieldByDotsOrPointer) {
  for (const char* spec : {"order.no", "/order/no"}) {
    auto k = MessageKey::Parse(MessageKey::Kind::kJsonField, spec);
    ASSERT_TRUE(k.ok()) << spec;
    EXPECT_EQ(*k->Derive(WithPayload(R"({"order":{"no":"R-7"}})")), "R-7");
    EXPECT_EQ(*k->Derive(WithPayload(R"({"order":{"no":42}})")), "42");
    EXPECT_THAT(k->Derive(WithPayload(R"({"order":{}})")).status().message(),
                HasSubstr("is missing"));
    EXPECT_THAT(k->Derive(WithPayload("not json")).status().message(), HasSubstr("not JSON"));
    EXPECT_THAT(k->Derive(WithPayload(R"({"order":{"no":[1]}})")).status().message(),
                HasSubstr("object or array"));
  }
}

TEST(MessageKeyTest, TemplateOverFields) {
  auto k = MessageKey::ParseTagged("template:{order_no}:{event_type}:{version}");
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ(*k->Derive(WithPayload(R"({"order_no":"R-1","event_type":"refund","version":3})")),
            "R-1:refund:3");
  EXPECT_THAT(k->Derive(WithPayload(R"({"order_no":"R-1","version":3})")).status().message(),
              HasSubstr("'event_type' is missing"));
  EXPECT_EQ(k->ToString(), "template:{order_no}:{event_type}:{version}");
}

TEST(MessageKeyTest, PositionKeysAreRefusedWithTheReason) {
  for (const char* tagged : {"header:offset", "header:kafka_partition", "field:meta.offset",
                             "template:{topic}:{partition}:{offset}", "template:{order}:{Offset}",
                             "header:X-Kafka-Offset"}) {
    auto k = MessageKey::ParseTagged(tagged);
    ASSERT_FALSE(k.ok()) << tagged;
    EXPECT_EQ(k.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(k.status().message(), HasSubstr("position in the log"));
    EXPECT_THAT(k.status().message(), HasSubstr("would get a second key and run twice"));
  }
  // A business field that merely contains the word is fine.
  EXPECT_TRUE(MessageKey::ParseTagged("field:timezone_offset").ok());
}

TEST(MessageKeyTest, MalformedSpecs) {
  EXPECT_THAT(MessageKey::ParseTagged("template:{order").status().message(),
              HasSubstr("never closed"));
  EXPECT_THAT(MessageKey::ParseTagged("template:fixed").status().message(),
              HasSubstr("no {field}"));
  EXPECT_THAT(MessageKey::ParseTagged("template:{}").status().message(), HasSubstr("empty"));
  EXPECT_THAT(MessageKey::ParseTagged("field:a..b").status().message(), HasSubstr("empty segment"));
  EXPECT_THAT(MessageKey::ParseTagged("offset").status().message(), HasSubstr("expected header:"));
  EXPECT_FALSE(MessageKey::ParseTagged("header:").ok());
}

}  // namespace
}  // namespace idem::messaging
