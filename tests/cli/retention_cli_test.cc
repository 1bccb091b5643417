// `idem purge` and `idem records list` on a SQLite file: records
// written with the C++ API at a time long past (a fake clock), purged and listed by
// the real binary on the real clock; the [retention.*] sections of --config.
#include <sys/stat.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "idem/idem.h"
#include "idem/steps.h"
#include "nlohmann/json.hpp"
#include "testing/fake_clock.h"
#include "testing/idem_process.h"
#include "testing/temp_dir.h"

namespace idem::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using json = nlohmann::json;

constexpr absl::Duration kDay = absl::Hours(24);

constexpr char kRefundRetention[] =
    "[retention.refund]\n"
    "redelivery = \"10m\"\n"
    "recon_cycle = \"30d\"\n"
    "confirm_window = \"3d\"\n"
    "margin = \"60d\"\n";

class RetentionCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(IdemBinary().empty());
    url_ = "sqlite://" + dir_.file("idem.db");
    config_ = dir_.file("idem.toml");
    Write(config_, kRefundRetention);
  }

  static void Write(const std::string& path, const std::string& text) {
    std::ofstream(path) << text;
  }

  // Records claimed `age` ago with the refund policy (90 days), as `how`: "done",
  // "failed" or "lease".
  void Seed(const std::string& tenant, const std::string& biz_type, const std::string& key,
            const std::string& how, absl::Duration age) {
    FakeClock clock(absl::Now() - age);
    RetentionPolicy policy;
    ASSERT_TRUE(policy
                    .Add("refund", {.redelivery_window = absl::Minutes(10),
                                    .recon_cycle = 30 * kDay,
                                    .confirm_window = 3 * kDay,
                                    .safety_margin = 60 * kDay})
                    .ok());
    absl::StatusOr<std::unique_ptr<Store>> store = OpenStore(url_);
    ASSERT_TRUE(store.ok()) << store.status();
    Guard guard(**store, GuardOptions{.clock = &clock, .retention = policy});
    const Request r{.tenant = tenant, .biz_type = biz_type, .key = key, .fingerprint = "fp"};
    absl::StatusOr<Result> claim = guard.Claim(r, absl::Seconds(30));
    ASSERT_TRUE(claim.ok()) << claim.status();
    if (how == "done") {
      ASSERT_TRUE(guard.Complete(r, claim->token, "{\"id\":1}").ok());
    }
    if (how == "failed") {
      ASSERT_TRUE(guard.Fail(r, claim->token, false, "\"no\"").ok());
    }
  }

  std::optional<Record> Stored(const std::string& tenant, const std::string& key) {
    absl::StatusOr<std::unique_ptr<Store>> store = OpenStore(url_);
    EXPECT_TRUE(store.ok()) << store.status();
    if (!store.ok()) return std::nullopt;
    absl::StatusOr<std::optional<Record>> r = (*store)->Get(tenant, key);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : std::nullopt;
  }

  RunResult Idem(const std::vector<std::string>& args) { return RunIdemIn(dir_.path(), args); }

  TempDir dir_;
  std::string url_;
  std::string config_;
};

TEST_F(RetentionCliTest, PurgeTombstonesWhatIsPastItsRetentionOnly) {
  Seed("t", "refund", "old-done", "done", 100 * kDay);
  Seed("t", "refund", "old-failed", "failed", 100 * kDay);
  Seed("t", "refund", "old-lease", "lease", 100 * kDay);  // PROCESSING: never
  Seed("t", "refund", "young", "done", 10 * kDay);
  Seed("t", "payout", "no-policy", "done", 100 * kDay);  // kept for ever

  RunResult dry = Idem({"--config", config_, "purge", "--store", url_, "--dry-run", "--json"});
  ASSERT_EQ(dry.exit_code, 0) << dry.err;
  json d = json::parse(dry.out);
  EXPECT_EQ(d["tombstoned"], 2);
  EXPECT_EQ(d["dry_run"], true);
  EXPECT_FALSE(Stored("t", "old-done")->purged());

  RunResult run = Idem({"--config", config_, "purge", "--store", url_, "--batch", "1"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("2 expired records found, 2 tombstoned, 0 deleted"));
  EXPECT_THAT(run.err, HasSubstr("purge: "));  // a progress line per batch
  EXPECT_TRUE(Stored("t", "old-done")->purged());
  EXPECT_TRUE(Stored("t", "old-failed")->purged());
  EXPECT_FALSE(Stored("t", "old-lease")->purged());
  EXPECT_FALSE(Stored("t", "young")->purged());
  EXPECT_FALSE(Stored("t", "no-policy")->purged());

  // The late duplicate meets the tombstone.
  absl::StatusOr<std::unique_ptr<Store>> store = OpenStore(url_);
  ASSERT_TRUE(store.ok());
  Guard guard(**store);
  absl::StatusOr<Result> late =
      guard.Claim({.tenant = "t", .biz_type = "refund", .key = "old-done", .fingerprint = "fp"});
  ASSERT_TRUE(late.ok()) << late.status();
  EXPECT_EQ(late->outcome, Outcome::kExpired);

  // A second run finds nothing more.
  RunResult again = Idem({"--config", config_, "purge", "--store", url_, "--json"});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(json::parse(again.out)["tombstoned"], 0);
}

TEST_F(RetentionCliTest, PurgeWithoutTombstonesDeletes) {
  Seed("t", "refund", "old", "done", 100 * kDay);
  RunResult run = Idem({"--config", config_, "purge", "--store", url_, "--no-tombstones", "--json"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(json::parse(run.out)["deleted"], 1);
  EXPECT_FALSE(Stored("t", "old").has_value());
}

TEST_F(RetentionCliTest, PurgeUsageAndStoreErrors) {
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"purge", "--store", url_, "--batch", "0"},
                                             {"purge", "--store", url_, "--max-rate", "-1"},
                                             {"purge", "--store", url_, "--pause", "soon"},
                                             {"purge", "--store", "nope://x"}}) {
    RunResult r = Idem(args);
    EXPECT_EQ(r.exit_code, 2) << args.back() << ": " << r.err;
    EXPECT_THAT(r.err, ::testing::StartsWith("idem: "));
  }
  // A missing SQLite file is not created.
  RunResult missing = Idem({"purge", "--store", "sqlite://" + dir_.file("none.db")});
  EXPECT_EQ(missing.exit_code, 1) << missing.err;
  struct stat st;
  EXPECT_NE(stat(dir_.file("none.db").c_str(), &st), 0);
  // A configured TTL below the derived one is refused, with the derivation.
  Write(config_, std::string(kRefundRetention) + "ttl = \"30d\"\n");
  RunResult short_ttl = Idem({"--config", config_, "purge", "--store", url_});
  EXPECT_EQ(short_ttl.exit_code, 1);
  EXPECT_THAT(short_ttl.err, HasSubstr("reconciliation cycle"));
  EXPECT_THAT(short_ttl.err, HasSubstr("configured TTL 30d is below the derived TTL 90d"));
  // An unknown key of a retention section is bad usage, named.
  Write(config_, std::string(kRefundRetention) + "ttl_days = 90\n");
  RunResult unknown = Idem({"--config", config_, "purge", "--store", url_});
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_THAT(unknown.err, HasSubstr("[retention.refund]: unknown key 'ttl_days'"));
}

// One config file describes one deployment: the server's config ([serve] store
// plus [retention.*]) given to purge purges the server's store, and says which (it
// purged rocksdb://./idem-db instead, creating it, and named no store).
TEST_F(RetentionCliTest, PurgeWithTheServersConfigPurgesTheServersStore) {
  Seed("t", "refund", "old-done", "done", 100 * kDay);
  Write(config_, "[serve]\nlisten = \"127.0.0.1:0\"\nstore = \"" + url_ + "\"\n" +
                     kRefundRetention);
  RunResult dry = Idem({"--config", config_, "purge", "--dry-run", "--json"});
  ASSERT_EQ(dry.exit_code, 0) << dry.err;
  EXPECT_EQ(json::parse(dry.out)["store"], url_);
  EXPECT_EQ(json::parse(dry.out)["tombstoned"], 1);

  RunResult run = Idem({"--config", config_, "purge"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out, "store " + url_ +
                         ": 1 expired records found, 1 tombstoned, 0 deleted, 0 old tombstones "
                         "dropped, 0 kept, 0 step operations deleted (1 batches)\n");
  EXPECT_TRUE(Stored("t", "old-done")->purged());
  EXPECT_FALSE(std::filesystem::exists(dir_.file("idem-db"))) << "purge made the default store";

  // The other subcommands read the same store and name it (stuck: with its journal).
  {
    absl::StatusOr<std::unique_ptr<Store>> store = OpenStore(url_);
    ASSERT_TRUE(store.ok()) << store.status();
    StepRunner runner(**store);
    ASSERT_TRUE(runner.Migrate().ok());
  }
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"records", "list", "--tombstones"},
           {"inspect", "--tenant", "t", "--key", "old-done"},
           {"keys", "analyze"},
           {"stuck"},
           {"migrate", "--dry-run"},
           {"worker", "--once", "--refund-channel", "http://127.0.0.1:1"}}) {
    std::vector<std::string> argv = {"--config", config_};
    argv.insert(argv.end(), args.begin(), args.end());
    RunResult r = Idem(argv);
    EXPECT_EQ(r.exit_code, 0) << args[0] << ": " << r.err;
    EXPECT_THAT(r.out, HasSubstr(url_)) << args[0] << " did not name the store";
    argv.push_back("--json");
    if (args[0] == "migrate" || args[0] == "worker") continue;  // no --json
    RunResult j = Idem(argv);
    ASSERT_EQ(j.exit_code, 0) << args[0] << ": " << j.err;
    EXPECT_EQ(json::parse(j.out)["store"], url_) << args[0];
  }
  EXPECT_FALSE(std::filesystem::exists(dir_.file("idem-db")));

  // --store on the command line still wins: here a store that does not exist.
  RunResult other = Idem({"--config", config_, "purge", "--store", "sqlite://" + dir_.file("o.db")});
  EXPECT_EQ(other.exit_code, 1) << other.err;
  EXPECT_THAT(other.err, HasSubstr("sqlite://" + dir_.file("o.db")));
  EXPECT_FALSE(std::filesystem::exists(dir_.file("o.db")));
}

// [serve] store-password-file comes with [serve] store: here refused, since a path
// URL takes no password, which shows it was read; a --store of its own reads neither.
TEST_F(RetentionCliTest, TheServersStorePasswordFileComesWithItsStore) {
  Seed("t", "refund", "K-1", "done", 1 * kDay);
  const std::string password = dir_.file("store-password");
  Write(password, "secret\n");
  ASSERT_EQ(chmod(password.c_str(), 0600), 0);
  Write(config_, "[serve]\nstore = \"" + url_ + "\"\nstore-password-file = \"" + password +
                     "\"\n");
  RunResult r = Idem({"--config", config_, "records", "list"});
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_EQ(r.err, "idem: records list: a password was given for store URL '" + url_ +
                       "', which takes none (only server URLs do)\n");
  // The worker (a program of its own, without `serve`) reads the pair too: it
  // refused the password file ("not read by idem worker").
  r = Idem({"--config", config_, "worker", "--once", "--refund-channel", "http://127.0.0.1:1"});
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_EQ(r.err, "idem: worker: a password was given for store URL '" + url_ +
                       "', which takes none (only server URLs do)\n");
  RunResult own = Idem({"--config", config_, "records", "list", "--store", url_});
  EXPECT_EQ(own.exit_code, 0) << own.err;
  EXPECT_THAT(own.out, HasSubstr("K-1"));
}

// A config naming a store that does not exist: purge says so, naming it, and
// creates nothing (it created ./idem-db and reported 0 records found).
TEST_F(RetentionCliTest, PurgeWithTheConfigOfAMissingStoreCreatesNothing) {
  for (const std::string& url :
       {"sqlite://" + dir_.file("gone.db"), "rocksdb://" + dir_.file("gone-db")}) {
    Write(config_, "[serve]\nstore = \"" + url + "\"\n" + kRefundRetention);
    for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
             {"--config", config_, "purge"}, {"--config", config_, "purge", "--dry-run"}}) {
      RunResult r = Idem(args);
      EXPECT_EQ(r.exit_code, 1) << url << ": " << r.out << r.err;
      EXPECT_EQ(r.out, "");
      EXPECT_THAT(r.err, HasSubstr("store " + url + ": ")) << url;
      EXPECT_THAT(r.err, HasSubstr("does not exist")) << url;
    }
  }
  EXPECT_FALSE(std::filesystem::exists(dir_.file("gone.db")));
  EXPECT_FALSE(std::filesystem::exists(dir_.file("gone-db")));
  EXPECT_FALSE(std::filesystem::exists(dir_.file("idem-db")));
}

// The commands that only look (and the worker, which resumes what is there) never
// create a store where none is, given by --store or by the config's [serve] store:
// a clear error naming it, exit 1, and no file or directory left behind.
class LookingCommandTest : public RetentionCliTest,
                           public ::testing::WithParamInterface<std::vector<std::string>> {};

TEST_P(LookingCommandTest, OnAMissingStoreCreatesNothing) {
  for (const std::string& url :
       {"sqlite://" + dir_.file("gone.db"), "rocksdb://" + dir_.file("gone-db")}) {
    Write(config_, "[serve]\nstore = \"" + url + "\"\n");
    std::vector<std::string> with_store = GetParam();
    with_store.insert(with_store.end(), {"--store", url});
    std::vector<std::string> with_config = {"--config", config_};
    with_config.insert(with_config.end(), GetParam().begin(), GetParam().end());
    for (const std::vector<std::string>& args : {with_store, with_config}) {
      RunResult r = Idem(args);
      EXPECT_EQ(r.exit_code, 1) << url << " " << args[0] << ": " << r.out << r.err;
      EXPECT_THAT(r.err, HasSubstr("store " + url + ": ")) << url << " " << args[0];
      EXPECT_THAT(r.err, HasSubstr("does not exist")) << url << " " << args[0];
    }
  }
  EXPECT_FALSE(std::filesystem::exists(dir_.file("gone.db")));
  EXPECT_FALSE(std::filesystem::exists(dir_.file("gone-db")));
  EXPECT_FALSE(std::filesystem::exists(dir_.file("idem-db")));
}

INSTANTIATE_TEST_SUITE_P(
    Commands, LookingCommandTest,
    ::testing::Values(std::vector<std::string>{"records", "list"},
                      std::vector<std::string>{"inspect", "--key", "K-1"},
                      std::vector<std::string>{"keys", "analyze"},
                      std::vector<std::string>{"stuck"},
                      std::vector<std::string>{"stuck", "--resolve", "x", "--note", "by hand"},
                      std::vector<std::string>{"worker", "--once", "--refund-channel",
                                               "http://127.0.0.1:1"}),
    [](const ::testing::TestParamInfo<std::vector<std::string>>& info) {
      std::string name;
      for (const std::string& a : info.param) {
        for (char c : a) {
          if (std::isalnum(static_cast<unsigned char>(c))) name += c;
        }
      }
      return name;
    });

TEST_F(RetentionCliTest, RecordsListFiltersAndIsReadOnly) {
  Seed("acme", "refund", "R-1", "done", 100 * kDay);
  Seed("acme", "refund", "R-2", "lease", 1 * kDay);
  Seed("acme", "payout", "P-1", "done", 1 * kDay);
  Seed("beta", "refund", "B-1", "failed", 1 * kDay);
  const std::string before = ReadWholeFile(dir_.file("idem.db"));

  RunResult all = Idem({"records", "list", "--store", url_, "--json"});
  ASSERT_EQ(all.exit_code, 0) << all.err;
  json j = json::parse(all.out);
  ASSERT_EQ(j["records"].size(), 4u);
  EXPECT_FALSE(j["records"][0].contains("result"));  // lists carry no results

  RunResult acme = Idem(
      {"records", "list", "--store", url_, "--tenant", "acme", "--biz-type", "refund", "--json"});
  ASSERT_EQ(acme.exit_code, 0) << acme.err;
  std::vector<std::string> keys;
  const json page = json::parse(acme.out);
  for (const json& r : page["records"]) keys.push_back(r["key"]);
  EXPECT_THAT(keys, ::testing::ElementsAre("R-1", "R-2"));

  RunResult processing = Idem({"records", "list", "--store", url_, "--state", "PROCESSING"});
  ASSERT_EQ(processing.exit_code, 0) << processing.err;
  EXPECT_THAT(processing.out, HasSubstr("R-2"));
  EXPECT_THAT(processing.out, Not(HasSubstr("R-1")));
  EXPECT_THAT(processing.out, HasSubstr("EXPIRES_AT"));

  RunResult old = Idem({"records", "list", "--store", url_, "--older-than", "30d", "--json"});
  ASSERT_EQ(old.exit_code, 0) << old.err;
  ASSERT_EQ(json::parse(old.out)["records"].size(), 1u);
  EXPECT_EQ(json::parse(old.out)["records"][0]["key"], "R-1");
  EXPECT_TRUE(json::parse(old.out)["records"][0]["expires_at"].is_string());

  // --expired: what purge would take now.
  RunResult expired = Idem({"--config", config_, "records", "list", "--store", url_, "--expired"});
  ASSERT_EQ(expired.exit_code, 0) << expired.err;
  EXPECT_THAT(expired.out, HasSubstr("R-1"));
  EXPECT_THAT(expired.out, Not(HasSubstr("B-1")));

  RunResult limited = Idem({"records", "list", "--store", url_, "--limit", "2", "--json"});
  ASSERT_EQ(limited.exit_code, 0);
  EXPECT_EQ(json::parse(limited.out)["records"].size(), 2u);

  EXPECT_EQ(ReadWholeFile(dir_.file("idem.db")), before);  // read-only: nothing changed

  RunResult bad = Idem({"records", "list", "--store", url_, "--state", "DONE"});
  EXPECT_EQ(bad.exit_code, 2);
  RunResult missing = Idem({"records", "list", "--store", "sqlite://" + dir_.file("none.db")});
  EXPECT_EQ(missing.exit_code, 1);
  struct stat st;
  EXPECT_NE(stat(dir_.file("none.db").c_str(), &st), 0);
  RunResult no_sub = Idem({"records"});
  EXPECT_EQ(no_sub.exit_code, 2);
}

TEST_F(RetentionCliTest, TombstonesAreListedApart) {
  Seed("t", "refund", "old", "done", 100 * kDay);
  ASSERT_EQ(Idem({"--config", config_, "purge", "--store", url_}).exit_code, 0);
  RunResult live = Idem({"records", "list", "--store", url_});
  EXPECT_THAT(live.out, HasSubstr("no records"));
  RunResult tombs = Idem({"records", "list", "--store", url_, "--tombstones", "--json"});
  ASSERT_EQ(tombs.exit_code, 0) << tombs.err;
  json j = json::parse(tombs.out);
  ASSERT_EQ(j["records"].size(), 1u);
  EXPECT_TRUE(j["records"][0]["purged_at"].is_string());
}

// The journal is purged by the same rules: a finished operation of an op_type with a
// retention section goes once its TTL has passed; one that needs a person never.
TEST_F(RetentionCliTest, FinishedStepOperationsArePurged) {
  absl::StatusOr<std::unique_ptr<Store>> store = OpenStore(url_);
  ASSERT_TRUE(store.ok());
  FakeClock clock(absl::Now() - 100 * kDay);
  StepRunner runner(**store, StepRunnerOptions{.clock = &clock});
  OperationType type;
  type.name = "refund";
  Step ledger;
  ledger.name = "ledger";
  ledger.execute = [](StepContext&) -> absl::StatusOr<std::string> { return std::string("ok"); };
  type.steps.push_back(std::move(ledger));
  ASSERT_TRUE(runner.Register(type).ok());
  absl::StatusOr<OperationState> op =
      runner.Run({.type = "refund", .biz_key = "OP-1", .input = "{}"});
  ASSERT_TRUE(op.ok()) << op.status();
  ASSERT_EQ(op->status, OperationStatus::kSuccess);
  store->reset();

  RunResult run = Idem({"--config", config_, "purge", "--store", url_, "--json"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(json::parse(run.out)["operations_deleted"], 1);
  RunResult no_journal = Idem({"--config", config_, "purge", "--store", url_, "--json"});
  EXPECT_EQ(json::parse(no_journal.out)["operations_deleted"], 0);
}

}  // namespace
}  // namespace idem::testing
