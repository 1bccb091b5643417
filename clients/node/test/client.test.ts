// The HTTP client against the built idem serve: exact JSON text, batches, records,
// typed problems, and resends after 503 honouring Retry-After.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { AddressInfo } from "node:net";
import * as idem from "../src/index.js";
import { Serve, startServe } from "./helpers.js";

let s: Serve;
let c: idem.Client;
before(async () => { s = await startServe(); c = new idem.Client({ baseUrl: s.url, token: s.token1 }); });
after(async () => { await s?.stop(); });

test("a result sent as RawJSON is replayed byte for byte", async () => {
  const key = `c-raw-${Date.now()}`;
  const claim = await c.claim({ bizType: "refund", key, fingerprint: "fp" });
  assert.equal(claim.outcome, "acquired");
  assert.equal(await c.complete("refund", key, claim.token, idem.rawJSON('{"amount": 12.50}')), "completed");
  const again = await c.claim({ bizType: "refund", key, fingerprint: "fp" });
  assert.equal(again.outcome, "replayed");
  assert.equal(again.replayed, true);
  assert.equal(again.resultText, '{"amount": 12.50}');
  const rec = await c.getRecord("refund", key);
  assert.equal(rec.state, "SUCCEEDED");
  assert.equal(rec.resultText, '{"amount": 12.50}');
  const page = await c.listRecords({ bizType: "refund", limit: 1000 });
  assert.ok(page.records.some((r) => r.key === key));
  await assert.rejects(c.getRecord("refund", "none-" + key), idem.NotFoundError);
  // Another tenant does not see it.
  const c2 = new idem.Client({ baseUrl: s.url, token: s.token2 });
  await assert.rejects(c2.getRecord("refund", key), idem.NotFoundError);
});

test("a batch answers each item as its single call would", async () => {
  const key = `c-batch-${Date.now()}`;
  const answers = await c.batch([
    { op: "claim", bizType: "refund", key, fingerprint: "fp" },
    { op: "claim", bizType: "refund", key, fingerprint: "fp" },
  ]);
  assert.equal(answers[0].status, 201);
  assert.equal((answers[0].value as idem.Claim).outcome, "acquired");
  assert.ok(answers[1].error instanceof idem.InProgressError);
  const token = (answers[0].value as idem.Claim).token;
  const done = await c.batch([{ op: "complete", bizType: "refund", key, token, result: idem.rawJSON("[1.50]") },
                              { op: "claim", bizType: "refund", key, fingerprint: "fp" }]);
  assert.deepEqual(done[0].value, { outcome: "completed" });
  assert.equal((done[1].value as idem.Claim).resultText, "[1.50]");
});

test("503 and no answer are sent again, honouring Retry-After", async () => {
  let calls = 0;
  const flaky = createServer((req, res) => {
    calls++;
    assert.equal(req.headers["user-agent"], `idem-node/${idem.VERSION}`);
    if (calls === 1) { res.writeHead(503, { "Retry-After": "1", "Content-Type": "application/problem+json" });
                       res.end('{"type":"urn:idem:problem:store_unavailable","title":"x","status":503,"detail":"down"}'); return; }
    res.writeHead(201, { "Content-Type": "application/json" });
    res.end('{"outcome":"acquired","token":7,"lease_until":"2030-01-01T00:00:00Z","takeover":false,"expires_at":null}');
  });
  await new Promise<void>((r) => flaky.listen(0, "127.0.0.1", r));
  const url = `http://127.0.0.1:${(flaky.address() as AddressInfo).port}`;
  const fc = new idem.Client({ baseUrl: url, token: "t", retry: { maxAttempts: 3, baseDelayMs: 1, maxDelayMs: 5 } });
  const t0 = Date.now();
  const claim = await fc.claim({ bizType: "b", key: "k" });
  assert.equal(claim.token, 7);
  assert.equal(calls, 2);
  assert.ok(Date.now() - t0 >= 1000, "Retry-After was not honoured");
  flaky.close();
  const dead = new idem.Client({ baseUrl: url, token: "t", retry: { maxAttempts: 2, baseDelayMs: 1, maxDelayMs: 2 } });
  await assert.rejects(dead.claim({ bizType: "b", key: "k" }), (err: unknown) =>
    err instanceof idem.UnavailableError && err.status === 0 && err.attempts === 2);
});
