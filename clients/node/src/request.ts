// The bounds the store checks, checked first here (before any I/O), naming the field.
import { invalid } from "./errors.js";

export const MaxKeyBytes = 255;
export const MaxBizTypeBytes = 255;
export const MaxTenantBytes = 255;
/** The fingerprint bound of PostgreSQL and idem serve. */
export const MaxFingerprintBytes = 1024;
/** The fingerprint bound of MySQL/MariaDB (the column's size). */
export const MaxFingerprintBytesMySQL = 255;

/** What is wrong with a biz_type, key or tenant, "" when nothing. */
export function nameProblem(what: string, v: unknown, max: number, allowEmpty = false): string {
  if (typeof v !== "string") return `${what} must be a string, got ${v === null ? "null" : typeof v}`;
  if (v === "") return allowEmpty ? "" : `${what} is empty`;
  return textProblem(what, v, max);
}

/** What is wrong with a string bounded in UTF-8 bytes: over the bound, a lone surrogate, a NUL. */
export function textProblem(what: string, v: string, max: number): string {
  const bytes = Buffer.byteLength(v, "utf8");
  if (bytes > max) return `${what} is ${bytes} bytes, over the limit of ${max}`;
  for (let i = 0; i < v.length; i++) {
    const c = v.charCodeAt(i);
    if (c === 0) return `${what} holds a NUL character at index ${i}`;
    if (c >= 0xd800 && c <= 0xdbff) {
      const d = v.charCodeAt(i + 1);
      if (d >= 0xdc00 && d <= 0xdfff) { i++; continue; }
      return `${what} is not valid UTF-8: a lone surrogate at index ${i}`;
    }
    if (c >= 0xdc00 && c <= 0xdfff) return `${what} is not valid UTF-8: a lone surrogate at index ${i}`;
  }
  return "";
}

export function checkName(what: string, v: unknown, max: number, allowEmpty = false): void {
  const p = nameProblem(what, v, max, allowEmpty);
  if (p !== "") throw invalid(what, p);
}

export function checkFingerprint(v: unknown, max: number, field = "fingerprint"): void {
  if (v === undefined || v === null || v === "") return;
  if (typeof v !== "string") throw invalid(field, `${field} must be a string, got ${typeof v}`);
  const p = textProblem(field, v, max);
  if (p !== "") throw invalid(field, p);
}

/** Checks an integer option (ms, seconds), naming it. */
export function checkInteger(field: string, v: unknown, min: number, max: number): void {
  if (typeof v !== "number" || !Number.isInteger(v) || v < min || v > max) {
    throw invalid(field, `${field} must be an integer from ${min} to ${max}, got ${String(v)}`);
  }
}
