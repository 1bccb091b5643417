// The operator console in headless Chromium, against a real `idem serve --console`
// on a SQLite store that also holds a step operation needing a person and a recon
// ticket: sign in, find a record by key and open it, see a stuck claim and the
// operation, settle it with a note and see `idem stuck` agree, close the ticket and
// see `idem recon tickets show` agree. Hostile keys and results render as text, a
// POST without the CSRF token changes nothing, and a screenshot of each page is kept
// in $IDEM_TEST_ARTIFACTS/<test>/ (build/test-artifacts).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "http/client.h"
#include "idem/fingerprint.h"
#include "idem/idem.h"
#include "idem/steps.h"
#include "recon/tables.h"
#include "testing/browser.h"
#include "testing/idem_process.h"
#include "testing/status_matchers.h"
#include "testing/step_types.h"
#include "testing/temp_dir.h"

namespace idem {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing::Browser;

constexpr char kAdminToken[] = "console-admin-token";
constexpr char kHostileKey[] = "<script>window.pwned=1</script>\"'&";
constexpr char kBadUtf8Key[] = "bad-\xFF\xFE-key";

class ConsoleBrowserTest : public ::testing::Test {
 protected:
  void SetUp() override {
    url_ = "sqlite://" + dir_.file("idem.db");
    Seed();
    serve_ = std::make_unique<testing::ServeProcess>(dir_.file("serve.err"));
    const std::string line = serve_->Start(
        {"--listen", "127.0.0.1:0", "--store", url_, "--tenant", "acme:tok-a", "--console",
         "--console-admin", "ops:sha256:" + Fingerprint(kAdminToken)});
    ASSERT_THAT(line, HasSubstr("listening on")) << serve_->stderr_text();
    base_ = "http://127.0.0.1:" + std::to_string(serve_->port());
    // A claim whose holder stops: its 100 ms lease runs out.
    http::testing::ClientResponse r = http::testing::Fetch(
        serve_->port(), "POST", "/v1/claims",
        R"({"biz_type":"refund","key":"lapsed-7","lease_ms":100})", "tok-a");
    ASSERT_EQ(r.status, 201) << r.body;
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    artifacts_ = testing::ArtifactDir(
        ::testing::UnitTest::GetInstance()->current_test_info()->test_suite_name() +
        std::string(".") + ::testing::UnitTest::GetInstance()->current_test_info()->name());
  }

  // What the store holds before the server starts: a finished record with a hostile
  // key and result, one whose key is not UTF-8, an operation that needs a person
  // and a recon ticket with its source's watermark.
  void Seed() {
    std::unique_ptr<Store> store = *OpenStore(url_);
    Guard guard(*store);
    for (const std::string& key : {std::string(kHostileKey), std::string(kBadUtf8Key)}) {
      Request req{.tenant = "acme", .biz_type = "refund", .key = key};
      absl::StatusOr<Result> claim = guard.Claim(req);
      ASSERT_OK(claim);
      ASSERT_OK(guard.Complete(req, claim->token,
                               R"({"note":"<img src=x onerror=\"window.pwned=2\">","bytes":")"
                               "\xC3\x28" R"("})"));
    }
    StepRunner runner(*store, StepRunnerOptions{.wait_for_retries = false});
    ASSERT_OK(runner.Register(testing::NeedsAPerson("refund.undo")));
    absl::StatusOr<OperationState> op =
        runner.Run({.type = "refund.undo", .biz_key = "R-manual", .input = "{}"});
    ASSERT_OK(op);
    ASSERT_EQ(op->status, OperationStatus::kCompensationRequired);
    const int64_t now_us = absl::ToUnixMicros(absl::Now());
    ASSERT_OK(recon::EnsureTables(*store));
    ASSERT_OK(recon::WriteWatermark(
        *store, {.source = "bank", .upto_us = now_us, .last_success_at_us = now_us, .run_id = "run-1"}));
    ASSERT_OK(recon::InsertTickets(*store, {{.source = "bank", .key = "ORD-9", .cls = "amount_mismatch",
                                             .severity = "high", .action = "ticket", .state = "open",
                                             .detail = "10.00 against 12.00", .run_id = "run-1",
                                             .created_at_us = now_us}})
                  .status());
    ticket_ = recon::TicketId("bank", "amount_mismatch", "ORD-9");
  }

  void Shot(Browser& b, const std::string& name) {
    EXPECT_TRUE(b.Screenshot(artifacts_ + "/" + name + ".png")) << name;
  }

  testing::TempDir dir_;
  std::string url_, base_, artifacts_, ticket_;
  std::unique_ptr<testing::ServeProcess> serve_;
};

TEST_F(ConsoleBrowserTest, AnOperatorFindsSettlesAndClosesWhatNeedsAPerson) {
  Browser b(IDEM_CHROMIUM, dir_.file("profile"));
  ASSERT_TRUE(b.ok()) << b.error();

  // Signed out, every page leads to the login form; a wrong token is refused.
  ASSERT_EQ(b.Navigate(base_ + "/console/records"), "");
  EXPECT_EQ(b.Evaluate("location.pathname"), "/console/login");
  b.Fill("input[name=name]", "ops");
  b.Fill("input[name=token]", "wrong");
  ASSERT_EQ(b.ClickAndWait("#login button"), "");
  EXPECT_THAT(b.Text("#error"), HasSubstr("Unknown admin, or a wrong token."));
  Shot(b, "1-login-refused");
  b.Fill("input[name=name]", "ops");
  b.Fill("input[name=token]", kAdminToken);
  ASSERT_EQ(b.ClickAndWait("#login button"), "");
  EXPECT_EQ(b.Evaluate("location.pathname"), "/console/records");
  // The session cookie is out of the page's scripts' reach and stays on this site.
  bool httponly_strict = false;
  for (const auto& c : b.Cookies()) {
    if (c["name"] == "idem_console") httponly_strict = c["httpOnly"] == true && c["sameSite"] == "Strict";
  }
  EXPECT_TRUE(httponly_strict) << b.Cookies().dump();

  // Find a record by its key and open it: the hostile key and result are text.
  b.Fill("#key", kHostileKey);
  ASSERT_EQ(b.ClickAndWait("#find"), "");
  Shot(b, "2-records");
  EXPECT_THAT(b.Text("#records"), HasSubstr(kHostileKey));
  ASSERT_EQ(b.ClickAndWait("#records a"), "");
  Shot(b, "3-record");
  EXPECT_EQ(b.Text("#f-key"), kHostileKey);
  EXPECT_EQ(b.Text("#f-state"), "SUCCEEDED");
  EXPECT_THAT(b.Text("#result"), HasSubstr(R"(<img src=x onerror=\"window.pwned=2\">)"));
  EXPECT_THAT(b.Text("#result"), HasSubstr("\xEF\xBF\xBD"));  // the invalid byte, shown as U+FFFD
  EXPECT_FALSE(b.Exists("#result img"));
  // A key that is not UTF-8 shows its bytes as U+FFFD.
  ASSERT_EQ(b.Navigate(base_ + "/console/records?tenant=acme&key=bad-&match=prefix"), "");
  EXPECT_THAT(b.Text("#records"), HasSubstr("bad-\xEF\xBF\xBD\xEF\xBF\xBD-key"));
  EXPECT_EQ(b.Evaluate("typeof window.pwned"), "undefined");

  // What is stuck: the lapsed claim and the operation that needs a person.
  ASSERT_EQ(b.ClickAndWait("#nav-stuck"), "");
  Shot(b, "4-stuck");
  EXPECT_THAT(b.Text("#lapsed"), HasSubstr("lapsed-7"));
  EXPECT_THAT(b.Text("#operations"), HasSubstr("R-manual"));
  EXPECT_THAT(b.Text("#operations .why"), HasSubstr("compensation required"));
  testing::RunResult cli = testing::RunIdem({"stuck", "--store", url_}, dir_.path());
  ASSERT_EQ(cli.exit_code, 0) << cli.err;
  EXPECT_THAT(cli.out, HasSubstr("R-manual  refund.undo  COMPENSATION_REQUIRED  (compensation required)"));

  // The Content-Security-Policy lets no script of the page reach the network.
  std::string blocked;
  b.Evaluate("fetch('/console/health').then(r => r.status)", &blocked);
  EXPECT_THAT(blocked, HasSubstr("Failed to fetch"));
  // A form posted without the session's CSRF token (as another site's would be)
  // changes nothing.
  b.Evaluate(
      "(() => { const f = document.createElement('form'); f.method = 'post';"
      " f.action = '/console/stuck/resolve';"
      " for (const [n, v] of [['biz_key', 'R-manual'], ['note', 'forged']]) {"
      "   const i = document.createElement('input'); i.name = n; i.value = v; f.appendChild(i); }"
      " const s = document.createElement('button'); s.id = 'forged'; f.appendChild(s);"
      " document.body.appendChild(f); return true; })()");
  ASSERT_EQ(b.ClickAndWait("#forged"), "");
  EXPECT_THAT(b.Text("main"), HasSubstr("did not carry this session's CSRF token"));
  cli = testing::RunIdem({"stuck", "--store", url_}, dir_.path());
  EXPECT_THAT(cli.out, HasSubstr("R-manual  refund.undo  COMPENSATION_REQUIRED"));
  ASSERT_EQ(b.ClickAndWait("#nav-stuck"), "");

  b.Fill(".resolve textarea[name=note]", "refunded by phone, ticket 4411");
  ASSERT_EQ(b.ClickAndWait(".resolve button"), "");
  Shot(b, "5-stuck-resolved");
  EXPECT_THAT(b.Text("#resolved"), HasSubstr("R-manual"));
  cli = testing::RunIdem({"stuck", "--store", url_, "--json"}, dir_.path());
  ASSERT_EQ(cli.exit_code, 0) << cli.err;
  EXPECT_THAT(cli.out, Not(HasSubstr("R-manual")));  // settled: no longer listed
  {
    std::unique_ptr<Store> store = *OpenStore(url_);
    StepRunner runner(*store);
    absl::StatusOr<OperationState> op = runner.Get("R-manual");
    ASSERT_OK(op);
    EXPECT_EQ(op->status, OperationStatus::kCompensated);
    EXPECT_THAT(op->last_error, HasSubstr("refunded by phone, ticket 4411 [ops, in the console]"));
  }

  // Recon: the run and the ticket; closed with a note, as the CLI then shows it.
  ASSERT_EQ(b.ClickAndWait("#nav-recon"), "");
  Shot(b, "6-recon");
  EXPECT_THAT(b.Text("#runs"), HasSubstr("run-1"));
  EXPECT_THAT(b.Text("#tickets"), HasSubstr("ORD-9"));
  b.Fill("#ticket-" + ticket_ + " textarea", "the bank corrected the amount");
  ASSERT_EQ(b.ClickAndWait("#ticket-" + ticket_ + " button"), "");
  Shot(b, "7-recon-closed");
  EXPECT_THAT(b.Text("#closed"), HasSubstr(ticket_));
  cli = testing::RunIdem({"recon", "tickets", "show", ticket_, "--store", url_}, dir_.path());
  ASSERT_EQ(cli.exit_code, 0) << cli.err;
  EXPECT_THAT(cli.out, HasSubstr("closed"));
  EXPECT_THAT(cli.out, HasSubstr("the bank corrected the amount [ops, in the console]"));

  ASSERT_EQ(b.ClickAndWait("#nav-health"), "");
  Shot(b, "8-health");
  EXPECT_TRUE(b.Exists("#chart-0 svg"));
  EXPECT_THAT(b.Text("#chart-0 figcaption"), HasSubstr("claims: 1 in the last minute"));  // lapsed-7

  ASSERT_EQ(b.ClickAndWait("#logout"), "");
  EXPECT_EQ(b.Evaluate("location.pathname"), "/console/login");
  ASSERT_EQ(b.Navigate(base_ + "/console/stuck"), "");
  EXPECT_EQ(b.Evaluate("location.pathname"), "/console/login");
}

}  // namespace
}  // namespace idem
