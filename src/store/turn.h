// Turn: the current turn of an event loop on this thread, so code the loop runs
// (a store's non-blocking commit) can defer work to the turn's end: the lean HTTP
// engine (http/lean/loop.h) installs one for its thread, and at the end of every
// turn, before it writes the turn's replies, runs what was deferred. The rocksdb://
// store defers its writes so that a turn's claims go to its writer thread as one
// unit, and to disk in one durable write, answered once it is synced.
//
// With no current turn (the Beast engine, a library user's thread, a worker
// pool's) Current() is null and the callers do what they do without one.
//
//   if (store::Turn* turn = store::Turn::Current()) {
//     if (turn->Find(this) == nullptr) turn->Defer(this, &flush);  // once per turn
//   }
//
// Thread safety: a Turn is used by the thread it is current on only.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace idem::store {

class Turn {
 public:
  // Work deferred to the turn's end.
  class Work {
   public:
    // Runs once, on the turn's thread, at the turn's end. It may defer more (to
    // the same end: the loop runs deferred work until none is left).
    virtual void AtTurnEnd() = 0;

   protected:
    ~Work() = default;
  };

  // Installs `turn` as the thread's current one for the scope's life.
  class Scope {
   public:
    explicit Scope(Turn& turn);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Turn* previous_;
  };

  Turn() = default;
  Turn(const Turn&) = delete;
  Turn& operator=(const Turn&) = delete;

  // The thread's current turn, or null.
  static Turn* Current();

  // The work `owner` deferred to this turn's end and that has not run yet, or null.
  Work* Find(const void* owner) const {
    for (const auto& [o, w] : work_) {
      if (o == owner) return w;
    }
    return nullptr;
  }
  // Runs `work` at the turn's end (after the work deferred before it); it must
  // stay alive until then.
  void Defer(const void* owner, Work* work) { work_.emplace_back(owner, work); }

  bool empty() const { return work_.empty(); }

  // Which turn this is: the loop calls Next() at the start of each, so what a turn
  // checked once (a store's directory) is known to be checked in this turn only.
  uint64_t number() const { return number_; }
  void Next() { ++number_; }

  // The loop, at the turn's end: runs the deferred work, in order, and what it
  // defers in turn, until none is left. False when there was none.
  bool RunDeferred();

 private:
  std::vector<std::pair<const void*, Work*>> work_;
  std::vector<std::pair<const void*, Work*>> running_;
  uint64_t number_ = 1;
};

}  // namespace idem::store
