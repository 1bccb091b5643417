#include "idem/clock.h"

#include "absl/time/clock.h"

namespace idem {
namespace {

class RealClock final : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
};

}  // namespace

void Clock::SleepFor(absl::Duration d) const { absl::SleepFor(d); }

const Clock* Clock::Real() {
  static const RealClock* clock = new RealClock();
  return clock;
}

}  // namespace idem
