package io.idem;

import java.math.BigDecimal;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * A small JSON reader and writer (RFC 8259), enough for idem's answers: values read
 * as {@code Map<String,Object>} (member order kept), {@code List<Object>}, {@link String},
 * {@link Number} (a {@link Json.Num} keeping the digits as written), {@link Boolean} and
 * {@link #NULL}; a top-level object's members can also be read as their exact text,
 * so a stored result is handed on byte for byte.
 */
public final class Json {
  private Json() {}

  /** JSON's null (a Map cannot hold Java null unambiguously). */
  public static final Object NULL = new Object() {
    @Override public String toString() { return "null"; }
  };

  /** A number as written in the JSON text. */
  public record Num(String text) {
    public BigDecimal decimal() { return new BigDecimal(text); }
    public long longValue() { return decimal().longValueExact(); }
    @Override public String toString() { return text; }
  }

  /** A JSON text that is not valid; the message names the offset. */
  public static final class SyntaxException extends IllegalArgumentException {
    private static final long serialVersionUID = 1L;

    public SyntaxException(String message) { super(message); }
  }

  /** Whether text is exactly one JSON value (white space around it allowed). */
  public static boolean isValid(String text) {
    if (text == null) {
      return false;
    }
    try {
      parse(text);
      return true;
    } catch (SyntaxException e) {
      return false;
    }
  }

  /** Parses one JSON value. */
  public static Object parse(String text) {
    Reader r = new Reader(text);
    r.space();
    Object v = r.value();
    r.end();
    return v;
  }

  /** The members of a JSON object as their exact text, in order. */
  public static Map<String, String> rawMembers(String text) {
    Reader r = new Reader(text);
    r.space();
    if (r.peek() != '{') {
      throw r.error("not an object");
    }
    Map<String, String> out = new LinkedHashMap<>();
    r.object(out);
    r.end();
    return out;
  }

  /** The elements of a JSON array as their exact text. */
  public static List<String> rawElements(String text) {
    Reader r = new Reader(text);
    r.space();
    if (r.peek() != '[') {
      throw r.error("not an array");
    }
    List<String> out = new ArrayList<>();
    r.array(out);
    r.end();
    return out;
  }

  /** Writes a value (Map, List, String, Number, Boolean, null or NULL) as compact JSON. */
  public static String write(Object v) {
    StringBuilder b = new StringBuilder();
    write(b, v, false);
    return b.toString();
  }

  /**
   * The canonical form of one JSON text, the one every idem client fingerprints
   * (clients/CASES.md): object members sorted by the code points of their names (their
   * UTF-8 bytes, not String.compareTo's UTF-16 order), a name given twice keeping its
   * last value; no white space; numbers as written; strings as {@link #quote} writes
   * them. A lone surrogate (escaped or not) is a SyntaxException naming it.
   */
  public static String canonical(String text) {
    Reader r = new Reader(text);
    r.wellFormed = true;
    r.space();
    Object v = r.value();
    r.end();
    StringBuilder b = new StringBuilder();
    write(b, v, true);
    return b.toString();
  }

  /** JSON values equal as values: members in any order, numbers compared by value. */
  public static boolean sameValue(Object a, Object b) {
    if (a instanceof Num x && b instanceof Num y) {
      return x.decimal().compareTo(y.decimal()) == 0;
    }
    if (a instanceof Map<?, ?> x && b instanceof Map<?, ?> y) {
      if (x.size() != y.size()) {
        return false;
      }
      for (Map.Entry<?, ?> e : x.entrySet()) {
        if (!y.containsKey(e.getKey()) || !sameValue(e.getValue(), y.get(e.getKey()))) {
          return false;
        }
      }
      return true;
    }
    if (a instanceof List<?> x && b instanceof List<?> y) {
      if (x.size() != y.size()) {
        return false;
      }
      for (int i = 0; i < x.size(); i++) {
        if (!sameValue(x.get(i), y.get(i))) {
          return false;
        }
      }
      return true;
    }
    return a == null ? b == null : a.equals(b);
  }

  private static void write(StringBuilder b, Object v, boolean sorted) {
    if (v == null || v == NULL) {
      b.append("null");
    } else if (v instanceof String s) {
      quote(b, s);
    } else if (v instanceof Boolean || v instanceof Num) {
      b.append(v);
    } else if (v instanceof Number n) {
      if (n instanceof Double d && (d.isNaN() || d.isInfinite())
          || n instanceof Float f && (f.isNaN() || f.isInfinite())) {
        throw new IllegalArgumentException("JSON has no " + n);
      }
      b.append(n);
    } else if (v instanceof Map<?, ?> m) {
      Map<?, ?> members = m;
      if (sorted) {
        TreeMap<String, Object> t = new TreeMap<>(Json::compareUtf8);
        m.forEach((k, x) -> t.put((String) k, x));
        members = t;
      }
      b.append('{');
      boolean first = true;
      for (Map.Entry<?, ?> e : members.entrySet()) {
        if (!first) {
          b.append(',');
        }
        first = false;
        quote(b, (String) e.getKey());
        b.append(':');
        write(b, e.getValue(), sorted);
      }
      b.append('}');
    } else if (v instanceof List<?> l) {
      b.append('[');
      for (int i = 0; i < l.size(); i++) {
        if (i > 0) {
          b.append(',');
        }
        write(b, l.get(i), sorted);
      }
      b.append(']');
    } else {
      throw new IllegalArgumentException("cannot write " + v.getClass().getName() + " as JSON");
    }
  }

  private static int compareUtf8(String a, String b) {
    return Arrays.compareUnsigned(a.getBytes(StandardCharsets.UTF_8),
        b.getBytes(StandardCharsets.UTF_8));
  }

  /** The index of s's first lone surrogate (one not in a high-low pair), or -1. */
  static int loneSurrogate(String s) {
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      if (Character.isHighSurrogate(c) && i + 1 < s.length()
          && Character.isLowSurrogate(s.charAt(i + 1))) {
        i++;
      } else if (Character.isSurrogate(c)) {
        return i;
      }
    }
    return -1;
  }

  /**
   * Appends s as a JSON string, as JSON.stringify writes it (the canonical form's
   * strings): the short escapes of quote, backslash, backspace, form feed, newline,
   * return and tab; other characters below U+0020 as 4-digit escapes with lowercase
   * hex; every other character as itself (a lone surrogate, which UTF-8 cannot hold, as
   * U+FFFD; {@link #canonical} refuses it instead).
   */
  public static void quote(StringBuilder b, String s) {
    b.append('"');
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      switch (c) {
        case '"' -> b.append("\\\"");
        case '\\' -> b.append("\\\\");
        case '\b' -> b.append("\\b");
        case '\f' -> b.append("\\f");
        case '\n' -> b.append("\\n");
        case '\r' -> b.append("\\r");
        case '\t' -> b.append("\\t");
        default -> {
          if (c < 0x20) {
            b.append(String.format("\\u%04x", (int) c));
          } else if (Character.isSurrogate(c)
              && !(Character.isHighSurrogate(c) && i + 1 < s.length()
                   && Character.isLowSurrogate(s.charAt(i + 1)))
              && !(Character.isLowSurrogate(c) && i > 0
                   && Character.isHighSurrogate(s.charAt(i - 1)))) {
            b.append("\\ufffd"); // a lone surrogate is not UTF-8
          } else {
            b.append(c);
          }
        }
      }
    }
    b.append('"');
  }

  /** Recursion bound of the reader (a hostile answer cannot overflow the stack). */
  private static final int MAX_DEPTH = 512;

  private static final class Reader {
    final String s;
    int pos;
    int depth;
    /** Refuse a string holding a lone surrogate (canonical JSON). */
    boolean wellFormed;

    Reader(String s) { this.s = s; }

    SyntaxException error(String what) {
      return new SyntaxException("not JSON: " + what + " at offset " + pos);
    }

    char peek() { return pos < s.length() ? s.charAt(pos) : '\0'; }

    char next() {
      if (pos >= s.length()) {
        throw error("unexpected end");
      }
      return s.charAt(pos++);
    }

    void expect(char c) {
      if (next() != c) {
        pos--;
        throw error("expected '" + c + "'");
      }
    }

    /** Only white space may follow the value. */
    void end() {
      space();
      if (pos != s.length()) {
        throw error("more than one value");
      }
    }

    void space() {
      while (pos < s.length()) {
        char c = s.charAt(pos);
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') {
          return;
        }
        pos++;
      }
    }

    Object value() {
      if (++depth > MAX_DEPTH) {
        throw error("nested deeper than " + MAX_DEPTH);
      }
      try {
        char c = peek();
        switch (c) {
          case '{': return object(null);
          case '[': return array(null);
          case '"': return string();
          case 't': return word("true", Boolean.TRUE);
          case 'f': return word("false", Boolean.FALSE);
          case 'n': return word("null", NULL);
          default:
            if (c == '-' || (c >= '0' && c <= '9')) {
              return number();
            }
            throw error(pos >= s.length() ? "unexpected end" : "unexpected '" + c + "'");
        }
      } finally {
        depth--;
      }
    }

    Object word(String w, Object v) {
      if (!s.startsWith(w, pos)) {
        throw error("unexpected '" + peek() + "'");
      }
      pos += w.length();
      return v;
    }

    /** An object; raws, when given, gets each member's exact text. */
    Map<String, Object> object(Map<String, String> raws) {
      expect('{');
      Map<String, Object> m = new LinkedHashMap<>();
      space();
      if (peek() == '}') {
        pos++;
        return m;
      }
      while (true) {
        space();
        String name = string();
        space();
        expect(':');
        space();
        int start = pos;
        m.put(name, value());
        if (raws != null) {
          raws.put(name, s.substring(start, pos));
        }
        space();
        char c = next();
        if (c == '}') {
          return m;
        }
        if (c != ',') {
          pos--;
          throw error("expected ',' or '}'");
        }
      }
    }

    /** An array; raws, when given, gets each element's exact text. */
    List<Object> array(List<String> raws) {
      expect('[');
      List<Object> l = new ArrayList<>();
      space();
      if (peek() == ']') {
        pos++;
        return l;
      }
      while (true) {
        space();
        int start = pos;
        l.add(value());
        if (raws != null) {
          raws.add(s.substring(start, pos));
        }
        space();
        char c = next();
        if (c == ']') {
          return l;
        }
        if (c != ',') {
          pos--;
          throw error("expected ',' or ']'");
        }
      }
    }

    Num number() {
      int start = pos;
      if (peek() == '-') {
        pos++;
      }
      if (peek() == '0') {
        pos++;
      } else if (peek() >= '1' && peek() <= '9') {
        while (peek() >= '0' && peek() <= '9') {
          pos++;
        }
      } else {
        throw error("bad number");
      }
      if (peek() == '.') {
        pos++;
        if (!(peek() >= '0' && peek() <= '9')) {
          throw error("bad number");
        }
        while (peek() >= '0' && peek() <= '9') {
          pos++;
        }
      }
      if (peek() == 'e' || peek() == 'E') {
        pos++;
        if (peek() == '+' || peek() == '-') {
          pos++;
        }
        if (!(peek() >= '0' && peek() <= '9')) {
          throw error("bad number");
        }
        while (peek() >= '0' && peek() <= '9') {
          pos++;
        }
      }
      return new Num(s.substring(start, pos));
    }

    String string() {
      int start = pos;
      expect('"');
      StringBuilder b = new StringBuilder();
      while (true) {
        char c = next();
        if (c == '"') {
          int lone = wellFormed ? loneSurrogate(b.toString()) : -1;
          if (lone >= 0) {
            pos = start;
            throw error(String.format("a lone surrogate \\u%04x in the string", (int) b.charAt(lone)));
          }
          return b.toString();
        }
        if (c < 0x20) {
          pos--;
          throw error("control character in a string");
        }
        if (c != '\\') {
          b.append(c);
          continue;
        }
        char e = next();
        switch (e) {
          case '"', '\\', '/' -> b.append(e);
          case 'b' -> b.append('\b');
          case 'f' -> b.append('\f');
          case 'n' -> b.append('\n');
          case 'r' -> b.append('\r');
          case 't' -> b.append('\t');
          case 'u' -> {
            if (pos + 4 > s.length()) {
              throw error("short \\u escape");
            }
            int u = 0;
            for (int i = 0; i < 4; i++) {
              int h = Character.digit(s.charAt(pos + i), 16);
              if (h < 0) {
                throw error("bad \\u escape");
              }
              u = u * 16 + h;
            }
            b.append((char) u);
            pos += 4;
          }
          default -> {
            pos--;
            throw error("bad escape");
          }
        }
      }
    }
  }
}
