// What the tests share: a fresh database with idem's SQL API per test file, and a
// running idem serve ($IDEM_BIN, which CTest sets).
import { execFile, spawn, ChildProcess } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { promisify } from "node:util";
import pg from "pg";
import mysql from "mysql2/promise";

export const run = promisify(execFile);

export function idemBin(): string {
  const bin = process.env.IDEM_BIN;
  if (!bin) throw new Error("IDEM_BIN is not set: it names the idem binary (ctest sets it)");
  return bin;
}

/** A test database: its dialect, a pool for the code under test, an admin pool, its store URL. */
export interface TestDB {
  name: "postgres" | "mysql";
  pool: pg.Pool | mysql.Pool;
  store: string;
  /** Runs a statement on the admin connection; its rows. */
  query(sql: string, args?: unknown[]): Promise<any[]>;
  /** The n-th placeholder of the dialect. */
  ph(n: number): string;
  /** Ends the pools and drops the database. */
  close(): Promise<void>;
}

export const dbEnvs = [
  { env: "IDEM_TEST_POSTGRES_URL", name: "postgres" as const },
  { env: "IDEM_TEST_MYSQL_URL", name: "mysql" as const },
];

/** Why a database test skips, or "" when its variable is set. */
export function skipReason(env: string): string {
  return process.env[env] ? "" : `${env} is not set: start the databases with scripts/services.sh start DIR ` +
    "and source DIR/env.sh";
}

function withDatabase(base: string, name: string): string {
  const u = new URL(base);
  u.pathname = "/" + name;
  return u.toString();
}

/**
 * Drops a test database. WITH (FORCE) also ends the sessions the tests killed that are
 * still closing, but PostgreSQL 15 refuses it (42501, "must be a member of the role whose
 * process is being terminated") while an autovacuum worker is in the database: a plain
 * DROP stops that worker itself and waits up to 5 s for the other sessions. Tried in turn.
 */
async function dropPostgres(root: pg.Client, name: string): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    try {
      await root.query(`DROP DATABASE ${name} WITH (FORCE)`);
      return;
    } catch (forced: any) {
      if (forced?.code !== "42501") throw forced;
      try {
        await root.query(`DROP DATABASE ${name}`);
        return;
      } catch (plain) {
        if (attempt >= 5) throw plain;
      }
    }
  }
}

/** Creates a fresh database on the server of $env, installs the SQL API with idem migrate, opens it. */
export async function openTestDB(env: string, poolSize = 8): Promise<TestDB> {
  const base = process.env[env]!;
  const dbName = `idem_node_${process.pid}_${randomBytes(4).toString("hex")}`;
  const store = withDatabase(base, dbName);
  if (base.startsWith("postgres")) {
    const root = new pg.Client({ connectionString: base });
    await root.connect();
    await root.query(`CREATE DATABASE ${dbName}`);
    // The test role is named idem: pin the store's search_path to public (docs/sql.md).
    await root.query(`ALTER DATABASE ${dbName} SET search_path = public`);
    await run(idemBin(), ["migrate", "--store", store]);
    const pool = new pg.Pool({ connectionString: store, max: poolSize });
    pool.on("error", () => {}); // connections the tests kill
    const admin = new pg.Pool({ connectionString: store, max: 4 });
    admin.on("error", () => {});
    return {
      name: "postgres", pool, store,
      query: async (sql, args) => (await admin.query(sql, args)).rows,
      ph: (n) => `$${n}`,
      async close() {
        try {
          await pool.end();
          await admin.end();
          await dropPostgres(root, dbName);
        } finally {
          await root.end(); // else the open client keeps the test process running
        }
      },
    };
  }
  const u = new URL(base);
  const conf = { host: u.hostname, port: Number(u.port || 3306), user: decodeURIComponent(u.username),
                 password: decodeURIComponent(u.password) };
  const root = await mysql.createConnection(conf);
  await root.query(`CREATE DATABASE ${dbName}`);
  await run(idemBin(), ["migrate", "--store", store]);
  const pool = mysql.createPool({ ...conf, database: dbName, connectionLimit: poolSize });
  const admin = mysql.createPool({ ...conf, database: dbName, connectionLimit: 4 });
  return {
    name: "mysql", pool, store,
    query: async (sql, args) => (await admin.query(sql, args))[0] as any[],
    ph: () => "?",
    async close() {
      await pool.end();
      await admin.end();
      await root.query(`DROP DATABASE ${dbName}`);
      await root.end();
    },
  };
}

export async function createLedger(d: TestDB): Promise<void> {
  await d.query("CREATE TABLE ledger (refund_key VARCHAR(255) NOT NULL, refund_id VARCHAR(255) NOT NULL, " +
                "amount BIGINT NOT NULL)");
}

/** Inserts a ledger row through the connection of the transaction. */
export async function insertLedger(d: TestDB, tx: any, key: string, id: string): Promise<void> {
  await tx.query(`INSERT INTO ledger (refund_key, refund_id, amount) VALUES (${d.ph(1)}, ${d.ph(2)}, 100)`, [key, id]);
}

export function tokenHash(token: string): string {
  return "sha256:" + createHash("sha256").update(token).digest("hex");
}

/** A running idem serve on a SQLite store of its own, two tenants. */
export interface Serve {
  url: string;
  token1: string;
  token2: string;
  stop(): Promise<void>;
}

/** Starts idem serve (127.0.0.1:0), with a config file's text and more arguments when given. */
export async function startServe(config = "", extra: string[] = [], store?: string): Promise<Serve> {
  const dir = mkdtempSync(join(tmpdir(), "idem-node-"));
  const token1 = randomBytes(16).toString("hex");
  const token2 = randomBytes(16).toString("hex");
  const args: string[] = [];
  if (config) {
    writeFileSync(join(dir, "idem.toml"), config);
    args.push("--config", join(dir, "idem.toml"));
  }
  args.push("serve", "--listen", "127.0.0.1:0", "--store", store ?? `sqlite://${join(dir, "idem.db")}`,
            "--tenant", `t1:${tokenHash(token1)}`, "--tenant", `t2:${tokenHash(token2)}`, ...extra);
  const proc: ChildProcess = spawn(idemBin(), args, { stdio: ["ignore", "pipe", "pipe"] });
  let log = "";
  proc.stderr!.on("data", (d) => { log += d; if (log.length > 65536) log = log.slice(-65536); });
  const lines = createInterface({ input: proc.stdout! });
  const first = await new Promise<string>((resolve) => {
    const timer = setTimeout(() => resolve(""), 30_000);
    lines.once("line", (l) => { clearTimeout(timer); resolve(l.trim()); });
    proc.once("exit", () => { clearTimeout(timer); resolve(""); });
  });
  lines.on("line", () => {}); // keeps the pipe drained
  if (!first.startsWith("listening on ")) {
    proc.kill("SIGKILL");
    rmSync(dir, { recursive: true, force: true });
    throw new Error(`idem serve did not start (first line ${JSON.stringify(first)}); log:\n${log}`);
  }
  return {
    url: "http://" + first.slice("listening on ".length), token1, token2,
    async stop() {
      const exited = new Promise((resolve) => proc.once("exit", resolve));
      proc.kill("SIGTERM");
      await exited;
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
