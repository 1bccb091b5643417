#include "http/lean/loop.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "http/lean/connection.h"
#include "http/server/exchange.h"
#include "spdlog/spdlog.h"

namespace idem::http::lean {
namespace {

constexpr int kEvents = 256;
constexpr int kAcceptsPerTurn = 64;
constexpr auto kAcceptBackoff = std::chrono::milliseconds(100);

// epoll_event.data.ptr of the two descriptors that are not connections.
char listener_tag;
char event_tag;

// The Loop whose Run is on this thread, or null.
thread_local Loop* loop_of_thread = nullptr;

}  // namespace

Core::Core(Handler& h, ServerOptions o)
    : handler(h),
      options(std::move(o)),
      pool(static_cast<std::size_t>(std::max(1, options.worker_threads))) {}

void Core::ShedPending() {
  absl::MutexLock lock(&mu);
  refused.count += ShedBacklog(listener, &spare_fd, handler.metrics());
}

void Core::Note(Repeat which, const std::string& what) {
  absl::MutexLock lock(&mu);
  Repeated& r = which == Repeat::kAcceptError ? accept_errors : refused;
  ++r.count;
  const absl::Time now = absl::Now();
  if (now - r.last_line < absl::Seconds(1)) return;
  spdlog::warn("{} ({} times since the last such line; open connections: {})", what, r.count,
               live.load());
  r.count = 0;
  r.last_line = now;
}

Loop::Loop(Core& core) : core_(core) {}

Loop::~Loop() {
  connections_.clear();
  if (epoll_ >= 0) ::close(epoll_);
  if (event_ >= 0) ::close(event_);
}

absl::Status Loop::Init() {
  epoll_ = ::epoll_create1(EPOLL_CLOEXEC);
  event_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (epoll_ < 0 || event_ < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot create an event loop: ", std::strerror(errno)));
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = &event_tag;
  if (::epoll_ctl(epoll_, EPOLL_CTL_ADD, event_, &ev) != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot create an event loop: ", std::strerror(errno)));
  }
  ResumeAccepting();
  return absl::OkStatus();
}

void Loop::Wake() {
  const uint64_t one = 1;
  (void)!::write(event_, &one, sizeof one);
}

void Loop::Post(uint64_t id, std::function<void(LeanConnection&)> task) {
  Push(Task{.id = id, .run = std::move(task), .answer = nullptr});
}

void Loop::PostAnswer(uint64_t id, std::function<Reply()> answer) {
  Push(Task{.id = id, .run = nullptr, .answer = std::move(answer)});
}

void Loop::Push(Task task) {
  if (loop_of_thread == this) {
    // From this loop's own thread (a commit written at the turn's end, or one
    // that failed at once): run at the turn's end, not inside the caller.
    local_.push_back(std::move(task));
    return;
  }
  bool was_empty;
  {
    absl::MutexLock lock(&queue_mu_);
    was_empty = queue_.empty();
    queue_.push_back(std::move(task));
  }
  // One wake-up for a burst: the loop takes the whole queue when it wakes.
  if (was_empty) Wake();
}

void Loop::MarkDirty(LeanConnection* c) { dirty_.push_back(c); }

void Loop::Retire(LeanConnection* c) { retired_.push_back(c); }

void Loop::Run() {
  epoll_event events[kEvents];
  const store::Turn::Scope turn(turn_);
  loop_of_thread = this;
  now_ = Clock::now();
  while (!(shutting_down_ && connections_.empty())) {
    int timeout_ms = 1000;
    const Clock::time_point next = std::min(next_scan_, accept_again_);
    if (next != Clock::time_point::max()) {
      const auto wait = std::chrono::ceil<std::chrono::milliseconds>(next - Clock::now()).count();
      timeout_ms = static_cast<int>(std::clamp<int64_t>(wait, 0, 1000));
    }
    const int n = ::epoll_wait(epoll_, events, kEvents, timeout_ms);
    now_ = Clock::now();
    turn_.Next();
    for (int i = 0; i < n; ++i) {
      void* const tag = events[i].data.ptr;
      if (tag == &listener_tag) {
        Accept();
      } else if (tag == &event_tag) {
        uint64_t count;
        (void)!::read(event_, &count, sizeof count);
        DrainQueue();
      } else {
        auto* c = static_cast<LeanConnection*>(tag);
        if (events[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) c->OnReadable();
        if (events[i].events & EPOLLOUT) c->OnWritable();
      }
    }
    if (core_.stopping.load() && !shutting_down_) BeginShutdown();
    if (now_ >= accept_again_) ResumeAccepting();
    if (now_ >= next_scan_) Scan();
    EndTurn();
    for (LeanConnection* c : retired_) connections_.erase(c->id());
    retired_.clear();
  }
  loop_of_thread = nullptr;
}

void Loop::EndTurn() {
  // A flush can dispatch a pipelined request (parsed once the buffer drained),
  // whose commit defers more: round again.
  do {
    turn_.RunDeferred();
    DrainLocal();
    FlushDirty();
  } while (!turn_.empty() || !local_.empty());
}

void Loop::DrainLocal() {
  while (!local_.empty()) {
    local_running_.swap(local_);
    RunTasks(local_running_);
  }
}

void Loop::DrainQueue() {
  {
    absl::MutexLock lock(&queue_mu_);
    running_.swap(queue_);
  }
  RunTasks(running_);
}

void Loop::RunTasks(std::vector<Task>& tasks) {
  for (Task& task : tasks) {
    auto it = connections_.find(task.id);
    if (it == connections_.end()) continue;
    if (task.run) {
      task.run(*it->second);
    } else {
      it->second->OnReply(task.answer());
    }
  }
  tasks.clear();
}

void Loop::Scan() {
  next_scan_ = Clock::time_point::max();
  for (auto& [id, c] : connections_) {
    if (c->deadline() <= now_) c->OnDeadline();
    // (Deadlines set during OnDeadline went through Arm.)
    next_scan_ = std::min(next_scan_, c->deadline());
  }
}

void Loop::FlushDirty() {
  // A flush can make more to write (a pipelined request parsed once the buffer
  // drained): round again until nothing is left.
  while (!dirty_.empty()) {
    flushing_.swap(dirty_);
    for (LeanConnection* c : flushing_) c->Flush();
    flushing_.clear();
  }
}

void Loop::Accept() {
  for (int i = 0; i < kAcceptsPerTurn && accepting_; ++i) {
    const int fd = ::accept4(core_.listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      if (core_.stopping.load()) {
        ::close(fd);
      } else {
        Adopt(fd);
      }
      continue;
    }
    const int error = errno;
    if (error == EAGAIN || error == EWOULDBLOCK) return;
    if (error == EINTR || error == ECONNABORTED) continue;
    if (core_.stopping.load()) return;
    // Out of descriptors the failure repeats for as long as its cause lasts: answer
    // what is pending through the reserve descriptor, then wait a little before
    // accepting again, instead of spinning on the error.
    const bool out_of_descriptors = error == EMFILE || error == ENFILE;
    if (out_of_descriptors) core_.ShedPending();
    core_.Note(Core::Repeat::kAcceptError,
               out_of_descriptors
                   ? absl::StrCat("out of file descriptors (", std::strerror(error),
                                  "): accepting pauses 100 ms at a time, waiting clients are "
                                  "answered 503; raise the descriptor limit or lower "
                                  "--max-connections")
                   : absl::StrCat("accept failed: ", std::strerror(error)));
    PauseAccepting();
    accept_again_ = now_ + kAcceptBackoff;
    return;
  }
}

void Loop::Adopt(int fd) {
  bool refused = false;
  const int cap = core_.options.max_connections;
  if (core_.live.fetch_add(1) >= cap && cap > 0) {
    core_.live.fetch_sub(1);
    refused = true;
  }
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  const uint64_t id = core_.next_id.fetch_add(1);
  auto owned = std::make_unique<LeanConnection>(fd, id, *this, core_, refused);
  LeanConnection* c = owned.get();
  epoll_event ev{};
  // Edge-triggered, both ways, once: no epoll_ctl per request.
  ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
  ev.data.ptr = c;
  if (::epoll_ctl(epoll_, EPOLL_CTL_ADD, fd, &ev) != 0) {
    if (!refused) core_.live.fetch_sub(1);
    return;  // ~LeanConnection closes fd
  }
  connections_.emplace(id, std::move(owned));
  if (refused) {
    core_.handler.metrics().CountRefused(Refusal::kMaxConnections);
    core_.Note(Core::Repeat::kRefused, absl::StrCat("connection limit (", cap,
                                                    ") reached: new connections are answered 503"));
  } else {
    core_.handler.metrics().ConnectionOpened();
  }
  c->Start();
}

void Loop::BeginShutdown() {
  shutting_down_ = true;
  if (accepting_) PauseAccepting();
  accept_again_ = Clock::time_point::max();
  if (core_.listening.fetch_sub(1) == 1) {
    ::close(core_.listener);
    core_.listener = -1;
  }
  for (auto& [id, c] : connections_) c->BeginShutdown();
}

void Loop::PauseAccepting() {
  ::epoll_ctl(epoll_, EPOLL_CTL_DEL, core_.listener, nullptr);
  accepting_ = false;
}

void Loop::ResumeAccepting() {
  accept_again_ = Clock::time_point::max();
  if (accepting_ || shutting_down_ || core_.stopping.load()) return;
  epoll_event ev{};
  // Level-triggered and exclusive: one loop wakes per pending connection (no
  // thundering herd), and what it leaves in the backlog wakes it again.
  ev.events = EPOLLIN | EPOLLEXCLUSIVE;
  ev.data.ptr = &listener_tag;
  accepting_ = ::epoll_ctl(epoll_, EPOLL_CTL_ADD, core_.listener, &ev) == 0;
}

}  // namespace idem::http::lean
