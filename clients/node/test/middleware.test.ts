// The middleware (Express-style and the node:http wrapper) through the SQL API, served
// by node:http: the first answer of a key is stored and replayed, refusals as idem proxy's.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { createServer, IncomingMessage, Server, ServerResponse } from "node:http";
import { AddressInfo, connect } from "node:net";
import createApp from "express";
import type { NextFunction, Request, Response } from "express";
import * as idem from "../src/index.js";
import { TestDB, createLedger, dbEnvs, insertLedger, openTestDB, skipReason } from "./helpers.js";

async function listen(handler: (req: IncomingMessage, res: ServerResponse) => void): Promise<{ url: string; server: Server }> {
  const server = createServer(handler);
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, server };
}

for (const { env, name } of dbEnvs) {
  describe(`middleware on ${name}`, { skip: skipReason(env) || undefined }, () => {
    let d: TestDB;
    let runs = 0;
    const faulted = new Set<string>();
    const servers: Server[] = [];
    let plainUrl = "", expressUrl = "", appUrl = "";
    before(async () => {
      d = await openTestDB(env, 8);
      await createLedger(d);
      // The node:http wrapper: a refund route writing its ledger row through req.idem.tx.
      const plain = await listen(idem.wrap(d.pool, async (req, res) => {
        runs++;
        const chunks: Buffer[] = [];
        for await (const c of req) chunks.push(c as Buffer);
        const body = JSON.parse(Buffer.concat(chunks).toString() || "{}");
        if (body.fail === "teapot") { res.writeHead(418, { "Content-Type": "text/plain" }); res.end("no"); return; }
        if (body.fail === "busy") { res.writeHead(503); res.end("busy"); return; }
        await insertLedger(d, req.idem!.tx, String(body.key), `F-${runs}`);
        if (body.fail === "transient-once" && !faulted.has(body.key)) {
          faulted.add(body.key); // a serialization failure: the transaction reruns, the route with it
          await (req.idem!.tx as any).query(d.name === "postgres"
            ? "DO $$ BEGIN RAISE EXCEPTION 'injected' USING ERRCODE = '40001'; END $$"
            : "SIGNAL SQLSTATE '40001' SET MESSAGE_TEXT = 'injected'");
        }
        res.setHeader("Content-Type", "application/json");
        res.setHeader("Set-Cookie", "s=1");
        res.writeHead(201);
        res.end(JSON.stringify({ refund_id: `F-${runs}`, amount: "12.50" }));
      }));
      // The (req, res, next) form, then a route, as Express chains them.
      const mw = idem.middleware(d.pool, { bizType: "http-express" });
      const express = await listen((req, res) => mw(req, res, (err?: unknown) => {
        if (err) { res.writeHead(500); res.end(String(err)); return; }
        runs++;
        const body = (req as unknown as { body: { key: string } }).body;
        res.statusCode = 200;
        res.setHeader("Content-Type", "application/json");
        res.end(JSON.stringify({ got: body.key, run: runs }));
      }));
      // Express itself: the middleware before express.json(), which then leaves req.body alone.
      const app = createApp();
      app.use(idem.middleware(d.pool, { bizType: "http-app" }));
      app.use(createApp.json());
      app.post("/refunds", async (req, res, next) => {
        try {
          runs++;
          if (req.body.fail) throw new Error("route failed");
          await insertLedger(d, (req as any).idem.tx, req.body.key, `A-${runs}`);
          res.status(201).set("X-Refund", `A-${runs}`).json({ refund_id: `A-${runs}`, amount: 12.5 });
        } catch (err) {
          next(err);
        }
      });
      app.use((err: Error, _req: Request, res: Response, _next: NextFunction) => {
        res.status(500).json({ error: err.message });
      });
      const appServer = await new Promise<Server>((r) => { const srv = app.listen(0, "127.0.0.1", () => r(srv)); });
      appUrl = `http://127.0.0.1:${(appServer.address() as AddressInfo).port}`;
      servers.push(plain.server, express.server, appServer);
      plainUrl = plain.url;
      expressUrl = express.url;
    });
    after(async () => {
      for (const s of servers) s.close();
      await d?.close();
    });

    const post = (url: string, key: string | undefined, body: unknown, headers: Record<string, string> = {}) =>
      fetch(url + "/refunds", { method: "POST", body: JSON.stringify(body),
        headers: { "Content-Type": "application/json", ...(key ? { "Idempotency-Key": key } : {}), ...headers } });

    test("the first answer is stored and replayed; another body is 422", async () => {
      const key = `mw-${Date.now()}`;
      const first = await post(plainUrl, key, { key });
      assert.equal(first.status, 201);
      assert.equal(first.headers.get("set-cookie"), "s=1");
      const text = await first.text();
      const before = runs;
      const again = await post(plainUrl, key, { key });
      assert.equal(again.status, 201);
      assert.equal(again.headers.get("idempotent-replayed"), "true");
      assert.equal(again.headers.get("content-type"), "application/json");
      assert.equal(again.headers.get("set-cookie"), null, "Set-Cookie is not replayed");
      assert.equal(await again.text(), text);
      assert.equal(runs, before);
      const other = await post(plainUrl, key, { key, amount: 2 }, { "X-Request-Id": "req-1" });
      assert.equal(other.status, 422);
      assert.equal(other.headers.get("content-type"), "application/problem+json");
      assert.equal(other.headers.get("x-request-id"), "req-1");
      const p = await other.json() as any;
      assert.equal(p.type, "urn:idem:problem:fingerprint_mismatch");
      assert.equal(p.outcome, "fingerprint_mismatch");
      assert.equal(p.request_id, "req-1");
      const rows = await d.query(`SELECT COUNT(*) AS n FROM ledger WHERE refund_key = ${d.ph(1)}`, [key]);
      assert.equal(Number(rows[0].n), 1);
    });

    test("refusals: no key, a bad key, a large body", async () => {
      const none = await post(plainUrl, undefined, {});
      assert.equal(none.status, 400);
      assert.equal((await none.json() as any).type, "urn:idem:problem:missing_idempotency_key");
      const bad = await post(plainUrl, '"unclosed', {});
      assert.equal(bad.status, 400);
      assert.equal((await bad.json() as any).type, "urn:idem:problem:invalid_idempotency_key");
      // fetch joins a repeated header; a raw request sends each line.
      const u = new URL(plainUrl);
      const raw = await new Promise<string>((resolve, reject) => {
        const sock = connect(Number(u.port), u.hostname, () => sock.end(
          "POST /refunds HTTP/1.1\r\nHost: x\r\nIdempotency-Key: a\r\nIdempotency-Key: b\r\n" +
          "Content-Length: 2\r\nConnection: close\r\n\r\n{}"));
        let t = "";
        sock.on("data", (c) => (t += c));
        sock.on("end", () => resolve(t));
        sock.on("error", reject);
      });
      assert.match(raw, /^HTTP\/1\.1 400 /);
      assert.match(raw, /given more than once/);
      const big = await post(plainUrl, "big-1", { pad: "x".repeat((1 << 20) + 10) });
      assert.equal(big.status, 413);
      const get = await fetch(plainUrl); // GET passes through, no key needed
      assert.notEqual(get.status, 400);
      await get.text();
    });

    test("a 4xx is stored, a 5xx leaves the key free", async () => {
      const key = `mw-4xx-${Date.now()}`;
      assert.equal((await post(plainUrl, key, { fail: "teapot" })).status, 418);
      const again = await post(plainUrl, key, { fail: "teapot" });
      assert.equal(again.status, 418);
      assert.equal(again.headers.get("idempotent-replayed"), "true");
      const key5 = `mw-5xx-${Date.now()}`;
      assert.equal((await post(plainUrl, key5, { fail: "busy" })).status, 503);
      const later = await post(plainUrl, key5, { fail: "busy" });
      assert.equal(later.headers.get("idempotent-replayed"), null);
    });

    test("a transient store fault under the route reruns it in a new transaction", async () => {
      const key = `mw-t-${Date.now()}`;
      const before = runs;
      const first = await post(plainUrl, key, { key, fail: "transient-once" });
      assert.equal(first.status, 201);
      assert.equal(runs, before + 2);
      const rows = await d.query(`SELECT COUNT(*) AS n FROM ledger WHERE refund_key = ${d.ph(1)}`, [key]);
      assert.equal(Number(rows[0].n), 1);
    });

    test("under Express, the route's answer is stored and replayed; an error answer leaves the key free", async () => {
      const key = `mw-app-${Date.now()}`;
      const first = await post(appUrl, key, { key });
      assert.equal(first.status, 201);
      const body = await first.json() as any;
      const before = runs;
      const again = await post(appUrl, key, { key });
      assert.equal(again.status, 201);
      assert.equal(again.headers.get("idempotent-replayed"), "true");
      assert.equal(again.headers.get("x-refund"), body.refund_id);
      assert.deepEqual(await again.json(), body);
      assert.equal(runs, before);
      const rows = await d.query(`SELECT COUNT(*) AS n FROM ledger WHERE refund_key = ${d.ph(1)}`, [key]);
      assert.equal(Number(rows[0].n), 1);
      const failKey = `mw-app-f-${Date.now()}`;
      assert.equal((await post(appUrl, failKey, { key: failKey, fail: true })).status, 500);
      const retried = await post(appUrl, failKey, { key: failKey });
      assert.equal(retried.status, 201);
      assert.equal(retried.headers.get("idempotent-replayed"), null);
    });

    test("409 in_progress while a lease holds the key, Retry-After its end", async () => {
      const key = `mw-held-${Date.now()}`;
      await d.query(d.name === "postgres" ? "SELECT * FROM idem.lease_claim_v1($1, $2, NULL, lease => '60 seconds')"
        : "CALL idem_sql_lease_claim_v1(?, ?, NULL, 'default', NULL, 60)", ["http", key]);
      const before = runs;
      const got = await post(plainUrl, key, {}, { "X-Request-Id": "m-2" });
      assert.equal(got.status, 409);
      assert.equal(got.headers.get("content-type"), "application/problem+json");
      assert.equal(await got.text(), '{"type":"urn:idem:problem:in_progress","title":"Conflict","status":409,' +
        '"detail":"a request with this Idempotency-Key is still being processed","outcome":"in_progress","request_id":"m-2"}');
      const ra = Number(got.headers.get("retry-after"));
      assert.ok(ra >= 50 && ra <= 60, `Retry-After ${ra}, want the lease's ~60 s`);
      assert.equal(runs, before);
    });

    test("duplicates sent at once: one runs, the others get its answer", async () => {
      let n = 0;
      const { url, server } = await listen(idem.wrap(d.pool, async (_req, res) => {
        const run = ++n;
        await new Promise((r) => setTimeout(r, 50));
        res.end(`run ${run}`);
      }));
      const key = `mw-dup-${Date.now()}`;
      const answers = await Promise.all(Array.from({ length: 8 }, async () => {
        const r = await post(url, key, {});
        return { status: r.status, body: await r.text(), replayed: r.headers.get("idempotent-replayed") === "true" };
      }));
      server.close();
      for (const a of answers) assert.deepEqual([a.status, a.body], [200, "run 1"]);
      assert.equal(n, 1);
      assert.equal(answers.filter((a) => a.replayed).length, 7);
    });

    test("canonicalJSON: the same JSON written otherwise is the same request; clientHeader keeps keys per client", async () => {
      let n = 0;
      const { url, server } = await listen(idem.wrap(d.pool, (_req, res) => { res.end(`run ${++n}`); },
                                                     { canonicalJSON: true, clientHeader: "Authorization" }));
      const key = `mw-c-${Date.now()}`;
      const send = async (client: string, body: string) => {
        const r = await fetch(url + "/refunds", { method: "POST", body,
          headers: { "Idempotency-Key": key, Authorization: client } });
        return { status: r.status, body: await r.text(), replayed: r.headers.get("idempotent-replayed") === "true" };
      };
      assert.deepEqual(await send("Bearer A", '{"amount": 1, "to": "x"}'), { status: 200, body: "run 1", replayed: false });
      assert.deepEqual(await send("Bearer A", '{"to":"x","amount":1}'), { status: 200, body: "run 1", replayed: true });
      assert.equal((await send("Bearer A", '{"to":"x","amount":2}')).status, 422);
      assert.deepEqual(await send("Bearer B", '{"to":"x","amount":2}'), { status: 200, body: "run 2", replayed: false });
      const none = await fetch(url + "/refunds", { method: "POST", body: "{}", headers: { "Idempotency-Key": key } });
      assert.equal(none.status, 400);
      assert.equal((await none.json() as any).type, "urn:idem:problem:missing_client_identity");
      const rows = await d.query(`SELECT COUNT(DISTINCT tenant) AS n FROM idem_records WHERE idem_key = ${d.ph(1)}`, [key]);
      assert.equal(Number(rows[0].n), 2);
      server.close();
    });

    test("the (req, res, next) form stores and replays the route's answer", async () => {
      const key = `mw-x-${Date.now()}`;
      const first = await post(expressUrl, key, { key });
      assert.equal(first.status, 200);
      const body = await first.json() as any;
      assert.equal(body.got, key);
      const again = await post(expressUrl, key, { key });
      assert.equal(again.headers.get("idempotent-replayed"), "true");
      assert.deepEqual(await again.json(), body);
    });
  });
}
