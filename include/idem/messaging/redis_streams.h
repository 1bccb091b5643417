// RedisStreamsTransport: the Transport (idem/messaging/transport.h) over a Redis stream and
// a consumer group, through hiredis.
//
//   auto t = RedisStreamsTransport::Open({.url = "redis://127.0.0.1:6379",
//                                         .stream = "orders", .group = "refunds",
//                                         .consumer = "refunds-1"});
//   auto batch = (*t)->Poll(100, std::chrono::milliseconds(500));
//   ... run each message's effect through the guard, commit the store ...
//   (*t)->Commit(*batch);                                    // XACK
//
// Delivery is at least once. Poll() hands out, in this order:
//  1. this consumer's own pending entries (delivered before, never acknowledged;
//     XREADGROUP from id 0), once after Open(): a consumer restarted under the same
//     name resumes what it had not finished;
//  2. entries any consumer of the group left pending for at least claim_min_idle
//     (XAUTOCLAIM): a consumer that died with pending entries does not strand them;
//     each poll that claims entries is told to the listener as a Rebalance kAssigned
//     of the stream;
//  3. new entries (XREADGROUP >), waiting up to the poll's timeout.
// The group is created (XGROUP CREATE ... MKSTREAM, from `start_id`) when missing.
// Nothing is ever revoked: a consumer whose entries another one claimed is not told
// (Redis does not say); both may run such an entry, the guard makes the second run
// a replay, and either one's XACK acknowledges it for the group.
// Every handed-out entry carries its delivery count (XPENDING); an entry delivered
// more than max_deliveries times is not handed out again but dead-lettered with the
// reason, so a message that kills its consumer cannot loop forever.
//
// An entry's fields become Message::headers, in order, except `payload_field`, whose
// value is Message::payload (and `key_field`, if set, is also Message::key).
// DeadLetter() XADDs the entry's fields to `dead_letter_stream` with
// idem-reason, idem-original-stream, idem-original-id and idem-deliveries, and XACKs
// the original, in one MULTI/EXEC.
//
// Errors: kUnavailable when the server cannot be reached, drops the connection,
// does not answer within the timeouts, or refuses for a passing reason (LOADING,
// OOM, ...); the connection is dropped and the next call reconnects.
// kFailedPrecondition for what retrying cannot fix: a wrong password, no permission,
// a key of another type than stream. No message carries the password.
//
// Thread safety: not safe for concurrent use; one runner thread at a time (the
// Transport contract). The listener runs on the calling thread, inside Poll().
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "idem/clock.h"
#include "idem/messaging/transport.h"

struct redisContext;  // hiredis

namespace idem::messaging {

struct RedisStreamsOptions {
  std::string url;       // redis://[:password@]host[:port][/db]
  std::string stream;    // the stream read
  std::string group;     // the consumer group
  std::string consumer;  // this consumer's name in the group; unique per running consumer
  std::string payload_field = "payload";  // "" = every field is a header
  std::string key_field;                  // "" = Message::key stays empty
  std::string dead_letter_stream;         // "" = `stream` + ":dead-letter"
  // Where a group created here starts: "0" = the whole stream, "$" = new entries only.
  std::string start_id = "0";
  int64_t max_deliveries = 5;  // an entry delivered more often is dead-lettered
  // Entries pending this long (on any consumer of the group) are claimed.
  absl::Duration claim_min_idle = absl::Seconds(30);
  // XAUTOCLAIM runs at most this often (0: on every Poll).
  absl::Duration claim_interval = absl::Seconds(1);
  absl::Duration connect_timeout = absl::Seconds(1);
  absl::Duration command_timeout = absl::Seconds(2);  // added to a poll's wait
  const Clock* clock = Clock::Real();                 // not owned; must outlive the transport
};

class RedisStreamsTransport : public Transport {
 public:
  // Checks `options` and connects (creating the group when it is missing).
  // kInvalidArgument for a malformed URL or a missing stream/group/consumer or
  // max_deliveries < 1; kUnavailable / kFailedPrecondition as above. Blocks for at
  // most connect_timeout + command_timeout.
  static absl::StatusOr<std::unique_ptr<RedisStreamsTransport>> Open(RedisStreamsOptions options);

  ~RedisStreamsTransport() override;
  RedisStreamsTransport(const RedisStreamsTransport&) = delete;
  RedisStreamsTransport& operator=(const RedisStreamsTransport&) = delete;

  // Transport. Poll() may also dead-letter entries past max_deliveries (and deleted
  // entries still pending) on the way; those are not returned. Commit() ignores
  // messages of other sources. Each call blocks for at most its wait plus
  // connect_timeout + command_timeout per round trip.
  absl::StatusOr<std::vector<Message>> Poll(size_t max, std::chrono::milliseconds timeout) override;
  absl::Status Commit(const std::vector<Message>& done) override;
  absl::Status DeadLetter(const Message& message, std::string_view reason) override;
  void SetRebalanceListener(RebalanceListener listener) override;
  std::string_view name() const override { return "redis-streams"; }

  const RedisStreamsOptions& options() const { return options_; }
  // The stream DeadLetter() writes to.
  const std::string& dead_letter_stream() const { return options_.dead_letter_stream; }

 private:
  struct Address;
  struct Reply;
  class Connection;

  RedisStreamsTransport(RedisStreamsOptions options, std::unique_ptr<Address> address);

  // Connects when there is no connection, and creates the group when needed.
  absl::Status Ensure();
  // What a failed call leaves: the connection is dropped on an I/O error.
  absl::Status Failed(absl::Status s);
  absl::StatusOr<std::vector<Message>> ReadOwnPending(size_t max);
  absl::StatusOr<std::vector<Message>> Claim(size_t max);
  absl::StatusOr<std::vector<Message>> ReadNew(size_t max, std::chrono::milliseconds timeout);
  // Sets each message's delivery count, and dead-letters (and drops from `batch`)
  // those past max_deliveries and those whose entry was deleted.
  absl::Status CountDeliveries(std::vector<Message>& batch);
  absl::Status DeadLetterNow(const Message& message, std::string_view reason);

  RedisStreamsOptions options_;
  std::unique_ptr<Address> address_;
  std::unique_ptr<Connection> conn_;  // null: reconnect on the next call
  bool group_ready_ = false;
  bool own_pending_done_ = false;  // step 1 of Poll is over
  std::string own_pending_cursor_ = "0";
  std::string claim_cursor_ = "0-0";
  absl::Time last_claim_ = absl::InfinitePast();
  bool announced_ = false;  // the first assignment was told to the listener
  RebalanceListener listener_;
};

}  // namespace idem::messaging
