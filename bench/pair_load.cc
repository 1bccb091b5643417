// pair_load: the claim+complete workload of bench/claims.sh, which wrk cannot drive
// (the complete needs the claim's token). `--connections N` keep-alive connections
// loop for `--seconds S`: claim a fresh key, complete it with the token the claim
// returned. Prints one line:
//   RESULT rps=<pairs per second> p50_ms=… p99_ms=… errors=…
// where the latency is that of a whole pair (claim, then complete).
//
// `--claims-only`: new-key claims only (no complete). `--rate R`: open loop at R
// requests (pairs, or claims) per second in all, spread over the connections; each
// latency runs from the moment its request was due, so a server that falls behind
// shows it in p99 instead of slowing the load down (no coordinated omission). This is
// how bench/claims.sh measures claim p99 at half of the peak throughput.
//
// The connections are Asio coroutines on `--threads T` event loops (default 2, as
// wrk runs in bench/claims.sh), not a blocking thread each: on this two-core VM a
// context switch costs more than a claim, and the generator shares the cores with
// the server. Closed loop, 64 connections, rocksdb://, alternating runs: 7.2k and
// 7.6k pairs/s with a thread each, 8.1k and 10.1k with two event loops. The open
// loop's p99 was the same with both (~11 ms at 9k claims/s: the WAL's fsync,
// docs/benchmarks.md).
//
//   pair_load --port P --token T [--connections 64] [--seconds 10] [--claims-only]
//             [--rate R] [--threads 2]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <utility>  // before Boost 1.74's awaitable.hpp, which uses std::exchange without it
#include <vector>

#include "boost/asio/co_spawn.hpp"
#include "boost/asio/detached.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/asio/steady_timer.hpp"
#include "boost/asio/use_awaitable.hpp"
#include "boost/beast/core.hpp"
#include "boost/beast/http.hpp"

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using Clock = std::chrono::steady_clock;

struct Worker {
  std::vector<double> latencies_ms;
  int errors = 0;
};

struct Load {
  int port = 0;
  std::string token = "bench";
  bool claims_only = false;
  double rate = 0;  // requests per second in all; 0: closed loop, as fast as answered
  int connections = 64;
  int threads = 2;
};

// One request and its answer; throws on an I/O error, false for another status.
asio::awaitable<bool> Post(beast::tcp_stream& stream, beast::flat_buffer& buffer,
                           const Load& load, const std::string& target, std::string body,
                           unsigned want, std::string* out) {
  bhttp::request<bhttp::string_body> req{bhttp::verb::post, target, 11};
  req.set(bhttp::field::host, "127.0.0.1");
  req.set(bhttp::field::authorization, "Bearer " + load.token);
  req.set(bhttp::field::content_type, "application/json");
  req.body() = std::move(body);
  req.prepare_payload();
  co_await bhttp::async_write(stream, req, asio::use_awaitable);
  bhttp::response<bhttp::string_body> res;
  co_await bhttp::async_read(stream, buffer, res, asio::use_awaitable);
  *out = std::move(res.body());
  co_return res.result_int() == want;
}

// Connection `id`: its requests until `end`, each latency into `w`. An error ends it.
asio::awaitable<void> Run(const Load& load, int id, Clock::time_point begin,
                          Clock::time_point end, Worker* w) {
  try {
    auto executor = co_await asio::this_coro::executor;
    beast::tcp_stream stream(executor);
    co_await stream.async_connect(
        asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), load.port),
        asio::use_awaitable);
    stream.socket().set_option(asio::ip::tcp::no_delay(true));
    beast::flat_buffer buffer;
    asio::steady_timer timer(executor);
    const std::string run =
        std::to_string(std::chrono::system_clock::now().time_since_epoch().count());
    // Open loop: this connection's requests are due every `period`, the connections
    // staggered over one period.
    const std::chrono::duration<double> period(load.rate > 0 ? load.connections / load.rate : 0);
    for (long n = 0; Clock::now() < end; ++n) {
      const std::string key = run + "-" + std::to_string(id) + "-" + std::to_string(n);
      auto start = Clock::now();
      if (load.rate > 0) {
        const auto due = begin + std::chrono::duration_cast<Clock::duration>(
                                     period * (n + static_cast<double>(id) / load.connections));
        if (due >= end) break;
        timer.expires_at(due);
        co_await timer.async_wait(asio::use_awaitable);
        start = due;
      }
      std::string body;
      if (!co_await Post(stream, buffer, load, "/v1/claims",
                         R"({"biz_type":"bench","key":")" + key + R"("})", 201, &body)) {
        ++w->errors;
        co_return;
      }
      if (!load.claims_only) {
        const size_t at = body.find("\"token\":");
        const long claim_token = at == std::string::npos ? 0 : std::atol(body.c_str() + at + 8);
        if (!co_await Post(stream, buffer, load, "/v1/claims/complete",
                           R"({"biz_type":"bench","key":")" + key + R"(","token":)" +
                               std::to_string(claim_token) + R"(,"result":{"ok":true}})",
                           200, &body)) {
          ++w->errors;
          co_return;
        }
      }
      w->latencies_ms.push_back(
          std::chrono::duration<double, std::milli>(Clock::now() - start).count());
    }
  } catch (const std::exception&) {
    ++w->errors;
  }
}

}  // namespace

int main(int argc, char** argv) {
  Load load;
  int seconds = 10;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--claims-only") {
      load.claims_only = true;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "pair_load: %s needs a value\n", argv[i]);
      return 2;
    }
    const char* value = argv[++i];
    if (flag == "--port") load.port = std::atoi(value);
    else if (flag == "--token") load.token = value;
    else if (flag == "--connections") load.connections = std::atoi(value);
    else if (flag == "--seconds") seconds = std::atoi(value);
    else if (flag == "--rate") load.rate = std::atof(value);
    else if (flag == "--threads") load.threads = std::atoi(value);
    else {
      std::fprintf(stderr, "pair_load: unknown option %s\n", flag.c_str());
      return 2;
    }
  }
  if (load.port <= 0 || load.connections <= 0 || seconds <= 0 || load.rate < 0 ||
      load.threads <= 0) {
    std::fprintf(stderr,
                 "pair_load: --port P [--token T] [--connections N] [--seconds S] "
                 "[--claims-only] [--rate R] [--threads T]\n");
    return 2;
  }
  const int connections = load.connections;
  std::vector<Worker> workers(connections);
  // One event loop a thread, each with its share of the connections (its Workers are
  // written by its own thread only).
  std::vector<std::unique_ptr<asio::io_context>> loops;
  for (int t = 0; t < load.threads; ++t) loops.push_back(std::make_unique<asio::io_context>(1));
  const auto start = Clock::now();
  const auto end = start + std::chrono::seconds(seconds);
  for (int i = 0; i < connections; ++i) {
    asio::co_spawn(*loops[i % load.threads], Run(load, i, start, end, &workers[i]),
                   asio::detached);
  }
  std::vector<std::thread> threads;
  for (auto& loop : loops) threads.emplace_back([&loop] { loop->run(); });
  for (auto& t : threads) t.join();
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::vector<double> all;
  int errors = 0;
  for (const Worker& w : workers) {
    all.insert(all.end(), w.latencies_ms.begin(), w.latencies_ms.end());
    errors += w.errors;
  }
  std::sort(all.begin(), all.end());
  auto pct = [&](double p) { return all.empty() ? 0.0 : all[static_cast<size_t>(p * (all.size() - 1))]; };
  std::printf("RESULT rps=%.1f p50_ms=%.3f p99_ms=%.3f errors=%d\n", all.size() / elapsed, pct(0.5),
              pct(0.99), errors);
  return 0;
}
