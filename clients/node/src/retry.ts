// Full-jitter exponential backoff, and the test of which store faults are transient.

/** How often a call that met a transient fault is made again, and the waits in between. */
export interface Retry {
  /** Attempts in all, the first included; < 1 means 1. */
  maxAttempts: number;
  /** The cap of the first retry's delay, in ms. */
  baseDelayMs: number;
  /** The cap of every delay, in ms. */
  maxDelayMs: number;
}

/** 8 attempts, delays capped at 10 ms, 20 ms, ... up to 1 s (as the Go client's). */
export const DefaultRetry: Readonly<Retry> = Object.freeze({
  maxAttempts: 8, baseDelayMs: 10, maxDelayMs: 1000,
});

/** The wait before retry n (n >= 1): a random delay in [0, min(max, base·2^(n-1))). */
export function retryDelay(r: Retry, n: number): number {
  if (!(r.baseDelayMs > 0) || n < 1) return 0;
  let limit = r.baseDelayMs;
  for (let i = 1; i < n && (r.maxDelayMs <= 0 || limit < r.maxDelayMs); i++) limit *= 2;
  if (r.maxDelayMs > 0 && limit > r.maxDelayMs) limit = r.maxDelayMs;
  return Math.random() * limit;
}

export function sleep(ms: number): Promise<void> {
  return ms > 0 ? new Promise((resolve) => setTimeout(resolve, ms)) : Promise.resolve();
}

/** Checks a Retry given by the caller, naming the bad field. */
export function checkRetry(r: Retry, check: (ok: boolean, field: string, problem: string) => void): void {
  check(r !== null && typeof r === "object", "retry", "retry must be an object");
  check(Number.isInteger(r.maxAttempts) && r.maxAttempts >= 1 && r.maxAttempts <= 1000,
        "retry.maxAttempts", "retry.maxAttempts must be an integer from 1 to 1000");
  for (const f of ["baseDelayMs", "maxDelayMs"] as const) {
    check(typeof r[f] === "number" && Number.isFinite(r[f]) && r[f] >= 0 && r[f] <= 3_600_000,
          `retry.${f}`, `retry.${f} must be a number of ms from 0 to 3600000`);
  }
}

/**
 * Runs call until it succeeds, fails with an error `transient` does not accept, or runs
 * out of attempts; `delayOf` may lengthen a wait (Retry-After). Answers the attempts
 * made with the value, or throws the last error with `attempts` set on it.
 */
export async function withRetry<T>(r: Retry, transient: (err: unknown) => boolean,
                                   call: (attempt: number) => Promise<T>,
                                   delayOf?: (err: unknown, jitter: number) => number,
): Promise<{ value: T; attempts: number }> {
  const attempts = Math.max(1, Math.floor(r.maxAttempts));
  for (let n = 1; ; n++) {
    try {
      return { value: await call(n), attempts: n };
    } catch (err) {
      if (!transient(err) || n >= attempts) throw new RetryExhausted(err, n);
      const jitter = retryDelay(r, n);
      await sleep(delayOf ? delayOf(err, jitter) : jitter);
    }
  }
}

/** The last error of withRetry and the attempts made. */
export class RetryExhausted {
  constructor(readonly err: unknown, readonly attempts: number) {}
}

// Transient SQLSTATEs: serialization failure, deadlock, connection exceptions (class 08),
// operator intervention (class 57: pg_terminate_backend, shutdown) but a cancelled
// statement (57014).
function transientSQLState(state: string): boolean {
  return state === "40001" || state === "40P01" || state.startsWith("08") ||
    (state.startsWith("57") && state !== "57014");
}

// MySQL/MariaDB error numbers: deadlock, lock wait timeout, connection killed (MariaDB),
// server shutdown, server gone or lost, query interrupted, too many connections.
const transientMySQLErrors = new Set([1213, 1205, 1927, 1053, 2006, 2013, 1317, 1040]);

const transientNodeCodes = new Set([
  "ECONNRESET", "EPIPE", "ECONNREFUSED", "ETIMEDOUT", "ECONNABORTED", "EHOSTUNREACH",
  "ENETUNREACH", "EAI_AGAIN", "PROTOCOL_CONNECTION_LOST", "PROTOCOL_SEQUENCE_TIMEOUT",
  "ER_LOCK_DEADLOCK", "ER_LOCK_WAIT_TIMEOUT", "ER_CONNECTION_KILLED", "ER_QUERY_INTERRUPTED",
  "ER_SERVER_SHUTDOWN", "ER_CON_COUNT_ERROR",
]);

// Drivers that report a lost connection only in words (pg's "Connection terminated",
// "Client was closed and is not queryable"; mysql2's "Can't add new command when
// connection is in closed state").
const transientWords = [
  "connection terminated", "client was closed", "not queryable", "connection is in closed state",
  "connection lost", "connection reset", "broken pipe", "server closed the connection",
  "connection ended", "socket hang up", "ended by the other party",
];

/** The SQLSTATE of a driver error: pg's `code`, mysql2's `sqlState`; "" when unknown. */
export function sqlStateOf(err: unknown): string {
  if (err === null || typeof err !== "object") return "";
  const e = err as { code?: unknown; sqlState?: unknown; errno?: unknown };
  if (typeof e.sqlState === "string" && /^[0-9A-Z]{5}$/.test(e.sqlState)) return e.sqlState;
  if (typeof e.code === "string" && /^[0-9A-Z]{5}$/.test(e.code) && e.errno === undefined) {
    return e.code;
  }
  return "";
}

/**
 * Whether err is a fault of the store that may pass on its own and after which the
 * failed attempt committed nothing: a serialization failure (SQLSTATE 40001), a
 * deadlock (40P01, MySQL 1213), a lock wait timeout (1205), a killed or reset
 * connection. Drivers are recognised without importing them.
 */
export function isTransient(err: unknown): boolean {
  if (err === null || typeof err !== "object") return false;
  const e = err as { code?: unknown; errno?: unknown; message?: unknown; name?: unknown };
  if (e.name === "AbortError") return false;
  if (typeof e.code === "string" && transientNodeCodes.has(e.code)) return true; // EPIPE before SQLSTATEs
  const state = sqlStateOf(err);
  if (state !== "" && state !== "HY000" && state !== "45000") return transientSQLState(state);
  if (typeof e.errno === "number" && e.errno > 0 && transientMySQLErrors.has(e.errno)) return true;
  if (typeof e.code === "string" && transientNodeCodes.has(e.code)) return true;
  const msg = typeof e.message === "string" ? e.message.toLowerCase() : "";
  return transientWords.some((w) => msg.includes(w));
}
