// The rocksdb:// store: dedupe records as key/value pairs in an embedded RocksDB
// database, for `idem serve` and lease mode on one node. It has
// no SQL: Transaction::Exec/Query answer kUnimplemented, so transactional mode (the
// handler's business rows in the record's transaction) stays with the SQL stores.
//
// URL: rocksdb://DIR (rocksdb:///var/lib/idem/db, rocksdb://./idem-db) with
// optional parameters:
//   sync=full|off       (default full: every commit is in the WAL and fsynced before
//                        it returns. off leaves the fsync to the OS: a crash of the
//                        machine loses acknowledged claims. UNSAFE; for tests and
//                        benchmarks only)
//   lock_timeout_ms=N   (default 5000: how long a transaction waits for a key another
//                        open transaction holds before kUnavailable, a claim in
//                        progress)
//   writer=queue|group  (default queue: one writer thread groups the commits, and
//                        `idem serve` commits without blocking its network threads;
//                        group: RocksDB's own write grouping, commits block)
//   turn_write=stage|auto|inline (writer=queue; default stage. stage: a lean event
//                        loop hands its turn's commits to the writer thread at the
//                        turn's end and reads on while they sync. inline: the loop's
//                        thread writes them itself and waits for the sync. auto:
//                        inline while the recent writes took under 2 ms and the
//                        writer thread is idle, else stage)
//   ttl=DURATION        (e.g. 90d, as `idem ttl` prints it; default none) the
//                        retention of records that carry no expires_at of their own
//                        (written before format 2, or of a biz_type without a
//                        retention policy): they go ttl after their last update.
//                        Records with an expires_at go then. Either way a
//                        compaction filter does it, never bulk deletes, and never to
//                        a PROCESSING record; `idem purge` does the same in batches.
//   tombstones=on|off   (default on) what the filter leaves of a record it retires:
//                        its tombstone (a very late duplicate is answered expired),
//                        or nothing
//
// Locking. The process owns the directory (RocksDB's LOCK file admits one), so
// the store opens it as a plain rocksdb::DB and locks keys in memory
// (key_locks.h): InsertOrLoad, Replace, Retire and Load lock exactly the key they
// touch (a table of the keys in flight, not hashed stripes that unrelated keys would
// share) until the transaction's writes are durable, or until Rollback. A wait past
// lock_timeout_ms answers a ClaimContendedError, as a row lock of the server stores
// does. The Guard's transactions touch one key each (a claim, a complete, a fail);
// a transaction that holds keys (purge) and would wait for one whose holder is
// itself waiting answers kAborted at once (retry the transaction), so no cycle of
// waits, no deadlock, can form.
//
// Nothing is visible before it is durable. A transaction's writes stay in it
// (its own reads see them) until the commit writes them as one WriteBatch with
// WriteOptions::sync; RocksDB applies a batch to what reads see only after its WAL
// record is synced, and the keys stay locked until then. So a read outside any
// transaction (Store::Get, ListRecords) sees the last durable record, and a
// duplicate claim that meets a claim being written waits for that write (a
// non-blocking transaction gets TryLock's kWouldBlock instead) and then reads the
// durable record: no reply is ever made from a record that is not yet synced.
//
// Durability. With writer=queue (the default) one writer thread (batch_writer.h)
// gathers the commits waiting for it into one WriteBatch, one WAL write and one
// fsync; each commit hears of it after that sync. A non-blocking commit made on a
// thread with a current event-loop turn (store/turn.h: the lean engine's loops)
// joins the turn's group instead, which the turn's end hands to the writer thread
// as one unit (one lock, one wake-up per turn; the writer may write it with other
// queued commits in the same WriteBatch): the loop reads and decides its next turn
// while the sync runs, and each commit's answer comes back to it, in order, once
// that sync is done. With turn_write=inline the loop's thread writes the turn's
// group itself at the turn's end, waiting for the sync; with auto it does so while
// writes are quick, and hands over while they are slow. writer=group leaves the grouping
// to RocksDB's write path: the first committing thread to arrive leads a write
// group, appends every queued batch to the WAL in one write and fsyncs once for the
// group (docs/operations.md has the measurement). Either way a commit returns (or
// calls back) after the sync that covers it, so a reply that follows it does too.
//
// A directory an older idem wrote (through a rocksdb::TransactionDB) opens as it
// is: its commits were plain batches.
//
// One process per directory: RocksDB's LOCK file admits one opener, and a second
// process gets kUnavailable "another process has this database open". Inside one
// process, every Store opened on the same directory shares one database (and so
// one table of locked keys): each keeps its own lock_timeout_ms, sync and writer. A read-only open
// (StoreOptions::read_only: `idem inspect`) takes no lock and sees the database as
// it was when opened.
//
// Thread safety: safe for concurrent use.
#pragma once

#include <memory>
#include <string_view>

#include "absl/status/statusor.h"
#include "idem/clock.h"
#include "idem/store.h"
#include "store/backend.h"
#include "store/sql/schema.h"

namespace idem {

// Opens (creating if needed) the database named by `url` ("rocksdb://DIR").
// `clock` is the retention filter's "now" (not owned; must outlive the store and
// every store opened on the same directory in this process after it). Errors:
// kInvalidArgument for a malformed URL or an unknown parameter (named);
// kUnavailable when the directory cannot be opened or another process has it open;
// kFailedPrecondition for a directory that is not an idem rocksdb store, a newer
// record format, or corruption; with mode.read_only and mode.require_schema, for a
// directory without a database. Blocks (opening replays the WAL).
absl::StatusOr<std::unique_ptr<Store>> OpenRocksdbStore(std::string_view url,
                                                        sql::SchemaMode mode = {},
                                                        const Clock* clock = Clock::Real());

}  // namespace idem
