package io.idem;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.UUID;
import java.util.concurrent.Callable;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.DynamicContainer;
import org.junit.jupiter.api.DynamicNode;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.TestFactory;

/**
 * The shared case table (clients/cases.json, read at test time from $IDEM_CASES; its
 * guide is clients/CASES.md): every decorator case through Idem.run on PostgreSQL and
 * on MariaDB, every http case through Client against an idem serve.
 */
class CasesTest {
  private static final Map<String, TestDb> DBS = new HashMap<>();
  private static Serve serve;

  static Node table() throws Exception {
    String path = System.getenv("IDEM_CASES");
    if (path == null || path.isEmpty()) {
      throw new IllegalStateException("IDEM_CASES is not set: it names clients/cases.json (ctest sets it)");
    }
    Node t = new Node(Files.readString(Path.of(path)));
    assertEquals(1, t.get("version").num(), "cases.json version");
    return t;
  }

  /** Whether a case's "only" leaves this runner in. */
  private static boolean forUs(Node c, String section) {
    Node only = c.get("only");
    if (only == null) {
      return true;
    }
    for (Node n : only.items()) {
      if (n.str().equals(section) || n.str().equals("java")) {
        return true;
      }
    }
    return false;
  }

  static synchronized TestDb db(String env) throws Exception {
    String url = TestDb.urlOf(env); // skips when unset
    TestDb d = DBS.get(url);
    if (d == null) {
      d = TestDb.open(env);
      d.createLedger();
      DBS.put(url, d);
    }
    return d;
  }

  static synchronized Serve serve() throws Exception {
    if (serve == null) {
      serve = new Serve();
    }
    return serve;
  }

  @AfterAll
  static void closeAll() throws Exception {
    for (TestDb d : DBS.values()) {
      d.close();
    }
    DBS.clear();
    if (serve != null) {
      serve.close();
      serve = null;
    }
  }

  @Tag("sql")
  @TestFactory
  Stream<DynamicNode> decorator() throws Exception {
    Node t = table();
    List<DynamicNode> dbs = new ArrayList<>();
    for (String[] env : new String[][] {{"postgres", TestDb.POSTGRES}, {"mariadb", TestDb.MYSQL}}) {
      List<DynamicNode> cases = new ArrayList<>();
      for (Node c : t.get("decorator").items()) {
        if (forUs(c, "sql")) {
          cases.add(DynamicTest.dynamicTest(c.get("name").str(),
              () -> new DecoratorCase(db(env[1]), c).run()));
        }
      }
      dbs.add(DynamicContainer.dynamicContainer(env[0], cases));
    }
    return dbs.stream();
  }

  @Tag("serve")
  @TestFactory
  Stream<DynamicNode> http() throws Exception {
    List<DynamicNode> cases = new ArrayList<>();
    for (Node c : table().get("http").items()) {
      if (forUs(c, "http")) {
        cases.add(DynamicTest.dynamicTest(c.get("name").str(),
            () -> new HttpCase(serve(), c).run()));
      }
    }
    return cases.stream();
  }

  /** Polls purged every 100 ms until it answers true; fails after 10 s. */
  private static void pollPurged(String where, String key, Callable<Boolean> purged)
      throws Exception {
    long deadline = System.currentTimeMillis() + 10_000;
    while (!purged.call()) {
      if (System.currentTimeMillis() > deadline) {
        fail(where + ": the record of " + key + " was not purged within 10 s");
      }
      Thread.sleep(100);
    }
  }

  /** Maps a case's key aliases to keys of its own, new for every run. */
  private static final class Keys {
    final String prefix;
    final Map<String, String> keys = new HashMap<>();

    Keys(String caseName) {
      prefix = "cases-" + caseName + "-";
    }

    String of(Node call) {
      if (call.has("key_literal")) {
        return call.get("key_literal").str();
      }
      return keys.computeIfAbsent(call.get("key").str(),
          a -> prefix + a + "-" + UUID.randomUUID().toString().substring(0, 8));
    }
  }

  /** The canonical outcome name of an exception of a call. */
  private static String outcomeOf(Throwable e) {
    if (e instanceof IdemException i) {
      return i.kind().slug();
    }
    return "error";
  }

  private static void expectResult(Node expect, String got, String what) {
    Node want = expect.get("result");
    if (want != null) {
      assertNotNull(got, what + ": no result, want " + want.raw);
      assertTrue(Json.sameValue(want.value, Json.parse(got)),
          what + ": result " + got + ", want " + want.raw);
    }
  }

  // ---------------------------------------------------------------------------

  /** One decorator case on one database. */
  private static final class DecoratorCase {
    final TestDb db;
    final Node c;
    final String name;
    final Keys keys;
    final AtomicInteger runs = new AtomicInteger();
    final Map<String, Long> claimedAt = new HashMap<>(); // key -> ms of its last claim
    final Map<String, Long> retention = new HashMap<>();

    DecoratorCase(TestDb db, Node c) {
      this.db = db;
      this.c = c;
      this.name = c.get("name").str();
      this.keys = new Keys(name + "-" + db.name);
    }

    void run() throws Exception {
      c.only(name, "name", "steps", "only");
      int i = 0;
      for (Node step : c.get("steps").items()) {
        String where = name + " step " + (++i);
        if (step.has("purge")) {
          step.only(where, "purge");
          purge(step.get("purge"), where);
          continue;
        }
        step.only(where, "call", "expect");
        call(step.get("call"), step.get("expect"), where);
      }
    }

    private void purge(Node p, String where) throws Exception {
      p.only(where, "key", "key_literal", "biz_type");
      String key = keys.of(p);
      Long at = claimedAt.get(key);
      Long keep = retention.get(key);
      assertNotNull(keep, where + ": purge of a key claimed without retention_s");
      long wait = at + keep * 1000 + 100 - System.currentTimeMillis();
      if (wait > 0) {
        Thread.sleep(wait);
      }
      String biz = p.get("biz_type").str();
      pollPurged(where, key, () -> {
        db.purge();
        // Purged when a claim (rolled back) meets the key's tombstone.
        try (Connection conn = db.connect()) {
          conn.setAutoCommit(false);
          String seen = new SqlApi(db.dialect).claim(conn, new Request(biz, key), "default", null)
              .outcome();
          conn.rollback();
          return seen.equals("expired");
        }
      });
    }

    private TxBody handler(Node h, String key, String where) {
      h.only(where + " handler", "returns", "fails", "message", "transient_faults", "sleep_ms");
      long sleep = h.num("sleep_ms", 0);
      long faults = h.num("transient_faults", 0);
      return conn -> {
        int n = runs.incrementAndGet();
        if (sleep > 0) {
          Thread.sleep(sleep);
        }
        if (h.has("fails")) {
          String m = h.get("message").str();
          switch (h.get("fails").str()) {
            case "permanent" -> throw new PermanentException(m);
            case "retryable" -> throw new IllegalStateException(m);
            default -> throw new AssertionError(where + ": unknown fails " + h.get("fails"));
          }
        }
        Node v = h.get("returns");
        if (v == null) {
          throw new AssertionError(where + ": a handler without returns or fails");
        }
        try (PreparedStatement ps = conn.prepareStatement(
            "INSERT INTO ledger (refund_key, refund_id, amount) VALUES (?, ?, 100)")) {
          ps.setString(1, key);
          ps.setString(2, "run-" + n);
          ps.executeUpdate();
        }
        if (n <= faults) {
          db.raiseSerializationFailure(conn);
        }
        return v.raw;
      };
    }

    /** What one call answered: its outcome name, result, stored error, or exception text. */
    private record Answer(String outcome, String result, String error, String message) {}

    private Answer once(Node call, String key, Options opt, String where) {
      Request req = new Request(call.get("biz_type").str(), key, call.str("fingerprint", null));
      try (Connection conn = db.connect()) {
        Result r = Idem.run(conn, req, opt, handler(call.get("handler"), key, where));
        if (!conn.getAutoCommit()) {
          throw new AssertionError(where + ": Idem.run left autocommit off");
        }
        return new Answer(r.outcome().wireName(), r.result(), r.error(), null);
      } catch (Exception e) {
        return new Answer(outcomeOf(e), null, null, String.valueOf(e.getMessage()));
      }
    }

    private void call(Node call, Node expect, String where) throws Exception {
      call.only(where, "key", "key_literal", "biz_type", "fingerprint", "retention_s", "handler",
          "concurrent", "wait_ms");
      expect.only(where + " expect", "outcome", "outcomes", "result", "error_contains",
          "handler_runs", "ledger_rows");
      String key = keys.of(call);
      Options opt = Options.DEFAULTS;
      if (call.has("retention_s")) {
        opt = opt.withRetention(Duration.ofSeconds(call.get("retention_s").num()));
        retention.put(key, call.get("retention_s").num());
      }
      claimedAt.put(key, System.currentTimeMillis());
      int n = (int) call.num("concurrent", 1);
      List<Answer> answers = new ArrayList<>();
      if (n == 1) {
        answers.add(once(call, key, opt, where));
      } else {
        ExecutorService pool = Executors.newFixedThreadPool(n);
        try {
          List<Future<Answer>> fs = new ArrayList<>();
          final Options o = opt;
          for (int i = 0; i < n; i++) {
            fs.add(pool.submit(() -> once(call, key, o, where)));
          }
          for (Future<Answer> f : fs) {
            answers.add(f.get());
          }
        } finally {
          pool.shutdown();
        }
      }
      if (expect.has("outcome")) {
        Answer a = answers.get(0);
        assertEquals(expect.get("outcome").str(), a.outcome(), where + ": outcome (" + a + ")");
      }
      if (expect.has("outcomes")) {
        Map<String, Long> want = new TreeMap<>();
        for (String o : expect.get("outcomes").names()) {
          want.put(o, expect.get("outcomes").get(o).num());
        }
        Map<String, Long> got = new TreeMap<>();
        for (Answer a : answers) {
          got.merge(a.outcome(), 1L, Long::sum);
        }
        assertEquals(want, got, where + ": outcomes " + answers);
      }
      for (Answer a : answers) {
        expectResult(expect, a.result(), where);
        if (expect.has("error_contains")) {
          String text = a.outcome().equals("failed") || a.outcome().equals("cached_failure")
              ? a.error() : a.message();
          String want = expect.get("error_contains").str();
          assertTrue(text != null && text.contains(want),
              where + ": '" + text + "' does not contain '" + want + "'");
        }
      }
      if (expect.has("handler_runs")) {
        assertEquals(expect.get("handler_runs").num(), runs.get(), where + ": handler_runs");
      }
      if (expect.has("ledger_rows")) {
        assertEquals(expect.get("ledger_rows").num(),
            db.count("SELECT COUNT(*) FROM ledger WHERE refund_key LIKE ?", keys.prefix + "%"),
            where + ": ledger_rows");
      }
    }
  }

  // ---------------------------------------------------------------------------

  /** One http case against the server. */
  private static final class HttpCase {
    final Client client;
    final Node c;
    final String name;
    final Keys keys;
    final Map<String, Long> tokens = new HashMap<>();

    HttpCase(Serve s, Node c) {
      this.client = s.client();
      this.c = c;
      this.name = c.get("name").str();
      this.keys = new Keys(name);
    }

    void run() throws Exception {
      c.only(name, "name", "steps", "only");
      int i = 0;
      for (Node step : c.get("steps").items()) {
        String where = name + " step " + (++i);
        if (step.has("sleep_ms")) {
          step.only(where, "sleep_ms");
          Thread.sleep(step.get("sleep_ms").num());
        } else if (step.has("purge")) {
          step.only(where, "purge");
          purge(step.get("purge"), where);
        } else {
          step.only(where, "claim", "complete", "fail", "expect");
          step(step, step.get("expect"), where);
        }
      }
    }

    private void purge(Node p, String where) throws Exception {
      p.only(where, "key", "key_literal", "biz_type");
      String key = keys.of(p);
      pollPurged(where, key, () -> {
        try {
          client.getRecord(p.get("biz_type").str(), key);
          return false;
        } catch (ProblemException e) {
          if (e.kind() == IdemException.Kind.EXPIRED || e.kind() == IdemException.Kind.NOT_FOUND) {
            return true;
          }
          throw e;
        }
      });
    }

    private long token(Node call, String where) {
      Long t = tokens.get(call.get("token").str());
      assertNotNull(t, where + ": no saved token " + call.get("token"));
      return t;
    }

    private void step(Node step, Node expect, String where) {
      expect.only(where + " expect", "outcome", "takeover", "save_token", "result", "error_json",
          "error", "status", "retry_after", "client_side", "error_contains");
      Claim claim = null;
      String outcome = null;
      IdemException err = null;
      try {
        if (step.has("claim")) {
          Node call = step.get("claim");
          call.only(where, "key", "key_literal", "biz_type", "fingerprint", "lease_ms");
          claim = client.claim(new ClaimRequest(call.get("biz_type").str(), keys.of(call),
              call.str("fingerprint", null), (int) call.num("lease_ms", 0), 0));
          outcome = claim.outcome().wireName();
        } else if (step.has("complete")) {
          Node call = step.get("complete");
          call.only(where, "key", "key_literal", "biz_type", "token", "result");
          outcome = client.complete(call.get("biz_type").str(), keys.of(call), token(call, where),
              call.get("result").raw);
        } else {
          Node call = step.get("fail");
          call.only(where, "key", "key_literal", "biz_type", "token", "retryable", "error");
          outcome = client.fail(call.get("biz_type").str(), keys.of(call), token(call, where),
              call.get("retryable").bool(), call.get("error").raw);
        }
      } catch (IdemException e) {
        err = e;
      }
      if (expect.has("error")) {
        assertNotNull(err, where + ": no error, answered " + outcome);
        assertEquals(expect.get("error").str(), err.kind().slug(), where + ": " + err);
        ProblemException p = err instanceof ProblemException x ? x : null;
        if (expect.has("status")) {
          assertNotNull(p, where + ": refused by the client, want status " + expect.get("status"));
          assertEquals(expect.get("status").num(), p.status(), where + ": status");
        }
        if (expect.has("retry_after")) {
          assertEquals(expect.get("retry_after").bool(), p != null && p.retryAfter() != null,
              where + ": retry_after");
        }
        if (expect.has("client_side")) {
          assertEquals(expect.get("client_side").bool(), p == null,
              where + ": client_side (" + err + ")");
        }
        if (expect.has("error_contains")) {
          assertTrue(err.getMessage().contains(expect.get("error_contains").str()),
              where + ": '" + err.getMessage() + "' lacks " + expect.get("error_contains"));
        }
        return;
      }
      if (err != null) {
        throw new AssertionError(where + ": " + err, err);
      }
      if (expect.has("outcome")) {
        assertEquals(expect.get("outcome").str(), outcome, where + ": outcome");
      }
      if (expect.has("takeover")) {
        assertEquals(expect.get("takeover").bool(), claim.takeover(), where + ": takeover");
      }
      if (expect.has("save_token")) {
        tokens.put(expect.get("save_token").str(), claim.token());
      }
      if (expect.has("result")) {
        expectResult(expect, claim.result(), where);
      }
      if (expect.has("error_json")) {
        assertNotNull(claim.error(), where + ": no error_json");
        assertTrue(Json.sameValue(expect.get("error_json").value, Json.parse(claim.error())),
            where + ": error " + claim.error() + ", want " + expect.get("error_json"));
      }
    }
  }
}
