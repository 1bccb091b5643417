// No database, no server: every field is checked before any I/O, fingerprints, retries,
// errors, and the package's version against idem's.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import * as idem from "../src/index.js";
import { bodyDigest } from "../src/middleware.js";

const here = dirname(fileURLToPath(import.meta.url));

/** A pg-shaped client that fails the test on any I/O. */
function noIO(dialect: "postgres" | "mysql") {
  const fail = () => { throw new Error("I/O before the request was checked"); };
  return dialect === "postgres"
    ? { connectionParameters: {}, query: fail, connect: fail }
    : { connection: {}, query: fail, execute: fail };
}

async function refused(p: Promise<unknown> | (() => unknown), field: string, text: string) {
  await assert.rejects(async () => (typeof p === "function" ? p() : p), (err: unknown) => {
    assert.ok(err instanceof idem.InvalidRequestError, `not an InvalidRequestError: ${String(err)}`);
    assert.equal(err.field, field);
    assert.ok(err.message.includes(text), `${err.message} lacks ${text}`);
    return true;
  });
}

test("run checks every field before any I/O, naming it", async () => {
  const body = async () => 1;
  for (const dialect of ["postgres", "mysql"] as const) {
    const db = noIO(dialect);
    const ok = { bizType: "refund", key: "K-1" };
    await refused(idem.run(db, { ...ok, key: "" }, body), "key", "key is empty");
    await refused(idem.run(db, { ...ok, key: "a".repeat(256) }, body), "key", "256 bytes, over the limit of 255");
    await refused(idem.run(db, { ...ok, key: "é".repeat(128) }, body), "key", "256 bytes");
    await refused(idem.run(db, { ...ok, key: "K\0" }, body), "key", "NUL character at index 1");
    await refused(idem.run(db, { ...ok, key: "K\ud800" }, body), "key", "lone surrogate at index 1");
    await refused(idem.run(db, { ...ok, key: "\udc00K" }, body), "key", "lone surrogate at index 0");
    await refused(idem.run(db, { ...ok, key: 7 as unknown as string }, body), "key", "must be a string");
    await refused(idem.run(db, { ...ok, bizType: "" }, body), "biz_type", "biz_type is empty");
    await refused(idem.run(db, { ...ok, bizType: "b\0" }, body), "biz_type", "NUL");
    await refused(idem.run(db, { ...ok, fingerprint: "f".repeat(1025) }, body), "fingerprint", "1025 bytes, over the limit of");
    await refused(idem.run(db, ok, body, { tenant: "" }), "tenant", "tenant is empty");
    await refused(idem.run(db, ok, body, { tenant: "t".repeat(256) }), "tenant", "over the limit of 255");
    await refused(idem.run(db, ok, body, { retention: 0 }), "retention", "retention must be");
    await refused(idem.run(db, ok, body, { retention: Number.NaN }), "retention", "retention must be");
    await refused(idem.run(db, ok, body, { retry: { maxAttempts: 0, baseDelayMs: 1, maxDelayMs: 1 } }),
                  "retry.maxAttempts", "retry.maxAttempts");
    await refused(idem.run(db, ok, body, { retry: { maxAttempts: 2, baseDelayMs: -1, maxDelayMs: 1 } }),
                  "retry.baseDelayMs", "retry.baseDelayMs");
    await refused(idem.run(db, ok, body, { dialect: "oracle" as "mysql" }), "dialect", "dialect must be");
    await refused(idem.run(db, ok, "no" as unknown as () => number), "body", "the body must be a function");
  }
  // The fingerprint's bound is the dialect's: 255 bytes on MySQL/MariaDB.
  await refused(idem.run(noIO("mysql"), { bizType: "b", key: "k", fingerprint: "f".repeat(256) }, body),
                "fingerprint", "over the limit of 255");
  await refused(idem.run({}, { bizType: "b", key: "k" }, body), "db", "pg Client");
  await refused(idem.run({ query() {} }, { bizType: "b", key: "k" }, body), "dialect", "cannot tell");
});

test("the HTTP client checks every field before sending", async () => {
  let sent = 0;
  const c = new idem.Client({ baseUrl: "http://127.0.0.1:1", token: "t",
                              fetch: (async () => { sent++; throw new Error("sent"); }) as typeof fetch });
  await refused(c.claim({ bizType: "b", key: "" }), "key", "key is empty");
  await refused(c.claim({ bizType: "", key: "k" }), "biz_type", "biz_type is empty");
  await refused(c.claim({ bizType: "b", key: "k\ud800" }), "key", "lone surrogate");
  await refused(c.claim({ bizType: "b", key: "k", fingerprint: "f".repeat(1025) }), "fingerprint", "1024");
  await refused(c.claim({ bizType: "b", key: "k", leaseMs: 0 }), "lease_ms", "lease_ms must be");
  await refused(c.claim({ bizType: "b", key: "k", waitMs: 1.5 }), "wait_ms", "wait_ms must be");
  await refused(c.complete("b", "k", 0, {}), "token", "token must be");
  await refused(c.complete("b", "k", 1, idem.rawJSON("1") && new idem.RawJSON("{x")), "result", "not a JSON value");
  await refused(c.fail("b", "k", 1, "yes" as unknown as boolean, {}), "retryable", "retryable must be");
  await refused(c.getRecord("b", ""), "key", "key is empty");
  await refused(c.listRecords({ limit: 0 }), "limit", "limit must be");
  await refused(c.batch([]), "requests", "1 to 1000");
  await refused(c.batch([{ op: "claim", bizType: "b", key: "k" }, { op: "claim", bizType: "b", key: "" }]),
                "requests[1].key", "key is empty");
  await refused(c.batch([{ op: "nope" } as unknown as idem.BatchItem]), "requests[0].op", "op must be");
  assert.equal(sent, 0);
  await refused(() => new idem.Client({ baseUrl: "ftp://x", token: "t" }), "baseUrl", "http://host");
  await refused(() => new idem.Client({ baseUrl: "http://x", token: "a\nb" }), "token", "line break");
});

test("fingerprints are hex SHA-256, of canonical JSON with numbers as written", () => {
  assert.equal(idem.fingerprint("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  assert.equal(idem.fingerprint(new Uint8Array([0x61, 0x62, 0x63])), idem.fingerprint("abc"));
  assert.equal(idem.canonicalJSON(' { "b" : [1, 12.50, "x"], "a": {"d": null, "c": true} } '),
               '{"a":{"c":true,"d":null},"b":[1,12.50,"x"]}');
  assert.equal(idem.fingerprintJSON({ b: 1, a: 2 }), idem.fingerprintJSON('{"a":2, "b":1}', true));
  assert.equal(idem.fingerprintJSON(idem.rawJSON('{"a": 12.50}')), idem.fingerprint('{"a":12.50}'));
  assert.throws(() => idem.canonicalJSON('{"a":1} {"b":2}'), /more than one value/);
  assert.throws(() => idem.canonicalJSON('{"a":01}'), /not JSON/);
  assert.throws(() => idem.rawJSON("{x"), SyntaxError);
});

// The canonical_json cases of the shared table (clients/cases.json, read at test time;
// clients/CASES.md gives the canonical form). .test-out/test -> clients/cases.json
test("canonicalJSON answers the shared canonical_json cases", () => {
  const casesPath = process.env.IDEM_CASES ?? join(here, "..", "..", "..", "cases.json");
  const cases = JSON.parse(readFileSync(casesPath, "utf8")).canonical_json as
    Array<{ name: string; json: string; canonical?: string; sha256?: string; error?: boolean }>;
  assert.ok(cases.length > 0, "cases.json has no canonical_json cases");
  for (const c of cases) {
    if (c.error) {
      assert.throws(() => idem.canonicalJSON(c.json), /lone surrogate/, c.name);
      assert.throws(() => idem.fingerprintJSON(c.json, true), /lone surrogate/, c.name);
      continue;
    }
    assert.equal(idem.canonicalJSON(c.json), c.canonical, c.name);
    assert.equal(idem.fingerprintJSON(c.json, true), c.sha256, c.name);
  }
});

// tests/jcs_vectors.json, the RFC 8785 forms idem proxy --fingerprint json digests bodies
// by (its canonicalizer is checked against the same file): the middleware's digest of each
// body is the proxy's, "jcs:" and the digest of the expected form, or of the body's bytes
// when the proxy refuses it. .test-out/test -> tests/jcs_vectors.json
test("the middleware digests a JSON body as idem proxy does", () => {
  const vectorsPath = join(here, "..", "..", "..", "..", "tests", "jcs_vectors.json");
  const vectors = JSON.parse(readFileSync(vectorsPath, "utf8")).vectors as
    Array<{ name: string; json?: string; json_hex?: string; canonical?: string; refused?: boolean }>;
  assert.ok(vectors.length > 0, "jcs_vectors.json has no vectors");
  for (const v of vectors) {
    assert.equal(v.canonical === undefined, v.refused === true, `${v.name}: give one of canonical, refused`);
    const body = v.json !== undefined ? Buffer.from(v.json, "utf8") : Buffer.from(v.json_hex!, "hex");
    const want = v.refused ? idem.fingerprint(body) : "jcs:" + idem.fingerprint(v.canonical!);
    assert.equal(bodyDigest(body, true), want, `${v.name}: ${body.toString("utf8").slice(0, 80)}`);
  }
  assert.equal(bodyDigest(Buffer.from('{"n":1.0}'), false), idem.fingerprint('{"n":1.0}'));
});

test("fingerprintJSON of a value: code point order, and a lone surrogate refused", () => {
  // UTF-16 order would put U+1F600 (a surrogate pair) before U+E000.
  assert.equal(idem.canonicalJSON(JSON.stringify({ "\u{1F600}": 1, "\uE000": 2, s: "a\u2028\b" })),
               '{"s":"a\u2028\\b","\uE000":2,"\u{1F600}":1}');
  assert.throws(() => idem.fingerprintJSON({ a: "x\uD800" }),
                /not JSON: a lone surrogate \\ud800 in the string at position 5/);
});

test("permanent marks an error; its failure is stored as JSON", () => {
  const e = idem.permanent(new Error("card declined"));
  assert.ok(idem.isPermanent(e));
  assert.ok(idem.isPermanent({ permanent: true }));
  assert.ok(!idem.isPermanent(new Error("x")));
  assert.equal(idem.failureJSON(e), '{"error":"card declined"}');
  assert.equal(idem.failureJSON(new idem.PermanentError("x", { failure: { code: "DECLINED" } })), '{"code":"DECLINED"}');
});

test("errors are IdemErrors of their code, by class and by answer", () => {
  const e = new idem.KeyReusedError();
  assert.ok(e instanceof idem.IdemError && e instanceof Error);
  assert.equal(e.name, "KeyReusedError");
  assert.equal(e.code, "key_reused");
  assert.match(e.message, /belongs to another biz_type/);
  const cases: Array<[string, new (...a: any[]) => idem.IdemError]> = [
    ["in_progress", idem.InProgressError], ["lease_lost", idem.LeaseLostError], ["conflict", idem.ConflictError],
    ["not_found", idem.NotFoundError], ["expired", idem.ExpiredError], ["store_unavailable", idem.UnavailableError],
    ["fingerprint_mismatch", idem.FingerprintMismatchError], ["invalid_request", idem.InvalidRequestError],
  ];
  for (const [slug, cls] of cases) assert.ok(idem.errorOf(slug, "m", { status: 409 }) instanceof cls, slug);
  assert.equal(idem.errorOf("other", "m").code, "problem");
});

test("transient store faults are told from the rest", () => {
  const t = (o: object) => idem.isTransient(Object.assign(new Error((o as any).message ?? "x"), o));
  assert.ok(t({ code: "40001" }));
  assert.ok(t({ code: "40P01" }));
  assert.ok(t({ code: "57P01" }));
  assert.ok(!t({ code: "57014" }));
  assert.ok(!t({ code: "23505" }));
  assert.ok(t({ errno: 1213, sqlState: "40001", code: "ER_LOCK_DEADLOCK" }));
  assert.ok(t({ errno: 1205, sqlState: "HY000", code: "ER_LOCK_WAIT_TIMEOUT" }));
  assert.ok(t({ errno: 1644, sqlState: "40001" }));
  assert.ok(!t({ errno: 1062, sqlState: "23000", code: "ER_DUP_ENTRY" }));
  assert.ok(t({ code: "ECONNRESET", errno: -104 }));
  assert.ok(t({ message: "Connection terminated unexpectedly" }));
  assert.ok(!idem.isTransient(new Error("card declined")));
  const r = { maxAttempts: 8, baseDelayMs: 10, maxDelayMs: 1000 };
  for (let n = 1; n < 12; n++) {
    const d = idem.retryDelay(r, n);
    assert.ok(d >= 0 && d < Math.min(1000, 10 * 2 ** (n - 1)), `delay ${n}: ${d}`);
  }
  assert.deepEqual({ ...idem.DefaultRetry }, r);
});

test("Idempotency-Key values are read as idem proxy reads them", () => {
  assert.equal(idem.parseIdempotencyKey("abc-1"), "abc-1");
  assert.equal(idem.parseIdempotencyKey(' "a \\"b\\"";x=1'), 'a "b"');
  assert.equal(idem.parseIdempotencyKey("tok;param"), "tok");
  for (const bad of ["", '"unclosed', '"a"b', "a b", '""', "x".repeat(256)]) {
    assert.throws(() => idem.parseIdempotencyKey(bad), idem.InvalidRequestError, bad);
  }
});

test("the package's version is idem's", () => {
  const want = process.env.IDEM_PROJECT_VERSION;
  assert.ok(want, "IDEM_PROJECT_VERSION is not set (ctest passes CMake's PROJECT_VERSION)");
  const pkg = JSON.parse(readFileSync(join(here, "..", "..", "package.json"), "utf8"));
  assert.equal(pkg.version, want);
  assert.equal(idem.VERSION, want, "src/version.ts");
});
