package io.idem;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.MethodOrderer;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestMethodOrder;

/** The HTTP client against the built idem serve. */
@Tag("serve")
@TestMethodOrder(MethodOrderer.OrderAnnotation.class)
class ServeTest {
  static Serve s;
  static Client c;

  @BeforeAll
  static void start() throws Exception {
    s = new Serve();
    c = s.client();
  }

  @AfterAll
  static void stop() throws Exception {
    s.close();
  }

  static ProblemException problem(org.junit.jupiter.api.function.Executable e) {
    return assertThrows(ProblemException.class, e);
  }

  @Test
  @Order(1)
  void claimCompleteReplayByteForByte() {
    Claim claim = c.claim(new ClaimRequest("refund", "K-1", "fp"));
    assertEquals(Outcome.ACQUIRED, claim.outcome());
    assertTrue(claim.token() >= 1);
    assertNotNull(claim.leaseUntil());
    assertFalse(claim.replayed());
    String result = "{\"amount\": 1e400, \"id\":\"F-1\"}";
    assertEquals("completed", c.complete("refund", "K-1", claim.token(), result));
    Claim again = c.claim(new ClaimRequest("refund", "K-1", "fp"));
    assertEquals(Outcome.REPLAYED, again.outcome());
    assertTrue(again.replayed());
    assertEquals(result, again.result());
    Record rec = c.getRecord("refund", "K-1");
    assertEquals("SUCCEEDED", rec.state());
    assertEquals(result, rec.result());
    assertEquals(claim.token(), rec.token());
    assertEquals("fp", rec.fingerprint());
  }

  @Test
  @Order(2)
  void aLiveLeaseIsInProgressWithRetryAfter() {
    c.claim(new ClaimRequest("refund", "K-2", null, 60000, 0));
    ProblemException p = problem(() -> c.claim(new ClaimRequest("refund", "K-2", null)));
    assertEquals(IdemException.Kind.IN_PROGRESS, p.kind());
    assertEquals(409, p.status());
    assertEquals("urn:idem:problem:in_progress", p.type());
    assertTrue(p.retryAfter() != null && p.retryAfter().compareTo(Duration.ofSeconds(1)) >= 0);
    assertNotNull(p.leaseUntil());
    assertNotNull(p.requestId());
  }

  @Test
  @Order(3)
  void failForGoodThenCachedFailure() {
    Claim claim = c.claim(new ClaimRequest("refund", "K-3", null));
    assertEquals("failed", c.fail("refund", "K-3", claim.token(), false, "{\"code\":\"DECLINED\"}"));
    Claim again = c.claim(new ClaimRequest("refund", "K-3", null));
    assertEquals(Outcome.CACHED_FAILURE, again.outcome());
    assertEquals("{\"code\":\"DECLINED\"}", again.error());
    assertNull(again.result());
  }

  @Test
  @Order(4)
  void aRetryableFailureReleasesTheKey() {
    Claim claim = c.claim(new ClaimRequest("refund", "K-4", null));
    assertEquals("released", c.fail("refund", "K-4", claim.token(), true, null));
    Claim next = c.claim(new ClaimRequest("refund", "K-4", null));
    assertEquals(Outcome.ACQUIRED, next.outcome());
    assertTrue(next.token() > claim.token());
    ProblemException p = problem(() -> c.complete("refund", "K-4", claim.token(), "1"));
    assertEquals(IdemException.Kind.LEASE_LOST, p.kind());
  }

  @Test
  @Order(5)
  void refusalsAreTyped() {
    ProblemException p = problem(() -> c.claim(new ClaimRequest("refund", "K-1", "other")));
    assertEquals(IdemException.Kind.FINGERPRINT_MISMATCH, p.kind());
    assertEquals(422, p.status());
    assertEquals("Fingerprint mismatch", p.title());
    assertEquals(IdemException.Kind.KEY_REUSED,
        problem(() -> c.claim(new ClaimRequest("payout", "K-1", null))).kind());
    assertEquals(IdemException.Kind.NOT_FOUND,
        problem(() -> c.getRecord("refund", "no/such key")).kind());
    // Another tenant sees none of t1's records.
    assertEquals(IdemException.Kind.NOT_FOUND,
        problem(() -> s.client(s.token2).getRecord("refund", "K-1")).kind());
    IdemException e = assertThrows(IdemException.class,
        () -> c.claim(new ClaimRequest("refund", "k".repeat(256), null)));
    assertEquals("idem: invalid_request: key is 256 bytes, over the limit of 255", e.getMessage());
    p = problem(() -> s.client("wrong-token").getRecord("refund", "K-1"));
    assertEquals(401, p.status());
    assertEquals("about:blank", p.type());
    assertEquals(IdemException.Kind.OTHER, p.kind());
  }

  @Test
  @Order(6)
  void recordsAreListedPageByPage() {
    List<String> keys = new ArrayList<>();
    RecordPage page = c.listRecords(new RecordQuery("refund", null, 2, null));
    while (true) {
      for (Record r : page.records()) {
        keys.add(r.key() + ":" + r.state());
        assertNull(r.result());
      }
      if (page.nextCursor() == null) {
        break;
      }
      page = c.listRecords(new RecordQuery("refund", null, 2, page.nextCursor()));
    }
    assertEquals(List.of("K-1:SUCCEEDED", "K-2:PROCESSING", "K-3:FAILED", "K-4:PROCESSING"), keys);
    List<String> failed = new ArrayList<>();
    for (Record r : c.listRecords(new RecordQuery("refund", "FAILED", 0, null)).records()) {
      failed.add(r.key());
    }
    assertEquals(List.of("K-3"), failed);
  }

  @Test
  @Order(7)
  void aBatchDecidesEachItemAsTheSingleCallWould() {
    List<BatchAnswer> a = c.batch(List.of(
        BatchItem.claim(new ClaimRequest("payment", "B-1", "fp")),
        BatchItem.claim(new ClaimRequest("payment", "B-1", "fp")),
        BatchItem.claim(new ClaimRequest("refund", "K-1", "fp")),
        BatchItem.fail("payment", "B-missing", 1, true, "\"timeout\"")));
    assertEquals(4, a.size());
    assertEquals(201, a.get(0).status());
    Claim first = a.get(0).claim();
    assertEquals(Outcome.ACQUIRED, first.outcome());
    assertEquals(409, a.get(1).status());
    assertEquals(IdemException.Kind.IN_PROGRESS, a.get(1).problem().kind());
    Claim replay = a.get(2).claim();
    assertEquals(Outcome.REPLAYED, replay.outcome());
    assertTrue(replay.replayed());
    assertEquals("{\"amount\": 1e400, \"id\":\"F-1\"}", replay.result());
    assertEquals(IdemException.Kind.NOT_FOUND, a.get(3).problem().kind());
    assertFalse(a.get(3).ok());
    List<BatchAnswer> done = c.batch(List.of(
        BatchItem.complete("payment", "B-1", first.token(), "{\"id\": \"ch_1\"}")));
    assertEquals("completed", done.get(0).outcome());
    assertEquals("{\"id\": \"ch_1\"}", c.claim(new ClaimRequest("payment", "B-1", "fp")).result());
  }
}
