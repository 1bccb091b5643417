// The browser test driver (testing/browser.h) against pages of its own (label
// browser): file:// pages for links, forms, waits, screenshots and failures, and a
// small HTTP server on 127.0.0.1 for cookies (chromium keeps none for file://), the
// way a console login sets them: a form POST answered 303 with Set-Cookie.
// chromium comes from scripts/deps.sh (test_pkgs); without it the tests fail and say so.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest-spi.h"
#include "gtest/gtest.h"
#include "testing/browser.h"
#include "testing/temp_dir.h"

#ifndef IDEM_CHROMIUM
#define IDEM_CHROMIUM ""
#endif

namespace idem::testing {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;

std::string TestName() {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return std::string(info->test_suite_name()) + "." + info->name();
}

// An HTTP/1.1 server on 127.0.0.1:<port()> answering each request with
// handler(method, path, body) (a whole response) and closing the connection. One
// thread polls the listener and every connection, so a connection chromium opens
// early and leaves idle (a preconnect) holds up nobody.
class TinyHttpServer {
 public:
  using Handler = std::function<std::string(const std::string& method, const std::string& path,
                                            const std::string& body)>;
  explicit TinyHttpServer(Handler handler) : handler_(std::move(handler)) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        listen(listen_fd_, 16) != 0 ||
        getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0 ||
        pipe2(wake_, O_CLOEXEC) != 0) {
      return;
    }
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { Run(); });
  }
  ~TinyHttpServer() {
    if (thread_.joinable()) {
      (void)!write(wake_[1], "x", 1);
      thread_.join();
    }
    for (int fd : {listen_fd_, wake_[0], wake_[1]}) {
      if (fd >= 0) close(fd);
    }
  }
  int port() const { return port_; }

 private:
  void Run() {
    std::map<int, std::string> requests;  // connection -> bytes read so far
    for (;;) {
      std::vector<pollfd> fds = {{wake_[0], POLLIN, 0}, {listen_fd_, POLLIN, 0}};
      for (const auto& [fd, unused] : requests) fds.push_back({fd, POLLIN, 0});
      if (poll(fds.data(), fds.size(), -1) < 0) continue;
      if (fds[0].revents != 0) break;
      if (fds[1].revents != 0) {
        const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd >= 0) requests[fd];
      }
      for (size_t i = 2; i < fds.size(); ++i) {
        if (fds[i].revents == 0) continue;
        const int fd = fds[i].fd;
        char buf[4096];
        const ssize_t n = read(fd, buf, sizeof buf);
        if (n > 0) requests[fd].append(buf, static_cast<size_t>(n));
        if (n <= 0 || Answer(fd, requests[fd])) {
          close(fd);
          requests.erase(fd);
        }
      }
    }
    for (const auto& [fd, unused] : requests) close(fd);
  }

  // Answers a complete request in `request`; false while it is incomplete.
  bool Answer(int fd, const std::string& request) {
    const size_t head_end = request.find("\r\n\r\n");
    if (head_end == std::string::npos) return false;
    const std::string head = request.substr(0, head_end);
    size_t body_length = 0;
    for (const char* name : {"\r\nContent-Length:", "\r\ncontent-length:"}) {
      const size_t at = head.find(name);
      if (at != std::string::npos) body_length = std::stoul(head.substr(at + strlen(name)));
    }
    if (request.size() < head_end + 4 + body_length) return false;
    const size_t space1 = head.find(' ');
    const size_t space2 = head.find(' ', space1 + 1);
    const std::string response =
        handler_(head.substr(0, space1), head.substr(space1 + 1, space2 - space1 - 1),
                 request.substr(head_end + 4, body_length));
    for (size_t done = 0; done < response.size();) {
      const ssize_t n = write(fd, response.data() + done, response.size() - done);
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    return true;
  }

  Handler handler_;
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};
  int port_ = 0;
  std::thread thread_;
};

std::string HttpResponse(const std::string& status, const std::string& headers,
                         const std::string& body) {
  return "HTTP/1.1 " + status + "\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\nConnection: close\r\n" + headers + "\r\n" + body;
}

TEST(Browser, FollowsLinksSubmitsFormsAndTakesScreenshots) {
  TempDir dir;
  std::ofstream(dir.file("form.html"))
      << "<!doctype html><meta charset=utf-8><title>Form</title><h1 id=greeting>Hello, tester</h1>"
         "<form action=done.html method=get><input id=q name=q>"
         "<button id=go type=submit>Go</button></form><a id=link href=other.html>other</a>";
  std::ofstream(dir.file("done.html"))
      << "<!doctype html><meta charset=utf-8><title>Done</title><p id=echo></p><script>"
         "document.getElementById('echo').textContent ="
         " new URLSearchParams(location.search).get('q');</script>";
  std::ofstream(dir.file("other.html")) << "<!doctype html><title>Other</title><p>other page</p>";
  Browser b(IDEM_CHROMIUM, dir.file("profile"));
  ASSERT_TRUE(b.ok()) << b.error();

  ASSERT_EQ(b.Navigate("file://" + dir.file("form.html")), "");
  EXPECT_EQ(b.Evaluate("document.title"), "Form");
  EXPECT_EQ(b.Text("#greeting"), "Hello, tester");
  EXPECT_EQ(b.Url(), "file://" + dir.file("form.html"));
  EXPECT_TRUE(b.Exists("#q"));
  EXPECT_FALSE(b.Exists("#missing"));
  const std::string png = ArtifactDir(TestName()) + "/form.png";
  ASSERT_TRUE(b.Screenshot(png));
  std::ifstream in(png, std::ios::binary);
  std::string magic(8, '\0');
  in.read(magic.data(), 8);
  EXPECT_EQ(magic, "\x89PNG\r\n\x1a\n");

  ASSERT_TRUE(b.Fill("#q", "a b&c \"é\""));
  ASSERT_EQ(b.ClickAndWait("#go"), "");
  EXPECT_EQ(b.Evaluate("document.title"), "Done");
  EXPECT_EQ(b.Text("#echo"), "a b&c \"é\"");
  EXPECT_THAT(b.Url(), HasSubstr("done.html?q=a+b%26c"));

  ASSERT_EQ(b.Navigate("file://" + dir.file("form.html")), "");
  ASSERT_EQ(b.ClickAndWait("#link"), "");
  EXPECT_EQ(b.Evaluate("document.title"), "Other");
  // A fragment is the same document: nothing new to wait for.
  ASSERT_EQ(b.Navigate("file://" + dir.file("other.html") + "#top"), "");
  EXPECT_EQ(b.Evaluate("location.hash"), "#top");
}

TEST(Browser, EvaluatesAndWaits) {
  TempDir dir;
  std::ofstream(dir.file("late.html"))
      << "<!doctype html><title>Late</title><div id=box></div><script>setTimeout(() => {"
         " document.getElementById('box').innerHTML = '<p id=late>ready</p>'; }, 300);</script>";
  Browser b(IDEM_CHROMIUM, dir.file("profile"));
  ASSERT_TRUE(b.ok()) << b.error();
  ASSERT_EQ(b.Navigate("file://" + dir.file("late.html")), "");
  // #late is not there yet: the condition throws, which counts as false until it holds.
  EXPECT_TRUE(b.WaitFor("document.querySelector('#late').textContent === 'ready'"));
  EXPECT_FALSE(b.WaitFor("document.title === 'never'", std::chrono::milliseconds(200)));
  EXPECT_EQ(b.Evaluate("new Promise(r => setTimeout(() => r({n: 2, s: ['x']}), 10))"),
            json::parse(R"({"n": 2, "s": ["x"]})"));
  EXPECT_EQ(b.Evaluate("undefined"), json());
  EXPECT_EQ(b.Evaluate("1 + 1"), 2);
}

TEST(Browser, ReportsWhatFailed) {
  TempDir dir;
  std::ofstream(dir.file("page.html")) << "<!doctype html><title>Page</title><p>text</p>";
  Browser b(IDEM_CHROMIUM, dir.file("profile"));
  ASSERT_TRUE(b.ok()) << b.error();
  EXPECT_THAT(b.Navigate("file://" + dir.file("missing.html")), HasSubstr("ERR_FILE_NOT_FOUND"));
  ASSERT_EQ(b.Navigate("file://" + dir.file("page.html")), "");
  std::string err;
  EXPECT_EQ(b.Evaluate("throw new Error('boom')", &err), json());
  EXPECT_THAT(err, HasSubstr("Error: boom"));
  EXPECT_EQ(b.Evaluate("Promise.reject(new TypeError('nope'))", &err), json());
  EXPECT_THAT(err, HasSubstr("TypeError: nope"));
  EXPECT_NONFATAL_FAILURE(b.Evaluate("no_such_name"), "ReferenceError: no_such_name");
  EXPECT_NONFATAL_FAILURE(b.Text("#absent"), "Text(\"#absent\"): no element matches");
  EXPECT_NONFATAL_FAILURE(b.Click("#absent"), "Click(\"#absent\"): no element matches");
  EXPECT_NONFATAL_FAILURE(b.Fill("#absent", "x"), "Fill(\"#absent\"): no element matches");
  EXPECT_THAT(b.ClickAndWait("#absent"), HasSubstr("no element matches"));
  // A click that loads nothing: the wait ends at the timeout and says where the tab is.
  b.set_timeout(std::chrono::milliseconds(500));
  EXPECT_THAT(b.ClickAndWait("p"), HasSubstr("no new page loaded within 500 ms"));
  // A port nobody listens on (one the kernel just gave out and took back).
  const int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  ASSERT_EQ(bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(getsockname(s, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  close(s);
  b.set_timeout(std::chrono::seconds(15));
  EXPECT_THAT(b.Navigate("http://127.0.0.1:" + std::to_string(ntohs(addr.sin_port)) + "/"),
              HasSubstr("ERR_CONNECTION_REFUSED"));

  // A browser that exits at once: its exit status and stderr are in the error.
  Browser gone("/bin/false", dir.file("profile2"));
  EXPECT_FALSE(gone.ok());
  EXPECT_THAT(gone.error(), HasSubstr("chromium exited with status 1"));
  EXPECT_THAT(gone.error(), HasSubstr("chromium.stderr"));
  EXPECT_THAT(gone.Evaluate("1", &err), json());
  EXPECT_THAT(err, HasSubstr("Runtime.evaluate: "));
  EXPECT_THAT(err, HasSubstr("chromium exited with status 1"));

  Browser none("", dir.file("profile3"));
  EXPECT_FALSE(none.ok());
  EXPECT_THAT(none.error(), HasSubstr("scripts/deps.sh"));
  EXPECT_THAT(none.Navigate("about:blank"), HasSubstr("scripts/deps.sh"));
}

TEST(Browser, ReadsCookiesALoginSets) {
  TinyHttpServer server([](const std::string& method, const std::string& path,
                           const std::string& body) {
    if (method == "GET" && path == "/login") {
      return HttpResponse("200 OK", "",
                          "<!doctype html><title>Login</title><form method=post action=/login>"
                          "<input id=user name=user><button type=submit>Log in</button></form>");
    }
    if (method == "POST" && path == "/login") {
      return HttpResponse("303 See Other",
                          "Location: /home\r\nSet-Cookie: sid=s3cret-" + body.substr(5) +
                              "; Path=/; HttpOnly; SameSite=Strict\r\n",
                          "");
    }
    if (method == "GET" && path == "/home") {
      return HttpResponse("200 OK", "",
                          "<!doctype html><title>Home</title><p id=who>in</p>"
                          "<script>document.cookie = 'theme=dark; SameSite=Lax';</script>");
    }
    return HttpResponse("404 Not Found", "", "<title>Not found</title>");
  });
  ASSERT_NE(server.port(), 0);
  const std::string base = "http://127.0.0.1:" + std::to_string(server.port());
  TempDir dir;
  Browser b(IDEM_CHROMIUM, dir.file("profile"));
  ASSERT_TRUE(b.ok()) << b.error();

  ASSERT_EQ(b.Navigate(base + "/login"), "");
  EXPECT_EQ(b.Cookies(), json::array());
  ASSERT_TRUE(b.Fill("#user", "ops"));
  ASSERT_EQ(b.ClickAndWait("button[type=submit]"), "");
  EXPECT_EQ(b.Url(), base + "/home");
  EXPECT_EQ(b.Text("#who"), "in");
  // HttpOnly: the page's script cannot read the session cookie, only its own.
  EXPECT_EQ(b.Evaluate("document.cookie"), "theme=dark");
  std::map<std::string, json> by_name;
  for (const json& c : b.Cookies()) by_name[c.value("name", "")] = c;
  ASSERT_EQ(by_name.size(), 2u) << b.Cookies().dump();
  EXPECT_EQ(by_name["sid"].value("value", ""), "s3cret-ops");
  EXPECT_EQ(by_name["sid"].value("httpOnly", false), true);
  EXPECT_EQ(by_name["sid"].value("sameSite", ""), "Strict");
  EXPECT_EQ(by_name["sid"].value("path", ""), "/");
  EXPECT_EQ(by_name["theme"].value("httpOnly", true), false);
  EXPECT_EQ(by_name["theme"].value("sameSite", ""), "Lax");

  // An HTTP error status is a page, not a navigation failure.
  ASSERT_EQ(b.Navigate(base + "/nowhere"), "");
  EXPECT_EQ(b.Evaluate("document.title"), "Not found");
}

}  // namespace
}  // namespace idem::testing
