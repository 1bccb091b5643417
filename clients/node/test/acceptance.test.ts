// The acceptance test of idem.run (as the Go client's): a refund (a ledger row, the claim
// and the result in one transaction) delivered 16 times at once for each of 1,000 keys,
// with rollbacks injected into the body and connections killed from a second
// connection under it. Every key ends with one ledger row and a SUCCEEDED record, every
// delivery is answered the result of the transaction that committed, nothing stays PROCESSING.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import * as idem from "../src/index.js";
import { TestDB, createLedger, dbEnvs, insertLedger, openTestDB, skipReason } from "./helpers.js";

const refunds = Number(process.env.IDEM_NODE_REFUNDS ?? 1000);
const duplicates = 16;
const keysAtOnce = 4;
const injected = new Error("injected rollback");

for (const { env, name } of dbEnvs) {
  describe(`refund acceptance on ${name}`, { skip: skipReason(env) || undefined }, () => {
    let d: TestDB;
    before(async () => { d = await openTestDB(env, 48); await createLedger(d); });
    after(async () => { await d?.close(); });

    test(`${refunds} refunds under ${duplicates} concurrent duplicates, rollbacks and killed connections`, async () => {
      const retry = { maxAttempts: 10, baseDelayMs: 2, maxDelayMs: 100 };
      let runs = 0, rollbacks = 0, kills = 0, executed = 0;
      const answers: string[][] = Array.from({ length: refunds }, () => new Array(duplicates).fill(""));
      const started = Date.now();

      const deliver = async (k: number, dup: number) => {
        const key = `R-${String(k).padStart(4, "0")}`;
        const body = async (tx: any) => {
          const n = ++runs;
          const id = `F-${key}-${n}`;
          await insertLedger(d, tx, key, id);
          const p = Math.random() * 100;
          if (p < 10) { rollbacks++; throw injected; }
          if (p < 13) {
            const [row] = d.name === "postgres" ? (await tx.query("SELECT pg_backend_pid() AS id")).rows
              : (await tx.query("SELECT CONNECTION_ID() AS id"))[0];
            await d.query(d.name === "postgres" ? "SELECT pg_terminate_backend($1)" : `KILL CONNECTION ${Number(row.id)}`,
                          d.name === "postgres" ? [row.id] : []);
            kills++;
          }
          return { refund_id: id };
        };
        for (let delivery = 1; delivery <= 500; delivery++) {
          let r;
          try {
            r = await idem.run<{ refund_id: string }>(d.pool, { bizType: "refund", key, fingerprint: idem.fingerprint(key) },
                                                      body, { retry });
          } catch (err) {
            if (err === injected || err instanceof idem.UnavailableError) continue; // redelivered, as a queue would
            throw new Error(`${key} delivery ${dup}: ${String(err)}`, { cause: err });
          }
          if (r.outcome === "in_progress") { await new Promise((res) => setTimeout(res, 1 + Math.random() * 5)); continue; }
          if (r.outcome === "executed" || r.outcome === "replayed") {
            if (r.outcome === "executed") executed++;
            answers[k][dup] = r.result.refund_id;
            return;
          }
          throw new Error(`${key} delivery ${dup}: unexpected ${JSON.stringify(r)}`);
        }
        throw new Error(`${key} delivery ${dup}: no answer after 500 redeliveries`);
      };

      let next = 0;
      await Promise.all(Array.from({ length: keysAtOnce }, async () => {
        while (next < refunds) {
          const k = next++;
          await Promise.all(Array.from({ length: duplicates }, (_, dup) => deliver(k, dup)));
        }
      }));
      console.log(`${name}: ${runs} body runs, ${rollbacks} injected rollbacks, ${kills} connections killed, ` +
                  `${executed} executed answers, ${Date.now() - started} ms`);
      assert.ok(rollbacks > 0 && kills > 0, `no faults injected (rollbacks ${rollbacks}, kills ${kills})`);

      const ledger = new Map<string, string>();
      for (const row of await d.query("SELECT refund_key, refund_id FROM ledger")) {
        assert.ok(!ledger.has(row.refund_key), `${row.refund_key} has two ledger rows`);
        ledger.set(row.refund_key, row.refund_id);
      }
      assert.equal(ledger.size, refunds, "keys with a ledger row");
      answers.forEach((got, k) => {
        const key = `R-${String(k).padStart(4, "0")}`;
        got.forEach((id, dup) => assert.equal(id, ledger.get(key), `${key} delivery ${dup}`));
      });
      assert.ok(executed <= refunds, `${executed} deliveries were answered executed`);
      const [processing] = await d.query("SELECT COUNT(*) AS n FROM idem_records WHERE state = 0");
      assert.equal(Number(processing.n), 0, "records left PROCESSING");
      const [succeeded] = await d.query("SELECT COUNT(*) AS n FROM idem_records WHERE state = 1");
      assert.equal(Number(succeeded.n), refunds, "records SUCCEEDED");
    });
  });
}
