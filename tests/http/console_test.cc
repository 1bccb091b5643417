// The operator console through the Api, in process: sessions, CSRF, escaping,
// scoping an admin to a tenant, finding records. The browser drives the same pages
// in tests/http/console_browser_test.cc.
#include "http/api/console.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "http/api/api.h"
#include "http/api/console_html.h"
#include "idem/fingerprint.h"
#include "idem/idem.h"
#include "recon/tables.h"
#include "testing/fake_clock.h"
#include "testing/status_matchers.h"
#include "testing/step_types.h"
#include "testing/temp_dir.h"

namespace idem::http {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(ConsoleHtml, EscapesMarkupQuotesAndInvalidUtf8) {
  EXPECT_EQ(Html("<script>alert('x')</script>&\""),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;&quot;");
  // A lone continuation byte, a truncated sequence, an overlong '/', a surrogate and
  // a control character each become U+FFFD; well-formed UTF-8 is kept.
  EXPECT_EQ(Html("a\x80" "b\xE2\x82" "c\xC0\xAF" "d\xED\xA0\x80" "e\x01" "f"),
            "a\xEF\xBF\xBD" "b\xEF\xBF\xBD\xEF\xBF\xBD" "c\xEF\xBF\xBD\xEF\xBF\xBD"
            "d\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD" "e\xEF\xBF\xBD" "f");
  EXPECT_EQ(Html("日本 €\n\t"), "日本 €\n\t");
}

TEST(ConsoleHtml, ReadsFormsCookiesAndEncodesLinks) {
  auto form = ParseForm("a=1+2&b=%3Cx%3E&a=ignored&c&d=%zz");
  EXPECT_EQ(form["a"], "1 2");
  EXPECT_EQ(form["b"], "<x>");
  EXPECT_EQ(form["c"], "");
  EXPECT_EQ(form["d"], "%zz");
  EXPECT_EQ(CookieValue("x=1; idem_console=abc; y=2", "idem_console"), "abc");
  EXPECT_EQ(CookieValue("idem_console_login=zz", "idem_console"), "");
  EXPECT_EQ(UrlEncode("a b/<\"&\xFF~"), "a%20b%2F%3C%22%26%FF~");
  EXPECT_EQ(PrettyJson(R"({"a":[1,2]})"), "{\n  \"a\": [\n    1,\n    2\n  ]\n}");
  EXPECT_EQ(PrettyJson("not json"), "not json");
}

constexpr std::string_view kOpsToken = "ops-token";
constexpr std::string_view kSupportToken = "support-token";

// The store's folder, made before the store (a base class is built first).
struct ConsoleDir {
  testing::TempDir dir;
};

class ConsoleTest : public ::testing::Test, protected ConsoleDir {
 protected:
  explicit ConsoleTest(std::string url = "memory://")
      : store_(*OpenStore(url == "sqlite" ? "sqlite://" + dir.file("console.db") : url)),
        guard_(*store_, GuardOptions{.clock = &clock_}),
        console_(*store_, ConsoleOptions{.admins = {{.name = "ops", .token_sha256 = Fingerprint(kOpsToken)},
                                                    {.name = "support",
                                                     .token_sha256 = Fingerprint(kSupportToken),
                                                     .tenant = "acme"}},
                                         .tenants = {"acme", "globex"},
                                         .sample_every = absl::ZeroDuration(),
                                         .clock = &clock_}),
        api_(guard_, *store_, metrics_,
             ApiOptions{.tenants = {Tenant::WithToken("acme", "tok-a"),
                                    Tenant::WithToken("globex", "tok-g")},
                        .console = &console_,
                        .clock = &clock_}) {
    clock_.Set(absl::FromUnixSeconds(1'800'000'000));
  }

  HttpResponse Get(std::string target, std::string cookie = "") {
    HttpRequest r{.method = "GET", .target = std::move(target)};
    r.cookie = std::move(cookie);
    return api_.Handle(r).response;
  }
  HttpResponse Post(std::string target, std::string body, std::string cookie) {
    HttpRequest r{.method = "POST", .target = std::move(target), .body = std::move(body),
                  .cookie = std::move(cookie)};
    return api_.Handle(r).response;
  }
  static std::string CookieOf(const HttpResponse& r, std::string_view name) {
    for (const auto& [k, v] : r.headers) {
      if (k == "Set-Cookie" && v.starts_with(std::string(name) + "=")) {
        return v.substr(0, v.find(';'));
      }
    }
    return "";
  }
  // Signs in as `name`; the session's cookie ("idem_console=…").
  std::string SignIn(std::string_view name, std::string_view token) {
    HttpResponse form = Get("/console/login");
    const std::string login = CookieOf(form, "idem_console_login");
    const std::string csrf = login.substr(login.find('=') + 1);
    HttpResponse r = Post("/console/login",
                          "csrf=" + csrf + "&name=" + std::string(name) + "&token=" + std::string(token),
                          login);
    EXPECT_EQ(r.status, 303) << r.body;
    return CookieOf(r, "idem_console");
  }
  static std::string CsrfOf(const HttpResponse& page) {
    const std::string marker = "name=\"csrf\" value=\"";
    const size_t at = page.body.find(marker);
    return at == std::string::npos ? "" : page.body.substr(at + marker.size(), 64);
  }
  void Claim(std::string tenant, std::string key, std::string result = "") {
    Request req{.tenant = std::move(tenant), .biz_type = "refund", .key = std::move(key)};
    auto claim = guard_.Claim(req, absl::Seconds(30));
    ASSERT_TRUE(claim.ok()) << claim.status();
    if (!result.empty()) ASSERT_OK(guard_.Complete(req, claim->token, result));
  }

  testing::FakeClock clock_;
  std::unique_ptr<Store> store_;
  Guard guard_;
  Metrics metrics_;
  Console console_;
  Api api_;
};

TEST_F(ConsoleTest, PagesNeedASessionAndEveryAnswerCarriesTheSecurityHeaders) {
  HttpResponse r = Get("/console/records?key=x");
  EXPECT_EQ(r.status, 303);
  EXPECT_EQ(r.Header("Location"), "/console/login");
  EXPECT_THAT(r.Header("Content-Security-Policy"), HasSubstr("default-src 'none'"));
  EXPECT_THAT(r.Header("Content-Security-Policy"), HasSubstr("frame-ancestors 'none'"));
  EXPECT_EQ(r.Header("X-Content-Type-Options"), "nosniff");
  EXPECT_EQ(r.Header("Cache-Control"), "no-store");
  // A made-up session cookie is no session.
  EXPECT_EQ(Get("/console/records", "idem_console=" + std::string(64, 'a')).status, 303);
}

TEST_F(ConsoleTest, SignsInWithTheAdminsTokenOnlyAndOutWithTheFormsToken) {
  HttpResponse form = Get("/console/login");
  ASSERT_EQ(form.status, 200);
  const std::string login = CookieOf(form, "idem_console_login");
  ASSERT_FALSE(login.empty());
  EXPECT_THAT(form.Header("Set-Cookie"), HasSubstr("HttpOnly; SameSite=Strict"));
  const std::string csrf = login.substr(login.find('=') + 1);
  // A wrong token, a tenant's token, another admin's token: refused alike.
  for (std::string_view token : {"wrong", "tok-a", "support-token"}) {
    HttpResponse r = Post("/console/login", "csrf=" + csrf + "&name=ops&token=" + std::string(token), login);
    EXPECT_EQ(r.status, 401) << token;
    EXPECT_EQ(CookieOf(r, "idem_console"), "");
    EXPECT_THAT(r.body, HasSubstr("Unknown admin, or a wrong token."));
  }
  // Without the form's token (a login posted from another site): refused.
  EXPECT_EQ(Post("/console/login", "name=ops&token=ops-token", login).status, 403);
  EXPECT_EQ(Post("/console/login", "csrf=" + csrf + "&name=ops&token=ops-token", "").status, 403);

  const std::string session = SignIn("ops", kOpsToken);
  ASSERT_THAT(session, HasSubstr("idem_console="));
  HttpResponse page = Get("/console/records", session);
  ASSERT_EQ(page.status, 200);
  const std::string page_csrf = CsrfOf(page);
  ASSERT_EQ(page_csrf.size(), 64u);
  // Logging out needs the session's CSRF token.
  EXPECT_EQ(Post("/console/logout", "", session).status, 403);
  EXPECT_EQ(Post("/console/logout", "csrf=" + std::string(64, '0'), session).status, 403);
  EXPECT_EQ(Get("/console/records", session).status, 200);
  EXPECT_EQ(Post("/console/logout", "csrf=" + page_csrf, session).status, 303);
  EXPECT_EQ(Get("/console/records", session).status, 303);
}

TEST_F(ConsoleTest, SessionsEndWhenIdle) {
  const std::string session = SignIn("ops", kOpsToken);
  clock_.Advance(absl::Minutes(29));
  EXPECT_EQ(Get("/console/records", session).status, 200);
  clock_.Advance(absl::Minutes(31));
  EXPECT_EQ(Get("/console/records", session).status, 303);
}

TEST_F(ConsoleTest, ShowsAHostileKeyAndResultAsText) {
  const std::string key = "<script>alert(\"k\")</script>'\xFF";
  Claim("acme", key, R"({"html":"<img src=x onerror=alert(1)>","n":1})");
  const std::string session = SignIn("ops", kOpsToken);
  HttpResponse list = Get("/console/records?tenant=acme&key=" + UrlEncode(key), session);
  ASSERT_EQ(list.status, 200) << list.body;
  EXPECT_THAT(list.body, Not(HasSubstr("<script>alert")));
  EXPECT_THAT(list.body, HasSubstr("&lt;script&gt;alert(&quot;k&quot;)&lt;/script&gt;&#39;\xEF\xBF\xBD"));
  HttpResponse one = Get("/console/record?tenant=acme&key=" + UrlEncode(key), session);
  ASSERT_EQ(one.status, 200) << one.body;
  EXPECT_THAT(one.body, Not(HasSubstr("<img")));
  EXPECT_THAT(one.body, HasSubstr("&lt;img src=x onerror=alert(1)&gt;"));
  EXPECT_THAT(one.body, HasSubstr("SUCCEEDED"));
  EXPECT_THAT(one.body, HasSubstr("no (the record is live)"));
}

TEST_F(ConsoleTest, FindsByExactKeyPrefixAndState) {
  Claim("acme", "order-1", R"({"ok":true})");
  Claim("acme", "order-2");
  Claim("acme", "other-1");
  Claim("globex", "order-1");
  const std::string session = SignIn("ops", kOpsToken);
  // Exact, in every tenant.
  HttpResponse exact = Get("/console/records?key=order-1", session);
  EXPECT_THAT(exact.body, HasSubstr("key=order-1\">order-1</a></td><td class=\"state-SUCCEEDED\""));
  EXPECT_THAT(exact.body, HasSubstr("<td>globex</td>"));
  // A prefix needs a tenant; within one it finds the prefix's keys only.
  EXPECT_EQ(Get("/console/records?key=order&match=prefix", session).status, 400);
  HttpResponse prefix = Get("/console/records?tenant=acme&key=order&match=prefix", session);
  EXPECT_THAT(prefix.body, HasSubstr(">order-1<"));
  EXPECT_THAT(prefix.body, HasSubstr(">order-2<"));
  EXPECT_THAT(prefix.body, Not(HasSubstr(">other-1<")));
  HttpResponse processing = Get("/console/records?tenant=acme&state=PROCESSING", session);
  EXPECT_THAT(processing.body, HasSubstr(">order-2<"));
  EXPECT_THAT(processing.body, HasSubstr(">other-1<"));
  EXPECT_THAT(processing.body, Not(HasSubstr(">order-1<")));
  // Bad input is named.
  HttpResponse bad = Get("/console/records?tenant=acme&older_than=soon", session);
  EXPECT_EQ(bad.status, 400);
  EXPECT_THAT(bad.body, HasSubstr("older than &#39;soon&#39; is not a duration"));
  EXPECT_EQ(Get("/console/records?tenant=initech", session).status, 400);
  EXPECT_EQ(Get("/console/record?tenant=acme&key=nope", session).status, 404);
}

TEST_F(ConsoleTest, AnAdminHeldToATenantSeesOnlyItsRecords) {
  Claim("acme", "k-acme");
  Claim("globex", "k-globex");
  const std::string session = SignIn("support", kSupportToken);
  HttpResponse all = Get("/console/records?tenant=globex&state=PROCESSING", session);
  EXPECT_THAT(all.body, HasSubstr(">k-acme<"));
  EXPECT_THAT(all.body, Not(HasSubstr("k-globex")));
  EXPECT_EQ(Get("/console/record?tenant=globex&key=k-globex", session).status, 404);
  EXPECT_EQ(Get("/console/record?tenant=acme&key=k-acme", session).status, 200);
}

TEST_F(ConsoleTest, NeverWritesARecordAndRefusesOtherMethods) {
  const std::string session = SignIn("ops", kOpsToken);
  HttpRequest put{.method = "PUT", .target = "/console/records", .cookie = session};
  EXPECT_EQ(api_.Handle(put).response.status, 405);
  HttpResponse page = Get("/console/records", session);
  EXPECT_EQ(Post("/console/records", "csrf=" + CsrfOf(page), session).status, 404);
}

class ConsoleSqlTest : public ConsoleTest {
 protected:
  ConsoleSqlTest() : ConsoleTest("sqlite") {}

  // Step 1 succeeds and cannot be undone; step 2 fails for good: a person must act.
  OperationState NeedsAPerson(const std::string& biz_key) {
    StepRunner runner(*store_, StepRunnerOptions{.clock = &clock_, .wait_for_retries = false});
    EXPECT_OK(runner.Register(testing::NeedsAPerson("test.undo")));
    absl::StatusOr<OperationState> op = runner.Run({.type = "test.undo", .biz_key = biz_key, .input = "{}"});
    EXPECT_OK(op);
    return op.ok() ? *op : OperationState{};
  }
};

TEST_F(ConsoleSqlTest, ShowsWhatIsStuckAndSettlesAnOperationAsTheCliDoes) {
  ASSERT_EQ(NeedsAPerson("K-manual").status, OperationStatus::kCompensationRequired);
  Claim("acme", "lapsed-1");  // its 30 s lease will run out
  clock_.Advance(absl::Minutes(2));
  Claim("acme", "live-1");
  const std::string session = SignIn("ops", kOpsToken);
  HttpResponse page = Get("/console/stuck", session);
  ASSERT_EQ(page.status, 200) << page.body;
  EXPECT_THAT(page.body, HasSubstr(">lapsed-1<"));
  EXPECT_THAT(page.body, Not(HasSubstr(">live-1<")));
  EXPECT_THAT(page.body, HasSubstr("<h3 class=\"key\">K-manual</h3>"));
  EXPECT_THAT(page.body, HasSubstr("compensation required"));
  EXPECT_THAT(page.body, HasSubstr("reservation is locked"));
  // Claims older than a bound, live lease or not.
  EXPECT_THAT(Get("/console/stuck?older_than=1m", session).body, HasSubstr(">lapsed-1<"));

  // Without the session's CSRF token nothing is settled.
  EXPECT_EQ(Post("/console/stuck/resolve", "biz_key=K-manual&note=refunded", session).status, 403);
  const std::string csrf = "csrf=" + CsrfOf(page);
  EXPECT_EQ(Post("/console/stuck/resolve", csrf + "&biz_key=K-manual&note=+", session).status, 400);
  EXPECT_EQ(Post("/console/stuck/resolve", csrf + "&biz_key=K-none&note=x", session).status, 404);
  HttpResponse done =
      Post("/console/stuck/resolve", csrf + "&biz_key=K-manual&note=refunded+by+phone", session);
  ASSERT_EQ(done.status, 303) << done.body;
  EXPECT_EQ(done.Header("Location"), "/console/stuck?resolved=K-manual");
  StepRunner runner(*store_);
  absl::StatusOr<OperationState> op = runner.Get("K-manual");
  ASSERT_OK(op);
  EXPECT_EQ(op->status, OperationStatus::kCompensated);
  EXPECT_THAT(op->last_error, HasSubstr("refunded by phone [ops, in the console]"));
  // Settled once: again is a conflict, named.
  HttpResponse again =
      Post("/console/stuck/resolve", csrf + "&biz_key=K-manual&note=again", session);
  EXPECT_EQ(again.status, 409);
  EXPECT_THAT(Get("/console/stuck", session).body, HasSubstr("id=\"steps-none\""));
}

TEST_F(ConsoleSqlTest, AnAdminHeldToATenantCannotSettleOperations) {
  ASSERT_EQ(NeedsAPerson("K-manual").status, OperationStatus::kCompensationRequired);
  const std::string session = SignIn("support", kSupportToken);
  HttpResponse page = Get("/console/stuck", session);
  EXPECT_THAT(page.body, Not(HasSubstr("K-manual")));
  EXPECT_EQ(Post("/console/stuck/resolve", "csrf=" + CsrfOf(page) + "&biz_key=K-manual&note=x", session)
                .status,
            403);
}

TEST_F(ConsoleSqlTest, ShowsReconRunsAndTicketsAndClosesOneAsTheCliDoes) {
  const int64_t now_us = absl::ToUnixMicros(clock_.Now());
  ASSERT_OK(recon::EnsureTables(*store_));  // as a recon run's first write does
  ASSERT_OK(recon::WriteWatermark(*store_, {.source = "bank", .upto_us = now_us - 3'600'000'000,
                                            .last_success_at_us = now_us - 60'000'000,
                                            .run_id = "run-1"}));
  ASSERT_OK(recon::WriteWatermark(*store_, {.source = "psp", .upto_us = now_us,
                                            .last_success_at_us = now_us - 7'200'000'000,
                                            .run_id = "run-2"}));
  recon::Ticket t{.source = "bank", .key = "ORD-<1>", .cls = "amount_mismatch", .severity = "high",
                  .action = "ticket", .state = "open", .detail = "10.00 vs 12.00 <i>",
                  .run_id = "run-1", .created_at_us = now_us};
  ASSERT_OK(recon::InsertTickets(*store_, {t}).status());
  const std::string id = recon::TicketId("bank", "amount_mismatch", "ORD-<1>");

  const std::string session = SignIn("ops", kOpsToken);
  HttpResponse page = Get("/console/recon", session);
  ASSERT_EQ(page.status, 200) << page.body;
  EXPECT_THAT(page.body, HasSubstr("run-1"));
  // psp's last success is two hours old: late against the default 15m.
  EXPECT_THAT(page.body, HasSubstr("run-2</td><td class=\"late\">late"));
  EXPECT_THAT(page.body, HasSubstr("run-1</td><td class=\"fresh\">no"));
  // One open, found by bank's last run.
  EXPECT_THAT(page.body, HasSubstr("<td>bank</td><td>amount_mismatch</td><td>1</td><td>1</td>"));
  EXPECT_THAT(page.body, HasSubstr("ORD-&lt;1&gt;"));
  EXPECT_THAT(page.body, Not(HasSubstr("<i>")));

  const std::string csrf = "csrf=" + CsrfOf(page);
  EXPECT_EQ(Post("/console/recon/close", "id=" + id + "&note=paid", session).status, 403);
  EXPECT_EQ(Post("/console/recon/close", csrf + "&id=" + id + "&note=", session).status, 400);
  EXPECT_EQ(Post("/console/recon/close", csrf + "&id=000000000000&note=x", session).status, 404);
  HttpResponse done = Post("/console/recon/close", csrf + "&id=" + id + "&note=bank+fixed+it", session);
  ASSERT_EQ(done.status, 303) << done.body;
  absl::StatusOr<std::optional<recon::Ticket>> closed = recon::FindTicket(*store_, id);
  ASSERT_OK(closed);
  ASSERT_TRUE(closed->has_value());
  EXPECT_EQ((*closed)->state, "closed");
  EXPECT_EQ((*closed)->note, "bank fixed it [ops, in the console]");
  EXPECT_EQ(Post("/console/recon/close", csrf + "&id=" + id + "&note=again", session).status, 409);
  // Closed: none open any more, still found by that run.
  EXPECT_THAT(Get("/console/recon", session).body,
              HasSubstr("<td>bank</td><td>amount_mismatch</td><td>0</td><td>1</td>"));
  EXPECT_THAT(Get("/console/recon?all=1", session).body, HasSubstr("bank fixed it"));
}

TEST_F(ConsoleSqlTest, SaysWhenNoReconRunHasRecordedAnything) {
  const std::string session = SignIn("ops", kOpsToken);
  EXPECT_THAT(Get("/console/recon", session).body, HasSubstr("id=\"recon-none\""));
}

TEST_F(ConsoleTest, ChartsTheLastHoursRatesAndShowsUnhealthyKeysWithExamples) {
  auto claim = [&](std::string key, std::string fingerprint) {
    HttpRequest r{.method = "POST", .target = "/v1/claims", .authorization = "Bearer tok-a",
                  .body = R"({"biz_type":"refund","key":")" + key + R"(","fingerprint":")" +
                          fingerprint + R"("})"};
    Reply reply = api_.Handle(r);
    // As the server counts every answer it sends.
    metrics_.CountRequest(reply.route, reply.response.status, reply.outcome, std::chrono::microseconds(100));
    return reply.response.status;
  };
  console_.Sample(clock_.Now());
  EXPECT_EQ(claim("550e8400-e29b-41d4-a716-446655440000", "f1"), 201);  // a random UUID
  EXPECT_EQ(claim("<b>retry-2</b>", "f1"), 201);  // the same request, a new key: regenerated
  EXPECT_EQ(claim("order-9", "f2"), 201);
  EXPECT_EQ(claim("order-9", "f3"), 422);  // one key, two requests: over-coarse
  EXPECT_EQ(claim("order-9", "f2"), 409);  // in progress
  clock_.Advance(absl::Minutes(1));
  console_.Sample(clock_.Now());

  const std::string session = SignIn("ops", kOpsToken);
  HttpResponse page = Get("/console/health", session);
  ASSERT_EQ(page.status, 200) << page.body;
  // Per minute over the last minute: five claims, one 409, one 422.
  EXPECT_THAT(page.body, HasSubstr("claims: <strong class=\"last\">5</strong> in the last minute"));
  EXPECT_THAT(page.body, HasSubstr("409 conflicts: <strong class=\"last\">1</strong> in the last minute"));
  EXPECT_THAT(page.body,
              HasSubstr("422 fingerprint mismatches: <strong class=\"last\">1</strong> in the last minute"));
  EXPECT_THAT(page.body, HasSubstr("<circle"));  // one minute so far
  EXPECT_THAT(page.body, HasSubstr("<td>acme</td><td>refund</td><td>1</td><td>1</td><td>1</td><td>1</td>"));
  EXPECT_THAT(page.body, HasSubstr("&lt;b&gt;retry-2&lt;/b&gt;</a></td><td class=\"finding\">regenerated"));
  EXPECT_THAT(page.body, HasSubstr("446655440000</a></td><td class=\"finding\">uuid"));
  EXPECT_THAT(page.body, HasSubstr(">order-9</a></td><td>2</td><td>1</td>"));
  EXPECT_THAT(page.body, Not(HasSubstr("<b>")));
  clock_.Advance(absl::Minutes(1));
  console_.Sample(clock_.Now());
  page = Get("/console/health", session);
  EXPECT_THAT(page.body, HasSubstr("claims: <strong class=\"last\">0</strong> in the last minute (at most 5/min)"));
  EXPECT_THAT(page.body, HasSubstr("<polyline"));
  // Samples older than the hour are dropped.
  for (int i = 0; i < 70; ++i) {
    clock_.Advance(absl::Minutes(1));
    console_.Sample(clock_.Now());
  }
  EXPECT_THAT(Get("/console/health", SignIn("ops", kOpsToken)).body,  // the session idled out
              HasSubstr("claims: <strong class=\"last\">0</strong> in the last minute (at most 1/min)"));

  // Between samples, the page counts what happened since the last one too.
  EXPECT_EQ(claim("order-10", "f4"), 201);
  clock_.Advance(absl::Seconds(5));
  EXPECT_THAT(Get("/console/health", SignIn("ops", kOpsToken)).body,
              HasSubstr("claims: <strong class=\"last\">1</strong> in the last minute"));

  // An admin held to another tenant sees none of acme's keys.
  Console other(*store_, ConsoleOptions{.admins = {{.name = "g", .token_sha256 = Fingerprint("g"),
                                                    .tenant = "globex"}},
                                        .tenants = {"acme", "globex"},
                                        .sample_every = absl::ZeroDuration(),
                                        .clock = &clock_});
  Api api(guard_, *store_, metrics_, ApiOptions{.tenants = {Tenant::WithToken("globex", "tok-g")},
                                                .console = &other});
  HttpResponse form = api.Handle(HttpRequest{.method = "GET", .target = "/console/login"}).response;
  const std::string login = CookieOf(form, "idem_console_login");
  HttpRequest post{.method = "POST", .target = "/console/login",
                   .body = "csrf=" + login.substr(login.find('=') + 1) + "&name=g&token=g"};
  post.cookie = login;
  const std::string g = CookieOf(api.Handle(post).response, "idem_console");
  HttpRequest health{.method = "GET", .target = "/console/health"};
  health.cookie = g;
  HttpResponse theirs = api.Handle(health).response;
  ASSERT_EQ(theirs.status, 200);
  EXPECT_THAT(theirs.body, Not(HasSubstr("order-9")));
  EXPECT_THAT(theirs.body, HasSubstr("id=\"examples-none\""));
}

TEST_F(ConsoleTest, SaysAStoreWithoutSqlKeepsNoStepOperations) {
  const std::string session = SignIn("ops", kOpsToken);
  EXPECT_THAT(Get("/console/stuck", session).body,
              HasSubstr("keeps no step operations: they live in a SQL store"));
}

TEST(ConsoleOff, ConsolePathsAreUnknownWithoutAConsole) {
  std::unique_ptr<Store> store = *OpenStore("memory://");
  Guard guard(*store);
  Metrics metrics;
  Api api(guard, *store, metrics, ApiOptions{.tenants = {Tenant::WithToken("acme", "tok-a")}});
  EXPECT_EQ(api.Handle(HttpRequest{.method = "GET", .target = "/console/login"}).response.status, 404);
}

}  // namespace
}  // namespace idem::http
