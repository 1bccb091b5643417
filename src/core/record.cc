#include "idem/record.h"

namespace idem {

std::string_view RecordStateName(RecordState state) {
  switch (state) {
    case RecordState::kProcessing:
      return "PROCESSING";
    case RecordState::kSucceeded:
      return "SUCCEEDED";
    case RecordState::kFailed:
      return "FAILED";
    case RecordState::kReleased:
      return "RELEASED";
  }
  return "UNKNOWN";
}

}  // namespace idem
