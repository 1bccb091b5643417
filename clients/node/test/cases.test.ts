// The shared case table (clients/cases.json, read at test time; clients/CASES.md says how):
// every decorator case through idem.run on PostgreSQL and MariaDB, every http case
// through the HTTP client against an idem serve.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { randomBytes } from "node:crypto";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import * as idem from "../src/index.js";
import { Serve, TestDB, createLedger, dbEnvs, idemBin, insertLedger, openTestDB, run, skipReason, startServe } from "./helpers.js";

const here = dirname(fileURLToPath(import.meta.url));
// .test-out/test -> clients/cases.json
const casesPath = process.env.IDEM_CASES ?? join(here, "..", "..", "..", "cases.json");
const table = JSON.parse(readFileSync(casesPath, "utf8"));
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Each alias of a case as a key of this run. */
function keyMapper(caseName: string) {
  const suffix = randomBytes(4).toString("hex");
  return (step: { key?: string; key_literal?: string }) =>
    step.key_literal !== undefined ? step.key_literal : `cases-${caseName}-${step.key}-${suffix}`;
}

function checkContains(text: string, want: string | undefined, what: string) {
  if (want !== undefined) assert.ok(text.includes(want), `${what} ${JSON.stringify(text)} lacks ${JSON.stringify(want)}`);
}

async function transientFault(d: TestDB, tx: any): Promise<void> {
  if (d.name === "postgres") {
    await tx.query("DO $$ BEGIN RAISE EXCEPTION 'injected serialization failure' USING ERRCODE = '40001'; END $$");
  } else {
    await tx.query("SIGNAL SQLSTATE '40001' SET MESSAGE_TEXT = 'injected serialization failure'");
  }
}

for (const { env, name } of dbEnvs) {
  describe(`decorator cases on ${name}`, { skip: skipReason(env) || undefined }, () => {
    let d: TestDB;
    before(async () => { d = await openTestDB(env, 40); await createLedger(d); });
    after(async () => { await d?.close(); });

    for (const c of table.decorator) {
      const only: string[] | undefined = c.only;
      if (only && !only.includes("sql")) continue;
      test(c.name, async () => {
        const keyOf = keyMapper(c.name);
        let runs = 0;
        const firstClaim = new Map<string, number>();
        for (const [i, step] of (c.steps as any[]).entries()) {
          const where = `step ${i + 1}`;
          if (step.purge) {
            const key = keyOf(step.purge);
            const start = firstClaim.get(key) ?? Date.now();
            const wait = start + (step.purge.retention_s ?? 1) * 1000 + 1100 - Date.now();
            await sleep(Math.max(wait, 0));
            await run(idemBin(), ["purge", "--store", d.store]);
            continue;
          }
          const call = step.call;
          const key = keyOf(call);
          if (!firstClaim.has(key)) firstClaim.set(key, Date.now());
          const h = call.handler;
          const body = async (tx: any) => {
            runs++;
            const n = runs;
            if (h.sleep_ms) await sleep(h.sleep_ms);
            if (h.fails === "permanent") throw new idem.PermanentError(h.message);
            if (h.fails === "retryable") throw new Error(h.message);
            await insertLedger(d, tx, key, `run-${n}`);
            if (h.transient_faults !== undefined && n <= h.transient_faults) await transientFault(d, tx);
            return h.returns;
          };
          const opts: idem.RunOptions = { retry: { maxAttempts: 8, baseDelayMs: 5, maxDelayMs: 50 } };
          if (call.retention_s) opts.retention = call.retention_s * 1000;
          const once = async () => {
            try {
              return await idem.run(d.pool, { bizType: call.biz_type, key, fingerprint: call.fingerprint }, body, opts);
            } catch (err) {
              return { outcome: err instanceof idem.InvalidRequestError ? "invalid_request" : "error", err } as const;
            }
          };
          const answers = await Promise.all(Array.from({ length: call.concurrent ?? 1 }, once));
          const exp = step.expect;
          if (exp.outcomes) {
            const counts: Record<string, number> = {};
            for (const a of answers) counts[a.outcome] = (counts[a.outcome] ?? 0) + 1;
            assert.deepEqual(counts, exp.outcomes, `${where}: outcomes`);
          }
          for (const a of answers) {
            if (exp.outcome) assert.equal(a.outcome, exp.outcome, `${where}: outcome (${"err" in a ? String(a.err) : ""})`);
            if (exp.result !== undefined) {
              assert.ok("resultText" in a, `${where}: no result in ${a.outcome}`);
              assert.deepEqual(JSON.parse((a as { resultText: string }).resultText), exp.result, `${where}: result`);
            }
            if (exp.error_contains !== undefined) {
              const text = "errorText" in a ? a.errorText : "err" in a ? String((a.err as Error).message) : "";
              checkContains(text, exp.error_contains, `${where}: error`);
            }
          }
          if (exp.handler_runs !== undefined) assert.equal(runs, exp.handler_runs, `${where}: handler runs`);
          if (exp.ledger_rows !== undefined) {
            // PostgreSQL text cannot hold a NUL: no row has such a key.
            const rows = key.includes("\0") ? [{ n: 0 }]
              : await d.query(`SELECT COUNT(*) AS n FROM ledger WHERE refund_key = ${d.ph(1)}`, [key]);
            assert.equal(Number(rows[0].n), exp.ledger_rows, `${where}: ledger rows`);
          }
        }
      });
    }
  });
}

describe("http cases", () => {
  let s: Serve;
  let sent = 0;
  let client: idem.Client;
  before(async () => {
    s = await startServe(
      '[retention.expiring]\nredelivery = "0s"\nrecon_cycle = "0s"\nconfirm_window = "0s"\nmargin = "1s"\n',
      // CASES.md asks for --purge-every 200ms; idem serve refuses anything under 1s
      // ("--purge-every must be 1s or more"), and the purge step polls for up to 10 s.
      ["--purge-every", "1s"]);
    const counting: typeof fetch = (input, init) => { sent++; return fetch(input, init); };
    client = new idem.Client({ baseUrl: s.url, token: s.token1, fetch: counting });
  });
  after(async () => { await s?.stop(); });

  for (const c of table.http) {
    test(c.name, async () => {
      const keyOf = keyMapper(c.name);
      const tokens = new Map<string, number>();
      for (const [i, step] of (c.steps as any[]).entries()) {
        const where = `step ${i + 1}`;
        if (step.sleep_ms !== undefined) { await sleep(step.sleep_ms); continue; }
        if (step.purge) {
          const key = keyOf(step.purge);
          const deadline = Date.now() + 10_000;
          for (;;) {
            try {
              await client.getRecord(step.purge.biz_type, key);
            } catch (err) {
              if (err instanceof idem.NotFoundError || err instanceof idem.ExpiredError) break;
              throw err;
            }
            assert.ok(Date.now() < deadline, `${where}: the record of ${key} was not purged within 10 s`);
            await sleep(100);
          }
          continue;
        }
        const exp = step.expect;
        const before = sent;
        let answer: any;
        let error: unknown;
        try {
          if (step.claim) {
            const r = step.claim;
            answer = await client.claim({ bizType: r.biz_type, key: keyOf(r), fingerprint: r.fingerprint, leaseMs: r.lease_ms });
          } else if (step.complete) {
            const r = step.complete;
            answer = { outcome: await client.complete(r.biz_type, keyOf(r), tokens.get(r.token)!, r.result) };
          } else if (step.fail) {
            const r = step.fail;
            answer = { outcome: await client.fail(r.biz_type, keyOf(r), tokens.get(r.token)!, r.retryable, r.error) };
          } else {
            assert.fail(`${where}: unknown step ${JSON.stringify(step)}`);
          }
        } catch (err) {
          error = err;
        }
        if (exp.error !== undefined) {
          assert.ok(error instanceof idem.IdemError, `${where}: expected ${exp.error}, got ${JSON.stringify(answer)} / ${String(error)}`);
          assert.equal(error.code, exp.error, `${where}: error code (${error.message})`);
          if (exp.status !== undefined) assert.equal(error.status, exp.status, `${where}: status`);
          if (exp.retry_after) assert.ok((error.retryAfterMs ?? 0) > 0, `${where}: no Retry-After`);
          if (exp.client_side) assert.equal(sent, before, `${where}: a request was sent`);
          checkContains(error.message, exp.error_contains, `${where}: error message`);
          continue;
        }
        assert.equal(error, undefined, `${where}: ${String(error)}`);
        if (exp.outcome !== undefined) assert.equal(answer.outcome, exp.outcome, `${where}: outcome`);
        if (exp.takeover !== undefined) assert.equal(answer.takeover, exp.takeover, `${where}: takeover`);
        if (exp.save_token !== undefined) tokens.set(exp.save_token, answer.token);
        if (exp.result !== undefined) assert.deepEqual(JSON.parse(answer.resultText), exp.result, `${where}: result`);
        if (exp.error_json !== undefined) assert.deepEqual(JSON.parse(answer.errorText), exp.error_json, `${where}: error`);
      }
    });
  }
});
