#include "http/server/metrics_endpoint.h"

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/absl_compat.h"
#include "http/server/problem.h"

namespace idem::http {
namespace {

Reply EndpointReply(Route route, HttpResponse response) {
  Reply r;
  r.response = std::move(response);
  r.route = route;
  return r;
}

Reply NotFound(std::string_view target) {
  return EndpointReply(Route::kOther,
                       MakeProblem(404, "", "",
                                   absl::StrCat("no such path here: ", AV(target.substr(0, 200)),
                                                " (this listener serves GET /metrics only)")));
}

// A request to the endpoint, its path found once.
class MetricsCall final : public Handler::Call {
 public:
  MetricsCall(Metrics& metrics, HttpRequest request)
      : Call(std::move(request)),
        metrics_(metrics),
        path_(std::string_view(request_.target).substr(0, request_.target.find('?'))) {}

  std::optional<Reply> BeforeBody() const override {
    if (path_ != "/metrics") return NotFound(path_);
    return EndpointReply(Route::kMetrics, MethodNotAllowed("a request with a body", "GET"));
  }

  Reply Answer() override {
    if (path_ != "/metrics") return NotFound(path_);
    if (request_.method != "GET" && request_.method != "HEAD") {
      return EndpointReply(Route::kMetrics, MethodNotAllowed(request_.method, "GET"));
    }
    HttpResponse r;
    r.content_type = "text/plain; version=0.0.4; charset=utf-8";
    r.body = metrics_.Render();
    return EndpointReply(Route::kMetrics, std::move(r));
  }

 private:
  Metrics& metrics_;
  const std::string_view path_;  // in request_.target, which does not move
};

}  // namespace

std::unique_ptr<Handler::Call> MetricsEndpoint::Begin(HttpRequest request) {
  return std::make_unique<MetricsCall>(metrics_, std::move(request));
}

}  // namespace idem::http
