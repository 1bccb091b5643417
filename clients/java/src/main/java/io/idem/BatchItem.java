package io.idem;

/**
 * One call of a batch (POST /v1/claims/batch): a claim, a complete or a fail, built
 * with {@link #claim}, {@link #complete} and {@link #fail}. Values are JSON text.
 */
public final class BatchItem {
  final String json;

  private BatchItem(String json) { this.json = json; }

  /** A claim (waitMs must be 0: a batch's claims never wait). */
  public static BatchItem claim(ClaimRequest r) {
    r.validate();
    if (r.waitMs() != 0) {
      throw IdemException.invalid("wait_ms is not taken by a batch's claims");
    }
    StringBuilder b = new StringBuilder("{\"op\":\"claim\",");
    r.writeMembers(b);
    return new BatchItem(b.append('}').toString());
  }

  /** A complete of the claim with token, storing result (JSON text; null is null). */
  public static BatchItem complete(String bizType, String key, long token, String result) {
    return new BatchItem(Client.finishBody("complete", bizType, key, token, null, "result",
        result));
  }

  /** A fail of the claim with token: retryable releases the key, else error is stored. */
  public static BatchItem fail(String bizType, String key, long token, boolean retryable,
                               String error) {
    return new BatchItem(Client.finishBody("fail", bizType, key, token, retryable, "error",
        error));
  }
}
