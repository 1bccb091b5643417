// Loop: one event loop of the lean engine (lean/server.h) and the state its loops
// share (Core). A Loop owns the connections it accepted: each is read, parsed,
// answered and written on the loop's thread only. Other threads reach a
// connection through Post (the worker pool's answers, StartAsync's resume, a
// waiting claim's wake-up), which queues a task and wakes the loop's eventfd; a
// Post from the loop's own thread queues it for the turn's end, without either.
//
// A turn: epoll_wait returns, the ready connections are read and their requests
// decided, then the turn ends: the work deferred to it runs (store/turn.h: the
// loop's thread has the loop's Turn as its current one; the rocksdb:// store writes
// the turn's commits there, as one unit, or hands them to its writer thread: its
// URL parameter turn_write), the answers posted from this thread come in, and then
// the connections' write buffers are sent. Answers of commits handed over come back
// through Post once their sync is done, and are sent at the end of the turn that
// takes them in: no answer leaves before the write that holds it is durable, and a
// turn's claims share one WAL write and sync.
//
// Thread safety: Post and Wake from any thread; everything else on the loop's
// thread (Run).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "boost/asio/thread_pool.hpp"
#include "http/server/handler.h"
#include "http/server/server.h"
#include "store/turn.h"

namespace idem::http::lean {

using Clock = std::chrono::steady_clock;

class LeanConnection;

// What every loop of one server shares.
struct Core {
  Core(Handler& h, ServerOptions o);

  Handler& handler;
  const ServerOptions options;
  boost::asio::thread_pool pool;
  std::atomic<bool> stopping{false};
  int listener = -1;         // non-blocking; in every loop's epoll set
  std::atomic<int> live{0};  // connections served (not those refused)
  // Loops that still have the listener in their epoll set: the last to take it out
  // at shutdown closes it, so no new connection waits in its backlog.
  std::atomic<int> listening{0};
  std::atomic<uint64_t> next_id{1};  // connection ids, unique for the server's life

  // Out of descriptors: answers the connections waiting in the backlog through
  // the reserve descriptor (one accept at a time, each gets the 503 and is closed).
  void ShedPending();
  // A condition that repeats under load (accept failures, refusals): counted, and
  // logged at most once a second with how often it happened since the last line.
  enum class Repeat { kAcceptError, kRefused };
  void Note(Repeat which, const std::string& what);

  absl::Mutex mu;
  int spare_fd ABSL_GUARDED_BY(mu) = -1;  // the descriptor kept in reserve
  struct Repeated {
    uint64_t count = 0;  // since the last line
    absl::Time last_line = absl::InfinitePast();
  };
  Repeated accept_errors ABSL_GUARDED_BY(mu);
  Repeated refused ABSL_GUARDED_BY(mu);
};

class Loop {
 public:
  explicit Loop(Core& core);
  ~Loop();
  Loop(const Loop&) = delete;
  Loop& operator=(const Loop&) = delete;

  // Creates the epoll set and the eventfd and adds the listener. kUnavailable on
  // failure.
  absl::Status Init();
  // Runs until the server stops and the last of this loop's connections is gone.
  void Run();

  // Any thread: wakes the loop (to see Core::stopping, or its queue).
  void Wake();
  // Any thread: runs `task` on the loop's thread with connection `id`, if it is
  // still there (a closed connection stays until its pending answers came back).
  void Post(uint64_t id, std::function<void(LeanConnection&)> task);
  // Any thread: the same for a StartAsync resume, whose Reply `answer` builds on
  // the loop's thread for connection `id` (LeanConnection::OnReply). A function
  // holding a pointer or two is stored in the task, without an allocation.
  void PostAnswer(uint64_t id, std::function<Reply()> answer);

  // The loop's thread only.
  Clock::time_point now() const { return now_; }
  // `deadline` is one of a connection's deadlines: the loop scans no later.
  void Arm(Clock::time_point deadline) {
    if (deadline < next_scan_) next_scan_ = deadline;
  }
  // The connection has bytes to write this turn.
  void MarkDirty(LeanConnection* c);
  // The connection is closed and nothing of it is pending: freed at the turn's end.
  void Retire(LeanConnection* c);

 private:
  void Accept();
  void Adopt(int fd);
  void DrainQueue();
  void Scan();
  void FlushDirty();
  // The turn's end: the deferred work, the answers posted from this thread, the
  // flushes, until none of them is left.
  void EndTurn();
  void DrainLocal();
  void BeginShutdown();
  void PauseAccepting();
  void ResumeAccepting();

  Core& core_;
  int epoll_ = -1;
  int event_ = -1;  // eventfd: Post and Wake
  bool accepting_ = false;
  bool shutting_down_ = false;
  Clock::time_point now_;
  Clock::time_point next_scan_ = Clock::time_point::max();
  Clock::time_point accept_again_ = Clock::time_point::max();  // after EMFILE
  std::unordered_map<uint64_t, std::unique_ptr<LeanConnection>> connections_;
  std::vector<LeanConnection*> dirty_;
  std::vector<LeanConnection*> flushing_;  // FlushDirty's: dirty_, swapped out
  std::vector<LeanConnection*> retired_;

  struct Task {
    uint64_t id;
    std::function<void(LeanConnection&)> run;  // or, when empty:
    std::function<Reply()> answer;             // PostAnswer's
  };
  void Push(Task task);
  // Runs each task with its connection, if it is still there, and empties `tasks`.
  void RunTasks(std::vector<Task>& tasks);
  absl::Mutex queue_mu_;
  std::vector<Task> queue_ ABSL_GUARDED_BY(queue_mu_);
  std::vector<Task> running_;  // the loop's thread: the queue, swapped out
  // The loop's thread only: Post's from it, run at the turn's end (local_running_:
  // swapped out).
  std::vector<Task> local_;
  std::vector<Task> local_running_;
  store::Turn turn_;
};

}  // namespace idem::http::lean
