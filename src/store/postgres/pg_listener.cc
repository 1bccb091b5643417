#include "store/postgres/pg_listener.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "absl/strings/str_cat.h"

namespace idem::postgres {

Listener::Listener(ConnectSpec spec, std::string channel, OnPayload on_payload)
    : spec_(std::move(spec)), channel_(std::move(channel)), on_payload_(std::move(on_payload)) {
  if (pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) wake_[0] = wake_[1] = -1;
  thread_ = std::thread([this] { Run(); });
}

Listener::~Listener() {
  stop_.store(true);
  if (wake_[1] >= 0) {
    const char byte = 1;
    (void)!write(wake_[1], &byte, 1);
  }
  thread_.join();
  for (int fd : wake_) {
    if (fd >= 0) close(fd);
  }
}

bool Listener::Wait(int fd, int ms) {
  pollfd fds[2] = {{fd, POLLIN, 0}, {wake_[0], POLLIN, 0}};
  const int n = poll(fds, wake_[0] >= 0 ? 2 : 1, ms);
  if (n < 0 && errno != EINTR) usleep(10000);  // never spin
  return !stop_.load();
}

void Listener::Run() {
  int backoff_ms = 1000;
  while (!stop_.load()) {
    absl::StatusOr<std::unique_ptr<Connection>> conn = Connection::Open(spec_);
    absl::Status status = conn.status();
    if (conn.ok()) status = (*conn)->ExecScript(absl::StrCat("LISTEN ", channel_).c_str());
    if (!status.ok()) {
      // Waiting claims poll meanwhile; the store's own errors reach its callers.
      if (!Wait(-1, backoff_ms)) return;
      backoff_ms = std::min(backoff_ms * 2, 30000);
      continue;
    }
    backoff_ms = 1000;
    listening_.store(true);
    while (!stop_.load()) {
      if (!Wait((*conn)->socket(), 1000)) break;
      absl::StatusOr<std::vector<std::string>> payloads = (*conn)->TakeNotifications();
      if (!payloads.ok()) break;  // reconnect
      for (const std::string& p : *payloads) on_payload_(p);
    }
    listening_.store(false);
  }
}

}  // namespace idem::postgres
