// chaos_driver: one long chaos run (bench/chaos.sh runs it per backend).
//   chaos_driver --backend rocksdb|postgres|mysql|kafka|streams --seconds N --seed S
//                [--clients N] [--dir DIR] [--no-faults]
// rocksdb, postgres, mysql: HTTP clients against `idem serve` (scenario.h); kafka,
// streams: consumer processes on the Kafka mock / a Redis stream (messaging.h;
// --clients is the number of consumers, default 3; streams needs
// IDEM_TEST_REDIS_URL). Prints the run's summary (seed, operations, faults by kind)
// and the checker's table. Exit 0: no violation; 1: violations, or the run could not be set up (the
// reason on stderr, with the seed); 2: bad usage.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>

#include "absl/strings/numbers.h"
#if IDEM_CHAOS_MESSAGING
#include "chaos/messaging.h"
#endif
#include "chaos/scenario.h"

namespace {

int Usage(const std::string& why) {
  std::cerr << "chaos_driver: " << why
            << "\nusage: chaos_driver --backend rocksdb|postgres|mysql|kafka|streams --seconds N "
               "--seed S "
               "[--clients N] [--dir DIR] [--no-faults]\n";
  return 2;
}

#if IDEM_CHAOS_MESSAGING
// A messaging run (messaging.h) with the driver's options.
int RunMessaging(const idem::chaos::ScenarioOptions& s, int64_t seconds, bool clients_given) {
  idem::chaos::MessagingOptions o;
  o.transport = s.backend;
  o.work_dir = s.work_dir;
  o.consumer_bin = CHAOS_CONSUMER;
  o.seed = s.driver.seed;
  o.duration = std::chrono::seconds(seconds);
  o.inject_faults = s.inject_faults;
  if (clients_given) o.consumers = s.driver.clients;
  std::cout << "chaos_driver: backend=" << o.transport << " seed=" << o.seed
            << " seconds=" << seconds << " consumers=" << o.consumers << std::endl;
  absl::StatusOr<idem::chaos::MessagingResult> r = idem::chaos::RunMessaging(o);
  if (!r.ok()) {
    std::cerr << "chaos_driver: " << r.status().message() << "\n";
    return 1;
  }
  std::cout << r->Summary();
  for (const std::string& f : r->fault_log) std::cout << "  fault " << f << "\n";
  if (!r->report.ok() || !r->unexpected_exits.empty()) {
    std::cerr << "chaos_driver: seed=" << r->seed << ": " << r->report.violations()
              << " violations, " << r->unexpected_exits.size()
              << " unexpected consumer exits; the run's files (consumer logs, the store) are in "
              << o.work_dir << "\n";
    return 1;
  }
  return 0;
}
#endif

}  // namespace

int main(int argc, char** argv) {
  idem::chaos::ScenarioOptions o;
  o.services_sh = IDEM_SERVICES_SH;
  o.driver.pause_probability = 0.05;
  int64_t seconds = 0;
  bool have_seed = false, clients_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--no-faults") {
      o.inject_faults = false;
      continue;
    }
    if (a == "--help" || a == "-h") {
      Usage("runs one chaos run and checks its history");
      return 0;
    }
    if (i + 1 >= argc) return Usage(a + " needs a value");
    const std::string v = argv[++i];
    if (a == "--backend") {
      o.backend = v;
    } else if (a == "--seconds") {
      if (!absl::SimpleAtoi(v, &seconds) || seconds < 1) {
        return Usage("--seconds '" + v + "': not a whole number >= 1");
      }
    } else if (a == "--seed") {
      if (!absl::SimpleAtoi(v, &o.driver.seed)) return Usage("--seed '" + v + "': not a number");
      have_seed = true;
    } else if (a == "--clients") {
      if (!absl::SimpleAtoi(v, &o.driver.clients) || o.driver.clients < 1 ||
          o.driver.clients > 256) {
        return Usage("--clients '" + v + "': not a number in 1..256");
      }
      clients_given = true;
    } else if (a == "--dir") {
      o.work_dir = v;
    } else {
      return Usage("unknown option " + a);
    }
  }
  const bool messaging = o.backend == "kafka" || o.backend == "streams";
  if (o.backend != "rocksdb" && o.backend != "postgres" && o.backend != "mysql" && !messaging) {
    return Usage("--backend must be rocksdb, postgres, mysql, kafka or streams");
  }
  if (seconds == 0) return Usage("--seconds is required");
  if (!have_seed) return Usage("--seed is required");
  if (o.work_dir.empty()) o.work_dir = "chaos-" + o.backend + "-" + std::to_string(getpid());
#if IDEM_CHAOS_MESSAGING
  if (messaging) return RunMessaging(o, seconds, clients_given);
#else
  (void)clients_given;
  if (messaging) return Usage("this build has no Redis Streams transport (IDEM_WITH_REDIS=OFF)");
#endif
  o.driver.duration = std::chrono::seconds(seconds);
  std::cout << "chaos_driver: backend=" << o.backend << " seed=" << o.driver.seed
            << " seconds=" << seconds << " clients=" << o.driver.clients << std::endl;
  absl::StatusOr<idem::chaos::RunResult> r = idem::chaos::RunScenario(o);
  if (!r.ok()) {
    std::cerr << "chaos_driver: " << r.status().message() << "\n";
    return 1;
  }
  std::cout << r->Summary();
  if (!r->report.ok()) {
    std::cerr << "chaos_driver: seed=" << r->seed << ": " << r->report.violations()
              << " violations; the run's files are in " << o.work_dir << "\n";
    for (const std::string& f : r->fault_log) std::cerr << "  fault " << f << "\n";
    // The whole history and effect log, for a person to read.
    std::ofstream out(o.work_dir + "/history.txt");
    const auto t0 = r->history.empty() ? idem::chaos::Clock::time_point{} : r->history[0].invoke;
    for (const idem::chaos::Operation& op : r->history) {
      out << idem::chaos::FormatOperation(op, t0) << "\n";
    }
    for (const idem::chaos::Effect& e : r->effects) {
      out << "+" << std::chrono::duration_cast<std::chrono::milliseconds>(e.at - t0).count()
          << "ms effect " << e.key << " token " << e.token << " client " << e.client << "\n";
    }
    std::cerr << "chaos_driver: the history is in " << o.work_dir << "/history.txt\n";
    return 1;
  }
  return 0;
}
