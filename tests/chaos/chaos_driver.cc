// chaos_driver: one long chaos run (bench/chaos.sh runs it per backend).
//   chaos_driver --backend rocksdb|postgres|mysql --seconds N --seed S
//                [--clients N] [--dir DIR] [--no-faults]
// Prints the run's summary (seed, operations, faults by kind) and the checker's
// table. Exit 0: no violation; 1: violations, or the run could not be set up (the
// reason on stderr, with the seed); 2: bad usage.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>

#include "absl/strings/numbers.h"
#include "chaos/scenario.h"

namespace {

int Usage(const std::string& why) {
  std::cerr << "chaos_driver: " << why
            << "\nusage: chaos_driver --backend rocksdb|postgres|mysql --seconds N --seed S "
               "[--clients N] [--dir DIR] [--no-faults]\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  idem::chaos::ScenarioOptions o;
  o.services_sh = IDEM_SERVICES_SH;
  o.driver.pause_probability = 0.05;
  int64_t seconds = 0;
  bool have_seed = false;
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
    } else if (a == "--dir") {
      o.work_dir = v;
    } else {
      return Usage("unknown option " + a);
    }
  }
  if (o.backend != "rocksdb" && o.backend != "postgres" && o.backend != "mysql") {
    return Usage("--backend must be rocksdb, postgres or mysql");
  }
  if (seconds == 0) return Usage("--seconds is required");
  if (!have_seed) return Usage("--seed is required");
  if (o.work_dir.empty()) o.work_dir = "chaos-" + o.backend + "-" + std::to_string(getpid());
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
