// A TCP forwarder on 127.0.0.1 that a test switches between faults, to put between
// idem and a database (a store that stops answering is a store fault, and
// every store call is bounded):
//   kPass       forwards both ways;
//   kBlackhole  accepts and reads bytes on every connection, old and new, and
//               forwards and answers nothing: a peer that went silent without a
//               reset (a partition, a dead host behind a NAT), the case TCP alone
//               never reports;
//   kReset      resets every open connection (RST) and every new one at once;
//   kDelay      forwards both ways, each chunk set_delay() late (a slow network);
//   kCutBeforeCommit / kCutAfterCommit
//               forwards both ways, but a connection whose client sends bytes that
//               contain the word COMMIT or CALL (any case: the SQL text of
//               PostgreSQL's and MySQL's protocols; idem's MariaDB procedures commit
//               inside a CALL) is reset before / right after those bytes are
//               forwarded, so the client never learns whether its COMMIT happened.
// Back to kPass is "the network healed": new connections forward again; the ones
// that were black-holed stay dead, as they would across a real partition.
//
// Thread safety: SetMode may be called from any thread. Test-only.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace idem::testing {

class FaultProxy {
 public:
  enum class Mode { kPass, kBlackhole, kReset, kDelay, kCutBeforeCommit, kCutAfterCommit };

  // Listens on a free port of 127.0.0.1 and forwards to 127.0.0.1:`target_port`.
  // Returns null when it cannot listen.
  static std::unique_ptr<FaultProxy> Start(int target_port) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return nullptr;
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::listen(fd, 64) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      ::close(fd);
      return nullptr;
    }
    std::unique_ptr<FaultProxy> p(new FaultProxy(fd, ntohs(addr.sin_port), target_port));
    p->acceptor_ = std::thread([raw = p.get()] { raw->AcceptLoop(); });
    return p;
  }

  ~FaultProxy() {
    stopping_ = true;
    ::shutdown(listen_fd_, SHUT_RDWR);
    acceptor_.join();
    ::close(listen_fd_);
    std::vector<std::thread> threads;
    {
      std::lock_guard<std::mutex> lock(mu_);
      threads.swap(threads_);
    }
    for (std::thread& t : threads) t.join();
  }

  int port() const { return port_; }

  void SetMode(Mode mode) { mode_ = mode; }
  // The lateness of each chunk in kDelay (default 100 ms).
  void set_delay(std::chrono::milliseconds delay) { delay_ms_ = static_cast<int>(delay.count()); }

  // Connections cut around a COMMIT so far.
  int commits_cut() const { return commits_cut_; }

  // Connections accepted so far.
  int accepted() const { return accepted_; }

  // Connections forwarded (or swallowed) now: 0 once kReset has cut every one.
  int open() const { return open_; }

 private:
  FaultProxy(int listen_fd, int port, int target_port)
      : listen_fd_(listen_fd), port_(port), target_port_(target_port) {}

  // Closes `fd` with a reset (RST) rather than an orderly FIN.
  static void Reset(int fd) {
    linger l{1, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    ::close(fd);
  }

  // True when the bytes hold the word COMMIT (not COMMITTED, as in the session's
  // "READ COMMITTED") or CALL (MariaDB: idem's procedures commit inside).
  static bool HasCommit(const char* data, size_t n) {
    return HasWord(data, n, "commit") || HasWord(data, n, "call");
  }
  static bool HasWord(const char* data, size_t n, std::string_view word) {
    const char* end = data + n;
    const auto alpha = [](char c) { return std::isalpha(static_cast<unsigned char>(c)) != 0; };
    for (const char* at = data;; ++at) {
      at = std::search(at, end, word.begin(), word.end(), [](char a, char b) {
        return std::tolower(static_cast<unsigned char>(a)) == b;
      });
      if (at == end) return false;
      const char* after = at + word.size();
      if ((at == data || !alpha(at[-1])) && (after == end || !alpha(*after))) return true;
    }
  }

  void AcceptLoop() {
    while (!stopping_) {
      const int client = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (client < 0) return;  // shut down
      ++accepted_;
      if (mode_ == Mode::kReset) {
        Reset(client);
        continue;
      }
      std::lock_guard<std::mutex> lock(mu_);
      threads_.emplace_back([this, client] { Serve(client); });
    }
  }

  // One connection: connects to the target, then moves bytes while the mode allows,
  // polling every 50 ms so that a mode change applies to open connections too.
  void Serve(int client) {
    ++open_;
    int server = -1;
    bool blackholed = mode_ == Mode::kBlackhole;  // once silent, silent for good
    if (!blackholed) {
      server = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      addr.sin_port = htons(static_cast<uint16_t>(target_port_));
      if (server < 0 || ::connect(server, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
        if (server >= 0) ::close(server);
        Reset(client);
        --open_;
        return;
      }
      const int one = 1;
      ::setsockopt(server, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      ::setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    char buf[16384];
    bool cut = false;  // reset around a COMMIT
    while (!stopping_) {
      const Mode mode = mode_;
      if (mode == Mode::kReset) break;
      if (mode == Mode::kBlackhole) blackholed = true;
      pollfd fds[2] = {{client, POLLIN, 0}, {server, POLLIN, 0}};
      const int n = ::poll(fds, server >= 0 ? 2 : 1, 50);
      if (n <= 0) continue;
      bool closed = false;
      for (int i = 0; i < (server >= 0 ? 2 : 1) && !closed; ++i) {
        if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
        const ssize_t r = ::read(fds[i].fd, buf, sizeof buf);
        if (r <= 0) {
          closed = true;
          break;
        }
        if (blackholed) continue;  // swallowed: nothing goes on, nothing comes back
        const bool commit = i == 0 && (mode == Mode::kCutBeforeCommit ||
                                       mode == Mode::kCutAfterCommit) &&
                            HasCommit(buf, static_cast<size_t>(r));
        if (commit && mode == Mode::kCutBeforeCommit) {
          ++commits_cut_;
          cut = true;
          break;
        }
        if (mode == Mode::kDelay) {  // the slow network this mode stands for
          std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms_.load()));
        }
        const int to = i == 0 ? server : client;
        for (ssize_t off = 0; off < r;) {
          const ssize_t w = ::write(to, buf + off, static_cast<size_t>(r - off));
          if (w <= 0) {
            closed = true;
            break;
          }
          off += w;
        }
        if (commit && !closed) {
          ++commits_cut_;
          cut = true;
          break;
        }
      }
      if (closed || cut) break;
    }
    if (mode_ == Mode::kReset || cut) {
      Reset(client);
      if (server >= 0) Reset(server);
    } else {
      ::close(client);
      if (server >= 0) ::close(server);
    }
    --open_;
  }

  const int listen_fd_;
  const int port_;
  const int target_port_;
  std::atomic<Mode> mode_{Mode::kPass};
  std::atomic<bool> stopping_{false};
  std::atomic<int> accepted_{0};
  std::atomic<int> open_{0};
  std::atomic<int> delay_ms_{100};
  std::atomic<int> commits_cut_{0};
  std::thread acceptor_;
  std::mutex mu_;
  std::vector<std::thread> threads_;
};

}  // namespace idem::testing
