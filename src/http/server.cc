#include "http/server.h"

#include <map>
#include <optional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "boost/asio/executor_work_guard.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/asio/post.hpp"
#include "boost/asio/strand.hpp"
#include "boost/asio/thread_pool.hpp"
#include "http/connection.h"
#include "spdlog/spdlog.h"

namespace idem::http {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

class ServerImpl {
 public:
  ServerImpl(Api& api, ServerOptions options)
      : api_(api),
        options_(std::move(options)),
        pool_(static_cast<std::size_t>(std::max(1, options_.worker_threads))),
        acceptor_(asio::make_strand(ioc_)) {}

  ~ServerImpl() {
    Shutdown();
    Wait();
  }

  absl::Status Start() {
    boost::system::error_code ec;
    tcp::resolver resolver(ioc_);
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
    {
      absl::MutexLock lock(&mu_);
      work_.emplace(ioc_.get_executor());
    }
    Accept();
    const int n = std::max(1, options_.io_threads);
    for (int i = 0; i < n; ++i) threads_.emplace_back([this] { ioc_.run(); });
    started_ = true;
    return absl::OkStatus();
  }

  std::string address() const { return bound_.address().to_string(); }
  uint16_t port() const { return bound_.port(); }

  void Shutdown() {
    if (stopping_.exchange(true)) return;
    if (started_) spdlog::info("shutting down: closing the listener and idle connections");
    asio::post(acceptor_.get_executor(), [this] {
      boost::system::error_code ec;
      acceptor_.close(ec);
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
    if (connections_.empty()) work_.reset();
  }

  void Wait() {
    for (std::thread& t : threads_) {
      if (t.joinable()) t.join();
    }
    threads_.clear();
    pool_.join();
  }

 private:
  void Accept() {
    acceptor_.async_accept(asio::make_strand(ioc_),
                           [this](boost::system::error_code ec, tcp::socket socket) {
                             OnAccept(ec, std::move(socket));
                           });
  }

  void OnAccept(boost::system::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
    if (ec) {
      spdlog::warn("accept failed: {}", ec.message());
    } else if (!stopping_.load()) {
      uint64_t id = next_id_++;
      // The deleter unregisters the connection when its last handler is done.
      std::shared_ptr<Connection> conn(
          new Connection(std::move(socket), ServerShared{api_, options_, ioc_, pool_, stopping_}),
          [this, id](Connection* c) {
            delete c;
            absl::MutexLock lock(&mu_);
            connections_.erase(id);
            if (stopping_.load() && connections_.empty()) work_.reset();
          });
      {
        absl::MutexLock lock(&mu_);
        connections_.emplace(id, conn);
      }
      conn->Start();
    }
    if (!stopping_.load()) Accept();
  }

  Api& api_;
  const ServerOptions options_;
  // Declared before ioc_ so that they outlive any handler ioc_ destroys.
  absl::Mutex mu_;
  std::map<uint64_t, std::weak_ptr<Connection>> connections_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> stopping_{false};
  asio::io_context ioc_;
  // Keeps the I/O threads running until every connection is gone after Shutdown():
  // otherwise they could return while a connection still has a posted handler
  // (BeginShutdown), leaving it for ~io_context.
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work_
      ABSL_GUARDED_BY(mu_);
  asio::thread_pool pool_;
  tcp::acceptor acceptor_;
  tcp::endpoint bound_;
  std::atomic<bool> started_{false};
  std::vector<std::thread> threads_;
  uint64_t next_id_ = 0;  // accept strand only
};

Server::Server(Api& api, ServerOptions options)
    : impl_(std::make_unique<ServerImpl>(api, std::move(options))) {}

Server::~Server() = default;

absl::Status Server::Start() { return impl_->Start(); }
std::string Server::address() const { return impl_->address(); }
uint16_t Server::port() const { return impl_->port(); }
void Server::Shutdown() { impl_->Shutdown(); }
void Server::Wait() { impl_->Wait(); }

}  // namespace idem::http
