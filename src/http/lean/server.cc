#include "http/lean/server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "http/lean/loop.h"
#include "spdlog/spdlog.h"

namespace idem::http {
namespace {

class LeanServer final : public ServerEngine {
 public:
  LeanServer(Handler& handler, ServerOptions options) : core_(handler, std::move(options)) {}

  ~LeanServer() override {
    Shutdown();
    Wait();
    loops_.clear();
    if (core_.listener >= 0) ::close(core_.listener);
    absl::MutexLock lock(&core_.mu);
    if (core_.spare_fd >= 0) ::close(core_.spare_fd);
  }

  absl::Status Start() override {
    const ServerOptions& o = core_.options;
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    addrinfo* found = nullptr;
    const std::string port = std::to_string(o.port);
    if (const int rc = ::getaddrinfo(o.host.c_str(), port.c_str(), &hints, &found);
        rc != 0 || found == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot resolve listen host \"", o.host, "\": ", ::gai_strerror(rc)));
    }
    std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> results(found, &::freeaddrinfo);
    const int fd = ::socket(found->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    const int one = 1;
    const bool ok = fd >= 0 && ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == 0 &&
                    ::bind(fd, found->ai_addr, found->ai_addrlen) == 0 &&
                    ::listen(fd, SOMAXCONN) == 0;
    if (!ok) {
      const int error = errno;
      if (fd >= 0) ::close(fd);
      return absl::UnavailableError(
          absl::StrCat("cannot listen on ", o.host, ":", o.port, ": ", std::strerror(error)));
    }
    sockaddr_storage bound{};
    socklen_t len = sizeof bound;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
    char text[INET6_ADDRSTRLEN] = "";
    if (bound.ss_family == AF_INET6) {
      const auto* a = reinterpret_cast<const sockaddr_in6*>(&bound);
      ::inet_ntop(AF_INET6, &a->sin6_addr, text, sizeof text);
      port_ = ntohs(a->sin6_port);
    } else {
      const auto* a = reinterpret_cast<const sockaddr_in*>(&bound);
      ::inet_ntop(AF_INET, &a->sin_addr, text, sizeof text);
      port_ = ntohs(a->sin_port);
    }
    address_ = text;
    core_.listener = fd;
    {
      absl::MutexLock lock(&core_.mu);
      core_.spare_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    }
    const int n = std::max(1, o.io_threads);
    for (int i = 0; i < n; ++i) {
      loops_.push_back(std::make_unique<lean::Loop>(core_));
      if (absl::Status s = loops_.back()->Init(); !s.ok()) {
        loops_.clear();
        return s;
      }
    }
    core_.listening.store(n);
    for (auto& loop : loops_) threads_.emplace_back([l = loop.get()] { l->Run(); });
    started_ = true;
    return absl::OkStatus();
  }

  std::string address() const override { return address_; }
  uint16_t port() const override { return port_; }

  void Shutdown() override {
    if (core_.stopping.exchange(true)) return;
    if (started_) spdlog::info("shutting down: closing the listener and idle connections");
    for (auto& loop : loops_) loop->Wake();
  }

  void Wait() override {
    for (std::thread& t : threads_) {
      if (t.joinable()) t.join();
    }
    threads_.clear();
    core_.pool.join();
  }

 private:
  lean::Core core_;
  std::vector<std::unique_ptr<lean::Loop>> loops_;
  std::vector<std::thread> threads_;
  std::string address_;
  uint16_t port_ = 0;
  std::atomic<bool> started_{false};
};

}  // namespace

std::unique_ptr<ServerEngine> MakeLeanServer(Handler& handler, ServerOptions options) {
  return std::make_unique<LeanServer>(handler, std::move(options));
}

}  // namespace idem::http
