// idem for Node.js: exactly-once side effects through idem's SQL API (idem.run, the
// middleware) and the HTTP client of `idem serve`.
export * from "./errors.js";
export { RawJSON, rawJSON, canonicalJSON, fingerprint, fingerprintJSON, isJSON } from "./json.js";
export {
  MaxBizTypeBytes, MaxFingerprintBytes, MaxFingerprintBytesMySQL, MaxKeyBytes, MaxTenantBytes,
} from "./request.js";
export { DefaultRetry, isTransient, retryDelay } from "./retry.js";
export type { Retry } from "./retry.js";
export { detectDialect } from "./sqlapi.js";
export type { Dialect } from "./sqlapi.js";
export { outcomeError, run } from "./run.js";
export type { RunOptions, RunOutcome, RunRequest, RunResult } from "./run.js";
export { Client } from "./client.js";
export { VERSION } from "./version.js";
export type {
  BatchAnswer, BatchItem, Claim, ClaimRequest, ClientOptions, RecordPage, RecordQuery, RecordView,
} from "./client.js";
export { middleware, parseIdempotencyKey, wrap } from "./middleware.js";
export type { IdemRequestInfo, MiddlewareOptions } from "./middleware.js";
