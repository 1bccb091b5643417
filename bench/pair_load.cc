// pair_load: the claim+complete workload of bench/claims.sh, which wrk cannot drive
// (the complete needs the claim's token). `--connections N` threads, each with one
// keep-alive connection, loop for `--seconds S`: claim a fresh key, complete it with
// the token the claim returned. Prints one line:
//   RESULT rps=<pairs per second> p50_ms=… p99_ms=… errors=…
// where the latency is that of a whole pair (claim, then complete).
//
// `--claims-only`: new-key claims only (no complete). `--rate R`: open loop at R
// requests (pairs, or claims) per second in all, spread over the connections; each
// latency runs from the moment its request was due, so a server that falls behind
// shows it in p99 instead of slowing the load down (no coordinated omission). This is
// how bench/claims.sh measures claim p99 at half of the peak throughput.
//
//   pair_load --port P --token T [--connections 64] [--seconds 10] [--claims-only]
//             [--rate R]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "boost/asio/connect.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/beast/core.hpp"
#include "boost/beast/http.hpp"

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;

struct Worker {
  std::vector<double> latencies_ms;
  int errors = 0;
};

bool Post(beast::tcp_stream& stream, beast::flat_buffer& buffer, const std::string& target,
          const std::string& token, const std::string& body, int want, std::string* out) {
  bhttp::request<bhttp::string_body> req{bhttp::verb::post, target, 11};
  req.set(bhttp::field::host, "127.0.0.1");
  req.set(bhttp::field::authorization, "Bearer " + token);
  req.set(bhttp::field::content_type, "application/json");
  req.body() = body;
  req.prepare_payload();
  beast::error_code ec;
  bhttp::write(stream, req, ec);
  if (ec) return false;
  bhttp::response<bhttp::string_body> res;
  bhttp::read(stream, buffer, res, ec);
  if (ec || res.result_int() != static_cast<unsigned>(want)) return false;
  *out = std::move(res.body());
  return true;
}

struct Load {
  int port = 0;
  std::string token = "bench";
  bool claims_only = false;
  double rate = 0;  // requests per second in all; 0: closed loop, as fast as answered
  int connections = 64;
};

void Run(const Load& load, int id, std::chrono::steady_clock::time_point begin,
         std::chrono::steady_clock::time_point end, Worker* w) {
  const int port = load.port;
  const std::string& token = load.token;
  asio::io_context ioc;
  beast::tcp_stream stream(ioc);
  beast::error_code ec;
  stream.connect(asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), port), ec);
  if (ec) {
    ++w->errors;
    return;
  }
  beast::flat_buffer buffer;
  const std::string run = std::to_string(std::chrono::system_clock::now().time_since_epoch().count());
  // Open loop: this connection's requests are due every `period`, the connections
  // staggered over one period.
  const std::chrono::duration<double> period(load.rate > 0 ? load.connections / load.rate : 0);
  for (long n = 0; std::chrono::steady_clock::now() < end; ++n) {
    const std::string key = run + "-" + std::to_string(id) + "-" + std::to_string(n);
    auto start = std::chrono::steady_clock::now();
    if (load.rate > 0) {
      const auto due = begin + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                   period * (n + static_cast<double>(id) / load.connections));
      if (due >= end) break;
      std::this_thread::sleep_until(due);
      start = due;
    }
    std::string body;
    if (!Post(stream, buffer, "/v1/claims", token,
              R"({"biz_type":"bench","key":")" + key + R"("})", 201, &body)) {
      ++w->errors;
      return;
    }
    if (load.claims_only) {
      w->latencies_ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count());
      continue;
    }
    const size_t at = body.find("\"token\":");
    const long claim_token = at == std::string::npos ? 0 : std::atol(body.c_str() + at + 8);
    if (!Post(stream, buffer, "/v1/claims/complete", token,
              R"({"biz_type":"bench","key":")" + key + R"(","token":)" +
                  std::to_string(claim_token) + R"(,"result":{"ok":true}})",
              200, &body)) {
      ++w->errors;
      return;
    }
    w->latencies_ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
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
    else {
      std::fprintf(stderr, "pair_load: unknown option %s\n", flag.c_str());
      return 2;
    }
  }
  if (load.port <= 0 || load.connections <= 0 || seconds <= 0 || load.rate < 0) {
    std::fprintf(stderr,
                 "pair_load: --port P [--token T] [--connections N] [--seconds S] "
                 "[--claims-only] [--rate R]\n");
    return 2;
  }
  const int connections = load.connections;
  std::vector<Worker> workers(connections);
  std::vector<std::thread> threads;
  const auto start = std::chrono::steady_clock::now();
  const auto end = start + std::chrono::seconds(seconds);
  for (int i = 0; i < connections; ++i) {
    threads.emplace_back(Run, std::cref(load), i, start, end, &workers[i]);
  }
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
