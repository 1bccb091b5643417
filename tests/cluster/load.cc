#include "cluster/load.h"

#include <cstdlib>
#include <memory>
#include <set>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "http/client.h"
#include "nlohmann/json.hpp"
#include "testing/wait_until.h"

namespace idem::cluster_testing {
namespace {

using chaos::Clock;
using chaos::OpKind;
using chaos::Operation;
using http::testing::ClientResponse;
using json = nlohmann::json;

// One keep-alive connection per server, reopened after a transport error.
class Connections {
 public:
  explicit Connections(const std::vector<uint16_t>& ports) : ports_(ports), conns_(ports.size()) {}

  ClientResponse Post(size_t server, const std::string& target, const std::string& body,
                      const std::string& token) {
    std::unique_ptr<http::testing::Client>& c = conns_[server];
    if (!c) c = std::make_unique<http::testing::Client>(ports_[server]);
    ClientResponse r = c->Send("POST", target, body, token);
    if (r.status == 0 || !r.keep_alive) c.reset();
    return r;
  }

 private:
  const std::vector<uint16_t> ports_;
  std::vector<std::unique_ptr<http::testing::Client>> conns_;
};

std::string ClaimBody(const LoadOptions& o, const std::string& key) {
  return json{{"biz_type", o.biz_type}, {"key", key}, {"lease_ms", o.lease_ms}}.dump();
}

}  // namespace

Load::Load(LoadOptions options, chaos::History* history, chaos::EffectLog* effects)
    : options_(std::move(options)), history_(history), effects_(effects) {}

int64_t LoadTailOperations() {
  const char* env = std::getenv("IDEM_CLUSTER_LOAD_OPS");
  const int64_t n = env != nullptr ? std::atoll(env) : 0;
  return n > 0 ? n : 150;
}

void FinishLoad(const std::atomic<int64_t>& operations, std::atomic<bool>& stop,
                std::thread& runner) {
  const int64_t from = operations.load();
  const int64_t tail = LoadTailOperations();
  testing::WaitUntil([&] { return operations.load() >= from + tail; },
                     std::chrono::seconds(15 + tail / 20));
  stop = true;
  runner.join();
}

std::string Load::Key(int i) const { return absl::StrCat(options_.key_prefix, "-", i); }

void Load::Run(std::atomic<int64_t>* operations, const std::atomic<bool>* stop) {
  std::vector<std::thread> threads;
  for (int c = 0; c < options_.clients; ++c) {
    threads.emplace_back([this, c, operations, stop] { Client(c, operations, stop); });
  }
  for (std::thread& t : threads) t.join();
}

void Load::Client(int id, std::atomic<int64_t>* operations, const std::atomic<bool>* stop) {
  const LoadOptions& o = options_;
  const auto deadline = Clock::now() + o.deadline;
  Connections conns(o.ports);
  size_t server = static_cast<size_t>(id) % o.ports.size();
  const int pairs = std::max(1, o.clients / 2);
  const int start = (id / 2) * o.keys / pairs;

  // Sends one request and records it; a 503 or a lost answer moves this client to
  // the next server.
  auto send = [&](OpKind kind, const std::string& key, const std::string& target,
                  const std::string& body, int64_t token, const std::string& result) {
    Operation op;
    op.client = id;
    op.key = key;
    op.kind = kind;
    op.token = token;
    op.result = result;
    op.lease_ms = kind == OpKind::kClaim ? o.lease_ms : 0;
    op.invoke = Clock::now();
    ClientResponse r = conns.Post(server, target, body, o.token);
    op.complete = Clock::now();
    chaos::FillAnswer(&op, r.status, r.body, r.status == 0 ? r.error : "");
    if (r.status == 0 && op.error.empty()) op.error = "no answer";
    history_->Record(op);
    operations->fetch_add(1);
    if (r.status == 0 || r.status == 503) server = (server + 1) % o.ports.size();
    return op;
  };
  // A client's pause before it retries (the load's pace).
  auto pause = [](int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); };

  for (int n = 0; n < o.keys && Clock::now() < deadline && !stop->load(); ++n) {
    const std::string key = Key((start + n) % o.keys);
    bool done = false;
    while (!done && Clock::now() < deadline) {
      Operation claim = send(OpKind::kClaim, key, "/v1/claims", ClaimBody(o, key), 0, "");
      if (claim.status == 200) break;  // replayed (or a cached failure): decided
      if (claim.status == 409 && claim.error == "in_progress") {
        pause(25);
        continue;
      }
      if (claim.status != 201) {
        pause(claim.status == 0 || claim.status == 503 ? 50 : 200);
        continue;
      }
      // The effect, on disk before the complete is sent.
      chaos::Effect effect{.key = key, .token = claim.token, .client = id, .at = Clock::now()};
      if (!effects_->Append(effect).ok()) return;  // the log is broken: stop recording
      const std::string result =
          json{{"client", id}, {"token", claim.token}, {"key", key}}.dump();
      const std::string body = json{{"biz_type", o.biz_type}, {"key", key},
                                    {"token", claim.token}, {"result", json::parse(result)}}
                                   .dump();
      for (int attempt = 0; attempt < 40 && Clock::now() < deadline; ++attempt) {
        Operation complete =
            send(OpKind::kComplete, key, "/v1/claims/complete", body, claim.token, result);
        if (complete.status == 200) {
          done = true;
          break;
        }
        if (complete.status != 0 && complete.status != 503) break;  // lease_lost: claim again
        pause(50);
      }
    }
  }
}

void Load::FinalReads(uint16_t port, std::chrono::seconds patience) {
  Connections conns({port});
  std::set<std::string> keys;
  for (const Operation& op : history_->Operations()) keys.insert(op.key);
  for (const std::string& key : keys) {
    const auto give_up = Clock::now() + patience;
    while (true) {
      Operation op;
      op.key = key;
      op.kind = OpKind::kReplay;
      op.client = -1;
      op.lease_ms = options_.lease_ms;
      op.invoke = Clock::now();
      ClientResponse r = conns.Post(0, "/v1/claims", ClaimBody(options_, key), options_.token);
      op.complete = Clock::now();
      chaos::FillAnswer(&op, r.status, r.body, r.status == 0 ? r.error : "");
      const bool again = r.status == 0 || r.status == 503 || (r.status == 409 && op.error == "in_progress");
      if (!again || Clock::now() >= give_up) {
        history_->Record(op);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));  // a retrying client's pace
    }
  }
}

}  // namespace idem::cluster_testing
