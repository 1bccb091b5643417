#include "http/server/server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "boost/asio/executor_work_guard.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/asio/post.hpp"
#include "boost/asio/read.hpp"
#include "boost/asio/steady_timer.hpp"
#include "boost/asio/thread_pool.hpp"
#include "boost/asio/write.hpp"
#include "core/absl_compat.h"
#include "http/lean/server.h"
#include "http/server/connection.h"
#include "http/server/engine.h"
#include "spdlog/spdlog.h"

namespace idem::http {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

// A connection refused past the cap: the answer goes out, then the socket is
// half-closed and drained until the client closes (or 2 s), so that the client's
// unread request does not turn the close into a reset that loses the answer.
struct Refused : std::enable_shared_from_this<Refused> {
  explicit Refused(ConnectionSocket s) : socket(std::move(s)), timer(socket.get_executor()) {}

  void Start() {
    auto self = shared_from_this();
    asio::async_write(socket, asio::buffer(answer),
                      [self](boost::system::error_code ec, std::size_t) {
                        if (ec) return self->Close();
                        self->socket.shutdown(tcp::socket::shutdown_send, ec);
                        self->timer.expires_after(std::chrono::seconds(2));
                        self->timer.async_wait([self](boost::system::error_code) { self->Close(); });
                        self->Drain();
                      });
  }
  void Drain() {
    auto self = shared_from_this();
    socket.async_read_some(asio::buffer(buf), [self](boost::system::error_code ec, std::size_t) {
      if (ec) return self->Close();
      self->Drain();
    });
  }
  void Close() {
    boost::system::error_code ignored;
    timer.cancel();
    socket.close(ignored);
  }

  ConnectionSocket socket;
  asio::steady_timer timer;
  const std::string answer = BusyAnswer();  // lives until the write is done
  char buf[512];
};

class ServerImpl final : public ServerEngine {
 public:
  ServerImpl(Handler& api, ServerOptions options)
      : api_(api),
        options_(std::move(options)),
        contexts_(MakeContexts(options_.io_threads)),
        pool_(static_cast<std::size_t>(std::max(1, options_.worker_threads))),
        acceptor_(*contexts_.front()),
        accept_timer_(acceptor_.get_executor()) {}

  ~ServerImpl() override {
    Shutdown();
    Wait();
    if (spare_fd_ >= 0) ::close(spare_fd_);
  }

  absl::Status Start() override {
    boost::system::error_code ec;
    tcp::resolver resolver(*contexts_.front());
    auto results =
        resolver.resolve(options_.host, std::to_string(options_.port), tcp::resolver::passive, ec);
    if (ec || results.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot resolve listen host \"", options_.host, "\": ", ec.message()));
    }
    tcp::endpoint endpoint = results.begin()->endpoint();
    acceptor_.open(endpoint.protocol(), ec);
    if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(endpoint, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      return absl::UnavailableError(
          absl::StrCat("cannot listen on ", options_.host, ":", options_.port, ": ", ec.message()));
    }
    bound_ = acceptor_.local_endpoint(ec);
    spare_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    {
      absl::MutexLock lock(&mu_);
      for (auto& ioc : contexts_) work_.emplace_back(ioc->get_executor());
    }
    Accept();
    for (auto& ioc : contexts_) threads_.emplace_back([&ioc = *ioc] { ioc.run(); });
    started_ = true;
    return absl::OkStatus();
  }

  std::string address() const override { return bound_.address().to_string(); }
  uint16_t port() const override { return bound_.port(); }

  void Shutdown() override {
    if (stopping_.exchange(true)) return;
    if (started_) spdlog::info("shutting down: closing the listener and idle connections");
    asio::post(acceptor_.get_executor(), [this] {
      boost::system::error_code ec;
      acceptor_.close(ec);
      accept_timer_.cancel();
    });
    // Take references under the lock but act outside it: dropping the last reference
    // runs the connection's deleter, which takes mu_.
    std::vector<std::shared_ptr<Connection>> live;
    {
      absl::MutexLock lock(&mu_);
      for (auto& [id, weak] : connections_) {
        if (auto c = weak.lock()) live.push_back(std::move(c));
      }
    }
    for (auto& c : live) c->BeginShutdown();
    live.clear();
    absl::MutexLock lock(&mu_);
    if (connections_.empty()) work_.clear();
  }

  void Wait() override {
    for (std::thread& t : threads_) {
      if (t.joinable()) t.join();
    }
    threads_.clear();
    pool_.join();
  }

 private:
  static std::vector<std::unique_ptr<asio::io_context>> MakeContexts(int n) {
    std::vector<std::unique_ptr<asio::io_context>> contexts;
    // Concurrency hint 1: one thread runs each (other threads still post to it).
    for (int i = 0; i < std::max(1, n); ++i)
      contexts.push_back(std::make_unique<asio::io_context>(1));
    return contexts;
  }

  void Accept() {
    // The next connection goes to the next I/O thread's io_context, in turn.
    asio::io_context& ioc = *contexts_[next_id_ % contexts_.size()];
    acceptor_.async_accept(ioc.get_executor(),
                           [this, &ioc](boost::system::error_code ec, ConnectionSocket socket) {
                             OnAccept(ec, std::move(socket), ioc);
                           });
  }

  void OnAccept(boost::system::error_code ec, ConnectionSocket socket, asio::io_context& ioc) {
    if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
    if (ec) {
      // Out of descriptors the failure repeats for as long as its cause lasts:
      // answer what is pending through the reserve descriptor, then wait a little
      // before accepting again, instead of spinning on the error.
      const bool out_of_descriptors =
          ec == asio::error::no_descriptors ||
          ec == boost::system::errc::too_many_files_open_in_system;
      if (out_of_descriptors) ShedPending();
      Note(&accept_errors_,
           out_of_descriptors
               ? absl::StrCat("out of file descriptors (", ec.message(),
                              "): accepting pauses 100 ms at a time, waiting clients are "
                              "answered 503; raise the descriptor limit or lower "
                              "--max-connections")
               : absl::StrCat("accept failed: ", ec.message()));
      accept_timer_.expires_after(std::chrono::milliseconds(100));
      accept_timer_.async_wait([this](boost::system::error_code wait) {
        if (!wait && !stopping_.load()) Accept();
      });
      return;
    }
    if (!stopping_.load()) {
      if (options_.max_connections > 0 && LiveConnections() >= options_.max_connections) {
        std::make_shared<Refused>(std::move(socket))->Start();
        api_.metrics().CountRefused(Refusal::kMaxConnections);
        Note(&refused_, absl::StrCat("connection limit (", options_.max_connections,
                                     ") reached: new connections are answered 503"));
      } else {
        Serve(std::move(socket), ioc);
      }
    }
    if (!stopping_.load()) Accept();
  }

  void Serve(ConnectionSocket socket, asio::io_context& ioc) {
    uint64_t id = next_id_++;
    // The deleter unregisters the connection when its last handler is done.
    std::shared_ptr<Connection> conn(
        new Connection(std::move(socket), ServerShared{api_, options_, ioc, pool_, stopping_}),
        [this, id](Connection* c) {
          delete c;
          api_.metrics().ConnectionClosed();
          absl::MutexLock lock(&mu_);
          connections_.erase(id);
          if (stopping_.load() && connections_.empty()) work_.clear();
        });
    {
      absl::MutexLock lock(&mu_);
      connections_.emplace(id, conn);
    }
    api_.metrics().ConnectionOpened();
    conn->Start();
  }

  int LiveConnections() {
    absl::MutexLock lock(&mu_);
    return static_cast<int>(connections_.size());
  }

  // Answers the connections waiting in the backlog while no descriptor is free:
  // the reserve descriptor is given up for one accept at a time, each gets the 503
  // and is closed, then the reserve is taken back.
  void ShedPending() {
    refused_.count += ShedBacklog(acceptor_.native_handle(), &spare_fd_, api_.metrics());
  }

  // A condition that repeats under load (accept failures, refusals): counted, and
  // logged at most once a second with how often it happened since the last line.
  struct Repeated {
    uint64_t count = 0;     // since the last line
    absl::Time last_line = absl::InfinitePast();
  };
  void Note(Repeated* r, const std::string& what) {
    ++r->count;
    const absl::Time now = absl::Now();
    if (now - r->last_line < absl::Seconds(1)) return;
    spdlog::warn("{} ({} times since the last such line; open connections: {})", what, r->count,
                 LiveConnections());
    r->count = 0;
    r->last_line = now;
  }

  Handler& api_;
  const ServerOptions options_;
  // Declared before contexts_ so that they outlive any handler ~io_context destroys.
  absl::Mutex mu_;
  std::map<uint64_t, std::weak_ptr<Connection>> connections_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> stopping_{false};
  // One per I/O thread; the first also runs the acceptor.
  std::vector<std::unique_ptr<asio::io_context>> contexts_;
  // Keep the I/O threads running until every connection is gone after Shutdown():
  // otherwise they could return while a connection still has a posted handler
  // (BeginShutdown), leaving it for ~io_context.
  std::vector<asio::executor_work_guard<asio::io_context::executor_type>> work_
      ABSL_GUARDED_BY(mu_);
  asio::thread_pool pool_;
  tcp::acceptor acceptor_;
  asio::steady_timer accept_timer_;  // the back-off after a failed accept
  int spare_fd_ = -1;                // the descriptor kept in reserve (ShedPending)
  Repeated accept_errors_;           // the first io_context's thread only
  Repeated refused_;                 // the first io_context's thread only
  tcp::endpoint bound_;
  std::atomic<bool> started_{false};
  std::vector<std::thread> threads_;
  uint64_t next_id_ = 0;  // the first io_context's thread only
};

Server::Server(Handler& handler, ServerOptions options)
    : impl_(options.engine == HttpEngine::kLean
                ? MakeLeanServer(handler, std::move(options))
                : std::unique_ptr<ServerEngine>(
                      std::make_unique<ServerImpl>(handler, std::move(options)))) {}

Server::~Server() = default;

absl::Status Server::Start() { return impl_->Start(); }
std::string Server::address() const { return impl_->address(); }
uint16_t Server::port() const { return impl_->port(); }
void Server::Shutdown() { impl_->Shutdown(); }
void Server::Wait() { impl_->Wait(); }

}  // namespace idem::http
