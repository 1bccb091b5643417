package io.idem;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * The acceptance test of Idem.run: a refund (a ledger row, the claim and the result in
 * one transaction) delivered 16 times at once for each of 1,000 keys, with rollbacks
 * injected into the body and connections killed from a second connection under it.
 * Every key ends with one ledger row and a SUCCEEDED record, every delivery is
 * answered the result of the transaction that committed, nothing stays PROCESSING.
 */
@Tag("sql")
class RefundAcceptanceTest {
  static final int REFUNDS = 1000;   // keys
  static final int DUPLICATES = 16;  // concurrent deliveries of each key
  static final int KEYS_AT_ONCE = 4; // keys delivered at the same time

  static final class InjectedRollback extends RuntimeException {
    private static final long serialVersionUID = 1L;

    InjectedRollback() { super("injected rollback"); }
  }

  @ParameterizedTest(name = "{0}")
  @ValueSource(strings = {TestDb.POSTGRES, TestDb.MYSQL})
  void refundExactlyOnceUnderDuplicatesRollbacksAndKills(String env) throws Exception {
    try (TestDb d = TestDb.open(env)) {
      d.createLedger();
      Options opt = Options.DEFAULTS.withRetry(
          new Retry(10, Duration.ofMillis(2), Duration.ofMillis(100)));
      AtomicLong runs = new AtomicLong();
      AtomicLong rollbacks = new AtomicLong();
      AtomicLong kills = new AtomicLong();
      AtomicLong executed = new AtomicLong();
      String[][] answers = new String[REFUNDS][DUPLICATES];
      ConcurrentLinkedQueue<String> errors = new ConcurrentLinkedQueue<>();
      LinkedBlockingQueue<Integer> keys = new LinkedBlockingQueue<>();
      for (int k = 0; k < REFUNDS; k++) {
        keys.add(k);
      }
      long start = System.nanoTime();
      List<Thread> workers = new ArrayList<>();
      for (int w = 0; w < KEYS_AT_ONCE; w++) {
        final int seed = w;
        Thread t = new Thread(() -> {
          // 16 delivery threads, each with its own connection (a consumer's), reopened
          // when it was killed.
          ExecutorService pool = Executors.newFixedThreadPool(DUPLICATES);
          Connection[] conns = new Connection[DUPLICATES];
          try {
            Integer k;
            while ((k = keys.poll()) != null) {
              final int key = k;
              List<Future<?>> fs = new ArrayList<>();
              for (int dup = 0; dup < DUPLICATES; dup++) {
                final int dp = dup;
                Random rng = new Random(seed * 1_000_000L + key * DUPLICATES + dup);
                fs.add(pool.submit(() -> {
                  try {
                    answers[key][dp] = deliver(d, conns, dp, key, rng, opt, runs, rollbacks,
                        kills, executed);
                  } catch (Exception e) {
                    errors.add("R-" + key + " delivery " + dp + ": " + e);
                  }
                }));
              }
              for (Future<?> f : fs) {
                f.get();
              }
            }
          } catch (Exception e) {
            errors.add("worker: " + e);
          } finally {
            pool.shutdown();
            for (Connection c : conns) {
              try {
                if (c != null) {
                  c.close();
                }
              } catch (SQLException ignored) {
                // killed
              }
            }
          }
        });
        t.start();
        workers.add(t);
      }
      for (Thread t : workers) {
        t.join();
      }
      System.out.printf("%s: %d body runs, %d injected rollbacks, %d connections killed, "
          + "%d executed answers, %d ms%n", d.name, runs.get(), rollbacks.get(), kills.get(),
          executed.get(), (System.nanoTime() - start) / 1_000_000);
      assertTrue(errors.isEmpty(), errors.size() + " deliveries failed, e.g. " + errors.peek());
      assertTrue(rollbacks.get() > 0 && kills.get() > 0,
          "no faults injected (rollbacks " + rollbacks + ", kills " + kills + ")");
      checkRefundedOnce(d, answers);
      assertTrue(executed.get() <= REFUNDS, executed + " deliveries were answered executed");
    }
  }

  private static String key(int k) {
    return String.format("R-%04d", k);
  }

  /** One delivery of key k, redelivered (as a queue would) until it is answered. */
  private static String deliver(TestDb d, Connection[] conns, int dup, int k, Random rng,
                                Options opt, AtomicLong runs, AtomicLong rollbacks,
                                AtomicLong kills, AtomicLong executed) throws Exception {
    String key = key(k);
    Request req = new Request("refund", key, Idem.fingerprint(key.getBytes()));
    TxBody body = c -> {
      long n = runs.incrementAndGet();
      String id = "F-" + key + "-" + n;
      try (PreparedStatement ps = c.prepareStatement(
          "INSERT INTO ledger (refund_key, refund_id, amount) VALUES (?, ?, 100)")) {
        ps.setString(1, key);
        ps.setString(2, id);
        ps.executeUpdate();
      }
      int p = rng.nextInt(100);
      if (p < 10) {
        rollbacks.incrementAndGet();
        throw new InjectedRollback();
      } else if (p < 13) {
        d.kill(d.connectionId(c));
        kills.incrementAndGet();
      }
      return "{\"refund_id\":\"" + id + "\"}";
    };
    for (int delivery = 1; delivery <= 500; delivery++) {
      if (conns[dup] == null || conns[dup].isClosed()) {
        conns[dup] = d.connect();
      }
      Result r;
      try {
        r = Idem.run(conns[dup], req, opt, body);
      } catch (InjectedRollback e) {
        continue; // redelivered
      } catch (IdemException e) {
        if (e.kind() != IdemException.Kind.UNAVAILABLE) {
          throw e;
        }
        conns[dup].close(); // a killed connection: the consumer reconnects
        conns[dup] = null;
        continue;
      }
      switch (r.outcome()) {
        case IN_PROGRESS -> Thread.sleep(1 + rng.nextInt(5));
        case EXECUTED, REPLAYED -> {
          if (r.outcome() == Outcome.EXECUTED) {
            executed.incrementAndGet();
          }
          Object v = Json.parse(r.result());
          return (String) ((Map<?, ?>) v).get("refund_id");
        }
        default -> throw new AssertionError(key + ": unexpected " + r);
      }
    }
    throw new AssertionError(key + ": no answer after 500 redeliveries");
  }

  private static void checkRefundedOnce(TestDb d, String[][] answers) throws SQLException {
    Map<String, String> ledger = new HashMap<>();
    List<String> problems = new ArrayList<>();
    try (Connection c = d.connect(); Statement s = c.createStatement();
         ResultSet rs = s.executeQuery("SELECT refund_key, refund_id FROM ledger")) {
      while (rs.next()) {
        String other = ledger.put(rs.getString(1), rs.getString(2));
        if (other != null) {
          problems.add(rs.getString(1) + " has two ledger rows: " + other + " and " + rs.getString(2));
        }
      }
    }
    assertEquals(List.of(), problems);
    assertEquals(REFUNDS, ledger.size(), "keys with a ledger row");
    for (int k = 0; k < REFUNDS; k++) {
      for (int dup = 0; dup < DUPLICATES; dup++) {
        assertEquals(ledger.get(key(k)), answers[k][dup], key(k) + " delivery " + dup);
      }
    }
    assertEquals(0, d.processing(), "records left PROCESSING");
    assertEquals(REFUNDS, d.count("SELECT COUNT(*) FROM idem_records WHERE state = 1"),
        "records SUCCEEDED");
  }
}
