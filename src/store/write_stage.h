// Write stages: the places on a store's durable write path where a crash test
// stops the process (the store sits below src/core's failpoints, so it names the
// stage and a hook decides). `idem` sets the hook to its failpoints in builds made
// for the tests; without a hook every stage costs one relaxed atomic load.
//
// The stages of rocksdb://, in the order a commit passes them:
//   rocksdb.after_decide    a commit is decided and queued for the next durable write
//   rocksdb.before_write    its WriteBatch (merged with the others of the write) is built
//   rocksdb.wal.before_sync the WAL holds the batch, not yet synced
//   rocksdb.wal.after_sync  the WAL is synced
//   rocksdb.after_write     the write is durable; its commits are not answered yet
//
// Thread safety: safe for concurrent use.
#pragma once

#include <atomic>

namespace idem::store {

using WriteStageHook = void (*)(const char* stage);

// Sets the hook every stage calls (null: none). A store opened while a hook is set
// also reports its WAL's syncs (rocksdb.wal.*); one opened before does not.
void SetWriteStageHook(WriteStageHook hook);

namespace internal {
extern std::atomic<WriteStageHook> g_write_stage_hook;
}  // namespace internal

inline bool WriteStageHookSet() {
  return internal::g_write_stage_hook.load(std::memory_order_relaxed) != nullptr;
}

inline void AtWriteStage(const char* stage) {
  if (WriteStageHook hook = internal::g_write_stage_hook.load(std::memory_order_relaxed)) {
    hook(stage);
  }
}

}  // namespace idem::store
