package io.idem;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/** A JSON value of the case table, read by its exact text (tests only). */
final class Node {
  final String raw;
  final Object value;

  Node(String raw) {
    this.raw = raw;
    this.value = Json.parse(raw);
  }

  boolean has(String name) {
    return value instanceof Map<?, ?> m && m.containsKey(name);
  }

  Node get(String name) {
    if (!(value instanceof Map)) {
      throw new AssertionError("not an object: " + raw);
    }
    String r = Json.rawMembers(raw).get(name);
    return r == null ? null : new Node(r);
  }

  /** The object's member names. */
  List<String> names() {
    return new ArrayList<>(Json.rawMembers(raw).keySet());
  }

  List<Node> items() {
    List<Node> out = new ArrayList<>();
    for (String r : Json.rawElements(raw)) {
      out.add(new Node(r));
    }
    return out;
  }

  String str() {
    if (!(value instanceof String s)) {
      throw new AssertionError("not a string: " + raw);
    }
    return s;
  }

  String str(String name, String fallback) {
    Node n = get(name);
    return n == null ? fallback : n.str();
  }

  long num() {
    return ((Json.Num) value).longValue();
  }

  long num(String name, long fallback) {
    Node n = get(name);
    return n == null ? fallback : n.num();
  }

  boolean bool() {
    return (Boolean) value;
  }

  /** Fails when the object has a member outside known (a runner that cannot run a case fails). */
  void only(String what, String... known) {
    for (String n : names()) {
      if (!List.of(known).contains(n)) {
        throw new AssertionError(what + ": the member '" + n + "' is not one this runner knows");
      }
    }
  }

  @Override
  public String toString() { return raw; }
}
