// POST /v1/claims/batch: up to kMaxBatchItems claims, completes and fails in one
// request, each item parsed, checked and decided by the single call's own parts
// (ParseBatchItem, CheckIds, and Claim/Complete/Fail or their Start* forms of
// claims.cc), so an item's answer is the one its single call would give.
//
// On a store whose calls block (sqlite, postgres, mysql) the items are decided one
// after the other on this worker thread. On rocksdb:// they are started without
// blocking, as many at once as can be (StartClaim, ...), so that its writer groups
// their writes into few syncs, and this thread waits for the last one to be
// durable. Items naming the same key are decided in their order: the n-th item of
// a key starts once the key's item before it is decided ("waves"). Keys are what a
// record is, so items of different keys cannot see each other and their order
// among themselves does not matter.
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
#include "core/absl_compat.h"
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

Reply Api::Batch(ApiCall& call) {
  absl::StatusOr<std::vector<std::string_view>> items =
      ParseBatchEnvelope(call.request().body, kMaxBatchItems);
  if (!items.ok()) {
    return BatchProblem(
        MakeProblem(400, "invalid_request", "Invalid request", SV(items.status().message())));
  }
  const std::string& tenant = call.tenant->name;
  std::vector<BatchSlot> slots(items->size());
  for (size_t i = 0; i < slots.size(); ++i) {
    BatchSlot& slot = slots[i];
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

  if (Backend(store_).non_blocking()) {
    DecideBatchStarted(tenant, slots);
  } else {
    DecideBatchInOrder(tenant, slots);
  }

  Reply reply = BatchProblem(HttpResponse{});
  std::string& body = reply.response.body;
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
  size_t answered = 0;
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
