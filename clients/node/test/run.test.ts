// idem.run with a single connection (pg Client, mysql2/promise Connection): the result
// stored byte for byte, a permanent failure stored, a plain error leaving the key free.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import pg from "pg";
import mysql from "mysql2/promise";
import * as idem from "../src/index.js";
import { TestDB, dbEnvs, openTestDB, skipReason, startServe } from "./helpers.js";

for (const { env, name } of dbEnvs) {
  describe(`run with one connection on ${name}`, { skip: skipReason(env) || undefined }, () => {
    let d: TestDB;
    let conn: any;
    before(async () => {
      d = await openTestDB(env, 2);
      if (name === "postgres") { conn = new pg.Client({ connectionString: d.store }); await conn.connect(); }
      else { const u = new URL(d.store); conn = await mysql.createConnection({ host: u.hostname, port: Number(u.port),
        user: decodeURIComponent(u.username), password: decodeURIComponent(u.password), database: u.pathname.slice(1) }); }
    });
    after(async () => { await conn?.end(); await d?.close(); });

    test("the dialect is told from the connection", () => {
      assert.equal(idem.detectDialect(conn), name);
      assert.equal(idem.detectDialect(d.pool), name);
    });

    test("a RawJSON result is stored and replayed byte for byte", async () => {
      const r = await idem.run(conn, { bizType: "refund", key: "raw-1" }, () => idem.rawJSON('{"amount": 12.50}'),
                               { retention: 1500 });
      assert.equal(r.outcome, "executed");
      assert.ok(r.expiresAt instanceof Date && r.expiresAt.getTime() > Date.now());
      const again = await idem.run(conn, { bizType: "refund", key: "raw-1" }, () => assert.fail("ran twice"));
      assert.equal(again.outcome, "replayed");
      assert.equal(again.outcome === "replayed" && again.resultText, '{"amount": 12.50}');
    });

    test("a permanent failure is stored; a plain error leaves the key free", async () => {
      const failed = await idem.run(conn, { bizType: "refund", key: "perm-1" },
        () => { throw new idem.PermanentError("declined", { failure: { code: "DECLINED" } }); });
      assert.equal(failed.outcome, "failed");
      assert.equal(failed.outcome === "failed" && failed.errorText, '{"code":"DECLINED"}');
      const cached = await idem.run(conn, { bizType: "refund", key: "perm-1" }, () => 1);
      assert.equal(cached.outcome, "cached_failure");
      await assert.rejects(idem.run(conn, { bizType: "refund", key: "free-1" }, () => { throw new Error("timeout"); }), /timeout/);
      const later = await idem.run(conn, { bizType: "refund", key: "free-1" }, () => 2);
      assert.equal(later.outcome, "executed");
      const other = await idem.run(conn, { bizType: "payout", key: "free-1" }, () => 3);
      assert.equal(other.outcome, "key_reused");
      assert.ok(idem.outcomeError(other) instanceof idem.KeyReusedError);
    });

    test("idem.run and idem serve on the same database see one record per key", async () => {
      const serve = await startServe("", [], d.store);
      try {
        const c = new idem.Client({ baseUrl: serve.url, token: serve.token1 });
        const opts = { tenant: "t1" };
        const stored = await idem.run(conn, { bizType: "refund", key: "S-1", fingerprint: "fp-1" },
                                      () => idem.rawJSON('{"refund_id": "F-1", "amount": 12.50}'), opts);
        assert.equal(stored.outcome, "executed");
        const again = await c.claim({ bizType: "refund", key: "S-1", fingerprint: "fp-1" });
        assert.equal(again.outcome, "replayed");
        assert.equal(again.resultText, '{"refund_id": "F-1", "amount": 12.50}');
        await assert.rejects(c.claim({ bizType: "refund", key: "S-1", fingerprint: "fp-2" }), idem.FingerprintMismatchError);
        const claim = await c.claim({ bizType: "refund", key: "H-1", fingerprint: "fp-h" });
        assert.equal(await c.complete("refund", "H-1", claim.token, { refund_id: "F-2" }), "completed");
        const replayed = await idem.run(conn, { bizType: "refund", key: "H-1", fingerprint: "fp-h" },
                                        () => assert.fail("ran"), opts);
        assert.equal(replayed.outcome === "replayed" && replayed.resultText, '{"refund_id":"F-2"}');
        const held = await c.claim({ bizType: "refund", key: "H-2", fingerprint: "fp", leaseMs: 60000 });
        const busy = await idem.run(conn, { bizType: "refund", key: "H-2", fingerprint: "fp" }, () => assert.fail("ran"), opts);
        assert.equal(busy.outcome, "in_progress");
        assert.equal(busy.token, held.token);
      } finally {
        await serve.stop();
      }
    });

    test("tenants keep keys apart", async () => {
      const a = await idem.run(conn, { bizType: "refund", key: "ten-1" }, () => "a", { tenant: "t-a" });
      const b = await idem.run(conn, { bizType: "refund", key: "ten-1" }, () => "b", { tenant: "t-b" });
      assert.equal(a.outcome, "executed");
      assert.equal(b.outcome, "executed");
    });
  });
}
