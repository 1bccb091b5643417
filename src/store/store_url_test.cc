#include "store/store_url.h"

#include "gtest/gtest.h"

namespace idem::store {
namespace {

TEST(RedactUrlTest, DropsThePasswordOfUserinfo) {
  EXPECT_EQ(RedactUrl("postgres://idem:s3cret@db:5432/app"), "postgres://idem@db:5432/app");
  EXPECT_EQ(RedactUrl("mysql://idem:s3cret@[::1]:3306/app?pool=4"), "mysql://idem@[::1]:3306/app?pool=4");
  EXPECT_EQ(RedactUrl("redis://:s3cret@127.0.0.1:6379/0"), "redis://@127.0.0.1:6379/0");
}

TEST(RedactUrlTest, APasswordWithAnAtSignIsDroppedWhole) {
  // The userinfo ends at the last '@' of the authority.
  EXPECT_EQ(RedactUrl("postgres://idem:p@ss:w@rd@db/app"), "postgres://idem@db/app");
}

TEST(RedactUrlTest, DropsSecretQueryParameters) {
  EXPECT_EQ(RedactUrl("postgres://db/app?password=s3cret&pool=2&secret=x&pass=y&passwd=z"),
            "postgres://db/app?pool=2");
  EXPECT_EQ(RedactUrl("postgres://db/app?password=s3cret"), "postgres://db/app");
}

TEST(RedactUrlTest, LeavesUrlsWithoutSecretsAlone) {
  EXPECT_EQ(RedactUrl("sqlite:///var/lib/idem/idem.db?synchronous=full"),
            "sqlite:///var/lib/idem/idem.db?synchronous=full");
  EXPECT_EQ(RedactUrl("sqlite://./idem.db"), "sqlite://./idem.db");
  EXPECT_EQ(RedactUrl("memory://"), "memory://");
  // An '@' in a path is not userinfo.
  EXPECT_EQ(RedactUrl("sqlite:///tmp/a:b@c.db"), "sqlite:///tmp/a:b@c.db");
}

TEST(RedactUrlTest, MalformedInputStillLosesItsSecret) {
  EXPECT_EQ(RedactUrl("idem:s3cret@db/app"), "…@db/app");
  EXPECT_EQ(RedactUrl("bogus://u:s3cret@h"), "bogus://u@h");
  EXPECT_EQ(RedactUrl(""), "");
}

}  // namespace
}  // namespace idem::store
