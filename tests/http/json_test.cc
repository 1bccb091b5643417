#include "http/api/json.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "nlohmann/json.hpp"
#include "testing/status_matchers.h"

namespace idem::http {
namespace {

using ::idem::testing::StatusIs;
using ::testing::HasSubstr;

TEST(ParseClaimBody, Defaults) {
  ASSERT_OK_AND_ASSIGN(ClaimBody b, ParseClaimBody(R"({"biz_type":"refund","key":"R-1"})"));
  EXPECT_EQ(b.biz_type, "refund");
  EXPECT_EQ(b.key, "R-1");
  EXPECT_EQ(b.fingerprint, "");
  EXPECT_EQ(b.lease_ms, 30000);
  EXPECT_EQ(b.wait_ms, 0);
}

TEST(ParseClaimBody, AllFields) {
  ASSERT_OK_AND_ASSIGN(ClaimBody b,
                       ParseClaimBody(R"( {"biz_type":"r","key":"k\u00e9\/x","fingerprint":"f",
                                      "lease_ms":100,"wait_ms":30000} )"));
  EXPECT_EQ(b.key, "k\xc3\xa9/x");
  EXPECT_EQ(b.fingerprint, "f");
  EXPECT_EQ(b.lease_ms, 100);
  EXPECT_EQ(b.wait_ms, 30000);
}

struct BadCase {
  const char* body;
  const char* message;
};

class BadClaimBody : public ::testing::TestWithParam<BadCase> {};

TEST_P(BadClaimBody, IsInvalidArgumentNamingTheProblem) {
  absl::StatusOr<ClaimBody> b = ParseClaimBody(GetParam().body);
  EXPECT_THAT(b, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(std::string(b.status().message()), HasSubstr(GetParam().message)) << GetParam().body;
}

INSTANTIATE_TEST_SUITE_P(
    All, BadClaimBody,
    ::testing::Values(
        BadCase{"", "empty"}, BadCase{"  \n", "empty"}, BadCase{"{", "not valid JSON"},
        BadCase{"[1]", "must be a JSON object"}, BadCase{"\"x\"", "must be a JSON object"},
        BadCase{R"({"biz_type":"a","key":"b"} x)", "not valid JSON"},
        BadCase{R"({"biz_type":"a","key":"\xff"})", "not valid JSON"},
        BadCase{R"({"key":"b"})", "\"biz_type\" is required"},
        BadCase{R"({"biz_type":"a"})", "\"key\" is required"},
        BadCase{R"({"biz_type":1,"key":"b"})", "\"biz_type\" must be a string"},
        BadCase{R"({"biz_type":"a","key":null})", "\"key\" must be a string"},
        BadCase{R"({"biz_type":"a","key":"x\u0000y"})", "\"key\" must not contain NUL"},
        BadCase{R"({"biz_type":"a","key":"b","fingerprint":7})",
                "\"fingerprint\" must be a string"},
        BadCase{R"({"biz_type":"a","key":"b","lease_ms":99})",
                "\"lease_ms\" must be between 100 and 3600000"},
        BadCase{R"({"biz_type":"a","key":"b","lease_ms":3600001})", "\"lease_ms\" must be between"},
        BadCase{R"({"biz_type":"a","key":"b","lease_ms":1000.0})",
                "\"lease_ms\" must be an integer"},
        BadCase{R"({"biz_type":"a","key":"b","lease_ms":"1000"})",
                "\"lease_ms\" must be an integer"},
        BadCase{R"({"biz_type":"a","key":"b","wait_ms":-1})",
                "\"wait_ms\" must be between 0 and 30000"},
        BadCase{R"({"biz_type":"a","key":"b","wait_ms":30001})", "\"wait_ms\" must be between"},
        BadCase{R"({"biz_type":"a","key":"b","key":"c"})", "\"key\" appears more than once"},
        BadCase{R"({"biz_type":"a","key":"b","lease":5})", "\"lease\" is not a known field"}));

TEST(ParseCompleteBody, KeepsResultBytesExactly) {
  const std::string raw = R"({"a" : 1.50, "b":[1,2 ]})";
  ASSERT_OK_AND_ASSIGN(
      CompleteBody b,
      ParseCompleteBody("{\"biz_type\":\"r\",\"key\":\"k\",\"token\":3,\"result\":  " + raw +
                        "  \n}"));
  EXPECT_EQ(b.token, 3);
  EXPECT_EQ(b.result, raw);
}

TEST(ParseCompleteBody, ScalarResultsKeepTheirSpelling) {
  for (std::string raw : {"1.50", "-0", "1E+2", "true", "null", R"("a\u00e9 \"q\"")", "[]", "{}",
                          "[ ]", R"({ "x" : { "y" : [ 1 , { } ] } })"}) {
    ASSERT_OK_AND_ASSIGN(
        CompleteBody b,
        ParseCompleteBody(R"({"result": )" + raw +
                          " \t\r\n, \"biz_type\":\"r\",\"key\":\"k\",\"token\":1}"));
    EXPECT_EQ(b.result, raw);
  }
}

// Numbers past int64/uint64/double are valid JSON and kept as written; what is
// not JSON, or nests past the parser's 1,024 levels, is still refused.
TEST(ParseCompleteBody, BigNumbersKeepTheirSpelling) {
  for (std::string raw : {"1e400", "-1e-400", "18446744073709551616", "1E+999",
                          R"({"a":[1e400,{"b":-123456789012345678901234567890}]})"}) {
    ASSERT_OK_AND_ASSIGN(
        CompleteBody b,
        ParseCompleteBody(R"({"result": )" + raw + R"(, "biz_type":"r","key":"k","token":1})"));
    EXPECT_EQ(b.result, raw);
    EXPECT_TRUE(IsValidJson(raw)) << raw;
  }
  for (std::string bad : {"1e400x", "01e400", "1e", "-", "[1e400", "{\"a\":1e400}}", "1e400 2"}) {
    EXPECT_THAT(ParseCompleteBody(R"({"result": )" + bad + R"(, "biz_type":"r","key":"k","token":1})"),
                StatusIs(absl::StatusCode::kInvalidArgument))
        << bad;
    EXPECT_FALSE(IsValidJson(bad)) << bad;
  }
  const std::string deep = std::string(1100, '[') + "1e400" + std::string(1100, ']');
  EXPECT_THAT(ParseCompleteBody(R"({"result": )" + deep + R"(, "biz_type":"r","key":"k","token":1})"),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(ParseCompleteBody, RejectsBadToken) {
  // 0 parses: it is the token of a degraded fail-open claim, which Api checks.
  for (const char* token : {"-1", "1.5", "\"1\"", "99999999999999999999"}) {
    EXPECT_THAT(ParseCompleteBody(std::string(R"({"biz_type":"r","key":"k","result":1,"token":)") +
                                  token + "}"),
                StatusIs(absl::StatusCode::kInvalidArgument))
        << token;
  }
  EXPECT_THAT(ParseCompleteBody(R"({"biz_type":"r","key":"k","token":1})"),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(ParseCompleteBody, RejectsInvalidJsonInsideResult) {
  EXPECT_THAT(ParseCompleteBody(R"({"biz_type":"r","key":"k","token":1,"result":{"a":01}})"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseCompleteBody(R"({"biz_type":"r","key":"k","token":1,"result":[tru]})"),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// A body is read in one on-demand pass, whose step to the next member skips an
// unread value up to the object's depth without checking it. A scalar `result` is
// only looked at, never read, so what follows it must be checked: these were
// accepted, with "b" as the result, before that check (found by a differential
// fuzzer against the former DOM-then-on-demand parse).
TEST(ParseCompleteBody, RejectsWhatFollowsAScalarResultWhenItDoesNotEndTheMember) {
  for (const char* body : {
           R"({"biz_type":"r","key":"k","token":4,"result":"b":[1,2 ]}  })",
           R"({"biz_type":"r","key":"k","token":4,"result":"b" 7})",
           R"({"biz_type":"r","key":"k","token":4,"result":1 2})",
           R"({"biz_type":"r","key":"k","token":4,"result":{"a":1}:2}})",
           R"({"biz_type":"r","key":"k","token":4,"result":"b"}})",
           R"({"biz_type":"r","key":"k","token":4,"result":"b")",
       }) {
    EXPECT_THAT(ParseCompleteBody(body), StatusIs(absl::StatusCode::kInvalidArgument)) << body;
  }
  EXPECT_THAT(ParseFailBody(R"({"biz_type":"r","key":"k","token":4,"retryable":true,"error":1:2}})"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  // Whitespace after the value is still fine, and kept out of the stored bytes.
  ASSERT_OK_AND_ASSIGN(CompleteBody b,
                       ParseCompleteBody("{\"biz_type\":\"r\",\"key\":\"k\",\"token\":4,"
                                         "\"result\":\"b\" \r\n\t}"));
  EXPECT_EQ(b.result, "\"b\"");
}

// What the single pass must still refuse anywhere in the body (the former DOM pass
// refused all of it): raw control characters in strings, bad escapes, invalid
// UTF-8 and anything after the object.
TEST(ParseClaimBody, RefusesInvalidJsonAnywhere) {
  for (std::string body : {std::string("{\"biz_type\":\"a\",\"key\":\"b\x01\"}"),
                           std::string("{\"biz_type\":\"a\",\"k\x01\":\"b\"}"),
                           std::string(R"({"biz_type":"a","key":"\q"})"),
                           std::string(R"({"biz_type":"a","key":"\ud800"})"),
                           std::string("{\"biz_type\":\"a\",\"key\":\"b\"} \xff"),
                           std::string(R"({"biz_type":"a","key":"b"}})"),
                           std::string(R"({"biz_type":"a","key":"b",})"),
                           std::string(R"({"biz_type":"a" "key":"b"})"),
                           std::string(R"({"biz_type":"a","key":"b","lease_ms":100:5})")}) {
    EXPECT_THAT(ParseClaimBody(body), StatusIs(absl::StatusCode::kInvalidArgument)) << body;
  }
}
TEST(ParseFailBody, Fields) {
  ASSERT_OK_AND_ASSIGN(FailBody b, ParseFailBody(R"({"biz_type":"r","key":"k","token":2,
      "retryable":true,"error":{"code" :"E1"}})"));
  EXPECT_EQ(b.token, 2);
  EXPECT_TRUE(b.retryable);
  EXPECT_EQ(b.error, R"({"code" :"E1"})");
  EXPECT_THAT(ParseFailBody(R"({"biz_type":"r","key":"k","token":2,"retryable":1,"error":1})"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseFailBody(R"({"biz_type":"r","key":"k","token":2,"error":1})"),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(RawJsonOrString, SplicesJsonAndQuotesTheRest) {
  EXPECT_EQ(RawJsonOrString(R"({"a" : 1.50})"), R"({"a" : 1.50})");
  EXPECT_EQ(RawJsonOrString(""), "null");
  EXPECT_EQ(RawJsonOrString("not json"), R"("not json")");
}

// The quick path for plain text writes what nlohmann's dump writes, for every byte.
TEST(JsonString, IsWhatTheJsonLibraryWrites) {
  auto reference = [](const std::string& text) {
    return nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  };
  for (int c = 0; c < 256; ++c) {
    const std::string one(1, static_cast<char>(c));
    EXPECT_EQ(JsonString(one), reference(one)) << "byte " << c;
    const std::string mixed = "ab" + one + "cd";
    EXPECT_EQ(JsonString(mixed), reference(mixed)) << "byte " << c;
  }
  for (const std::string text : {"", "result", "2026-01-01T00:00:00.123Z", "h\xc3\xa9", "a\"b",
                                 "tab\there", "\xff\xfe"}) {
    EXPECT_EQ(JsonString(text), reference(text)) << text;
  }
}

// Missing members are named in every body; a body past the 64 KiB a thread keeps
// for parsing is parsed from a buffer of its own, its bytes kept exactly.
TEST(ParseBodies, NameTheMissingMemberAndKeepBigBodiesExactly) {
  auto message = [](const absl::Status& s) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    return std::string(s.message());
  };
  EXPECT_THAT(message(ParseCompleteBody(R"({"biz_type":"r","key":"k","token":1})").status()),
              HasSubstr("\"result\" is required"));
  EXPECT_THAT(message(ParseCompleteBody(R"({"key":"k","token":1,"result":1})").status()),
              HasSubstr("\"biz_type\" is required"));
  EXPECT_THAT(message(ParseFailBody(R"({"biz_type":"r","key":"k","token":1,"error":1})").status()),
              HasSubstr("\"retryable\" is required"));
  const std::string big = "\"" + std::string(100 * 1024, 'x') + "\"";
  for (int round = 0; round < 2; ++round) {  // big, then small again on the same thread
    ASSERT_OK_AND_ASSIGN(
        CompleteBody b,
        ParseCompleteBody(R"({"biz_type":"r","key":"k","token":1,"result":)" + big + "}"));
    EXPECT_EQ(b.result, big);
    ASSERT_OK_AND_ASSIGN(CompleteBody small,
                         ParseCompleteBody(R"({"biz_type":"r","key":"k","token":1,"result":7})"));
    EXPECT_EQ(small.result, "7");
  }
}

TEST(ParseBatchEnvelope, GivesEachItemAsItsBytesInTheBody) {
  const std::string body =
      R"( {"requests": [ {"op":"claim","key":"a"} , 7, [1, {}], "s" ,{"result":{"n":1e400}}]} )";
  ASSERT_OK_AND_ASSIGN(std::vector<std::string_view> items, ParseBatchEnvelope(body, 5));
  ASSERT_EQ(items.size(), 5u);
  EXPECT_EQ(items[0], R"({"op":"claim","key":"a"})");
  EXPECT_EQ(items[1], "7");
  EXPECT_EQ(items[2], "[1, {}]");
  EXPECT_EQ(items[3], R"("s")");
  EXPECT_EQ(items[4], R"({"result":{"n":1e400}})");
  // Views into the body itself, not a copy.
  EXPECT_GE(items[0].data(), body.data());
  EXPECT_LE(items[4].data() + items[4].size(), body.data() + body.size());
}

TEST(ParseBatchEnvelope, RefusesTheWholeBatchNamingWhatIsWrong) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "request body is empty"},
      {"{", "request body is not valid JSON"},
      {R"({"requests":[{"key":"\x"}]})", "request body is not valid JSON"},
      {R"({"requests":[1]} {})", "request body is not valid JSON"},
      {"[]", R"(must be a JSON object with a "requests" array)"},
      {"{}", R"(field "requests" is required)"},
      {R"({"requests":{}})", R"(field "requests" must be an array)"},
      {R"({"requests":[]})", R"(field "requests" must have at least one item)"},
      {R"({"requests":[1,2,3]})", R"(field "requests" has more than 2 items)"},
      {R"({"requests":[1],"x":2})", R"(field "x" is not a known field)"},
      {R"({"requests":[1],"requests":[2]})", R"(field "requests" appears more than once)"},
  };
  for (const auto& [body, message] : cases) {
    const auto parsed = ParseBatchEnvelope(body, 2);
    EXPECT_THAT(parsed, StatusIs(absl::StatusCode::kInvalidArgument)) << body;
    EXPECT_THAT(std::string(parsed.status().message()), HasSubstr(message)) << body;
  }
}

TEST(ParseBatchItem, ParsesTheBodyOfTheCallItsOpNames) {
  ASSERT_OK_AND_ASSIGN(BatchItemBody claim,
                       ParseBatchItem(R"({"biz_type":"r","key":"k","op":"claim","lease_ms":100})"));
  ASSERT_TRUE(std::holds_alternative<ClaimBody>(claim));
  EXPECT_EQ(std::get<ClaimBody>(claim).key, "k");
  EXPECT_EQ(std::get<ClaimBody>(claim).lease_ms, 100);
  ASSERT_OK_AND_ASSIGN(
      BatchItemBody complete,
      ParseBatchItem(R"({"op":"complete","biz_type":"r","key":"k","token":2,"result":[1.50]})"));
  ASSERT_TRUE(std::holds_alternative<CompleteBody>(complete));
  EXPECT_EQ(std::get<CompleteBody>(complete).result, "[1.50]");
  ASSERT_OK_AND_ASSIGN(BatchItemBody fail,
                       ParseBatchItem(R"({"op":"fail","biz_type":"r","key":"k","token":2,)"
                                      R"("retryable":true,"error":"e"})"));
  ASSERT_TRUE(std::holds_alternative<FailBody>(fail));
  EXPECT_TRUE(std::get<FailBody>(fail).retryable);
}

TEST(ParseBatchItem, NamesTheFieldOfABadItem) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"7", R"(must be a JSON object with "op")"},
      {R"({"key":"k"})", R"(field "op" is required)"},
      {R"({"op":1,"key":"k"})", R"(field "op" must be a string)"},
      {R"({"op":"claims"})", R"(field "op" must be "claim", "complete" or "fail", got "claims")"},
      {R"({"op":"claim","biz_type":"r"})", R"(field "key" is required)"},
      {R"({"op":"claim","biz_type":"r","key":"k","wait_ms":0})",
       R"(field "wait_ms" is not taken in a batch)"},
      {R"({"op":"claim","biz_type":"r","key":"k","token":1})", R"(field "token" is not a known)"},
      {R"({"op":"complete","biz_type":"r","key":"k","token":1})", R"(field "result" is required)"},
      {R"({"op":"fail","biz_type":"r","key":"k","token":-1,"retryable":true,"error":1})",
       R"(field "token" must be between 0)"},
      {R"({"op":"claim","op":"claim","biz_type":"r","key":"k"})", R"(field "op" appears more)"},
  };
  for (const auto& [item, message] : cases) {
    const absl::StatusOr<BatchItemBody> parsed = ParseBatchItem(item);
    EXPECT_THAT(parsed, StatusIs(absl::StatusCode::kInvalidArgument)) << item;
    EXPECT_THAT(std::string(parsed.status().message()), HasSubstr(message)) << item;
  }
  // The single calls still refuse "op".
  const absl::StatusOr<ClaimBody> single =
      ParseClaimBody(R"({"op":"claim","biz_type":"r","key":"k"})");
  EXPECT_THAT(std::string(single.status().message()), HasSubstr(R"(field "op" is not a)"));
}

TEST(FormatRfc3339, Rfc3339WithMillis) {
  EXPECT_EQ(FormatRfc3339(absl::FromUnixMillis(1767225600123)), "2026-01-01T00:00:00.123Z");
  EXPECT_EQ(FormatRfc3339(absl::InfinitePast()), "");
  EXPECT_EQ(FormatRfc3339(absl::InfiniteFuture()), "");
}

// The calendar arithmetic of the common years against absl::FormatTime, which the
// other years still use: the edges of days, months, leap days, the range's ends and
// sub-millisecond parts (truncated, not rounded), then a spread of random times.
TEST(FormatRfc3339, IsWhatAbslFormatTimeWrites) {
  auto absl_format = [](absl::Time t) {
    return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", t, absl::UTCTimeZone());
  };
  std::vector<absl::Time> times = {
      absl::UnixEpoch(),
      absl::UnixEpoch() - absl::Nanoseconds(1),
      absl::UnixEpoch() - absl::Milliseconds(1500),
      absl::FromUnixMillis(951782400000),     // 2000-02-29
      absl::FromUnixMillis(951868799999),     // 2000-02-29T23:59:59.999
      absl::FromUnixMillis(4107542400000),    // 2100-03-01
      absl::FromUnixMillis(253402300799999),  // 9999-12-31T23:59:59.999
      absl::FromUnixMillis(253402300800000),  // 10000-01-01
      absl::FromUnixMillis(1767225600123) + absl::Microseconds(999),
      absl::FromUnixSeconds(-62135596800),  // 0001-01-01
  };
  std::mt19937_64 random(20261205);
  std::uniform_int_distribution<int64_t> nanos(-5'000'000'000'000'000'000,
                                               5'000'000'000'000'000'000);
  for (int i = 0; i < 20000; ++i) times.push_back(absl::FromUnixNanos(nanos(random)));
  std::uniform_int_distribution<int64_t> millis(0, 253402300799999);
  for (int i = 0; i < 20000; ++i) times.push_back(absl::FromUnixMillis(millis(random)));
  for (absl::Time t : times) {
    ASSERT_EQ(FormatRfc3339(t), absl_format(t)) << absl::ToUnixNanos(t);
  }
}

}  // namespace
}  // namespace idem::http
