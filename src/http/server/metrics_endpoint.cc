#include "http/server/metrics_endpoint.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/absl_compat.h"
#include "http/server/problem.h"

namespace idem::http {
namespace {

Reply Answer(Route route, HttpResponse response) {
  Reply r;
  r.response = std::move(response);
  r.route = route;
  return r;
}

Reply NotFound(std::string_view target) {
  return Answer(Route::kOther,
                MakeProblem(404, "", "",
                            absl::StrCat("no such path here: ", AV(target.substr(0, 200)),
                                         " (this listener serves GET /metrics only)")));
}

}  // namespace

Reply MetricsEndpoint::Handle(const HttpRequest& request) {
  const std::string_view target = request.target;
  const std::string_view path = target.substr(0, target.find('?'));
  if (path != "/metrics") return NotFound(path);
  if (request.method != "GET" && request.method != "HEAD") {
    return Answer(Route::kMetrics, MethodNotAllowed(request.method, "GET"));
  }
  HttpResponse r;
  r.content_type = "text/plain; version=0.0.4; charset=utf-8";
  r.body = metrics_.Render();
  return Answer(Route::kMetrics, std::move(r));
}

Reply MetricsEndpoint::Poll(const WaitingClaim&) {
  return Answer(Route::kOther, MakeProblem(500, "", "", "nothing waits on this listener"));
}

std::optional<Reply> MetricsEndpoint::BeforeBody(std::string_view target,
                                                 std::string_view) const {
  const std::string_view path = target.substr(0, target.find('?'));
  if (path != "/metrics") return NotFound(path);
  return Answer(Route::kMetrics, MethodNotAllowed("a request with a body", "GET"));
}

}  // namespace idem::http
