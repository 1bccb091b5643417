// RenderResponse: the bytes it writes are a well-formed HTTP/1.x answer, checked by
// parsing them back with Beast's response parser.
#include "http/server/render.h"

#include <string>
#include <string_view>
#include <vector>

#include "boost/asio/buffer.hpp"
#include "boost/beast/http.hpp"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "http/server/problem.h"
#include "nlohmann/json.hpp"

namespace idem::http {
namespace {

namespace bhttp = boost::beast::http;
using ::testing::HasSubstr;
using ::testing::Not;

struct Parsed {
  bhttp::response<bhttp::string_body> message;
  size_t consumed = 0;
};

Parsed Parse(const std::string& bytes, bool head = false) {
  bhttp::response_parser<bhttp::string_body> parser;
  parser.skip(head);
  parser.eager(true);
  boost::beast::error_code ec;
  Parsed p;
  p.consumed = parser.put(boost::asio::buffer(bytes), ec);
  EXPECT_FALSE(ec) << ec.message() << " in:\n" << bytes;
  EXPECT_TRUE(parser.is_done()) << bytes;
  p.message = parser.release();
  return p;
}

TEST(RenderTest, JsonAnswerHasServerTypeLengthAndRequestId) {
  HttpResponse r;
  r.body = R"({"outcome":"replayed"})";
  r.headers.emplace_back("Idempotent-Replayed", "true");
  std::string out;
  RenderResponse(r, {.request_id = "req-1"}, out);
  Parsed p = Parse(out);
  EXPECT_EQ(p.consumed, out.size());
  EXPECT_EQ(p.message.result_int(), 200);
  EXPECT_EQ(p.message.reason(), "OK");
  EXPECT_EQ(p.message[bhttp::field::server], "idem");
  EXPECT_EQ(p.message[bhttp::field::content_type], "application/json");
  EXPECT_EQ(p.message["X-Request-Id"], "req-1");
  EXPECT_EQ(p.message["Idempotent-Replayed"], "true");
  EXPECT_EQ(p.message.body(), r.body);
  EXPECT_TRUE(p.message.keep_alive());
  EXPECT_THAT(out, Not(HasSubstr("Connection:")));
}

TEST(RenderTest, ProblemBodyGetsTheRequestIdAsItsLastMember) {
  HttpResponse r;
  r.status = 409;
  r.content_type = "application/problem+json";
  r.body = R"({"type":"x","status":409})";
  std::string out;
  RenderResponse(r, {.request_id = "abc"}, out);
  Parsed p = Parse(out);
  EXPECT_EQ(p.message.result_int(), 409);
  EXPECT_EQ(p.message.body(), R"({"type":"x","status":409,"request_id":"abc"})");
  EXPECT_EQ(p.message[bhttp::field::content_length], std::to_string(p.message.body().size()));
}

TEST(RenderTest, CloseAndKeepAliveFollowTheVersion) {
  HttpResponse r;
  std::string out;
  RenderResponse(r, {.version = 11, .keep_alive = false}, out);
  EXPECT_THAT(out, HasSubstr("\r\nConnection: close\r\n"));
  EXPECT_FALSE(Parse(out).message.keep_alive());
  RenderResponse(r, {.version = 10, .keep_alive = true}, out);
  EXPECT_THAT(out, ::testing::StartsWith("HTTP/1.0 200 OK\r\n"));
  EXPECT_THAT(out, HasSubstr("\r\nConnection: keep-alive\r\n"));
  EXPECT_TRUE(Parse(out).message.keep_alive());
  RenderResponse(r, {.version = 10, .keep_alive = false}, out);
  EXPECT_THAT(out, Not(HasSubstr("Connection:")));
  EXPECT_FALSE(Parse(out).message.keep_alive());
}

TEST(RenderTest, HeadKeepsTheLengthAndDropsTheBody) {
  HttpResponse r;
  r.body = "0123456789";
  std::string out;
  RenderResponse(r, {.head = true}, out);
  EXPECT_THAT(out, HasSubstr("Content-Length: 10\r\n"));
  EXPECT_TRUE(out.ends_with("\r\n\r\n"));
  Parsed p = Parse(out, /*head=*/true);
  EXPECT_EQ(p.consumed, out.size());
  EXPECT_EQ(p.message.body(), "");
}

TEST(RenderTest, ServerFramingHeadersAndLineBreaksFromTheReplyAreDropped) {
  HttpResponse r;
  r.content_type = "text/plain";
  r.body = "hi";
  r.headers = {{"content-length", "999"}, {"Transfer-Encoding", "chunked"},
               {"Connection", "upgrade"},  {"Content-Type", "text/html"},
               {"X-Evil", "a\r\nSet-Cookie: x=1"}, {"X-Lf", "a\nSet-Cookie: y=1"},
               {"X-Cr", "a\rb"}, {"X-Name\n", "v"}, {"server", "upstream/1"},
               {"Link", "<a>"}, {"Link", "<b>"}};
  std::string out;
  RenderResponse(r, {.request_id = "r"}, out);
  Parsed p = Parse(out);
  EXPECT_EQ(p.message.body(), "hi");
  EXPECT_EQ(p.message[bhttp::field::content_length], "2");
  EXPECT_EQ(p.message[bhttp::field::content_type], "text/plain");
  EXPECT_EQ(p.message[bhttp::field::server], "upstream/1");
  EXPECT_EQ(p.message.count(bhttp::field::server), 1u);
  EXPECT_EQ(p.message.count(bhttp::field::link), 2u);
  EXPECT_EQ(p.message.count("X-Evil"), 0u);
  EXPECT_EQ(p.message.count("X-Lf"), 0u);
  EXPECT_EQ(p.message.count("X-Cr"), 0u);
  EXPECT_THAT(out, Not(HasSubstr("X-Name")));
  EXPECT_EQ(p.message.count("Set-Cookie"), 0u);
  EXPECT_EQ(p.message.count(bhttp::field::transfer_encoding), 0u);
}

TEST(RenderTest, NoContentAnswersHaveNoLengthOrBody) {
  HttpResponse r;
  r.status = 204;
  r.content_type = "";
  r.body = "ignored";
  std::string out;
  RenderResponse(r, {}, out);
  EXPECT_THAT(out, Not(HasSubstr("Content-Length")));
  EXPECT_TRUE(out.ends_with("\r\n\r\n"));
  EXPECT_EQ(Parse(out).message.result_int(), 204);
}

TEST(RenderTest, ReusesTheStringItIsGiven) {
  HttpResponse big;
  big.body = std::string(4096, 'x');
  std::string out;
  RenderResponse(big, {}, out);
  const size_t capacity = out.capacity();
  HttpResponse small;
  small.body = "{}";
  RenderResponse(small, {}, out);
  EXPECT_EQ(out.capacity(), capacity);
  EXPECT_EQ(Parse(out).message.body(), "{}");
}

// Every problem type idem serve's API and idem proxy both answer has one title,
// whatever title the handler wrote (the proxy once said "Conflict" for in_progress
// and "Unprocessable Content" for fingerprint_mismatch): through MakeProblem and
// through a Problem built field by field (the API's in_progress, expired).
TEST(ProblemTest, EverySharedProblemTypeHasOneTitle) {
  const std::vector<std::string_view> shared = SharedProblemTypes();
  EXPECT_THAT(shared, ::testing::UnorderedElementsAre("in_progress", "fingerprint_mismatch",
                                                      "expired", "store_unavailable",
                                                      "internal"));
  for (std::string_view slug : shared) {
    const std::string title(SharedProblemTitle(slug));
    ASSERT_FALSE(title.empty()) << slug;
    const auto made =
        nlohmann::json::parse(MakeProblem(409, slug, "Conflict", "detail").body);
    EXPECT_EQ(made["title"], title) << slug;
    EXPECT_EQ(made["type"], "urn:idem:problem:" + std::string(slug));
    Problem p;
    p.status = 422;
    p.slug = std::string(slug);
    p.title = "Unprocessable Content";
    EXPECT_EQ(nlohmann::json::parse(ProblemResponse(p).body)["title"], title) << slug;
  }
  EXPECT_EQ(SharedProblemTitle("in_progress"), "Claim in progress");
  EXPECT_EQ(SharedProblemTitle("fingerprint_mismatch"), "Fingerprint mismatch");
  // A type only one side answers keeps its handler's title.
  EXPECT_EQ(SharedProblemTitle("lease_lost"), "");
  EXPECT_EQ(nlohmann::json::parse(MakeProblem(409, "lease_lost", "Lease lost", "d").body)["title"],
            "Lease lost");
}

TEST(ProblemTest, InProgressRetryAfterIsTheLeaseLeftRoundedUpAndCapped) {
  const absl::Time now = absl::FromUnixSeconds(1000);
  EXPECT_EQ(InProgressRetryAfter(now, now + absl::Seconds(30), kDefaultRetryAfterMax), 1);
  EXPECT_EQ(InProgressRetryAfter(now, now + absl::Seconds(30), absl::Seconds(10)), 10);
  EXPECT_EQ(InProgressRetryAfter(now, now + absl::Milliseconds(2100), absl::Seconds(10)), 3);
  EXPECT_EQ(InProgressRetryAfter(now, now + absl::Milliseconds(100), absl::Seconds(10)), 1);
  EXPECT_EQ(InProgressRetryAfter(now, now - absl::Seconds(5), absl::Seconds(10)), 1);
  EXPECT_EQ(InProgressRetryAfter(now, absl::InfiniteFuture(), kLongestRetryAfterMax), 3600);
}

}  // namespace
}  // namespace idem::http
