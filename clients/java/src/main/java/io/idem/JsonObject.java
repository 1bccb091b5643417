package io.idem;

import java.time.Instant;
import java.time.format.DateTimeParseException;
import java.util.Map;

/** A JSON object of an answer: typed members, and each member's exact text. */
final class JsonObject {
  final Map<String, Object> values;
  final Map<String, String> raws;

  private JsonObject(Map<String, Object> values, Map<String, String> raws) {
    this.values = values;
    this.raws = raws;
  }

  @SuppressWarnings("unchecked")
  static JsonObject parse(String text) {
    Object v = Json.parse(text);
    if (!(v instanceof Map)) {
      throw new Json.SyntaxException("not a JSON object");
    }
    return new JsonObject((Map<String, Object>) v, Json.rawMembers(text));
  }

  /** The member's exact text, null when absent or null. */
  String raw(String name) {
    Object v = values.get(name);
    return v == null || v == Json.NULL ? null : raws.get(name);
  }

  String string(String name) {
    Object v = values.get(name);
    return v instanceof String s ? s : null;
  }

  long number(String name) {
    Object v = values.get(name);
    return v instanceof Json.Num n ? n.longValue() : 0;
  }

  boolean bool(String name) {
    return Boolean.TRUE.equals(values.get(name));
  }

  Instant time(String name) {
    String s = string(name);
    if (s == null) {
      return null;
    }
    try {
      return Instant.parse(s);
    } catch (DateTimeParseException e) {
      throw new Json.SyntaxException("the member " + name + " is not an RFC 3339 time: " + s);
    }
  }
}
