// Listener: a thread with a connection of its own that LISTENs on one PostgreSQL
// channel and hands each notification's payload to a callback. PostgresStore uses
// it for Store::SubscribeFinished: a process whose claims wait on a key learns at
// once that another process completed or failed it (NOTIFY is sent in the
// finishing transaction and delivered at its commit).
//
// A lost connection is reopened with a backoff (1 s, then up to 30 s); what was
// notified in between is missed, which is why waiters keep polling, slowly, beside
// it (http::Api::Poll): a notification only makes the next poll come at once.
//
// Thread safety: the callback runs on the listener's thread, one call at a time;
// it must be quick. Destroying the Listener stops and joins the thread.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "store/postgres/pg_conn.h"

namespace idem::postgres {

class Listener {
 public:
  using OnPayload = std::function<void(std::string_view payload)>;

  // Starts listening on `channel` (an SQL identifier, not quoted) through a
  // connection made from `spec`. Never fails: connecting is retried on the thread.
  Listener(ConnectSpec spec, std::string channel, OnPayload on_payload);
  ~Listener();
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;

  // For tests: true once LISTEN has run on the current connection.
  bool listening() const { return listening_.load(); }

 private:
  void Run();
  // Waits up to `ms` for input on `fd` or for Stop; false when stopping.
  bool Wait(int fd, int ms);

  const ConnectSpec spec_;
  const std::string channel_;
  const OnPayload on_payload_;
  int wake_[2] = {-1, -1};  // a pipe: the destructor writes to it to stop Run
  std::atomic<bool> stop_{false};
  std::atomic<bool> listening_{false};
  std::thread thread_;
};

}  // namespace idem::postgres
