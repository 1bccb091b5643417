// The Store contract every backend keeps (include/idem/store.h), where the
// backend tests used to check it each on their own: a schema newer than the build
// is refused, a lock held past the lock timeout fails closed, the pool survives its
// sessions being killed, and the Guard's final write commits nothing when it does
// not move the record. Public API only; what differs between backends comes from
// the hooks in store_factory.h (Backend). A backend that cannot have the situation
// (no SQL, no second store on the same data, no server) skips with the reason.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "conformance/store_factory.h"
#include "idem/idem.h"
#include "store/backend.h"
#include "testing/records.h"
#include "testing/status_matchers.h"
#include "testing/temp_dir.h"

namespace idem {
namespace {

using ::idem::testing::kShortLockTimeout;
using ::idem::testing::StatusIs;
using ::testing::HasSubstr;

class StoreContractTest : public ::testing::TestWithParam<testing::Backend> {
 protected:
  void SetUp() override { url_ = GetParam().url(dir_.path()); }

  // A store on this test's data, with `params` added to its URL.
  std::unique_ptr<Store> Open(const std::string& params = "") {
    absl::StatusOr<std::unique_ptr<Store>> store =
        testing::OpenBackendStore(GetParam(), testing::WithParams(url_, params));
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *std::move(store) : nullptr;
  }

  // Runs `sql` in a transaction of its own and commits.
  static absl::Status Exec(Store& store, const std::string& sql) {
    return testing::ExecAndCommit(store, sql);
  }

  // The first value of the first row of `sql`, read in a transaction of its own.
  static int64_t Scalar(Store& store, const std::string& sql) {
    return testing::QueryScalar(store, sql);
  }

  // How far a transaction that waits for another's lock gets: the first error of
  // Begin() and then `step`, or OK. SQLite refuses at Begin() (one writer per
  // database), the server backends at the statement that meets the lock; either
  // way the transaction is rolled back here.
  template <typename Step>
  static absl::Status Contend(Store& store, Step step) {
    absl::StatusOr<std::unique_ptr<StoreTransaction>> tx = store.Begin();
    if (!tx.ok()) return tx.status();
    absl::Status s = step(**tx);
    (*tx)->Rollback();
    return s;
  }

  static Record Claim(std::string key, int64_t token = 1) {
    return testing::ClaimRecord(std::move(key), token);
  }

  static Record Done(const Record& claim, std::string result) {
    Record done = claim;
    done.state = RecordState::kSucceeded;
    done.result = std::move(result);
    done.lease_until = absl::InfinitePast();
    return done;
  }

  // Two stores on the same data, `store` with a short lock timeout, for the tests
  // of a lock held past it. Skipped on the reference memory:// (and its cached
  // form): every open of it is a new, empty store inside one process, so there is
  // no shared database whose lock a second store could wait for, and it has no
  // lock timeout to reach. The callers return when IsSkipped().
  void OpenContenders(std::unique_ptr<Store>* holder, std::unique_ptr<Store>* store) {
    if (GetParam().short_lock_timeout.empty()) {
      GTEST_SKIP() << "every open of " << GetParam().name
                   << " is a store of its own: no shared lock to wait for";
    }
    *holder = Open();
    *store = Open(GetParam().short_lock_timeout);
    ASSERT_NE(*holder, nullptr);
    ASSERT_NE(*store, nullptr);
  }

  testing::TempDir dir_;
  std::string url_;
};

// ---- schema versions ----

// A database whose schema a newer idem wrote is refused, not used or "repaired":
// this build does not know what the newer schema means (fail closed). Nothing a retry
// fixes, so kFailedPrecondition, and the message says why.
TEST_P(StoreContractTest, NewerSchemaIsRefused) {
  {
    std::unique_ptr<Store> store = Open();
    ASSERT_NE(store, nullptr);
    // memory:// (and its cached form) keeps records in the process and rocksdb://
    // keeps them as key/value pairs: neither has a SQL schema, hence no schema
    // version table a newer idem could have written. rocksdb://'s own format
    // version (a newer one is refused too) is pinned by RocksdbStoreTest.
    if (!store->SupportsSql()) GTEST_SKIP() << GetParam().name << " has no SQL, so no schema";
    ASSERT_OK(Exec(*store, "UPDATE idem_schema_version SET version = 99"));
  }
  absl::Status s = testing::OpenBackendStore(GetParam(), url_).status();
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(std::string(s.message()), HasSubstr("newer"));
}

// Schema version 1 (before retention) is upgraded in place by an open
// that may write (what `idem migrate` and `idem serve` do) and refused by a
// read-only one; the records it held read as kept for ever.
TEST_P(StoreContractTest, OlderSchemaIsUpgradedInPlace) {
  const Request old{.biz_type = "refund", .key = "old"};
  {
    std::unique_ptr<Store> store = Open();
    ASSERT_NE(store, nullptr);
    if (!store->SupportsSql()) GTEST_SKIP() << GetParam().name << " has no SQL, so no schema";
    Guard guard(*store);
    ASSERT_OK(guard.Claim(old));
    ASSERT_OK(guard.Complete(old, 1, "\"r\""));
    // Back to version 1: without the columns version 2 added.
    ASSERT_OK(Exec(*store, "ALTER TABLE idem_records DROP COLUMN purged_at"));
    ASSERT_OK(Exec(*store, "ALTER TABLE idem_records DROP COLUMN expires_at"));
    ASSERT_OK(Exec(*store, "UPDATE idem_schema_version SET version = 1"));
  }
  absl::Status read_only = OpenStore(url_, {.read_only = true}).status();
  EXPECT_THAT(read_only, StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(std::string(read_only.message()), HasSubstr("idem migrate"));

  std::unique_ptr<Store> store = Open();
  ASSERT_NE(store, nullptr);
  ASSERT_OK_AND_ASSIGN(SchemaInfo info, Backend(*store).DescribeSchema());
  EXPECT_EQ(info.version, 2);
  Guard guard(*store);
  ASSERT_OK_AND_ASSIGN(Result replay, guard.Claim(old));
  EXPECT_EQ(replay.outcome, Outcome::kReplayed);
  EXPECT_EQ(replay.value, "\"r\"");
  EXPECT_EQ(replay.expires_at, absl::InfiniteFuture());
  ASSERT_OK_AND_ASSIGN(Result fresh, guard.Claim({.biz_type = "refund", .key = "new"}));
  EXPECT_EQ(fresh.outcome, Outcome::kAcquired);
  // A second open finds it current.
  store.reset();
  EXPECT_OK(OpenStore(url_, {.read_only = true}));
}

// ---- lock timeouts: fail closed ----

// A claim that meets another transaction's uncommitted claim of the same key waits
// for it, up to the store's lock timeout; then it fails closed and the handler never
// runs. Once the holder is gone the key is free again.
TEST_P(StoreContractTest, ClaimHeldPastTheLockTimeoutFailsClosed) {
  std::unique_ptr<Store> holder, store;
  OpenContenders(&holder, &store);
  if (IsSkipped() || HasFatalFailure()) return;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<StoreTransaction> held, holder->Begin());
  ASSERT_OK_AND_ASSIGN(std::optional<Record> none, Records(*held).InsertOrLoad(Claim("K")));
  ASSERT_FALSE(none.has_value());

  Guard guard(*store);
  int runs = 0;
  Handler handler = [&](Transaction&) -> absl::StatusOr<std::string> {
    ++runs;
    return std::string("v");
  };
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<Result> r = guard.Run({.biz_type = "refund", .key = "K"}, handler);
  const auto waited = std::chrono::steady_clock::now() - start;
  if (GetParam().locks_whole_database) {
    EXPECT_THAT(r, StatusIs(absl::StatusCode::kUnavailable));
  } else {
    ASSERT_OK(r);
    EXPECT_EQ(r->outcome, Outcome::kInProgress);
  }
  EXPECT_EQ(runs, 0);
  // It waited for the lock rather than giving up at once (a lower bound: load only
  // makes it longer) ...
  EXPECT_GE(waited, absl::ToChronoMilliseconds(kShortLockTimeout / 2));
  // ... and gave up after about the lock timeout instead of waiting for the holder,
  // which here never finishes (the point: a claim never hangs). The bound is 20
  // times the timeout, so a loaded machine passes.
  EXPECT_LT(waited, absl::ToChronoMilliseconds(kShortLockTimeout * 20));

  // At the Store level: kUnavailable (retry later); the server backends also mark it
  // as a claim in progress, which is how the Guard above told it.
  absl::Status raw = Contend(*store, [](StoreTransaction& tx) {
    return Records(tx).InsertOrLoad(Claim("K", 9)).status();
  });
  EXPECT_THAT(raw, StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_EQ(IsClaimContended(raw), !GetParam().locks_whole_database) << raw;

  held->Rollback();
  absl::StatusOr<Result> after = guard.Run({.biz_type = "refund", .key = "K"}, handler);
  ASSERT_OK(after);
  EXPECT_EQ(after->outcome, Outcome::kExecuted);
  EXPECT_EQ(runs, 1);
}

// The caller's own rows: a statement waiting for a row another transaction has
// changed gives up after the lock timeout with kUnavailable (retry the whole
// transaction), and changes nothing.
TEST_P(StoreContractTest, RowLockedPastTheLockTimeoutIsUnavailable) {
  std::unique_ptr<Store> holder, store;
  OpenContenders(&holder, &store);
  if (IsSkipped() || HasFatalFailure()) return;
  // rocksdb:// keeps records only: the caller has no rows there.
  if (!holder->SupportsSql()) GTEST_SKIP() << GetParam().name << " has no SQL, so no rows";
  ASSERT_OK(Exec(*holder, "CREATE TABLE t (id INTEGER PRIMARY KEY, v INTEGER NOT NULL)"));
  ASSERT_OK(Exec(*holder, "INSERT INTO t VALUES (1, 0)"));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<StoreTransaction> a, holder->Begin());
  ASSERT_OK(a->Exec("UPDATE t SET v = 1 WHERE id = 1"));

  absl::Status s = Contend(*store, [](StoreTransaction& tx) {
    return tx.Exec("UPDATE t SET v = 2 WHERE id = 1").status();
  });
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kUnavailable));
  ASSERT_OK(a->Commit());
  EXPECT_EQ(Scalar(*store, "SELECT v FROM t WHERE id = 1"), 1);
  // The store that waited serves again.
  ASSERT_OK(Exec(*store, "UPDATE t SET v = 2 WHERE id = 1"));
  EXPECT_EQ(Scalar(*holder, "SELECT v FROM t WHERE id = 1"), 2);
}

// ---- lost sessions ----

// The server ends every session of a store's pool (an operator's KILL, a failover,
// a restarted proxy). The transaction that was open fails retryably and commits
// nothing; every entry point then works again on fresh sessions without reopening
// the store, and what was committed before is still there.
TEST_P(StoreContractTest, PoolRecoversAfterItsSessionsAreKilled) {
  // memory:// and sqlite:// run inside the process: no server, no pooled session
  // to kill (SQLite's deleted-file case is SqliteStoreTest's).
  if (!GetParam().kill_sessions) GTEST_SKIP() << GetParam().name << " has no server sessions";
  // pool=N is every server backend's pool size.
  const std::string pool = "pool=3";
  std::unique_ptr<Store> store = Open(pool);
  ASSERT_NE(store, nullptr);
  ASSERT_OK(Exec(*store, "CREATE TABLE t (id INTEGER PRIMARY KEY)"));
  Guard guard(*store);
  absl::StatusOr<Result> first = guard.Run(
      {.biz_type = "refund", .key = "R-1"}, [](Transaction& tx) -> absl::StatusOr<std::string> {
        IDEM_RETURN_IF_ERROR(tx.Exec("INSERT INTO t VALUES (1)").status());
        return std::string("done");
      });
  ASSERT_OK(first);
  ASSERT_EQ(first->outcome, Outcome::kExecuted);
  // Every connection of the pool open: one inside a transaction that changed a row
  // and has not committed, two back in the pool idle.
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<StoreTransaction> open_tx, store->Begin());
  ASSERT_OK(open_tx->Exec("INSERT INTO t VALUES (2)"));
  {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<StoreTransaction> a, store->Begin());
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<StoreTransaction> b, store->Begin());
    ASSERT_OK(a->Query("SELECT 1"));
    ASSERT_OK(b->Query("SELECT 1"));
    ASSERT_OK(a->Commit());
    ASSERT_OK(b->Commit());
  }

  // The pool's connections and no more (pool= bounds it).
  EXPECT_EQ(GetParam().kill_sessions(url_, 3), 3);

  EXPECT_THAT(open_tx->Exec("INSERT INTO t VALUES (3)"), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(open_tx->Commit(), StatusIs(absl::StatusCode::kUnavailable));
  open_tx.reset();
  // The dead sessions are replaced without the caller seeing them.
  EXPECT_OK(store->Ping());
  EXPECT_OK(store->Get("default", "nope"));
  absl::StatusOr<Result> next = guard.Run(
      {.biz_type = "refund", .key = "R-4"}, [](Transaction& tx) -> absl::StatusOr<std::string> {
        IDEM_RETURN_IF_ERROR(tx.Exec("INSERT INTO t VALUES (4)").status());
        return std::string("four");
      });
  ASSERT_OK(next);
  EXPECT_EQ(next->outcome, Outcome::kExecuted);
  EXPECT_EQ(Scalar(*store, "SELECT COUNT(*) FROM t"), 2);  // 1 and 4; nothing of 2 or 3
  EXPECT_EQ(Scalar(*store, "SELECT COUNT(*) FROM t WHERE id IN (2, 3)"), 0);
  absl::StatusOr<Result> replay =
      guard.Run({.biz_type = "refund", .key = "R-1"},
                [](Transaction&) -> absl::StatusOr<std::string> { return std::string("again"); });
  ASSERT_OK(replay);
  EXPECT_EQ(replay->outcome, Outcome::kReplayed);
  EXPECT_EQ(replay->value, "done");
  // Replacing the dead sessions did not grow the pool past its bound.
  EXPECT_LE(GetParam().kill_sessions(url_, 3), 3);
}

// ---- the Guard's final write ----

// RecordTransaction::ReplaceAndCommit commits only when it moved the record. When the
// record had moved on (another holder's token, another state), nothing of the
// transaction is committed: not the claim, not the caller's rows (PostgreSQL and
// MySQL send the write with the COMMIT in one round trip; this holds there too).
// Either way the transaction has ended. When it moves, the record and the rows
// commit together, with the result byte for byte.
TEST_P(StoreContractTest, ReplaceAndCommitThatDoesNotMoveCommitsNothing) {
  std::unique_ptr<Store> store = Open();
  ASSERT_NE(store, nullptr);
  const bool sql = store->SupportsSql();
  if (sql) {
    ASSERT_OK(Exec(*store, "CREATE TABLE h (x INTEGER)"));
  }
  const Record claim = Claim("K");
  Record done = Done(claim, "r");

  for (const auto& [token, state] : {std::pair{int64_t{7}, RecordState::kProcessing},
                                     std::pair{int64_t{1}, RecordState::kSucceeded}}) {
    SCOPED_TRACE(::testing::Message()
                 << "expected token " << token << ", state " << RecordStateName(state));
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<StoreTransaction> tx, store->Begin());
    ASSERT_OK_AND_ASSIGN(std::optional<Record> none, Records(*tx).InsertOrLoad(claim));
    ASSERT_FALSE(none.has_value());
    if (sql) {
      ASSERT_OK(tx->Exec("INSERT INTO h VALUES (1)"));
    }
    absl::StatusOr<bool> moved = Records(*tx).ReplaceAndCommit(done, token, state);
    ASSERT_OK(moved);
    EXPECT_FALSE(*moved);
    if (sql) {
      EXPECT_THAT(tx->Exec("SELECT 1"), StatusIs(absl::StatusCode::kFailedPrecondition));
    }
    tx.reset();
    EXPECT_EQ(*store->Get("default", "K"), std::nullopt);
    if (sql) {
      EXPECT_EQ(Scalar(*store, "SELECT COUNT(*) FROM h"), 0);
    }
  }

  // It moves: committed together, every byte of the result kept (also what would be
  // SQL if it were pasted into a statement).
  std::string every_byte;
  for (int c = 0; c < 256; ++c) every_byte.push_back(static_cast<char>(c));
  done.result = every_byte + "'; COMMIT; --";
  {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<StoreTransaction> tx, store->Begin());
    ASSERT_OK(Records(*tx).InsertOrLoad(claim));
    if (sql) {
      ASSERT_OK(tx->Exec("INSERT INTO h VALUES (3)"));
    }
    absl::StatusOr<bool> moved = Records(*tx).ReplaceAndCommit(done, 1, RecordState::kProcessing);
    ASSERT_OK(moved);
    EXPECT_TRUE(*moved);
    if (sql) {
      EXPECT_THAT(tx->Exec("SELECT 1"), StatusIs(absl::StatusCode::kFailedPrecondition));
    }
  }
  if (sql) {
    EXPECT_EQ(Scalar(*store, "SELECT COUNT(*) FROM h"), 1);
  }
  ASSERT_OK_AND_ASSIGN(std::optional<Record> got, store->Get("default", "K"));
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->state, RecordState::kSucceeded);
  EXPECT_EQ(got->token, 1);
  EXPECT_EQ(got->result, done.result);

  // A large result (bound like every value, never spliced into SQL) arrives intact.
  const Record big = Claim("BIG");
  const Record big_done = Done(big, std::string(1536 * 1024, '\xab'));
  {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<StoreTransaction> tx, store->Begin());
    ASSERT_OK(Records(*tx).InsertOrLoad(big));
    absl::StatusOr<bool> moved =
        Records(*tx).ReplaceAndCommit(big_done, 1, RecordState::kProcessing);
    ASSERT_OK(moved);
    EXPECT_TRUE(*moved);
  }
  ASSERT_OK_AND_ASSIGN(got, store->Get("default", "BIG"));
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->result, big_done.result);
}

// ---- batches: InsertOrLoadMany, ReplaceMany ----

// A batch's claims and result writes answer each record as the calls one at a time
// would: new keys insert, committed ones load, a key repeated in the batch loads
// what the batch inserted, a stale token does not move. More records than one round
// trip of PostgreSQL's pipeline carries (100), so its chunks are covered too.
TEST_P(StoreContractTest, BatchClaimsAndWritesAnswerEachRecordAsOneAtATime) {
  std::unique_ptr<Store> store = Open();
  ASSERT_NE(store, nullptr);
  {  // committed before the batch: every 7th key, and one PROCESSING with a lease
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<StoreTransaction> tx, store->Begin());
    for (int i = 0; i < 230; i += 7) {
      const Record claim = Claim("K" + std::to_string(i));
      ASSERT_OK(Records(*tx).InsertOrLoad(claim));
      ASSERT_OK(Records(*tx).Replace(Done(claim, "old"), 1, RecordState::kProcessing));
    }
    ASSERT_OK(Records(*tx).InsertOrLoad(Claim("HELD", 4)));
    ASSERT_OK(tx->Commit());
  }
  std::vector<Record> batch;
  for (int i = 0; i < 230; ++i) batch.push_back(Claim("K" + std::to_string(i)));
  batch.push_back(Claim("HELD"));
  batch.push_back(Claim("K1"));  // again: loads the batch's own claim of K1
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<StoreTransaction> tx, store->Begin());
  ASSERT_OK_AND_ASSIGN(std::vector<std::optional<Record>> got,
                       Records(*tx).InsertOrLoadMany(batch));
  ASSERT_EQ(got.size(), batch.size());
  std::vector<RecordTransaction::Replacement> writes;
  for (int i = 0; i < 230; ++i) {
    SCOPED_TRACE(batch[i].key);
    if (i % 7 == 0) {
      ASSERT_TRUE(got[i].has_value());
      EXPECT_EQ(got[i]->state, RecordState::kSucceeded);
      EXPECT_EQ(got[i]->result, "old");
    } else {
      EXPECT_FALSE(got[i].has_value());
      // Every other new key's write expects a stale token: it does not move.
      writes.push_back({.record = Done(batch[i], "new-" + batch[i].key),
                        .expected_token = i % 2 == 0 ? 1 : 2,
                        .expected_state = RecordState::kProcessing});
    }
  }
  ASSERT_TRUE(got[230].has_value());
  EXPECT_EQ(got[230]->state, RecordState::kProcessing);
  EXPECT_EQ(got[230]->token, 4);
  ASSERT_TRUE(got[231].has_value());
  EXPECT_EQ(got[231]->state, RecordState::kProcessing);
  EXPECT_EQ(got[231]->token, 1);

  ASSERT_OK_AND_ASSIGN(std::vector<bool> moved, Records(*tx).ReplaceMany(writes));
  ASSERT_EQ(moved.size(), writes.size());
  for (size_t j = 0; j < writes.size(); ++j) {
    EXPECT_EQ(moved[j], writes[j].expected_token == 1) << writes[j].record.key;
  }
  ASSERT_OK(tx->Commit());
  for (const RecordTransaction::Replacement& w : writes) {
    ASSERT_OK_AND_ASSIGN(std::optional<Record> r, store->Get("default", w.record.key));
    ASSERT_TRUE(r.has_value()) << w.record.key;
    if (w.expected_token == 1) {
      EXPECT_EQ(r->state, RecordState::kSucceeded);
      EXPECT_EQ(r->result, "new-" + w.record.key);
    } else {
      EXPECT_EQ(r->state, RecordState::kProcessing);
    }
  }
  // The empty batch is no call at all.
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<StoreTransaction> empty, store->Begin());
  ASSERT_OK_AND_ASSIGN(std::vector<std::optional<Record>> no_claims,
                       Records(*empty).InsertOrLoadMany({}));
  EXPECT_TRUE(no_claims.empty());
  ASSERT_OK_AND_ASSIGN(std::vector<bool> no_writes, Records(*empty).ReplaceMany({}));
  EXPECT_TRUE(no_writes.empty());
}

// A rolled-back batch leaves none of its claims or writes.
TEST_P(StoreContractTest, RolledBackBatchLeavesNothing) {
  std::unique_ptr<Store> store = Open();
  ASSERT_NE(store, nullptr);
  const std::vector<Record> batch = {Claim("A"), Claim("B"), Claim("C")};
  {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<StoreTransaction> tx, store->Begin());
    ASSERT_OK(Records(*tx).InsertOrLoadMany(batch));
    const std::vector<RecordTransaction::Replacement> writes = {
        {.record = Done(batch[0], "a"), .expected_token = 1}};
    ASSERT_OK_AND_ASSIGN(std::vector<bool> moved, Records(*tx).ReplaceMany(writes));
    EXPECT_EQ(moved, std::vector<bool>{true});
    tx->Rollback();
  }
  for (const Record& r : batch) EXPECT_EQ(*store->Get("default", r.key), std::nullopt) << r.key;
}

// A batch with a key another open transaction holds fails closed after the lock
// timeout (a claim in progress on the server backends), like InsertOrLoad.
TEST_P(StoreContractTest, BatchClaimMeetingAHeldKeyFailsClosed) {
  std::unique_ptr<Store> holder, store;
  OpenContenders(&holder, &store);
  if (IsSkipped() || HasFatalFailure()) return;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<StoreTransaction> held, holder->Begin());
  ASSERT_OK(Records(*held).InsertOrLoad(Claim("K")));
  absl::Status s = Contend(*store, [](StoreTransaction& tx) {
    const std::vector<Record> batch = {Claim("FREE"), Claim("K", 9), Claim("FREE2")};
    return Records(tx).InsertOrLoadMany(batch).status();
  });
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_EQ(IsClaimContended(s), !GetParam().locks_whole_database) << s;
  held->Rollback();
  EXPECT_EQ(*store->Get("default", "FREE"), std::nullopt);
}

INSTANTIATE_TEST_SUITE_P(AllBackends, StoreContractTest,
                         ::testing::ValuesIn(testing::AllBackends()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace idem
