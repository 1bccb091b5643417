// rss_fill: fills a store with finished records for bench/rss.sh (the
// memory run). Opens `--store URL` in-process through the public API and, with
// `--threads T` threads, claims and completes the keys fill-FROM … fill-(TO-1)
// (tenant and biz_type "bench", a 16-byte result) with idem::Guard in lease mode,
// the path `idem serve` takes for POST /v1/claims + /complete. Keys are numbered,
// so a second run with --from = the first run's --to adds to the same store.
// Prints one line at the end:
//   FILLED records=<TO> added=<TO-FROM> seconds=… per_s=… rss_mib=…
// where rss_mib is this process's VmRSS (/proc/self/status) with the store still
// open. Exit 1 when the store cannot be opened or a claim/complete fails (the
// first error on stderr), 2 for bad options.
//
//   rss_fill --store rocksdb://DIR --to N [--from 0] [--threads 4]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "idem/idem.h"

namespace {

// This process's resident set in MiB (VmRSS of /proc/self/status), or -1.
double RssMib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) {
      int64_t kib = 0;
      if (absl::SimpleAtoi(absl::StripAsciiWhitespace(line.substr(6, line.size() - 6 - 3)), &kib)) {
        return static_cast<double>(kib) / 1024.0;
      }
    }
  }
  return -1;
}

[[noreturn]] void Usage(const std::string& why) {
  std::fprintf(stderr, "rss_fill: %s (--store URL --to N [--from N] [--threads N])\n",
               why.c_str());
  std::exit(2);
}

int64_t IntArg(const char* name, const char* value) {
  int64_t n = 0;
  if (value == nullptr || !absl::SimpleAtoi(value, &n) || n < 0) {
    Usage(absl::StrFormat("%s needs a non-negative integer", name));
  }
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  std::string url;
  int64_t from = 0;
  int64_t to = -1;
  int64_t threads = 4;
  for (int i = 1; i < argc; i += 2) {
    const char* value = i + 1 < argc ? argv[i + 1] : nullptr;
    if (std::strcmp(argv[i], "--store") == 0 && value != nullptr) {
      url = value;
    } else if (std::strcmp(argv[i], "--from") == 0) {
      from = IntArg("--from", value);
    } else if (std::strcmp(argv[i], "--to") == 0) {
      to = IntArg("--to", value);
    } else if (std::strcmp(argv[i], "--threads") == 0) {
      threads = IntArg("--threads", value);
    } else {
      Usage(absl::StrFormat("unknown option %s", argv[i]));
    }
  }
  if (url.empty()) Usage("--store is required");
  if (to < from) Usage("--to is required and must be >= --from");
  if (threads < 1 || threads > 256) Usage("--threads must be 1..256");

  absl::StatusOr<std::unique_ptr<idem::Store>> store = idem::OpenStore(url);
  if (!store.ok()) {
    std::fprintf(stderr, "rss_fill: cannot open the store: %s\n",
                 idem::RedactStoreSecrets(store.status(), url).ToString().c_str());
    return 1;
  }
  idem::Guard guard(**store);

  std::atomic<int64_t> next{from};
  std::atomic<bool> failed{false};
  std::mutex error_mu;
  std::string first_error;
  auto fail = [&](const std::string& why) {
    std::lock_guard<std::mutex> lock(error_mu);
    if (first_error.empty()) first_error = why;
    failed = true;
  };
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> workers;
  for (int64_t t = 0; t < threads; ++t) {
    workers.emplace_back([&] {
      idem::Request req;
      req.tenant = "bench";
      req.biz_type = "bench";
      while (!failed) {
        const int64_t n = next.fetch_add(1);
        if (n >= to) return;
        req.key = absl::StrFormat("fill-%d", n);
        absl::StatusOr<idem::Result> claim = guard.Claim(req);
        if (!claim.ok()) return fail("claim " + req.key + ": " + claim.status().ToString());
        if (claim->outcome == idem::Outcome::kReplayed) continue;  // filled by an earlier run
        if (claim->outcome != idem::Outcome::kAcquired) {
          return fail(absl::StrFormat("claim %s: %s", req.key, idem::OutcomeName(claim->outcome)));
        }
        absl::Status done = guard.Complete(req, claim->token, "{\"n\":1234567890}");
        if (!done.ok()) return fail("complete " + req.key + ": " + done.ToString());
      }
    });
  }
  for (std::thread& w : workers) w.join();
  if (failed) {
    std::fprintf(stderr, "rss_fill: %s\n", first_error.c_str());
    return 1;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("FILLED records=%lld added=%lld seconds=%.1f per_s=%.0f rss_mib=%.1f\n",
              static_cast<long long>(to), static_cast<long long>(to - from), seconds,
              static_cast<double>(to - from) / std::max(seconds, 1e-9), RssMib());
  return 0;
}
