// Console: the operator console `idem serve --console` serves under /console/ —
// server-rendered HTML pages for people (operators, support, finance), apart from
// the JSON API and its tenants' bearer tokens:
//
//   GET  /console/login            the login form (an admin's name and token)
//   POST /console/login            starts a session: an HttpOnly, SameSite=Strict cookie
//   POST /console/logout           ends it
//   GET  /console/records          find records: tenant, biz_type, key (exact or
//                                  prefix), state, age; a page of 50 at a time
//   GET  /console/record           one record: ?tenant=&key=
//   GET  /console/stuck            claims past their lease or PROCESSING too long, and
//                                  the step operations that need a person
//   POST /console/stuck/resolve    settles an operation that needs compensation by hand,
//                                  as `idem stuck --resolve` does (console_stuck.cc)
//   GET  /console/recon            reconciliation: each source's last run, late or not,
//                                  open tickets per class, the tickets
//   POST /console/recon/close      closes a ticket with a note, as `idem recon tickets
//                                  close` does (console_recon.cc)
//   GET  /console/health           the last hour's claims, replays, 409s, 422s and 503s
//                                  per minute, and key health with examples
//                                  (console_health.cc)
//   GET  /console/static/console.css
//
// Admins are configured apart from tenants (ConsoleAdmin: a name and the SHA-256 of
// its token, as `idem token new` makes them), each optionally held to one tenant,
// whose records are then the only ones it sees. Every page is escaped text only
// (console_html.h), under a Content-Security-Policy that loads nothing from
// elsewhere and runs no inline script; every POST carries the session's CSRF token
// (the login form a token of its own, in a cookie of its own), or is refused 403.
// The console reads records and never writes one: the only writes it makes are a
// person's settlement of a step operation.
//
// Thread safety: safe for concurrent use; Answer blocks on the store (servers call
// it from their worker pool, as the API's other reads).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <thread>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "http/api/key_health.h"
#include "http/server/metrics.h"
#include "http/types.h"
#include "idem/clock.h"
#include "idem/steps.h"
#include "idem/store.h"

namespace idem::http {

struct ConsoleAdmin {
  std::string name;
  std::string token_sha256;  // 64 lowercase hex digits
  std::string tenant;        // "": sees every tenant; else only this one
};

struct ConsoleOptions {
  std::vector<ConsoleAdmin> admins;
  // The server's tenants, offered in the search form of an admin held to none.
  std::vector<std::string> tenants;
  absl::Duration idle_timeout = absl::Minutes(30);  // a session unused this long ends
  absl::Duration max_session = absl::Hours(12);     // and any session after this long
  // At most this many sessions at once (each a few hundred bytes); a login past it
  // ends the session used least recently.
  size_t max_sessions = 1000;
  // How often the rates the health page charts are sampled from the server's
  // counters, by a thread of the console's own; 0: no thread (tests call Sample).
  absl::Duration sample_every = absl::Seconds(10);
  const Clock* clock = Clock::Real();  // not owned
};

struct ConsoleAnswer {
  HttpResponse response;
  std::string who;  // "console:NAME" once the request is an admin's, for the access log
};

class Console {
 public:
  // `store` must outlive the Console.
  Console(Store& store, ConsoleOptions options);
  ~Console();

  Console(const Console&) = delete;
  Console& operator=(const Console&) = delete;

  // The Api the console is given to (ApiOptions::console) hands it its key-health
  // tracker and counters, once, before serving, and the sampling starts. Both must
  // outlive the Console.
  void Attach(const KeyHealthTracker& key_health, const Metrics& metrics);

  // Samples the counters the health page charts (the sampling thread's step; tests
  // call it with their own times).
  void Sample(absl::Time now);

  // How long one page reads records for, and how many it asks the store for at once.
  static constexpr absl::Duration kScanBudget = absl::Milliseconds(120);
  static constexpr int kScanChunk = 2000;

  static constexpr size_t kRateSeries = 5;  // claims, replays, 409s, 422s, 503s
  static constexpr absl::Duration kRateWindow = absl::Hours(1);

  // Answers one request under /console (`path` without its query; `method` with
  // HEAD as GET). Blocks on the store; never throws.
  ConsoleAnswer Answer(const HttpRequest& request, std::string_view method, std::string_view path,
                       std::string_view query);

  // The bodies the console reads are forms of a few fields: larger ones are 413.
  static constexpr size_t kMaxBodyBytes = 16 << 10;

 private:
  struct Session {
    const ConsoleAdmin* admin = nullptr;
    std::string csrf;  // the token every POST of this session carries
    absl::Time started, used;
  };
  // What a request's session cookie names, copied out under the lock.
  struct Caller {
    const ConsoleAdmin* admin = nullptr;
    std::string csrf;
    std::string session;  // the cookie's value
  };

  ConsoleAnswer Login(const HttpRequest& request, std::string_view method);
  ConsoleAnswer Logout(const Caller& caller);
  ConsoleAnswer Records(const Caller& caller, std::string_view query);  // console_records.cc
  ConsoleAnswer OneRecord(const Caller& caller, std::string_view query);  // console_records.cc
  // Visits the records from `from` (its tenant, or every tenant's, after its `after`;
  // its other conditions are ignored) in the store's order, kScanChunk at a time,
  // until `visit` returns true, the store has no more, or kScanBudget has passed.
  // Returns where a later scan goes on (the (tenant, key) it stopped at), or nullopt
  // when the store has no more. *scanned counts the records visited.
  absl::StatusOr<std::optional<std::pair<std::string, std::string>>> Scan(
      RecordQuery from, const std::function<bool(const Record&)>& visit, size_t* scanned);
  ConsoleAnswer Stuck(const Caller& caller, std::string_view query);  // console_stuck.cc
  ConsoleAnswer Resolve(const Caller& caller, const HttpRequest& request);  // console_stuck.cc
  // The step runner over the store, made on first use; null for a store without SQL.
  StepRunner* Runner();
  ConsoleAnswer Health(const Caller& caller);  // console_health.cc
  ConsoleAnswer Recon(const Caller& caller, std::string_view query);  // console_recon.cc
  ConsoleAnswer CloseTicket(const Caller& caller, const HttpRequest& request);  // console_recon.cc

  // The caller the request's session cookie names, its session renewed; admin null
  // when there is none (or it ended).
  Caller CallerOf(const HttpRequest& request);
  const ConsoleAdmin* FindAdmin(std::string_view name, std::string_view token) const;

  Store& store_;
  const ConsoleOptions options_;
  absl::Mutex mu_;
  // By the SHA-256 of the session cookie's value, so memory holds no live cookie.
  absl::flat_hash_map<std::string, Session> sessions_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<StepRunner> runner_ ABSL_GUARDED_BY(mu_);

  struct RateSample {
    absl::Time at;
    std::array<uint64_t, kRateSeries> values{};
  };
  // The counters the health page charts, now. REQUIRES: metrics_ set.
  RateSample Read(absl::Time now) const ABSL_SHARED_LOCKS_REQUIRED(sample_mu_);
  absl::Mutex sample_mu_;
  absl::CondVar sample_cv_;
  bool stopping_ ABSL_GUARDED_BY(sample_mu_) = false;
  const KeyHealthTracker* key_health_ ABSL_GUARDED_BY(sample_mu_) = nullptr;
  const Metrics* metrics_ ABSL_GUARDED_BY(sample_mu_) = nullptr;
  std::deque<RateSample> samples_ ABSL_GUARDED_BY(sample_mu_);  // the last hour's, oldest first
  std::thread sampler_;
};

// The pieces every console page is made of (console.cc), for the page files.
namespace console {

// A whole page: the head (title, stylesheet), the header with the admin's name, the
// navigation and a logout button (when `caller_name` is not empty), then `body`.
std::string Page(std::string_view title, std::string_view caller_name, std::string_view csrf,
                 std::string_view body);
// A response holding `html` with the console's security headers.
HttpResponse HtmlResponse(int status, std::string html);
// 303 See Other to `location` (a path under /console/).
HttpResponse Redirect(std::string_view location);
// A time for people: "2026-12-07 12:01:19.123 UTC", "never" for the infinite future,
// "—" for the infinite past.
std::string When(absl::Time t);
// The link to a record's page, escaped for an attribute.
std::string RecordLink(const Record& r);
// The value of `name` in a parsed form or query string, or "".
std::string Field(const std::map<std::string, std::string, std::less<>>& form,
                  std::string_view name);
// A person's note as a form sent it, without trailing blanks.
std::string Note(std::string note);
// The HTTP status of an action the store refused: 404 kNotFound, 409
// kFailedPrecondition, 400 kInvalidArgument, else 503.
int StatusOf(const absl::Status& status);
// The page of an action that did nothing: `title`, `why`, and a link back.
HttpResponse Refused(int status, std::string_view title, std::string_view caller_name,
                     std::string_view csrf, std::string_view why, std::string_view back_href,
                     std::string_view back_text);

}  // namespace console

}  // namespace idem::http
