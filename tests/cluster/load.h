// The client load of the `cluster` tests: N client threads claim, perform an
// effect, and complete a shared set of keys through one or more `idem serve`
// processes, recording every operation in a chaos History (tests/chaos/history.h)
// and every effect in an EffectLog, so that chaos::Check judges the run.
//
// Each key is worked on by two clients at once that talk to different servers
// (clients 2i and 2i+1 walk the keys in the same order, from different starting
// points per pair), so every key sees a claim race across servers, i.e. across
// database nodes on Galera. A client retries what the API says to retry: 409
// in_progress (shortly after), 503 and a lost answer (on the next server in the
// list: the load balancer of a real deployment); a complete that got no answer is
// sent again with the same token and result before the client claims again. A key
// is done for a client once its complete was answered 200 or a claim replayed a
// result.
//
// Thread safety: Run() blocks and uses its own threads; one Run per Load at a time.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "chaos/effect_log.h"
#include "chaos/history.h"

namespace idem::cluster_testing {

struct LoadOptions {
  std::vector<uint16_t> ports;  // the `idem serve` processes, at least one
  int clients = 8;
  // The key space; a run normally ends by Run's `stop` long before it is used up.
  int keys = 100000;
  std::string key_prefix = "k";
  std::string biz_type = "pay";
  std::string token = "tok";  // the tenant's bearer token
  int lease_ms = 1500;
  // Each client stops when this passes even with keys left (the checker then
  // reports them as not converged).
  std::chrono::seconds deadline{60};
};

// How many operations the load runs on after the last fault before a test stops
// it: $IDEM_CLUSTER_LOAD_OPS (bench/cluster.sh sets it for long runs), else 150.
int64_t LoadTailOperations();

// After the last fault: lets the load run LoadTailOperations() more operations
// (for a bounded time), then sets `stop` and joins `runner` (the thread in Run).
void FinishLoad(const std::atomic<int64_t>& operations, std::atomic<bool>& stop,
                std::thread& runner);

class Load {
 public:
  // `history` and `effects` must outlive the Load.
  Load(LoadOptions options, chaos::History* history, chaos::EffectLog* effects);

  // Runs the clients until `stop` is set (each client finishes the key it works
  // on), every key is done, or the deadline passes. `operations` counts finished
  // operations as they happen (for a test that injects faults while the load runs).
  void Run(std::atomic<int64_t>* operations, const std::atomic<bool>* stop);

  // The final reads (chaos OpKind::kReplay): claims each key the history holds once
  // more on `port`, faults healed, retrying 409 in_progress and 503 for up to
  // `patience` per key; records the last answer of each key.
  void FinalReads(uint16_t port, std::chrono::seconds patience = std::chrono::seconds(20));

 private:
  void Client(int id, std::atomic<int64_t>* operations, const std::atomic<bool>* stop);
  std::string Key(int i) const;

  const LoadOptions options_;
  chaos::History* const history_;
  chaos::EffectLog* const effects_;
};

}  // namespace idem::cluster_testing
