// The console's sessions, login and the frame every page shares (console.h); the
// record pages are console_records.cc.
#include "http/api/console.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/absl_compat.h"
#include "core/tokens.h"
#include "http/api/console_html.h"
#include "http/server/problem.h"
#include "idem/fingerprint.h"
#include "spdlog/spdlog.h"

namespace idem::http {
namespace {

constexpr std::string_view kSessionCookie = "idem_console";
constexpr std::string_view kLoginCookie = "idem_console_login";

// Nothing is loaded from elsewhere, no inline script or style runs, no page can be
// framed, and forms post only back here.
constexpr std::string_view kSecurityPolicy =
    "default-src 'none'; style-src 'self'; img-src 'self'; script-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

constexpr std::string_view kStylesheet = R"css(
body { font: 14px/1.45 system-ui, sans-serif; margin: 0; color: #1d2330; background: #f6f7f9; }
header { background: #1d2330; color: #fff; padding: 8px 16px; display: flex; gap: 16px; align-items: center; }
header a { color: #cfd8ff; text-decoration: none; }
header .who { margin-left: auto; }
header form { display: inline; margin: 0; }
main { padding: 16px; max-width: 1200px; }
h1 { font-size: 20px; margin: 4px 0 12px; }
table { border-collapse: collapse; background: #fff; }
th, td { border: 1px solid #d9dde5; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #eef0f4; }
td.key, pre { font-family: ui-monospace, monospace; white-space: pre-wrap; word-break: break-all; }
pre { background: #fff; border: 1px solid #d9dde5; padding: 8px; max-height: 480px; overflow: auto; }
form.search { display: flex; flex-wrap: wrap; gap: 8px; align-items: end; margin-bottom: 12px; }
form.search label { display: flex; flex-direction: column; font-size: 12px; color: #555; }
.done { color: #176b2c; background: #eaf7ee; border: 1px solid #b6e3c3; padding: 6px 10px; }
section.operation { background: #fff; border: 1px solid #d9dde5; padding: 8px 12px; margin: 8px 0; }
form.resolve { display: flex; gap: 8px; align-items: end; margin-top: 8px; }
.charts { display: flex; flex-wrap: wrap; gap: 12px; }
figure.chart { margin: 0; }
figure.chart figcaption { font-size: 12px; color: #555; }
.late { color: #a11; font-weight: bold; }
.error { color: #a11; background: #fdecec; border: 1px solid #f3b6b6; padding: 6px 10px; }
.note { color: #555; }
.state-PROCESSING { color: #8a5a00; } .state-SUCCEEDED { color: #176b2c; } .state-FAILED { color: #a11; }
)css";

// A new random token, or "" when the system's random source fails.
std::string RandomToken() {
  std::string token;
  return NewToken(&token) ? token : "";
}

std::string Cookie(std::string_view name, std::string_view value, absl::Duration max_age) {
  return absl::StrCat(AV(name), "=", AV(value), "; Path=/console; HttpOnly; SameSite=Strict; Max-Age=",
                      absl::ToInt64Seconds(max_age));
}

HttpResponse NotFound() {
  return console::HtmlResponse(
      404, console::Page("Not found", "", "",
                         "<h1>Not found</h1><p>No console page here. <a href=\"/console/records\">"
                         "Find records</a></p>"));
}

std::string LoginForm(std::string_view csrf, std::string_view error) {
  std::string body = "<h1>Sign in</h1>";
  if (!error.empty()) absl::StrAppend(&body, "<p class=\"error\" id=\"error\">", Html(error), "</p>");
  absl::StrAppend(&body,
                  "<form method=\"post\" action=\"/console/login\" class=\"search\" id=\"login\">"
                  "<input type=\"hidden\" name=\"csrf\" value=\"", Html(csrf), "\">"
                  "<label>Admin<input name=\"name\" autocomplete=\"username\" required></label>"
                  "<label>Token<input name=\"token\" type=\"password\" "
                  "autocomplete=\"current-password\" required></label>"
                  "<button type=\"submit\">Sign in</button></form>"
                  "<p class=\"note\">An admin and its token are configured with "
                  "<code>--console-admin</code> or <code>--console-admins-file</code>; "
                  "<code>idem token new</code> makes a token and its hash.</p>");
  return body;
}

}  // namespace

namespace console {

std::string Page(std::string_view title, std::string_view caller_name, std::string_view csrf,
                 std::string_view body) {
  std::string out;
  out.reserve(body.size() + 1024);
  absl::StrAppend(&out,
                  "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
                  "<meta name=\"viewport\" content=\"width=device-width\">"
                  "<link rel=\"stylesheet\" href=\"/console/static/console.css\"><title>",
                  Html(title), " · idem console</title></head><body><header><strong>idem</strong>");
  if (!caller_name.empty()) {
    absl::StrAppend(&out, "<a href=\"/console/records\">Records</a>",
                    "<a href=\"/console/stuck\" id=\"nav-stuck\">Stuck</a>",
                    "<a href=\"/console/recon\" id=\"nav-recon\">Recon</a>",
                    "<a href=\"/console/health\" id=\"nav-health\">Health</a><span class=\"who\">",
                    Html(caller_name),
                    "</span><form method=\"post\" action=\"/console/logout\">"
                    "<input type=\"hidden\" name=\"csrf\" value=\"",
                    Html(csrf), "\"><button type=\"submit\" id=\"logout\">Sign out</button></form>");
  }
  absl::StrAppend(&out, "</header><main>", AV(body), "</main></body></html>");
  return out;
}

HttpResponse HtmlResponse(int status, std::string html) {
  HttpResponse r;
  r.status = status;
  r.content_type = "text/html; charset=utf-8";
  r.body = std::move(html);
  r.headers.emplace_back("Content-Security-Policy", std::string(kSecurityPolicy));
  r.headers.emplace_back("X-Content-Type-Options", "nosniff");
  r.headers.emplace_back("X-Frame-Options", "DENY");
  r.headers.emplace_back("Referrer-Policy", "no-referrer");
  r.headers.emplace_back("Cache-Control", "no-store");
  return r;
}

HttpResponse Redirect(std::string_view location) {
  HttpResponse r = HtmlResponse(303, "");
  r.content_type = "";
  r.headers.emplace_back("Location", std::string(location));
  return r;
}

std::string When(absl::Time t) {
  if (t == absl::InfiniteFuture()) return "never";
  if (t == absl::InfinitePast()) return "—";
  return absl::FormatTime("%Y-%m-%d %H:%M:%E3S UTC", t, absl::UTCTimeZone());
}

std::string RecordLink(const Record& r) {
  return absl::StrCat("/console/record?tenant=", UrlEncode(r.tenant), "&amp;key=", UrlEncode(r.key));
}

std::string Field(const std::map<std::string, std::string, std::less<>>& form,
                  std::string_view name) {
  auto it = form.find(name);
  return it == form.end() ? std::string() : it->second;
}

std::string Note(std::string note) {
  while (!note.empty() && (note.back() == ' ' || note.back() == '\n' || note.back() == '\r' ||
                           note.back() == '\t')) {
    note.pop_back();
  }
  return note;
}

int StatusOf(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kNotFound: return 404;
    case absl::StatusCode::kFailedPrecondition: return 409;
    case absl::StatusCode::kInvalidArgument: return 400;
    default: return 503;
  }
}

HttpResponse Refused(int status, std::string_view title, std::string_view caller_name,
                     std::string_view csrf, std::string_view why, std::string_view back_href,
                     std::string_view back_text) {
  return HtmlResponse(status, Page(title, caller_name, csrf,
                                   absl::StrCat("<h1>", Html(title), "</h1><p class=\"error\" id=\"error\">",
                                                Html(why), "</p><p><a href=\"", AV(back_href), "\">",
                                                Html(back_text), "</a></p>")));
}

}  // namespace console

Console::Console(Store& store, ConsoleOptions options)
    : store_(store), options_(std::move(options)) {}

const ConsoleAdmin* Console::FindAdmin(std::string_view name, std::string_view token) const {
  const std::string digest = Fingerprint(token);
  const ConsoleAdmin* found = nullptr;
  for (const ConsoleAdmin& admin : options_.admins) {  // every digest compared, in constant time
    if (ConstantTimeEquals(digest, admin.token_sha256) && admin.name == name) found = &admin;
  }
  return found;
}

Console::Caller Console::CallerOf(const HttpRequest& request) {
  Caller caller;
  caller.session = std::string(CookieValue(request.cookie, kSessionCookie));
  if (caller.session.empty()) return caller;
  const absl::Time now = options_.clock->Now();
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(Fingerprint(caller.session));
  if (it == sessions_.end()) return caller;
  Session& s = it->second;
  if (now - s.used > options_.idle_timeout || now - s.started > options_.max_session) {
    sessions_.erase(it);
    return caller;
  }
  s.used = now;
  caller.admin = s.admin;
  caller.csrf = s.csrf;
  return caller;
}

ConsoleAnswer Console::Answer(const HttpRequest& request, std::string_view method,
                              std::string_view path, std::string_view query) {
  try {
    if (path == "/console/static/console.css") {
      if (method != "GET") return {.response = MethodNotAllowed(request.method, "GET")};
      HttpResponse r = console::HtmlResponse(200, std::string(kStylesheet));
      r.content_type = "text/css; charset=utf-8";
      r.headers.back().second = "max-age=3600";  // Cache-Control
      return {.response = std::move(r)};
    }
    if (request.body.size() > kMaxBodyBytes) {
      return {.response = console::HtmlResponse(
                  413, console::Page("Too large", "", "", "<h1>The form is too large</h1>"))};
    }
    if (path == "/console/login") return Login(request, method);
    const Caller caller = CallerOf(request);
    if (caller.admin == nullptr) {
      if (method != "GET") {
        return {.response = console::Refused(403, "Signed out", "", "",
                                             "Your session has ended; nothing was changed.",
                                             "/console/login", "Sign in again")};
      }
      return {.response = console::Redirect("/console/login")};
    }
    ConsoleAnswer answer;
    if (method == "POST") {
      // Every form carries the session's token: a page of another site cannot post here.
      const auto form = ParseForm(request.body);
      const auto csrf = form.find("csrf");
      if (csrf == form.end() || !ConstantTimeEquals(csrf->second, caller.csrf)) {
        answer.response = console::Refused(
            403, "Refused", caller.admin->name, caller.csrf,
            "The form did not carry this session's CSRF token; nothing was changed.",
            "/console/records", "Reload a page and try again");
      } else if (path == "/console/logout") {
        answer = Logout(caller);
      } else if (path == "/console/stuck/resolve") {
        answer = Resolve(caller, request);
      } else if (path == "/console/recon/close") {
        answer = CloseTicket(caller, request);
      } else {
        answer.response = NotFound();
      }
    } else if (method != "GET") {
      answer.response = MethodNotAllowed(request.method, "GET, POST");
    } else if (path == "/console" || path == "/console/") {
      answer.response = console::Redirect("/console/records");
    } else if (path == "/console/records") {
      answer = Records(caller, query);
    } else if (path == "/console/record") {
      answer = OneRecord(caller, query);
    } else if (path == "/console/stuck") {
      answer = Stuck(caller, query);
    } else if (path == "/console/recon") {
      answer = Recon(caller, query);
    } else if (path == "/console/health") {
      answer = Health(caller);
    } else if (path == "/console/logout" || path == "/console/stuck/resolve" ||
               path == "/console/recon/close") {
      answer.response = MethodNotAllowed(request.method, "POST");
    } else {
      answer.response = NotFound();
    }
    answer.who = absl::StrCat("console:", caller.admin->name);
    return answer;
  } catch (const std::exception& e) {
    spdlog::error("console: {} {}: {}", request.method, std::string(path), e.what());
    return {.response = console::HtmlResponse(
                500, console::Page("Error", "", "", "<h1>Internal error</h1><p>It is logged.</p>"))};
  }
}

ConsoleAnswer Console::Login(const HttpRequest& request, std::string_view method) {
  const absl::Duration login_form_age = absl::Minutes(30);
  if (method == "GET") {
    // The form's CSRF token, in a cookie of its own: a login posted from another
    // site carries neither.
    std::string csrf = RandomToken();
    if (csrf.empty()) throw std::runtime_error("the system random source failed");
    HttpResponse r = console::HtmlResponse(200, console::Page("Sign in", "", "", LoginForm(csrf, "")));
    r.headers.emplace_back("Set-Cookie", Cookie(kLoginCookie, csrf, login_form_age));
    return {.response = std::move(r)};
  }
  if (method != "POST") return {.response = MethodNotAllowed(request.method, "GET, POST")};
  const auto form = ParseForm(request.body);
  const std::string_view cookie_csrf = CookieValue(request.cookie, kLoginCookie);
  if (cookie_csrf.empty() || !ConstantTimeEquals(console::Field(form, "csrf"), cookie_csrf)) {
    return {.response = console::Refused(403, "Refused", "", "",
                                         "The login form did not carry its CSRF token.",
                                         "/console/login", "Open the form again")};
  }
  const ConsoleAdmin* admin = FindAdmin(console::Field(form, "name"), console::Field(form, "token"));
  if (admin == nullptr) {
    spdlog::warn("console: failed sign-in (request_id={})", request.request_id);
    HttpResponse r = console::HtmlResponse(
        401, console::Page("Sign in", "", "",
                           LoginForm(cookie_csrf, "Unknown admin, or a wrong token.")));
    return {.response = std::move(r)};
  }
  std::string id = RandomToken();
  std::string csrf = RandomToken();
  if (id.empty() || csrf.empty()) throw std::runtime_error("the system random source failed");
  const absl::Time now = options_.clock->Now();
  {
    absl::MutexLock lock(&mu_);
    if (sessions_.size() >= options_.max_sessions) {  // the one used least recently goes
      auto oldest = std::min_element(sessions_.begin(), sessions_.end(), [](const auto& a, const auto& b) {
        return a.second.used < b.second.used;
      });
      sessions_.erase(oldest);
    }
    sessions_[Fingerprint(id)] = Session{.admin = admin, .csrf = std::move(csrf), .started = now, .used = now};
  }
  spdlog::info("console: {} signed in{}", admin->name,
               admin->tenant.empty() ? std::string() : absl::StrCat(" (tenant ", admin->tenant, ")"));
  HttpResponse r = console::Redirect("/console/records");
  r.headers.emplace_back("Set-Cookie", Cookie(kSessionCookie, id, options_.max_session));
  r.headers.emplace_back("Set-Cookie", Cookie(kLoginCookie, "", absl::ZeroDuration()));
  return {.response = std::move(r), .who = absl::StrCat("console:", admin->name)};
}

ConsoleAnswer Console::Logout(const Caller& caller) {
  {
    absl::MutexLock lock(&mu_);
    sessions_.erase(Fingerprint(caller.session));
  }
  spdlog::info("console: {} signed out", caller.admin->name);
  HttpResponse r = console::Redirect("/console/login");
  r.headers.emplace_back("Set-Cookie", Cookie(kSessionCookie, "", absl::ZeroDuration()));
  return {.response = std::move(r)};
}

}  // namespace idem::http
