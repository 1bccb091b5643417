// Built against an installed idem by tests/dist/install_test.sh: tries every way an
// installed library could offer to turn on the seeded bug
// guard.finish.skip_token_check (a failpoint of the tests' builds that lets a stale
// fencing token pass), then completes a claim with a stale token.
//   fencing_probe STORE_URL   (the test also sets IDEM_FAILPOINTS=...skip_token_check=on)
// The ways: the IDEM_FAILPOINTS variable, and ArmFailpoint, which no installed header
// declares: declared here weak, so the program links either way and sees whether the
// library defines it. Prints "ArmFailpoint: absent|present" and "stale complete:
// <status code>"; exits 0 only when ArmFailpoint is absent and the stale token's
// complete is refused with kAborted (lease_lost), the fencing check holding.
#include <cstdio>
#include <string>
#include <string_view>

#include "idem/idem.h"

namespace idem {
[[gnu::weak]] void ArmFailpoint(std::string_view name, std::string_view action);
}  // namespace idem

namespace {

// Time that moves only when told, so the first lease expires without a sleep.
class ProbeClock : public idem::Clock {
 public:
  absl::Time Now() const override { return now_; }
  void SleepFor(absl::Duration d) const override { now_ += d; }

 private:
  mutable absl::Time now_ = absl::FromUnixSeconds(1800000000);
};

int Fail(const char* what, const absl::Status& status) {
  std::fprintf(stderr, "fencing_probe: %s: %s\n", what, status.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fencing_probe STORE_URL\n");
    return 2;
  }
  const bool arm_defined = &idem::ArmFailpoint != nullptr;
  if (arm_defined) idem::ArmFailpoint("guard.finish.skip_token_check", "on");
  std::printf("ArmFailpoint: %s\n", arm_defined ? "present" : "absent");

  absl::StatusOr<std::unique_ptr<idem::Store>> store = idem::OpenStore(argv[1]);
  if (!store.ok()) return Fail("open", store.status());
  ProbeClock clock;
  idem::Guard guard(**store, {.clock = &clock});
  const idem::Request request{.biz_type = "refund", .key = "R-stale"};
  // The first holder's lease runs out and a second holder takes the key over.
  absl::StatusOr<idem::Result> first = guard.Claim(request, absl::Seconds(1));
  if (!first.ok()) return Fail("first claim", first.status());
  clock.SleepFor(absl::Seconds(5));
  absl::StatusOr<idem::Result> second = guard.Claim(request, absl::Seconds(30));
  if (!second.ok()) return Fail("second claim", second.status());
  if (second->outcome != idem::Outcome::kAcquired || !second->takeover ||
      second->token <= first->token) {
    std::fprintf(stderr, "fencing_probe: the second claim was no takeover (%s, token %lld)\n",
                 std::string(idem::OutcomeName(second->outcome)).c_str(),
                 static_cast<long long>(second->token));
    return 1;
  }
  // The first holder wakes up and completes with its stale token.
  const absl::Status stale = guard.Complete(request, first->token, "stale");
  std::printf("stale complete: %s\n", absl::StatusCodeToString(stale.code()).c_str());
  return !arm_defined && absl::IsAborted(stale) ? 0 : 1;
}
