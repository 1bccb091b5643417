// Browser: headless Chromium driven over the DevTools protocol, for browser tests of
// pages idem serves (the web console: log in, click links, submit forms, read cookies,
// take screenshots). Construct one with the chromium path CMake found (IDEM_CHROMIUM)
// and a fresh profile directory; it starts chromium with --remote-debugging-pipe,
// opens one tab and drives it until destroyed.
//
//   Browser b(IDEM_CHROMIUM, dir.file("profile"));
//   ASSERT_TRUE(b.ok()) << b.error();
//   ASSERT_EQ(b.Navigate(base + "/console/login"), "");
//   b.Fill("#user", "ops");
//   ASSERT_EQ(b.ClickAndWait("button[type=submit]"), "");
//   EXPECT_EQ(b.Evaluate("document.title"), "Records");
//
// Failures: Navigate() and ClickAndWait() return "" on success or the error text, so
// a test asserts they return "" (the message names what failed); so do Send() and
// Evaluate() when given an `error` to fill. The other calls report a failure themselves
// (a non-fatal GoogleTest failure naming the call, e.g. the expression and the
// exception it threw, or that no element matched a selector) and return an empty value
// (null JSON, "", false). WaitFor() timing out and Exists() finding nothing are answers,
// not failures. Once chromium has exited every call fails with error(), which ends with
// the tail of chromium's stderr.
//
// Every call blocks until chromium answers, at most timeout() (15 s by default) per
// protocol command. Constructing a Browser sets SIGPIPE to SIG_IGN if it was SIG_DFL
// (a write to a chromium that died must fail, not kill the test).
//
// Thread safety: none; one Browser is used by one thread at a time.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>

#include "nlohmann/json.hpp"

namespace idem::testing {

// The directory for a test's artifacts (screenshots, page dumps) that outlive its
// temporary directory: $IDEM_TEST_ARTIFACTS/<test_name>, or ./test-artifacts/<test_name>
// when IDEM_TEST_ARTIFACTS is unset. Created if missing.
std::string ArtifactDir(const std::string& test_name);

class Browser {
 public:
  // Starts `chromium_path` (Debian's /usr/bin/chromium) headless with its profile in
  // `profile_dir` (created if missing; chromium's stderr goes to
  // `profile_dir`/chromium.stderr) and opens a tab on about:blank. Blocks until the
  // tab is ready; ok() tells whether it is, error() why not (an empty path says to
  // run scripts/deps.sh).
  Browser(std::string chromium_path, std::string profile_dir);
  // Closes chromium (Browser.close, then SIGTERM, then SIGKILL to its process group)
  // and waits for it.
  ~Browser();
  Browser(const Browser&) = delete;
  Browser& operator=(const Browser&) = delete;

  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }

  // The longest wait for one protocol reply or one page load.
  std::chrono::milliseconds timeout() const { return timeout_; }
  void set_timeout(std::chrono::milliseconds timeout) { timeout_ = timeout; }

  // Loads `url` in the tab and waits for its load event. Returns "" on success, else
  // what failed (e.g. "net::ERR_CONNECTION_REFUSED"). An HTTP error status is a
  // loaded page, not a failure. A same-document URL (#fragment) returns at once.
  [[nodiscard]] std::string Navigate(const std::string& url);

  // Clicks the first element matching `css_selector` (scrolled into view, then its
  // click(): a link follows, a submit button submits its form with its name=value).
  // A DOM click, not a mouse event: an element under an overlay is clicked all the
  // same. Returns false (and fails the test) when nothing matches.
  bool Click(const std::string& css_selector);
  // Click(), then waits for the tab's next document to load (a link followed, a
  // form posted and redirected). Returns "" on success, else what failed: no match,
  // no new document within timeout(), or chromium's error page.
  [[nodiscard]] std::string ClickAndWait(const std::string& css_selector);

  // Sets the value of the first element matching `css_selector` (input, textarea,
  // select) and fires its input and change events. Returns false (and fails the
  // test) when nothing matches.
  bool Fill(const std::string& css_selector, const std::string& value);

  // The value of the JavaScript `expression` in the page (a promise is awaited), as
  // JSON: EXPECT_EQ(b.Evaluate("document.title"), "Records"). undefined is null.
  // A thrown exception fails the test and returns null; with `error` given it is
  // stored there instead ("" on success) and the test does not fail.
  nlohmann::json Evaluate(const std::string& expression, std::string* error = nullptr);

  // The innerText of the first element matching `css_selector`; "" (and a test
  // failure) when nothing matches.
  std::string Text(const std::string& css_selector);

  // Whether the first element matching `css_selector` exists (no failure if not).
  bool Exists(const std::string& css_selector);

  // Evaluates `js_condition` every ~50 ms until it is truthy or `timeout` passes.
  // Returns whether it held; a condition that throws (an element not there yet)
  // counts as false. The caller asserts, saying what did not happen.
  bool WaitFor(const std::string& js_condition,
               std::chrono::milliseconds timeout = std::chrono::seconds(15));

  // The tab's location.href ("" and a test failure if it cannot be read).
  std::string Url();

  // The cookies chromium would send to the current URL (Network.getCookies), HttpOnly
  // ones included: a JSON array of {name, value, domain, path, expires, httpOnly,
  // secure, session, sameSite ("Strict"|"Lax"|"None", absent if unset), ...}.
  nlohmann::json Cookies();

  // Writes a PNG of the whole page (beyond the 1200x900 viewport) to `png_path`.
  // Returns false (and fails the test) if it could not.
  bool Screenshot(const std::string& png_path);

  // Sends one DevTools command to the tab (or to the browser when `to_browser`) and
  // returns its "result". On failure returns null and sets `error` (never empty then)
  // to "Method: message". For what the calls above do not cover.
  nlohmann::json Send(const std::string& method, const nlohmann::json& params, std::string* error,
                      bool to_browser = false);

 private:
  // Reads what chromium wrote within `wait`: each message is an event (queued) or a
  // reply (stored by id). Returns false once the pipe is closed (error_ is set).
  bool Pump(std::chrono::milliseconds wait);
  // Removes and returns the first queued event for which `match` holds, reading until
  // `deadline`; null if none came.
  nlohmann::json WaitForEvent(const std::function<bool(const nlohmann::json&)>& match,
                              std::chrono::steady_clock::time_point deadline);
  // Waits for the "load" lifecycle event of the main frame's document `loader_id`
  // (or of any document but `not_loader_id`). Returns "" or what failed.
  std::string WaitForLoad(const std::string& loader_id, const std::string& not_loader_id,
                          const std::string& what);
  // Evaluates an expression about the first element matching `css_selector`;
  // `body` uses `e` (the element, known to exist).
  nlohmann::json OnElement(const std::string& css_selector, const std::string& body,
                           const char* call);
  void Died(const std::string& why);

  std::string chromium_path_;
  std::string profile_dir_;
  std::string error_;
  std::chrono::milliseconds timeout_{std::chrono::seconds(15)};
  pid_t pid_ = -1;
  int to_browser_ = -1;    // chromium reads it as fd 3
  int from_browser_ = -1;  // chromium writes it as fd 4
  std::string read_buffer_;
  int next_id_ = 1;
  std::deque<nlohmann::json> events_;
  uint64_t dropped_events_ = 0;  // events dropped from the front of events_ (kMaxQueuedEvents)
  std::deque<nlohmann::json> replies_;
  std::string session_id_;
  std::string frame_id_;
};

}  // namespace idem::testing
