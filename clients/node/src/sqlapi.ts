// The SQL API of idem (docs/sql.md) over the user's own driver: pg (a Client, a
// PoolClient or a Pool) or mysql2/promise (a Connection or a Pool), recognised by
// shape, never imported.
import {
  ConflictError, InvalidRequestError, KeyReusedError, LeaseLostError, NotFoundError, invalid,
} from "./errors.js";
import { sqlStateOf } from "./retry.js";

/** The SQL flavour of the database: PostgreSQL functions or MySQL/MariaDB procedures. */
export type Dialect = "postgres" | "mysql";

/** The outcomes of the SQL API's claim. */
export type ClaimOutcome =
  | "acquired" | "replayed" | "in_progress" | "key_reused" | "fingerprint_mismatch"
  | "cached_failure" | "expired";

/** One row of the SQL API, its JSON columns as text. */
export interface APIRow {
  outcome: string;
  resultText: string | null;
  errorText: string | null;
  token: number;
  expiresAt: Date | null;
  leaseUntil: Date | null;
  takeover: boolean;
}

/** A connection checked out for one transaction. */
export interface Session {
  /** What the handler gets: the driver's connection. */
  conn: unknown;
  /** Runs one statement, its rows with every column as text (or null). */
  rows(sql: string, args: unknown[]): Promise<Array<Record<string, string | null>>>;
  /** Gives the connection back; `broken` drops it (a pool's) after a connection fault. */
  release(broken: boolean): void;
}

/** Where sessions come from: one connection used again, or a pool. */
export interface Source {
  dialect: Dialect;
  acquire(): Promise<Session>;
}

type AnyObj = Record<string, unknown> & { [k: string]: any };
const noop = () => {};
const textType = { getTypeParser: () => (v: string) => v };

function isObj(v: unknown): v is AnyObj {
  return v !== null && typeof v === "object";
}

/** The dialect of a driver object by its shape; undefined when unknown. */
export function detectDialect(db: unknown): Dialect | undefined {
  if (!isObj(db)) return undefined;
  if (typeof db.getConnection === "function" || typeof db.execute === "function") return "mysql";
  if ("connectionParameters" in db || ("totalCount" in db && typeof db.connect === "function")) {
    return "postgres";
  }
  return undefined;
}

function isPool(db: AnyObj, d: Dialect): boolean {
  return d === "mysql" ? typeof db.getConnection === "function"
    : "totalCount" in db && typeof db.connect === "function" && !("connectionParameters" in db);
}

/** A session on one connection; `release` only drops the error listener attached for it. */
function session(conn: AnyObj, d: Dialect, release: (broken: boolean) => void): Session {
  // A connection killed while idle emits 'error'; with no listener Node would end the
  // process. The fault surfaces through the next statement instead.
  const emitters = [conn, d === "mysql" ? conn.connection : undefined].filter(
    (e): e is AnyObj => isObj(e) && typeof e.on === "function");
  for (const e of emitters) e.on("error", noop);
  return {
    conn,
    async rows(sql, args) {
      if (d === "postgres") {
        const r = await conn.query({ text: sql, values: args, types: textType });
        return (r?.rows ?? []) as Array<Record<string, string | null>>;
      }
      const [res] = await conn.query({
        sql, values: args,
        typeCast: (field: { string(): string | null }) => field.string(),
      });
      // A CALL answers its result sets and then a status.
      const first = Array.isArray(res) && Array.isArray(res[0]) ? res[0] : res;
      return (Array.isArray(first) ? first : []) as Array<Record<string, string | null>>;
    },
    release(broken) {
      for (const e of emitters) e.removeListener("error", noop);
      release(broken);
    },
  };
}

/** The source of a driver object: a connection used for every attempt, or a pool. */
export function sourceOf(db: unknown, dialect: Dialect): Source {
  const o = db as AnyObj;
  if (isPool(o, dialect)) {
    return {
      dialect,
      async acquire() {
        if (dialect === "postgres") {
          const c = await o.connect();
          return session(c, dialect, (broken) => c.release(broken ? true : undefined));
        }
        const c = await o.getConnection();
        return session(c, dialect, (broken) => (broken ? c.destroy() : c.release()));
      },
    };
  }
  return { dialect, acquire: async () => session(o, dialect, noop) };
}

/** Checks the database object and names its dialect, before any I/O. */
export function resolveDialect(db: unknown, given: unknown): Dialect {
  if (!isObj(db) || typeof db.query !== "function" && typeof db.connect !== "function") {
    throw invalid("db", "idem: the database must be a pg Client, PoolClient or Pool, or a " +
      "mysql2/promise Connection or Pool");
  }
  if (given !== undefined) {
    if (given !== "postgres" && given !== "mysql") {
      throw invalid("dialect", `dialect must be "postgres" or "mysql", got ${String(given)}`);
    }
    return given;
  }
  const d = detectDialect(db);
  if (d === undefined) {
    throw invalid("dialect", "cannot tell the SQL dialect of the database object; pass " +
      '{ dialect: "postgres" } or { dialect: "mysql" }');
  }
  if (d === "mysql" && !isObj(db.connection) && !isObj(db.pool)) {
    // mysql2's callback API has no promise wrapper.
    throw invalid("db", "a mysql2 connection must come from mysql2/promise");
  }
  return d;
}

/** A timestamp of the API: timestamptz text (PostgreSQL) or DATETIME(6) text in UTC (MySQL). */
export function parseTime(v: string | null | undefined): Date | null {
  if (v === null || v === undefined || v === "") return null;
  let s = v.trim().replace(" ", "T");
  const zone = /([+-]\d{2})(:?(\d{2}))?$/.exec(s.slice(19));
  if (zone) s = s.slice(0, 19 + zone.index) + zone[1] + ":" + (zone[3] ?? "00");
  else if (!/[zZ]$/.test(s)) s += "Z";
  const t = new Date(s);
  if (Number.isNaN(t.getTime())) throw new Error(`idem: unreadable timestamp ${JSON.stringify(v)}`);
  return t;
}

function readRow(row: Record<string, string | null> | undefined, name: string): APIRow {
  if (!row) throw new Error(`idem: ${name} returned no row`);
  const at: Record<string, string | null> = {};
  for (const [k, v] of Object.entries(row)) at[k.toLowerCase()] = v === undefined ? null : v;
  const outcome = at.outcome;
  if (!outcome) throw new Error(`idem: ${name} returned no outcome (columns ${Object.keys(row).join(", ")})`);
  const token = at.token ? Number(at.token) : 0;
  if (!Number.isSafeInteger(token)) throw new Error(`idem: ${name} returned the token ${at.token}`);
  const takeover = at.takeover ?? "";
  return {
    outcome,
    resultText: at.result ?? null,
    errorText: at.error ?? null,
    token,
    expiresAt: parseTime(at.expires_at),
    leaseUntil: parseTime(at.lease_until),
    takeover: takeover === "1" || takeover === "t" || takeover === "true",
  };
}

/** An error the SQL API raised, as this package's error (the driver's as its cause). */
export function apiError(err: unknown): unknown {
  const state = sqlStateOf(err);
  const message = err instanceof Error ? err.message : String(err);
  const d = { cause: err };
  switch (state) {
    case "22023": return new InvalidRequestError(message, undefined, d);
    case "IDM01": return new NotFoundError(message, d);
    case "IDM02": return new KeyReusedError(message, d);
    case "IDM03": return new LeaseLostError(message, d);
    case "IDM04": return new ConflictError(message, d);
  }
  return err;
}

/** The SQL API of one dialect on one session. */
export class SQLAPI {
  constructor(readonly d: Dialect) {}

  async call(s: Session, name: string, args: unknown[]): Promise<APIRow> {
    let q: string;
    if (this.d === "postgres") {
      const ph = args.map((_, i) => `$${i + 1}`);
      if (name === "claim_v1") ph[4] += "::interval";
      q = `SELECT * FROM idem.${name}(${ph.join(", ")})`;
    } else {
      q = `CALL idem_sql_${name}(${args.map(() => "?").join(", ")})`;
    }
    let rows;
    try {
      rows = await s.rows(q, args);
    } catch (err) {
      throw apiError(err);
    }
    return readRow(rows[0], name);
  }

  claim(s: Session, bizType: string, key: string, fp: string, tenant: string,
        retentionS: number): Promise<APIRow> {
    const keep = retentionS > 0 ? (this.d === "postgres" ? `${retentionS} seconds` : retentionS) : null;
    return this.call(s, "claim_v1", [bizType, key, fp === "" ? null : fp, tenant, keep]);
  }

  async complete(s: Session, bizType: string, key: string, result: string, tenant: string): Promise<void> {
    finishError("complete_v1", (await this.call(s, "complete_v1", [bizType, key, result, tenant])).outcome);
  }

  async fail(s: Session, bizType: string, key: string, retryable: boolean, failure: string,
             tenant: string): Promise<void> {
    finishError("fail_v1",
      (await this.call(s, "fail_v1", [bizType, key, retryable, failure, tenant])).outcome);
  }

  begin(s: Session): Promise<unknown> {
    return s.rows(this.d === "postgres" ? "BEGIN" : "START TRANSACTION", []);
  }
  commit(s: Session): Promise<unknown> { return s.rows("COMMIT", []); }
  rollback(s: Session): Promise<unknown> { return s.rows("ROLLBACK", []); }
}

/** A complete or fail whose row reports a guard outcome (the claim it finishes was lost). */
function finishError(name: string, outcome: string): void {
  switch (outcome) {
    case "key_reused": throw new KeyReusedError(`idem: ${name} answered key_reused`);
    case "lease_lost": throw new LeaseLostError(`idem: ${name} answered lease_lost`);
    case "not_found": throw new NotFoundError(`idem: ${name} answered not_found`);
    case "conflict": throw new ConflictError(`idem: ${name} answered conflict`);
    case "fingerprint_mismatch": case "expired": case "in_progress":
      throw new ConflictError(`idem: ${name} answered ${outcome}`);
  }
}
