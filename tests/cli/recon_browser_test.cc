// The HTML report of `idem recon --report` in a real browser (label browser):
// Debian's chromium, headless, loads the file and the DOM it built has the counts,
// one bar per class and the example rows with their tickets; the page names nothing to fetch (no
// src/href/url(), and its Content-Security-Policy forbids every load). chromium comes
// from scripts/deps.sh (test_pkgs); without it the test fails and says so.
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <regex>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "idem/idem.h"
#include "recon/tables.h"
#include "testing/idem_process.h"
#include "testing/temp_dir.h"

namespace idem::testing {
namespace {

using ::testing::HasSubstr;

std::string Shell(const std::string& command, int* status) {
  std::string out;
  FILE* p = popen(command.c_str(), "r");
  if (p == nullptr) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int w = pclose(p);
  *status = WIFEXITED(w) ? WEXITSTATUS(w) : -1;
  return out;
}

TEST(ReconReport, LoadsInHeadlessChromium) {
  const std::string chromium = IDEM_CHROMIUM;
  ASSERT_FALSE(chromium.empty())
      << "chromium is not installed: the browser test needs Debian's chromium package "
         "(apt-get install chromium; scripts/deps.sh installs it with the test packages)";
  TempDir dir;
  const std::string url = "sqlite://" + dir.file("shop.db");
  {
    absl::StatusOr<std::unique_ptr<Store>> store = OpenStore(url);
    ASSERT_TRUE(store.ok()) << store.status();
    absl::StatusOr<std::unique_ptr<StoreTransaction>> tx = (*store)->Begin();
    ASSERT_TRUE(tx.ok());
    ASSERT_TRUE((*tx)->Exec("CREATE TABLE ledger (k TEXT, a TEXT)").ok());
    ASSERT_TRUE((*tx)
                    ->Exec("INSERT INTO ledger VALUES ('K-1', '1.00'), ('K-2', '2.50'), "
                           "('K-<3>', '3.00')")
                    .ok());
    ASSERT_TRUE((*tx)->Commit().ok());
  }
  std::ofstream(dir.file("bill.csv")) << "id,fee\nK-1,100\nK-2,200\nK-4,400\n";
  RunResult r =
      RunIdemIn(dir.path(),
                {"recon", "--source", "wx", "--statement", "bill.csv", "--map", "key=id,amount=fee",
                 "--upstream-scale", "2", "--ledger", url, "--ledger-query",
                 "SELECT k AS key, a AS amount FROM ledger", "--report", dir.file("report.html")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string html = ReadWholeFile(dir.file("report.html"));
  for (const char* fetch : {"src=", "href=", "url(", "@import", "<script", "<link"}) {
    EXPECT_THAT(html, ::testing::Not(HasSubstr(fetch))) << "the report would fetch: " << fetch;
  }
  EXPECT_THAT(html, HasSubstr("default-src 'none'"));

  int status = -1;
  const std::string dom =
      Shell("'" + chromium +
                "' --headless --no-sandbox --disable-gpu --no-first-run "
                "--user-data-dir='" +
                dir.file("profile") + "' --dump-dom 'file://" + dir.file("report.html") + "' 2>'" +
                dir.file("chromium.err") + "'",
            &status);
  ASSERT_EQ(status, 0) << ReadWholeFile(dir.file("chromium.err"));
  // The DOM chromium built (not the file's text): counts, bars, examples, escaping.
  EXPECT_THAT(dom, HasSubstr("<title>idem recon wx</title>"));
  EXPECT_THAT(dom, ::testing::ContainsRegex("data-class=\"matched\">1<"));
  EXPECT_THAT(dom, ::testing::ContainsRegex("data-class=\"missing_local\">1<"));
  EXPECT_THAT(dom, ::testing::ContainsRegex("data-class=\"missing_upstream\">1<"));
  EXPECT_THAT(dom, ::testing::ContainsRegex("data-class=\"amount_mismatch\">1<"));
  std::regex bar("<rect class=\"bar\"");
  EXPECT_EQ(
      std::distance(std::sregex_iterator(dom.begin(), dom.end(), bar), std::sregex_iterator()), 5);
  EXPECT_THAT(dom, HasSubstr("K-&lt;3&gt;"));  // a key is text, never markup
  EXPECT_THAT(dom, HasSubstr("bill.csv:4"));
  // Each row's ticket, in the store the run used (./idem-recon.db): its id, action
  // and state, as `idem recon tickets list` shows them.
  EXPECT_THAT(
      dom, HasSubstr("<span class=\"ticket\" data-state=\"open\">" +
                     recon::TicketId("wx", "missing_upstream", "K-<3>") + " ticket open</span>"));
}

}  // namespace
}  // namespace idem::testing
