// core/key_shape.h: known positives and negatives of each suspicious shape.
#include "core/key_shape.h"

#include <gtest/gtest.h>

#include <string>

namespace idem {
namespace {

TEST(KeyShape, BusinessKeysAreNotSuspicious) {
  for (const char* key :
       {"refund:ORD-2024-0001",
        "R-20240618-000713",
        "order-2024-1001",
        "user_42",
        "abc",
        "550e8400e29b41d4a716446655440000",  // 32 hex digits: a content digest, not a UUID
        "payment:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
        "123456789",        // nine digits: an order number
        "0946684799",       // ten digits, but before 2000
        "4102444800",       // ten digits, 2100
        "17330500001",      // eleven digits
        "orders-03-18842",  // a partition with a leading zero
        "orders-3-018842",  // an offset with a leading zero
        "orders-1000-5",    // a partition of four digits
        "3-18842",          // no topic
        "2024-11-30",       // a date: no letter in the "topic"
        "orders-3:18842",   // two different separators
        "or ders-3-18842",  // a space is no topic character
        "-3-18842",
        "orders--18842",
        "orders-3-",
        "x550e8400-e29b-41d4-a716-446655440000",
        "550e8400-e29b-41d4-a716-44665544000g"}) {
    EXPECT_EQ(ClassifyKeyShape(key), KeyShape::kNone) << key;
  }
}

TEST(KeyShape, Uuids) {
  for (const char* key : {"550e8400-e29b-41d4-a716-446655440000",         // v1
                          "9B2E4C1A-7F3D-4E8A-9C6B-1D2E3F4A5B6C",         // v4, upper case
                          "018f3e2a-7b4c-7d5e-8f6a-9b0c1d2e3f4a",         // v7
                          "refund:f47ac10b-58cc-4372-a567-0e02b2c3d479",  // after a namespace
                          "tenant/orders/f47ac10b-58cc-4372-a567-0e02b2c3d479",  // after a path
                          "id=f47ac10b-58cc-4372-a567-0e02b2c3d479"}) {
    EXPECT_EQ(ClassifyKeyShape(key), KeyShape::kUuid) << key;
  }
}

TEST(KeyShape, EpochTimestamps) {
  EXPECT_EQ(ClassifyKeyShape("1733050000"), KeyShape::kEpochSeconds);
  EXPECT_EQ(ClassifyKeyShape("0946684800"), KeyShape::kEpochSeconds);  // 2000-01-01
  EXPECT_EQ(ClassifyKeyShape("4102444799"), KeyShape::kEpochSeconds);
  EXPECT_EQ(ClassifyKeyShape("1733050000123"), KeyShape::kEpochMillis);
  EXPECT_EQ(ClassifyKeyShape("0946684800000"), KeyShape::kEpochMillis);
  EXPECT_EQ(ClassifyKeyShape("4102444800000"), KeyShape::kNone);  // 2100
  EXPECT_EQ(ClassifyKeyShape("0946684799999"), KeyShape::kNone);  // before 2000
}

TEST(KeyShape, TopicPartitionOffset) {
  for (const char* key : {"orders-3-18842", "orders:3:18842", "orders/0/0", "orders@12@9",
                          "my.orders_v2-999-1234567890123456789", "payments.eu-west-1-7-42",
                          "orders_3_18842", "orders.3.18842"}) {
    EXPECT_EQ(ClassifyKeyShape(key), KeyShape::kTopicPartitionOffset) << key;
  }
  // Twenty digits do not fit an int64 offset.
  EXPECT_EQ(ClassifyKeyShape("orders-3-12345678901234567890"), KeyShape::kNone);
}

TEST(KeyShape, Names) {
  EXPECT_EQ(KeyShapeName(KeyShape::kNone), "none");
  EXPECT_EQ(KeyShapeName(KeyShape::kUuid), "uuid");
  EXPECT_EQ(KeyShapeName(KeyShape::kEpochSeconds), "epoch_s");
  EXPECT_EQ(KeyShapeName(KeyShape::kEpochMillis), "epoch_ms");
  EXPECT_EQ(KeyShapeName(KeyShape::kTopicPartitionOffset), "topic_partition_offset");
}

}  // namespace
}  // namespace idem
