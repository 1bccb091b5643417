#include "chaos/messaging.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

#include <atomic>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "chaos/driver.h"
#include "idem/idem.h"
#include "testing/kafka_mock.h"
#include "testing/redis_admin.h"
#include "testing/wait_until.h"

namespace idem::chaos {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::string MessagingResult::Summary() const {
  return absl::StrCat("seed=", seed, ": ", produced, " messages produced, ", events, " events (",
                      poison, " poison), ", effects, " effects, ", consumers_started,
                      " consumers started, ", FaultSummary(faults), " in ", elapsed.count(),
                      " ms, ", report.violations(), " violations\n",
                      unexpected_exits.empty()
                          ? ""
                          : "unexpected consumer exits: " + absl::StrJoin(unexpected_exits, "; ") +
                                "\n",
                      report.Table());
}

namespace {

constexpr char kTopic[] = "chaos-orders";
constexpr char kGroup[] = "chaos";

// The consumer processes of the run. Used by the scheduler thread only (faults run
// one at a time) and, before and after it, by the run itself.
class Consumers {
 public:
  Consumers(const MessagingOptions& o, std::string endpoint, std::string source,
            std::string store_url)
      : o_(o),
        endpoint_(std::move(endpoint)),
        source_(std::move(source)),
        store_url_(std::move(store_url)) {}
  ~Consumers() { StopAll(); }

  // Starts a consumer named `name` ("" = a new name), with IDEM_FAILPOINTS
  // `failpoints`; its stderr goes to WORK_DIR/NAME-N.err.
  absl::StatusOr<pid_t> Start(std::string name = "", const std::string& failpoints = "") {
    if (name.empty()) name = absl::StrCat("c", next_name_++);
    const std::string err = absl::StrCat(o_.work_dir, "/", name, "-", started_, ".err");
    std::vector<std::string> args = {o_.consumer_bin, "--transport", o_.transport,
                                     "--endpoint", endpoint_, "--source", source_,
                                     "--group", kGroup, "--consumer", name,
                                     "--store", store_url_, "--batch", std::to_string(o_.batch),
                                     "--delay-us", std::to_string(o_.effect_delay.count())};
    if (o_.external_effect) {
      args.insert(args.end(), {"--external-effect", o_.work_dir + "/external-effects.log"});
    }
    // Everything the child needs is made before fork(): the process has threads
    // (the producer, librdkafka's), so the child only calls async-signal-safe functions.
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
      if (std::string_view(*e).starts_with("IDEM_FAILPOINTS=")) continue;
      env.emplace_back(*e);
    }
    if (!failpoints.empty()) env.push_back("IDEM_FAILPOINTS=" + failpoints);
    std::vector<char*> argv, envp;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (std::string& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    const pid_t pid = fork();
    if (pid < 0) return absl::UnavailableError(absl::StrCat("fork: ", strerror(errno)));
    if (pid == 0) {
      const int fd = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0) ::dup2(fd, 2);
      const int null = ::open("/dev/null", O_RDWR);
      if (null >= 0) ::dup2(null, 1);
      ::execve(argv[0], argv.data(), envp.data());
      _exit(127);
    }
    ++started_;
    running_.push_back({pid, name, !failpoints.empty()});
    return pid;
  }

  size_t size() const { return running_.size(); }
  int64_t started() const { return started_; }

  // A running consumer, chosen by `rng`. REQUIRES: size() > 0.
  size_t Pick(std::mt19937_64& rng) const { return rng() % running_.size(); }
  const std::string& name(size_t i) const { return running_[i].name; }
  pid_t pid(size_t i) const { return running_[i].pid; }

  // SIGKILLs consumer i and reaps it; returns its name.
  std::string Kill(size_t i) {
    const Proc p = running_[i];
    running_.erase(running_.begin() + static_cast<ptrdiff_t>(i));
    ::kill(p.pid, SIGKILL);
    ::waitpid(p.pid, nullptr, 0);
    return p.name;
  }

  // SIGTERMs consumer i and waits up to 15 s for it to leave (then SIGKILL).
  void Stop(size_t i) {
    const Proc p = running_[i];
    running_.erase(running_.begin() + static_cast<ptrdiff_t>(i));
    ::kill(p.pid, SIGCONT);
    ::kill(p.pid, SIGTERM);
    int status = 0;
    if (testing::WaitUntil([&] { return ::waitpid(p.pid, &status, WNOHANG) == p.pid; },
                           std::chrono::seconds(15), milliseconds(20))) {
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        unexpected_.push_back(absl::StrCat(p.name, " stopped with status ", status));
      }
      return;
    }
    unexpected_.push_back(p.name + " did not stop within 15 s of SIGTERM");
    ::kill(p.pid, SIGKILL);
    ::waitpid(p.pid, nullptr, 0);
  }

  // Reaps consumers that exited by themselves: an armed one's SIGKILL at its
  // failpoint is expected; anything else is noted in unexpected_exits().
  void Reap() {
    for (size_t i = 0; i < running_.size();) {
      int status = 0;
      if (::waitpid(running_[i].pid, &status, WNOHANG) != running_[i].pid) {
        ++i;
        continue;
      }
      const bool failpoint = running_[i].armed && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
      if (!failpoint) {
        unexpected_.push_back(absl::StrCat(
            running_[i].name, WIFEXITED(status) ? " exited with status " : " died of signal ",
            WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status)));
      }
      running_.erase(running_.begin() + static_cast<ptrdiff_t>(i));
    }
  }
  const std::vector<std::string>& unexpected_exits() const { return unexpected_; }

  // Index of the consumer with `pid`, if it runs.
  std::optional<size_t> Find(pid_t pid) const {
    for (size_t i = 0; i < running_.size(); ++i) {
      if (running_[i].pid == pid) return i;
    }
    return std::nullopt;
  }

  void StopAll() {
    while (!running_.empty()) Stop(running_.size() - 1);
  }

  // Starts consumers until `n` run.
  absl::Status FillTo(size_t n) {
    Reap();
    while (running_.size() < n) {
      absl::StatusOr<pid_t> pid = Start();
      if (!pid.ok()) return pid.status();
    }
    return absl::OkStatus();
  }

 private:
  struct Proc {
    pid_t pid;
    std::string name;
    bool armed;  // started with a failpoint that kills it
  };
  const MessagingOptions& o_;
  const std::string endpoint_, source_, store_url_;
  std::vector<Proc> running_;
  int next_name_ = 0;
  int64_t started_ = 0;
  std::vector<std::string> unexpected_;
};

// What the producer made: event id → poison or not, and the messages per partition.
struct Produced {
  std::mutex mu;
  std::map<std::string, bool> events;  // id → poison
  int64_t messages = 0;
  std::string error;  // the first produce that failed
};

// The messaging source of a run: Kafka's mock cluster or a Redis stream.
class Source {
 public:
  virtual ~Source() = default;
  virtual std::string endpoint() const = 0;
  virtual std::string name() const = 0;
  // Adds one message; "" or the error.
  virtual std::string Produce(const std::string& id, const std::string& payload, int partition) = 0;
  // Waits until every message produced is in the log; "" or what is missing.
  virtual std::string Flush() { return ""; }
  // The event ids in the dead-letter destination.
  virtual std::set<std::string> DeadLettered(size_t expected) = 0;
  // Whether the group has consumed everything produced; "" or what is left.
  virtual std::string Remaining() = 0;
  // The faults only this source has.
  virtual std::vector<FaultKind> Faults(Consumers& consumers, std::mt19937_64& rng) = 0;
};

class KafkaSource : public Source {
 public:
  // The producer is the application's: idempotent, retrying without a deadline
  // (message.timeout.ms=0), so a message the broker was down for is delivered once
  // it is back, exactly once and in order; a message counts for its partition when
  // its delivery is reported.
  explicit KafkaSource(int partitions) : partitions_(partitions), delivered_(partitions) {
    kafka_.CreateTopic(kTopic, partitions);
    kafka_.CreateTopic(std::string(kTopic) + ".dlq", 1);
    char err[512];
    rd_kafka_conf_t* conf = rd_kafka_conf_new();
    for (const auto& [k, v] : std::vector<std::pair<const char*, std::string>>{
             {"bootstrap.servers", kafka_.brokers()},
             {"enable.idempotence", "true"},
             {"message.timeout.ms", "0"},
             {"linger.ms", "2"},
             {"log_level", "3"}}) {
      rd_kafka_conf_set(conf, k, v.c_str(), err, sizeof err);
    }
    rd_kafka_conf_set_opaque(conf, this);
    rd_kafka_conf_set_dr_msg_cb(conf, [](rd_kafka_t*, const rd_kafka_message_t* m, void* self) {
      static_cast<KafkaSource*>(self)->Delivered(m);
    });
    producer_ = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
  }
  ~KafkaSource() override {
    if (producer_ != nullptr) {
      rd_kafka_flush(producer_, 2000);
      rd_kafka_destroy(producer_);
    }
  }
  std::string endpoint() const override { return kafka_.brokers(); }
  std::string name() const override { return kTopic; }
  std::string Produce(const std::string& id, const std::string& payload, int partition) override {
    if (producer_ == nullptr) return "the producer could not be created";
    rd_kafka_headers_t* h = rd_kafka_headers_new(1);
    rd_kafka_header_add(h, "event_id", -1, id.data(), static_cast<ssize_t>(id.size()));
    for (;;) {
      const rd_kafka_resp_err_t err = rd_kafka_producev(
          producer_, RD_KAFKA_V_TOPIC(kTopic), RD_KAFKA_V_PARTITION(partition),
          RD_KAFKA_V_VALUE(const_cast<char*>(payload.data()), payload.size()),
          RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_HEADERS(h), RD_KAFKA_V_END);
      if (err == RD_KAFKA_RESP_ERR_NO_ERROR) break;
      if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL) {
        rd_kafka_headers_destroy(h);
        return rd_kafka_err2str(err);
      }
      rd_kafka_poll(producer_, 50);  // the queue is full while the broker is down
    }
    ++sent_;
    rd_kafka_poll(producer_, 0);
    std::lock_guard<std::mutex> lock(mu_);
    return failure_;
  }
  std::string Flush() override {
    rd_kafka_flush(producer_, 60000);
    std::lock_guard<std::mutex> lock(mu_);
    if (!failure_.empty()) return failure_;
    int64_t delivered = 0;
    for (int64_t n : delivered_) delivered += n;
    if (delivered != sent_) {
      return absl::StrCat(sent_ - delivered, " of ", sent_, " messages not delivered in 60 s");
    }
    return "";
  }
  std::set<std::string> DeadLettered(size_t expected) override {
    std::set<std::string> out;
    for (const messaging::Message& m : kafka_.ReadAll(std::string(kTopic) + ".dlq", 1, expected,
                                                      milliseconds(500), milliseconds(3000))) {
      if (const std::string* id = m.Header("event_id")) out.insert(*id);
    }
    return out;
  }
  // Against each partition's high watermark: the log's end, which may hold a message
  // twice (the mock broker does not deduplicate an idempotent producer's retry
  // after an outage: one more message than deliveries were reported).
  std::string Remaining() override {
    std::string left;
    for (int i = 0; i < partitions_; ++i) {
      const int64_t committed = kafka_.Committed(kGroup, kTopic, i);
      int64_t low = 0, high = 0;
      const rd_kafka_resp_err_t err =
          rd_kafka_query_watermark_offsets(producer_, kTopic, i, &low, &high, 5000);
      if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
        absl::StrAppend(&left, left.empty() ? "" : ", ", kTopic, "[", i,
                        "]: no watermark: ", rd_kafka_err2str(err));
      } else if (committed != high) {
        absl::StrAppend(&left, left.empty() ? "" : ", ", kTopic, "[", i, "] committed ",
                        committed, " of ", high);
      }
    }
    return left;
  }
  std::vector<FaultKind> Faults(Consumers&, std::mt19937_64& rng) override {
    return {
        {.name = "broker down",
         .inject = [this] { kafka_.BrokerDown(); return absl::OkStatus(); },
         .heal = [this] { kafka_.BrokerUp(); return absl::OkStatus(); },
         .min_hold = milliseconds(300),
         .max_hold = milliseconds(2000)},
        {.name = "commit errors",  // OffsetCommit is API key 8
         .inject =
             [this, &rng] {
               kafka_.PushErrors(8, 1 + rng() % 4, RD_KAFKA_RESP_ERR_COORDINATOR_LOAD_IN_PROGRESS);
               return absl::OkStatus();
             },
         .heal = [] { return absl::OkStatus(); },
         .min_hold = milliseconds(0),
         .max_hold = milliseconds(800)},
        {.name = "forced rebalance",  // Heartbeat is API key 12
         .inject =
             [this] {
               kafka_.PushErrors(12, 2, RD_KAFKA_RESP_ERR_REBALANCE_IN_PROGRESS);
               return absl::OkStatus();
             },
         .heal = [] { return absl::OkStatus(); },
         .min_hold = milliseconds(500),
         .max_hold = milliseconds(1500)},
    };
  }

 private:
  void Delivered(const rd_kafka_message_t* m) {
    std::lock_guard<std::mutex> lock(mu_);
    if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      if (failure_.empty()) failure_ = absl::StrCat("delivery failed: ", rd_kafka_err2str(m->err));
      return;
    }
    if (m->partition >= 0 && m->partition < partitions_) ++delivered_[static_cast<size_t>(m->partition)];
  }

  testing::MockKafka kafka_;
  const int partitions_;
  rd_kafka_t* producer_ = nullptr;
  int64_t sent_ = 0;  // the producer thread's
  std::mutex mu_;
  std::vector<int64_t> delivered_;  // per partition; guarded by mu_
  std::string failure_;             // the first failed delivery; guarded by mu_
};

class StreamsSource : public Source {
 public:
  explicit StreamsSource(std::string stream)
      : url_(testing::RedisUrl()), stream_(std::move(stream)) {}
  ~StreamsSource() override { admin_.Run({"DEL", stream_, stream_ + ":dead-letter"}); }
  absl::Status Ok() {
    if (!admin_.ok() || !producer_.ok()) {
      return absl::UnavailableError("cannot reach the redis-server of IDEM_TEST_REDIS_URL");
    }
    return absl::OkStatus();
  }
  std::string endpoint() const override { return url_; }
  std::string name() const override { return stream_; }
  std::string Produce(const std::string& id, const std::string& payload, int) override {
    const std::string reply =
        producer_.Run({"XADD", stream_, "*", "event_id", id, "payload", payload});
    return reply.find('-') == std::string::npos || reply.find(' ') != std::string::npos
               ? "XADD answered " + reply
               : "";
  }
  std::set<std::string> DeadLettered(size_t) override {
    std::set<std::string> out;
    for (const auto& [entry, fields] : admin_.Range(stream_ + ":dead-letter")) {
      if (auto it = fields.find("event_id"); it != fields.end()) out.insert(it->second);
    }
    return out;
  }
  std::string Remaining() override {
    const int64_t pending = admin_.PendingCount(stream_, kGroup);
    // XINFO GROUPS: "name chaos consumers N pending N last-delivered-id ID ...";
    // XINFO STREAM: "... last-generated-id ID ...".
    const std::string delivered = Field(admin_.Run({"XINFO", "GROUPS", stream_}),
                                        "last-delivered-id");
    const std::string last = Field(admin_.Run({"XINFO", "STREAM", stream_}), "last-generated-id");
    if (pending == 0 && !last.empty() && delivered == last) return "";
    return absl::StrCat(pending, " pending, delivered up to ", delivered, " of ", last);
  }
  std::vector<FaultKind> Faults(Consumers&, std::mt19937_64&) override {
    return {{.name = "cut redis connections",
             .inject = [this] { return CutConnections(); },
             .heal = [] { return absl::OkStatus(); },
             .min_hold = milliseconds(0),
             .max_hold = milliseconds(500)}};
  }

 private:
  static std::string Field(const std::string& flat, std::string_view name) {
    std::vector<std::string> words = absl::StrSplit(flat, ' ');
    for (size_t i = 0; i + 1 < words.size(); ++i) {
      if (words[i] == name) return words[i + 1];
    }
    return "";
  }
  // CLIENT KILL of every connection a consumer of this run opened (they are named
  // idem-streams:<consumer>; the run's consumers are c0, c1, ...).
  absl::Status CutConnections() {
    const std::string list = admin_.Run({"CLIENT", "LIST"});
    for (absl::string_view piece : absl::StrSplit(list, absl::ByAnyChar("\r\n"))) {
      const std::string line(piece);
      if (line.find(" name=idem-streams:c") == std::string::npos) continue;
      if (!line.starts_with("id=")) continue;
      const std::string client = line.substr(3, line.find(' ') - 3);
      admin_.Run({"CLIENT", "KILL", "ID", client});
    }
    return absl::OkStatus();
  }
  const std::string url_, stream_;
  testing::RedisAdmin admin_;     // the run's thread and the scheduler (one at a time)
  testing::RedisAdmin producer_;  // the producer thread
};

// event id → the consumers that performed its effect (one entry per effect).
absl::StatusOr<std::map<std::string, std::vector<std::string>>> ReadEffects(
    const MessagingOptions& o, const std::string& store_url) {
  std::map<std::string, std::vector<std::string>> out;
  if (o.external_effect) {
    std::ifstream in(o.work_dir + "/external-effects.log");
    std::string id, consumer;
    while (in >> id >> consumer) out[id].push_back(consumer);
    return out;
  }
  IDEM_ASSIGN_OR_RETURN(std::unique_ptr<Store> store, OpenStore(store_url));
  IDEM_ASSIGN_OR_RETURN(std::unique_ptr<StoreTransaction> tx, store->Begin());
  IDEM_ASSIGN_OR_RETURN(Rows rows, tx->Query("SELECT event_id, consumer FROM chaos_effects"));
  tx->Rollback();
  for (const auto& row : rows.rows) out[row[0].as_text()].push_back(row[1].as_text());
  return out;
}

Report Judge(const Produced& p, const std::map<std::string, std::vector<std::string>>& effects,
             const std::set<std::string>& dead, const std::string& remaining) {
  PropertyResult once{.property = std::string(kEffectOnce)};
  PropertyResult lost{.property = std::string(kNoneLost)};
  PropertyResult drained{.property = std::string(kDrained), .checked = 1};
  const auto note = [](PropertyResult& r, const std::string& example) {
    if (r.violations++ == 0) r.first_example = example;
  };
  for (const auto& [id, poison] : p.events) {
    ++lost.checked;
    auto it = effects.find(id);
    const size_t n = it == effects.end() ? 0 : it->second.size();
    if (poison) {
      if (n > 0) note(lost, absl::StrCat(id, " is poison and had an effect"));
      if (!dead.count(id)) note(lost, absl::StrCat(id, " is poison and not dead-lettered"));
      continue;
    }
    ++once.checked;
    if (n == 0) note(lost, absl::StrCat(id, " had no effect"));
    if (n > 1) {
      note(once, absl::StrCat(id, ": ", n, " effects (by ", absl::StrJoin(it->second, ", "), ")"));
    }
  }
  for (const auto& [id, by] : effects) {
    if (!p.events.count(id)) note(once, absl::StrCat("an effect of ", id, ", never produced"));
  }
  if (!remaining.empty()) note(drained, remaining);
  return Report{.properties = {once, lost, drained}};
}

class MessagingRun {
 public:
  MessagingRun(const MessagingOptions& o, Source& source, std::string store_url)
      : o_(o),
        source_(source),
        store_url_(std::move(store_url)),
        consumers_(o, source.endpoint(), source.name(), store_url_),
        rng_(o.seed) {}

  absl::StatusOr<MessagingResult> Go() {
    const Clock::time_point start = Clock::now();
    IDEM_RETURN_IF_ERROR(consumers_.FillTo(static_cast<size_t>(o_.consumers)));
    const Clock::time_point end = start + o_.duration;
    std::thread producer([this, start, end] { Produce(start, end); });
    std::vector<FaultKind> faults;
    if (o_.inject_faults) faults = Faults();
    std::mutex mu;
    MessagingResult r;
    r.seed = o_.seed;
    absl::Status s = ScheduleFaults({.seed = o_.seed,
                                     .start = start,
                                     .end = end,
                                     .mu = &mu,
                                     .log = &r.fault_log,
                                     .counts = &r.faults},
                                    faults);
    producer.join();
    if (!s.ok()) return Prefixed(s);
    if (!produced_.error.empty()) return Prefixed(absl::UnavailableError(produced_.error));
    if (std::string missing = source_.Flush(); !missing.empty()) {
      return Prefixed(absl::UnavailableError("producing: " + missing));
    }

    // Healed: the group drains what is left.
    size_t poison = 0;
    for (const auto& [id, p] : produced_.events) poison += p ? 1 : 0;
    std::map<std::string, std::vector<std::string>> effects;
    std::set<std::string> dead;
    std::string remaining;
    const Clock::time_point drain_end = Clock::now() + o_.drain_timeout;
    do {
      IDEM_RETURN_IF_ERROR(consumers_.FillTo(static_cast<size_t>(o_.consumers)));
      std::this_thread::sleep_for(milliseconds(500));  // the pace of the drain's checks
      absl::StatusOr<std::map<std::string, std::vector<std::string>>> e =
          ReadEffects(o_, store_url_);
      if (!e.ok()) continue;  // the store is busy under the consumers: read again
      effects = *std::move(e);
      dead = source_.DeadLettered(poison);
      remaining = source_.Remaining();
    } while ((!remaining.empty() || effects.size() + dead.size() < produced_.events.size()) &&
             Clock::now() < drain_end);
    consumers_.StopAll();
    absl::StatusOr<std::map<std::string, std::vector<std::string>>> e = ReadEffects(o_, store_url_);
    if (!e.ok()) return Prefixed(e.status());
    effects = *std::move(e);
    dead = source_.DeadLettered(poison);

    r.produced = produced_.messages;
    r.events = static_cast<int64_t>(produced_.events.size());
    r.poison = static_cast<int64_t>(poison);
    for (const auto& [id, by] : effects) r.effects += static_cast<int64_t>(by.size());
    r.consumers_started = consumers_.started();
    r.unexpected_exits = consumers_.unexpected_exits();
    r.elapsed = std::chrono::duration_cast<milliseconds>(Clock::now() - start);
    r.report = Judge(produced_, effects, dead, remaining);
    return r;
  }

 private:
  absl::Status Prefixed(const absl::Status& s) const {
    return absl::Status(s.code(), absl::StrCat("seed=", o_.seed, ": ", s.message()));
  }

  // Events at events_per_second until `end`: new ones (1 in 1/poison_probability
  // poison), and now and then an earlier one again under its id.
  void Produce(Clock::time_point start, Clock::time_point end) {
    std::mt19937_64 rng(o_.seed ^ 0xfeedULL);
    std::uniform_real_distribution<double> u(0, 1);
    std::vector<std::pair<std::string, std::string>> made;  // id, payload
    for (int64_t i = 0; Clock::now() < end; ++i) {
      std::pair<std::string, std::string> event;
      if (!made.empty() && u(rng) < o_.duplicate_probability) {
        event = made[rng() % made.size()];
      } else {
        const std::string n = std::to_string(made.size());
        event = {"E-" + n, (u(rng) < o_.poison_probability ? "poison-" : "order-") + n};
        made.push_back(event);
      }
      const int partition = static_cast<int>(rng() % static_cast<uint64_t>(o_.partitions));
      const std::string error = source_.Produce(event.first, event.second, partition);
      {
        std::lock_guard<std::mutex> lock(produced_.mu);
        if (!error.empty()) {
          produced_.error = "producing " + event.first + ": " + error;
          return;
        }
        produced_.events[event.first] = event.second.rfind("poison", 0) == 0;
        ++produced_.messages;
      }
      std::this_thread::sleep_until(start + std::chrono::microseconds(1000000 * (i + 1) /
                                                                      o_.events_per_second));
    }
  }

  std::vector<FaultKind> Faults() {
    const bool kafka = o_.transport == "kafka";
    std::vector<FaultKind> f = {
        {.name = "kill consumer",
         .inject =
             [this] {
               IDEM_RETURN_IF_ERROR(consumers_.FillTo(static_cast<size_t>(o_.consumers)));
               killed_ = consumers_.Kill(consumers_.Pick(rng_));
               return absl::OkStatus();
             },
         // A Redis consumer restarted under its name resumes its own pending entries
         // first; a new name leaves them to be claimed.
         .heal =
             [this] {
               consumers_.Reap();
               return consumers_.Start(rng_() % 2 ? killed_ : "").status();
             },
         .min_hold = milliseconds(100),
         .max_hold = milliseconds(1500)},
        {.name = "crash at failpoint",
         .inject =
             [this] {
               const char* point = rng_() % 2 ? "kafka.runner.after_effects_commit"
                                              : "kafka.runner.after_offsets_commit";
               absl::StatusOr<pid_t> pid =
                   consumers_.Start("", absl::StrCat(point, "=kill@", 1 + rng_() % 3));
               if (!pid.ok()) return pid.status();
               armed_ = *pid;
               return absl::OkStatus();
             },
         // Killed now if it has not died at its failpoint yet: the group keeps its size.
         .heal =
             [this] {
               consumers_.Reap();
               if (std::optional<size_t> i = consumers_.Find(armed_)) consumers_.Kill(*i);
               return consumers_.FillTo(static_cast<size_t>(o_.consumers));
             },
         .min_hold = milliseconds(kafka ? 3000 : 1000),
         .max_hold = milliseconds(kafka ? 6000 : 3000)},
        {.name = "stall consumer",  // past the session timeout (3 s) / claim idle (1 s)
         .inject =
             [this] {
               IDEM_RETURN_IF_ERROR(consumers_.FillTo(static_cast<size_t>(o_.consumers)));
               stalled_ = consumers_.pid(consumers_.Pick(rng_));
               ::kill(stalled_, SIGSTOP);
               return absl::OkStatus();
             },
         .heal =
             [this] {
               ::kill(stalled_, SIGCONT);
               return absl::OkStatus();
             },
         .min_hold = milliseconds(kafka ? 3500 : 1500),
         .max_hold = milliseconds(kafka ? 5000 : 3000)},
        {.name = "join and leave",
         .inject =
             [this] {
               absl::StatusOr<pid_t> pid = consumers_.Start();
               if (!pid.ok()) return pid.status();
               joined_ = *pid;
               return absl::OkStatus();
             },
         .heal =
             [this] {
               if (std::optional<size_t> i = consumers_.Find(joined_)) consumers_.Stop(*i);
               return consumers_.FillTo(static_cast<size_t>(o_.consumers));
             },
         .min_hold = milliseconds(1000),
         .max_hold = milliseconds(4000)},
    };
    for (FaultKind& k : source_.Faults(consumers_, rng_)) f.push_back(std::move(k));
    return f;
  }

  const MessagingOptions& o_;
  Source& source_;
  const std::string store_url_;
  Consumers consumers_;
  Produced produced_;
  std::mt19937_64 rng_;  // the scheduler thread's choices inside faults
  std::string killed_;
  pid_t armed_ = 0, stalled_ = 0, joined_ = 0;
};

}  // namespace

absl::StatusOr<MessagingResult> RunMessaging(const MessagingOptions& o) {
  if (o.transport != "kafka" && o.transport != "streams") {
    return absl::InvalidArgumentError("messaging chaos: transport must be kafka or streams, not '" +
                                      o.transport + "'");
  }
  if (o.work_dir.empty() || o.consumer_bin.empty()) {
    return absl::InvalidArgumentError("messaging chaos: work_dir and consumer_bin are required");
  }
  if (o.consumers < 1 || o.partitions < 1 || o.events_per_second < 1 || o.batch < 1) {
    return absl::InvalidArgumentError(
        "messaging chaos: consumers, partitions, events_per_second and batch must be >= 1");
  }
  std::error_code ec;
  std::filesystem::remove_all(o.work_dir, ec);
  std::filesystem::create_directories(o.work_dir, ec);
  if (ec) return absl::UnavailableError("messaging chaos: " + o.work_dir + ": " + ec.message());
  const std::string store_url =
      o.store_url.empty() ? "sqlite://" + o.work_dir + "/messaging.db" : o.store_url;
  {
    // The schema and the effects table exist before the consumers race to make them.
    absl::StatusOr<std::unique_ptr<Store>> store = OpenStore(store_url);
    if (!store.ok()) return store.status();
    IDEM_ASSIGN_OR_RETURN(std::unique_ptr<StoreTransaction> tx, (*store)->Begin());
    IDEM_RETURN_IF_ERROR(tx->Exec("CREATE TABLE IF NOT EXISTS chaos_effects (event_id TEXT NOT "
                                  "NULL, consumer TEXT NOT NULL)")
                             .status());
    IDEM_RETURN_IF_ERROR(tx->Commit());
  }
  std::unique_ptr<Source> source;
  if (o.transport == "kafka") {
    source = std::make_unique<KafkaSource>(o.partitions);
  } else {
    auto s = std::make_unique<StreamsSource>(absl::StrCat("idem-chaos:", getpid(), ":", o.seed));
    IDEM_RETURN_IF_ERROR(s->Ok());
    source = std::move(s);
  }
  MessagingOptions options = o;
  if (o.transport == "streams") options.partitions = 1;
  return MessagingRun(options, *source, store_url).Go();
}

}  // namespace idem::chaos
