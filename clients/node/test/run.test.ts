// idem.run with a single connection (pg Client, mysql2/promise Connection): the result
// stored byte for byte, a permanent failure stored, a plain error leaving the key free.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import pg from "pg";
import mysql from "mysql2/promise";
import * as idem from "../src/index.js";
import { TestDB, dbEnvs, openTestDB, skipReason } from "./helpers.js";

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

    test("tenants keep keys apart", async () => {
      const a = await idem.run(conn, { bizType: "refund", key: "ten-1" }, () => "a", { tenant: "t-a" });
      const b = await idem.run(conn, { bizType: "refund", key: "ten-1" }, () => "b", { tenant: "t-b" });
      assert.equal(a.outcome, "executed");
      assert.equal(b.outcome, "executed");
    });
  });
}
