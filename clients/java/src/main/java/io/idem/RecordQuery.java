package io.idem;

/** Selects a page of GET /v1/records; null (and limit 0) fields are left out. */
public record RecordQuery(String bizType, String state, int limit, String cursor) {
  public static final RecordQuery ALL = new RecordQuery(null, null, 0, null);
}
