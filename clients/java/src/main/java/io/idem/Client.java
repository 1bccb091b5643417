package io.idem;

import java.io.IOException;
import java.io.InputStream;
import java.net.URI;
import java.net.URLEncoder;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.security.SecureRandom;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.Optional;

/**
 * A client of the HTTP API of {@code idem serve} (docs/openapi.yaml). Every call
 * answers a value for the outcomes a caller expects and throws a
 * {@link ProblemException} for every other answer (switch on its kind()). Calls that
 * met 502/503/504 or no answer are sent again, unchanged, after the answer's
 * Retry-After or else the Retry's full-jitter backoff: every call is safe to repeat
 * (a claim is fail-closed; complete and fail with the same token and value answer
 * 200 again). Bad input is refused before anything is sent (INVALID_REQUEST naming
 * the field). A Client is safe for concurrent use.
 */
public final class Client {
  private final String base;
  private final String token;
  private final HttpClient http;
  private final Retry retry;
  private final Duration timeout;
  private final long maxAnswerBytes;

  /** The longest Retry-After the client waits before a resend. */
  private static final Duration MAX_RETRY_AFTER = Duration.ofSeconds(60);

  /**
   * A client of the server at baseUrl ("http://127.0.0.1:7070"; a path prefix is kept)
   * with a tenant's bearer token; {@link Retry#DEFAULT}, 30 s per call, answers up
   * to 16 MiB.
   */
  public Client(String baseUrl, String token) {
    this(baseUrl, token, HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(10)).build(),
        Retry.DEFAULT, Duration.ofSeconds(30), 16L << 20);
  }

  /** A client with its own HttpClient, resend policy, per-call timeout and answer bound. */
  public Client(String baseUrl, String token, HttpClient http, Retry retry, Duration timeout,
                long maxAnswerBytes) {
    URI u;
    try {
      u = URI.create(baseUrl);
    } catch (IllegalArgumentException | NullPointerException e) {
      u = null;
    }
    if (u == null || !("http".equals(u.getScheme()) || "https".equals(u.getScheme()))
        || u.getHost() == null) {
      throw IdemException.invalid("the server URL must be http://host[:port] or https://..., got '"
          + baseUrl + "'");
    }
    if (token == null || token.isEmpty() || token.contains("\r") || token.contains("\n")) {
      throw IdemException.invalid("token is empty or holds a line break");
    }
    if (http == null || retry == null || timeout == null || maxAnswerBytes <= 0) {
      throw new IllegalArgumentException("Client: http, retry, timeout and a positive "
          + "maxAnswerBytes are needed");
    }
    this.base = baseUrl.endsWith("/") ? baseUrl.substring(0, baseUrl.length() - 1) : baseUrl;
    this.token = token;
    this.http = http;
    this.retry = retry;
    this.timeout = timeout;
    this.maxAnswerBytes = maxAnswerBytes;
  }

  /**
   * Claims a key (POST /v1/claims). Throws ProblemException of kind IN_PROGRESS (409,
   * with retryAfter and leaseUntil), KEY_REUSED, FINGERPRINT_MISMATCH, EXPIRED,
   * INVALID_REQUEST, UNAVAILABLE (after the resends).
   */
  public Claim claim(ClaimRequest r) {
    r.validate();
    StringBuilder b = new StringBuilder("{");
    r.writeMembers(b);
    Answer a = call("POST", "/v1/claims", b.append('}').toString(),
        Duration.ofMillis(r.waitMs()));
    return parsed(a, () -> Claim.of(a.body, a.replayed));
  }

  /**
   * Decides up to 1,000 calls in one request (POST /v1/claims/batch): each answer at
   * its item's index, a problem for an item the single call would have refused.
   */
  public List<BatchAnswer> batch(List<BatchItem> items) {
    if (items == null || items.isEmpty() || items.size() > 1000) {
      throw IdemException.invalid("requests must hold 1 to 1000 items, got "
          + (items == null ? 0 : items.size()));
    }
    StringBuilder b = new StringBuilder("{\"requests\":[");
    for (int i = 0; i < items.size(); i++) {
      if (items.get(i) == null) {
        throw IdemException.invalid("requests[" + i + "] is null");
      }
      b.append(i > 0 ? "," : "").append(items.get(i).json);
    }
    Answer a = call("POST", "/v1/claims/batch", b.append("]}").toString(), Duration.ZERO);
    return parsed(a, () -> {
      JsonObject o = JsonObject.parse(a.body);
      String raw = o.raws.get("responses");
      if (raw == null) {
        throw new Json.SyntaxException("no responses");
      }
      List<BatchAnswer> out = new ArrayList<>();
      for (String item : Json.rawElements(raw)) {
        JsonObject x = JsonObject.parse(item);
        out.add(new BatchAnswer((int) x.number("status"), x.string("outcome"), item));
      }
      if (out.size() != items.size()) {
        throw new Json.SyntaxException(out.size() + " responses for " + items.size() + " items");
      }
      return out;
    });
  }

  /**
   * Stores result (one JSON value as text, sent byte for byte; null is null) under
   * the claim's token (POST /v1/claims/complete): "completed" (or "degraded").
   * Throws LEASE_LOST, CONFLICT, KEY_REUSED, NOT_FOUND, UNAVAILABLE.
   */
  public String complete(String bizType, String key, long token, String result) {
    return finish("/v1/claims/complete",
        finishBody(null, bizType, key, token, null, "result", result));
  }

  /**
   * Reports the claim's failure (POST /v1/claims/fail): retryable releases the key
   * ("released"); otherwise the error (one JSON value as text) is stored ("failed")
   * and every later claim answers CACHED_FAILURE. Throws as {@link #complete}.
   */
  public String fail(String bizType, String key, long token, boolean retryable, String error) {
    return finish("/v1/claims/fail",
        finishBody(null, bizType, key, token, retryable, "error", error));
  }

  /** Reads a key's record. Throws NOT_FOUND, KEY_REUSED, EXPIRED. */
  public Record getRecord(String bizType, String key) {
    new Request(bizType, key).validate();
    Answer a = call("GET", "/v1/records/" + segment(bizType) + "/" + segment(key), null,
        Duration.ZERO);
    return parsed(a, () -> Record.of(JsonObject.parse(a.body)));
  }

  /** Reads a page of the tenant's records, in key order. */
  public RecordPage listRecords(RecordQuery q) {
    StringBuilder path = new StringBuilder("/v1/records");
    String sep = "?";
    if (q.bizType() != null) {
      Request.checkName("biz_type", q.bizType(), Request.MAX_BIZ_TYPE_BYTES);
      path.append(sep).append("biz_type=").append(segment(q.bizType()));
      sep = "&";
    }
    if (q.state() != null) {
      if (!List.of("PROCESSING", "SUCCEEDED", "FAILED").contains(q.state())) {
        throw IdemException.invalid("state is '" + q.state()
            + "', not PROCESSING, SUCCEEDED or FAILED");
      }
      path.append(sep).append("state=").append(q.state());
      sep = "&";
    }
    if (q.limit() != 0) {
      if (q.limit() < 0) {
        throw IdemException.invalid("limit is " + q.limit() + ", below 1");
      }
      path.append(sep).append("limit=").append(q.limit());
      sep = "&";
    }
    if (q.cursor() != null) {
      path.append(sep).append("cursor=").append(segment(q.cursor()));
    }
    Answer a = call("GET", path.toString(), null, Duration.ZERO);
    return parsed(a, () -> {
      JsonObject o = JsonObject.parse(a.body);
      List<Record> records = new ArrayList<>();
      String raw = o.raws.get("records");
      if (raw != null) {
        for (String item : Json.rawElements(raw)) {
          records.add(Record.of(JsonObject.parse(item)));
        }
      }
      return new RecordPage(records, o.string("next_cursor"));
    });
  }

  // ---------------------------------------------------------------------------

  /**
   * The body of complete or fail (with "op" for a batch item), the value spliced in
   * as given so the server keeps its bytes.
   */
  static String finishBody(String op, String bizType, String key, long token,
                           Boolean retryable, String member, String value) {
    new Request(bizType, key).validate();
    if (value == null) {
      value = "null";
    } else if (!Json.isValid(value)) {
      throw IdemException.invalid(member + " is not valid JSON");
    }
    StringBuilder b = new StringBuilder("{");
    if (op != null) {
      b.append("\"op\":\"").append(op).append("\",");
    }
    b.append("\"biz_type\":");
    Json.quote(b, bizType);
    b.append(",\"key\":");
    Json.quote(b, key);
    b.append(",\"token\":").append(token);
    if (retryable != null) {
      b.append(",\"retryable\":").append(retryable);
    }
    return b.append(",\"").append(member).append("\":").append(value).append('}').toString();
  }

  private String finish(String path, String body) {
    Answer a = call("POST", path, body, Duration.ZERO);
    return parsed(a, () -> JsonObject.parse(a.body).string("outcome"));
  }

  private static String segment(String s) {
    return URLEncoder.encode(s, StandardCharsets.UTF_8).replace("+", "%20");
  }

  private interface Parse<T> {
    T run();
  }

  private <T> T parsed(Answer a, Parse<T> p) {
    try {
      return p.run();
    } catch (Json.SyntaxException | ArithmeticException | NumberFormatException e) {
      throw new IdemException(IdemException.Kind.OTHER, "idem: the answer to " + a.what
          + " (status " + a.status + ") is not the expected JSON: " + e.getMessage(), e);
    }
  }

  private record Answer(String what, int status, String body, boolean replayed) {}

  private static final SecureRandom RANDOM = new SecureRandom();

  private static String newRequestId() {
    byte[] b = new byte[16];
    RANDOM.nextBytes(b);
    return HexFormat.of().formatHex(b);
  }

  /** Sends one call (and its resends); a 2xx answer is returned, others thrown. */
  private Answer call(String method, String path, String body, Duration extra) {
    String id = newRequestId();
    for (int n = 1; ; n++) {
      ProblemException p;
      try {
        return send(method, path, body, id, extra);
      } catch (ProblemException e) {
        p = e;
      }
      p = p.withAttempts(n);
      if (!p.retryable() || n >= retry.attempts()) {
        throw p;
      }
      Duration wait = p.retryAfter() != null
          ? (p.retryAfter().compareTo(MAX_RETRY_AFTER) > 0 ? MAX_RETRY_AFTER : p.retryAfter())
          : retry.delay(n);
      try {
        Thread.sleep(wait.toMillis());
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        throw p;
      }
    }
  }

  private Answer send(String method, String path, String body, String id, Duration extra) {
    HttpRequest.Builder rb = HttpRequest.newBuilder(URI.create(base + path))
        .timeout(timeout.plus(extra))
        .header("Authorization", "Bearer " + token)
        .header("X-Request-Id", id)
        .header("User-Agent", "idem-java/" + Idem.VERSION);
    if (body != null) {
      rb.header("Content-Type", "application/json")
          .method(method, HttpRequest.BodyPublishers.ofString(body, StandardCharsets.UTF_8));
    } else {
      rb.method(method, HttpRequest.BodyPublishers.noBody());
    }
    HttpResponse<InputStream> resp;
    byte[] data;
    try {
      resp = http.send(rb.build(), HttpResponse.BodyHandlers.ofInputStream());
      try (InputStream in = resp.body()) {
        data = in.readNBytes((int) Math.min(Integer.MAX_VALUE - 8, maxAnswerBytes + 1));
      }
    } catch (IOException e) {
      throw ProblemException.noAnswer(id, e, 1);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw ProblemException.noAnswer(id, e, 1);
    }
    if (data.length > maxAnswerBytes) {
      throw new IdemException(IdemException.Kind.OTHER, "idem: the answer to " + method + " "
          + path + " is larger than " + maxAnswerBytes + " bytes");
    }
    String answeredId = resp.headers().firstValue("X-Request-Id").orElse(id);
    String text = ProblemException.utf8(data);
    if (resp.statusCode() >= 400) {
      throw ProblemException.of(resp.statusCode(), text, answeredId,
          retryAfter(resp.headers().firstValue("Retry-After")), 1);
    }
    boolean replayed = resp.headers().firstValue("Idempotent-Replayed")
        .map("true"::equals).orElse(false);
    return new Answer(method + " " + path, resp.statusCode(), text, replayed);
  }

  private static Duration retryAfter(Optional<String> h) {
    if (h.isEmpty()) {
      return null;
    }
    try {
      long s = Long.parseLong(h.get().trim());
      return s >= 0 ? Duration.ofSeconds(s) : null;
    } catch (NumberFormatException e) {
      return null; // an HTTP-date: not sent by idem serve
    }
  }

  /** The members of a JSON object answer (for callers reading fields this client does not model). */
  static Map<String, String> members(String body) {
    return Json.rawMembers(body);
  }
}
