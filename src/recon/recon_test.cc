// The pieces of reconciliation on their own: exact decimals, times, the statement
// readers' formats and bad input, the sorter's spill and the comparer's classes
// and window.
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "recon/comparer.h"
#include "recon/decimal.h"
#include "recon/fields.h"
#include "recon/recon_time.h"
#include "recon/replay_headers.h"
#include "recon/report.h"
#include "recon/row_sorter.h"
#include "recon/statement_readers.h"
#include "testing/status_matchers.h"
#include "testing/temp_dir.h"

namespace idem::recon {
namespace {

using ::testing::HasSubstr;

TEST(Decimal, CanonicalAtScale) {
  EXPECT_EQ(*ParseDecimal("1250", 2), "12.5");
  EXPECT_EQ(*ParseDecimal("12.50", 0), "12.5");
  EXPECT_EQ(*ParseDecimal("012.500", 0), "12.5");
  EXPECT_EQ(*ParseDecimal("-0.00", 0), "0");
  EXPECT_EQ(*ParseDecimal("5", 3), "0.005");
  EXPECT_EQ(*ParseDecimal(" +3 ", 0), "3");
  EXPECT_EQ(*ParseDecimal(".5", 0), "0.5");
  EXPECT_EQ(*ParseDecimal("-1250", 2), "-12.5");
  EXPECT_EQ(*ParseDecimal("99999999999999999999.99", 0), "99999999999999999999.99");
  // 0.1 + 0.2 style values stay exact: no double on the way.
  EXPECT_EQ(*ParseDecimal("0.30000000000000001", 0), "0.30000000000000001");
  for (const char* bad : {"", "1e5", "1,000.00", "$3", "1.2.3", "-", "12a", "."}) {
    EXPECT_EQ(ParseDecimal(bad, 0).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(Time, Rfc3339AndZoned) {
  const absl::TimeZone utc = absl::UTCTimeZone();
  EXPECT_EQ(*ParseTimeUs("1970-01-01T00:00:01Z", utc), 1000000);
  EXPECT_EQ(*ParseTimeUs("1970-01-01T08:00:01+08:00", utc), 1000000);
  EXPECT_EQ(*ParseTimeUs("1970-01-01 00:00:01.25", utc), 1250000);
  EXPECT_EQ(*ParseTimeUs("1970-01-01 00:00:00+00", utc), 0);  // PostgreSQL's timestamptz text
  ASSERT_OK_AND_ASSIGN(absl::TimeZone shanghai, ParseTimeZone("Asia/Shanghai"));
  EXPECT_EQ(*ParseTimeUs("2024-06-18 08:00:00", shanghai),
            *ParseTimeUs("2024-06-18T00:00:00Z", utc));
  ASSERT_OK_AND_ASSIGN(absl::TimeZone plus8, ParseTimeZone("+08:00"));
  EXPECT_EQ(*ParseTimeUs("2024-06-18 08:00:00", plus8), *ParseTimeUs("2024-06-18T00:00:00Z", utc));
  for (const char* bad : {"2024-06-18", "2024-02-30 00:00:00", "18/06/2024 10:00:00",
                          "2024-06-18T10:00:00+25:00", "yesterday"}) {
    EXPECT_EQ(ParseTimeUs(bad, utc).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_EQ(FormatTimeUs(1250000), "1970-01-01T00:00:01.250000Z");
  EXPECT_EQ(FormatTimeUs(0), "1970-01-01T00:00:00Z");
  EXPECT_FALSE(ParseTimeZone("Mars/Olympus").ok());
  EXPECT_EQ(*ParseDurationFlag("2d", false), absl::Hours(48));
  EXPECT_EQ(*ParseDurationFlag("1h30m", false), absl::Minutes(90));
  EXPECT_FALSE(ParseDurationFlag("0s", false).ok());
  EXPECT_FALSE(ParseDurationFlag("soon", true).ok());
}

TEST(ColumnMap, Parse) {
  ASSERT_OK_AND_ASSIGN(ColumnMap m, ParseColumnMap("key=out_trade_no, amount=total_fee"));
  EXPECT_EQ(m.column(Field::kKey), "out_trade_no");
  EXPECT_EQ(m.column(Field::kAmount), "total_fee");
  EXPECT_FALSE(m.has(Field::kTime));
  EXPECT_FALSE(ParseColumnMap("amount=x").ok());
  EXPECT_FALSE(ParseColumnMap("key=a,colour=b").ok());
  EXPECT_FALSE(ParseColumnMap("key=a,key=b").ok());
}

class Statements : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& bytes) {
    const std::string path = dir_.file(name);
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }
  // Every row of the file, or its first error.
  absl::StatusOr<std::vector<Row>> ReadAll(const std::string& path, const std::string& map_text,
                                           StatementOptions options = {}, int scale = 0,
                                           StatusRules rules = {}) {
    rules_ = std::move(rules);
    absl::StatusOr<ColumnMap> map = ParseColumnMap(map_text);
    if (!map.ok()) return map.status();
    norm_ = std::make_unique<Normalizer>(Side::kUpstream, *map, scale, absl::UTCTimeZone(), rules_);
    absl::StatusOr<std::unique_ptr<StatementReader>> r =
        OpenStatement(path, 0, *map, options, *norm_);
    if (!r.ok()) return r.status();
    std::vector<Row> rows;
    Row row;
    while (true) {
      absl::StatusOr<bool> got = (*r)->Next(&row);
      if (!got.ok()) return got.status();
      if (!*got) return rows;
      rows.push_back(row);
    }
  }
  testing::TempDir dir_;
  StatusRules rules_;
  std::unique_ptr<Normalizer> norm_;
};

TEST_F(Statements, CsvWithBomCrlfQuotesAndDelimiter) {
  const std::string path =
      Write("s.csv",
            "\xEF\xBB\xBFno;fee;note;state;when\r\n"
            "A-1;1250;\"with ; and \"\"quotes\"\"\";SUCCESS;2024-06-18 10:00:00\r\n"
            "A-2;\"99\";\"two\r\nlines\";SUCCESS;2024-06-18T10:00:01Z\r\n"
            "\r\n"
            "A-3;7;x;REFUND;2024-06-18 10:00:02");  // no final newline: still a whole row
  ASSERT_OK_AND_ASSIGN(
      std::vector<Row> rows,
      ReadAll(path, "key=no,amount=fee,status=state,time=when", {.delimiter = ';'}, 2));
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].key, "A-1");
  EXPECT_EQ(rows[0].amount, "12.5");
  EXPECT_EQ(rows[0].status, "SUCCESS");
  EXPECT_EQ(rows[0].line, 2);
  EXPECT_EQ(rows[1].amount, "0.99");
  EXPECT_EQ(rows[1].line, 3);
  EXPECT_EQ(rows[2].key, "A-3");
  EXPECT_EQ(rows[2].line, 6);
  EXPECT_EQ(rows[2].time_us, *ParseTimeUs("2024-06-18T10:00:02Z", absl::UTCTimeZone()));
}

TEST_F(Statements, CsvBadInputNamesFileAndLine) {
  struct Case {
    std::string bytes, map, want;
  } cases[] = {
      {"no,fee\nA,1x\n", "key=no,amount=fee", "s.csv:2: malformed amount '1x'"},
      {"no,fee\nA,1\n", "key=no,amount=total", "s.csv:1: no column 'total' (--map amount=total)"},
      {"no,fee\nA,1\nB,\xff\n", "key=no,amount=fee", "s.csv:3: invalid UTF-8 in amount"},
      {"no,fee\nA,1\nB", "key=no,amount=fee",
       "s.csv:3: the last line is truncated: 1 field(s), the header has 2"},
      {"no,fee\nA,1\nB,\"2", "key=no,amount=fee", "s.csv:3: unterminated quoted field"},
      {"no,fee\nA,1,3\n", "key=no,amount=fee", "s.csv:2: 3 field(s), the header has 2"},
      {"no,fee,st\nA,1,WHAT\n", "key=no,amount=fee,status=st", "s.csv:2: unknown status 'WHAT'"},
      {"", "key=no", "s.csv:1: empty file"},
  };
  for (const Case& c : cases) {
    StatusRules rules;
    rules.map = {{"SUCCESS", "PAID"}};
    absl::StatusOr<std::vector<Row>> rows = ReadAll(Write("s.csv", c.bytes), c.map, {}, 0, rules);
    ASSERT_FALSE(rows.ok()) << c.want;
    EXPECT_EQ(rows.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(rows.status().message()), HasSubstr(c.want));
  }
}

TEST_F(Statements, JsonlNumbersStayExact) {
  const std::string path =
      Write("s.jsonl",
            "{\"id\":\"K1\",\"fee\":12.10,\"other\":{\"x\":[1,2]},\"t\":\"2024-06-18T10:00:00Z\"}\n"
            "\n"
            "{\"id\":\"K2\",\"fee\":\"0.30000000000000001\",\"t\":\"2024-06-18T10:00:01Z\"}\r\n");
  ASSERT_OK_AND_ASSIGN(std::vector<Row> rows, ReadAll(path, "key=id,amount=fee,time=t",
                                                      {.format = StatementFormat::kJsonl}));
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].amount, "12.1");
  EXPECT_EQ(rows[1].amount, "0.30000000000000001");
  EXPECT_EQ(rows[1].line, 3);
  absl::StatusOr<std::vector<Row>> truncated =
      ReadAll(Write("t.jsonl", "{\"id\":\"K1\",\"fee\":1}\n{\"id\":\"K2\",\"fe"),
              "key=id,amount=fee", {.format = StatementFormat::kJsonl});
  ASSERT_FALSE(truncated.ok());
  EXPECT_THAT(std::string(truncated.status().message()),
              HasSubstr("t.jsonl:2: the last line is truncated"));
  absl::StatusOr<std::vector<Row>> missing =
      ReadAll(Write("m.jsonl", "{\"id\":\"K1\"}\n"), "key=id,amount=fee",
              {.format = StatementFormat::kJsonl});
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("m.jsonl:1: no member 'fee'"));
}

// A reader over rows held in memory.
class VectorReader final : public StatementReader {
 public:
  explicit VectorReader(std::vector<Row> rows) : rows_(std::move(rows)) {}
  absl::StatusOr<bool> Next(Row* row) override {
    if (at_ >= rows_.size()) return false;
    *row = rows_[at_++];
    return true;
  }
  std::string_view name() const override { return "memory"; }

 private:
  std::vector<Row> rows_;
  size_t at_ = 0;
};

Row R(std::string key, std::string amount, std::string status = "", int64_t t = 0,
      std::string currency = "CNY") {
  Row r;
  r.key = std::move(key);
  r.amount = std::move(amount);
  r.currency = std::move(currency);
  r.status = std::move(status);
  r.time_us = t;
  r.has_time = true;
  return r;
}

TEST(Comparer, EveryClass) {
  StatusRules rules;
  rules.map = {{"SUCCESS", "PAID"}};
  rules.intermediate = {"PENDING"};
  VectorReader up({R("a", "1", "SUCCESS"), R("b", "2", "SUCCESS"), R("c", "3", "SUCCESS"),
                   R("d", "4", "SUCCESS"), R("e", "5", "SUCCESS"), R("e", "5", "SUCCESS"),
                   R("g", "7", "SUCCESS"), R("h", "8", "SUCCESS", 0, "USD")});
  VectorReader local({R("h", "8", "PAID"), R("g", "7", "REFUNDED"), R("f", "6", "PAID"),
                      R("d", "4.5", "PAID"), R("c", "3", "PENDING"), R("a", "1", "PAID"),
                      R("e", "5", "PAID")});
  CompareOptions options;
  options.status = &rules;
  options.compare_status = true;
  ASSERT_OK_AND_ASSIGN(CompareResult r, Compare({&up}, local, options));
  EXPECT_EQ(r.upstream_rows, 8);
  EXPECT_EQ(r.local_rows, 7);
  EXPECT_EQ(r.matched, 1);                                                // a
  EXPECT_EQ(r.counts[static_cast<int>(DiffClass::kMissingLocal)], 1);     // b
  EXPECT_EQ(r.counts[static_cast<int>(DiffClass::kMissingUpstream)], 1);  // f
  EXPECT_EQ(r.counts[static_cast<int>(DiffClass::kStatusMismatch)], 2);   // c (stuck), g
  EXPECT_EQ(r.counts[static_cast<int>(DiffClass::kAmountMismatch)], 2);   // d, h (currency)
  EXPECT_EQ(r.counts[static_cast<int>(DiffClass::kDuplicate)], 1);        // e upstream
  std::vector<std::string> keys;
  for (const Difference& d : r.differences) keys.push_back(d.key);
  EXPECT_THAT(keys, ::testing::ElementsAre("b", "c", "d", "e", "f", "g", "h"));
  EXPECT_TRUE(r.differences[1].stuck);
  EXPECT_FALSE(r.differences[5].stuck);
  EXPECT_EQ(r.differences[3].duplicate_rows, 2);
}

TEST(Comparer, WindowByKeyTimeWithSkew) {
  // Upstream-timed keys in [10, 20); local-only keys in [10 - 2, 20 - 2).
  VectorReader up({R("in", "1", "", 10), R("late-local", "1", "", 19), R("out", "1", "", 20),
                   R("early", "1", "", 9)});
  VectorReader local({R("in", "1", "", 11), R("late-local", "1", "", 21), R("lo-edge", "1", "", 19),
                      R("lo-prev", "1", "", 9), R("lo-old", "1", "", 7), R("out", "1", "", 12)});
  CompareOptions options;
  options.window = {.from_us = 10, .to_us = 20, .skew_us = 2};
  ASSERT_OK_AND_ASSIGN(CompareResult r, Compare({&up}, local, options));
  EXPECT_EQ(r.matched, 2);  // in, late-local (its local row is later than `to`)
  EXPECT_EQ(r.counts[static_cast<int>(DiffClass::kMissingUpstream)], 1);  // lo-prev only
  ASSERT_EQ(r.differences.size(), 1u);
  EXPECT_EQ(r.differences[0].key, "lo-prev");
  EXPECT_EQ(r.upstream_rows, 2);
  EXPECT_EQ(r.local_rows, 3);
}

TEST(RowSorter, SpillsAndMergesInKeyOrderKeepingInputOrderForTies) {
  testing::TempDir dir;
  RowSorter sorter(dir.path(), 4096);  // a few dozen rows a run
  std::vector<std::string> keys;
  for (int i = 0; i < 2000; ++i) {
    Row r = R("k" + std::to_string((i * 7919) % 500), std::to_string(i));
    ASSERT_OK(sorter.Add(r));
  }
  ASSERT_OK(sorter.Finish());
  EXPECT_GT(sorter.runs(), 10);
  Row prev, row;
  int n = 0;
  while (true) {
    ASSERT_OK_AND_ASSIGN(bool got, sorter.Next(&row));
    if (!got) break;
    if (n > 0) {
      ASSERT_LE(prev.key, row.key);
      if (prev.key == row.key) {
        ASSERT_LT(std::stoi(prev.amount), std::stoi(row.amount));
      }
    }
    prev = row;
    ++n;
  }
  EXPECT_EQ(n, 2000);
}

TEST(Report, JsonLineShape) {
  CompareResult r;
  r.upstream_rows = 3;
  r.local_rows = 2;
  r.matched = 1;
  r.counts = {1, 0, 0, 1, 0};
  ReportHeader h{.source = "wx", .from_us = 0, .to_us = 86400000000};
  EXPECT_EQ(JsonLine(h, r),
            "{\"source\":\"wx\",\"from\":\"1970-01-01T00:00:00Z\",\"to\":\"1970-01-02T00:00:00Z\","
            "\"upstream_rows\":3,\"local_rows\":2,\"matched\":1,\"missing_local\":1,"
            "\"missing_upstream\":0,\"status_mismatch\":0,\"amount_mismatch\":1,\"duplicate\":0}");
  const std::string html = HtmlReport(h, r);
  EXPECT_THAT(html, HasSubstr("default-src 'none'"));
  EXPECT_THAT(html, HasSubstr("<svg"));
  EXPECT_THAT(html, ::testing::Not(HasSubstr("src=")));
}

// The replay headers' format: CRLF or LF, comments and blank lines, the spaces
// around a value dropped; a continuation line (obsolete folding), a TAB or DEL in a
// value, a 33rd header are refused with their line.
TEST(ReplayHeaders, FormatAndLimits) {
  ASSERT_OK_AND_ASSIGN(
      const std::vector<Header> h,
      ParseReplayHeaders("# token\r\n\r\n   \nAuthorization:  Bearer a b \r\nX-Empty-Ok:1", "f"));
  EXPECT_THAT(
      h, ::testing::ElementsAre(Header{"Authorization", "Bearer a b"}, Header{"X-Empty-Ok", "1"}));
  for (const auto& [text, why] : std::vector<std::pair<std::string, std::string>>{
           {"X-A: 1\n folded\n", "f:2: a continuation line"},
           {"X-A: a\tb\n", "f:1: the value of X-A holds the control character \\t"},
           {"X-A: a\x7f\n", "f:1: the value of X-A holds the control character \\x7F"},
           {"X-A:\n", "f:1: the value of X-A"},
           {"X-A : 1\n", "f:1: the header name"},
           {":1\n", "f:1: the header name"}}) {
    absl::StatusOr<std::vector<Header>> r = ParseReplayHeaders(text, "f");
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(r.status().message(), HasSubstr(why)) << text;
  }
  std::string many;
  for (int i = 0; i < 33; ++i) many += "X-" + std::to_string(i) + ": v\n";
  absl::StatusOr<std::vector<Header>> r = ParseReplayHeaders(many, "f");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("f:33: more than 32 headers"));
}

}  // namespace
}  // namespace idem::recon
