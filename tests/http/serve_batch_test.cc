// POST /v1/claims/batch against a real `idem serve`, on rocksdb:// (items started
// without blocking, their writes grouped) and sqlite:// (items decided in order on
// a worker): each item answered as its single call would be, in order, bad items
// refused alone, the envelope's limits, the tenant of the token, the metrics, and
// every item of an answered batch still there after kill -9. The PostgreSQL case
// needs the test server (IDEM_TEST_POSTGRES_URL): it is built as its own binary
// (IDEM_BATCH_POSTGRES, label integration) that fails, never skips, without it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "http/client.h"
#include "nlohmann/json.hpp"
#include "testing/idem_process.h"
#include "testing/temp_dir.h"

namespace idem::http {
namespace {

using ::idem::testing::ServeProcess;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using json = nlohmann::json;

// `idem serve` on `store` with tenants t1 (tok1) and t2 (tok2).
class BatchServer {
 public:
  BatchServer(const std::string& store, const std::string& dir, std::vector<std::string> extra = {})
      : dir_(dir), store_(store), extra_(std::move(extra)) {
    Start();
  }

  void Start() {
    serve_ = std::make_unique<ServeProcess>(dir_ + "/serve" + std::to_string(starts_++) + ".err");
    for (const auto& [name, value] : env_) serve_->set_env(name, value);
    std::vector<std::string> args = idem::testing::StoreArgs(store_, dir_);
    for (const char* a : {"--listen", "127.0.0.1:0", "--tenant", "t1:tok1", "--tenant",
                                 "t2:tok2", "--log-level", "warn"}) {
      args.push_back(a);
    }
    args.insert(args.end(), extra_.begin(), extra_.end());
    ASSERT_THAT(serve_->Start(args), StartsWith("listening on ")) << serve_->stderr_text();
  }

  // kill -9, then a new process on the same store.
  void KillAndRestart() {
    serve_->Stop(SIGKILL);
    Start();
  }

  // A new process on the same store, without `env`, once this one has killed
  // itself (at a failpoint).
  void RestartAfterItDied() {
    EXPECT_EQ(serve_->Stop(0, std::chrono::seconds(60)), -1) << "the server did not die";
    env_.clear();
    Start();
  }

  // The environment of the processes started from now on (failpoints).
  void SetEnv(std::vector<std::pair<std::string, std::string>> env) { env_ = std::move(env); }

  testing::ClientResponse Post(const std::string& target, const std::string& body,
                               const std::string& token = "tok1") {
    return testing::Fetch(serve_->port(), "POST", target, body, token);
  }
  testing::ClientResponse Get(const std::string& target, const std::string& token = "tok1") {
    return testing::Fetch(serve_->port(), "GET", target, "", token);
  }

  // The batch of `items`; its "responses", checked to be one per item.
  json Batch(const json& items, const std::string& token = "tok1") {
    testing::ClientResponse r = Post("/v1/claims/batch", json{{"requests", items}}.dump(), token);
    EXPECT_EQ(r.status, 200) << r.body;
    json answer = json::parse(r.body, nullptr, false);
    EXPECT_TRUE(answer.is_object() && answer["responses"].is_array()) << r.body;
    if (!answer.is_object() || !answer["responses"].is_array()) return json::array();
    EXPECT_EQ(answer["responses"].size(), items.size());
    return answer["responses"];
  }

  ServeProcess& process() { return *serve_; }

 private:
  std::string dir_, store_;
  std::vector<std::string> extra_;
  std::vector<std::pair<std::string, std::string>> env_;
  int starts_ = 0;
  std::unique_ptr<ServeProcess> serve_;
};

json ClaimItem(const std::string& key, const std::string& biz_type = "pay") {
  return {{"op", "claim"}, {"biz_type", biz_type}, {"key", key}};
}
json CompleteItem(const std::string& key, int64_t token, const json& result) {
  return {{"op", "complete"}, {"biz_type", "pay"}, {"key", key}, {"token", token},
          {"result", result}};
}
json FailItem(const std::string& key, int64_t token, bool retryable, const json& error) {
  return {{"op", "fail"},       {"biz_type", "pay"},  {"key", key},
          {"token", token},     {"retryable", retryable}, {"error", error}};
}

// A key no other run of the test used (the PostgreSQL database is shared).
std::string Fresh(const std::string& name) {
  static const std::string run = std::to_string(getpid()) + "-" + std::to_string(time(nullptr));
  return name + "-" + run;
}

// The mixed batch every store must answer the same way.
void ExpectMixedBatchDecidedInOrder(BatchServer& server) {
  const std::string a = Fresh("a"), b = Fresh("b"), c = Fresh("c");
  const json responses = server.Batch(json::array({
      ClaimItem(a),                           // 0: acquired
      ClaimItem(a),                           // 1: in_progress (acquired just before)
      ClaimItem(b),                           // 2: acquired
      CompleteItem(a, 1, {{"paid", 1}}),      // 3: completed
      ClaimItem(a),                           // 4: replayed
      FailItem(b, 1, false, "card declined"),  // 5: failed
      ClaimItem(b),                           // 6: cached_failure
      ClaimItem(a, "refund"),                 // 7: key_reused
      CompleteItem(c, 1, nullptr),            // 8: not_found
      FailItem(a, 2, true, nullptr),          // 9: a is completed: as the single call
  }));
  ASSERT_EQ(responses.size(), 10u);
  EXPECT_EQ(responses[0]["status"], 201);
  EXPECT_EQ(responses[0]["outcome"], "acquired");
  EXPECT_EQ(responses[0]["token"], 1);
  EXPECT_EQ(responses[0]["takeover"], false);
  EXPECT_EQ(responses[1]["status"], 409);
  EXPECT_EQ(responses[1]["outcome"], "in_progress");
  EXPECT_EQ(responses[1]["type"], "urn:idem:problem:in_progress");
  EXPECT_EQ(responses[1]["lease_until"], responses[0]["lease_until"]);
  EXPECT_EQ(responses[2]["status"], 201);
  EXPECT_EQ(responses[3], json::parse(R"({"status":200,"outcome":"completed"})"));
  EXPECT_EQ(responses[4],
            json::parse(R"({"status":200,"outcome":"replayed","expires_at":null,"result":{"paid":1}})"));
  EXPECT_EQ(responses[5], json::parse(R"({"status":200,"outcome":"failed"})"));
  EXPECT_EQ(responses[6], json::parse(
                              R"({"status":200,"outcome":"cached_failure","expires_at":null,)"
                              R"("error":"card declined"})"));
  EXPECT_EQ(responses[7]["status"], 409);
  EXPECT_EQ(responses[7]["outcome"], "key_reused");
  EXPECT_EQ(responses[8]["status"], 404);
  EXPECT_EQ(responses[8]["outcome"], "not_found");

  // Item 9 is answered as the single call answers it on the same state: a's record
  // is the same after the batch, so the single fail gives the same answer.
  json single_request = FailItem(a, 2, true, nullptr);
  single_request.erase("op");
  testing::ClientResponse single = server.Post("/v1/claims/fail", single_request.dump());
  json single_body = json::parse(single.body);
  single_body.erase("request_id");
  EXPECT_EQ(responses[9]["status"], single.status);
  EXPECT_EQ(responses[9], single_body);

  // What the batch wrote is what the single calls read.
  testing::ClientResponse rec = server.Get("/v1/records/pay/" + a);
  ASSERT_EQ(rec.status, 200) << rec.body;
  EXPECT_EQ(json::parse(rec.body)["state"], "SUCCEEDED");
  rec = server.Get("/v1/records/pay/" + b);
  ASSERT_EQ(rec.status, 200) << rec.body;
  EXPECT_EQ(json::parse(rec.body)["state"], "FAILED");
}

class ServeBatch : public ::testing::TestWithParam<std::string> {
 protected:
  std::string StoreUrl() {
    return GetParam() == "rocksdb" ? "rocksdb://" + dir_.file("db")
                                   : "sqlite://" + dir_.file("idem.db");
  }
  idem::testing::TempDir dir_;
};

#ifndef IDEM_BATCH_POSTGRES

TEST_P(ServeBatch, MixedItemsAreDecidedInOrderAsTheirSingleCalls) {
  BatchServer server(StoreUrl(), dir_.path());
  ExpectMixedBatchDecidedInOrder(server);
}

TEST_P(ServeBatch, EachItemAnswersAsItsSingleCallWouldByteForByte) {
  BatchServer server(StoreUrl(), dir_.path());
  // The same calls, once singly on keys s*, once in a batch on keys b*: the bodies
  // match but for the keys' own times.
  auto strip = [](json j) {
    for (const char* member : {"lease_until", "detail", "request_id", "status"}) j.erase(member);
    return j;
  };
  const std::vector<std::pair<std::string, json>> calls = {
      {"/v1/claims", {{"biz_type", "pay"}, {"key", "K1"}, {"fingerprint", "f1"}}},
      {"/v1/claims", {{"biz_type", "pay"}, {"key", "K1"}, {"fingerprint", "f2"}}},
      {"/v1/claims/complete", {{"biz_type", "pay"}, {"key", "K1"}, {"token", 1}, {"result", 7}}},
      {"/v1/claims/complete", {{"biz_type", "pay"}, {"key", "K1"}, {"token", 1}, {"result", 8}}},
      {"/v1/claims", {{"biz_type", "pay"}, {"key", "K1"}, {"fingerprint", "f1"}}},
      {"/v1/claims", {{"biz_type", "pay"}, {"key", "K1"}, {"fingerprint", "f9"}}},
      {"/v1/claims/complete", {{"biz_type", "pay"}, {"key", "K1"}, {"token", 0}, {"result", 8}}},
  };
  json items = json::array();
  std::vector<testing::ClientResponse> singles;
  for (auto [target, body] : calls) {
    json single = body, item = body;
    single["key"] = "s" + body["key"].get<std::string>();
    item["key"] = "b" + body["key"].get<std::string>();
    item["op"] = target == "/v1/claims" ? "claim" : target == "/v1/claims/complete" ? "complete"
                                                                                     : "fail";
    singles.push_back(server.Post(target, single.dump()));
    items.push_back(item);
  }
  const json responses = server.Batch(items);
  ASSERT_EQ(responses.size(), calls.size());
  for (size_t i = 0; i < calls.size(); ++i) {
    EXPECT_EQ(responses[i]["status"], singles[i].status) << i << ": " << responses[i];
    EXPECT_EQ(strip(responses[i]), strip(json::parse(singles[i].body))) << i;
  }
}

TEST_P(ServeBatch, BadItemsAreTheirOwn400AndTheOthersAreDecided) {
  BatchServer server(StoreUrl(), dir_.path());
  const json responses = server.Batch(json::array({
      ClaimItem("ok-1"),
      {{"op", "claim"}, {"biz_type", "pay"}},
      {{"op", "refund"}, {"biz_type", "pay"}, {"key", "x"}},
      {{"biz_type", "pay"}, {"key", "x"}},
      json::array({1}),
      {{"op", "claim"}, {"biz_type", "pay"}, {"key", "w"}, {"wait_ms", 100}},
      {{"op", "complete"}, {"biz_type", "pay"}, {"key", "x"}, {"token", "1"}, {"result", 1}},
      {{"op", "claim"}, {"biz_type", "pay"}, {"key", "x"}, {"colour", "red"}},
      {{"op", "claim"}, {"biz_type", "pay"}, {"key", std::string(300, 'k')}},
      ClaimItem("ok-2"),
  }));
  ASSERT_EQ(responses.size(), 10u);
  const std::vector<std::pair<size_t, std::string>> bad = {
      {1, R"(requests[1]: field "key" is required)"},
      {2, R"(requests[2]: field "op" must be "claim", "complete" or "fail", got "refund")"},
      {3, R"(requests[3]: field "op" is required)"},
      {4, R"(requests[4]: must be a JSON object with "op")"},
      {5, R"(requests[5]: field "wait_ms" is not taken in a batch)"},
      {6, R"(requests[6]: field "token" must be an integer)"},
      {7, R"(requests[7]: field "colour" is not a known field)"},
      {8, R"(requests[8]: field "key": )"},
  };
  for (const auto& [i, detail] : bad) {
    EXPECT_EQ(responses[i]["status"], 400) << i;
    EXPECT_EQ(responses[i]["type"], "urn:idem:problem:invalid_request") << i;
    EXPECT_THAT(responses[i]["detail"].get<std::string>(), StartsWith(detail)) << i;
  }
  EXPECT_EQ(responses[0]["outcome"], "acquired");
  EXPECT_EQ(responses[9]["outcome"], "acquired");
  EXPECT_EQ(server.Get("/v1/records/pay/ok-2").status, 200);
  EXPECT_EQ(server.Get("/v1/records/pay/w").status, 404);  // refused: nothing written
}

TEST_P(ServeBatch, AMalformedEnvelopeDecidesNothing) {
  BatchServer server(StoreUrl(), dir_.path(), {"--max-body", "65536"});
  const std::string claim = ClaimItem("env").dump();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{", "request body is not valid JSON"},
      {"[" + claim + "]", "request body must be a JSON object"},
      {"{}", R"(field "requests" is required)"},
      {R"({"requests":)" + claim + "}", R"(field "requests" must be an array)"},
      {R"({"requests":[]})", R"(field "requests" must have at least one item)"},
      {R"({"requests":[)" + claim + R"(],"more":1})", R"(field "more" is not a known field)"},
      {R"({"requests":[)" + claim + R"(],"requests":[]})", R"(field "requests" appears more)"},
      {R"({"requests":[)" + claim + "]} x", "request body is not valid JSON"},
  };
  for (const auto& [body, detail] : cases) {
    testing::ClientResponse r = server.Post("/v1/claims/batch", body);
    EXPECT_EQ(r.status, 400) << body;
    EXPECT_THAT(json::parse(r.body)["detail"].get<std::string>(), StartsWith(detail)) << body;
  }
  // 1,001 items: the whole batch refused, its first (valid) item not decided.
  json many = json::array();
  for (int i = 0; i < 1001; ++i) many.push_back(ClaimItem("env"));
  testing::ClientResponse r = server.Post("/v1/claims/batch", json{{"requests", many}}.dump());
  EXPECT_EQ(r.status, 400);
  EXPECT_THAT(r.body, HasSubstr(R"(has more than 1000 items)"));
  // Over --max-body: 413, nothing decided.
  json big = json::array({ClaimItem("env"), CompleteItem("env", 1, std::string(70000, 'x'))});
  r = server.Post("/v1/claims/batch", json{{"requests", big}}.dump());
  EXPECT_EQ(r.status, 413) << r.body;
  EXPECT_EQ(server.Get("/v1/records/pay/env").status, 404);

  // 1,000 items is the limit, and a key repeated 1,000 times is decided in order.
  many.erase(many.begin());
  many[999 - 1] = CompleteItem("env", 1, "done");
  const json responses = server.Batch(many);
  ASSERT_EQ(responses.size(), 1000u);
  EXPECT_EQ(responses[0]["outcome"], "acquired");
  for (size_t i = 1; i < 998; ++i) ASSERT_EQ(responses[i]["outcome"], "in_progress") << i;
  EXPECT_EQ(responses[998]["outcome"], "completed");
  EXPECT_EQ(responses[999]["outcome"], "replayed");
}

TEST_P(ServeBatch, TheTokenNamesTheTenantOfEveryItem) {
  BatchServer server(StoreUrl(), dir_.path());
  EXPECT_EQ(server.Post("/v1/claims/batch", R"({"requests":[]})", "").status, 401);
  testing::ClientResponse r =
      server.Post("/v1/claims/batch", json{{"requests", {ClaimItem("shared")}}}.dump(), "nope");
  EXPECT_EQ(r.status, 401);
  EXPECT_EQ(r.header("www-authenticate"), R"(Bearer realm="idem", error="invalid_token")");
  EXPECT_EQ(server.Get("/v1/records/pay/shared").status, 404);  // nothing decided

  // The same key in two tenants is two records.
  EXPECT_EQ(server.Batch(json::array({ClaimItem("shared")}), "tok1")[0]["outcome"], "acquired");
  EXPECT_EQ(server.Batch(json::array({ClaimItem("shared")}), "tok2")[0]["outcome"], "acquired");
  // t2 cannot finish t1's claim from a batch (it finishes its own).
  EXPECT_EQ(server.Batch(json::array({CompleteItem("shared", 1, "t2")}), "tok2")[0]["outcome"],
            "completed");
  EXPECT_EQ(json::parse(server.Get("/v1/records/pay/shared", "tok1").body)["state"],
            "PROCESSING");
  // GET is not a batch.
  EXPECT_EQ(server.Get("/v1/claims/batch").status, 405);
}

TEST_P(ServeBatch, MetricsCountTheBatchAndItsItems) {
  BatchServer server(StoreUrl(), dir_.path());
  server.Batch(json::array({ClaimItem("m1"), ClaimItem("m1"), CompleteItem("m1", 1, 1),
                            FailItem("m2", 1, true, 1), json::array()}));
  server.Post("/v1/claims/batch", "{");
  const std::string metrics = server.Get("/metrics").body;
  EXPECT_THAT(metrics, HasSubstr(R"(idem_http_requests_total{route="/v1/claims/batch",status="200"} 1)"));
  EXPECT_THAT(metrics, HasSubstr(R"(idem_http_requests_total{route="/v1/claims/batch",status="400"} 1)"));
  EXPECT_THAT(metrics, HasSubstr("idem_batch_items_total{op=\"claim\"} 2\n"));
  EXPECT_THAT(metrics, HasSubstr("idem_batch_items_total{op=\"complete\"} 1\n"));
  EXPECT_THAT(metrics, HasSubstr("idem_batch_items_total{op=\"fail\"} 1\n"));
  EXPECT_THAT(metrics, HasSubstr("idem_batch_items_total{op=\"invalid\"} 1\n"));
  EXPECT_THAT(metrics, HasSubstr("idem_outcomes_total{outcome=\"acquired\"} 1\n"));
  EXPECT_THAT(metrics, HasSubstr("idem_outcomes_total{outcome=\"in_progress\"} 1\n"));
  EXPECT_THAT(metrics, HasSubstr("idem_outcomes_total{outcome=\"completed\"} 1\n"));
  EXPECT_THAT(metrics, HasSubstr("idem_outcomes_total{outcome=\"not_found\"} 1\n"));
}

TEST_P(ServeBatch, EveryItemOfAnAnsweredBatchSurvivesKillNine) {
  BatchServer server(StoreUrl(), dir_.path());
  json claims = json::array(), completes = json::array();
  for (int i = 0; i < 100; ++i) {
    claims.push_back(ClaimItem("k" + std::to_string(i)));
    if (i % 2 == 0) completes.push_back(CompleteItem("k" + std::to_string(i), 1, i));
  }
  for (const json& r : server.Batch(claims)) ASSERT_EQ(r["outcome"], "acquired") << r;
  for (const json& r : server.Batch(completes)) ASSERT_EQ(r["outcome"], "completed") << r;
  server.KillAndRestart();
  for (int i = 0; i < 100; ++i) {
    testing::ClientResponse rec = server.Get("/v1/records/pay/k" + std::to_string(i));
    ASSERT_EQ(rec.status, 200) << i << ": " << rec.body;
    const json record = json::parse(rec.body);
    EXPECT_EQ(record["token"], 1) << i;
    EXPECT_EQ(record["state"], i % 2 == 0 ? "SUCCEEDED" : "PROCESSING") << i;
    if (i % 2 == 0) {
      EXPECT_EQ(record["result"], i) << i;
    }
  }
  EXPECT_EQ(server.process().Stop(), 0);
}


// Items of one key see each other in order, whatever they do to it: the one
// transaction's reads see its own writes on rocksdb://.
TEST_P(ServeBatch, ItemsOfOneKeySeeTheItemsBeforeThem) {
  BatchServer server(StoreUrl(), dir_.path());
  json claim = ClaimItem("same"), other = ClaimItem("same");
  claim["fingerprint"] = "f1";
  other["fingerprint"] = "f2";
  const json responses = server.Batch(json::array({
      claim,                                   // 0: acquired, token 1
      claim,                                   // 1: in_progress (the claim of item 0)
      other,                                   // 2: fingerprint_mismatch
      FailItem("same", 1, true, "retry"),      // 3: released
      claim,                                   // 4: acquired again, token 2
      CompleteItem("same", 1, "stale"),        // 5: lease_lost (token 1 is not the holder)
      CompleteItem("same", 2, {{"ok", true}}),  // 6: completed
      claim,                                   // 7: replayed
  }));
  ASSERT_EQ(responses.size(), 8u);
  EXPECT_EQ(responses[0]["outcome"], "acquired");
  EXPECT_EQ(responses[0]["token"], 1);
  EXPECT_EQ(responses[1]["status"], 409);
  EXPECT_EQ(responses[1]["outcome"], "in_progress");
  EXPECT_EQ(responses[1]["lease_until"], responses[0]["lease_until"]);
  EXPECT_EQ(responses[2]["status"], 422);
  EXPECT_EQ(responses[2]["outcome"], "fingerprint_mismatch");
  EXPECT_EQ(responses[3], json::parse(R"({"status":200,"outcome":"released"})"));
  EXPECT_EQ(responses[4]["status"], 201);
  EXPECT_EQ(responses[4]["token"], 2);
  EXPECT_EQ(responses[5]["status"], 409);
  EXPECT_EQ(responses[5]["outcome"], "lease_lost");
  EXPECT_EQ(responses[6], json::parse(R"({"status":200,"outcome":"completed"})"));
  EXPECT_EQ(responses[7], json::parse(R"({"status":200,"outcome":"replayed","expires_at":null,)"
                                      R"("result":{"ok":true}})"));
  const json record = json::parse(server.Get("/v1/records/pay/same").body);
  EXPECT_EQ(record["state"], "SUCCEEDED");
  EXPECT_EQ(record["token"], 2);
}

// Many keys, each claimed, completed and claimed again in one batch, then claimed
// again with new keys in the next: each item sees its key's items before it, and
// the next batch reads what the first wrote.
TEST_P(ServeBatch, ManyKeysEachRepeatedInOneBatch) {
  BatchServer server(StoreUrl(), dir_.path());
  constexpr int kKeys = 30;
  json first = json::array(), second = json::array();
  for (int i = 0; i < kKeys; ++i) first.push_back(ClaimItem("m" + std::to_string(i)));
  for (int i = 0; i < kKeys; ++i) first.push_back(CompleteItem("m" + std::to_string(i), 1, i));
  for (int i = 0; i < kKeys; ++i) first.push_back(ClaimItem("m" + std::to_string(i)));
  const json answers = server.Batch(first);
  ASSERT_EQ(answers.size(), size_t{3 * kKeys});
  for (int i = 0; i < kKeys; ++i) {
    EXPECT_EQ(answers[i]["outcome"], "acquired") << i;
    EXPECT_EQ(answers[kKeys + i]["outcome"], "completed") << i;
    EXPECT_EQ(answers[2 * kKeys + i]["outcome"], "replayed") << i;
    EXPECT_EQ(answers[2 * kKeys + i]["result"], i) << i;
  }
  for (int i = 0; i < kKeys; ++i) {
    second.push_back(ClaimItem("m" + std::to_string(i)));
    second.push_back(ClaimItem("n" + std::to_string(i)));
  }
  const json again = server.Batch(second);
  ASSERT_EQ(again.size(), size_t{2 * kKeys});
  for (int i = 0; i < kKeys; ++i) {
    EXPECT_EQ(again[2 * i]["outcome"], "replayed") << i;
    EXPECT_EQ(again[2 * i]["result"], i) << i;
    EXPECT_EQ(again[2 * i + 1]["outcome"], "acquired") << i;
  }
}

// A bad item between two items of a key is its own 400; the key's items around it
// are decided in order as if it were not there.
TEST_P(ServeBatch, ABadItemAmongGoodOnesStopsNothing) {
  BatchServer server(StoreUrl(), dir_.path());
  const json responses = server.Batch(json::array({
      ClaimItem("g1"),
      {{"op", "complete"}, {"biz_type", "pay"}, {"key", "g1"}, {"result", 1}},  // no token
      ClaimItem("g2"),
      CompleteItem("g1", 1, 5),
      {{"op", "claim"}, {"biz_type", "pay"}, {"key", "g2"}, {"lease_ms", 1}},  // too short
      ClaimItem("g1"),
  }));
  ASSERT_EQ(responses.size(), 6u);
  EXPECT_EQ(responses[0]["outcome"], "acquired");
  EXPECT_EQ(responses[1]["status"], 400);
  EXPECT_THAT(responses[1]["detail"].get<std::string>(), StartsWith("requests[1]: field \"token\""));
  EXPECT_EQ(responses[2]["outcome"], "acquired");
  EXPECT_EQ(responses[3]["outcome"], "completed");
  EXPECT_EQ(responses[4]["status"], 400);
  EXPECT_THAT(responses[4]["detail"].get<std::string>(), StartsWith("requests[4]: field \"lease_ms\""));
  EXPECT_EQ(responses[5]["outcome"], "replayed");
  EXPECT_EQ(responses[5]["result"], 5);
}

// Batches and single calls from other connections claim and complete the same keys
// at once: each key is acquired exactly once, and every other answer is the one
// its key's state gave: in_progress with the winner's lease, or the winner's result
// replayed. On rocksdb:// a batch meeting a key a single call holds leaves that key's
// items to the per-item path; none is decided twice.
TEST_P(ServeBatch, BatchesRacingSingleCallsDecideEveryKeyOnce) {
  BatchServer server(StoreUrl(), dir_.path());
  constexpr int kRounds = 15;
  constexpr int kKeys = 40;
  std::mutex mu;
  std::map<std::string, std::vector<json>> answers;  // key → every claim's answer
  std::map<std::string, int> completed;              // key → completes answered 200
  auto record = [&](const std::string& key, const json& answer) {
    std::lock_guard<std::mutex> lock(mu);
    answers[key].push_back(answer);
  };
  auto key_of = [](int round, int i) { return "race" + std::to_string(round) + "-" + std::to_string(i); };
  auto single = [&](bool reverse) {
    for (int round = 0; round < kRounds; ++round) {
      for (int n = 0; n < kKeys; ++n) {
        const std::string key = key_of(round, reverse ? kKeys - 1 - n : n);
        testing::ClientResponse r =
            server.Post("/v1/claims", json{{"biz_type", "pay"}, {"key", key}}.dump());
        json answer = json::parse(r.body, nullptr, false);
        if (answer.is_object()) answer["status"] = r.status;
        record(key, answer);
        if (r.status != 201) continue;
        testing::ClientResponse done = server.Post(
            "/v1/claims/complete",
            json{{"biz_type", "pay"}, {"key", key}, {"token", 1}, {"result", key}}.dump());
        std::lock_guard<std::mutex> lock(mu);
        if (done.status == 200) ++completed[key];
      }
    }
  };
  auto batch = [&](bool reverse) {
    for (int round = 0; round < kRounds; ++round) {
      json items = json::array();
      std::vector<std::string> keys;
      for (int n = 0; n < kKeys; ++n) {
        keys.push_back(key_of(round, reverse ? kKeys - 1 - n : n));
        items.push_back(ClaimItem(keys.back()));
      }
      const json responses = server.Batch(items);
      json completes = json::array();
      std::vector<std::string> won;
      for (size_t i = 0; i < responses.size(); ++i) {
        record(keys[i], responses[i]);
        if (responses[i]["status"] == 201) {
          won.push_back(keys[i]);
          completes.push_back(CompleteItem(keys[i], 1, keys[i]));
        }
      }
      if (completes.empty()) continue;
      const json done = server.Batch(completes);
      std::lock_guard<std::mutex> lock(mu);
      for (size_t i = 0; i < done.size(); ++i) {
        if (done[i]["status"] == 200) ++completed[won[i]];
      }
    }
  };
  {
    std::vector<std::thread> racers;
    racers.emplace_back(single, false);
    racers.emplace_back(single, true);
    racers.emplace_back(batch, false);
    racers.emplace_back(batch, true);
    for (std::thread& t : racers) t.join();
  }
  ASSERT_EQ(answers.size(), size_t{kRounds * kKeys});
  for (const auto& [key, list] : answers) {
    ASSERT_EQ(list.size(), 4u) << key;
    const json* winner = nullptr;
    for (const json& a : list) {
      if (a["status"] == 201) {
        EXPECT_EQ(winner, nullptr) << key << " acquired twice: " << json(list);
        winner = &a;
      }
    }
    ASSERT_NE(winner, nullptr) << key << ": " << json(list);
    EXPECT_EQ((*winner)["token"], 1) << key;
    EXPECT_EQ(completed[key], 1) << key;
    for (const json& a : list) {
      if (&a == winner) continue;
      if (a["status"] == 409) {
        EXPECT_EQ(a["outcome"], "in_progress") << key << ": " << a;
        EXPECT_EQ(a["lease_until"], (*winner)["lease_until"]) << key << ": " << a;
      } else {
        EXPECT_EQ(a, json::parse(R"({"status":200,"outcome":"replayed","expires_at":null,)"
                                 R"("result":")" + key + R"("})"))
            << key;
      }
    }
    const json stored = json::parse(server.Get("/v1/records/pay/" + key).body);
    EXPECT_EQ(stored["state"], "SUCCEEDED") << key;
    EXPECT_EQ(stored["token"], 1) << key;
  }
}

INSTANTIATE_TEST_SUITE_P(Stores, ServeBatch, ::testing::Values("rocksdb", "sqlite"),
                         [](const auto& info) { return info.param; });


// The server kills itself at a stage of its durable write while batches claim fresh
// keys and complete the keys the batch before claimed: after a restart every item
// answered acquired or completed is there, and the batch whose answer never came
// is there whole or not at all (its one WriteBatch).
TEST(ServeBatchKill, EveryAcknowledgedItemSurvivesAKillAtEachWriteStage) {
  for (const std::string stage :
       {"rocksdb.after_decide", "rocksdb.wal.before_sync", "rocksdb.after_write"}) {
    SCOPED_TRACE(stage);
    idem::testing::TempDir dir;
    BatchServer server("rocksdb://" + dir.file("db"), dir.path());
    // Started again with the failpoint armed; the restart after the kill without.
    server.SetEnv({{"IDEM_FAILPOINTS", stage + "=kill@6"}});
    server.KillAndRestart();
    std::map<std::string, int> acquired;  // key → token acknowledged
    std::map<std::string, int> finished;  // key → result acknowledged
    std::vector<std::string> unanswered;  // the claims of the batch never answered
    std::vector<std::string> previous;
    for (int batch = 0; batch < 100; ++batch) {
      json items = json::array();
      std::vector<std::string> keys;
      for (int i = 0; i < 50; ++i) {
        keys.push_back("b" + std::to_string(batch) + "-" + std::to_string(i));
        items.push_back(ClaimItem(keys.back()));
      }
      for (size_t i = 0; i < previous.size(); ++i) {
        items.push_back(CompleteItem(previous[i], 1, static_cast<int>(i)));
      }
      testing::ClientResponse r =
          server.Post("/v1/claims/batch", json{{"requests", items}}.dump());
      if (r.status != 200) {
        unanswered = keys;
        break;
      }
      const json responses = json::parse(r.body)["responses"];
      ASSERT_EQ(responses.size(), items.size());
      for (size_t i = 0; i < keys.size(); ++i) {
        ASSERT_EQ(responses[i]["outcome"], "acquired") << responses[i];
        acquired[keys[i]] = responses[i]["token"];
      }
      for (size_t i = 0; i < previous.size(); ++i) {
        ASSERT_EQ(responses[keys.size() + i]["outcome"], "completed");
        finished[previous[i]] = static_cast<int>(i);
      }
      previous = keys;
    }
    ASSERT_FALSE(unanswered.empty()) << "the server never died at the stage";
    server.RestartAfterItDied();
    for (const auto& [key, token] : acquired) {
      testing::ClientResponse rec = server.Get("/v1/records/pay/" + key);
      ASSERT_EQ(rec.status, 200) << key << ": " << rec.body;
      const json stored = json::parse(rec.body);
      EXPECT_EQ(stored["token"], token) << key;
      if (finished.contains(key)) {
        EXPECT_EQ(stored["state"], "SUCCEEDED") << key;
        EXPECT_EQ(stored["result"], finished[key]) << key;
      }
    }
    size_t there = 0;
    for (const std::string& key : unanswered) {
      there += server.Get("/v1/records/pay/" + key).status == 200 ? 1 : 0;
    }
    EXPECT_TRUE(there == 0 || there == unanswered.size()) << there << " of the lost batch";
    EXPECT_EQ(server.process().Stop(), 0);
  }
}

#else  // IDEM_BATCH_POSTGRES

TEST(ServeBatchPostgres, MixedItemsAreDecidedInOrderAsTheirSingleCalls) {
  const char* url = std::getenv("IDEM_TEST_POSTGRES_URL");
  ASSERT_TRUE(url != nullptr && *url != '\0')
      << "IDEM_TEST_POSTGRES_URL is not set: run under scripts/test.sh (scripts/services.sh)";
  idem::testing::TempDir dir;
  BatchServer server(url, dir.path());
  ExpectMixedBatchDecidedInOrder(server);
}

#endif  // IDEM_BATCH_POSTGRES

}  // namespace
}  // namespace idem::http
