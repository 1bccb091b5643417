#include "idem/messaging/redis_streams.h"

#include <hiredis/hiredis.h>
#include <sys/time.h>

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/absl_compat.h"
#include "idem/status.h"
#include "store/redis/redis_client.h"
#include "store/store_url.h"

namespace idem::messaging {
namespace {

struct ReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using ReplyPtr = std::unique_ptr<redisReply, ReplyDeleter>;

timeval AsTimeval(absl::Duration d) { return absl::ToTimeval(std::max(d, absl::Milliseconds(1))); }

std::string Str(const redisReply* r) {
  if (r == nullptr || (r->type != REDIS_REPLY_STRING && r->type != REDIS_REPLY_STATUS &&
                       r->type != REDIS_REPLY_ERROR)) {
    return "";
  }
  return std::string(r->str, r->len);
}

bool IsArray(const redisReply* r) { return r != nullptr && r->type == REDIS_REPLY_ARRAY; }

// The errors no retry fixes: a wrong password, missing permission, a key that is
// not a stream. Everything else a server refuses with (LOADING, OOM, BUSY, ...)
// passes.
bool IsFatalReply(std::string_view error) {
  for (std::string_view prefix : {"WRONGPASS", "NOAUTH", "NOPERM", "WRONGTYPE"}) {
    if (error.starts_with(prefix)) return true;
  }
  return false;
}

// A name CLIENT SETNAME accepts (no spaces or control bytes).
std::string ClientName(std::string_view consumer) {
  std::string name = "idem-streams:";
  for (char c : consumer) name += (c > ' ' && c < 0x7f) ? c : '_';
  return name;
}

int64_t IdMillis(std::string_view id) {
  int64_t ms = 0;
  const size_t dash = id.find('-');
  if (!absl::SimpleAtoi(AV(id.substr(0, dash)), &ms)) return 0;
  return ms;
}

}  // namespace

struct RedisStreamsTransport::Address {
  redis::RedisAddress redis;
  std::string where;  // host:port, for messages
};

// One hiredis connection. Errors carry `where`, never the password (the caller
// redacts too, in case a server quotes it).
class RedisStreamsTransport::Connection {
 public:
  static absl::StatusOr<std::unique_ptr<Connection>> Open(const Address& a,
                                                          const RedisStreamsOptions& o) {
    redisContext* raw =
        redisConnectWithTimeout(a.redis.host.c_str(), a.redis.port, AsTimeval(o.connect_timeout));
    if (raw == nullptr) return absl::UnavailableError("redis-streams: cannot allocate a context");
    std::unique_ptr<Connection> c(new Connection(raw, a.where, o.command_timeout));
    if (raw->err != 0) {
      return absl::UnavailableError(
          absl::StrCat("redis-streams: connect to ", a.where, ": ", raw->errstr));
    }
    if (redisSetTimeout(raw, AsTimeval(o.command_timeout)) != REDIS_OK) {
      return absl::UnavailableError("redis-streams: cannot set the command timeout");
    }
    if (!a.redis.password.empty()) {
      absl::Status auth = c->Run({"AUTH", a.redis.password}).status();
      // A refused AUTH (wrong password, none configured) is the configuration's fault.
      if (!auth.ok() && !c->broken()) {
        return absl::FailedPreconditionError(
            absl::StrCat("redis-streams: ", a.where, ": authentication refused"));
      }
      IDEM_RETURN_IF_ERROR(auth);
    }
    if (a.redis.db != 0)
      IDEM_RETURN_IF_ERROR(c->Run({"SELECT", std::to_string(a.redis.db)}).status());
    IDEM_RETURN_IF_ERROR(c->Run({"CLIENT", "SETNAME", ClientName(o.consumer)}).status());
    return c;
  }

  ~Connection() { redisFree(c_); }

  // Runs one command; `wait` is added to the reply timeout (a BLOCKing read).
  absl::StatusOr<ReplyPtr> Run(const std::vector<std::string>& args,
                               absl::Duration wait = absl::ZeroDuration()) {
    IDEM_ASSIGN_OR_RETURN(std::vector<ReplyPtr> replies, Pipeline({args}, wait));
    return std::move(replies.front());
  }

  // Sends `commands` in one write and reads their replies, in order. A refusal of
  // any of them is the error (the others still ran).
  absl::StatusOr<std::vector<ReplyPtr>> Pipeline(
      const std::vector<std::vector<std::string>>& commands,
      absl::Duration wait = absl::ZeroDuration()) {
    if (broken_) return absl::UnavailableError(absl::StrCat("redis-streams: ", where_, ": closed"));
    for (const std::vector<std::string>& args : commands) {
      std::vector<const char*> argv;
      std::vector<size_t> lens;
      for (const std::string& s : args) {
        argv.push_back(s.data());
        lens.push_back(s.size());
      }
      if (redisAppendCommandArgv(c_, static_cast<int>(argv.size()), argv.data(), lens.data()) !=
          REDIS_OK) {
        return Broken();
      }
    }
    if (wait > absl::ZeroDuration()) redisSetTimeout(c_, AsTimeval(timeout_ + wait));
    std::vector<ReplyPtr> replies;
    std::string refused;
    std::string refused_command;
    nogroup_ = false;
    for (size_t i = 0; i < commands.size(); ++i) {
      void* raw = nullptr;
      if (redisGetReply(c_, &raw) != REDIS_OK || raw == nullptr) return Broken();
      ReplyPtr reply(static_cast<redisReply*>(raw));
      if (reply->type == REDIS_REPLY_ERROR && refused.empty()) {
        refused = Str(reply.get());
        refused_command = commands[i].front();
        if (absl::StartsWith(refused, "BUSYGROUP")) busygroup_ = true;
      }
      replies.push_back(std::move(reply));
    }
    if (wait > absl::ZeroDuration()) redisSetTimeout(c_, AsTimeval(timeout_));
    if (!refused.empty()) {
      nogroup_ = absl::StartsWith(refused, "NOGROUP");
      std::string msg =
          absl::StrCat("redis-streams: ", where_, ": ", refused_command, " refused: ", refused);
      return IsFatalReply(refused) ? absl::FailedPreconditionError(msg)
                                   : absl::UnavailableError(msg);
    }
    return replies;
  }

  bool broken() const { return broken_; }
  bool nogroup() const { return nogroup_; }
  // The last refusal was BUSYGROUP (the group exists); clears it.
  bool TakeBusyGroup() { return std::exchange(busygroup_, false); }

 private:
  Connection(redisContext* c, std::string where, absl::Duration timeout)
      : c_(c), where_(std::move(where)), timeout_(timeout) {}

  absl::Status Broken() {
    broken_ = true;
    return absl::UnavailableError(absl::StrCat("redis-streams: ", where_, ": ",
                                               c_->errstr[0] != '\0' ? c_->errstr : "no reply"));
  }

  redisContext* c_;
  const std::string where_;
  const absl::Duration timeout_;
  bool broken_ = false;
  bool nogroup_ = false;
  bool busygroup_ = false;
};

absl::StatusOr<std::unique_ptr<RedisStreamsTransport>> RedisStreamsTransport::Open(
    RedisStreamsOptions options) {
  absl::StatusOr<redis::RedisAddress> parsed = redis::ParseRedisUrl(options.url);
  if (!parsed.ok()) return store::RedactSecretsIn(parsed.status(), options.url);
  if (options.stream.empty() || options.group.empty() || options.consumer.empty()) {
    return absl::InvalidArgumentError("redis-streams: stream, group and consumer must be set");
  }
  if (options.max_deliveries < 1) {
    return absl::InvalidArgumentError("redis-streams: max_deliveries must be at least 1");
  }
  if (options.claim_min_idle < absl::ZeroDuration() ||
      options.claim_interval < absl::ZeroDuration() ||
      options.connect_timeout <= absl::ZeroDuration() ||
      options.command_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "redis-streams: timeouts must be positive, claim_min_idle and claim_interval >= 0");
  }
  if (options.dead_letter_stream.empty()) {
    options.dead_letter_stream = options.stream + ":dead-letter";
  }
  if (options.dead_letter_stream == options.stream) {
    return absl::InvalidArgumentError(
        "redis-streams: the dead-letter stream must not be the stream read");
  }
  if (options.clock == nullptr) options.clock = Clock::Real();
  auto address = std::make_unique<Address>();
  address->redis = *std::move(parsed);
  address->where = absl::StrCat(address->redis.host, ":", address->redis.port);
  std::unique_ptr<RedisStreamsTransport> t(
      new RedisStreamsTransport(std::move(options), std::move(address)));
  IDEM_RETURN_IF_ERROR(t->Ensure());
  return t;
}

RedisStreamsTransport::RedisStreamsTransport(RedisStreamsOptions options,
                                             std::unique_ptr<Address> address)
    : options_(std::move(options)), address_(std::move(address)) {}

RedisStreamsTransport::~RedisStreamsTransport() = default;

void RedisStreamsTransport::SetRebalanceListener(RebalanceListener listener) {
  listener_ = std::move(listener);
}

absl::Status RedisStreamsTransport::Failed(absl::Status s) {
  if (conn_ != nullptr && conn_->broken()) {
    conn_.reset();
    // Entries the server handed out on the lost connection may never have reached
    // us: read this consumer's pending entries again after reconnecting.
    own_pending_done_ = false;
    own_pending_cursor_ = "0";
  }
  if (conn_ != nullptr && conn_->nogroup()) group_ready_ = false;  // the stream was deleted
  return store::RedactSecretsIn(s, options_.url);
}

absl::Status RedisStreamsTransport::Ensure() {
  if (conn_ == nullptr) {
    absl::StatusOr<std::unique_ptr<Connection>> c = Connection::Open(*address_, options_);
    if (!c.ok()) return store::RedactSecretsIn(c.status(), options_.url);
    conn_ = *std::move(c);
  }
  if (!group_ready_) {
    absl::StatusOr<ReplyPtr> r = conn_->Run(
        {"XGROUP", "CREATE", options_.stream, options_.group, options_.start_id, "MKSTREAM"});
    if (!r.ok() && !conn_->TakeBusyGroup()) return Failed(r.status());
    group_ready_ = true;
  }
  return absl::OkStatus();
}

namespace {

// [id, [field, value, ...]] (fields nil for an entry deleted while pending) → Message.
// Returns false for a reply of another shape.
bool ToMessage(const redisReply* entry, const RedisStreamsOptions& o, Message* m, bool* deleted) {
  if (!IsArray(entry) || entry->elements != 2) return false;
  m->source = o.stream;
  m->id = Str(entry->element[0]);
  if (m->id.empty()) return false;
  m->timestamp_ms = IdMillis(m->id);
  const redisReply* fields = entry->element[1];
  *deleted = fields == nullptr || fields->type == REDIS_REPLY_NIL;
  if (*deleted) return true;
  if (!IsArray(fields) || fields->elements % 2 != 0) return false;
  bool payload_taken = false;
  for (size_t i = 0; i + 1 < fields->elements; i += 2) {
    std::string name = Str(fields->element[i]);
    std::string value = Str(fields->element[i + 1]);
    if (!o.key_field.empty() && name == o.key_field && m->key.empty()) m->key = value;
    if (!payload_taken && !o.payload_field.empty() && name == o.payload_field) {
      m->payload = std::move(value);
      payload_taken = true;
    } else {
      m->headers.emplace_back(std::move(name), std::move(value));
    }
  }
  return true;
}

absl::Status Malformed(std::string_view command) {
  return absl::UnavailableError(
      absl::StrCat("redis-streams: ", AV(command), " answered something unexpected"));
}

// The entries of an XREADGROUP/XAUTOCLAIM list: those still in the stream, and in
// `deleted` those deleted while pending (no fields). `*last_id`: the list's last id.
absl::StatusOr<std::vector<Message>> ParseEntries(const redisReply* list,
                                                  const RedisStreamsOptions& o,
                                                  std::vector<Message>* deleted,
                                                  std::string* last_id) {
  std::vector<Message> out;
  if (!IsArray(list)) return Malformed("XREADGROUP");
  for (size_t i = 0; i < list->elements; ++i) {
    Message m;
    bool gone = false;
    if (!ToMessage(list->element[i], o, &m, &gone)) return Malformed("XREADGROUP");
    *last_id = m.id;
    (gone ? *deleted : out).push_back(std::move(m));
  }
  return out;
}

}  // namespace

absl::Status RedisStreamsTransport::CountDeliveries(std::vector<Message>& batch) {
  if (batch.empty()) return absl::OkStatus();
  std::vector<std::vector<std::string>> queries;
  for (const Message& m : batch) {
    queries.push_back({"XPENDING", options_.stream, options_.group, m.id, m.id, "1"});
  }
  absl::StatusOr<std::vector<ReplyPtr>> replies = conn_->Pipeline(queries);
  if (!replies.ok()) return Failed(replies.status());
  std::vector<Message> kept;
  for (size_t i = 0; i < batch.size(); ++i) {
    const redisReply* r = (*replies)[i].get();
    // [[id, consumer, idle, deliveries]]; empty when the entry is no longer pending
    // (another consumer acknowledged it meanwhile): nothing to do for it.
    if (!IsArray(r)) return Failed(Malformed("XPENDING"));
    if (r->elements == 0) continue;
    const redisReply* row = r->element[0];
    if (!IsArray(row) || row->elements != 4 || row->element[3]->type != REDIS_REPLY_INTEGER) {
      return Failed(Malformed("XPENDING"));
    }
    batch[i].deliveries = row->element[3]->integer;
    if (batch[i].deliveries > options_.max_deliveries) {
      IDEM_RETURN_IF_ERROR(DeadLetterNow(batch[i], absl::StrCat("delivered ", batch[i].deliveries,
                                                                " times, more than "
                                                                "max_deliveries ",
                                                                options_.max_deliveries)));
      continue;
    }
    kept.push_back(std::move(batch[i]));
  }
  batch = std::move(kept);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Message>> RedisStreamsTransport::ReadOwnPending(size_t max) {
  std::string cursor = own_pending_cursor_;
  for (;;) {
    absl::StatusOr<ReplyPtr> r =
        conn_->Run({"XREADGROUP", "GROUP", options_.group, options_.consumer, "COUNT",
                    std::to_string(max), "STREAMS", options_.stream, cursor});
    if (!r.ok()) return Failed(r.status());
    // [[stream, [entries]]]; the history is over when the list is empty.
    const redisReply* reply = r->get();
    if (!IsArray(reply) || reply->elements != 1 || !IsArray(reply->element[0]) ||
        reply->element[0]->elements != 2) {
      return Failed(Malformed("XREADGROUP"));
    }
    std::vector<Message> deleted;
    absl::StatusOr<std::vector<Message>> batch =
        ParseEntries(reply->element[0]->element[1], options_, &deleted, &cursor);
    if (!batch.ok()) return Failed(batch.status());
    if (batch->empty() && deleted.empty()) {
      own_pending_done_ = true;
      return std::vector<Message>{};
    }
    for (const Message& m : deleted) {
      IDEM_RETURN_IF_ERROR(DeadLetterNow(m, "deleted from the stream before it was acknowledged"));
    }
    IDEM_RETURN_IF_ERROR(CountDeliveries(*batch));
    own_pending_cursor_ = cursor;
    if (!batch->empty()) return batch;
  }
}

absl::StatusOr<std::vector<Message>> RedisStreamsTransport::Claim(size_t max) {
  // A scan of the group's pending entries may take several calls (the cursor); a
  // bounded number per poll, so a long list of dead-lettered entries cannot hold
  // the poll up.
  for (int round = 0; round < 8; ++round) {
    absl::StatusOr<ReplyPtr> r =
        conn_->Run({"XAUTOCLAIM", options_.stream, options_.group, options_.consumer,
                    std::to_string(absl::ToInt64Milliseconds(options_.claim_min_idle)),
                    claim_cursor_, "COUNT", std::to_string(max)});
    if (!r.ok()) return Failed(r.status());
    // [next cursor, [entries], [ids deleted from the stream]] (Redis 7).
    const redisReply* reply = r->get();
    if (!IsArray(reply) || reply->elements < 2) return Failed(Malformed("XAUTOCLAIM"));
    std::vector<Message> deleted;
    std::string last_id;
    absl::StatusOr<std::vector<Message>> batch =
        ParseEntries(reply->element[1], options_, &deleted, &last_id);
    if (!batch.ok()) return Failed(batch.status());
    if (reply->elements >= 3 && IsArray(reply->element[2])) {
      for (size_t i = 0; i < reply->element[2]->elements; ++i) {
        Message m;
        m.source = options_.stream;
        m.id = Str(reply->element[2]->element[i]);
        m.timestamp_ms = IdMillis(m.id);
        deleted.push_back(std::move(m));
      }
    }
    for (const Message& m : deleted) {
      IDEM_RETURN_IF_ERROR(DeadLetterNow(m, "deleted from the stream before it was acknowledged"));
    }
    IDEM_RETURN_IF_ERROR(CountDeliveries(*batch));
    claim_cursor_ = Str(reply->element[0]);
    if (claim_cursor_.empty() || claim_cursor_ == "0-0") {
      claim_cursor_ = "0-0";
      last_claim_ = options_.clock->Now();
    }
    if (!batch->empty() || claim_cursor_ == "0-0") return batch;
  }
  return std::vector<Message>{};
}

absl::StatusOr<std::vector<Message>> RedisStreamsTransport::ReadNew(
    size_t max, std::chrono::milliseconds timeout) {
  std::vector<std::string> args = {"XREADGROUP",      "GROUP", options_.group,
                                   options_.consumer, "COUNT", std::to_string(max)};
  absl::Duration wait = absl::ZeroDuration();
  if (timeout.count() > 0) {  // BLOCK 0 would wait forever
    args.insert(args.end(), {"BLOCK", std::to_string(timeout.count())});
    wait = absl::FromChrono(timeout);
  }
  args.insert(args.end(), {"STREAMS", options_.stream, ">"});
  absl::StatusOr<ReplyPtr> r = conn_->Run(args, wait);
  if (!r.ok()) return Failed(r.status());
  const redisReply* reply = r->get();
  if (reply->type == REDIS_REPLY_NIL) return std::vector<Message>{};  // nothing new in time
  if (!IsArray(reply) || reply->elements != 1 || !IsArray(reply->element[0]) ||
      reply->element[0]->elements != 2) {
    return Failed(Malformed("XREADGROUP"));
  }
  std::vector<Message> deleted;  // none: new entries cannot have been deleted
  std::string last_id;
  absl::StatusOr<std::vector<Message>> batch =
      ParseEntries(reply->element[0]->element[1], options_, &deleted, &last_id);
  if (!batch.ok()) return Failed(batch.status());
  // A new entry has been delivered once (it just entered this consumer's pending list).
  for (Message& m : *batch) m.deliveries = 1;
  return batch;
}

absl::StatusOr<std::vector<Message>> RedisStreamsTransport::Poll(
    size_t max, std::chrono::milliseconds timeout) {
  IDEM_RETURN_IF_ERROR(Ensure());
  if (!announced_) {
    announced_ = true;
    if (listener_) listener_({Rebalance::Kind::kAssigned, {options_.stream}});
  }
  if (max == 0) return std::vector<Message>{};
  if (!own_pending_done_) {
    IDEM_ASSIGN_OR_RETURN(std::vector<Message> mine, ReadOwnPending(max));
    if (!mine.empty()) return mine;
  }
  const absl::Time now = options_.clock->Now();
  if (claim_cursor_ != "0-0" || now - last_claim_ >= options_.claim_interval) {
    IDEM_ASSIGN_OR_RETURN(std::vector<Message> claimed, Claim(max));
    if (!claimed.empty()) {
      // Another consumer's work (or this one's, abandoned) is now this consumer's.
      if (listener_) listener_({Rebalance::Kind::kAssigned, {options_.stream}});
      return claimed;
    }
  }
  return ReadNew(max, timeout);
}

absl::Status RedisStreamsTransport::Commit(const std::vector<Message>& done) {
  std::vector<std::string> args = {"XACK", options_.stream, options_.group};
  for (const Message& m : done) {
    if (m.source == options_.stream && !m.id.empty()) args.push_back(m.id);
  }
  if (args.size() == 3) return absl::OkStatus();
  IDEM_RETURN_IF_ERROR(Ensure());
  absl::StatusOr<ReplyPtr> r = conn_->Run(args);
  if (!r.ok()) return Failed(r.status());
  return absl::OkStatus();
}

absl::Status RedisStreamsTransport::DeadLetter(const Message& message, std::string_view reason) {
  if (message.source != options_.stream || message.id.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "redis-streams: dead-letter of a message not read from stream '", options_.stream, "'"));
  }
  IDEM_RETURN_IF_ERROR(Ensure());
  return DeadLetterNow(message, reason);
}

absl::Status RedisStreamsTransport::DeadLetterNow(const Message& message, std::string_view reason) {
  std::vector<std::string> add = {"XADD", options_.dead_letter_stream, "*"};
  if (!options_.payload_field.empty() && !message.payload.empty()) {
    add.insert(add.end(), {options_.payload_field, message.payload});
  }
  for (const auto& [name, value] : message.headers) add.insert(add.end(), {name, value});
  add.insert(add.end(), {"idem-reason", std::string(reason), "idem-original-stream", message.source,
                         "idem-original-id", message.id, "idem-deliveries",
                         std::to_string(message.deliveries)});
  // Both or neither: a crash in between must neither lose the entry (acknowledged,
  // not dead-lettered) nor file it twice.
  absl::StatusOr<std::vector<ReplyPtr>> r = conn_->Pipeline(
      {{"MULTI"}, add, {"XACK", options_.stream, options_.group, message.id}, {"EXEC"}});
  if (!r.ok()) return Failed(r.status());
  const redisReply* exec = r->back().get();
  if (!IsArray(exec) || exec->elements != 2) return Failed(Malformed("EXEC"));
  for (size_t i = 0; i < 2; ++i) {
    if (exec->element[i]->type == REDIS_REPLY_ERROR) {
      return Failed(absl::UnavailableError(
          absl::StrCat("redis-streams: dead-letter refused: ", Str(exec->element[i]))));
    }
  }
  return absl::OkStatus();
}

}  // namespace idem::messaging
