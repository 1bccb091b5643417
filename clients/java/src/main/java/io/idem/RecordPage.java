package io.idem;

import java.util.List;

/** A page of records, in key order; nextCursor null on the last page. */
public record RecordPage(List<Record> records, String nextCursor) {}
