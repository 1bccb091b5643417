// Api: the routes and handlers of the `idem serve` HTTP API, apart from
// any socket so it can be driven directly by tests. The server (server/server.h)
// turns Beast messages into HttpRequest values, has the Api route each one once
// (Begin: an ApiCall, the route, the path's segments, the tenant and later the
// parsed body), runs its Answer() on a worker pool, and writes the HttpResponse
// back. A decided duplicate is answered on the network thread
// (AnswerWithoutBlocking), and on a store with non-blocking transactions
// (rocksdb://) a claim, complete or fail is started there and answered once its
// write is durable (StartAsync), without a worker thread.
//
//   POST /v1/claims                    Guard::Claim   201 acquired | 200 replayed,
//                                                     cached_failure | 409 | 422
//   POST /v1/claims/complete           Guard::Complete
//   POST /v1/claims/fail               Guard::Fail
//   POST /v1/claims/batch              up to 1,000 of the three above, each decided as
//                                      its single call would be (claims_batch.cc)
//   GET  /v1/records/{biz_type}/{key}  Guard::Get (percent-decoded segments); 410 once purged
//   GET  /v1/records?biz_type=&state=&limit=&cursor=
//                                      Store::ListRecords, the caller's tenant only
//   GET  /v1/keys/mismatches           the caller's keys answered 422 fingerprint_mismatch,
//                                      from KeyHealthTracker (memory, since the start)
//   GET  /healthz                      200 while the process serves
//   GET  /readyz                       200 when Store::Ping() is OK and the store takes
//                                      writes (StoreHealth), else 503
//   GET  /metrics                      Prometheus text
//   GET, POST /console/…               the operator console's pages, when ApiOptions::console
//                                      is set (console.h: its own admins and sessions)
//
// Every /v1/ call needs "Authorization: Bearer <token>"; the token names the tenant,
// which becomes Request::tenant, so tenants never see each other's keys. A missing or
// malformed header, or a token no tenant has, is 401 with "WWW-Authenticate: Bearer".
// /healthz, /readyz and /metrics need no token (and ignore one), unless
// ApiOptions::metrics_require_token puts /metrics behind any tenant's token.
//
// A claim with wait_ms > 0 that meets a live lease does not block: its answer is a
// Reply whose `waiting` (a WaitingClaim) is set; the caller re-polls with its
// Poll() after the Reply's `poll_after` (15 ms, doubling up to
// ApiOptions::wait_poll_max) or when its Watch() wakes it (a complete or fail of
// the key through this Api), until `waiting` comes back empty, or sends the
// Reply's current response (409 in_progress) if it has to stop early. A poll is a
// plain read of the record while the lease runs; only a change goes through a
// claim.
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
// per-key mismatches GET /v1/keys/mismatches lists for the caller's tenant. Claims
// that create a record that never expires (its biz_type has no retention) feed a
// RetentionWatch (retention_watch.h), which logs each such biz_type once and whose
// gauge /metrics shows last.
//
// Thread safety: an Api is safe for concurrent use. `guard`, `store` and `metrics`
// must outlive it, and the Api every ApiCall and WaitingClaim it made. Answer()
// and Poll() block on the store (SQLite), so servers call them off their I/O threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "absl/time/time.h"
#include "core/guard_nonblocking.h"
#include "http/api/console.h"
#include "http/api/json.h"
#include "http/api/key_health.h"
#include "http/api/key_watch.h"
#include "http/api/retention_watch.h"
#include "http/api/store_health.h"
#include "http/server/handler.h"
#include "http/server/metrics.h"
#include "http/server/problem.h"
#include "http/server/route.h"
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
  // POST /v1/claims/batch: the items after the answers reach this many bytes (a
  // replayed claim carries its stored result) are answered 413 undecided, so that
  // a batch's answer stays bounded.
  size_t max_batch_answer_bytes = 16 << 20;
  // A claim that waits (wait_ms) re-reads its record after wait_poll_min, then
  // twice as long each time up to wait_poll_max: one plain read (no locking
  // transaction) per waiter per wait_poll_max at most while the holder's lease
  // runs. Waiters on one key whose polls fall within wait_poll_min of each other
  // share one read. A complete or fail through this process wakes its waiters at
  // once.
  absl::Duration wait_poll_min = absl::Milliseconds(15);
  absl::Duration wait_poll_max = absl::Milliseconds(250);
  bool metrics_require_token = false;
  // The operator console under /console/ (console.h), or null: no console, and
  // /console/ is 404 like any other unknown path. Not owned; outlives the Api.
  Console* console = nullptr;
  // The longest Retry-After of a 409 in_progress (InProgressRetryAfter, problem.h):
  // the lease's time left, capped at this.
  absl::Duration retry_after_max = kDefaultRetryAfterMax;
  const Clock* clock = Clock::Real();  // not owned; Retry-After and wait deadlines
  // biz_types whose claims are let through unrecorded when the store is unavailable
  // (UNSAFE: duplicates may pass). Empty: every biz_type fails closed.
  std::set<std::string, std::less<>> fail_open;
  // Key health (docs/keys.md): the regenerated-key window and the tracker's sizes.
  KeyHealthOptions key_health;
  // Log and count the biz_types whose new records never expire (RetentionWatch,
  // idem_biz_types_without_retention); off where no claim comes (idem proxy's admin
  // listener).
  bool watch_retention = true;
};

class Api;
struct BatchSlot;  // claims_batch.cc
struct BatchPass;  // claims_batch.cc

// A claim that met a live lease and is waiting for it (wait_ms), polled through
// the Api that answered it (Api::Poll, Api::Watch).
struct WaitingClaim final : Waiting {
  WaitingClaim(Api& api, Request request, absl::Duration lease, absl::Time deadline,
               absl::Duration poll_interval, uint64_t epoch)
      : api(api),
        request(std::move(request)),
        lease(lease),
        deadline(deadline),
        poll_interval(poll_interval),
        epoch(epoch) {}

  Reply Poll() const override;
  std::shared_ptr<void> Watch(std::function<void()> wake) const override;

  Api& api;
  Request request;
  absl::Duration lease;
  absl::Time deadline;
  absl::Duration poll_interval;  // the next wait between polls (backs off)
  uint64_t epoch = 0;            // KeyWatch::Epoch() before the last poll's read
};

// One request to the Api as Api::Begin routed it: its target is split and its
// tenant found here, once, and its body parsed at most once, whichever step
// (AnswerWithoutBlocking, StartAsync, Answer) comes to it first; the steps after
// read these. The views point into request().target, which must not change.
class ApiCall final : public Handler::Call, private NonBlockingCall {
 public:
  ApiCall(Api& api, HttpRequest request);
  // Gives a claim's key and fingerprint buffers to the thread's next request
  // (http/server/buffers.h).
  ~ApiCall() override;

  // One a request: the memory of one let go is kept for the next on its thread.
  static void* operator new(size_t size);
  static void operator delete(void* call, size_t size);

  // 401 for a /v1/ path without a valid bearer token, so an unauthenticated
  // client cannot make the server hold its body; nullopt otherwise.
  std::optional<Reply> BeforeBody() const override;
  // A duplicate claim whose key's final record the store holds in memory
  // (StoreBackend::PeekDecided, the cache's L1); nullopt for anything else.
  std::optional<Reply> AnswerWithoutBlocking() override;
  // A claim, complete or fail on a store with non-blocking transactions
  // (StoreBackend::non_blocking(): rocksdb://), started on the calling network thread
  // (ClaimNonBlocking, ... of core/guard_nonblocking.h), its answer built by `resume`'s function once
  // the write is durable; false for anything else, or a key another transaction
  // holds this instant (Answer() then answers it on the pool).
  bool StartAsync(const Handler::Resume& resume) override;
  // Answers the request. Blocks on the store.
  Reply Answer() override;

  std::string_view path;                  // the target up to its query
  std::optional<std::string_view> query;  // after '?'; nullopt without one
  std::string_view method;                // HEAD is answered as GET (RFC 9110 §9.3.2)
  // The route the path names: kRecord for every path under /v1/records/, kOther
  // for a path no route has (404).
  Route route = Route::kOther;
  std::string_view allow;  // the method `route` takes
  // GET /v1/records/{biz_type}/{key}: the two segments, percent-encoded, or both
  // empty when the path under /v1/records/ is not two non-empty segments (404).
  std::string_view biz_type_enc, key_enc;
  // The bearer token's tenant, looked up for /v1/ paths (and /metrics when it
  // needs a token); nullptr when missing or unknown.
  const Tenant* tenant = nullptr;
  // A claim's, complete's or fail's body, parsed and its ids checked on first use
  // (Api::BodyOf); monostate until then.
  std::variant<std::monostate, absl::StatusOr<ClaimBody>, absl::StatusOr<CompleteBody>,
               absl::StatusOr<FailBody>>
      body;
  // A batch that StartAsync parsed and left to the pool (a key of it was held): its
  // items, those answered already (from memory) with their replies, for Answer.
  std::shared_ptr<BatchPass> batch;

 private:
  friend class Api;
  // The Guard's answer to the call StartAsync started: handed to resume_.
  void Done(absl::StatusOr<Result> answer) override;

  Api& api_;
  // A claim's, complete's or fail's Request for the Guard, made once (a claim's
  // takes the strings of its parsed body: Api::ClaimRequestOf).
  std::optional<Request> guard_request_;
  // StartAsync's: where its answer goes, and what that is built from.
  Handler::Resume resume_;
  absl::StatusOr<Result> answer_;
  absl::Duration lease_;
  absl::Time deadline_;
  uint64_t epoch_ = 0;
};

class Api : public Handler {
 public:
  Api(Guard& guard, Store& store, Metrics& metrics, ApiOptions options);

  // Routes `request` (an ApiCall). Does not block; never throws.
  std::unique_ptr<Call> Begin(HttpRequest request) override;

  // Begin and Answer at once, on the calling thread (tests, in-process callers).
  // Blocks on the store. Never throws.
  Reply Handle(const HttpRequest& request);

  // Re-tries a waiting claim (WaitingClaim::Poll). Blocks on the store. Never throws.
  Reply Poll(const WaitingClaim& waiting);

  // Wakes a waiting claim when its key is completed or failed through this Api
  // (WaitingClaim::Watch).
  std::shared_ptr<void> Watch(const WaitingClaim& waiting, std::function<void()> wake);

  Metrics& metrics() override { return metrics_; }
  const ApiOptions& options() const { return options_; }

 private:
  friend class ApiCall;

  // Fills in `call`'s route, path segments and tenant from its target.
  void RouteCall(ApiCall& call) const;
  // ApiCall's steps (claims.cc has the claim routes' parts).
  std::optional<Reply> BeforeBody(const ApiCall& call) const;
  std::optional<Reply> AnswerWithoutBlocking(ApiCall& call);
  bool StartAsync(ApiCall& call, const Resume& resume);
  Reply Answer(ApiCall& call);
  // `call`'s body parsed by `parse`, its ids checked (ValidateIds), on first use;
  // every later use gets the first's result.
  template <typename Body>
  const absl::StatusOr<Body>& BodyOf(ApiCall& call,
                                     absl::StatusOr<Body> (*parse)(std::string_view)) const;

  Reply Claims(ApiCall& call);    // claims.cc
  Reply Complete(ApiCall& call);  // claims.cc
  Reply Fail(ApiCall& call);      // claims.cc
  Reply Batch(ApiCall& call);     // claims_batch.cc: POST /v1/claims/batch
  // The batch of `call` decided in one pass on this network thread, on a store
  // with non-blocking transactions, its answer built by `resume`'s function once
  // its one write is durable; false, having decided nothing, for anything else or
  // when a key of it is held by another transaction this instant (Batch then
  // answers it on the pool).
  bool StartBatch(ApiCall& call, const Resume& resume);
  // The items of a batch's `body` into `*slots`, each parsed and its ids checked
  // (a bad one has its 400 reply already); the 400 of a malformed envelope.
  std::optional<Reply> ParseBatch(std::string_view body, std::vector<BatchSlot>* slots) const;
  // The 200 of a batch whose every slot has its reply; counts the items.
  Reply BatchAnswer(const std::vector<BatchSlot>& slots);
  // The slots of `pass` still without a reply handed to DecideBatchNonBlocking
  // (all: all or nothing), `decided` called as it says; a decided duplicate the
  // store holds in memory, and a finish with token 0, are answered here. Returns
  // its answer.
  bool StartBatchPass(const std::string& tenant, const std::shared_ptr<BatchPass>& pass,
                      bool all, std::function<void()> decided);
  // The replies of what the pass decided (once `decided` was called); items left
  // to the per-item path stay without one.
  void AnswerBatchPass(BatchPass& pass);
  // The batch's items decided on this thread in their order (a store whose calls
  // block), or started without blocking, a wave of distinct keys at a time, this
  // thread waiting for each wave's writes to be durable (rocksdb://). An item past
  // ApiOptions::max_batch_answer_bytes of answers is not decided (413).
  void DecideBatchInOrder(const std::string& tenant, std::vector<BatchSlot>& slots);
  void DecideBatchStarted(const std::string& tenant, std::vector<BatchSlot>& slots);
  // One valid item decided by its single call's part (Claim, Complete or Fail).
  Reply DecideBatchItem(const std::string& tenant, const BatchItemBody& body);

  // The single calls' parts after their body is parsed and its ids checked
  // (CheckIds), which POST /v1/claims and the items of a batch share (claims.cc).
  // Claim, Complete and Fail decide on the calling thread (blocking on the store).
  Reply Claim(const std::string& tenant, const ClaimBody& body);
  Reply Claim(const Request& request, const ClaimBody& body);
  // Until when a claim with `body` waits for a live lease (wait_ms); the past for none.
  absl::Time WaitDeadline(const ClaimBody& body) const;
  // A claim's Request, made on first use from its parsed body (whose strings it
  // takes: the call's other steps read this, never the body's ids), or nullptr
  // for a body that is not valid.
  const Request* ClaimRequestOf(ApiCall& call) const;
  // StartAsync's answer, on the network thread its resume runs it on.
  Reply Resumed(ApiCall& call);
  Reply Complete(const std::string& tenant, const CompleteBody& body);
  Reply Fail(const std::string& tenant, const FailBody& body);
  // A claim's answer when the store holds its key's final record in memory
  // (ClaimIfKnown); nullopt otherwise. Does not block.
  std::optional<Reply> KnownClaim(const std::string& tenant, const ClaimBody& body);
  std::optional<Reply> KnownClaim(const Request& request);
  // Where a call started without blocking hands the function that builds its
  // Reply, called on the store's writer thread once the write is durable (or on the
  // starting thread when nothing was written): it must be quick.
  using Started = std::function<void(std::function<Reply()>)>;
  // Start the call on a transaction that never waits (ClaimNonBlocking, ...):
  // true when `started` will be called once; false when nothing was done (the
  // store blocks, the key is locked this instant, token 0), and the blocking call
  // above decides it.
  bool StartClaim(const std::string& tenant, const ClaimBody& body, Started started);
  bool StartComplete(const std::string& tenant, const CompleteBody& body, Started started);
  bool StartFail(const std::string& tenant, const FailBody& body, Started started);
  // `body` with its biz_type, key (and a claim's fingerprint) checked (ValidateIds).
  template <typename Body>
  absl::StatusOr<Body> CheckIds(absl::StatusOr<Body> body) const;
  static Request RequestOf(const std::string& tenant, std::string_view biz_type,
                           std::string_view key, std::string_view fingerprint = {});
  Reply GetRecord(std::string_view biz_type_enc, std::string_view key_enc,
                  const std::string& tenant);                             // records.cc
  Reply ListRecords(std::string_view params, const std::string& tenant);  // records.cc
  Reply KeyMismatches(bool has_query, const std::string& tenant);         // keys.cc
  // What a claim's answer tells the key-health tracker (a new key, or a 422) and
  // the retention watch (a new record that never expires).
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
  RetentionWatch retention_watch_;
  KeyWatch watch_;
  // Store::SubscribeFinished's handle; after watch_, so it ends before watch_ does.
  std::shared_ptr<void> finished_;
};

// Percent-decodes one path segment ("%2F" -> "/"); kInvalidArgument for a bad escape.
absl::StatusOr<std::string> PercentDecode(std::string_view segment);

}  // namespace idem::http
