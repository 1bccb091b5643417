// Runs the built `idem` binary (path in $IDEM_BIN) and checks exit statuses and
// output exactly (exit 0 success, 1 operational failure, 2 bad usage, one
// `idem: …` line on stderr).
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "idem/idem.h"
#include "nlohmann/json.hpp"
#include "testing/idem_process.h"
#include "testing/status_matchers.h"
#include "testing/temp_dir.h"
#include "testing/wait_until.h"

namespace idem {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;
using testing::IdemBinary;
using testing::ReadWholeFile;
using testing::RunIdemIn;
using testing::RunResult;
using testing::WaitUntil;

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(IdemBinary().empty()) << "set IDEM_BIN to the idem binary";
    ASSERT_TRUE(std::filesystem::exists(IdemBinary())) << IdemBinary();
  }

  // Runs idem with `args` in the temp dir (so relative paths land there).
  RunResult Idem(const std::vector<std::string>& args) { return RunIdemIn(dir_.path(), args); }

  std::string WriteConfig(const std::string& text) {
    const std::string path = dir_.file("idem.toml");
    std::ofstream(path) << text;
    return path;
  }

  // Expects a failure with `status` and exactly one "idem: " line on stderr.
  // Usage errors may come after --help text on stdout; stderr is one line.
  static void ExpectOneLineFailure(const RunResult& r, int status) {
    testing::ExpectOneLineFailure(r, status, /*stdout_may_have_output=*/true);
  }

  testing::TempDir dir_;
};

const std::vector<std::string> kSeedExample = {"ttl", "--redelivery",     "10m", "--recon-cycle",
                                               "30d", "--confirm-window", "3d",  "--margin",
                                               "60d"};

std::vector<std::string> With(std::vector<std::string> base, const std::vector<std::string>& more) {
  base.insert(base.end(), more.begin(), more.end());
  return base;
}

constexpr char kSeedExampleOut[] =
    "TTL = max(upstream redelivery window, reconciliation cycle, downstream confirmation window) "
    "+ safety margin\n"
    "  upstream redelivery window       10m\n"
    "  reconciliation cycle             30d        <- dominates\n"
    "  downstream confirmation window   3d\n"
    "  safety margin                    60d\n"
    "TTL = 30d + 60d = 90d (90 days)\n";

// --- ttl ---------------------------------------------------------------------

TEST_F(CliTest, TtlSeedExampleIsNinetyDaysDominatedByReconciliation) {
  RunResult r = Idem(kSeedExample);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, kSeedExampleOut);
  EXPECT_EQ(r.err, "");
}

TEST_F(CliTest, TtlJson) {
  RunResult r = Idem(With(kSeedExample, {"--json"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["ttl"]["ms"], int64_t{90} * 24 * 3600 * 1000);
  EXPECT_EQ(j["ttl"]["text"], "90d");
  EXPECT_EQ(j["ttl_days"], 90.0);
  EXPECT_EQ(j["dominant"], "recon_cycle");
  EXPECT_EQ(j["dominant_window"]["text"], "30d");
  EXPECT_EQ(j["redelivery"]["ms"], 600000);
  EXPECT_EQ(j["recon_cycle"]["text"], "30d");
  EXPECT_EQ(j["confirm_window"]["text"], "3d");
  EXPECT_EQ(j["margin"]["text"], "60d");
  EXPECT_FALSE(j.contains("configured"));
}

TEST_F(CliTest, TtlRefusesConfiguredBelowDerived) {
  RunResult r = Idem(With(kSeedExample, {"--configured", "30d"}));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out, kSeedExampleOut);  // the derivation is still shown
  EXPECT_EQ(r.err,
            "idem: configured TTL 30d is below the derived TTL 90d (reconciliation cycle 30d + "
            "safety margin 60d); a record purged that early lets a late duplicate through\n");

  r = Idem(With(kSeedExample, {"--configured", "30d", "--json"}));
  EXPECT_EQ(r.exit_code, 1);
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["configured"]["text"], "30d");
  EXPECT_EQ(j["configured_ok"], false);
  ExpectOneLineFailure(r, 1);
}

TEST_F(CliTest, TtlAcceptsConfiguredAtLeastDerived) {
  RunResult r = Idem(With(kSeedExample, {"--configured", "90d"}));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, std::string(kSeedExampleOut) + "configured TTL 90d: OK (at least 90d)\n");
  r = Idem(With(kSeedExample, {"--configured", "120d", "--json"}));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["configured_ok"], true);
}

TEST_F(CliTest, TtlOtherWindowDominates) {
  RunResult r = Idem({"ttl", "--redelivery", "10m", "--recon-cycle", "1d", "--confirm-window", "1d12h",
                 "--margin", "12h"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("  downstream confirmation window   1d12h      <- dominates\n"));
  EXPECT_THAT(r.out, HasSubstr("TTL = 1d12h + 12h = 2d (2 days)\n"));
}

TEST_F(CliTest, TtlBadDurationsAreUsageErrors) {
  struct Case {
    std::string flag, value, err;
  };
  const Case cases[] = {
      {"--margin", "-5d",
       "idem: --margin: invalid duration \"-5d\": negative durations are not "
       "allowed\n"},
      {"--redelivery", "10x",
       "idem: --redelivery: invalid duration \"10x\": unknown unit \"x\" (use d, h, m, s or ms)\n"},
      {"--recon-cycle", "",
       "idem: --recon-cycle: invalid duration \"\": empty; expected "
       "<number><unit>... with units d, h, m, s, ms\n"},
      {"--confirm-window", "1.5d",
       "idem: --confirm-window: invalid duration \"1.5d\": fractions "
       "are not allowed (write 1d12h, not 1.5d)\n"},
      {"--margin", "99999999999999999999d",
       "idem: --margin: invalid duration \"99999999999999999999d\": too large (the maximum is "
       "106751d23h47m16s854ms775us807ns)\n"},
      {"--margin", "5",
       "idem: --margin: invalid duration \"5\": missing unit after 5 (use d, h, "
       "m, s or ms)\n"},
      {"--configured", "soon",
       "idem: --configured: invalid duration \"soon\": expected a number "
       "at \"soon\"; expected <number><unit>... with units d, h, m, s, "
       "ms\n"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = kSeedExample;
    bool replaced = false;
    for (size_t i = 0; i + 1 < args.size(); ++i) {
      if (args[i] == c.flag) {
        args[i + 1] = c.value;
        replaced = true;
      }
    }
    if (!replaced) args = With(args, {c.flag, c.value});
    RunResult r = Idem(args);
    EXPECT_EQ(r.exit_code, 2) << c.flag << "=" << c.value;
    EXPECT_EQ(r.err, c.err);
    EXPECT_EQ(r.out, "");
  }
}

TEST_F(CliTest, TtlMissingFlagIsUsageError) {
  RunResult r = Idem({"ttl", "--redelivery", "10m", "--recon-cycle", "30d", "--confirm-window", "3d"});
  ExpectOneLineFailure(r, 2);
  EXPECT_EQ(r.err, "idem: --margin is required (see --help)\n");
  EXPECT_EQ(r.out, "");
}

TEST_F(CliTest, TtlMissingValueIsUsageError) {
  RunResult r = Idem({"ttl", "--redelivery"});
  ExpectOneLineFailure(r, 2);
}

// --- root: help, version, subcommands ----------------------------------------

// --- serve's default store ----------------------------------------------------

// `idem serve` without --store keeps its records in rocksdb://./idem-db (the
// embedded store that won bench/claims.sh), creating it in the working directory.
TEST_F(CliTest, ServeDefaultStoreIsRocksdbInTheWorkingDirectory) {
  const std::string out_path = dir_.file("serve.out");
  const int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  ASSERT_GE(out, 0);
  const pid_t pid = testing::SpawnIdem({"serve", "--listen", "127.0.0.1:0", "--tenant", "t:tok"},
                                       dir_.path(), out, dir_.file("serve.err"));
  close(out);
  ASSERT_GT(pid, 0);
  const bool listening =
      WaitUntil([&] { return ReadWholeFile(out_path).starts_with("listening on "); });
  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(listening) << ReadWholeFile(dir_.file("serve.err"));
  EXPECT_TRUE(std::filesystem::is_directory(dir_.file("idem-db")));
  EXPECT_FALSE(std::filesystem::exists(dir_.file("idem.db")));
}

// The commands that read or purge records look where `idem serve` keeps them when
// --store is not given (records list, purge and keys analyze read ./idem.db, which
// was no longer serve's default, and found nothing there).
TEST_F(CliTest, RecordCommandsDefaultToServesStore) {
  {
    std::unique_ptr<Store> store = *OpenStore("rocksdb://" + dir_.file("idem-db"));
    Guard guard(*store);
    ASSERT_OK(guard.Claim({.tenant = "acme", .biz_type = "refund", .key = "R-1"}));
  }
  RunResult list = Idem({"records", "list"});
  EXPECT_EQ(list.exit_code, 0) << list.err;
  EXPECT_THAT(list.out, HasSubstr("R-1"));
  RunResult inspect = Idem({"inspect", "--tenant", "acme", "--key", "R-1"});
  EXPECT_EQ(inspect.exit_code, 0) << inspect.err;
  RunResult purge = Idem({"purge", "--dry-run", "--json"});
  EXPECT_EQ(purge.exit_code, 0) << purge.err;
  EXPECT_THAT(purge.out, HasSubstr("idem-db")) << "purged another store than serve's";
  RunResult keys = Idem({"keys", "analyze", "--json"});
  EXPECT_EQ(keys.exit_code, 0) << keys.err;
  EXPECT_THAT(keys.out, HasSubstr("idem-db")) << "analyzed another store than serve's";
  EXPECT_FALSE(std::filesystem::exists(dir_.file("idem.db")));
}

// Next to an earlier version's default store (./idem.db) and no ./idem-db, serve
// without --store refuses to start on an empty new store, which would run every key
// the old one knows again, and says how to keep or move it.
TEST_F(CliTest, ServeWithoutStoreRefusesToLeaveTheOldDefaultStoreBehind) {
  ASSERT_EQ(Idem({"migrate", "--store", "sqlite://./idem.db"}).exit_code, 0);
  RunResult r = Idem({"serve", "--listen", "127.0.0.1:0", "--tenant", "t:tok"});
  ExpectOneLineFailure(r, 1);
  EXPECT_THAT(r.err, HasSubstr("--store sqlite://./idem.db"));
  EXPECT_THAT(r.err, HasSubstr("idem migrate --from sqlite://./idem.db --to rocksdb://./idem-db"));
  EXPECT_FALSE(std::filesystem::exists(dir_.file("idem-db")));
  // The same store named by IDEM_STORE is a choice, not the default: no refusal.
  // (The missing password file, read after that check, ends the run at once.)
  setenv("IDEM_STORE", "rocksdb://./idem-db", 1);
  r = Idem({"serve", "--listen", "127.0.0.1:0", "--tenant", "t:tok", "--store-password-file",
            dir_.file("no-such-file")});
  unsetenv("IDEM_STORE");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("no-such-file"));
  EXPECT_THAT(r.err, ::testing::Not(HasSubstr("idem migrate --from")));
}

// `idem migrate --from sqlite://… --to rocksdb://…` moves an earlier default store
// over: every record byte for byte (a success, a cached failure, a live claim, keys
// as bytes), nothing twice on a second run, a dry run that changes nothing, and a
// destination record that disagrees kept and reported (exit 1).
TEST_F(CliTest, MigrateFromSqliteToRocksdbCopiesEveryRecordOnce) {
  const std::string from = "sqlite://" + dir_.file("idem.db");
  const std::string to = "rocksdb://" + dir_.file("idem-db");
  {
    std::unique_ptr<Store> store = *OpenStore(from);
    Guard guard(*store);
    ASSERT_OK(guard.Run({.tenant = "acme", .biz_type = "refund", .key = "R-1", .fingerprint = "f"},
                        [](Transaction&) -> absl::StatusOr<std::string> {
                          return std::string(R"({"refund_id":"F-1"})");
                        }));
    EXPECT_FALSE(guard.Run({.tenant = "acme", .biz_type = "refund", .key = "R-2"},
                           [](Transaction&) -> absl::StatusOr<std::string> {
                             return absl::InvalidArgumentError("card declined");
                           }).ok());
    ASSERT_OK(guard.Claim({.tenant = "beta", .biz_type = "order", .key = std::string("k\0\xff", 3)}));
    for (int i = 0; i < 7; ++i) {  // more than one --batch page
      ASSERT_OK(guard.Claim({.biz_type = "refund", .key = "bulk-" + std::to_string(i)}));
    }
  }
  RunResult dry = Idem({"migrate", "--from", from, "--to", to, "--dry-run"});
  EXPECT_EQ(dry.exit_code, 0) << dry.err;
  EXPECT_THAT(dry.out, HasSubstr("records: 10 (would copy 10, already there 0, differing 0)"));
  EXPECT_FALSE(std::filesystem::exists(dir_.file("idem-db")));

  RunResult r = Idem({"migrate", "--from", from, "--to", to, "--batch", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("records: 10 (copied 10, already there 0, differing 0)"));
  EXPECT_THAT(r.out, HasSubstr("action: copied"));
  {
    std::unique_ptr<Store> source = *OpenStore(from);
    std::unique_ptr<Store> copy = *OpenStore(to);
    for (const auto& [tenant, key] : std::vector<std::pair<std::string, std::string>>{
             {"acme", "R-1"}, {"acme", "R-2"}, {"beta", std::string("k\0\xff", 3)},
             {"default", "bulk-6"}}) {
      absl::StatusOr<std::optional<Record>> want = source->Get(tenant, key);
      absl::StatusOr<std::optional<Record>> got = copy->Get(tenant, key);
      ASSERT_OK(want);
      ASSERT_OK(got);
      ASSERT_TRUE(want->has_value() && got->has_value()) << key;
      EXPECT_EQ(**got, **want) << key;
    }
  }
  r = Idem({"migrate", "--from", from, "--to", to});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("records: 10 (copied 0, already there 10, differing 0)"));
  EXPECT_THAT(r.out, HasSubstr("action: nothing to copy"));

  {  // the source moves on (R-9 claimed, bulk-0 completed) after the copy
    std::unique_ptr<Store> store = *OpenStore(from);
    Guard guard(*store);
    ASSERT_OK(guard.Claim({.biz_type = "refund", .key = "R-9"}));
    absl::StatusOr<std::optional<Record>> bulk = store->Get("default", "bulk-0");
    ASSERT_OK(guard.Complete({.biz_type = "refund", .key = "bulk-0"}, (*bulk)->token, "{}"));
  }
  r = Idem({"migrate", "--from", from, "--to", to});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.out, HasSubstr("records: 11 (copied 1, already there 9, differing 1)"));
  EXPECT_THAT(r.err, HasSubstr("bulk-0"));

  ExpectOneLineFailure(Idem({"migrate", "--from", from}), 2);
  ExpectOneLineFailure(Idem({"migrate", "--from", from, "--to", from}), 2);
}

TEST_F(CliTest, HelpExitsZero) {
  RunResult r = Idem({"--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.out, HasSubstr("Usage: idem"));
  EXPECT_THAT(r.out, HasSubstr("serve"));
  EXPECT_THAT(r.out, HasSubstr("inspect"));
  EXPECT_THAT(r.out, HasSubstr("ttl"));
  EXPECT_THAT(r.out, HasSubstr("--config"));
  EXPECT_THAT(r.out, HasSubstr("Exit status: 0 success, 1 operational failure, 2 bad usage."));
  EXPECT_EQ(r.err, "");
}

TEST_F(CliTest, HelpOnEachSubcommandExitsZero) {
  for (const char* sub : {"serve", "inspect", "ttl"}) {
    RunResult r = Idem({sub, "--help"});
    EXPECT_EQ(r.exit_code, 0) << sub;
    EXPECT_THAT(r.out, HasSubstr(std::string("Usage: idem ") + sub)) << sub;
    EXPECT_EQ(r.err, "") << sub;
  }
  RunResult r = Idem({"ttl", "--help"});
  EXPECT_THAT(r.out, HasSubstr("--recon-cycle"));
  r = Idem({"inspect", "-h"});
  EXPECT_THAT(r.out, HasSubstr("--biz-type"));
}

TEST_F(CliTest, Version) {
  RunResult r = Idem({"--version"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.out, StartsWith("idem "));
  EXPECT_EQ(r.out.find('\n'), r.out.size() - 1);
}

TEST_F(CliTest, NoSubcommandIsUsageError) {
  RunResult r = Idem({});
  ExpectOneLineFailure(r, 2);
  EXPECT_EQ(r.err, "idem: a subcommand is required: serve, inspect, ttl, migrate, stuck, token, proxy, diagnose, recon, bridge, purge, records, keys, demo, worker (see idem --help)\n");
}

TEST_F(CliTest, UnknownSubcommandIsUsageError) {
  RunResult r = Idem({"frobnicate"});
  ExpectOneLineFailure(r, 2);
  EXPECT_EQ(r.err, "idem: unknown subcommand 'frobnicate' (see idem --help)\n");
}

TEST_F(CliTest, UnknownOptionIsUsageError) {
  RunResult r = Idem({"--frobnicate"});
  ExpectOneLineFailure(r, 2);
  EXPECT_EQ(r.err, "idem: unknown option '--frobnicate' (see idem --help)\n");

  r = Idem(With(kSeedExample, {"--frobnicate"}));
  ExpectOneLineFailure(r, 2);
  EXPECT_THAT(r.err, HasSubstr("--frobnicate"));
}

// A mistyped subcommand or option names the nearest one there is, the external
// subcommands (idem-demo beside idem) included; the exit status stays 2.
TEST_F(CliTest, MistypedNamesSuggestTheNearest) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"serv"}, "idem: unknown subcommand 'serv'; did you mean 'serve'? (see idem --help)\n"},
      {{"inspcet", "--key", "k"},
       "idem: unknown subcommand 'inspcet'; did you mean 'inspect'? (see idem --help)\n"},
      {{"dmeo"}, "idem: unknown subcommand 'dmeo'; did you mean 'demo'? (see idem --help)\n"},
      {{"serve", "--stor", "x"},
       "idem: unknown option '--stor'; did you mean '--store'? (see idem serve --help)\n"},
      {{"serve", "--stor=x"},
       "idem: unknown option '--stor=x'; did you mean '--store'? (see idem serve --help)\n"},
      {{"inspect", "--key", "k", "--tenatn", "t"},
       "idem: unknown option '--tenatn'; did you mean '--tenant'? (see idem inspect --help)\n"},
      {With(kSeedExample, {"--confg", "x.toml"}),
       "idem: unknown option '--confg'; did you mean '--config'? (see idem ttl --help)\n"},
      {{"records", "lsit"},
       "idem: unknown subcommand 'lsit'; did you mean 'list'? (see idem records --help)\n"},
      {{"--confg", "x.toml"},
       "idem: unknown option '--confg'; did you mean '--config'? (see idem --help)\n"},
      // Too far from every name: no guess.
      {{"sv"}, "idem: unknown subcommand 'sv' (see idem --help)\n"},
      {{"serve", "--xyz"}, "idem: unknown option '--xyz' (see idem serve --help)\n"},
  };
  for (const auto& [args, err] : cases) {
    RunResult r = Idem(args);
    ExpectOneLineFailure(r, 2);
    EXPECT_EQ(r.err, err) << args.front();
  }
}

TEST_F(CliTest, TwoSubcommandsAreUsageError) {
  RunResult r = Idem(With(kSeedExample, {"inspect", "--key", "k"}));
  ExpectOneLineFailure(r, 2);
}

// --- --config ----------------------------------------------------------------

TEST_F(CliTest, ConfigFileSetsTtlFlags) {
  std::string config = WriteConfig(
      "[ttl]\n"
      "redelivery = \"10m\"\n"
      "recon-cycle = \"30d\"\n"
      "confirm-window = \"3d\"\n"
      "margin = \"60d\"\n");
  RunResult r = Idem({"--config", config, "ttl"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, kSeedExampleOut);

  // The command line overrides the file.
  r = Idem({"--config", config, "ttl", "--margin", "1d"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("TTL = 30d + 1d = 31d (31 days)\n"));

  // --config may also follow the subcommand.
  r = Idem({"ttl", "--config", config});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, kSeedExampleOut);
}

TEST_F(CliTest, ConfigFileFlagsAndOtherSections) {
  // Other subcommands' sections (arrays included) are accepted and do not run them.
  std::string config = WriteConfig(
      "[serve]\n"
      "listen = \"127.0.0.1:0\"\n"
      "tenant = [\"a:tok\", \"b:tok2\"]\n"
      "[ttl]\n"
      "redelivery = \"10m\"\n"
      "recon-cycle = \"30d\"\n"
      "confirm-window = \"3d\"\n"
      "margin = \"60d\"\n"
      "configured = \"30d\"\n"
      "json = true\n");
  RunResult r = Idem({"--config", config, "ttl"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["configured_ok"], false);
  ExpectOneLineFailure(r, 1);
}

TEST_F(CliTest, ConfigUnknownKeyIsUsageError) {
  std::string config = WriteConfig("[ttl]\nredelivery = \"10m\"\nbogus = 1\n");
  RunResult r = Idem(With({"--config", config}, kSeedExample));
  ExpectOneLineFailure(r, 2);
  EXPECT_EQ(r.err, "idem: config file " + config +
                       ": unknown key 'ttl.bogus' (keys are option names without dashes, in the "
                       "subcommand's section)\n");
}

TEST_F(CliTest, ConfigUnknownSectionIsUsageError) {
  std::string config = WriteConfig("[nosuch]\nx = 1\n");
  RunResult r = Idem(With({"--config", config}, kSeedExample));
  ExpectOneLineFailure(r, 2);
  EXPECT_EQ(r.err, "idem: config file " + config +
                       ": unknown section [nosuch] (sections are subcommand names)\n");
}

TEST_F(CliTest, ConfigUnknownRootKeyIsUsageError) {
  std::string config = WriteConfig("margin = \"60d\"\n");
  RunResult r = Idem(With({"--config", config}, kSeedExample));
  ExpectOneLineFailure(r, 2);
  EXPECT_THAT(r.err, HasSubstr("unknown key 'margin'"));
}

// CLI11's own reader took these as values or keys (an unclosed array served its
// one tenant; an unquoted address was used as given): a file that is not TOML is a
// usage error naming the line and column.
TEST_F(CliTest, ConfigThatIsNotTomlIsUsageErrorWithLineAndColumn) {
  struct Case {
    std::string text;
    std::string where;
  };
  const std::vector<Case> cases = {
      {"[serve]\ntenant = [\"a:tok\"\n", "not valid TOML at line 2, column "},
      {"[ttl]\nmargin = 60d\n", "not valid TOML at line 2, column "},
      {"[ttl]\nmargin = \"60d\" junk\n", "not valid TOML at line 2, column "},
      {"[ttl\nmargin = \"60d\"\n", "not valid TOML at line 1, column "},
      {"[ttl]\nmargin = \"60d\nredelivery = \"10m\"\n", "not valid TOML at line 2, column "},
      {"[ttl]\nmargin = \"60d\"\nmargin = \"61d\"\n", "not valid TOML at line 3, column "},
  };
  for (const Case& c : cases) {
    std::string config = WriteConfig(c.text);
    RunResult r = Idem(With({"--config", config}, kSeedExample));
    ExpectOneLineFailure(r, 2);
    EXPECT_THAT(r.err, HasSubstr("idem: config file " + config + ": " + c.where)) << c.text;
    EXPECT_EQ(r.out, "") << c.text;
  }
}

TEST_F(CliTest, ConfigMissingFileIsUsageError) {
  RunResult r = Idem(With({"--config", "no-such.toml"}, kSeedExample));
  ExpectOneLineFailure(r, 2);
  EXPECT_EQ(r.err, "idem: cannot read config file no-such.toml (missing or unreadable)\n");
  EXPECT_EQ(r.out, "");
}

TEST_F(CliTest, ConfigBadValueIsUsageError) {
  std::string config = WriteConfig("[ttl]\nmargin = \"sixty days\"\n");
  RunResult r = Idem(With({"--config", config}, {"ttl", "--redelivery", "10m", "--recon-cycle", "30d",
                                            "--confirm-window", "3d"}));
  ExpectOneLineFailure(r, 2);
  EXPECT_THAT(r.err, HasSubstr("--margin: invalid duration \"sixty days\""));
}

// CLI11 took a TOML value as text and converted it as the option's type would a
// command-line word: each of these started a server without a word (a biz_type
// "true", a flag read as false, -1 wrapped to 18446744073709551615). Every value is
// checked against its option's type now, in one place, with one line naming the
// file, the section and key, and what it takes; exit 2 before anything starts.
TEST_F(CliTest, ConfigValuesOfTheWrongTypeAreUsageErrors) {
  struct Case {
    std::string line;
    std::string err;
  };
  const std::vector<Case> cases = {
      {"fail-open = true", "[serve] fail-open: takes a string (BIZ_TYPE) or an array of them, "
                           "not a boolean"},
      {"fail-open = 5", "[serve] fail-open: takes a string (BIZ_TYPE) or an array of them, "
                        "not an integer"},
      {"fail_open = [\"refund\", 5]", "[serve] fail_open: takes a string (BIZ_TYPE) or an "
                                       "array of them; element 2 is an integer"},
      {"metrics-token = \"no\"", "[serve] metrics-token: takes true or false, not a string"},
      {"cache-entries = -1", "[serve] cache-entries: takes an integer, 0 or more, not -1"},
      {"cache-bytes = 1.5", "[serve] cache-bytes: takes an integer, 0 or more, not a float"},
      {"threads = \"16\"", "[serve] threads: takes an integer, not a string"},
      {"purge-max-rate = \"fast\"", "[serve] purge-max-rate: takes a number, not a string"},
      {"cache-ttl = 5", "[serve] cache-ttl: takes a string, not an integer"},
      {"listen = [\"127.0.0.1:0\"]", "[serve] listen: takes a string, not an array"},
  };
  for (const Case& c : cases) {
    const std::string config = WriteConfig("[serve]\n" + c.line + "\n");
    RunResult r = Idem({"--config", config, "serve", "--store", "memory://", "--tenant", "t:tok"});
    ExpectOneLineFailure(r, 2);
    EXPECT_EQ(r.err, "idem: config file " + config + ": " + c.err + "\n") << c.line;
    EXPECT_EQ(r.out, "") << c.line;
  }
  // The root's options too, and another subcommand's section.
  std::string config = WriteConfig("log-level = 3\n");
  RunResult r = Idem(With({"--config", config}, kSeedExample));
  EXPECT_EQ(r.err, "idem: config file " + config + ": log-level: takes a string, not an integer\n");
  config = WriteConfig("[ttl]\njson = \"yes\"\n");
  r = Idem(With({"--config", config}, kSeedExample));
  EXPECT_EQ(r.err,
            "idem: config file " + config + ": [ttl] json: takes true or false, not a string\n");
}

// The same class on the command line: CLI11 2.1 wraps a negative unsigned value.
TEST_F(CliTest, NegativeUnsignedOptionsAreUsageErrors) {
  RunResult r = Idem({"serve", "--store", "memory://", "--tenant", "t:tok", "--cache-entries", "-1"});
  ExpectOneLineFailure(r, 2);
  EXPECT_THAT(r.err, HasSubstr("--cache-entries: -1 is negative")) << r.err;
}

// --- inspect -----------------------------------------------------------------

TEST_F(CliTest, InspectMissingKeyExitsOne) {
  RunResult r = Idem({"inspect", "--store", "memory://", "--key", "K-404"});
  ExpectOneLineFailure(r, 1);
  EXPECT_EQ(r.err, "idem: no record for K-404 in any tenant (this store holds no records)\n");
  EXPECT_EQ(r.out, "");

  r = Idem({"inspect", "--store", "memory://", "--tenant", "acme", "--biz-type", "refund", "--key",
            "K-404"});
  EXPECT_EQ(r.err, "idem: no record for tenant acme key K-404\n");
}

TEST_F(CliTest, InspectMissingSqliteFileExitsOneAndCreatesNothing) {
  RunResult r = Idem({"inspect", "--store", "sqlite://./nope.db", "--key", "K-1"});
  ExpectOneLineFailure(r, 1);
  EXPECT_EQ(r.err, "idem: store sqlite://./nope.db: database file ./nope.db does not exist; "
                   "`idem migrate` creates one\n");
  EXPECT_FALSE(std::filesystem::exists(dir_.file("nope.db")));
}

TEST_F(CliTest, InspectMalformedStoreUrlIsUsageError) {
  for (const char* url : {"nope", "sqlite://", "sqlite://./x.db?bogus=1", "redis2://h",
                          "postgres://u@h/db?nosuchparam=1", "memory://extra"}) {
    RunResult r = Idem({"inspect", "--store", url, "--key", "K-1"});
    ExpectOneLineFailure(r, 2);
  }
  EXPECT_FALSE(std::filesystem::exists(dir_.file("x.db")));
}

TEST_F(CliTest, InspectBadKeyIsUsageError) {
  RunResult r = Idem({"inspect", "--store", "memory://", "--key", ""});
  ExpectOneLineFailure(r, 2);
  r = Idem({"inspect", "--store", "memory://", "--key", std::string(256, 'k')});
  ExpectOneLineFailure(r, 2);
  r = Idem({"inspect", "--store", "memory://"});
  ExpectOneLineFailure(r, 2);
  EXPECT_EQ(r.err, "idem: --key is required (see --help)\n");
}

TEST_F(CliTest, InspectUnreachableStoreExitsOne) {
  // A directory in place of the database file cannot be opened.
  std::filesystem::create_directory(dir_.file("adir.db"));
  RunResult r = Idem({"inspect", "--store", "sqlite://" + dir_.file("adir.db"), "--key", "K-1"});
  ExpectOneLineFailure(r, 1);
}

class CliInspectRecordTest : public CliTest {
 protected:
  void SetUp() override {
    CliTest::SetUp();
    url_ = "sqlite://" + dir_.file("idem.db");
    absl::StatusOr<std::unique_ptr<Store>> store = OpenStore(url_);
    ASSERT_OK(store);
    Guard guard(**store);
    absl::StatusOr<Result> r =
        guard.Run({.tenant = "acme", .biz_type = "refund", .key = "R-1", .fingerprint = "fp1"},
                  [](Transaction&) -> absl::StatusOr<std::string> {
                    return std::string(R"({"refund_id":"F-1"})");
                  });
    ASSERT_OK(r);
    ASSERT_EQ(r->outcome, Outcome::kExecuted);
    r = guard.Run({.tenant = "acme", .biz_type = "refund", .key = "R-2"},
                  [](Transaction&) -> absl::StatusOr<std::string> {
                    return absl::InvalidArgumentError("card declined");
                  });
    ASSERT_FALSE(r.ok());  // a final failure is cached; the first run reports it
  }

  std::string url_;
};

TEST_F(CliInspectRecordTest, PrintsTheRecord) {
  RunResult r = Idem(
      {"inspect", "--store", url_, "--tenant", "acme", "--biz-type", "refund", "--key", "R-1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_THAT(r.out, StartsWith("store        " + url_ + "\n"
                                "tenant       acme\n"
                                "biz_type     refund\n"
                                "key          R-1\n"
                                "state        SUCCEEDED\n"
                                "token        1\n"));
  EXPECT_THAT(r.out, HasSubstr("\nfingerprint  fp1\n"
                               "result       {\"refund_id\":\"F-1\"} (19 bytes)\n"
                               "error        -\n"
                               "created_at   20"));
  EXPECT_THAT(r.out, HasSubstr("\nupdated_at   20"));
}

TEST_F(CliInspectRecordTest, PrintsJson) {
  RunResult r = Idem({"inspect", "--store", url_, "--tenant", "acme", "--key", "R-1", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["tenant"], "acme");
  EXPECT_EQ(j["biz_type"], "refund");
  EXPECT_EQ(j["key"], "R-1");
  EXPECT_EQ(j["state"], "SUCCEEDED");
  EXPECT_EQ(j["token"], 1);
  EXPECT_EQ(j["fingerprint"], "fp1");
  // The stored result is JSON and given as JSON, not as a string holding it.
  EXPECT_EQ(j["result"], nlohmann::json({{"refund_id", "F-1"}}));
  EXPECT_EQ(j["result_encoding"], "json");
  EXPECT_EQ(j["error"], nullptr);
  EXPECT_EQ(j["error_encoding"], nullptr);
  EXPECT_TRUE(j["created_at"].is_string());
  EXPECT_TRUE(j["updated_at"].is_string());
  EXPECT_EQ(j["lease_live"], false);
}

// The stored result is printed as stored: its members in their order and its
// numbers as written (it was re-encoded: sorted members, 12.50 as 12.5).
TEST_F(CliInspectRecordTest, PrintsTheStoredResultByteForByte) {
  const std::string stored = R"({"refund_id":"F-3","amount":12.50,"big":123456789012345678,"a":[1.0,"x"]})";
  {
    absl::StatusOr<std::unique_ptr<Store>> store = OpenStore(url_);
    ASSERT_OK(store);
    Guard guard(**store);
    ASSERT_OK(guard.Run({.tenant = "acme", .biz_type = "refund", .key = "R-3"},
                        [&](Transaction&) -> absl::StatusOr<std::string> { return stored; }));
  }
  RunResult r = Idem({"inspect", "--store", url_, "--tenant", "acme", "--key", "R-3", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\"result\": " + stored + ",")) << r.out;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["result_encoding"], "json");
  EXPECT_EQ(j["key"], "R-3");
  // Every tenant searched (no --tenant): a list of records, the same bytes.
  r = Idem({"inspect", "--store", url_, "--key", "R-3", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\"result\": " + stored + ",")) << r.out;
  EXPECT_EQ(nlohmann::json::parse(r.out)["records"].size(), 1u);
}

TEST_F(CliInspectRecordTest, PrintsACachedFailure) {
  RunResult r = Idem({"inspect", "--store", url_, "--tenant", "acme", "--key", "R-2", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["state"], "FAILED");
  EXPECT_EQ(j["result"], nullptr);
  EXPECT_EQ(j["result_encoding"], nullptr);
  EXPECT_THAT(j["error"].dump(), HasSubstr("card declined"));
  EXPECT_NE(j["error_encoding"], nullptr);
  EXPECT_EQ(j["fingerprint"], nullptr);
}

TEST_F(CliInspectRecordTest, OtherBizTypeExitsOne) {
  RunResult r =
      Idem({"inspect", "--store", url_, "--tenant", "acme", "--biz-type", "order", "--key", "R-1"});
  ExpectOneLineFailure(r, 1);
  EXPECT_THAT(r.err, StartsWith("idem: tenant acme key R-1 is not of biz_type order: "));
  EXPECT_THAT(r.err, HasSubstr("refund"));
}

TEST_F(CliInspectRecordTest, TenantsAreSeparate) {
  RunResult r = Idem({"inspect", "--store", url_, "--tenant", "default", "--key", "R-1"});
  ExpectOneLineFailure(r, 1);
  EXPECT_EQ(r.err, "idem: no record for tenant default key R-1\n");
}

// Without --tenant the key is looked up in every tenant (it was looked up in
// "default" only, and a key of another tenant was "no record"); each record found is
// shown with its tenant, on SQLite and on RocksDB (each lists tenants in its order).
TEST_F(CliTest, InspectWithoutTenantLooksInEveryTenant) {
  std::vector<std::string> urls = {"sqlite://" + dir_.file("t.db")};
  if (OpenStore("rocksdb://" + dir_.file("probe-db")).ok()) {
    urls.push_back("rocksdb://" + dir_.file("t-db"));
  }
  for (const std::string& url : urls) {
    {
      absl::StatusOr<std::unique_ptr<Store>> store = OpenStore(url);
      ASSERT_OK(store);
      Guard guard(**store);
      // Tenants with keys before and after K-1 (and a longest one, all 0xFF bytes),
      // so that moving from one tenant to the next skips keys of both kinds.
      for (const std::string tenant : {"acme", "beta", "b", "zeta"}) {
        for (const std::string& key : {std::string("A-0"), std::string("K-1"), std::string("Z-9"),
                                      std::string(255, '\xff')}) {
          if (tenant == "zeta" && key == "K-1") continue;
          ASSERT_OK(guard.Run({.tenant = tenant, .biz_type = "refund", .key = key},
                              [&](Transaction&) -> absl::StatusOr<std::string> {
                                return "{\"tenant\":\"" + tenant + "\"}";
                              }));
        }
      }
    }
    RunResult r = Idem({"inspect", "--store", url, "--key", "K-1"});
    ASSERT_EQ(r.exit_code, 0) << url << r.err;
    EXPECT_EQ(r.err, "");
    for (const std::string tenant : {"acme", "b", "beta"}) {
      EXPECT_THAT(r.out, HasSubstr("\ntenant       " + tenant + "\nbiz_type     refund\n"
                                   "key          K-1\n")) << url;
    }
    EXPECT_THAT(r.out, Not(HasSubstr("zeta"))) << url;

    r = Idem({"inspect", "--store", url, "--key", "K-1", "--json"});
    ASSERT_EQ(r.exit_code, 0) << url << r.err;
    nlohmann::json j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["store"], url);
    ASSERT_EQ(j["records"].size(), 3u) << r.out;
    std::vector<std::string> tenants;
    for (const nlohmann::json& rec : j["records"]) {
      tenants.push_back(rec["tenant"]);
      EXPECT_EQ(rec["key"], "K-1");
      EXPECT_EQ(rec["result"], nlohmann::json({{"tenant", rec["tenant"]}}));
    }
    std::sort(tenants.begin(), tenants.end());
    EXPECT_EQ(tenants, (std::vector<std::string>{"acme", "b", "beta"}));

    // --tenant still looks there only; a key no tenant has names the tenants.
    r = Idem({"inspect", "--store", url, "--tenant", "zeta", "--key", "K-1"});
    ExpectOneLineFailure(r, 1);
    EXPECT_EQ(r.err, "idem: no record for tenant zeta key K-1\n");
    r = Idem({"inspect", "--store", url, "--key", "K-404"});
    ExpectOneLineFailure(r, 1);
    EXPECT_THAT(r.err, StartsWith("idem: no record for K-404 in any tenant (tenants in this store: "))
        << url;
    for (const std::string tenant : {"acme", "b", "beta", "zeta"}) {
      EXPECT_THAT(r.err, HasSubstr(tenant)) << url;
    }
    // Another biz_type everywhere: said as for one tenant.
    r = Idem({"inspect", "--store", url, "--biz-type", "order", "--key", "K-1"});
    ExpectOneLineFailure(r, 1);
    EXPECT_THAT(r.err, HasSubstr("is not of biz_type order")) << url;
  }
}

// The "no record" line names at most ten tenants, then how many there are.
TEST_F(CliTest, InspectNoRecordNamesAFewTenants) {
  const std::string url = "sqlite://" + dir_.file("many.db");
  {
    absl::StatusOr<std::unique_ptr<Store>> store = OpenStore(url);
    ASSERT_OK(store);
    Guard guard(**store);
    for (int i = 0; i < 12; ++i) {
      const std::string tenant = "t" + std::string(i < 10 ? "0" : "") + std::to_string(i);
      ASSERT_OK(guard.Run({.tenant = tenant, .biz_type = "refund", .key = "K-1"},
                          [](Transaction&) -> absl::StatusOr<std::string> { return "{}"; }));
    }
  }
  RunResult r = Idem({"inspect", "--store", url, "--key", "K-2"});
  ExpectOneLineFailure(r, 1);
  EXPECT_EQ(r.err,
            "idem: no record for K-2 in any tenant (tenants in this store: t00, t01, t02, t03, t04, "
            "t05, t06, t07, t08, t09, … (12 in all))\n");
}

TEST_F(CliInspectRecordTest, OpaqueBytesAreEscapedOrBase64) {
  const std::string key = "K\n1";
  const std::string result("\xff\x00ok\xed\xa0\x80", 7);  // not UTF-8, with a NUL
  {
    absl::StatusOr<std::unique_ptr<Store>> store = OpenStore(url_);
    ASSERT_OK(store);
    Guard guard(**store);
    ASSERT_OK(guard.Run({.tenant = "acme", .biz_type = "refund", .key = key},
                        [&](Transaction&) -> absl::StatusOr<std::string> { return result; }));
  }
  RunResult r = Idem({"inspect", "--store", url_, "--tenant", "acme", "--key", key});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\nkey          K\\n1\n"));
  EXPECT_THAT(r.out, HasSubstr("\nresult       \\xff\\x00ok\\xed\\xa0\\x80 (7 bytes)\n"));

  r = Idem({"inspect", "--store", url_, "--tenant", "acme", "--key", key, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["key"], key);
  EXPECT_EQ(j["result"], "/wBva+2ggA==");
  EXPECT_EQ(j["result_encoding"], "base64");

  // UTF-8 that is not JSON (the C++ API stores any bytes) is given as a string.
  {
    absl::StatusOr<std::unique_ptr<Store>> store = OpenStore(url_);
    ASSERT_OK(store);
    Guard guard(**store);
    ASSERT_OK(guard.Run({.tenant = "acme", .biz_type = "refund", .key = "K-text"},
                        [&](Transaction&) -> absl::StatusOr<std::string> {
                          return std::string("refund F-2 {");
                        }));
  }
  r = Idem({"inspect", "--store", url_, "--tenant", "acme", "--key", "K-text", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["result"], "refund F-2 {");
  EXPECT_EQ(j["result_encoding"], "text");

  // JSON that would not print back as itself (an integer past 64 bits would be
  // rounded) is given as text too, unaltered.
  const std::string big = R"({"id":123456789012345678901234567890})";
  {
    absl::StatusOr<std::unique_ptr<Store>> store = OpenStore(url_);
    ASSERT_OK(store);
    Guard guard(**store);
    ASSERT_OK(guard.Run({.tenant = "acme", .biz_type = "refund", .key = "K-big"},
                        [&](Transaction&) -> absl::StatusOr<std::string> { return big; }));
  }
  r = Idem({"inspect", "--store", url_, "--tenant", "acme", "--key", "K-big", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["result"], big);
  EXPECT_EQ(j["result_encoding"], "text");

  r = Idem({"inspect", "--store", url_, "--tenant", "acme", "--key", "K\n2"});
  ExpectOneLineFailure(r, 1);
  EXPECT_EQ(r.err, "idem: no record for tenant acme key K\\n2\n");
}

TEST_F(CliInspectRecordTest, ConfigFileSetsInspectFlags) {
  std::string config =
      WriteConfig("[inspect]\nstore = \"" + url_ + "\"\ntenant = \"acme\"\njson = true\n");
  RunResult r = Idem({"--config", config, "inspect", "--key", "R-1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["state"], "SUCCEEDED");
}

}  // namespace
}  // namespace idem
