// `idem bridge kafka` (docs/messaging.md) as a process, on librdkafka's mock cluster over
// TCP, delivering to a recording HTTP target in this process. Asserts that every
// event is delivered (none lost), always under the same Idempotency-Key (never
// under two), and sent again only when a bridge died between sending and
// recording it.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "boost/asio/ip/tcp.hpp"
#include "boost/beast/core.hpp"
#include "boost/beast/http.hpp"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "testing/idem_process.h"
#include "testing/kafka_mock.h"
#include "testing/temp_dir.h"
#include "testing/wait_until.h"

namespace idem::messaging {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using ::testing::HasSubstr;

// An HTTP target that records each request's Idempotency-Key and body. While
// `down`, it answers 503; a body starting with "reject" gets 422.
class RecordingTarget {
 public:
  RecordingTarget() : acceptor_(ioc_, {asio::ip::make_address("127.0.0.1"), 0}) {
    port_ = acceptor_.local_endpoint().port();
    thread_ = std::thread([this] { Serve(); });
  }
  ~RecordingTarget() {
    stop_ = true;
    beast::error_code ec;
    acceptor_.close(ec);
    // Wake the blocking accept.
    asio::ip::tcp::socket s(ioc_);
    s.connect({asio::ip::make_address("127.0.0.1"), port_}, ec);
    thread_.join();
  }

  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/events"; }
  void set_down(bool down) { down_ = down; }
  void set_delay(std::chrono::milliseconds d) { delay_ms_ = static_cast<int>(d.count()); }

  struct Seen {
    int ok = 0;       // 2xx answers
    int refused = 0;  // 503/422 answers
    std::set<std::string> keys;
  };
  std::map<std::string, Seen> by_body() {
    std::lock_guard<std::mutex> l(mu_);
    return seen_;
  }
  int total_ok() {
    std::lock_guard<std::mutex> l(mu_);
    int n = 0;
    for (const auto& [b, s] : seen_) n += s.ok;
    return n;
  }

 private:
  void Serve() {
    while (!stop_) {
      asio::ip::tcp::socket socket(ioc_);
      beast::error_code ec;
      acceptor_.accept(socket, ec);
      if (ec || stop_) continue;
      beast::flat_buffer buffer;
      bhttp::request<bhttp::string_body> req;
      bhttp::read(socket, buffer, req, ec);
      if (ec) continue;
      // A slow target, as set_delay() asks.
      if (delay_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms_.load()));
      int status = 201;
      const std::string body = req.body();
      if (down_) {
        status = 503;
      } else if (body.rfind("reject", 0) == 0) {
        status = 422;
      }
      {
        std::lock_guard<std::mutex> l(mu_);
        Seen& s = seen_[body];
        s.keys.insert(std::string(req["Idempotency-Key"]));
        (status < 300 ? s.ok : s.refused)++;
      }
      bhttp::response<bhttp::string_body> res{static_cast<bhttp::status>(status), 11};
      res.set(bhttp::field::content_type, "application/json");
      res.body() = status < 300 ? R"({"accepted":true})" : R"({"error":"no"})";
      res.prepare_payload();
      res.keep_alive(false);
      bhttp::write(socket, res, ec);
      socket.shutdown(asio::ip::tcp::socket::shutdown_both, ec);
    }
  }

  asio::io_context ioc_;
  asio::ip::tcp::acceptor acceptor_;
  uint16_t port_ = 0;
  std::thread thread_;
  std::atomic<bool> stop_{false}, down_{false};
  std::atomic<int> delay_ms_{0};
  std::mutex mu_;
  std::map<std::string, Seen> seen_;
};

// GET `target` from 127.0.0.1:`port`: the status and body, or -1 when no answer.
std::pair<int, std::string> HttpGet(uint16_t port, const std::string& target) {
  asio::io_context ioc;
  asio::ip::tcp::socket socket(ioc);
  beast::error_code ec;
  socket.connect({asio::ip::make_address("127.0.0.1"), port}, ec);
  if (ec) return {-1, ec.message()};
  bhttp::request<bhttp::empty_body> req{bhttp::verb::get, target, 11};
  req.set(bhttp::field::host, "127.0.0.1");
  bhttp::write(socket, req, ec);
  if (ec) return {-1, ec.message()};
  beast::flat_buffer buffer;
  bhttp::response<bhttp::string_body> res;
  bhttp::read(socket, buffer, res, ec);
  if (ec) return {-1, ec.message()};
  return {static_cast<int>(res.result_int()), res.body()};
}

// The value of the exposition line `series VALUE` in `text`, or -1 without one.
int64_t SeriesValue(const std::string& text, const std::string& series) {
  const std::string line = "\n" + series + " ";
  const size_t at = ("\n" + text).find(line);
  if (at == std::string::npos) return -1;
  return std::atoll(text.c_str() + at + line.size() - 1);
}

class KafkaBridgeTest : public ::testing::Test {
 protected:
  std::vector<std::string> Args(const std::string& group) {
    std::vector<std::string> a = {"bridge", "kafka", "--brokers", kafka_.brokers(), "--topic",
                                  "orders", "--group", group, "--key-header", "event_id",
                                  "--to", target_.url(), "--store",
                                  "sqlite://" + dir_.file("bridge.db"), "--attempts", "3",
                                  "--backoff", "50ms", "--max-backoff", "200ms", "--timeout", "1s",
                                  "--lease", "5s", "--idle-exit", "2500ms", "--batch", "10",
                                  "--kafka-property", "session.timeout.ms=3000",
                                  "--kafka-property", "heartbeat.interval.ms=500"};
    return a;
  }
  pid_t Spawn(const std::string& name, const std::string& group = "bridge") {
    return SpawnWith(name, Args(group));
  }
  pid_t SpawnWith(const std::string& name, const std::vector<std::string>& args) {
    const int out = open(dir_.file(name + ".out").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    const pid_t pid = testing::SpawnIdem(args, dir_.path(), out, dir_.file(name + ".err"));
    close(out);
    return pid;
  }
  // Waits for `pid` and returns its stats line.
  nlohmann::json Wait(pid_t pid, const std::string& name) {
    int status = 0;
    waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << status << ": " << testing::ReadWholeFile(dir_.file(name + ".err"));
    const std::string out = testing::ReadWholeFile(dir_.file(name + ".out"));
    nlohmann::json j = nlohmann::json::parse(out, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << out;
    return j;
  }
  void Produce(int n, int from = 0) {
    for (int i = from; i < from + n; ++i) {
      kafka_.Produce("orders", 0, "", "event-" + std::to_string(i),
                     {{"event_id", "E-" + std::to_string(i)}});
    }
  }

  testing::MockKafka kafka_;
  testing::TempDir dir_;
  RecordingTarget target_;
};

TEST_F(KafkaBridgeTest, TargetDownForAWhileIsRetriedAndDeliveredOnce) {
  kafka_.CreateTopic("orders", 1);
  Produce(5);
  target_.set_down(true);
  const pid_t pid = Spawn("run");
  // Down until the bridge has been refused a few times, then back.
  testing::WaitUntil([&] { return target_.by_body()["event-0"].refused >= 4; });
  target_.set_down(false);
  nlohmann::json stats = Wait(pid, "run");
  std::map<std::string, RecordingTarget::Seen> seen = target_.by_body();
  ASSERT_EQ(seen.size(), 5u);
  for (int i = 0; i < 5; ++i) {
    const RecordingTarget::Seen& s = seen["event-" + std::to_string(i)];
    EXPECT_EQ(s.ok, 1) << i;
    EXPECT_EQ(s.keys, std::set<std::string>{"E-" + std::to_string(i)});
  }
  EXPECT_GE(seen["event-0"].refused, 4);
  EXPECT_EQ(stats["delivered"], 5);
  EXPECT_GE(stats["rounds_failed"].get<int>(), 1);
  EXPECT_EQ(kafka_.Committed("bridge", "orders", 0), 5);

  // Run again from the start (offsets reset by a new group on the same store):
  // every message was delivered, so none is sent again.
  const pid_t again = Spawn("again", "bridge-2");
  nlohmann::json again_stats = Wait(again, "again");
  EXPECT_EQ(again_stats["skipped"], 5);
  EXPECT_EQ(again_stats["attempts"], 0);
  EXPECT_EQ(target_.total_ok(), 5);
}

TEST_F(KafkaBridgeTest, FinalClientErrorIsDeadLetteredAndThePartitionFlows) {
  kafka_.CreateTopic("orders", 1);
  kafka_.CreateTopic("orders.dlq", 1);
  Produce(1, 0);
  kafka_.Produce("orders", 0, "", "reject this one", {{"event_id", "E-r"}});
  Produce(1, 1);
  nlohmann::json stats = Wait(Spawn("run"), "run");
  EXPECT_EQ(stats["delivered"], 2);
  EXPECT_EQ(stats["dead_lettered"], 1);
  EXPECT_EQ(target_.by_body()["reject this one"].refused, 1);  // not retried: final
  std::vector<Message> dead = kafka_.ReadAll("orders.dlq", 1, /*expected=*/1);
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_THAT(*dead[0].Header("idem-dlq-reason"), HasSubstr("the target answered 422"));
  EXPECT_EQ(*dead[0].Header("idem-dlq-offset"), "1");
  EXPECT_EQ(kafka_.Committed("bridge", "orders", 0), 3);
}

TEST_F(KafkaBridgeTest, KilledMidRunDeliversEveryEventUnderOneKey) {
  constexpr int kEvents = 30;
  kafka_.CreateTopic("orders", 1);
  Produce(kEvents);
  target_.set_delay(std::chrono::milliseconds(40));
  const pid_t first = Spawn("first");
  testing::WaitUntil([&] { return target_.total_ok() >= 12; }, testing::kGenerousDeadline,
                     std::chrono::milliseconds(5));
  ASSERT_EQ(kill(first, SIGKILL), 0);
  int status = 0;
  waitpid(first, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status));
  const int before = target_.total_ok();
  ASSERT_LT(before, kEvents) << "the bridge finished before it was killed";

  nlohmann::json stats = Wait(Spawn("second"), "second");
  std::map<std::string, RecordingTarget::Seen> seen = target_.by_body();
  ASSERT_EQ(seen.size(), static_cast<size_t>(kEvents));  // none lost
  int resent = 0;
  for (int i = 0; i < kEvents; ++i) {
    const RecordingTarget::Seen& s = seen["event-" + std::to_string(i)];
    EXPECT_GE(s.ok, 1) << i;
    // Never under two keys: a re-send carries the same Idempotency-Key.
    EXPECT_EQ(s.keys, std::set<std::string>{"E-" + std::to_string(i)}) << i;
    resent += s.ok - 1;
  }
  // Only the delivery in flight at the kill (sent, not yet recorded) goes again;
  // the delivered-but-uncommitted ones are skipped from their records.
  EXPECT_LE(resent, 1);
  EXPECT_EQ(stats["delivered"].get<int>() + stats["skipped"].get<int>(),
            stats["polled"].get<int>());
  EXPECT_EQ(kafka_.Committed("bridge", "orders", 0), kEvents);
}

// --metrics-listen: GET /metrics while the bridge runs, in Prometheus text, with
// the bridge's counters (rebalances by kind, deliveries, dead letters, commits) as
// they happen; nothing else is served there.
TEST_F(KafkaBridgeTest, MetricsListenExportsTheBridgesCounters) {
  kafka_.CreateTopic("orders", 1);
  kafka_.CreateTopic("orders.dlq", 1);
  Produce(2);
  kafka_.Produce("orders", 0, "", "reject this one", {{"event_id", "E-r"}});
  std::vector<std::string> args = Args("bridge");
  // Until SIGTERM rather than --idle-exit: the test scrapes while it runs.
  const auto idle = std::find(args.begin(), args.end(), "--idle-exit");
  ASSERT_NE(idle, args.end());
  args.erase(idle, idle + 2);
  args.insert(args.end(), {"--metrics-listen", "127.0.0.1:0"});
  const pid_t pid = SpawnWith("run", args);
  uint16_t port = 0;
  const std::string logged = "metrics on http://127.0.0.1:";
  ASSERT_TRUE(testing::WaitUntil([&] {
    const std::string err = testing::ReadWholeFile(dir_.file("run.err"));
    const size_t at = err.find(logged);
    if (at != std::string::npos) {
      port = static_cast<uint16_t>(std::atoi(err.c_str() + at + logged.size()));
    }
    return port != 0;
  })) << testing::ReadWholeFile(dir_.file("run.err"));

  std::pair<int, std::string> scrape;
  const bool counted = testing::WaitUntil(
      [&] {
        scrape = HttpGet(port, "/metrics");
        return scrape.first == 200 &&
               SeriesValue(scrape.second, "idem_bridge_deliveries_total") == 2 &&
               SeriesValue(scrape.second, "idem_bridge_dead_letters_total") == 1 &&
               SeriesValue(scrape.second, "idem_bridge_commits_total") >= 1;
      },
      testing::kGenerousDeadline, std::chrono::milliseconds(50));
  const std::string& body = scrape.second;
  EXPECT_TRUE(counted) << scrape.first << "\n" << body;
  EXPECT_GE(SeriesValue(body, "idem_bridge_rebalances_total{kind=\"assign\"}"), 1) << body;
  EXPECT_GE(SeriesValue(body, "idem_bridge_rebalances_total{kind=\"revoke\"}"), 0) << body;
  EXPECT_EQ(SeriesValue(body, "idem_bridge_commit_failures_total"), 0) << body;
  EXPECT_EQ(SeriesValue(body, "idem_bridge_polled_total"), 3) << body;
  EXPECT_THAT(body, HasSubstr("# TYPE idem_bridge_rebalances_total counter\n"));
  EXPECT_THAT(body, HasSubstr("idem_build_info{version="));
  EXPECT_EQ(HttpGet(port, "/v1/claims").first, 404);

  ASSERT_EQ(kill(pid, SIGTERM), 0);
  nlohmann::json stats = Wait(pid, "run");
  EXPECT_EQ(stats["delivered"], 2);
  EXPECT_EQ(stats["dead_lettered"], 1);
  EXPECT_GE(stats["rebalances"].get<int>(),
            SeriesValue(body, "idem_bridge_rebalances_total{kind=\"assign\"}"));

  // A listen address that is not HOST:PORT is a usage error, before anything starts.
  testing::RunResult bad = testing::RunIdemIn(
      dir_.path(), {"bridge", "kafka", "--brokers", kafka_.brokers(), "--topic", "orders",
                    "--group", "g", "--key-header", "event_id", "--to", target_.url(),
                    "--metrics-listen", "localhost"});
  testing::ExpectOneLineFailure(bad, 2);
  EXPECT_THAT(bad.err, HasSubstr("--metrics-listen 'localhost' must be HOST:PORT"));
}

// A SIGTERM that arrives while the bridge is still starting (before it joined the
// group) is kept and stops it gracefully: exit 0 and its counts. It used to be
// handled only from just before the loop, so earlier the default action killed it.
TEST_F(KafkaBridgeTest, ASigtermDuringStartupStopsItGracefully) {
  kafka_.CreateTopic("orders", 1);
  std::vector<std::string> args = Args("early");
  const auto idle = std::find(args.begin(), args.end(), "--idle-exit");
  ASSERT_NE(idle, args.end());
  args.erase(idle, idle + 2);  // would end it by itself otherwise
  const pid_t pid = SpawnWith("early", args);
  // Once the command has started it blocks SIGTERM (its main thread's SigBlk).
  const std::string status_file = "/proc/" + std::to_string(pid) + "/status";
  const bool blocked = testing::WaitUntil([&] {
    const std::string status = testing::ReadWholeFile(status_file);
    const size_t at = status.find("SigBlk:");
    if (at == std::string::npos) return false;
    const uint64_t mask = std::stoull(status.substr(at + 7), nullptr, 16);
    return (mask & (uint64_t{1} << (SIGTERM - 1))) != 0;
  });
  ASSERT_EQ(kill(pid, SIGTERM), 0);
  nlohmann::json stats = Wait(pid, "early");
  EXPECT_TRUE(blocked);
  EXPECT_EQ(stats["delivered"], 0);
}

TEST_F(KafkaBridgeTest, KeyOnTheOffsetIsRefused) {
  testing::RunResult r = testing::RunIdemIn(
      dir_.path(), {"bridge", "kafka", "--brokers", kafka_.brokers(), "--topic", "orders",
                    "--group", "g", "--key-header", "offset", "--to", target_.url()});
  testing::ExpectOneLineFailure(r, 2);
  EXPECT_THAT(r.err, HasSubstr("position in the log"));
  r = testing::RunIdemIn(dir_.path(), {"bridge", "kafka", "--brokers", kafka_.brokers(), "--topic",
                                       "orders", "--group", "g", "--to", target_.url()});
  testing::ExpectOneLineFailure(r, 2);
  EXPECT_THAT(r.err, HasSubstr("exactly one of --key-header"));
}

}  // namespace
}  // namespace idem::messaging
