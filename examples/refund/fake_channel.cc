#include "refund/fake_channel.h"

#include <chrono>
#include <csignal>
#include <cstdio>
#include <exception>
#include <optional>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "boost/asio/executor_work_guard.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/asio/signal_set.hpp"
#include "boost/asio/steady_timer.hpp"
#include "boost/asio/strand.hpp"
#include "boost/beast/core.hpp"
#include "boost/beast/http.hpp"
#include "idem/status.h"
#include "refund/channel_book.h"
#include "spdlog/spdlog.h"

namespace idem::refund {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;

constexpr size_t kMaxBodyBytes = 64 << 10;
constexpr auto kIdleTimeout = std::chrono::seconds(60);

// One connection: reads requests one after another (keep-alive) and answers each,
// or holds the answer back, or drops the connection, as the ChannelBook decided. Its
// handlers run on its strand, one at a time.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, ChannelBook& book, absl::Duration response_delay)
      : stream_(std::move(socket)),
        timer_(stream_.get_executor()),
        book_(book),
        response_delay_(response_delay) {}

  void Read() {
    parser_.emplace();
    parser_->body_limit(kMaxBodyBytes);
    stream_.expires_after(kIdleTimeout);
    bhttp::async_read(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->OnRead(ec); });
  }

 private:
  void OnRead(beast::error_code ec) {
    if (ec) {
      // EOF, reset, idle timeout or a malformed request: nothing worth answering.
      Close();
      return;
    }
    bhttp::request<bhttp::string_body> request = parser_->release();
    const std::string_view method(request.method_string().data(), request.method_string().size());
    const std::string_view target(request.target().data(), request.target().size());
    ChannelReply reply;
    try {
      reply = book_.Handle(method, target, request.body());
    } catch (const std::exception& e) {
      reply = ChannelReply::Error(500, e.what());
    }
    spdlog::debug("{} {} -> {}", method, target, reply.status);
    response_.emplace(static_cast<bhttp::status>(reply.status), request.version());
    response_->set(bhttp::field::server, "idem-fake-channel");
    response_->set(bhttp::field::content_type, "application/json");
    response_->body() = std::move(reply.body);
    response_->keep_alive(request.keep_alive());
    response_->prepare_payload();
    switch (reply.fault) {
      case ChannelFault::kLost:
        Close();
        return;
      case ChannelFault::kTimeout:
        stream_.expires_never();
        timer_.expires_after(absl::ToChronoNanoseconds(response_delay_));
        timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
          if (ec) {
            self->Close();
          } else {
            self->Write();
          }
        });
        return;
      case ChannelFault::kNone:
        Write();
        return;
    }
  }

  void Write() {
    stream_.expires_after(kIdleTimeout);
    bhttp::async_write(stream_, *response_,
                       [self = shared_from_this()](beast::error_code ec, size_t) {
                         const bool keep_alive = self->response_->keep_alive();
                         self->response_.reset();
                         if (ec || !keep_alive) {
                           self->Close();
                         } else {
                           self->Read();
                         }
                       });
  }

  void Close() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.close();
  }

  beast::tcp_stream stream_;
  asio::steady_timer timer_;
  ChannelBook& book_;
  const absl::Duration response_delay_;
  beast::flat_buffer buffer_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  std::optional<bhttp::response<bhttp::string_body>> response_;
};

// "HOST:PORT" or "[v6]:PORT", port 0-65535.
absl::Status ParseListen(const std::string& listen, std::string* host, uint16_t* port) {
  const absl::Status bad = absl::InvalidArgumentError(
      absl::StrCat("listen address \"", listen, "\" must be HOST:PORT (port 0-65535)"));
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos || colon == 0) return bad;
  std::string h = listen.substr(0, colon);
  const std::string p = listen.substr(colon + 1);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  uint32_t n = 0;
  if (h.empty() || p.empty() || p.find_first_not_of("0123456789") != std::string::npos ||
      !absl::SimpleAtoi(p, &n) || n > 65535) {
    return bad;
  }
  *host = std::move(h);
  *port = static_cast<uint16_t>(n);
  return absl::OkStatus();
}

std::string FormatAddress(const tcp::endpoint& endpoint) {
  const std::string ip = endpoint.address().to_string();
  return endpoint.address().is_v6() ? absl::StrCat("[", ip, "]:", endpoint.port())
                                    : absl::StrCat(ip, ":", endpoint.port());
}

}  // namespace

class FakeChannelServer::Impl {
 public:
  explicit Impl(const FakeChannelOptions& options)
      : response_delay_(options.response_delay),
        book_(options.fault_rate, options.seed),
        net_(std::make_unique<Net>()) {}

  ~Impl() { Stop(); }

  absl::Status Listen(const std::string& host, uint16_t port) {
    beast::error_code ec;
    tcp::resolver resolver(net_->ioc);
    auto results = resolver.resolve(host, std::to_string(port), tcp::resolver::passive, ec);
    if (ec || results.empty()) {
      return absl::UnavailableError(
          absl::StrCat("cannot resolve listen host \"", host, "\": ", ec.message()));
    }
    const tcp::endpoint endpoint = results.begin()->endpoint();
    tcp::acceptor& acceptor = net_->acceptor;
    acceptor.open(endpoint.protocol(), ec);
    if (!ec) acceptor.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) acceptor.bind(endpoint, ec);
    if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
    if (!ec) bound_ = acceptor.local_endpoint(ec);
    if (ec) {
      return absl::UnavailableError(
          absl::StrCat("cannot listen on ", host, ":", port, ": ", ec.message()));
    }
    return absl::OkStatus();
  }

  void Serve(int io_threads) {
    Accept();
    for (int i = 0; i < io_threads; ++i) threads_.emplace_back([this] { net_->ioc.run(); });
  }

  void Stop() {
    absl::MutexLock lock(&stop_mu_);
    if (net_ == nullptr) return;
    net_->work.reset();
    net_->ioc.stop();
    for (std::thread& t : threads_) t.join();
    threads_.clear();
    // Destroying the io_context destroys the pending handlers, and with them the
    // sessions and their sockets: every connection closes now.
    net_.reset();
  }

  const tcp::endpoint& bound() const { return bound_; }

 private:
  struct Net {
    asio::io_context ioc;
    tcp::acceptor acceptor{ioc};
    std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work{
        ioc.get_executor()};
  };

  void Accept() {
    net_->acceptor.async_accept(
        asio::make_strand(net_->ioc), [this](beast::error_code ec, tcp::socket socket) {
          if (ec == asio::error::operation_aborted) return;
          if (ec) {
            spdlog::warn("accept: {}", ec.message());
          } else {
            std::make_shared<Session>(std::move(socket), book_, response_delay_)->Read();
          }
          Accept();
        });
  }

  const absl::Duration response_delay_;
  ChannelBook book_;
  tcp::endpoint bound_;
  absl::Mutex stop_mu_;
  // Handlers reach net_ only while the threads run, i.e. before Stop() resets it.
  std::unique_ptr<Net> net_;
  std::vector<std::thread> threads_;
};

FakeChannelServer::FakeChannelServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

FakeChannelServer::~FakeChannelServer() { Stop(); }

absl::StatusOr<std::unique_ptr<FakeChannelServer>> FakeChannelServer::Start(
    FakeChannelOptions options) {
  if (!(options.fault_rate >= 0 && options.fault_rate <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("fault_rate must be in [0,1], not ", options.fault_rate));
  }
  if (options.response_delay < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("response_delay must not be negative");
  }
  if (options.io_threads < 1) return absl::InvalidArgumentError("io_threads must be >= 1");
  std::string host;
  uint16_t port = 0;
  IDEM_RETURN_IF_ERROR(ParseListen(options.listen, &host, &port));

  auto impl = std::make_unique<Impl>(options);
  IDEM_RETURN_IF_ERROR(impl->Listen(host, port));
  std::unique_ptr<FakeChannelServer> server(new FakeChannelServer(std::move(impl)));
  spdlog::info("fake payment channel on {}: fault_rate {}, seed {}, response_delay {}",
               server->address(), options.fault_rate, options.seed,
               absl::FormatDuration(options.response_delay));
  // Announced before serving starts; connections queue in the listen backlog.
  if (options.on_listening) options.on_listening(server->address());
  server->impl_->Serve(options.io_threads);
  return server;
}

uint16_t FakeChannelServer::port() const { return impl_->bound().port(); }

std::string FakeChannelServer::address() const { return FormatAddress(impl_->bound()); }

std::string FakeChannelServer::base_url() const { return absl::StrCat("http://", address()); }

void FakeChannelServer::Stop() { impl_->Stop(); }

absl::Status RunFakeChannel(const FakeChannelOptions& options) {
  // Installed before the address is announced, so a signal sent right after the
  // announcement is handled.
  asio::io_context signal_ioc;
  asio::signal_set signals(signal_ioc);
  beast::error_code ec;
  signals.add(SIGINT, ec);
  if (!ec) signals.add(SIGTERM, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot handle SIGINT/SIGTERM: ", ec.message()));

  FakeChannelOptions run_options = options;
  if (!run_options.on_listening) {
    run_options.on_listening = [](const std::string& address) {
      std::printf("listening on %s\n", address.c_str());
      std::fflush(stdout);
    };
  }
  IDEM_ASSIGN_OR_RETURN(std::unique_ptr<FakeChannelServer> server,
                        FakeChannelServer::Start(std::move(run_options)));
  signals.async_wait([](const beast::error_code& ec, int signo) {
    if (!ec) spdlog::info("signal {}: stopping", signo);
  });
  signal_ioc.run();
  server->Stop();
  spdlog::info("stopped");
  return absl::OkStatus();
}

}  // namespace idem::refund
