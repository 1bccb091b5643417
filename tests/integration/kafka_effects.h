// The effect the `kafka` tests consume with: one row per run of the handler in a
// table with no unique key, so a double effect shows up as two rows. A payload
// starting with "poison" fails for good (dead-lettered). Header-only; shared by
// kafka_runner_test.cc and the consumer process kafka_test_consumer.cc.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "gtest/gtest.h"
#include "idem/idem.h"
#include "idem/messaging/runner.h"

namespace idem::testing {

inline absl::Status CreateEffectsTable(Store& store) {
  absl::StatusOr<std::unique_ptr<StoreTransaction>> tx = store.Begin();
  if (!tx.ok()) return tx.status();
  absl::StatusOr<int64_t> made = (*tx)->Exec(
      "CREATE TABLE IF NOT EXISTS effects (payload TEXT NOT NULL, source TEXT NOT NULL)");
  if (!made.ok()) return made.status();
  return (*tx)->Commit();
}

// The handler: one effects row, then `delay` (to make batches overlap a rebalance).
inline messaging::MessageHandler EffectHandler(std::chrono::microseconds delay = {}) {
  return [delay](const messaging::Message& m, Transaction& tx) -> absl::StatusOr<std::string> {
    if (m.payload.rfind("poison", 0) == 0) {
      return absl::InvalidArgumentError("the payload is poison for this handler");
    }
    const Value params[] = {Value(m.payload),
                            Value(m.source + "[" + std::to_string(m.partition) + "]@" +
                                  std::to_string(m.offset))};
    absl::StatusOr<int64_t> n =
        tx.Exec("INSERT INTO effects (payload, source) VALUES (?, ?)", params);
    if (!n.ok()) return n.status();
    if (delay.count() > 0) std::this_thread::sleep_for(delay);  // a slow handler's work
    return std::string("{\"ok\":true}");
  };
}

// payload → how many effects rows it has.
inline std::map<std::string, int> EffectCounts(Store& store) {
  std::map<std::string, int> out;
  absl::StatusOr<std::unique_ptr<StoreTransaction>> tx = store.Begin();
  EXPECT_TRUE(tx.ok()) << tx.status();
  if (!tx.ok()) return out;
  absl::StatusOr<Rows> rows = (*tx)->Query("SELECT payload, COUNT(*) FROM effects GROUP BY payload");
  EXPECT_TRUE(rows.ok()) << rows.status();
  if (!rows.ok()) return out;
  for (const auto& row : rows->rows) out[row[0].as_text()] = static_cast<int>(row[1].as_int());
  (*tx)->Rollback();
  return out;
}

}  // namespace idem::testing
