// Status propagation helpers for idem's absl::Status / absl::StatusOr based API.
//
// IDEM_RETURN_IF_ERROR(expr): evaluates `expr` (an absl::Status or absl::StatusOr)
// and returns its status from the enclosing function when it is not OK.
// IDEM_ASSIGN_OR_RETURN(lhs, expr): evaluates `expr` (an absl::StatusOr<T>),
// returns its status when not OK, else move-assigns the value to `lhs`
// (which may be a declaration such as `auto x`).
//
// Thread safety: macros only; no shared state.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace idem::internal {
inline const absl::Status& AsStatus(const absl::Status& s) { return s; }
template <typename T>
inline const absl::Status& AsStatus(const absl::StatusOr<T>& s) {
  return s.status();
}
}  // namespace idem::internal

#define IDEM_RETURN_IF_ERROR(expr)                                     \
  do {                                                                 \
    if (auto _idem_status = (expr); !_idem_status.ok()) {              \
      return ::idem::internal::AsStatus(_idem_status);                 \
    }                                                                  \
  } while (0)

#define IDEM_STATUS_CONCAT_INNER_(a, b) a##b
#define IDEM_STATUS_CONCAT_(a, b) IDEM_STATUS_CONCAT_INNER_(a, b)

#define IDEM_ASSIGN_OR_RETURN(lhs, expr) \
  IDEM_ASSIGN_OR_RETURN_IMPL_(IDEM_STATUS_CONCAT_(_idem_statusor_, __LINE__), lhs, expr)

#define IDEM_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                                \
  if (!statusor.ok()) {                                  \
    return statusor.status();                            \
  }                                                      \
  lhs = std::move(statusor).value()
