#include "chaos/databases.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <pwd.h>
#include <sstream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "testing/wait_until.h"

namespace idem::chaos {
namespace {

constexpr char kPgBin[] = "/usr/lib/postgresql/15/bin";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string Tail(const std::string& text, size_t n = 1500) {
  return text.size() > n ? text.substr(text.size() - n) : text;
}

// Single-quotes `s` for sh.
std::string Quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Runs `command` with sh, its output in `log`; true when it exits 0.
bool Sh(const std::string& command, const std::string& log) {
  return std::system(absl::StrCat(command, " >", Quote(log), " 2>&1").c_str()) == 0;
}

bool Alive(int pid) {
  if (pid <= 0 || kill(pid, 0) != 0) return false;
  // A zombie (killed, not yet reaped by init) is dead for our purposes.
  const std::string stat = ReadFile(absl::StrCat("/proc/", pid, "/stat"));
  const size_t paren = stat.rfind(')');
  return paren == std::string::npos || paren + 2 >= stat.size() || stat[paren + 2] != 'Z';
}

// The OS user owning `path` ("" when it cannot be told).
std::string Owner(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return "";
  const passwd* pw = ::getpwuid(st.st_uid);
  return pw != nullptr ? pw->pw_name : "";
}

}  // namespace

absl::StatusOr<std::unique_ptr<PrivateDatabase>> PrivateDatabase::Start(
    Kind kind, const std::string& services_sh, const std::string& dir) {
  std::unique_ptr<PrivateDatabase> db(new PrivateDatabase(kind, services_sh, dir));
  if (absl::Status s = db->Boot(); !s.ok()) return s;
  return db;
}

absl::Status PrivateDatabase::Boot() {
  std::filesystem::create_directories(std::filesystem::path(dir_).parent_path());
  const bool pg = kind_ == Kind::kPostgres;
  const std::string log = dir_ + ".start.log";
  // Durable: a crash of the server (not of the machine) must lose no acknowledged
  // commit, so PostgreSQL keeps synchronous_commit and MariaDB writes its log at
  // every commit; the throwaway settings of the shared test servers would lose the
  // last commits at `-m immediate` / SIGKILL, which is no fault of idem's.
  if (!Sh(absl::StrCat("IDEM_SERVICES=", pg ? "postgres" : "mysql",
                       " IDEM_SERVICES_DURABLE=1 bash ", Quote(services_sh_), " start ",
                       Quote(dir_)),
          log)) {
    return absl::UnavailableError(absl::StrCat("services.sh could not start ",
                                               pg ? "PostgreSQL" : "MariaDB", ": ",
                                               Tail(ReadFile(log))));
  }
  const std::string env = ReadFile(dir_ + "/env.sh");
  std::string url;
  for (absl::string_view piece : absl::StrSplit(env, '\n')) {
    std::string line(piece);
    const std::string prefix = pg ? "export IDEM_TEST_POSTGRES_" : "export IDEM_TEST_MYSQL_";
    if (!line.starts_with(prefix)) continue;
    line = line.substr(prefix.size());
    if (line.starts_with("URL=")) url = line.substr(4);
    if (line.starts_with("PID=") && !absl::SimpleAtoi(line.substr(4), &pid_)) pid_ = 0;
  }
  // scheme://user:password@127.0.0.1:port/db
  const size_t scheme = url.find("://"), colon = url.find(':', scheme + 3),
               at = url.find('@'), port_colon = url.find(':', at), slash = url.find('/', at);
  if (scheme == std::string::npos || colon == std::string::npos || at == std::string::npos ||
      port_colon == std::string::npos || slash == std::string::npos ||
      !absl::SimpleAtoi(url.substr(port_colon + 1, slash - port_colon - 1), &port_) ||
      pid_ <= 0) {
    return absl::UnavailableError(absl::StrCat(dir_, "/env.sh: no URL and pid for the server"));
  }
  password_ = url.substr(colon + 1, at - colon - 1);
  proxy_ = testing::FaultProxy::Start(port_);
  if (proxy_ == nullptr) return absl::UnavailableError("fault proxy: cannot listen");
  url_ = absl::StrCat(url.substr(0, colon), "@127.0.0.1:", proxy_->port(), url.substr(slash));
  if (!pg) {
    // Its command line, to start it again after a SIGKILL.
    const std::string cmdline = ReadFile(absl::StrCat("/proc/", pid_, "/cmdline"));
    for (absl::string_view arg : absl::StrSplit(cmdline, '\0', absl::SkipEmpty())) {
      restart_argv_.emplace_back(arg);
    }
    if (restart_argv_.empty()) return absl::UnavailableError("mariadbd: no command line");
  }
  return absl::OkStatus();
}

PrivateDatabase::~PrivateDatabase() {
  proxy_.reset();
  // services.sh stop finds the server by the pid files under dir_; a server this
  // object restarted wrote its pid file there as well.
  Sh(absl::StrCat("bash ", Quote(services_sh_), " stop ", Quote(dir_)), dir_ + ".stop.log");
}

absl::Status PrivateDatabase::Crash() {
  if (kind_ == Kind::kPostgres) {
    const std::string data = std::filesystem::canonical(dir_ + "/postgres").string() + "/data";
    const std::string owner = Owner(data);
    const std::string as = getuid() == 0 && !owner.empty() ? "runuser -u " + owner + " -- " : "";
    if (!Sh(absl::StrCat(as, kPgBin, "/pg_ctl stop -m immediate -w -D ", Quote(data)),
            dir_ + ".crash.log")) {
      return absl::UnavailableError("pg_ctl stop -m immediate: " + ReadFile(dir_ + ".crash.log"));
    }
    return absl::OkStatus();
  }
  kill(pid_, SIGKILL);
  testing::WaitUntil([&] { return !Alive(pid_); }, std::chrono::seconds(5));
  if (Alive(pid_)) return absl::UnavailableError("mariadbd survived SIGKILL for 5 s");
  return absl::OkStatus();
}

absl::Status PrivateDatabase::Restart() {
  if (kind_ == Kind::kPostgres) {
    const std::string base = std::filesystem::canonical(dir_ + "/postgres").string();
    const std::string owner = Owner(base + "/data");
    const std::string as = getuid() == 0 && !owner.empty() ? "runuser -u " + owner + " -- " : "";
    // `restart` of a stopped server starts it with the options of its last start
    // (postmaster.opts): the port and settings services.sh chose.
    if (!Sh(absl::StrCat(as, kPgBin, "/pg_ctl restart -w -t 60 -D ", Quote(base + "/data"),
                         " -l ", Quote(base + "/postgres.log")),
            dir_ + ".restart.log")) {
      return absl::UnavailableError("pg_ctl restart: " +
                                    Tail(ReadFile(dir_ + ".restart.log")));
    }
    const std::string pidfile = ReadFile(base + "/data/postmaster.pid");
    if (!absl::SimpleAtoi(pidfile.substr(0, pidfile.find('\n')), &pid_)) {
      return absl::UnavailableError("postgres: no postmaster.pid after the restart");
    }
    return absl::OkStatus();
  }
  const pid_t child = fork();
  if (child == 0) {
    setsid();
    const int null_fd = ::open("/dev/null", O_RDWR);
    dup2(null_fd, STDIN_FILENO);
    dup2(null_fd, STDOUT_FILENO);
    dup2(null_fd, STDERR_FILENO);
    std::vector<char*> argv;
    for (std::string& a : restart_argv_) argv.push_back(a.data());
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    _exit(127);
  }
  if (child < 0) return absl::UnavailableError("fork failed");
  pid_ = child;
  const std::string ping = absl::StrCat("mariadb-admin --no-defaults --socket=",
                                        Quote(dir_ + "/mysql/mysqld.sock"), " -u ",
                                        getuid() == 0 ? "root" : Quote(getpwuid(getuid())->pw_name),
                                        " ping");
  bool up = false;
  testing::WaitUntil(
      [&] {
        up = Sh(ping, dir_ + ".ping.log");
        return up || !Alive(pid_);
      },
      std::chrono::seconds(30), std::chrono::milliseconds(100));
  if (up) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat("mariadbd did not come back: ",
                                             Tail(ReadFile(dir_ + "/mysql/mariadbd.log"))));
}

std::vector<FaultKind> PrivateDatabase::Faults() {
  using std::chrono::milliseconds;
  using Mode = testing::FaultProxy::Mode;
  const std::string name = kind_ == Kind::kPostgres ? "postgres" : "mariadb";
  std::vector<FaultKind> out;
  out.push_back({.name = "crash " + name,
                 .inject = [this] { return Crash(); },
                 .heal = [this] { return Restart(); },
                 .min_hold = milliseconds(500),
                 .max_hold = milliseconds(2000)});
  const auto mode = [this](Mode m) {
    return [this, m] {
      proxy_->SetMode(m);
      return absl::OkStatus();
    };
  };
  for (const auto& [fault, m] : std::vector<std::pair<std::string, Mode>>{
           {"blackhole", Mode::kBlackhole},
           {"reset", Mode::kReset},
           {"delay", Mode::kDelay},
           {"cut before COMMIT", Mode::kCutBeforeCommit},
           {"cut after COMMIT", Mode::kCutAfterCommit}}) {
    out.push_back({.name = "proxy " + fault,
                   .inject = mode(m),
                   .heal = mode(Mode::kPass),
                   .min_hold = milliseconds(300),
                   .max_hold = milliseconds(1500)});
  }
  proxy_->set_delay(milliseconds(150));
  return out;
}

}  // namespace idem::chaos
