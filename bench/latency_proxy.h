// A TCP forwarder on 127.0.0.1 that holds every chunk of bytes for a fixed time
// before passing it on, in both directions: a database on loopback then answers
// as one across a network with round trip 2 × `one_way` would. For benchmarks
// whose ratio depends on what a round trip costs (bench/ only; not a test tool:
// it trusts both ends and stops at the first socket error of a connection).
//
// Each direction of each connection has a reader thread, which stamps every
// chunk it reads with the time it is due (`one_way` later) and queues it, and a
// writer thread, which writes each chunk when it is due. Chunks that follow each
// other closely (a pipelined reply that the server flushes in parts) are delayed
// once each, in parallel, as packets on a network are, not one after another.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace idem::bench {

class LatencyProxy {
 public:
  // Listens on a free port of 127.0.0.1 and forwards to 127.0.0.1:`target_port`.
  static absl::StatusOr<std::unique_ptr<LatencyProxy>> Start(int target_port,
                                                             std::chrono::microseconds one_way) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return absl::InternalError(absl::StrCat("latency proxy: socket: ", Errno()));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(fd, 64) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      const std::string err = Errno();
      ::close(fd);
      return absl::InternalError(absl::StrCat("latency proxy: listen: ", err));
    }
    std::unique_ptr<LatencyProxy> proxy(
        new LatencyProxy(fd, ntohs(addr.sin_port), target_port, one_way));
    proxy->acceptor_ = std::thread([p = proxy.get()] { p->AcceptLoop(); });
    return proxy;
  }

  ~LatencyProxy() {
    ::shutdown(listen_fd_, SHUT_RDWR);
    acceptor_.join();
    ::close(listen_fd_);
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (int fd : fds_) ::shutdown(fd, SHUT_RDWR);
    }
    for (std::thread& t : pumps_) t.join();
    for (int fd : fds_) ::close(fd);
  }

  int port() const { return port_; }

 private:
  LatencyProxy(int listen_fd, int port, int target_port, std::chrono::microseconds one_way)
      : listen_fd_(listen_fd), port_(port), target_port_(target_port), one_way_(one_way) {}

  static std::string Errno() { return std::strerror(errno); }

  void AcceptLoop() {
    while (true) {
      const int client = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (client < 0) return;  // shut down
      const int server = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      addr.sin_port = htons(static_cast<uint16_t>(target_port_));
      if (server < 0 || ::connect(server, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
        ::close(client);
        if (server >= 0) ::close(server);
        continue;
      }
      const int one = 1;
      ::setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      ::setsockopt(server, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      std::lock_guard<std::mutex> lock(mu_);
      fds_.push_back(client);
      fds_.push_back(server);
      pumps_.emplace_back([this, client, server] { Pump(client, server); });
      pumps_.emplace_back([this, client, server] { Pump(server, client); });
    }
  }

  struct Chunk {
    std::chrono::steady_clock::time_point due;
    std::string bytes;  // empty: the reading side ended
  };
  struct Queue {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<Chunk> chunks;
  };

  // from → to: reads and queues, while a second thread writes each chunk when due.
  void Pump(int from, int to) {
    Queue q;
    std::thread writer([&] {
      prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);  // wake on time, not up to 50 µs late
      while (true) {
        Chunk c;
        {
          std::unique_lock<std::mutex> lock(q.mu);
          q.cv.wait(lock, [&] { return !q.chunks.empty(); });
          c = std::move(q.chunks.front());
          q.chunks.pop_front();
        }
        if (c.bytes.empty()) break;
        std::this_thread::sleep_until(c.due);
        size_t off = 0;
        while (off < c.bytes.size()) {
          const ssize_t w = ::write(to, c.bytes.data() + off, c.bytes.size() - off);
          if (w <= 0) break;
          off += static_cast<size_t>(w);
        }
        if (off < c.bytes.size()) break;
      }
      // The other direction ends too: a half-open database session is of no use.
      ::shutdown(from, SHUT_RDWR);
      ::shutdown(to, SHUT_RDWR);
    });
    std::vector<char> buf(64 * 1024);
    while (true) {
      const ssize_t n = ::read(from, buf.data(), buf.size());
      Chunk c{std::chrono::steady_clock::now() + one_way_,
              n > 0 ? std::string(buf.data(), static_cast<size_t>(n)) : std::string()};
      {
        std::lock_guard<std::mutex> lock(q.mu);
        q.chunks.push_back(std::move(c));
      }
      q.cv.notify_one();
      if (n <= 0) break;
    }
    writer.join();
  }

  const int listen_fd_;
  const int port_;
  const int target_port_;
  const std::chrono::microseconds one_way_;
  std::thread acceptor_;
  std::mutex mu_;
  std::vector<int> fds_;
  std::vector<std::thread> pumps_;
};

}  // namespace idem::bench
