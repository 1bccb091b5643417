// GoogleTest matchers for absl::Status / absl::StatusOr.
//   EXPECT_THAT(s, StatusIs(absl::StatusCode::kAborted));
//   ASSERT_OK(s);  ASSERT_OK_AND_ASSIGN(auto v, expr);
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "idem/status.h"

namespace idem::testing {

inline const absl::Status& GetStatus(const absl::Status& s) { return s; }
template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& s) {
  return s.status();
}

MATCHER_P(StatusIs, code, "has status code " + absl::StatusCodeToString(code)) {
  const absl::Status& s = ::idem::testing::GetStatus(arg);
  *result_listener << "status is " << s;
  return s.code() == code;
}

}  // namespace idem::testing

#define ASSERT_OK(expr)                                          \
  do {                                                           \
    const absl::Status _s = ::idem::testing::GetStatus((expr));  \
    ASSERT_TRUE(_s.ok()) << _s;                                  \
  } while (0)
#define EXPECT_OK(expr)                                          \
  do {                                                           \
    const absl::Status _s = ::idem::testing::GetStatus((expr));  \
    EXPECT_TRUE(_s.ok()) << _s;                                  \
  } while (0)

#define ASSERT_OK_AND_ASSIGN(lhs, expr) \
  ASSERT_OK_AND_ASSIGN_IMPL_(IDEM_STATUS_CONCAT_(_assert_or_, __LINE__), lhs, expr)
#define ASSERT_OK_AND_ASSIGN_IMPL_(var, lhs, expr) \
  auto var = (expr);                               \
  ASSERT_TRUE(var.ok()) << var.status();           \
  lhs = std::move(var).value()
