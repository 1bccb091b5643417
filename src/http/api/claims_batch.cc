// POST /v1/claims/batch: up to kMaxBatchItems claims, completes and fails in one
// request, each item parsed, checked and decided by the single call's own parts
// (ParseBatchItem, CheckIds, the Guard's checks and decisions, AnswerClaim and
// AnswerFinish of claims.cc), so an item's answer is the one its single call would
// give.
//
// On a store whose calls block (sqlite, postgres, mysql) the items are decided one
// after the other on a worker thread. On rocksdb:// the whole batch is decided in
// one pass (DecideBatchNonBlocking of core/guard_nonblocking.h): its keys locked,
// every item decided in order in ONE transaction, whose reads see its own writes (a
// second claim of a key claimed earlier in the batch is the duplicate it is), and
// ONE commit, the answers rendered once it is durable. That runs on the network
// thread that read the request (StartBatch) when every key is free at that instant;
// else on the pool (Batch), where the items whose keys another transaction holds
// are then decided one key's items after the other, as below.
//
// The per-item path (DecideBatchStarted) starts items without blocking, as many at
// once as can be (StartClaim, ...), so that the writer groups their writes into few
// syncs, and this thread waits for the last one to be durable. Items naming the same
// key are decided in their order: the n-th item of a key starts once the key's item
// before it is decided ("waves"). Keys are what a record is, so items of different
// keys cannot see each other and their order among themselves does not matter.
#include <algorithm>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "core/absl_compat.h"
#include "core/guard_nonblocking.h"
#include "http/api/api.h"
#include "http/api/json.h"
#include "http/server/problem.h"
#include "store/backend.h"

namespace idem::http {
namespace {

// How many items of one wave are in flight at once on rocksdb://: a bound on the
// answers (a replayed claim carries its stored result) held before their bytes are
// counted against ApiOptions::max_batch_answer_bytes.
constexpr size_t kBatchInFlight = 256;

// The answers of the items started without blocking, handed over by the store's
// writer thread (or the starting one), and how many are still to come.
struct BatchArrivals {
  bool Done() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return pending == 0; }

  absl::Mutex mu;
  size_t pending ABSL_GUARDED_BY(mu) = 0;
  std::vector<std::pair<size_t, std::function<Reply()>>> answers ABSL_GUARDED_BY(mu);
};

Route BatchItemRoute(const BatchItemBody& body) {
  switch (body.index()) {
    case 0:
      return Route::kClaims;
    case 1:
      return Route::kComplete;
    default:
      return Route::kFail;
  }
}

const std::string& BatchItemKey(const BatchItemBody& body) {
  return std::visit([](const auto& b) -> const std::string& { return b.key; }, body);
}

Reply BatchProblem(HttpResponse response) {
  Reply r;
  r.response = std::move(response);
  r.route = Route::kClaimsBatch;
  return r;
}

// What an item not decided because the answer filled up answers.
Reply NotDecided(size_t limit) {
  return BatchProblem(MakeProblem(
      413, "batch_answer_too_large", "Batch answer too large",
      absl::StrCat("not decided: the answers of the items before it reached the batch answer's ",
                   limit, " bytes; send this item again")));
}

// `response` as an element of "responses": its JSON body with "status" first (a
// problem's body has it already).
void AppendBatchResponse(std::string* out, const HttpResponse& response) {
  if (response.content_type == "application/problem+json" || response.body.empty() ||
      response.body.front() != '{') {
    out->append(response.body.empty() ? std::string_view("null") : response.body);
    return;
  }
  absl::StrAppend(out, "{\"status\":", response.status);
  if (response.body != "{}") out->push_back(',');
  out->append(response.body, 1, std::string::npos);
}

}  // namespace

// One item: its body (or why it has none), then its answer.
struct BatchSlot {
  absl::StatusOr<BatchItemBody> body = absl::UnknownError("not parsed");
  std::optional<Reply> reply;
};

// The batch decided in one pass (DecideBatchNonBlocking): its items as the Guard's
// BatchCalls and what the Guard made of each. Shared with the commit's callback.
struct BatchPass {
  std::vector<BatchSlot> slots;
  std::vector<size_t> slot_of;  // calls[j] is slots[slot_of[j]]
  std::vector<BatchCall> calls;
  std::vector<BatchDecision> decisions;
};

std::optional<Reply> Api::ParseBatch(std::string_view body, std::vector<BatchSlot>* slots) const {
  absl::StatusOr<std::vector<std::string_view>> items = ParseBatchEnvelope(body, kMaxBatchItems);
  if (!items.ok()) {
    return BatchProblem(
        MakeProblem(400, "invalid_request", "Invalid request", SV(items.status().message())));
  }
  slots->resize(items->size());
  for (size_t i = 0; i < slots->size(); ++i) {
    BatchSlot& slot = (*slots)[i];
    slot.body = ParseBatchItem((*items)[i]);
    if (slot.body.ok()) {
      absl::Status ids = std::visit(
          [this](auto& body) -> absl::Status {
            using Body = std::decay_t<decltype(body)>;
            absl::StatusOr<Body> checked = CheckIds<Body>(std::move(body));
            if (!checked.ok()) return checked.status();
            body = *std::move(checked);
            return absl::OkStatus();
          },
          *slot.body);
      if (!ids.ok()) slot.body = std::move(ids);
    }
    if (!slot.body.ok()) {
      slot.reply = BatchProblem(
          MakeProblem(400, "invalid_request", "Invalid request",
                      absl::StrCat("requests[", i, "]: ", slot.body.status().message())));
    }
  }
  return std::nullopt;
}

Reply Api::BatchAnswer(const std::vector<BatchSlot>& slots) {
  Reply reply = BatchProblem(HttpResponse{});
  std::string& body = reply.response.body;
  size_t bytes = 16;
  for (const BatchSlot& slot : slots) bytes += slot.reply->response.body.size() + 16;
  body.reserve(bytes);
  body.append(R"({"responses":[)");
  for (size_t i = 0; i < slots.size(); ++i) {
    const Reply& item = *slots[i].reply;
    if (i > 0) body.push_back(',');
    AppendBatchResponse(&body, item.response);
    reply.store_wrote = reply.store_wrote || item.store_wrote;
    metrics_.CountBatchItem(slots[i].body.ok() ? BatchItemRoute(*slots[i].body) : Route::kOther,
                            item.outcome);
  }
  body.append("]}");
  return reply;
}

Reply Api::Batch(ApiCall& call) {
  std::vector<BatchSlot> slots;
  if (call.batch != nullptr) {
    slots = std::move(call.batch->slots);  // parsed by StartBatch, some items answered
  } else if (std::optional<Reply> bad = ParseBatch(call.request().body, &slots)) {
    return *std::move(bad);
  }
  const std::string& tenant = call.tenant->name;
  if (Backend(store_).non_blocking()) {
    // One pass for the items whose keys are free; this thread waits for its sync.
    auto pass = std::make_shared<BatchPass>();
    pass->slots = std::move(slots);
    auto decided = std::make_shared<absl::Notification>();
    if (StartBatchPass(tenant, pass, /*all=*/false, [decided] { decided->Notify(); })) {
      decided->WaitForNotification();
      AnswerBatchPass(*pass);
    }
    slots = std::move(pass->slots);
    // The rest (keys another transaction held): item by item.
    DecideBatchStarted(tenant, slots);
  } else {
    DecideBatchInOrder(tenant, slots);
  }
  return BatchAnswer(slots);
}

bool Api::StartBatch(ApiCall& call, const Resume& resume) {
  const HttpRequest& request = call.request();
  const Tenant* tenant = call.tenant;
  if (!Backend(store_).non_blocking() || request.method != "POST" || tenant == nullptr ||
      request.body.size() > options_.max_body_bytes) {
    return false;
  }
  try {
    auto pass = std::make_shared<BatchPass>();
    // A malformed envelope is the pool's to word (Batch).
    if (ParseBatch(request.body, &pass->slots).has_value()) return false;
    // All or nothing: with a key held by another transaction, the pool decides it.
    if (StartBatchPass(tenant->name, pass, /*all=*/true,
                       [this, pass, resume, tenant = tenant->name] {
                         resume([this, pass, tenant]() -> Reply {
                           try {
                             AnswerBatchPass(*pass);
                             return Answered(BatchAnswer(pass->slots), tenant);
                           } catch (const std::exception& e) {
                             return Internal("request", e.what());
                           }
                         });
                       })) {
      return true;
    }
    // The items answered here (a duplicate from memory) keep their answers: they
    // are counted once.
    pass->calls.clear();
    pass->slot_of.clear();
    pass->decisions.clear();
    call.batch = std::move(pass);
    return false;
  } catch (const std::exception&) {
    return false;  // the pool answers it
  }
}

bool Api::StartBatchPass(const std::string& tenant, const std::shared_ptr<BatchPass>& pass,
                         bool all, std::function<void()> decided) {
  size_t answered = 0;
  for (const BatchSlot& slot : pass->slots) {
    if (slot.reply.has_value()) answered += slot.reply->response.body.size();
  }
  for (size_t i = 0; i < pass->slots.size(); ++i) {
    BatchSlot& slot = pass->slots[i];
    if (slot.reply.has_value()) continue;
    if (answered >= options_.max_batch_answer_bytes) {
      slot.reply = NotDecided(options_.max_batch_answer_bytes);
      continue;
    }
    BatchCall call;
    if (const auto* claim = std::get_if<ClaimBody>(&*slot.body)) {
      // As the single call: a decided duplicate from memory first.
      if (std::optional<Reply> known = KnownClaim(tenant, *claim)) {
        slot.reply = *std::move(known);
        answered += slot.reply->response.body.size();
        continue;
      }
      call.request = RequestOf(tenant, claim->biz_type, claim->key, claim->fingerprint);
      call.lease = absl::Milliseconds(claim->lease_ms);
    } else if (const auto* complete = std::get_if<CompleteBody>(&*slot.body)) {
      if (complete->token == 0) {
        slot.reply = Complete(tenant, *complete);  // degraded: no store
        continue;
      }
      call.op = BatchCall::Op::kComplete;
      call.request = RequestOf(tenant, complete->biz_type, complete->key);
      call.token = complete->token;
      call.bytes = complete->result;
    } else {
      const FailBody& fail = std::get<FailBody>(*slot.body);
      if (fail.token == 0) {
        slot.reply = Fail(tenant, fail);
        continue;
      }
      call.op = BatchCall::Op::kFail;
      call.request = RequestOf(tenant, fail.biz_type, fail.key);
      call.token = fail.token;
      call.retryable = fail.retryable;
      call.bytes = fail.error;
    }
    pass->calls.push_back(std::move(call));
    pass->slot_of.push_back(i);
  }
  const size_t budget =
      options_.max_batch_answer_bytes - std::min(answered, options_.max_batch_answer_bytes);
  return DecideBatchNonBlocking(guard_, pass->calls, all, budget, &pass->decisions,
                                std::move(decided));
}

void Api::AnswerBatchPass(BatchPass& pass) {
  const uint64_t epoch = watch_.Epoch();
  for (size_t j = 0; j < pass.calls.size(); ++j) {
    const BatchCall& call = pass.calls[j];
    BatchDecision& d = pass.decisions[j];
    std::optional<Reply>& reply = pass.slots[pass.slot_of[j]].reply;
    switch (d.state) {
      case BatchDecision::State::kBusy:
        break;  // left to the per-item path
      case BatchDecision::State::kOverBudget:
        reply = NotDecided(options_.max_batch_answer_bytes);
        break;
      case BatchDecision::State::kDecided:
        switch (call.op) {
          case BatchCall::Op::kClaim:
            // A claim in a batch does not wait (no wait_ms).
            reply = AnswerClaim(call.request, call.lease, absl::InfinitePast(),
                                options_.wait_poll_min, epoch, std::move(d.claim));
            break;
          case BatchCall::Op::kComplete:
            reply = AnswerFinish(Route::kComplete, call.request, d.finish, "completed");
            break;
          case BatchCall::Op::kFail:
            reply = AnswerFinish(Route::kFail, call.request, d.finish,
                                 call.retryable ? "released" : "failed");
            break;
        }
        break;
    }
  }
}

Reply Api::DecideBatchItem(const std::string& tenant, const BatchItemBody& body) {
  // A throw is this item's 500, as Answer() answers a single call's; the items
  // before it are decided and keep their answers.
  try {
    return std::visit(
      [&](const auto& b) -> Reply {
        using Body = std::decay_t<decltype(b)>;
        if constexpr (std::is_same_v<Body, ClaimBody>) {
          return Claim(tenant, b);
        } else if constexpr (std::is_same_v<Body, CompleteBody>) {
          return Complete(tenant, b);
        } else {
          return Fail(tenant, b);
        }
      },
      body);
  } catch (const std::exception& e) {
    return Internal("request", e.what());
  }
}

void Api::DecideBatchInOrder(const std::string& tenant, std::vector<BatchSlot>& slots) {
  size_t answered = 0;
  for (BatchSlot& slot : slots) {
    if (slot.reply.has_value()) continue;
    if (answered >= options_.max_batch_answer_bytes) {
      slot.reply = NotDecided(options_.max_batch_answer_bytes);
      continue;
    }
    slot.reply = DecideBatchItem(tenant, *slot.body);
    answered += slot.reply->response.body.size();
  }
}

void Api::DecideBatchStarted(const std::string& tenant, std::vector<BatchSlot>& slots) {
  // The answers so far (a pass before this one may have decided items).
  size_t answered = 0;
  for (const BatchSlot& slot : slots) {
    if (slot.reply.has_value()) answered += slot.reply->response.body.size();
  }
  // Each item's wave: how many items of its key come before it.
  std::vector<size_t> wave(slots.size(), 0);
  size_t waves = 0;
  {
    std::unordered_map<std::string_view, size_t> seen;
    for (size_t i = 0; i < slots.size(); ++i) {
      if (slots[i].reply.has_value()) continue;
      wave[i] = seen[BatchItemKey(*slots[i].body)]++;
      waves = std::max(waves, wave[i] + 1);
    }
  }
  // Shared with the callbacks, which the store may call after a throw here.
  auto arrivals = std::make_shared<BatchArrivals>();
  for (size_t w = 0; w < waves; ++w) {
    size_t next = 0;
    while (true) {
      std::vector<size_t> started;
      for (; next < slots.size() && started.size() < kBatchInFlight; ++next) {
        BatchSlot& slot = slots[next];
        if (slot.reply.has_value() || wave[next] != w) continue;
        if (answered >= options_.max_batch_answer_bytes) {
          slot.reply = NotDecided(options_.max_batch_answer_bytes);
          continue;
        }
        const size_t index = next;
        Started done = [arrivals, index](std::function<Reply()> answer) {
          absl::MutexLock lock(&arrivals->mu);
          arrivals->answers.emplace_back(index, std::move(answer));
          --arrivals->pending;
        };
        {
          absl::MutexLock lock(&arrivals->mu);
          ++arrivals->pending;
        }
        const BatchItemBody& body = *slot.body;
        bool async = false;
        if (const auto* claim = std::get_if<ClaimBody>(&body)) {
          // As the single call: a decided duplicate from memory first.
          if (std::optional<Reply> known = KnownClaim(tenant, *claim)) {
            slot.reply = *std::move(known);
          } else {
            async = StartClaim(tenant, *claim, done);
          }
        } else if (const auto* complete = std::get_if<CompleteBody>(&body)) {
          async = StartComplete(tenant, *complete, done);
        } else {
          async = StartFail(tenant, std::get<FailBody>(body), done);
        }
        if (async) {
          started.push_back(index);
          continue;
        }
        {
          absl::MutexLock lock(&arrivals->mu);
          --arrivals->pending;
        }
        // Not started (the key is locked this instant, token 0): the blocking call.
        if (!slot.reply.has_value()) slot.reply = DecideBatchItem(tenant, body);
        answered += slot.reply->response.body.size();
      }
      if (started.empty() && next >= slots.size()) break;
      std::vector<std::pair<size_t, std::function<Reply()>>> answers;
      {
        absl::MutexLock lock(&arrivals->mu);
        arrivals->mu.Await(absl::Condition(arrivals.get(), &BatchArrivals::Done));
        answers.swap(arrivals->answers);
      }
      for (auto& [index, answer] : answers) {
        try {
          slots[index].reply = answer();
        } catch (const std::exception& e) {
          slots[index].reply = Internal("request", e.what());
        }
        answered += slots[index].reply->response.body.size();
      }
      if (next >= slots.size()) break;
    }
  }
}

}  // namespace idem::http
