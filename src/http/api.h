// Api: the routes and handlers of the `idem serve` HTTP API, apart from
// any socket so it can be driven directly by tests. The server (server.h) turns Beast
// messages into HttpRequest values, runs Handle() on a worker pool, and writes the
// HttpResponse back. A decided duplicate is answered on the network thread
// (HandleWithoutBlocking), and on a store with non-blocking transactions
// (rocksdb://) a claim, complete or fail is started there and answered once its
// write is durable (HandleAsync), without a worker thread.
//
//   POST /v1/claims                    Guard::Claim   201 acquired | 200 replayed,
//                                                     cached_failure | 409 | 422
//   POST /v1/claims/complete           Guard::Complete
//   POST /v1/claims/fail               Guard::Fail
//   GET  /v1/records/{biz_type}/{key}  Guard::Get (percent-decoded segments); 410 once purged
//   GET  /v1/records?biz_type=&state=&limit=&cursor=
//                                      Store::ListRecords, the caller's tenant only
//   GET  /v1/keys/mismatches           the caller's keys answered 422 fingerprint_mismatch,
//                                      from KeyHealthTracker (memory, since the start)
//   GET  /healthz                      200 while the process serves
//   GET  /readyz                       200 when Store::Ping() is OK and the store takes
//                                      writes (StoreHealth), else 503
//   GET  /metrics                      Prometheus text
//
// Every /v1/ call needs "Authorization: Bearer <token>"; the token names the tenant,
// which becomes Request::tenant, so tenants never see each other's keys. A missing or
// malformed header, or a token no tenant has, is 401 with "WWW-Authenticate: Bearer".
// /healthz, /readyz and /metrics need no token (and ignore one), unless
// ApiOptions::metrics_require_token puts /metrics behind any tenant's token.
//
// A claim with wait_ms > 0 that meets a live lease does not block: Handle() returns
// a Reply whose `waiting` is set; the caller re-polls with Poll() after the Reply's
// `poll_after` (15 ms, doubling up to ApiOptions::wait_poll_max) or when Watch()
// wakes it (a complete or fail of the key through this Api), until `waiting` comes
// back empty, or sends the Reply's current response (409 in_progress) if it has to
// stop early. A poll is a plain read of the record while the lease runs; only a
// change goes through a claim.
//
// Store down (kUnavailable): every claim/complete/fail/record call answers 503
// problem+json with "outcome":"unavailable" and Retry-After, and nothing runs (fail
// closed). How long a call takes to find that out is bounded by the store's connect
// and pool-wait timeouts (URL parameters; see docs/operations.md). For the biz_types in
// ApiOptions::fail_open only, a claim that meets an unavailable store instead answers
// 201 {"outcome":"acquired","token":0,"degraded":true,...}: nothing is recorded, so a
// duplicate of it may pass too. That is UNSAFE and meant for low-value traffic only;
// each one is logged as a warning and counted in idem_fail_open_total{biz_type}.
// complete/fail with token 0 for such a biz_type answer 200 {"outcome":"degraded"}
// without touching the store (there is no record to finish); token 0 for any other
// biz_type is 400.
//
// The caller counts each final answer with Metrics::CountRequest(reply.route,
// status, reply.outcome, latency) when it sends it. GET /metrics answers
// Metrics::Render(), then idem_store_up from the readiness check made for that
// scrape (a Store::Ping(), and after a failed write a write probe: the truth now, as
// /readyz tells it), then the cache tiers' counters. So a scrape
// waits for the ping, as /readyz does, bounded by the store's timeouts.
//
// Claims that create a record and claims answered 422 feed a KeyHealthTracker
// (key_health.h), whose counters /metrics shows after the cache tiers' and whose
// per-key mismatches GET /v1/keys/mismatches lists for the caller's tenant.
//
// Thread safety: an Api is safe for concurrent use. `guard`, `store` and `metrics`
// must outlive it. Handle() and Poll() block on the store (SQLite), so servers call
// them off their I/O threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/time/time.h"
#include "http/handler.h"
#include "http/key_health.h"
#include "http/key_watch.h"
#include "http/metrics.h"
#include "http/route.h"
#include "http/store_health.h"
#include "http/types.h"
#include "idem/clock.h"
#include "idem/guard.h"
#include "idem/store.h"
#include "store/backend.h"

namespace idem::http {

// A tenant and its bearer token, kept only as the token's SHA-256 (64 lowercase hex
// digits, what `idem token hash` prints after "sha256:"): Authenticate hashes the
// token a request presents and compares digests, so no token is held in memory.
struct Tenant {
  std::string name;
  std::string token_sha256;

  // For tests and development: the tenant whose token is `token`.
  static Tenant WithToken(std::string name, std::string_view token);
};

struct ApiOptions {
  std::vector<Tenant> tenants;
  size_t max_body_bytes = 1 << 20;  // larger bodies are 413
  // A claim that waits (wait_ms) re-reads its record after wait_poll_min, then
  // twice as long each time up to wait_poll_max: one plain read (no locking
  // transaction) per waiter per wait_poll_max at most while the holder's lease
  // runs. Waiters on one key whose polls fall within wait_poll_min of each other
  // share one read. A complete or fail through this process wakes its waiters at
  // once.
  absl::Duration wait_poll_min = absl::Milliseconds(15);
  absl::Duration wait_poll_max = absl::Milliseconds(250);
  bool metrics_require_token = false;
  const Clock* clock = Clock::Real();  // not owned; Retry-After and wait deadlines
  // biz_types whose claims are let through unrecorded when the store is unavailable
  // (UNSAFE: duplicates may pass). Empty: every biz_type fails closed.
  std::set<std::string, std::less<>> fail_open;
  // Key health (docs/keys.md): the regenerated-key window and the tracker's sizes.
  KeyHealthOptions key_health;
};

// A claim that met a live lease and is waiting for it (wait_ms). Opaque to callers.
struct WaitingClaim {
  Request request;
  absl::Duration lease;
  absl::Time deadline;
  absl::Duration poll_interval;  // the next wait between polls (backs off)
  uint64_t epoch = 0;            // KeyWatch::Epoch() before the last poll's read
};

class Api : public Handler {
 public:
  Api(Guard& guard, Store& store, Metrics& metrics, ApiOptions options);

  // Routes and answers `request`. Blocks on the store. Never throws.
  Reply Handle(const HttpRequest& request) override;

  // Re-tries a waiting claim. Blocks on the store. Never throws.
  Reply Poll(const WaitingClaim& waiting) override;

  // A duplicate claim whose key's final record the store holds in memory
  // (Store::PeekDecided, the cache's L1), answered on the calling network thread;
  // nullopt for anything else.
  std::optional<Reply> HandleWithoutBlocking(HttpRequest& request) override;

  // A claim, complete or fail on a store with non-blocking transactions
  // (Store::non_blocking(): rocksdb://), started on the calling network thread
  // (Guard::ClaimNonBlocking, ...), its answer built by `resume`'s function once
  // the write is durable; false for anything else, or a key another transaction
  // holds this instant (Handle() then answers it on the pool).
  bool HandleAsync(HttpRequest& request, Resume resume) override;

  // Wakes a waiting claim when its key is completed or failed through this Api.
  std::shared_ptr<void> Watch(const WaitingClaim& waiting, std::function<void()> wake) override;

  // Checked when a request's header is in and it has a body still to come: the
  // answer that ends it there, before any of the body is read or a 100 Continue
  // sent (401 for an API route without a valid bearer token), or nullopt to read
  // on. So an unauthenticated client cannot make the server hold its body.
  // Does not block; never throws.
  std::optional<Reply> BeforeBody(std::string_view target,
                                  std::string_view authorization) const override;

  // Answers for conditions found before a request reaches Handle() (the server's
  // parser): 413 body too large, 400 malformed HTTP, 431 header too large.
  static HttpResponse BodyTooLarge(size_t limit);
  static HttpResponse BadHttp(std::string_view what);
  static HttpResponse HeaderTooLarge();

  Metrics& metrics() override { return metrics_; }
  const ApiOptions& options() const { return options_; }

 private:
  Reply Claims(const HttpRequest& request, const std::string& tenant);
  Reply Complete(const HttpRequest& request, const std::string& tenant);
  Reply Fail(const HttpRequest& request, const std::string& tenant);
  Reply GetRecord(std::string_view biz_type_enc, std::string_view key_enc,
                  const std::string& tenant);
  Reply ListRecords(const HttpRequest& request, const std::string& tenant);  // record_pages.cc
  Reply KeyMismatches(const HttpRequest& request, const std::string& tenant);  // key_pages.cc
  // What a claim's answer tells the key-health tracker: a new key, or a 422.
  void TrackKeyHealth(const Request& request, const Result& result);
  Reply Ready();
  // OK when the store answers a ping and takes writes (StoreHealth::Writable, which
  // probes them after a write failed); /readyz and idem_store_up. Blocks.
  absl::Status StoreReadiness();
  Reply ClaimAnswer(const Request& request, absl::Duration lease, absl::Time deadline,
                    absl::Duration poll_interval, uint64_t epoch);
  // The answer to a claim whose Guard answer is `result`.
  Reply AnswerClaim(const Request& request, absl::Duration lease, absl::Time deadline,
                    absl::Duration poll_interval, uint64_t epoch, absl::StatusOr<Result> result);
  // The answer to a complete (kComplete) or fail whose Guard answer is `status`;
  // `outcome` names a success.
  Reply AnswerFinish(Route route, const Request& request, const absl::Status& status,
                     std::string_view outcome);
  // What every answered /v1/ request goes through last: the store's health, and
  // the tenant for the access log.
  Reply Answered(Reply reply, const std::string& tenant);
  // The 409 in_progress of a claim that met a live lease ending at `lease_until`,
  // waiting on (with the next poll `poll_interval` on) while `deadline` is ahead.
  // The answer of a claim whose key is decided (replayed, cached_failure,
  // key_reused, fingerprint_mismatch).
  Reply DecidedClaim(const Result& result);
  Reply InProgress(const Request& request, absl::Duration lease, absl::Time deadline,
                   absl::Time lease_until, absl::Duration poll_interval, uint64_t epoch);

  // Returns the tenant named by the bearer token, or nullptr.
  const Tenant* Authenticate(std::string_view authorization) const;
  // Turns a non-OK guard/store status into a problem response; counts store errors.
  Reply StatusReply(const absl::Status& status, std::string_view action);
  // 500 for a failure that is nobody's but idem's: logged with its cause, which
  // the answer does not repeat.
  Reply Internal(std::string_view action, std::string_view cause);
  // kInvalidArgument naming the field ("field \"key\": ...") for a bad biz_type,
  // key or fingerprint (over kMaxFingerprintBytes).
  absl::Status ValidateIds(std::string_view biz_type, std::string_view key,
                           std::string_view fingerprint = {}) const;
  bool IsFailOpen(std::string_view biz_type) const;
  // The degraded 201 of a fail-open claim whose store call failed with `status`.
  Reply FailOpenClaim(const Request& request, const absl::Status& status);
  // complete/fail with token 0: 200 degraded for a fail-open biz_type, else 400.
  Reply DegradedFinish(Route route, std::string_view biz_type);

  Guard& guard_;
  Store& store_;
  Metrics& metrics_;
  const ApiOptions options_;
  // Tells this Api from one built later at the same address (Authenticate's
  // per-thread memo of the last token).
  const uint64_t instance_;
  StoreHealth health_;
  KeyHealthTracker key_health_;
  KeyWatch watch_;
  // Store::SubscribeFinished's handle; after watch_, so it ends before watch_ does.
  std::shared_ptr<void> finished_;
};

// Percent-decodes one path segment ("%2F" -> "/"); kInvalidArgument for a bad escape.
absl::StatusOr<std::string> PercentDecode(std::string_view segment);

}  // namespace idem::http
