// JSON kept as text: a value stored or answered byte for byte ("12.50" stays 12.50),
// the raw members of an answer, and the canonical form fingerprints are made of.
import { createHash } from "node:crypto";

/** JSON text to send or store exactly as written (see rawJSON). */
export class RawJSON {
  constructor(readonly text: string) {}
  toJSON(): unknown { return JSON.parse(this.text); }
}

/** Wraps JSON text to be stored or sent exactly as written; throws on text that is not one JSON value. */
export function rawJSON(text: string): RawJSON {
  if (typeof text !== "string") throw new TypeError("idem: rawJSON takes a string");
  parseJSON(text); // throws a SyntaxError naming the position
  return new RawJSON(text);
}

/** The JSON text of a value given to be stored: a RawJSON's text, else JSON.stringify's (undefined: null). */
export function jsonTextOf(value: unknown): string {
  if (value instanceof RawJSON) return value.text;
  if (value === undefined) return "null";
  const text = JSON.stringify(value);
  if (text === undefined) throw new TypeError(`idem: a ${typeof value} is not a JSON value`);
  return text;
}

type Node =
  | { t: "obj"; members: Array<[string, Node]> }
  | { t: "arr"; items: Node[] }
  | { t: "str"; v: string }
  | { t: "lit"; text: string }; // number (as written), true, false, null

const ws = (c: number) => c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0d;
const numberAt = /-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?/y;

class Parser {
  pos = 0;
  /** Start and end of each member (or item) of the outermost object (or array), when asked for. */
  spans: Array<[string, number, number]> | null = null;
  /** Refuse a string holding a lone surrogate (the canonical form's strings are UTF-8). */
  canonical = false;
  /** RFC 8785's numbers and refusals (rfc8785JSON). */
  rfc8785 = false;
  constructor(readonly s: string) {}
  fail(what: string): never {
    throw new SyntaxError(`idem: not JSON: ${what} at position ${this.pos}`);
  }
  skip(): void { while (this.pos < this.s.length && ws(this.s.charCodeAt(this.pos))) this.pos++; }
  value(depth: number): Node {
    if (depth > 512 && !this.rfc8785) this.fail("nesting deeper than 512");
    this.skip();
    const c = this.s[this.pos];
    if (c === "{") {
      this.pos++;
      const members: Array<[string, Node]> = [];
      this.skip();
      if (this.s[this.pos] === "}") { this.pos++; return { t: "obj", members }; }
      this.rfc8785Depth(depth);
      const names = this.rfc8785 ? new Set<string>() : null; // RFC 8785 refuses a name given twice
      for (;;) {
        this.skip();
        if (this.s[this.pos] !== '"') this.fail("expected a member name");
        const name = this.string();
        if (names?.has(name)) this.fail(`the member name ${JSON.stringify(name)} given twice`);
        names?.add(name);
        this.skip();
        if (this.s[this.pos] !== ":") this.fail("expected ':'");
        this.pos++;
        this.skip();
        const start = this.pos;
        members.push([name, this.value(depth + 1)]);
        if (depth === 0 && this.spans) this.spans.push([name, start, this.pos]);
        this.skip();
        const d = this.s[this.pos++];
        if (d === "}") return { t: "obj", members };
        if (d !== ",") { this.pos--; this.fail("expected ',' or '}'"); }
      }
    }
    if (c === "[") {
      this.pos++;
      const items: Node[] = [];
      this.skip();
      if (this.s[this.pos] === "]") { this.pos++; return { t: "arr", items }; }
      this.rfc8785Depth(depth);
      for (;;) {
        this.skip();
        const start = this.pos;
        items.push(this.value(depth + 1));
        if (depth === 0 && this.spans) this.spans.push([String(items.length - 1), start, this.pos]);
        this.skip();
        const d = this.s[this.pos++];
        if (d === "]") return { t: "arr", items };
        if (d !== ",") { this.pos--; this.fail("expected ',' or ']'"); }
      }
    }
    if (c === '"') return { t: "str", v: this.string() };
    for (const lit of ["true", "false", "null"]) {
      if (this.s.startsWith(lit, this.pos)) { this.pos += lit.length; return { t: "lit", text: lit }; }
    }
    numberAt.lastIndex = this.pos;
    const m = numberAt.exec(this.s);
    if (!m) this.fail(this.pos >= this.s.length ? "unexpected end" : "unexpected character");
    const text = this.rfc8785 ? this.ecmaNumber(m[0]) : m[0];
    this.pos += m[0].length;
    return { t: "lit", text };
  }
  /** The proxy's parser (simdjson) refuses a non-empty array or object 1024 deep (the outermost is 1). */
  rfc8785Depth(depth: number): void {
    if (this.rfc8785 && depth + 1 >= 1024) this.fail("nesting 1024 deep");
  }
  /**
   * A number as ECMAScript prints the nearest double (RFC 8785: 12.50 is 12.5, 1e21 is
   * 1e+21, -0 is 0); refused as the proxy's parser refuses it: past a double's range, or
   * an integer (no fraction, no exponent) outside int64 and uint64.
   */
  ecmaNumber(text: string): string {
    if (!/[.eE]/.test(text)) {
      const n = BigInt(text);
      if (n < -(2n ** 63n) || n >= 2n ** 64n) this.fail(`the integer ${text} past 64 bits`);
    }
    const v = Number(text);
    if (!Number.isFinite(v)) this.fail(`the number ${text} past a double's range`);
    return String(v);
  }
  string(): string {
    const start = this.pos;
    this.pos++;
    for (;;) {
      if (this.pos >= this.s.length) this.fail("unterminated string");
      const c = this.s.charCodeAt(this.pos);
      if (c === 0x22) break;
      if (c < 0x20) this.fail("a control character in a string");
      if (c === 0x5c) {
        const e = this.s[this.pos + 1];
        if (e === "u") {
          if (!/^[0-9a-fA-F]{4}$/.test(this.s.slice(this.pos + 2, this.pos + 6))) this.fail("a bad \\u escape");
          this.pos += 6;
          continue;
        }
        if (e === undefined || !'"\\/bfnrt'.includes(e)) this.fail("a bad escape");
        this.pos += 2;
        continue;
      }
      this.pos++;
    }
    this.pos++;
    const v = JSON.parse(this.s.slice(start, this.pos)) as string;
    const lone = this.canonical ? loneSurrogate.exec(v) : null;
    if (lone) {
      this.pos = start;
      this.fail(`a lone surrogate \\u${lone[0].charCodeAt(0).toString(16)} in the string`);
    }
    return v;
  }
}

/** Parses one JSON value (white space around it allowed); throws a SyntaxError otherwise. */
function parseJSON(text: string, spans?: Array<[string, number, number]>, canonical = false,
                   rfc8785 = false): Node {
  const p = new Parser(text);
  if (spans) p.spans = spans;
  p.canonical = canonical;
  p.rfc8785 = rfc8785;
  const v = p.value(0);
  p.skip();
  if (p.pos !== text.length) p.fail("more than one value");
  return v;
}

/** Whether text is one JSON value. */
export function isJSON(text: string): boolean {
  try { parseJSON(text); return true; } catch { return false; }
}

/** The items of a JSON array's text, each as its exact text ([] for another value). */
export function rawItems(text: string): string[] {
  const spans: Array<[string, number, number]> = [];
  return parseJSON(text, spans).t === "arr" ? spans.map(([, start, end]) => text.slice(start, end)) : [];
}

/** The members of a JSON object's text, each as the exact text of its value. */
export function rawMembers(text: string): Map<string, string> {
  const spans: Array<[string, number, number]> = [];
  const v = parseJSON(text, spans);
  const out = new Map<string, string>();
  if (v.t !== "obj") return out;
  for (const [name, start, end] of spans) out.set(name, text.slice(start, end));
  return out;
}

const byUTF8 = (a: string, b: string) => Buffer.compare(Buffer.from(a, "utf8"), Buffer.from(b, "utf8"));

const loneSurrogate = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/** A string of the canonical form: as JSON.stringify writes it (a lone surrogate is refused when read). */
const quote = (s: string) => JSON.stringify(s);

/** UTF-16 code unit order, RFC 8785's (JavaScript's own string order). */
const byUTF16 = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);

function canonical(n: Node, order: (a: string, b: string) => number = byUTF8): string {
  switch (n.t) {
    case "lit": return n.text;
    case "str": return quote(n.v);
    case "arr": return "[" + n.items.map((item) => canonical(item, order)).join(",") + "]";
    case "obj": {
      const last = new Map<string, Node>(); // a name given twice: the last value, as Go's
      for (const [k, v] of n.members) last.set(k, v);
      const names = [...last.keys()].sort(order);
      return "{" + names.map((k) => quote(k) + ":" + canonical(last.get(k)!, order)).join(",") + "}";
    }
  }
}

/**
 * One JSON value in the canonical form every idem client fingerprints (clients/CASES.md):
 * object members sorted by the code points of their names (UTF-8 byte order, not
 * UTF-16's), a name given twice keeping its last value; no white space; numbers as
 * written; strings as JSON.stringify writes them. Throws a SyntaxError on text that is
 * not one JSON value or holds a lone surrogate.
 */
export function canonicalJSON(text: string): string {
  return canonical(parseJSON(text, undefined, true));
}

/**
 * The RFC 8785 form (JSON Canonicalization Scheme) of one JSON value, the form idem proxy
 * --fingerprint json digests a request body by: members sorted by the UTF-16 code units
 * of their names, numbers as ECMAScript prints the double, strings as canonicalJSON
 * writes them. Throws a SyntaxError on what the proxy does not canonicalise: not one
 * JSON value, a lone surrogate, a member name given twice, a number past a double's
 * range or an integer past 64 bits, a non-empty array or object nested 1024 deep.
 */
export function rfc8785JSON(text: string): string {
  return canonical(parseJSON(text, undefined, true, true), byUTF16);
}

/** The lowercase hex SHA-256 of data (a string is its UTF-8 bytes), as idem's tools make it. */
export function fingerprint(data: string | Uint8Array): string {
  return createHash("sha256").update(typeof data === "string" ? Buffer.from(data, "utf8") : data).digest("hex");
}

/**
 * The fingerprint of a value's canonical JSON: two encodings of the same value (members
 * in another order, other spacing) have the same fingerprint. `value` is JSON text
 * (a RawJSON, or a string when `isText`), or any value JSON.stringify encodes.
 */
export function fingerprintJSON(value: unknown, isText = false): string {
  const text = value instanceof RawJSON ? value.text
    : isText && typeof value === "string" ? value : jsonTextOf(value);
  return fingerprint(canonicalJSON(text));
}
