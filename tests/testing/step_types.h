// Operation types the step tests share.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "idem/steps.h"

namespace idem::testing {

// Two local steps: "reserve" succeeds and cannot be undone ("reservation is
// locked"), "charge" fails for good ("card declined"): run once, the operation ends
// COMPENSATION_REQUIRED, for a person to settle.
inline OperationType NeedsAPerson(std::string name) {
  Step reserve{.name = "reserve",
               .execute = [](StepContext&) -> absl::StatusOr<std::string> { return std::string("r1"); },
               .compensate = [](StepContext&) -> absl::Status {
                 return absl::FailedPreconditionError("reservation is locked");
               }};
  Step charge{.name = "charge", .execute = [](StepContext&) -> absl::StatusOr<std::string> {
                return absl::InvalidArgumentError("card declined");
              }};
  return OperationType{.name = std::move(name), .steps = {std::move(reserve), std::move(charge)}};
}

}  // namespace idem::testing
