/** How a call is retried. Every field has a default (DEFAULT_RETRY_POLICY). */
export interface RetryPolicy {
  /** Tries of one call, the first included; default 5. 1 turns retries off. */
  maxAttempts: number;
  /** Backoff ceiling before the second try; each later one doubles it; default 250 ms. */
  baseDelayMs: number;
  /** Cap of the backoff (not of Retry-After); default 30 s. */
  maxDelayMs: number;
  /** The longest Retry-After waited out; a longer one ends the call with
   * that answer; default 2 min. */
  maxRetryAfterMs: number;
  /** Bound of one try; a try that runs out is retried; default 40 s (the
   * API bounds its own work at 30 s). */
  perTryTimeoutMs: number;
}

export const DEFAULT_RETRY_POLICY: Readonly<RetryPolicy> = Object.freeze({
  maxAttempts: 5, baseDelayMs: 250, maxDelayMs: 30_000, maxRetryAfterMs: 120_000, perTryTimeoutMs: 40_000,
});

export function withDefaults(p: Partial<RetryPolicy> | undefined): RetryPolicy {
  const out = { ...DEFAULT_RETRY_POLICY };
  for (const k of Object.keys(out) as (keyof RetryPolicy)[]) {
    const v = p?.[k];
    if (typeof v === "number" && v > 0) out[k] = v;
  }
  return out;
}

/** The wait before try n+1 after try n failed without a Retry-After: full
 * jitter, uniform in [0, min(maxDelayMs, baseDelayMs·2^(n-1))]. */
export function backoff(p: RetryPolicy, n: number, random: () => number = Math.random): number {
  const ceiling = Math.min(p.maxDelayMs, p.baseDelayMs * 2 ** Math.min(n - 1, 30));
  return random() * ceiling;
}

/** The wait for a Retry-After of ms: never less, plus up to a fifth more so
 * clients told the same time do not all come back at once. */
export function afterRetryAfter(ms: number, random: () => number = Math.random): number {
  return ms + random() * (ms / 5 + 1);
}

/** Reads Retry-After (seconds or an HTTP date) as milliseconds; null when
 * absent or unreadable. */
export function parseRetryAfter(v: string | null, now: number = Date.now()): number | null {
  if (v == null) return null;
  v = v.trim();
  if (v === "") return null;
  if (/^\d+$/.test(v)) return Math.min(Number(v), 2 ** 30) * 1000;
  if (/^-\d+$/.test(v)) return null;
  const t = Date.parse(v);
  if (Number.isNaN(t)) return null;
  return Math.max(t - now, 0);
}

/** Resolves after ms, or rejects with the signal's reason when it fires. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    if (ms <= 0) return resolve();
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal!.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
