// The HTTP client of `idem serve` (docs/openapi.yaml) on the built-in fetch.
import { randomBytes } from "node:crypto";
import { IdemError, InvalidRequestError, errorOf, invalid } from "./errors.js";
import { RawJSON, jsonTextOf, rawItems, rawJSON, rawMembers } from "./json.js";
import { MaxBizTypeBytes, MaxFingerprintBytes, MaxKeyBytes, checkFingerprint, checkInteger, checkName } from "./request.js";
import { DefaultRetry, Retry, RetryExhausted, checkRetry, withRetry } from "./retry.js";
import { VERSION } from "./version.js";

export interface ClientOptions {
  /** The server, "http://127.0.0.1:7070" (a path prefix is kept). */
  baseUrl: string;
  /** The tenant's bearer token. */
  token: string;
  /** Resends after 502/503/504 or no answer; default DefaultRetry. */
  retry?: Retry;
  /** Timeout of one request in ms (a claim's wait_ms is added); default 30000. */
  timeoutMs?: number;
  /** Bound of an answer's body in bytes; default 16 MiB. */
  maxAnswerBytes?: number;
  /** Makes the X-Request-Id of a call (the same for its resends); default 16 random bytes in hex. */
  requestId?: () => string;
  /** The fetch to use; default globalThis.fetch. */
  fetch?: typeof fetch;
}

export interface ClaimRequest {
  bizType: string;
  key: string;
  fingerprint?: string;
  /** The lease in ms; default the server's (30000). */
  leaseMs?: number;
  /** Wait this long for a live holder instead of an InProgressError. */
  waitMs?: number;
}

/** A claim's answer: acquired (hold token until leaseUntil), replayed (result) or cached_failure (error). */
export interface Claim {
  outcome: "acquired" | "replayed" | "cached_failure";
  token: number;
  leaseUntil: Date | null;
  /** An expired holder's lease was taken over. */
  takeover: boolean;
  previousToken: number;
  /** Fail-open: nothing recorded. */
  degraded: boolean;
  expiresAt: Date | null;
  /** The stored result (replayed), parsed; resultText is its exact JSON text. */
  result?: unknown;
  resultText?: string;
  /** The stored failure (cached_failure), parsed; errorText is its exact JSON text. */
  error?: unknown;
  errorText?: string;
  /** The answer carried Idempotent-Replayed: true. */
  replayed: boolean;
}

/** One item of a batch (POST /v1/claims/batch). */
export type BatchItem =
  | ({ op: "claim" } & Omit<ClaimRequest, "waitMs">)
  | { op: "complete"; bizType: string; key: string; token: number; result: unknown }
  | { op: "fail"; bizType: string; key: string; token: number; retryable: boolean; error?: unknown };

/** A batch item's answer: its status and either its value or its error. */
export interface BatchAnswer {
  status: number;
  /** The single call's answer (a Claim for claims, { outcome } for complete and fail). */
  value?: Claim | { outcome: string };
  /** The item's problem, as the single call would have thrown it. */
  error?: IdemError;
}

export interface RecordView {
  bizType: string;
  key: string;
  state: "PROCESSING" | "SUCCEEDED" | "FAILED" | string;
  token: number;
  leaseUntil: Date | null;
  fingerprint: string | null;
  createdAt: Date | null;
  updatedAt: Date | null;
  expiresAt: Date | null;
  result?: unknown;
  resultText?: string;
  error?: unknown;
  errorText?: string;
}

export interface RecordQuery { bizType?: string; state?: string; limit?: number; cursor?: string }
export interface RecordPage { records: RecordView[]; nextCursor: string | null }

const date = (v: unknown) => (typeof v === "string" ? new Date(v) : null);

function claimOf(text: string, replayed: boolean): Claim {
  const raw = rawMembers(text);
  const j = JSON.parse(text) as Record<string, any>;
  const c: Claim = {
    outcome: j.outcome, token: Number(j.token ?? 0), leaseUntil: date(j.lease_until),
    takeover: j.takeover === true, previousToken: Number(j.previous_token ?? 0),
    degraded: j.degraded === true, expiresAt: date(j.expires_at), replayed,
  };
  const r = raw.get("result");
  if (r !== undefined) { c.resultText = r; c.result = JSON.parse(r); }
  const e = raw.get("error");
  if (e !== undefined) { c.errorText = e; c.error = JSON.parse(e); }
  return c;
}

function recordOf(j: Record<string, any>, raw?: Map<string, string>): RecordView {
  const r: RecordView = {
    bizType: j.biz_type, key: j.key, state: j.state, token: Number(j.token ?? 0),
    leaseUntil: date(j.lease_until), fingerprint: j.fingerprint ?? null, createdAt: date(j.created_at),
    updatedAt: date(j.updated_at), expiresAt: date(j.expires_at),
  };
  const res = raw?.get("result");
  if (res !== undefined && res !== "null") { r.resultText = res; r.result = JSON.parse(res); }
  const err = raw?.get("error");
  if (err !== undefined && err !== "null") { r.errorText = err; r.error = JSON.parse(err); }
  return r;
}

/** A JSON value to send, checked: RawJSON (exact text) or any value JSON.stringify encodes. */
function valueText(field: string, v: unknown): string {
  try {
    return v instanceof RawJSON ? rawJSON(v.text).text : jsonTextOf(v);
  } catch (err) {
    throw invalid(field, `${field} is not a JSON value: ${(err as Error).message}`);
  }
}

function checkClaim(r: ClaimRequest, prefix = ""): void {
  if (r === null || typeof r !== "object") throw invalid(prefix + "request", "the claim must be an object");
  checkName(prefix + "biz_type", r.bizType, MaxBizTypeBytes);
  checkName(prefix + "key", r.key, MaxKeyBytes);
  checkFingerprint(r.fingerprint, MaxFingerprintBytes, prefix + "fingerprint");
  if (r.leaseMs !== undefined) checkInteger(prefix + "lease_ms", r.leaseMs, 1, 86_400_000);
  if (r.waitMs !== undefined) checkInteger(prefix + "wait_ms", r.waitMs, 0, 60_000);
}

function checkToken(field: string, t: unknown): void {
  if (typeof t !== "number" || !Number.isSafeInteger(t) || t < 1) {
    throw invalid(field, `${field} must be a positive integer, got ${String(t)}`);
  }
}

function claimBody(r: ClaimRequest): Record<string, unknown> {
  const b: Record<string, unknown> = { biz_type: r.bizType, key: r.key };
  if (r.fingerprint) b.fingerprint = r.fingerprint;
  if (r.leaseMs !== undefined) b.lease_ms = r.leaseMs;
  if (r.waitMs) b.wait_ms = r.waitMs;
  return b;
}

/** A JSON object's text with one member spliced in as raw JSON text (kept byte for byte). */
function withRaw(head: Record<string, unknown>, member: string, text: string): string {
  const h = JSON.stringify(head);
  return `${h.slice(0, -1)},${JSON.stringify(member)}:${text}}`;
}

/** A problem answer as this package's error. */
function problemOf(status: number, text: string, headers: Headers | null, id: string): IdemError {
  let p: Record<string, any> = {};
  try { p = JSON.parse(text); } catch { /* not a problem body */ }
  const type = typeof p.type === "string" ? p.type : "about:blank";
  const slug = type.startsWith("urn:idem:problem:") ? type.slice("urn:idem:problem:".length) : "";
  const outcome = typeof p.outcome === "string" ? p.outcome : "";
  const detail = typeof p.detail === "string" ? p.detail : text.slice(0, 200);
  const title = typeof p.title === "string" ? p.title : "";
  const ra = headers?.get("Retry-After");
  const seconds = ra !== null && ra !== undefined && /^\d+$/.test(ra.trim()) ? Number(ra) : undefined;
  let code = outcome || slug;
  if (!code && (status === 502 || status === 503 || status === 504)) code = "unavailable";
  const name = code || title;
  const message = `idem: ${status} ${name ? name + ": " : ""}${detail}${id ? ` (request id ${id})` : ""}`;
  return errorOf(code, message, {
    status, type, title, detail, outcome, requestId: id, body: text,
    retryAfterMs: seconds === undefined ? undefined : seconds * 1000,
    leaseUntil: typeof p.lease_until === "string" ? new Date(p.lease_until) : null,
  });
}

/** An answer that may be sent again unchanged (nothing ran): no answer, 502, 503, 504. */
function retryable(err: unknown): boolean {
  if (!(err instanceof IdemError) || err.status === undefined) return false;
  return err.status === 0 || err.status === 502 || err.status === 503 || err.status === 504;
}

/**
 * A client of idem serve's HTTP API. Each call answers a value for the outcomes a caller
 * expects and throws an IdemError subclass for every other answer (InProgressError with
 * retryAfterMs, KeyReusedError, FingerprintMismatchError, ExpiredError, LeaseLostError,
 * ConflictError, NotFoundError, InvalidRequestError, UnavailableError). Calls that met
 * 502/503/504 or no answer are sent again, unchanged, with the retry's backoff (at least
 * the answer's Retry-After): every call is safe to repeat.
 */
export class Client {
  readonly baseUrl: string;
  private readonly token: string;
  private readonly retry: Retry;
  private readonly timeoutMs: number;
  private readonly maxAnswerBytes: number;
  private readonly requestId: () => string;
  private readonly fetchFn: typeof fetch;

  constructor(o: ClientOptions) {
    if (o === null || typeof o !== "object") throw invalid("options", "the client's options must be an object");
    let u: URL | undefined;
    try { u = new URL(o.baseUrl); } catch { /* below */ }
    if (!u || (u.protocol !== "http:" && u.protocol !== "https:") || u.host === "") {
      throw invalid("baseUrl", `the server URL must be http://host[:port] or https://..., got ${JSON.stringify(o.baseUrl)}`);
    }
    if (typeof o.token !== "string" || o.token === "" || /[\r\n]/.test(o.token)) {
      throw invalid("token", "the token is empty or holds a line break");
    }
    const retry = o.retry ?? DefaultRetry;
    checkRetry(retry, (ok, field, problem) => { if (!ok) throw invalid(field, problem); });
    if (o.timeoutMs !== undefined) checkInteger("timeoutMs", o.timeoutMs, 1, 3_600_000);
    if (o.maxAnswerBytes !== undefined) checkInteger("maxAnswerBytes", o.maxAnswerBytes, 1, 1 << 30);
    const f = o.fetch ?? globalThis.fetch;
    if (typeof f !== "function") throw invalid("fetch", "no fetch: Node >= 18 has one built in");
    this.baseUrl = o.baseUrl.replace(/\/+$/, "");
    this.token = o.token;
    this.retry = retry;
    this.timeoutMs = o.timeoutMs ?? 30_000;
    this.maxAnswerBytes = o.maxAnswerBytes ?? 16 << 20;
    this.requestId = o.requestId ?? (() => randomBytes(16).toString("hex"));
    this.fetchFn = f;
  }

  /** Claims a key (POST /v1/claims). */
  async claim(r: ClaimRequest): Promise<Claim> {
    checkClaim(r);
    const { text, headers } = await this.call("POST", "/v1/claims", JSON.stringify(claimBody(r)), r.waitMs ?? 0);
    return claimOf(text, headers.get("Idempotent-Replayed") === "true");
  }

  /**
   * Claims, completes and fails up to 1,000 keys in one request (POST /v1/claims/batch):
   * one answer per item, in order, each a value or the error the single call would throw.
   */
  async batch(items: BatchItem[]): Promise<BatchAnswer[]> {
    if (!Array.isArray(items) || items.length === 0 || items.length > 1000) {
      throw invalid("requests", "a batch holds 1 to 1000 items");
    }
    const parts = items.map((it, i) => {
      const at = `requests[${i}].`;
      if (it === null || typeof it !== "object") throw invalid(`requests[${i}]`, `requests[${i}] must be an object`);
      switch (it.op) {
        case "claim":
          checkClaim(it, at);
          return JSON.stringify({ op: "claim", ...claimBody(it) });
        case "complete":
          checkName(at + "biz_type", it.bizType, MaxBizTypeBytes);
          checkName(at + "key", it.key, MaxKeyBytes);
          checkToken(at + "token", it.token);
          return withRaw({ op: "complete", biz_type: it.bizType, key: it.key, token: it.token }, "result",
                         valueText(at + "result", it.result));
        case "fail":
          checkName(at + "biz_type", it.bizType, MaxBizTypeBytes);
          checkName(at + "key", it.key, MaxKeyBytes);
          checkToken(at + "token", it.token);
          if (typeof it.retryable !== "boolean") throw invalid(at + "retryable", `${at}retryable must be a boolean`);
          return withRaw({ op: "fail", biz_type: it.bizType, key: it.key, token: it.token, retryable: it.retryable },
                         "error", valueText(at + "error", it.error ?? null));
        default:
          throw invalid(at + "op", `${at}op must be "claim", "complete" or "fail"`);
      }
    });
    const { text, id } = await this.call("POST", "/v1/claims/batch", `{"requests":[${parts.join(",")}]}`, 0);
    const answers = rawMembers(text).get("responses");
    if (answers === undefined) throw new Error("idem: the batch answer has no responses");
    const list = JSON.parse(answers) as Array<Record<string, any>>;
    const texts = rawItems(answers); // each answer's exact text, to keep results exact
    return list.map((a, i) => {
      const status = Number(a.status ?? 0);
      if (status >= 400) return { status, error: problemOf(status, texts[i] ?? JSON.stringify(a), null, id) };
      if (items[i].op === "claim") {
        return { status, value: claimOf(texts[i] ?? JSON.stringify(a), a.outcome !== "acquired") };
      }
      return { status, value: { outcome: String(a.outcome) } };
    });
  }

  /** Stores the result (any JSON value; a RawJSON byte for byte) under the claim's token: "completed". */
  async complete(bizType: string, key: string, token: number, result: unknown): Promise<string> {
    checkName("biz_type", bizType, MaxBizTypeBytes);
    checkName("key", key, MaxKeyBytes);
    checkToken("token", token);
    const body = withRaw({ biz_type: bizType, key, token }, "result", valueText("result", result));
    return this.outcomeOf(await this.call("POST", "/v1/claims/complete", body, 0));
  }

  /** Reports the claim's failure: retryable releases the key ("released"), else the error is stored ("failed"). */
  async fail(bizType: string, key: string, token: number, retryable: boolean, error: unknown = null): Promise<string> {
    checkName("biz_type", bizType, MaxBizTypeBytes);
    checkName("key", key, MaxKeyBytes);
    checkToken("token", token);
    if (typeof retryable !== "boolean") throw invalid("retryable", "retryable must be a boolean");
    const body = withRaw({ biz_type: bizType, key, token, retryable }, "error", valueText("error", error));
    return this.outcomeOf(await this.call("POST", "/v1/claims/fail", body, 0));
  }

  /** Reads a key's record (GET /v1/records/{biz_type}/{key}). */
  async getRecord(bizType: string, key: string): Promise<RecordView> {
    checkName("biz_type", bizType, MaxBizTypeBytes);
    checkName("key", key, MaxKeyBytes);
    const { text } = await this.call("GET",
      `/v1/records/${encodeURIComponent(bizType)}/${encodeURIComponent(key)}`, undefined, 0);
    return recordOf(JSON.parse(text), rawMembers(text));
  }

  /** Reads a page of the tenant's records, in key order. */
  async listRecords(q: RecordQuery = {}): Promise<RecordPage> {
    const v = new URLSearchParams();
    if (q.bizType !== undefined) { checkName("biz_type", q.bizType, MaxBizTypeBytes); v.set("biz_type", q.bizType); }
    if (q.state !== undefined) v.set("state", q.state);
    if (q.limit !== undefined) { checkInteger("limit", q.limit, 1, 1000); v.set("limit", String(q.limit)); }
    if (q.cursor !== undefined) v.set("cursor", q.cursor);
    const qs = v.toString();
    const { text } = await this.call("GET", "/v1/records" + (qs ? "?" + qs : ""), undefined, 0);
    const j = JSON.parse(text) as { records?: Array<Record<string, any>>; next_cursor?: string | null };
    return { records: (j.records ?? []).map((r) => recordOf(r)), nextCursor: j.next_cursor ?? null };
  }

  private outcomeOf(a: { text: string }): string {
    return String((JSON.parse(a.text) as { outcome?: unknown }).outcome);
  }

  /** Sends one call and its resends; a 2xx answer's text, else throws its problem. */
  private async call(method: string, path: string, body: string | undefined, extraMs: number,
  ): Promise<{ text: string; headers: Headers; id: string }> {
    const id = this.requestId();
    try {
      return (await withRetry(this.retry, retryable, () => this.send(method, path, body, id, extraMs),
        (err, jitter) => Math.max(jitter, (err as IdemError).retryAfterMs ?? 0))).value;
    } catch (e) {
      const { err, attempts } = e as RetryExhausted;
      if (err instanceof IdemError) err.attempts = attempts;
      throw err;
    }
  }

  private async send(method: string, path: string, body: string | undefined, id: string, extraMs: number,
  ): Promise<{ text: string; headers: Headers; id: string }> {
    const headers: Record<string, string> = {
      Authorization: `Bearer ${this.token}`, "X-Request-Id": id, "User-Agent": `idem-node/${VERSION}`,
    };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    let res: Response;
    let text: string;
    try {
      res = await this.fetchFn(this.baseUrl + path, {
        method, headers, body, signal: AbortSignal.timeout(this.timeoutMs + extraMs),
      });
      text = await this.readBody(res, method, path);
    } catch (err) {
      if (err instanceof IdemError || err instanceof InvalidRequestError) throw err;
      const m = err instanceof Error ? err.message : String(err);
      throw errorOf("unavailable", `idem: no answer to ${method} ${path}: ${m} (request id ${id})`,
                    { status: 0, type: "about:blank", title: "No answer", detail: m, requestId: id, cause: err });
    }
    const answered = res.headers.get("X-Request-Id") || id;
    if (res.status >= 400) throw problemOf(res.status, text, res.headers, answered);
    return { text, headers: res.headers, id: answered };
  }

  private async readBody(res: Response, method: string, path: string): Promise<string> {
    const chunks: Uint8Array[] = [];
    let size = 0;
    if (res.body) {
      for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
        size += chunk.byteLength;
        if (size > this.maxAnswerBytes) {
          throw new IdemError("problem", `idem: the answer to ${method} ${path} is larger than ${this.maxAnswerBytes} bytes`,
                              { status: res.status });
        }
        chunks.push(chunk);
      }
    }
    return Buffer.concat(chunks).toString("utf8");
  }
}
