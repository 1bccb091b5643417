// Idempotency-Key semantics for a route, through the SQL API, as `idem proxy` gives them:
// the first answer of a key is stored with the claim and replayed to every retry.
import type { IncomingMessage, ServerResponse } from "node:http";
import { randomBytes } from "node:crypto";
import { Readable } from "node:stream";
import { InvalidRequestError, invalid } from "./errors.js";
import { fingerprint, rawJSON, rfc8785JSON } from "./json.js";
import { MaxKeyBytes, checkInteger, checkName, nameProblem } from "./request.js";
import { RunOptions, run } from "./run.js";
import { isTransient } from "./retry.js";

export interface MiddlewareOptions {
  /** Every key's biz_type; default "http". */
  bizType?: string;
  /** The tenant of every key; default the SQL API's ("default"). */
  tenant?: string;
  /** Methods that need an Idempotency-Key; default POST, PATCH. */
  methods?: string[];
  /** Paths under these prefixes pass through when they carry no key. */
  optionalPrefixes?: string[];
  /** Keys kept per client: the digest of this request header's value is the tenant (400 without it). */
  clientHeader?: string;
  /**
   * Fingerprint a JSON body by its RFC 8785 form, as idem proxy --fingerprint json does
   * (other spacing, member order or number spelling, 12.50 and 12.5, is the same request);
   * a body that is not JSON, or that RFC 8785 leaves out (a member name given twice), by its bytes.
   */
  canonicalJSON?: boolean;
  /** Request bodies larger than this are 413; default 1 MiB. */
  maxBodyBytes?: number;
  /** Answers larger than this are not stored (500); default 1 MiB. */
  maxResponseBytes?: number;
  /** Store Set-Cookie too (default: passed on once, never replayed). */
  keepSetCookie?: boolean;
  /** The dialect and retries of the claims (as for run); its tenant is `tenant`'s. */
  runOptions?: Omit<RunOptions, "tenant">;
  /** Receives what the client is not told (a store fault); default console.error. */
  log?: (message: string) => void;
}

/** What the middleware sets on the request for the handler. */
export interface IdemRequestInfo {
  /** The connection that holds the key's claim: work done through it commits with the stored answer. */
  tx: unknown;
  key: string;
  bizType: string;
  tenant: string;
}

type Req = IncomingMessage & { idem?: IdemRequestInfo; body?: unknown; rawBody?: Buffer; originalUrl?: string; _body?: boolean };
type Next = (err?: unknown) => void;

const defaultMaxBytes = 1 << 20;
const tokenChars = /^[A-Za-z0-9!#$%&'*+\-.^_`|~:/]*$/;

/**
 * Reads an Idempotency-Key header value as idem proxy does: an RFC 8941 string ("..." of
 * printable ASCII, \" and \\ escaped) or a bare token of letters, digits and
 * !#$%&'*+-.^_`|~:/; parameters after ';' are ignored. The key must then be 1-255 bytes.
 */
export function parseIdempotencyKey(value: string): string {
  const bad = (p: string) => invalid("Idempotency-Key", p);
  const v = value.replace(/^[ \t]+|[ \t]+$/g, "");
  if (v === "") throw bad("the Idempotency-Key header is empty");
  let key = "";
  if (v[0] === '"') {
    let i = 1;
    for (; i < v.length && v[i] !== '"'; i++) {
      let c = v.charCodeAt(i);
      if (c === 0x5c) {
        if (i + 1 >= v.length || (v[i + 1] !== '"' && v[i + 1] !== "\\")) {
          throw bad("the Idempotency-Key string has a '\\' not followed by '\"' or '\\'");
        }
        i++;
        c = v.charCodeAt(i);
      } else if (c < 0x20 || c > 0x7e) {
        throw bad("the Idempotency-Key string may hold only printable ASCII");
      }
      key += String.fromCharCode(c);
    }
    if (i >= v.length) throw bad("the Idempotency-Key string is unclosed");
    const rest = v.slice(i + 1);
    if (rest !== "" && rest[0] !== ";") throw bad("the Idempotency-Key has text after its closing quote");
  } else {
    const j = v.indexOf(";");
    const token = j >= 0 ? v.slice(0, j) : v;
    if (!tokenChars.test(token)) {
      throw bad("the Idempotency-Key must be a quoted string (\"...\") or a token of letters, digits and !#$%&'*+-.^_`|~:/");
    }
    key = token;
  }
  if (key === "") throw bad("the Idempotency-Key is empty");
  const p = nameProblem("key", key, MaxKeyBytes);
  if (p !== "") throw bad(p);
  return key;
}

/** The request's X-Request-Id when it is 1-128 of [A-Za-z0-9._:-] (as idem serve takes it), else a new one. */
function requestIdOf(req: IncomingMessage): string {
  const id = req.headers["x-request-id"];
  if (typeof id === "string" && /^[A-Za-z0-9._:-]{1,128}$/.test(id)) return id;
  return randomBytes(16).toString("hex");
}

/** Writes an RFC 9457 body shaped as idem serve and idem proxy write theirs. */
function writeProblem(req: IncomingMessage, res: ServerResponse, status: number, slug: string, title: string,
                      detail: string, outcome = "", headers: Record<string, string> = {}): void {
  const id = requestIdOf(req);
  const body: Record<string, unknown> = {
    type: slug ? `urn:idem:problem:${slug}` : "about:blank", title, status, detail,
  };
  if (outcome) body.outcome = outcome;
  body.request_id = id;
  const text = Buffer.from(JSON.stringify(body), "utf8");
  res.writeHead(status, { ...headers, "Content-Type": "application/problem+json", "X-Request-Id": id,
                          "Content-Length": String(text.length) });
  res.end(text);
}

/** A header name in Go's canonical form (Content-Type), as the stored answers name them. */
function canonicalHeader(name: string): string {
  return name.toLowerCase().replace(/(^|-)([a-z])/g, (_, d: string, c: string) => d + c.toUpperCase());
}

const hopByHop = new Set(["Connection", "Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Transfer-Encoding",
  "Upgrade", "Proxy-Authenticate", "Proxy-Authorization", "Content-Length"]);

/** An answer final for the key, as idem proxy decides (2xx, and 4xx but those that ask for a retry). */
function storable(status: number): boolean {
  return (status >= 200 && status < 300) || (status >= 400 && status < 500 && status !== 408 && status !== 425 && status !== 429);
}

class NotStored extends Error {}
class TooLarge extends Error {}

/** A handler's answer, captured on the response object while the key's transaction is open. */
class Capture {
  status = 0;
  headers = new Map<string, { name: string; values: string[] }>();
  chunks: Buffer[] = [];
  size = 0;
  overflow = false;
  ended = false;
  private done!: () => void;
  readonly finished = new Promise<void>((resolve) => { this.done = resolve; });
  private readonly patched = ["setHeader", "getHeader", "getHeaders", "getHeaderNames", "hasHeader",
    "removeHeader", "writeHead", "write", "end", "flushHeaders", "appendHeader"];

  constructor(private readonly res: ServerResponse, private readonly limit: number) {
    const c = this;
    const set = (name: string, value: unknown) => {
      const values = Array.isArray(value) ? value.map(String) : [String(value)];
      c.headers.set(name.toLowerCase(), { name, values });
    };
    const append = (chunk: unknown, enc?: unknown) => {
      if (chunk === undefined || chunk === null || typeof chunk === "function") return;
      const b = typeof chunk === "string" ? Buffer.from(chunk, (typeof enc === "string" ? enc : "utf8") as BufferEncoding)
        : Buffer.from(chunk as Uint8Array);
      if (c.size + b.length > c.limit) { c.overflow = true; return; }
      c.size += b.length;
      c.chunks.push(b);
    };
    const methods: Record<string, (...a: any[]) => unknown> = {
      setHeader(name: string, value: unknown) { set(name, value); return res; },
      appendHeader(name: string, value: unknown) {
        const old = c.headers.get(name.toLowerCase());
        set(name, [...(old?.values ?? []), ...(Array.isArray(value) ? value : [value])]);
        return res;
      },
      getHeader(name: string) {
        const h = c.headers.get(name.toLowerCase());
        return h === undefined ? undefined : h.values.length === 1 ? h.values[0] : h.values;
      },
      getHeaders() {
        const o: Record<string, string | string[]> = {};
        for (const [k, h] of c.headers) o[k] = h.values.length === 1 ? h.values[0] : h.values;
        return o;
      },
      getHeaderNames() { return [...c.headers.keys()]; },
      hasHeader(name: string) { return c.headers.has(name.toLowerCase()); },
      removeHeader(name: string) { c.headers.delete(name.toLowerCase()); },
      writeHead(status: number, a?: unknown, b?: unknown) {
        if (c.status === 0) c.status = status;
        const hs = typeof a === "string" ? b : a;
        if (Array.isArray(hs)) for (let i = 0; i + 1 < hs.length; i += 2) set(String(hs[i]), hs[i + 1]);
        else if (hs && typeof hs === "object") for (const [k, v] of Object.entries(hs)) set(k, v);
        return res;
      },
      write(chunk: unknown, enc?: unknown, cb?: unknown) {
        append(chunk, enc);
        const f = [enc, cb].find((x) => typeof x === "function") as (() => void) | undefined;
        if (f) queueMicrotask(f);
        return !c.overflow;
      },
      end(chunk?: unknown, enc?: unknown, cb?: unknown) {
        append(chunk, enc);
        c.ended = true;
        c.done();
        const f = [chunk, enc, cb].find((x) => typeof x === "function") as (() => void) | undefined;
        if (f) queueMicrotask(f);
        return res;
      },
      flushHeaders() {},
    };
    for (const m of this.patched) (res as any)[m] = methods[m];
  }

  /** Gives the response object its own methods back. */
  restore(): void {
    for (const m of this.patched) delete (this.res as any)[m];
  }

  finalStatus(): number {
    return this.status || this.res.statusCode || 200;
  }

  body(): Buffer { return Buffer.concat(this.chunks); }

  /** The answer in the form idem proxy stores answers in, so either replays the other's. */
  encode(keepSetCookie: boolean): string {
    const headers: Array<[string, string]> = [];
    const names = [...this.headers.values()].map((h) => ({ ...h, canonical: canonicalHeader(h.name) }))
      .sort((a, b) => (a.canonical < b.canonical ? -1 : a.canonical > b.canonical ? 1 : 0));
    for (const h of names) {
      if (hopByHop.has(h.canonical) || (!keepSetCookie && h.canonical === "Set-Cookie")) continue;
      for (const v of h.values) headers.push([h.canonical, v]);
    }
    return JSON.stringify({ status: this.finalStatus(), headers, body_base64: this.body().toString("base64") });
  }

  /** Writes the captured answer, every header included, once the methods are restored. */
  sendTo(res: ServerResponse): void {
    const body = this.body();
    for (const h of this.headers.values()) {
      if (h.name.toLowerCase() !== "content-length") res.setHeader(h.name, h.values);
    }
    res.setHeader("Content-Length", String(body.length));
    res.writeHead(this.finalStatus());
    res.end(body);
  }
}

function retryAfter(until: Date | null): string {
  let seconds = 1;
  if (until) seconds = Math.max(seconds, Math.ceil((until.getTime() - Date.now()) / 1000));
  return String(seconds);
}

function headerValues(req: IncomingMessage, name: string): string[] {
  const out: string[] = [];
  const lower = name.toLowerCase();
  for (let i = 0; i + 1 < req.rawHeaders.length; i += 2) {
    if (req.rawHeaders[i].toLowerCase() === lower) out.push(req.rawHeaders[i + 1]);
  }
  return out;
}

async function readBody(req: IncomingMessage, limit: number): Promise<Buffer | null> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > limit) return null;
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks);
}

interface Settings {
  db: unknown;
  bizType: string;
  tenant: string | undefined;
  methods: Set<string>;
  o: MiddlewareOptions;
  maxBody: number;
  maxResponse: number;
  log: (m: string) => void;
}

const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true }); // a BOM is kept, and refused

/**
 * The digest of a request body in a fingerprint, as idem proxy makes it: with
 * canonicalJSON, "jcs:" and the fingerprint of its RFC 8785 form when it has one (not
 * for text that is not UTF-8), else the fingerprint of its bytes.
 */
export function bodyDigest(body: Uint8Array, canonicalJSON: boolean): string {
  if (canonicalJSON) {
    try { return "jcs:" + fingerprint(rfc8785JSON(utf8.decode(body))); } catch { /* its bytes */ }
  }
  return fingerprint(body);
}

function settings(db: unknown, o: MiddlewareOptions): Settings {
  if (o === null || typeof o !== "object") throw invalid("options", "the middleware's options must be an object");
  const bizType = o.bizType ?? "http";
  checkName("bizType", bizType, 255);
  if (o.tenant !== undefined) checkName("tenant", o.tenant, 255);
  if (o.maxBodyBytes !== undefined) checkInteger("maxBodyBytes", o.maxBodyBytes, 1, 1 << 30);
  if (o.maxResponseBytes !== undefined) checkInteger("maxResponseBytes", o.maxResponseBytes, 1, 1 << 30);
  if (o.clientHeader !== undefined && !/^[A-Za-z0-9!#$%&'*+\-.^_`|~]+$/.test(o.clientHeader)) {
    throw invalid("clientHeader", "clientHeader must be a header name");
  }
  const methods = new Set((o.methods && o.methods.length ? o.methods : ["POST", "PATCH"]).map((m) => m.toUpperCase()));
  return { db, bizType, tenant: o.tenant, methods, o, maxBody: o.maxBodyBytes ?? defaultMaxBytes,
           maxResponse: o.maxResponseBytes ?? defaultMaxBytes, log: o.log ?? ((m) => console.error(m)) };
}

/**
 * Serves one request: `inner(req, res, done)` runs the route inside the key's
 * transaction (its answer captured); done(err) ends it with an error.
 */
async function serve(s: Settings, req: Req, res: ServerResponse, pass: () => void,
                     inner: (req: Req, body: Buffer, done: (err?: unknown) => void) => void,
                     runsOnce: boolean): Promise<void> {
  if (!s.methods.has((req.method ?? "").toUpperCase())) return pass();
  const values = headerValues(req, "Idempotency-Key");
  if (values.length > 1) {
    return writeProblem(req, res, 400, "invalid_idempotency_key", "Bad Request",
                        "the Idempotency-Key header is given more than once");
  }
  const path = (req.originalUrl ?? req.url ?? "/").split("?")[0];
  if (values.length === 0) {
    if ((s.o.optionalPrefixes ?? []).some((p) => path.startsWith(p))) return pass();
    return writeProblem(req, res, 400, "missing_idempotency_key", "Bad Request",
      `${req.method} needs an Idempotency-Key header here (a unique value per operation, the same on every retry)`);
  }
  let key: string;
  try {
    key = parseIdempotencyKey(values[0]);
  } catch (err) {
    return writeProblem(req, res, 400, "invalid_idempotency_key", "Bad Request", detailOf(err));
  }
  let tenant = s.tenant;
  if (s.o.clientHeader) {
    const clients = headerValues(req, s.o.clientHeader);
    if (clients.length === 0) {
      return writeProblem(req, res, 400, "missing_client_identity", "Bad Request",
        `keys are kept per client here, and the request has no ${s.o.clientHeader} header`);
    }
    if (clients.length > 1) {
      return writeProblem(req, res, 400, "ambiguous_client_identity", "Bad Request",
        `keys are kept per client here, and the ${s.o.clientHeader} header is given more than once; send it once`);
    }
    tenant = "client-" + fingerprint(clients[0]).slice(0, 32);
  }
  let body: Buffer | null;
  try {
    body = await readBody(req, s.maxBody);
  } catch {
    return writeProblem(req, res, 400, "bad_http", "Malformed HTTP request", "the request body could not be read");
  }
  if (body === null) {
    return writeProblem(req, res, 413, "", "Content Too Large", `the request body is larger than ${s.maxBody} bytes`);
  }
  const target = req.originalUrl ?? req.url ?? "/";
  const fp = fingerprint(`${req.method}\n${target}\n${bodyDigest(body, s.o.canonicalJSON ?? false)}`);

  let live: Capture | null = null;
  let failure: unknown;
  let result;
  try {
    result = await run(s.db, { bizType: s.bizType, key, fingerprint: fp }, async (tx) => {
      if (runsOnce && live !== null) {
        // Express's next() cannot run the rest of the chain a second time: a transient
        // store fault after the route ran answers 503 instead of rerunning it.
        throw new Error("idem: a transient store fault after the route ran; the (req, res, next) form does not rerun it");
      }
      live?.restore();
      const c = new Capture(res, s.maxResponse);
      live = c;
      req.idem = { tx, key, bizType: s.bizType, tenant: tenant ?? "default" };
      let routeError: unknown;
      let failed = false;
      const ended = new Promise<void>((resolve) => {
        inner(req, body!, (err) => { failed = true; routeError = err; resolve(); });
        void c.finished.then(resolve);
      });
      await ended;
      c.restore();
      if (failed) {
        // A store fault under the route (a serialization failure, a killed connection)
        // reruns it in a new transaction, as run reruns a body.
        if (!runsOnce && (s.o.runOptions?.isTransient ?? isTransient)(routeError)) throw routeError;
        throw new RouteError(routeError);
      }
      if (c.overflow) throw new TooLarge();
      if (!storable(c.finalStatus())) throw new NotStored();
      return rawJSON(c.encode(s.o.keepSetCookie === true));
    }, { ...(s.o.runOptions ?? {}), tenant });
  } catch (err) {
    failure = err;
  }
  (live as Capture | null)?.restore();
  if (failure instanceof NotStored) return (live as unknown as Capture).sendTo(res);
  if (failure instanceof RouteError) throw failure.err;
  if (failure instanceof TooLarge) {
    return writeProblem(req, res, 500, "answer_too_large", "Internal Server Error",
      `the answer is larger than ${s.maxResponse} bytes, the most that is stored for a key; nothing was kept`);
  }
  if (result) {
    switch (result.outcome) {
      case "executed": return (live as unknown as Capture).sendTo(res);
      case "replayed": return replay(s, req, res, result.resultText);
      case "cached_failure": return replay(s, req, res, result.errorText);
      case "failed": return replay(s, req, res, result.errorText);
      case "in_progress":
        return writeProblem(req, res, 409, "in_progress", "Conflict",
          "a request with this Idempotency-Key is still being processed", "in_progress",
          { "Retry-After": retryAfter(result.leaseUntil) });
      case "fingerprint_mismatch": case "key_reused":
        return writeProblem(req, res, 422, "fingerprint_mismatch", "Fingerprint mismatch",
          "this Idempotency-Key was used for another request (the method, target or body differ)",
          "fingerprint_mismatch");
      case "expired":
        return writeProblem(req, res, 410, "expired", "Expired",
          "the answer stored for this Idempotency-Key was purged after its retention; a request this late is not sent again",
          "expired");
    }
  }
  if (failure instanceof InvalidRequestError) {
    return writeProblem(req, res, 400, "invalid_idempotency_key", "Bad Request", detailOf(failure));
  }
  if (req.destroyed || res.destroyed) return; // the client went away; no answer is read
  s.log(`idem: ${req.method} ${path}: store unavailable, the handler's work was not kept: ${String(failure)}`);
  return writeProblem(req, res, 503, "store_unavailable", "Store unavailable",
    "store unavailable; nothing was kept, retry later", "", { "Retry-After": "1" });
}

class RouteError {
  constructor(readonly err: unknown) {}
}

function detailOf(err: unknown): string {
  const m = err instanceof Error ? err.message : String(err);
  return m.replace(/^idem: invalid_request: /, "");
}

function replay(s: Settings, req: IncomingMessage, res: ServerResponse, stored: string): void {
  let a: { status?: unknown; headers?: unknown; body_base64?: unknown } | null = null;
  try { a = JSON.parse(stored); } catch { a = null; }
  const ok = a !== null && typeof a === "object" && typeof a.status === "number" && a.status >= 100 &&
    a.status <= 999 && typeof a.body_base64 === "string" && Array.isArray(a.headers);
  if (!ok) {
    s.log("idem: a key's record is not an answer this middleware can replay");
    return writeProblem(req, res, 500, "internal", "Internal error", "the stored answer cannot be replayed; see the log");
  }
  const body = Buffer.from(a!.body_base64 as string, "base64");
  const grouped = new Map<string, string[]>();
  for (const kv of a!.headers as unknown[]) {
    if (Array.isArray(kv) && kv.length === 2) {
      const [k, v] = kv.map(String);
      grouped.set(k, [...(grouped.get(k) ?? []), v]);
    }
  }
  for (const [k, v] of grouped) res.setHeader(k, v);
  res.setHeader("Idempotent-Replayed", "true");
  res.setHeader("Content-Length", String(body.length));
  res.writeHead(a!.status as number);
  res.end(body);
}

/**
 * An Express-style middleware `(req, res, next)` giving the routes after it
 * Idempotency-Key semantics through the SQL API of db (a pg Pool or mysql2/promise Pool
 * for a server): methods of `methods` need the header; the first answer of a key
 * (status, headers, body) is stored with the claim in the transaction req.idem.tx and
 * replayed to every retry with Idempotent-Replayed: true. Answers 2xx and 4xx (but 408,
 * 425, 429) are stored; any other rolls back and leaves the key free. Refusals are
 * application/problem+json as idem proxy words them. It reads the body itself: it sets
 * req.rawBody (the bytes) and req.body (parsed JSON for a JSON content type, else the
 * bytes), so mount it before a body parser (which then leaves req.body alone).
 */
export function middleware(db: unknown, options: MiddlewareOptions = {}) {
  const s = settings(db, options);
  return (req: IncomingMessage, res: ServerResponse, next: Next): void => {
    const r = req as Req;
    serve(s, r, res, () => next(), (rq, body, done) => {
      rq.rawBody = body;
      if (rq.body === undefined) {
        const type = String(rq.headers["content-type"] ?? "");
        let parsed: unknown = body;
        if (/\bjson\b/i.test(type) && body.length > 0) {
          try { parsed = JSON.parse(body.toString("utf8")); } catch { parsed = body; }
        }
        rq.body = parsed;
        rq._body = true; // body-parser: already read
      }
      next();
      // next(err) of a later middleware reaches Express's error handler, not us: an
      // answer it writes is captured like any other.
      void done;
    }, true).catch((err) => next(err));
  };
}

/**
 * Wraps a node:http handler `(req, res)` with the middleware's semantics. The handler
 * gets a request whose body is the bytes read (a fresh stream), req.rawBody, and req.idem.
 * A handler that throws or rejects rolls back; it is answered 500.
 */
export function wrap(db: unknown,
                     handler: (req: IncomingMessage & { idem?: IdemRequestInfo; rawBody?: Buffer },
                               res: ServerResponse) => unknown,
                     options: MiddlewareOptions = {}) {
  const s = settings(db, options);
  return (req: IncomingMessage, res: ServerResponse): void => {
    const r = req as Req;
    serve(s, r, res, () => { void Promise.resolve().then(() => handler(req, res)).catch((err) => fail(s, req, res, err)); },
      (rq, body, done) => {
        const inner = Object.assign(Readable.from(body.length ? [body] : []), {
          method: rq.method, url: rq.url, headers: rq.headers, rawHeaders: rq.rawHeaders,
          httpVersion: rq.httpVersion, socket: rq.socket, rawBody: body, idem: rq.idem,
        }) as unknown as IncomingMessage;
        Promise.resolve().then(() => handler(inner, res)).catch(done);
      }, false).catch((err) => fail(s, req, res, err));
  };
}

function fail(s: Settings, req: IncomingMessage, res: ServerResponse, err: unknown): void {
  s.log(`idem: ${req.method} ${req.url}: the handler failed: ${err instanceof Error ? err.stack ?? err.message : String(err)}`);
  if (!res.headersSent) writeProblem(req, res, 500, "internal", "Internal error", "the handler failed; see the log");
  else res.destroy();
}
