#include "testing/browser.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "gtest/gtest.h"

namespace idem::testing {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// Events nobody waits for (console messages, execution contexts) are dropped oldest
// first past this many, so a long test does not grow the queue without bound.
constexpr size_t kMaxQueuedEvents = 10000;

std::string Abbrev(const std::string& text) {
  return text.size() <= 160 ? text : text.substr(0, 160) + "...";
}

// A selector or value as a JavaScript string literal (JSON strings are valid JS).
std::string JsString(const std::string& text) {
  return json(text).dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string StderrTail(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string all = ss.str();
  return all.size() <= 4000 ? all : "..." + all.substr(all.size() - 4000);
}

// How `pid` ended ("" if it has not by `deadline`), without reaping it: its zombie
// keeps the id, and so its process group's id, from being reused while we may still
// signal the group.
std::string ExitStatus(pid_t pid, Clock::time_point deadline) {
  for (;;) {
    siginfo_t info{};
    if (waitid(P_PID, pid, &info, WEXITED | WNOHANG | WNOWAIT) != 0) return "unknown";
    if (info.si_pid == pid) {
      return (info.si_code == CLD_EXITED ? "exited with status " : "was killed by signal ") +
             std::to_string(info.si_status);
    }
    if (Clock::now() >= deadline) return "";
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace

std::string ArtifactDir(const std::string& test_name) {
  const char* env = std::getenv("IDEM_TEST_ARTIFACTS");
  const std::filesystem::path base = env != nullptr && *env
                                         ? std::filesystem::path(env)
                                         : std::filesystem::current_path() / "test-artifacts";
  const std::filesystem::path dir = base / test_name;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  return dir.string();
}

Browser::Browser(std::string chromium_path, std::string profile_dir)
    : chromium_path_(std::move(chromium_path)), profile_dir_(std::move(profile_dir)) {
  if (chromium_path_.empty()) {
    error_ =
        "chromium is not installed (CMake found neither chromium nor chromium-browser): the "
        "browser tests need Debian's chromium package; run scripts/deps.sh (it installs it "
        "with the test packages), then rebuild";
    return;
  }
  std::error_code ec;
  std::filesystem::create_directories(profile_dir_, ec);
  struct sigaction old {};
  if (sigaction(SIGPIPE, nullptr, &old) == 0 && old.sa_handler == SIG_DFL) {
    signal(SIGPIPE, SIG_IGN);
  }
  std::vector<std::string> args = {chromium_path_, "--user-data-dir=" + profile_dir_};
  for (const char* flag :
       {"--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
        "--no-default-browser-check", "--disable-dev-shm-usage", "--hide-scrollbars",
        "--remote-debugging-pipe", "--window-size=1200,900", "about:blank"}) {
    args.push_back(flag);
  }
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const std::string err_path = profile_dir_ + "/chromium.stderr";
  int to[2], from[2];
  if (pipe2(to, O_CLOEXEC) != 0 || pipe2(from, O_CLOEXEC) != 0) {
    error_ = std::string("pipe: ") + std::strerror(errno);
    return;
  }
  pid_ = fork();
  if (pid_ == 0) {
    // Only async-signal-safe calls here (the test may have threads). The pipe ends go
    // above 10 first so that placing them at 3 and 4 cannot overwrite one another.
    setpgid(0, 0);
    const int r = fcntl(to[0], F_DUPFD, 10);
    const int w = fcntl(from[1], F_DUPFD, 10);
    const int in = open("/dev/null", O_RDONLY);
    const int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (r < 0 || w < 0 || in < 0 || err < 0) _exit(127);
    dup2(in, 0);
    dup2(err, 1);
    dup2(err, 2);
    dup2(r, 3);
    dup2(w, 4);
    close_range(5, ~0U, 0);
    execv(argv[0], argv.data());
    static const char kMessage[] = "exec of chromium failed\n";
    (void)!write(2, kMessage, sizeof kMessage - 1);
    _exit(127);
  }
  close(to[0]);
  close(from[1]);
  to_browser_ = to[1];
  from_browser_ = from[0];
  if (pid_ < 0) {
    error_ = std::string("fork: ") + std::strerror(errno);
    return;
  }
  // The tab: a target of its own, attached with a flat session so that its commands
  // go over the same pipe with its sessionId.
  std::string err;
  const json target = Send("Target.createTarget", {{"url", "about:blank"}}, &err, true);
  if (err.empty()) {
    frame_id_ = target.value("targetId", "");  // a tab's main frame has the tab's id
    const json attached =
        Send("Target.attachToTarget", {{"targetId", frame_id_}, {"flatten", true}}, &err, true);
    if (err.empty()) session_id_ = attached.value("sessionId", "");
  }
  for (const auto& [method, params] : {std::pair<const char*, json>{"Page.enable", json::object()},
                                       {"Runtime.enable", json::object()},
                                       {"Page.setLifecycleEventsEnabled", {{"enabled", true}}}}) {
    if (err.empty()) Send(method, params, &err);
  }
  if (!err.empty()) Died("starting chromium: " + err);
}

Browser::~Browser() {
  if (pid_ > 0 && ok()) {
    // A graceful close lets chromium end its renderers; the signals below are for a
    // chromium that does not answer.
    std::string err;
    Send("Browser.close", json::object(), &err, true);
  }
  if (to_browser_ >= 0) close(to_browser_);
  if (from_browser_ >= 0) close(from_browser_);
  if (pid_ <= 0) return;
  if (ExitStatus(pid_, Clock::now() + std::chrono::seconds(5)).empty()) {
    kill(-pid_, SIGTERM);
    ExitStatus(pid_, Clock::now() + std::chrono::seconds(5));
  }
  kill(-pid_, SIGKILL);  // whatever is left of its process group
  waitpid(pid_, nullptr, 0);
}

void Browser::Died(const std::string& why) {
  if (!error_.empty()) return;  // the first cause is the one to show
  error_ = why;
  // A closed pipe means chromium is exiting: give it a moment to say how.
  const std::string status =
      pid_ > 0 ? ExitStatus(pid_, Clock::now() + std::chrono::seconds(2)) : "";
  if (!status.empty()) error_ += "; chromium " + status;
  const std::string path = profile_dir_ + "/chromium.stderr";
  error_ += "; the end of its stderr (" + path + "):\n" + StderrTail(path);
}

bool Browser::Pump(std::chrono::milliseconds wait) {
  if (!ok()) return false;
  pollfd p{from_browser_, POLLIN, 0};
  const int ready = poll(&p, 1, static_cast<int>(std::max<int64_t>(0, wait.count())));
  if (ready == 0 || (ready < 0 && errno == EINTR)) return true;
  if (ready < 0) {
    Died(std::string("poll: ") + std::strerror(errno));
    return false;
  }
  char buf[1 << 16];
  const ssize_t n = read(from_browser_, buf, sizeof buf);
  if (n < 0 && errno == EINTR) return true;
  if (n <= 0) {
    Died(n == 0 ? "chromium closed its DevTools pipe"
                : std::string("reading chromium's DevTools pipe: ") + std::strerror(errno));
    return false;
  }
  // Messages end with NUL; only the bytes just read are searched for it (a
  // screenshot's reply is megabytes).
  size_t scan = read_buffer_.size();
  read_buffer_.append(buf, static_cast<size_t>(n));
  size_t begin = 0;
  for (size_t end; (end = read_buffer_.find('\0', scan)) != std::string::npos;
       begin = scan = end + 1) {
    json message =
        json::parse(read_buffer_.begin() + static_cast<std::ptrdiff_t>(begin),
                    read_buffer_.begin() + static_cast<std::ptrdiff_t>(end), nullptr, false);
    if (message.is_discarded()) continue;
    if (message.contains("id")) {
      replies_.push_back(std::move(message));
    } else {
      events_.push_back(std::move(message));
      if (events_.size() > kMaxQueuedEvents) {
        events_.pop_front();
        ++dropped_events_;
      }
    }
  }
  read_buffer_.erase(0, begin);
  return true;
}

json Browser::Send(const std::string& method, const json& params, std::string* error,
                   bool to_browser) {
  error->clear();
  if (!ok()) {
    *error = method + ": " + error_;
    return nullptr;
  }
  const int id = next_id_++;
  json message = {{"id", id}, {"method", method}, {"params", params}};
  if (!to_browser) message["sessionId"] = session_id_;
  std::string out = message.dump(-1, ' ', false, json::error_handler_t::replace);
  out.push_back('\0');
  for (size_t done = 0; done < out.size();) {
    const ssize_t n = write(to_browser_, out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      Died(std::string("writing to chromium's DevTools pipe: ") + std::strerror(errno));
      *error = method + ": " + error_;
      return nullptr;
    }
    done += static_cast<size_t>(n);
  }
  const auto deadline = Clock::now() + timeout_;
  for (;;) {
    while (!replies_.empty()) {
      json reply = std::move(replies_.front());
      replies_.pop_front();
      if (reply.value("id", 0) != id) continue;  // the late reply of a command that timed out
      if (reply.contains("error")) {
        *error = method + ": " + reply["error"].value("message", reply["error"].dump());
        return nullptr;
      }
      return reply.value("result", json::object());
    }
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      *error =
          method + ": no reply from chromium within " + std::to_string(timeout_.count()) + " ms";
      return nullptr;
    }
    if (!Pump(left)) {
      *error = method + ": " + error_;
      return nullptr;
    }
  }
}

json Browser::WaitForEvent(const std::function<bool(const json&)>& match,
                           Clock::time_point deadline) {
  // Each event is looked at once: `i` is the first one not yet looked at.
  size_t i = 0;
  for (;;) {
    for (; i < events_.size(); ++i) {
      if (match(events_[i])) {
        json event = std::move(events_[i]);
        events_.erase(events_.begin() + static_cast<std::ptrdiff_t>(i));
        return event;
      }
    }
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    const uint64_t dropped = dropped_events_;
    if (left.count() <= 0 || !Pump(left)) return nullptr;
    i -= std::min<uint64_t>(i, dropped_events_ - dropped);
  }
}

std::string Browser::WaitForLoad(const std::string& loader_id, const std::string& not_loader_id,
                                 const std::string& what) {
  const json event = WaitForEvent(
      [&](const json& e) {
        if (e.value("sessionId", "") != session_id_) return false;
        const std::string method = e.value("method", "");
        if (method == "Inspector.targetCrashed") return true;
        if (method != "Page.lifecycleEvent") return false;
        const json p = e.value("params", json::object());
        const std::string loader = p.value("loaderId", "");
        return p.value("frameId", "") == frame_id_ && p.value("name", "") == "load" &&
               (loader_id.empty() ? loader != not_loader_id : loader == loader_id);
      },
      Clock::now() + timeout_);
  if (!ok()) return what + ": " + error_;
  if (event.is_null()) {
    std::string err;
    const json href = Evaluate("location.href", &err);
    return what + ": no new page loaded within " + std::to_string(timeout_.count()) +
           " ms (the tab is at " + (err.empty() ? href.dump() : err) + ")";
  }
  if (event.value("method", "") == "Inspector.targetCrashed") return what + ": the tab crashed";
  std::string err;
  const json href = Evaluate("location.href", &err);
  if (!err.empty()) return what + ": " + err;
  if (href.is_string() && href.get<std::string>().rfind("chrome-error:", 0) == 0) {
    return what + ": chromium showed its error page (the server could not be reached?)";
  }
  return "";
}

std::string Browser::Navigate(const std::string& url) {
  std::string err;
  events_.clear();
  const json r = Send("Page.navigate", {{"url", url}}, &err);
  if (!err.empty()) return "navigating to " + url + ": " + err;
  if (!r.value("errorText", "").empty()) {
    return "navigating to " + url + ": " + r.value("errorText", "");
  }
  if (!r.contains("loaderId")) return "";  // same document: nothing new to load
  return WaitForLoad(r.value("loaderId", ""), "", "loading " + url);
}

json Browser::OnElement(const std::string& css_selector, const std::string& body,
                        const char* call) {
  std::string err;
  const json r = Evaluate("(() => { const e = document.querySelector(" + JsString(css_selector) +
                              "); if (!e) return {found: false}; return {found: true, value: "
                              "(() => {" +
                              body + "})()}; })()",
                          &err);
  if (err.empty() && !r.value("found", false)) err = "no element matches " + JsString(css_selector);
  if (!err.empty()) {
    ADD_FAILURE() << call << "(" << JsString(css_selector) << "): " << err;
    return nullptr;
  }
  return r.contains("value") ? r["value"] : json();
}

bool Browser::Click(const std::string& css_selector) {
  return OnElement(css_selector, "e.scrollIntoView({block: 'center'}); e.click(); return true;",
                   "Click") == true;
}

std::string Browser::ClickAndWait(const std::string& css_selector) {
  const std::string what = "ClickAndWait(" + JsString(css_selector) + ")";
  std::string err;
  const json tree = Send("Page.getFrameTree", json::object(), &err);
  if (!err.empty()) return what + ": " + err;
  const std::string old_loader =
      tree.value("frameTree", json::object()).value("frame", json::object()).value("loaderId", "");
  events_.clear();
  const json clicked =
      Evaluate("(() => { const e = document.querySelector(" + JsString(css_selector) +
                   "); if (!e) return false; e.scrollIntoView({block: 'center'});"
                   " e.click(); return true; })()",
               &err);
  if (!err.empty()) return what + ": " + err;
  if (clicked != true) return what + ": no element matches";
  return WaitForLoad("", old_loader, what);
}

bool Browser::Fill(const std::string& css_selector, const std::string& value) {
  return OnElement(css_selector,
                   "e.focus(); e.value = " + JsString(value) +
                       "; e.dispatchEvent(new Event('input', {bubbles: true}));"
                       " e.dispatchEvent(new Event('change', {bubbles: true})); return true;",
                   "Fill") == true;
}

json Browser::Evaluate(const std::string& expression, std::string* error) {
  std::string err;
  const json r = Send("Runtime.evaluate",
                      {{"expression", expression},
                       {"returnByValue", true},
                       {"awaitPromise", true},
                       {"userGesture", true}},
                      &err);
  json value;
  if (err.empty() && r.contains("exceptionDetails")) {
    const json& details = r["exceptionDetails"];
    err = details.contains("exception")
              ? details["exception"].value("description", details.value("text", "exception"))
              : details.value("text", "exception");
  } else if (err.empty()) {
    const json result = r.value("result", json::object());
    if (result.contains("value"))
      value = result["value"];
    else if (result.contains("unserializableValue"))
      value = result["unserializableValue"];
  }
  if (error != nullptr) {
    *error = err;
  } else if (!err.empty()) {
    ADD_FAILURE() << "Evaluate(" << Abbrev(expression) << "): " << err;
  }
  return value;
}

std::string Browser::Text(const std::string& css_selector) {
  const json text = OnElement(css_selector, "return e.innerText;", "Text");
  return text.is_string() ? text.get<std::string>() : "";
}

bool Browser::Exists(const std::string& css_selector) {
  return Evaluate("document.querySelector(" + JsString(css_selector) + ") !== null") == true;
}

bool Browser::WaitFor(const std::string& js_condition, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    std::string err;
    if (Evaluate("!!(\n" + js_condition + "\n)", &err) == true) return true;
    if (!ok()) {
      ADD_FAILURE() << "WaitFor(" << Abbrev(js_condition) << "): " << error_;
      return false;
    }
    if (Clock::now() >= deadline) return false;
    // Reading events meanwhile is the pause between polls.
    const auto next = std::min(deadline, Clock::now() + std::chrono::milliseconds(50));
    while (Clock::now() < next &&
           Pump(std::chrono::duration_cast<std::chrono::milliseconds>(next - Clock::now()))) {
    }
  }
}

std::string Browser::Url() {
  const json href = Evaluate("location.href");
  return href.is_string() ? href.get<std::string>() : "";
}

json Browser::Cookies() {
  const std::string url = Url();
  std::string err;
  const json r = Send("Network.getCookies", {{"urls", json::array({url})}}, &err);
  if (!err.empty()) {
    ADD_FAILURE() << "Cookies() at " << url << ": " << err;
    return json::array();
  }
  return r.value("cookies", json::array());
}

bool Browser::Screenshot(const std::string& png_path) {
  std::string err;
  const json r =
      Send("Page.captureScreenshot", {{"format", "png"}, {"captureBeyondViewport", true}}, &err);
  std::string png;
  if (err.empty() && !absl::Base64Unescape(r.value("data", ""), &png)) {
    err = "the screenshot's data is not base64";
  }
  if (err.empty()) {
    std::ofstream out(png_path, std::ios::binary | std::ios::trunc);
    out << png;
    if (!out.good()) err = "cannot write " + png_path;
  }
  if (!err.empty()) ADD_FAILURE() << "Screenshot(" << png_path << "): " << err;
  return err.empty();
}

}  // namespace idem::testing
