// idem.run: a body run exactly once per key, in the transaction that claims the key.
import {
  ExpiredError, FingerprintMismatchError, IdemError, InvalidRequestError, KeyReusedError,
  UnavailableError, failureJSON, invalid, isPermanent,
} from "./errors.js";
import { isJSON, jsonTextOf } from "./json.js";
import {
  MaxBizTypeBytes, MaxFingerprintBytes, MaxFingerprintBytesMySQL, MaxKeyBytes, MaxTenantBytes,
  checkFingerprint, checkName,
} from "./request.js";
import { DefaultRetry, Retry, RetryExhausted, checkRetry, isTransient, withRetry } from "./retry.js";
import { APIRow, Dialect, SQLAPI, Session, Source, resolveDialect, sourceOf } from "./sqlapi.js";

/** One operation: its key within a biz_type, and the fingerprint of its payload. */
export interface RunRequest {
  bizType: string;
  key: string;
  /** The same on every retry of the operation; "" or absent for none. */
  fingerprint?: string;
}

export interface RunOptions {
  /** The database's dialect, instead of telling it from the driver object. */
  dialect?: Dialect;
  /** Keep the key's record this many ms after its first claim (whole seconds, rounded up); default for ever. */
  retention?: number;
  /** Attempts and backoff after transient store faults; default DefaultRetry. */
  retry?: Retry;
  /** The tenant of the key; default the SQL API's ("default"). */
  tenant?: string;
  /** Which errors are transient store faults; default isTransient. */
  isTransient?: (err: unknown) => boolean;
}

interface Base {
  /** The transactions run began (more than 1 after transient faults). */
  attempts: number;
  /** The record's fencing token (in_progress: the holder's); 0 when none. */
  token: number;
  /** When the key's record may be purged; null: kept for ever (or unknown). */
  expiresAt: Date | null;
}

/** What run did, by outcome. */
export type RunResult<T = unknown> =
  /** The body ran, and its result committed with the claim. */
  | (Base & { outcome: "executed"; result: T; resultText: string; takeover: boolean })
  /** Finished before: the stored result (resultText byte for byte); the body did not run. */
  | (Base & { outcome: "replayed"; result: T; resultText: string })
  /** Failed before, for good: the stored failure. */
  | (Base & { outcome: "cached_failure"; error: unknown; errorText: string })
  /** The body failed permanently (cause), its work rolled back, and the failure is now stored. */
  | (Base & { outcome: "failed"; error: unknown; errorText: string; cause: unknown })
  /** Another holder's lease on the key is live. */
  | (Base & { outcome: "in_progress"; leaseUntil: Date | null })
  /** The key belongs to another biz_type. */
  | (Base & { outcome: "key_reused" })
  /** The key was first used with another fingerprint. */
  | (Base & { outcome: "fingerprint_mismatch" })
  /** The key's record was purged after its retention. */
  | (Base & { outcome: "expired" });

/** The outcomes run answers. */
export type RunOutcome = RunResult["outcome"];

/** A body's own error, carried out of the retry loop unretried. */
class BodyError {
  constructor(readonly err: unknown) {}
}

interface Plan {
  api: SQLAPI;
  source: Source;
  bizType: string;
  key: string;
  fingerprint: string;
  tenant: string;
  retentionS: number;
  retry: Retry;
  transient: (err: unknown) => boolean;
}

const maxRetentionMs = 100 * 366 * 86_400_000;

/** Checks every value of a run before any I/O, naming the field of a bad one. */
function plan(db: unknown, req: RunRequest, body: unknown, opts: RunOptions): Plan {
  if (req === null || typeof req !== "object") throw invalid("request", "the request must be an object");
  if (opts === null || typeof opts !== "object") throw invalid("options", "the options must be an object");
  const dialect = resolveDialect(db, opts.dialect);
  checkName("biz_type", req.bizType, MaxBizTypeBytes);
  checkName("key", req.key, MaxKeyBytes);
  checkFingerprint(req.fingerprint,
    dialect === "mysql" ? MaxFingerprintBytesMySQL : MaxFingerprintBytes);
  if (opts.tenant !== undefined) checkName("tenant", opts.tenant, MaxTenantBytes);
  let retentionS = 0;
  if (opts.retention !== undefined) {
    const r = opts.retention;
    if (typeof r !== "number" || !Number.isFinite(r) || r <= 0 || r > maxRetentionMs) {
      throw invalid("retention", `retention must be a number of ms above 0 and at most ${maxRetentionMs}, got ${String(r)}`);
    }
    retentionS = Math.ceil(r / 1000);
  }
  const retry = opts.retry ?? DefaultRetry;
  checkRetry(retry, (ok, field, problem) => { if (!ok) throw invalid(field, problem); });
  if (typeof body !== "function") throw invalid("body", "the body must be a function (tx) => result");
  if (opts.isTransient !== undefined && typeof opts.isTransient !== "function") {
    throw invalid("isTransient", "isTransient must be a function");
  }
  return {
    api: new SQLAPI(dialect), source: sourceOf(db, dialect), bizType: req.bizType, key: req.key,
    fingerprint: req.fingerprint ?? "", tenant: opts.tenant ?? "default", retentionS, retry,
    transient: opts.isTransient ?? isTransient,
  };
}

function parseStored(text: string | null): unknown {
  if (text === null) return null;
  try { return JSON.parse(text); } catch { return text; }
}

function fromClaim<T>(row: APIRow, attempts: number): RunResult<T> {
  const base = { attempts, token: row.token, expiresAt: row.expiresAt };
  switch (row.outcome) {
    case "replayed":
      return { ...base, outcome: "replayed", result: parseStored(row.resultText) as T,
               resultText: row.resultText ?? "null" };
    case "cached_failure":
      return { ...base, outcome: "cached_failure", error: parseStored(row.errorText),
               errorText: row.errorText ?? "null" };
    case "in_progress":
      return { ...base, outcome: "in_progress", leaseUntil: row.leaseUntil };
    case "key_reused": case "fingerprint_mismatch": case "expired":
      return { ...base, outcome: row.outcome };
  }
  throw new Error(`idem: claim_v1 answered the unknown outcome ${JSON.stringify(row.outcome)}`);
}

/**
 * Runs the work of a session's transaction: BEGIN, work, and on any error a ROLLBACK;
 * the session is dropped when the error is a connection fault.
 */
async function inTransaction<T>(p: Plan, work: (s: Session) => Promise<T>): Promise<T> {
  const s = await p.source.acquire();
  let broken = false;
  try {
    await p.api.begin(s);
    return await work(s);
  } catch (err) {
    const cause = err instanceof BodyError ? err.err : err;
    broken = !(cause instanceof IdemError) && p.transient(cause);
    try { await p.api.rollback(s); } catch { broken = true; }
    throw err;
  } finally {
    s.release(broken);
  }
}

/** One attempt: claim, body, complete, commit in one transaction. */
async function runOnce<T>(p: Plan, body: (tx: any) => unknown, attempts: number): Promise<RunResult<T>> {
  return inTransaction(p, async (s) => {
    const claim = await p.api.claim(s, p.bizType, p.key, p.fingerprint, p.tenant, p.retentionS);
    if (claim.outcome !== "acquired") {
      await p.api.rollback(s);
      return fromClaim<T>(claim, attempts);
    }
    let text: string;
    try {
      text = jsonTextOf(await body(s.conn));
    } catch (err) {
      if (p.transient(err) && !isPermanent(err)) throw err; // a store fault inside the body: start over
      throw new BodyError(err);
    }
    if (!isJSON(text)) {
      throw new BodyError(new InvalidRequestError("idem: invalid_request: the body's result is not valid JSON", "result"));
    }
    await p.api.complete(s, p.bizType, p.key, text, p.tenant);
    await p.api.commit(s);
    return { outcome: "executed", result: JSON.parse(text) as T, resultText: text,
             attempts, token: claim.token, expiresAt: claim.expiresAt, takeover: claim.takeover };
  });
}

function unavailable(err: unknown, attempts: number): UnavailableError {
  const m = err instanceof Error ? err.message : String(err);
  return new UnavailableError(`idem: unavailable: the store failed (${attempts} attempts): ${m}`,
                              { cause: err, attempts });
}

/**
 * Runs body exactly once per key, however often the same request arrives:
 *
 *  1. begins a transaction on db and claims the key in it through the SQL API;
 *  2. acquired: runs body(tx) in the same transaction (tx is the connection: do every
 *     write through it), stores its result (any JSON value; a RawJSON is stored as
 *     written) and commits: outcome "executed";
 *  3. finished before: "replayed" (the stored result) or "cached_failure" without
 *     running body; another holder's lease live: "in_progress"; "key_reused",
 *     "fingerprint_mismatch", "expired" refuse the request.
 *
 * A body error marked permanent (PermanentError, permanent(err)) rolls back, and a new
 * transaction stores the failure: "failed". Any other body error rolls back and is
 * thrown as is (the key stays free). Transient store faults (serialization failure,
 * deadlock, a killed connection) roll back and rerun the whole transaction with
 * full-jitter backoff; after the last attempt an UnavailableError is thrown.
 *
 * db: a pg Client, PoolClient or Pool, or a mysql2/promise Connection or Pool (a pool
 * gives each attempt a connection; after a connection fault a single connection cannot
 * be used again). Bad input throws an InvalidRequestError naming the field, before any I/O.
 */
export async function run<T = unknown, C = any>(db: C, request: RunRequest,
                                                 body: (tx: any) => Promise<unknown> | unknown,
                                                 options: RunOptions = {}): Promise<RunResult<T>> {
  const p = plan(db, request, body, options);
  const transient = (err: unknown) => !(err instanceof BodyError) && !(err instanceof IdemError) && p.transient(err);
  let attempts = 0;
  try {
    const done = await withRetry(p.retry, transient, (n) => { attempts = n; return runOnce<T>(p, body, n); });
    return done.value;
  } catch (e) {
    const { err } = e as RetryExhausted;
    if (err instanceof BodyError) {
      if (!isPermanent(err.err)) throw err.err;
      return storeFailure<T>(p, err.err, attempts);
    }
    if (!(err instanceof IdemError) && p.transient(err)) throw unavailable(err, attempts);
    throw err;
  }
}

/**
 * Stores a body's permanent failure, its work already rolled back: a new transaction
 * claims the key again and fails it for good. A duplicate that finished the key in
 * between wins; its answer is returned.
 */
async function storeFailure<T>(p: Plan, cause: unknown, before: number): Promise<RunResult<T>> {
  const failure = failureJSON(cause);
  const transient = (err: unknown) => !(err instanceof IdemError) && p.transient(err);
  let res: RunResult<T>;
  try {
    res = (await withRetry(p.retry, transient, (n) => inTransaction(p, async (s) => {
      const claim = await p.api.claim(s, p.bizType, p.key, p.fingerprint, p.tenant, p.retentionS);
      if (claim.outcome !== "acquired") {
        await p.api.rollback(s);
        return fromClaim<T>(claim, before + n);
      }
      await p.api.fail(s, p.bizType, p.key, false, failure, p.tenant);
      await p.api.commit(s);
      return { outcome: "failed", error: JSON.parse(failure), errorText: failure, cause,
               attempts: before + n, token: claim.token, expiresAt: claim.expiresAt } as RunResult<T>;
    }))).value;
  } catch (e) {
    const { err, attempts } = e as RetryExhausted;
    const m = err instanceof Error ? err.message : String(err);
    const c = cause instanceof Error ? cause.message : String(cause);
    const message = `idem: the body failed permanently (${c}) and the failure could not be stored: ${m}`;
    if (!(err instanceof IdemError) && p.transient(err)) {
      throw new UnavailableError(message, { cause: err, attempts: before + attempts });
    }
    throw new Error(message, { cause: err });
  }
  // Our own failure, committed by an attempt whose answer was lost.
  if (res.outcome === "cached_failure" && res.errorText === failure) {
    return { ...res, outcome: "failed", cause };
  }
  return res;
}

/** The error of an outcome that refuses the request (key_reused, fingerprint_mismatch, expired), else null. */
export function outcomeError(r: RunResult): IdemError | null {
  switch (r.outcome) {
    case "key_reused": return new KeyReusedError();
    case "fingerprint_mismatch": return new FingerprintMismatchError();
    case "expired": return new ExpiredError();
  }
  return null;
}
