// A minimal program against an installed idem: one guarded effect, run twice.
//   consumer STORE_URL   (e.g. sqlite:///tmp/consumer.db)
// Prints "executed" then "replayed <result>" and exits 0; anything else exits 1.
#include <cstdio>
#include <string>

#include "idem/idem.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: consumer STORE_URL\n");
    return 2;
  }
  absl::StatusOr<std::unique_ptr<idem::Store>> store = idem::OpenStore(argv[1]);
  if (!store.ok()) {
    std::fprintf(stderr, "consumer: %s\n", std::string(store.status().message()).c_str());
    return 1;
  }
  idem::Guard guard(**store);
  int runs = 0;
  for (int attempt = 0; attempt < 2; ++attempt) {
    absl::StatusOr<idem::Result> r = guard.Run(
        {.biz_type = "refund", .key = "R-1", .fingerprint = idem::Fingerprint("amount=12.50")},
        [&](idem::Transaction&) -> absl::StatusOr<std::string> {
          ++runs;
          return std::string(R"({"refund_id":"F-1"})");
        });
    if (!r.ok()) {
      std::fprintf(stderr, "consumer: %s\n", std::string(r.status().message()).c_str());
      return 1;
    }
    if (r->outcome == idem::Outcome::kExecuted) {
      std::printf("executed\n");
    } else if (r->outcome == idem::Outcome::kReplayed) {
      std::printf("replayed %s\n", r->value.c_str());
    } else {
      std::printf("unexpected outcome\n");
      return 1;
    }
  }
  return runs == 1 ? 0 : 1;
}
