/** An answer of the API that was not a success (SPEC §2 error shape). After
 * retries it describes the last answer; `attempts` says how many tries were
 * made. */
export class WebhookdError extends Error {
  override name = "WebhookdError";
  /** HTTP status, e.g. 404. */
  readonly status: number;
  /** The API's snake_case code, e.g. "not_found" (or one derived from the
   * status when the body was not the API's, e.g. a proxy's page). */
  readonly code: string;
  /** The offending field for validation_failed, e.g. "events[3].type". */
  readonly field: string | null;
  /** The request id to quote when asking for help. */
  readonly requestId: string | null;
  /** For external_id_taken: the event that holds the external_id. */
  readonly existingId: string | null;
  readonly attempts: number;
  readonly headers: Headers;
  readonly body: string;

  constructor(init: {
    status: number; code: string; message: string; field?: string | null; requestId?: string | null;
    existingId?: string | null; attempts: number; headers: Headers; body: string;
  }) {
    super(`webhookd: ${init.status} ${init.code}: ${init.message}` +
      (init.field ? ` (field ${init.field})` : "") + (init.requestId ? ` [${init.requestId}]` : "") +
      (init.attempts > 1 ? ` after ${init.attempts} tries` : ""));
    this.status = init.status;
    this.code = init.code;
    this.field = init.field ?? null;
    this.requestId = init.requestId ?? null;
    this.existingId = init.existingId ?? null;
    this.attempts = init.attempts;
    this.headers = init.headers;
    this.body = init.body;
  }

  /** Whether a later try might not get this answer (429, 5xx, a key still
   * in progress). */
  get temporary(): boolean {
    return RETRYABLE_STATUS.has(this.status) || this.code === "idempotency_key_in_progress";
  }
}

/** The call was cancelled (its AbortSignal fired) or ran out of its overall
 * deadline; `lastError` is the last answer's error, if a try got one. */
export class WebhookdAbortError extends Error {
  override name = "AbortError";
  readonly lastError: WebhookdError | null;
  constructor(message: string, lastError: WebhookdError | null, cause?: unknown) {
    super(message, { cause });
    this.lastError = lastError;
  }
}

/** No answer came after the last try (network error or per-try timeout). */
export class WebhookdNetworkError extends Error {
  override name = "WebhookdNetworkError";
  readonly attempts: number;
  readonly lastError: WebhookdError | null;
  constructor(message: string, attempts: number, lastError: WebhookdError | null, cause?: unknown) {
    super(message, { cause });
    this.attempts = attempts;
    this.lastError = lastError;
  }
}

export const RETRYABLE_STATUS = new Set([429, 500, 502, 503, 504]);

const STATUS_CODES: Record<number, string> = {
  401: "unauthorized", 404: "not_found", 405: "method_not_allowed", 413: "payload_too_large",
  429: "rate_limited", 502: "unavailable", 503: "unavailable", 504: "unavailable",
};

/** Builds a WebhookdError from a non-2xx answer. */
export function errorFromResponse(status: number, headers: Headers, body: string, attempts: number): WebhookdError {
  let wire: any;
  try {
    wire = JSON.parse(body)?.error;
  } catch {
    wire = undefined;
  }
  if (wire && typeof wire.code === "string" && wire.code !== "") {
    return new WebhookdError({
      status, code: wire.code, message: String(wire.message ?? ""), field: wire.field ?? null,
      requestId: wire.request_id || headers.get("x-request-id"), existingId: wire.existing_id ?? null,
      attempts, headers, body,
    });
  }
  const code = STATUS_CODES[status] ?? (status >= 500 ? "internal" : `http_${status}`);
  return new WebhookdError({ status, code, message: `HTTP ${status}`, requestId: headers.get("x-request-id"), attempts, headers, body });
}
