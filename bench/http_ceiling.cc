// http_ceiling: the fastest answer HTTP/1.1 over Boost.Beast gives on this machine,
// for bench/claims.sh: every request, whatever its method or target, gets the same
// small JSON body, with keep-alive, on `--threads` I/O threads. No store, no parse
// of the body beyond Beast's framing: the ceiling idem serve's duplicates are
// measured against. Prints "listening on 127.0.0.1:PORT" first.
//
//   http_ceiling [--threads N]
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "boost/asio/ip/tcp.hpp"
#include "boost/asio/signal_set.hpp"
#include "boost/beast/core.hpp"
#include "boost/beast/http.hpp"

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;

constexpr char kBody[] = R"({"outcome":"replayed","result":{"ok":true}})";

class Session : public std::enable_shared_from_this<Session> {
 public:
  explicit Session(asio::ip::tcp::socket socket) : stream_(std::move(socket)) {}
  void Read() {
    request_ = {};
    bhttp::async_read(stream_, buffer_, request_,
                      [self = shared_from_this()](beast::error_code ec, std::size_t) {
                        if (!ec) self->Write();
                      });
  }

 private:
  void Write() {
    response_ = std::make_shared<bhttp::response<bhttp::string_body>>(bhttp::status::ok,
                                                                      request_.version());
    response_->set(bhttp::field::content_type, "application/json");
    response_->keep_alive(request_.keep_alive());
    response_->body() = kBody;
    response_->prepare_payload();
    bhttp::async_write(stream_, *response_,
                       [self = shared_from_this()](beast::error_code ec, std::size_t) {
                         if (!ec && self->response_->keep_alive()) self->Read();
                       });
  }
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  bhttp::request<bhttp::string_body> request_;
  std::shared_ptr<bhttp::response<bhttp::string_body>> response_;
};

void Accept(asio::ip::tcp::acceptor& acceptor) {
  acceptor.async_accept([&acceptor](beast::error_code ec, asio::ip::tcp::socket socket) {
    if (!ec) {
      socket.set_option(asio::ip::tcp::no_delay(true));
      std::make_shared<Session>(std::move(socket))->Read();
    }
    Accept(acceptor);
  });
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--threads") == 0) threads = std::max(1, std::atoi(argv[i + 1]));
  }
  asio::io_context ioc(threads);
  asio::ip::tcp::acceptor acceptor(ioc, {asio::ip::make_address("127.0.0.1"), 0});
  std::printf("listening on 127.0.0.1:%u\n", static_cast<unsigned>(acceptor.local_endpoint().port()));
  std::fflush(stdout);
  Accept(acceptor);
  asio::signal_set signals(ioc, SIGINT, SIGTERM);
  signals.async_wait([&](beast::error_code, int) { ioc.stop(); });
  std::vector<std::thread> pool;
  for (int i = 1; i < threads; ++i) pool.emplace_back([&] { ioc.run(); });
  ioc.run();
  for (auto& t : pool) t.join();
}
