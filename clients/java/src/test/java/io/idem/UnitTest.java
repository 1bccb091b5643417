package io.idem;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.reflect.Proxy;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.DatabaseMetaData;
import java.sql.SQLException;
import java.sql.SQLTimeoutException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.function.Consumer;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.function.Executable;

/** The client's parts that need no database or server. */
@Tag("unit")
class UnitTest {
  // ---- validation before any I/O ----------------------------------------------

  /** A Connection that records every method called on it (and on its metadata). */
  static Connection recording(List<String> calls, String product) {
    DatabaseMetaData md = (DatabaseMetaData) Proxy.newProxyInstance(
        UnitTest.class.getClassLoader(), new Class<?>[] {DatabaseMetaData.class},
        (p, m, a) -> {
          calls.add("metadata." + m.getName());
          if (m.getName().equals("getDatabaseProductName")) {
            return product;
          }
          throw new AssertionError("metadata." + m.getName() + " called");
        });
    return (Connection) Proxy.newProxyInstance(UnitTest.class.getClassLoader(),
        new Class<?>[] {Connection.class}, (p, m, a) -> {
          calls.add(m.getName());
          if (m.getName().equals("getMetaData")) {
            return md;
          }
          throw new AssertionError("Connection." + m.getName() + " called before validation");
        });
  }

  static final String LONG = "k".repeat(256);

  /** Idem.run with req and opt refuses before any statement, naming field. */
  static void refusedBeforeIo(Request req, Options opt, String product, String field) {
    List<String> calls = new ArrayList<>();
    List<String> bodyRuns = new ArrayList<>();
    IdemException e = assertThrows(IdemException.class, () -> Idem.run(recording(calls, product),
        req, opt, c -> {
          bodyRuns.add("ran");
          return "{}";
        }));
    assertEquals(IdemException.Kind.INVALID_REQUEST, e.kind(), e.getMessage());
    assertTrue(e.getMessage().startsWith("idem: invalid_request: " + field + " "),
        "'" + e.getMessage() + "' names " + field);
    for (String call : calls) {
      assertTrue(call.equals("getMetaData") || call.equals("metadata.getDatabaseProductName"),
          "called " + calls + " before refusing");
    }
    assertEquals(List.of(), bodyRuns);
  }

  @Test
  void everyFieldIsCheckedBeforeAnyStatement() {
    Options o = Options.DEFAULTS;
    refusedBeforeIo(new Request("refund", ""), o, "PostgreSQL", "key");
    refusedBeforeIo(new Request("refund", null), o, "PostgreSQL", "key");
    refusedBeforeIo(new Request("refund", LONG), o, "PostgreSQL", "key");
    refusedBeforeIo(new Request("refund", "é".repeat(128)), o, "PostgreSQL", "key"); // 256 bytes
    refusedBeforeIo(new Request("refund", "K\0NUL"), o, "PostgreSQL", "key");
    refusedBeforeIo(new Request("refund", "K\uD800"), o, "PostgreSQL", "key");
    refusedBeforeIo(new Request("", "K"), o, "PostgreSQL", "biz_type");
    refusedBeforeIo(new Request(null, "K"), o, "PostgreSQL", "biz_type");
    refusedBeforeIo(new Request(LONG, "K"), o, "PostgreSQL", "biz_type");
    refusedBeforeIo(new Request("a\0b", "K"), o, "PostgreSQL", "biz_type");
    refusedBeforeIo(new Request("refund", "K", "f".repeat(1025)), o, "PostgreSQL", "fingerprint");
    refusedBeforeIo(new Request("refund", "K", "f\0"), o, "PostgreSQL", "fingerprint");
    // MySQL/MariaDB's column holds 255 bytes: named or detected, refused before I/O.
    refusedBeforeIo(new Request("refund", "K", "f".repeat(256)), o.withDialect(Dialect.MYSQL),
        "MariaDB", "fingerprint");
    refusedBeforeIo(new Request("refund", "K", "f".repeat(256)), o, "MariaDB", "fingerprint");
    refusedBeforeIo(new Request("refund", "K", "f".repeat(256)), o, "MySQL", "fingerprint");
    refusedBeforeIo(new Request("refund", "K"), o.withTenant(""), "PostgreSQL", "tenant");
    refusedBeforeIo(new Request("refund", "K"), o.withTenant(null), "PostgreSQL", "tenant");
    refusedBeforeIo(new Request("refund", "K"), o.withTenant(LONG), "PostgreSQL", "tenant");
    refusedBeforeIo(new Request("refund", "K"), o.withTenant("t\0"), "PostgreSQL", "tenant");
    refusedBeforeIo(new Request("refund", "K"), o.withRetention(Duration.ZERO), "PostgreSQL",
        "retention");
    refusedBeforeIo(new Request("refund", "K"), o.withRetention(Duration.ofSeconds(-1)),
        "PostgreSQL", "retention");
  }

  @Test
  void boundsAreInclusive() {
    new Request("b".repeat(255), "k".repeat(255), "f".repeat(1024)).validate();
    new Request("refund", "é".repeat(127) + "k", "f".repeat(255))
        .validate(Dialect.MYSQL.maxFingerprintBytes());
    new Request("refund", "\uD83D\uDE00").validate(); // a surrogate pair is UTF-8 text
  }

  @Test
  void anUnknownDatabaseIsRefusedNamingIt() {
    List<String> calls = new ArrayList<>();
    IdemException e = assertThrows(IdemException.class, () -> Idem.run(
        recording(calls, "SQLite"), new Request("refund", "K"), c -> "{}"));
    assertTrue(e.getMessage().contains("'SQLite'"), e.getMessage());
    assertEquals(Dialect.POSTGRES, Dialect.ofProductName("PostgreSQL"));
    assertEquals(Dialect.MYSQL, Dialect.ofProductName("MariaDB"));
    assertEquals(Dialect.MYSQL, Dialect.ofProductName("MySQL"));
  }

  // ---- fingerprints and JSON ------------------------------------------------------

  @Test
  void fingerprintIsHexSha256() {
    assertEquals("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
        Idem.fingerprint("abc".getBytes(StandardCharsets.UTF_8)));
  }

  @Test
  void fingerprintJsonIsTheCanonicalForm() {
    // The canonical form of clients/CASES.md: names sorted by code point (U+FFFF before
    // U+1F600, unlike UTF-16 order), numbers as written, \b as itself, U+2028 unescaped.
    String in = "{\"b\": [1, 2.50, {\"z\": null, \"a\": true}], \"a\": \"x\u00e9\\u2028\\b\\u0001<\","
        + " \"\u00e9\": 1, \"z\": 2, \"\uD83D\uDE00\": 3, \"\uffff\": 4}";
    assertEquals("{\"a\":\"x\u00e9\u2028\\b\\u0001<\",\"b\":[1,2.50,{\"a\":true,\"z\":null}],"
        + "\"z\":2,\"\u00e9\":1,\"\uffff\":4,\"\uD83D\uDE00\":3}", Json.canonical(in));
    assertEquals("65e1b4571da3a649c9e80b635e76f247dc4ef000198f592f769fea2a1cd44a05",
        Idem.fingerprintJson(in));
    assertEquals(Idem.fingerprintJson("{\"a\":1,\"b\":2}"),
        Idem.fingerprintJson(" { \"b\" : 2 ,\n\"a\":1 } "));
    assertThrows(Json.SyntaxException.class, () -> Idem.fingerprintJson("{\"a\":1} {}"));
  }

  /** The canonical_json cases of the shared table (clients/cases.json, $IDEM_CASES). */
  @Test
  void canonicalJsonAnswersTheSharedCases() throws Exception {
    List<Node> cases = CasesTest.table().get("canonical_json").items();
    assertFalse(cases.isEmpty(), "cases.json has no canonical_json cases");
    for (Node c : cases) {
      String name = c.get("name").str();
      String in = c.get("json").str();
      if (c.has("error")) {
        assertTrue(c.get("error").bool(), name);
        Json.SyntaxException e = assertThrows(Json.SyntaxException.class, () -> Json.canonical(in),
            name);
        assertThrows(Json.SyntaxException.class, () -> Idem.fingerprintJson(in), name);
        assertTrue(e.getMessage().contains("lone surrogate"), name + ": " + e.getMessage());
        continue;
      }
      assertEquals(c.get("canonical").str(), Json.canonical(in), name);
      assertEquals(c.get("sha256").str(), Idem.fingerprintJson(in), name);
    }
  }

  @Test
  void canonicalJsonRefusesALoneSurrogateInTheText() {
    // A Java string may hold a lone surrogate as itself, not only as an escape.
    Json.SyntaxException e = assertThrows(Json.SyntaxException.class,
        () -> Json.canonical("{\"a\": [\"x\uD800\"]}"));
    assertEquals("not JSON: a lone surrogate \\ud800 in the string at offset 7", e.getMessage());
  }

  @Test
  void jsonReaderKeepsMembersExactly() {
    String text = "{\"outcome\":\"replayed\", \"result\" : {\"refund_id\": \"F-1\", \"amount\": 12.50},"
        + "\"error\":null,\"n\":[1, 2 ]}";
    Map<String, String> raw = Json.rawMembers(text);
    assertEquals("{\"refund_id\": \"F-1\", \"amount\": 12.50}", raw.get("result"));
    assertEquals("null", raw.get("error"));
    assertEquals("[1, 2 ]", raw.get("n"));
    assertEquals(List.of("1", "2"), Json.rawElements(raw.get("n")));
    assertTrue(Json.sameValue(Json.parse("{\"a\":1.0,\"b\":[true]}"),
        Json.parse("{\"b\":[true],\"a\":1}")));
    assertFalse(Json.sameValue(Json.parse("{\"a\":1}"), Json.parse("{\"a\":\"1\"}")));
    assertEquals("\"q\\\"\\\\\\n\u00e9\"", Json.write("q\"\\\n\u00e9"));
    assertEquals("a\u00e9\uD83D\uDE00", Json.parse("\"a\\u00e9\\ud83d\\ude00\""));
  }

  @Test
  void jsonReaderRefusesWhatIsNotJson() {
    for (String bad : new String[] {"", "{", "{\"a\"}", "[1,]", "01", "1.", "-", "tru", "\"\\x\"",
        "\"\\u00zz\"", "\"\\u+0ff\"", "\"a\nb\"", "{\"a\":1,}", "1 2", "NaN", "[".repeat(600)}) {
      assertFalse(Json.isValid(bad), bad);
    }
    for (String good : new String[] {"0", "-0.5e+10", "\"\"", "[]", "{}", " null ", "[[[]]]"}) {
      assertTrue(Json.isValid(good), good);
    }
  }

  // ---- permanent failures, retries, transient faults ---------------------------------

  @Test
  void permanentFailureJson() {
    assertEquals("{\"error\":\"card \\\"declined\\\"\"}",
        new PermanentException("card \"declined\"").failureJson());
    assertEquals("{\"code\":\"DECLINED\"}",
        new PermanentException("declined", "{\"code\":\"DECLINED\"}").failureJson());
    IdemException e = assertThrows(IdemException.class,
        () -> new PermanentException("x", "{not json"));
    assertEquals(IdemException.Kind.INVALID_REQUEST, e.kind());
    IllegalStateException cause = new IllegalStateException("unknown order");
    PermanentException p = Idem.permanent(cause);
    assertEquals("{\"error\":\"unknown order\"}", p.failureJson());
    assertTrue(Idem.isPermanent(new RuntimeException(p)));
    assertFalse(Idem.isPermanent(cause));
  }

  @Test
  void retryDelaysAreFullJitterUnderTheCap() {
    Retry r = Retry.DEFAULT;
    assertEquals(8, r.attempts());
    for (int i = 0; i < 200; i++) {
      assertTrue(r.delay(1).toMillis() < 10);
      assertTrue(r.delay(3).toMillis() < 40);
      assertTrue(r.delay(30).compareTo(Duration.ofSeconds(1)) < 0);
    }
    assertEquals(Duration.ZERO, Retry.NONE.delay(1));
    assertEquals(1, new Retry(0, Duration.ZERO, Duration.ZERO).attempts());
  }

  @Test
  void transientFaults() {
    Consumer<SQLException> yes = e -> assertTrue(Transient.isTransient(e), e.toString());
    Consumer<SQLException> no = e -> assertFalse(Transient.isTransient(e), e.toString());
    yes.accept(new SQLException("serialization", "40001"));
    yes.accept(new SQLException("deadlock", "40P01"));
    yes.accept(new SQLException("connection", "08006"));
    yes.accept(new SQLException("terminated", "57P01"));
    yes.accept(new SQLException("deadlock", "40001", 1213));
    yes.accept(new SQLException("lock wait", "HY000", 1205));
    yes.accept(new SQLException("killed", "70100", 1927));
    no.accept(new SQLException("cancelled", "57014"));
    no.accept(new SQLException("unique", "23505"));
    no.accept(new SQLException("bad argument", "22023"));
    no.accept(new SQLTimeoutException("timeout", "08000"));
    assertTrue(Transient.isTransient(new RuntimeException(new SQLException("x", "40001"))));
    assertFalse(Transient.isTransient(new PermanentException("x", new SQLException("x", "40001"))));
  }

  @Test
  void versionIsTheProjectsAndTheJarsManifests() throws Exception {
    assertTrue(Idem.VERSION.matches("[0-9]+\\.[0-9]+\\.[0-9]+.*"), Idem.VERSION);
    // The jar Idem was loaded from (the test classes share its package, so read the
    // manifest itself rather than Package's view of it).
    java.net.URL jar = Idem.class.getProtectionDomain().getCodeSource().getLocation();
    try (java.util.jar.JarFile f = new java.util.jar.JarFile(new java.io.File(jar.toURI()))) {
      assertEquals(Idem.VERSION,
          f.getManifest().getMainAttributes().getValue("Implementation-Version"));
    }
  }

  // ---- the HTTP client's checks ------------------------------------------------------

  @Test
  void clientRefusesBadInputBeforeSending() throws Exception {
    try (FakeServer s = new FakeServer()) {
      Client c = s.client();
      Map<String, Executable> bad = new java.util.LinkedHashMap<>();
      bad.put("key", () -> c.claim(new ClaimRequest("refund", "", null)));
      bad.put("key ", () -> c.claim(new ClaimRequest("refund", LONG, null)));
      bad.put("key  ", () -> c.claim(new ClaimRequest("refund", "a\0b", null)));
      bad.put("biz_type", () -> c.claim(new ClaimRequest("", "K", null)));
      bad.put("fingerprint", () -> c.claim(new ClaimRequest("refund", "K", "f".repeat(1025))));
      bad.put("lease_ms", () -> c.claim(new ClaimRequest("refund", "K", null, 50, 0)));
      bad.put("wait_ms", () -> c.claim(new ClaimRequest("refund", "K", null, 0, 30001)));
      bad.put("result", () -> c.complete("refund", "K", 1, "{bad"));
      bad.put("error", () -> c.fail("refund", "K", 1, false, "'x'"));
      bad.put("key   ", () -> c.complete("refund", "", 1, "{}"));
      bad.put("biz_type ", () -> c.getRecord("", "K"));
      bad.put("state", () -> c.listRecords(new RecordQuery(null, "DONE", 0, null)));
      bad.put("limit", () -> c.listRecords(new RecordQuery(null, null, -1, null)));
      bad.put("requests", () -> c.batch(List.of()));
      bad.put("wait_ms ", () -> BatchItem.claim(new ClaimRequest("refund", "K", null, 0, 10)));
      for (Map.Entry<String, Executable> e : bad.entrySet()) {
        IdemException x = assertThrows(IdemException.class, e.getValue(), e.getKey());
        assertEquals(IdemException.Kind.INVALID_REQUEST, x.kind());
        assertFalse(x instanceof ProblemException, x.getMessage());
        assertTrue(x.getMessage().startsWith("idem: invalid_request: " + e.getKey().trim() + " "),
            x.getMessage());
      }
      assertEquals(0, s.requests.size());
      assertThrows(IdemException.class, () -> new Client("ftp://x", "t"));
      assertThrows(IdemException.class, () -> new Client("http://x", "a\nb"));
    }
  }

  @Test
  void resultsTravelAsExactBytes() throws Exception {
    try (FakeServer s = new FakeServer()) {
      String stored = "{\"refund_id\": \"F-1\", \"amount\": 12.50}";
      s.answer(200, "{\"outcome\":\"replayed\",\"token\":3,\"result\": " + stored
          + " ,\"expires_at\":null}", Map.of("Idempotent-Replayed", "true"));
      Claim claim = s.client().claim(new ClaimRequest("refund", "K", "fp"));
      assertEquals(Outcome.REPLAYED, claim.outcome());
      assertEquals(stored, claim.result());
      assertTrue(claim.replayed());
      assertNull(claim.error());
      assertEquals("{\"biz_type\":\"refund\",\"key\":\"K\",\"fingerprint\":\"fp\"}",
          s.requests.get(0).body());
      assertTrue(s.requests.get(0).header("Authorization").equals("Bearer token"));
      s.answer(200, "{\"outcome\":\"completed\"}", Map.of());
      assertEquals("completed", s.client().complete("refund", "K", 3, stored));
      assertEquals("{\"biz_type\":\"refund\",\"key\":\"K\",\"token\":3,\"result\":" + stored + "}",
          s.requests.get(1).body());
      assertEquals("/v1/claims/complete", s.requests.get(1).path());
    }
  }

  @Test
  void unavailableAnswersAreSentAgainHonouringRetryAfter() throws Exception {
    try (FakeServer s = new FakeServer()) {
      String problem = "{\"type\":\"urn:idem:problem:unavailable\",\"title\":\"Store unavailable\","
          + "\"status\":503,\"detail\":\"the store is down\",\"outcome\":\"unavailable\"}";
      s.answer(503, problem, Map.of("Retry-After", "1"));
      s.answer(502, "bad gateway", Map.of());
      s.answer(201, "{\"outcome\":\"acquired\",\"token\":7,\"lease_until\":"
          + "\"2024-06-18T07:13:30.123Z\",\"takeover\":false,\"expires_at\":null}", Map.of());
      long start = System.nanoTime();
      Claim claim = s.client().claim(new ClaimRequest("refund", "K", null));
      long ms = (System.nanoTime() - start) / 1_000_000;
      assertEquals(Outcome.ACQUIRED, claim.outcome());
      assertEquals(7, claim.token());
      assertEquals("2024-06-18T07:13:30.123Z", claim.leaseUntil().toString());
      assertEquals(3, s.requests.size());
      assertTrue(ms >= 1000, "waited " + ms + " ms, not the Retry-After of 1 s");
      // The same call: one request id for the call and its resends.
      assertEquals(s.requests.get(0).header("X-Request-Id"), s.requests.get(2).header("X-Request-Id"));
      // Out of attempts: the last answer, UNAVAILABLE, with the attempts made.
      for (int i = 0; i < 3; i++) {
        s.answer(504, "timeout", Map.of());
      }
      Client few = new Client(s.url(), "token", java.net.http.HttpClient.newHttpClient(),
          new Retry(3, Duration.ofMillis(1), Duration.ofMillis(5)), Duration.ofSeconds(5), 1 << 20);
      ProblemException p = assertThrows(ProblemException.class,
          () -> few.claim(new ClaimRequest("refund", "K", null)));
      assertEquals(IdemException.Kind.UNAVAILABLE, p.kind());
      assertEquals(504, p.status());
      assertEquals(3, p.attempts());
    }
  }

  @Test
  void noAnswerIsSentAgainThenUnavailable() throws Exception {
    String url;
    try (FakeServer s = new FakeServer()) {
      url = s.url(); // closed below: nothing listens there any more
    }
    Client c = new Client(url, "token", java.net.http.HttpClient.newHttpClient(),
        new Retry(3, Duration.ofMillis(1), Duration.ofMillis(5)), Duration.ofSeconds(5), 1 << 20);
    ProblemException p = assertThrows(ProblemException.class,
        () -> c.claim(new ClaimRequest("refund", "K", null)));
    assertEquals(IdemException.Kind.UNAVAILABLE, p.kind());
    assertEquals(0, p.status());
    assertEquals(3, p.attempts());
    assertTrue(p.getCause() instanceof java.io.IOException, String.valueOf(p.getCause()));
  }

  @Test
  void problemsAreTyped() throws Exception {
    try (FakeServer s = new FakeServer()) {
      s.answer(409, "{\"type\":\"urn:idem:problem:in_progress\",\"title\":\"In progress\","
          + "\"status\":409,\"detail\":\"held\",\"outcome\":\"in_progress\",\"lease_until\":"
          + "\"2024-06-18T07:13:30.123Z\"}", Map.of("Retry-After", "2", "X-Request-Id", "rid-1"));
      ProblemException p = assertThrows(ProblemException.class,
          () -> s.client().claim(new ClaimRequest("refund", "K", null)));
      assertEquals(IdemException.Kind.IN_PROGRESS, p.kind());
      assertEquals(Duration.ofSeconds(2), p.retryAfter());
      assertEquals("2024-06-18T07:13:30.123Z", p.leaseUntil().toString());
      assertEquals("rid-1", p.requestId());
      assertEquals(1, p.attempts());
      assertEquals("idem: 409 in_progress: held (request id rid-1)", p.getMessage());
      String[][] kinds = {{"409", "lease_lost"}, {"409", "conflict"}, {"404", "not_found"},
          {"410", "expired"}, {"422", "fingerprint_mismatch"}, {"409", "key_reused"},
          {"400", "invalid_request"}};
      for (String[] k : kinds) {
        s.answer(Integer.parseInt(k[0]), "{\"type\":\"urn:idem:problem:" + k[1]
            + "\",\"title\":\"t\",\"status\":" + k[0] + ",\"detail\":\"d\"}", Map.of());
        ProblemException x = assertThrows(ProblemException.class,
            () -> s.client().complete("refund", "K", 1, "{}"));
        assertEquals(k[1], x.kind().slug());
        assertEquals(Integer.parseInt(k[0]), x.status());
      }
      s.answer(401, "no", Map.of());
      ProblemException x = assertThrows(ProblemException.class,
          () -> s.client().getRecord("refund", "a b/c"));
      assertEquals(IdemException.Kind.OTHER, x.kind());
      assertEquals("/v1/records/refund/a%20b%2Fc", s.requests.get(s.requests.size() - 1).rawPath());
    }
  }
}
