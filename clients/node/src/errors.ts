// The errors of the package: one class per outcome or problem a caller tells apart,
// all of them IdemError (match with `instanceof` or by `code`).

/** The problem slugs and outcomes an IdemError carries in `code`. */
export type ErrorCode =
  | "invalid_request" | "key_reused" | "fingerprint_mismatch" | "expired" | "in_progress"
  | "lease_lost" | "conflict" | "not_found" | "unavailable" | "problem";

/** Details of an answer of `idem serve` (absent for errors of the SQL API). */
export interface ProblemDetails {
  /** The HTTP status; 0 when no answer arrived. */
  status?: number;
  /** "urn:idem:problem:<slug>" or "about:blank". */
  type?: string;
  title?: string;
  detail?: string;
  /** The guard outcome the answer reports ("in_progress", ...), or "". */
  outcome?: string;
  /** The answer's X-Request-Id, else the one the client sent. */
  requestId?: string;
  /** Retry-After of the answer in milliseconds (in_progress, 503); undefined when absent. */
  retryAfterMs?: number;
  /** The live holder's lease end of an in_progress answer. */
  leaseUntil?: Date | null;
  /** The problem body as received. */
  body?: string;
  /** How many times the call was sent. */
  attempts?: number;
  /** The underlying error (a driver's or the transport's). */
  cause?: unknown;
}

/** Every error of this package that is not a handler's own. */
export class IdemError extends Error {
  readonly code: ErrorCode;
  readonly status: number | undefined;
  readonly type: string | undefined;
  readonly title: string | undefined;
  readonly detail: string | undefined;
  readonly outcome: string | undefined;
  readonly requestId: string | undefined;
  readonly retryAfterMs: number | undefined;
  readonly leaseUntil: Date | null | undefined;
  readonly body: string | undefined;
  attempts: number | undefined;

  constructor(code: ErrorCode, message: string, details: ProblemDetails = {}) {
    super(message, details.cause === undefined ? undefined : { cause: details.cause });
    this.name = new.target.name;
    this.code = code;
    this.status = details.status;
    this.type = details.type;
    this.title = details.title;
    this.detail = details.detail;
    this.outcome = details.outcome;
    this.requestId = details.requestId;
    this.retryAfterMs = details.retryAfterMs;
    this.leaseUntil = details.leaseUntil;
    this.body = details.body;
    this.attempts = details.attempts;
  }
}

/** A value of the request is out of range; `field` names it ("key", "biz_type", ...). */
export class InvalidRequestError extends IdemError {
  readonly field: string | undefined;
  constructor(message: string, field?: string, details: ProblemDetails = {}) {
    super("invalid_request", message, details);
    this.field = field;
  }
}
/** An IdemError class of one code, with its default message. */
function coded(code: ErrorCode, fallback: string) {
  return class extends IdemError {
    constructor(message = fallback, d: ProblemDetails = {}) {
      super(code, message, d);
    }
  };
}

/** The key belongs to another biz_type. Do not retry. */
export class KeyReusedError extends coded("key_reused",
  "idem: key_reused: the key belongs to another biz_type") {}
/** The key was first used with another request. Do not retry. */
export class FingerprintMismatchError extends coded("fingerprint_mismatch",
  "idem: fingerprint_mismatch: the key was first used with another request") {}
/** The key's record was purged after its retention; a request this late is not run again. */
export class ExpiredError extends coded("expired",
  "idem: expired: the key's record was purged after its retention") {}
/** Another holder's lease on the key is live (HTTP client; idem.run answers it as an outcome). */
export class InProgressError extends coded("in_progress",
  "idem: in_progress: another holder's lease on the key is live") {}
/** The token is not the current holder's (taken over or released). */
export class LeaseLostError extends coded("lease_lost",
  "idem: lease_lost: the token is not the current holder's") {}
/** The claim already ended with other content. */
export class ConflictError extends coded("conflict",
  "idem: conflict: the claim already ended with other content") {}
/** No record of the key (in the caller's tenant). */
export class NotFoundError extends coded("not_found",
  "idem: not_found: no record of the key") {}
/** The store could not be reached or kept failing transiently; nothing was recorded. Retry later. */
export class UnavailableError extends coded("unavailable",
  "idem: unavailable: the store could not be reached") {}

/** The class of each code, for answers that name one. */
const byCode: Record<string, new (message?: string, d?: ProblemDetails) => IdemError> = {
  key_reused: KeyReusedError,
  fingerprint_mismatch: FingerprintMismatchError,
  expired: ExpiredError,
  in_progress: InProgressError,
  lease_lost: LeaseLostError,
  conflict: ConflictError,
  not_found: NotFoundError,
  unavailable: UnavailableError,
  store_unavailable: UnavailableError,
};

/** The error of a slug or outcome (an IdemError with code "problem" for an unknown one). */
export function errorOf(slug: string, message: string, d: ProblemDetails = {}): IdemError {
  if (slug === "invalid_request") return new InvalidRequestError(message, undefined, d);
  const cls = byCode[slug];
  return cls ? new cls(message, d) : new IdemError("problem", message, d);
}

/** An InvalidRequestError naming `field`. */
export function invalid(field: string, problem: string): InvalidRequestError {
  return new InvalidRequestError(`idem: invalid_request: ${problem}`, field);
}

/**
 * A handler's failure that is final for its key: idem.run stores it (the key answers
 * cached_failure from then on) instead of leaving the key free. Throw it (or wrap an
 * error with `permanent(err)`) for a request that can never succeed, not for a fault
 * that may pass.
 */
export class PermanentError extends Error {
  /** The JSON value stored as the key's failure; default {"error": message}. */
  readonly failure: unknown;
  constructor(message: string, options: { cause?: unknown; failure?: unknown } = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = "PermanentError";
    this.failure = options.failure;
  }
}

/** Marks err as a permanent failure of the handler (a PermanentError whose cause is err). */
export function permanent(err: unknown, failure?: unknown): PermanentError {
  if (err instanceof PermanentError && failure === undefined) return err;
  const message = err instanceof Error ? err.message : String(err);
  return new PermanentError(message, { cause: err, failure });
}

/** Whether err is a PermanentError or has `permanent === true` (or a `permanent()` true). */
export function isPermanent(err: unknown): boolean {
  if (err instanceof PermanentError) return true;
  if (err !== null && typeof err === "object") {
    const p = (err as { permanent?: unknown }).permanent;
    if (p === true) return true;
    if (typeof p === "function") {
      try { return (p as () => unknown).call(err) === true; } catch { return false; }
    }
  }
  return false;
}

/** The JSON text stored for a permanent failure: its `failure`, else {"error": message}. */
export function failureJSON(err: unknown): string {
  if (err instanceof PermanentError && err.failure !== undefined) {
    try {
      const text = JSON.stringify(err.failure);
      if (typeof text === "string") return text;
    } catch { /* falls back below */ }
  }
  const message = err instanceof Error ? err.message : String(err);
  return JSON.stringify({ error: message });
}
