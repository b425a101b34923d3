import { randomUUID } from "node:crypto";
import { errorFromResponse, WebhookdAbortError, WebhookdError, WebhookdNetworkError } from "./errors.js";
import { Pacer } from "./pacer.js";
import { afterRetryAfter, backoff, parseRetryAfter, RetryPolicy, sleep, withDefaults } from "./retry.js";
import type {
  DeadLetter, DeadLetterFilter, Delivery, DeliveryFilter, Endpoint, EndpointPatch, Event, EventType, EventTypeFilter,
  EventTypePatch, FilterTest, TransformationResult, TransformationTest, Job, JobError, NewEndpoint, NewEvent, NewEventType, Page, PortalSession, Secret,
} from "./types.js";

export const VERSION = "0.1.0";

export interface ClientOptions {
  /** Retry policy; missing fields keep DEFAULT_RETRY_POLICY's. */
  retry?: Partial<RetryPolicy>;
  /** Appended to the User-Agent "webhookd-node/<version>", e.g. "billing/1.4". */
  userAgent?: string;
  /** The fetch to use (default: the global one). */
  fetch?: typeof fetch;
}

/** Options of one call. */
export interface CallOptions {
  /** Cancels the call at once, retries and waits included. */
  signal?: AbortSignal;
  /** Overall deadline of the call in ms, every try and wait included. */
  timeoutMs?: number;
}

/** Options of a mutating call that carries an Idempotency-Key. */
export interface MutatingCallOptions extends CallOptions {
  /** Use this key instead of a new UUIDv4: the same key for the same logical
   * operation makes it idempotent across processes and restarts. */
  idempotencyKey?: string;
}

type Mode = "safe" | "refused";

interface Request {
  method: string;
  path: string;
  query?: Record<string, string | undefined>;
  body?: unknown;
  idempotencyKey?: string;
  headers?: Record<string, string>;
  /** "safe": may run twice with the same effect (GET, PATCH, DELETE, or a
   * POST with an Idempotency-Key); "refused": retried only when the API
   * certainly did not act (429, or no connection made). */
  mode?: Mode;
  /** A 404 on a retry means an earlier try deleted it. */
  deleteCall?: boolean;
  /** An NDJSON body, sent as it is (application/x-ndjson), instead of body. */
  ndjson?: string;
  /** The answer is NDJSON: one value per line. */
  ndjsonOut?: boolean;
  /** A body streamed as it is made (application/x-ndjson, chunked). It can
   * be read once: the request makes one try. */
  stream?: AsyncIterable<Uint8Array>;
}

/** Every route of /v1/openapi.json, by operationId, and the method that
 * calls it (a test holds this table and the document together). */
export const ROUTES = {
  createEvent: { method: "POST", path: "/v1/events", sdk: "sendEvent" },
  createEventBatch: { method: "POST", path: "/v1/events/batch", sdk: "sendEvents" },
  getEvent: { method: "GET", path: "/v1/events/{id}", sdk: "getEvent" },
  createEndpoint: { method: "POST", path: "/v1/endpoints", sdk: "createEndpoint" },
  listEndpoints: { method: "GET", path: "/v1/endpoints", sdk: "listEndpoints" },
  getEndpoint: { method: "GET", path: "/v1/endpoints/{id}", sdk: "getEndpoint" },
  updateEndpoint: { method: "PATCH", path: "/v1/endpoints/{id}", sdk: "updateEndpoint" },
  deleteEndpoint: { method: "DELETE", path: "/v1/endpoints/{id}", sdk: "deleteEndpoint" },
  getEndpointSecret: { method: "GET", path: "/v1/endpoints/{id}/secret", sdk: "getEndpointSecret" },
  rotateEndpointSecret: { method: "POST", path: "/v1/endpoints/{id}/rotate-secret", sdk: "rotateEndpointSecret" },
  testEndpoint: { method: "POST", path: "/v1/endpoints/{id}/test", sdk: "testEndpoint" },
  listDeliveries: { method: "GET", path: "/v1/deliveries", sdk: "listDeliveries" },
  getDelivery: { method: "GET", path: "/v1/deliveries/{id}", sdk: "getDelivery" },
  redeliver: { method: "POST", path: "/v1/deliveries/{id}/redeliver", sdk: "redeliver" },
  listDeadLetters: { method: "GET", path: "/v1/dead-letters", sdk: "listDeadLetters" },
  replayDeadLetters: { method: "POST", path: "/v1/dead-letters/replay", sdk: "replayDeadLetters" },
  getJob: { method: "GET", path: "/v1/jobs/{id}", sdk: "getJob" },
  listJobErrors: { method: "GET", path: "/v1/jobs/{id}/errors", sdk: "listJobErrors" },
  cancelJob: { method: "POST", path: "/v1/jobs/{id}/cancel", sdk: "cancelJob" },
  createEventsBulk: { method: "POST", path: "/v1/events/bulk", sdk: "sendEventsBulk" },
  testEndpointFilter: { method: "POST", path: "/v1/endpoints/{id}/filter/test", sdk: "testEndpointFilter" },
  testEndpointTransformation: { method: "POST", path: "/v1/endpoints/{id}/transformation/test", sdk: "testEndpointTransformation" },
  createPortalSession: { method: "POST", path: "/v1/portal-sessions", sdk: "createPortalSession" },
  createEventType: { method: "POST", path: "/v1/event-types", sdk: "createEventType" },
  listEventTypes: { method: "GET", path: "/v1/event-types", sdk: "listEventTypes" },
  getEventType: { method: "GET", path: "/v1/event-types/{name}", sdk: "getEventType" },
  patchEventType: { method: "PATCH", path: "/v1/event-types/{name}", sdk: "updateEventType" },
  deleteEventType: { method: "DELETE", path: "/v1/event-types/{name}", sdk: "archiveEventType" },
  getOpenAPIDocument: { method: "GET", path: "/v1/openapi.json", sdk: "getOpenAPIDocument" },
} as const;

/** webhookd's API client. One object may be shared by any number of
 * concurrent calls; they share its pacing. */
export class WebhookdClient {
  readonly baseUrl: string;
  private readonly apiKey: string;
  private readonly retry: RetryPolicy;
  private readonly userAgent: string;
  private readonly fetch: typeof fetch;
  private readonly pacer = new Pacer();

  constructor(baseUrl: string, apiKey: string, options: ClientOptions = {}) {
    const u = new URL(baseUrl);
    if (u.protocol !== "http:" && u.protocol !== "https:") throw new TypeError(`webhookd: base URL ${baseUrl} is not http(s)`);
    if (!apiKey) throw new TypeError("webhookd: API key is empty");
    this.baseUrl = baseUrl.replace(/\/+$/, "");
    this.apiKey = apiKey;
    this.retry = withDefaults(options.retry);
    this.userAgent = `webhookd-node/${VERSION}` + (options.userAgent ? ` ${options.userAgent}` : "");
    this.fetch = options.fetch ?? globalThis.fetch.bind(globalThis);
  }

  // ---- events

  /** POST /v1/events: one logical operation; every retry carries the same
   * Idempotency-Key, so the event is created once. */
  sendEvent(event: NewEvent, opts: MutatingCallOptions = {}): Promise<Event> {
    return this.do({ method: "POST", path: "/v1/events", body: event, idempotencyKey: opts.idempotencyKey ?? "" }, opts);
  }

  /** POST /v1/events/batch: up to 1000 events, all or none, in order. */
  async sendEvents(events: NewEvent[], opts: MutatingCallOptions = {}): Promise<Event[]> {
    const out = await this.do<{ data: Event[] }>(
      { method: "POST", path: "/v1/events/batch", body: { events }, idempotencyKey: opts.idempotencyKey ?? "" }, opts);
    return out.data;
  }

  /** GET /v1/events/{id}. */
  getEvent(id: string, opts: CallOptions = {}): Promise<Event> {
    return this.do({ method: "GET", path: `/v1/events/${enc(id)}` }, opts);
  }

  // ---- endpoints

  /** POST /v1/endpoints; the answer carries the endpoint's secret. */
  createEndpoint(endpoint: NewEndpoint, opts: MutatingCallOptions = {}): Promise<Endpoint> {
    return this.do({ method: "POST", path: "/v1/endpoints", body: endpoint, idempotencyKey: opts.idempotencyKey ?? "" }, opts);
  }

  /** GET /v1/endpoints, every page. */
  listEndpoints(params: { limit?: number } = {}, opts: CallOptions = {}): AsyncIterableIterator<Endpoint> {
    return this.list<Endpoint>("/v1/endpoints", { limit: num(params.limit) }, opts);
  }

  /** GET /v1/endpoints/{id}. */
  getEndpoint(id: string, opts: CallOptions = {}): Promise<Endpoint> {
    return this.do({ method: "GET", path: `/v1/endpoints/${enc(id)}` }, opts);
  }

  /** PATCH /v1/endpoints/{id}; with ifMatch it applies only to that version
   * (else 412 version_mismatch). Retried: the same change twice changes
   * nothing more (but a conditional one retried after a lost answer may
   * report version_mismatch although its first try applied). */
  updateEndpoint(id: string, patch: EndpointPatch, opts: CallOptions & { ifMatch?: number } = {}): Promise<Endpoint> {
    const headers: Record<string, string> = opts.ifMatch != null ? { "If-Match": `"${opts.ifMatch}"` } : {};
    return this.do({ method: "PATCH", path: `/v1/endpoints/${enc(id)}`, body: patch, headers }, opts);
  }

  /** DELETE /v1/endpoints/{id}; a retry that finds it gone succeeds. */
  async deleteEndpoint(id: string, opts: CallOptions = {}): Promise<void> {
    await this.do({ method: "DELETE", path: `/v1/endpoints/${enc(id)}`, deleteCall: true }, opts);
  }

  /** GET /v1/endpoints/{id}/secret. */
  getEndpointSecret(id: string, opts: CallOptions = {}): Promise<Secret> {
    return this.do({ method: "GET", path: `/v1/endpoints/${enc(id)}/secret` }, opts);
  }

  /** POST /v1/endpoints/{id}/rotate-secret; the old secret keeps signing for 24 h. */
  rotateEndpointSecret(id: string, opts: MutatingCallOptions = {}): Promise<Secret> {
    return this.do({ method: "POST", path: `/v1/endpoints/${enc(id)}/rotate-secret`, body: {},
      idempotencyKey: opts.idempotencyKey ?? "" }, opts);
  }

  /** POST /v1/endpoints/{id}/test: a webhookd.test event to this endpoint
   * alone. The API does not deduplicate it, so it is retried only when the
   * API certainly did not act (429, or no connection made). */
  testEndpoint(id: string, data?: unknown, opts: CallOptions = {}): Promise<Delivery> {
    return this.do({ method: "POST", path: `/v1/endpoints/${enc(id)}/test`, body: data === undefined ? {} : { data },
      mode: "refused" }, opts);
  }

  // ---- deliveries, dead letters, jobs

  /** GET /v1/deliveries, newest first, every page. */
  listDeliveries(filter: DeliveryFilter = {}, opts: CallOptions = {}): AsyncIterableIterator<Delivery> {
    return this.list<Delivery>("/v1/deliveries", {
      status: filter.status, endpoint_id: filter.endpoint_id, event_type: filter.event_type, event_id: filter.event_id,
      since: time(filter.since), limit: num(filter.limit),
    }, opts);
  }

  /** GET /v1/deliveries/{id}, with every attempt. */
  getDelivery(id: string, opts: CallOptions = {}): Promise<Delivery> {
    return this.do({ method: "GET", path: `/v1/deliveries/${enc(id)}` }, opts);
  }

  /** POST /v1/deliveries/{id}/redeliver: one manual attempt now. */
  redeliver(id: string, opts: MutatingCallOptions = {}): Promise<Delivery> {
    return this.do({ method: "POST", path: `/v1/deliveries/${enc(id)}/redeliver`, body: {},
      idempotencyKey: opts.idempotencyKey ?? "" }, opts);
  }

  /** GET /v1/dead-letters, every page. */
  listDeadLetters(filter: DeadLetterFilter = {}, opts: CallOptions = {}): AsyncIterableIterator<DeadLetter> {
    return this.list<DeadLetter>("/v1/dead-letters", {
      endpoint_id: filter.endpoint_id, event_type: filter.event_type, since: time(filter.since),
      until: time(filter.until), limit: num(filter.limit),
    }, opts);
  }

  /** POST /v1/dead-letters/replay: a background job; returns its id. */
  async replayDeadLetters(filter: Omit<DeadLetterFilter, "limit"> = {}, opts: MutatingCallOptions = {}): Promise<string> {
    const body = strip({ endpoint_id: filter.endpoint_id, event_type: filter.event_type, since: time(filter.since),
      until: time(filter.until) });
    const out = await this.do<{ job_id: string }>({ method: "POST", path: "/v1/dead-letters/replay", body,
      idempotencyKey: opts.idempotencyKey ?? "" }, opts);
    return out.job_id;
  }

  /** GET /v1/jobs/{id}. */
  getJob(id: string, opts: CallOptions = {}): Promise<Job> {
    return this.do({ method: "GET", path: `/v1/jobs/${enc(id)}` }, opts);
  }

  /** GET /v1/jobs/{id}/errors: a bulk job's refused lines, in line order. */
  listJobErrors(id: string, opts: CallOptions = {}): Promise<JobError[]> {
    return this.do({ method: "GET", path: `/v1/jobs/${enc(id)}/errors`, ndjsonOut: true }, opts);
  }

  /** POST /v1/jobs/{id}/cancel: a queued or running job ends canceled (no
   * line accepted after the answer); a finished one comes back unchanged. */
  cancelJob(id: string, opts: MutatingCallOptions = {}): Promise<Job> {
    return this.do({ method: "POST", path: `/v1/jobs/${enc(id)}/cancel`, body: {}, idempotencyKey: opts.idempotencyKey ?? "" },
      opts);
  }

  /** POST /v1/events/bulk: events as one background job (up to 100,000;
   * SPEC §2 Bulk jobs); returns its id, once the whole body is stored. Follow
   * it with getJob, its refused lines with listJobErrors. One
   * Idempotency-Key for the call, reused on every retry. */
  async sendEventsBulk(events: Iterable<NewEvent>, opts: MutatingCallOptions = {}): Promise<string> {
    let ndjson = "";
    for (const e of events) ndjson += JSON.stringify(e) + "\n";
    const out = await this.do<{ job_id: string }>({ method: "POST", path: "/v1/events/bulk", ndjson,
      idempotencyKey: opts.idempotencyKey ?? "" }, opts);
    return out.job_id;
  }

  // ---- bulk jobs, streamed

  /** POST /v1/events/bulk with events streamed: each is written as an
   * NDJSON line while the request is sent (chunked), so neither the events
   * nor the body are ever all in memory; returns the job's id once the API
   * has stored the whole body. events may be any iterable or async iterable
   * (a generator reading a file or a cursor).
   *
   * The events are read once, so this makes one try: after a temporary
   * error (429, 5xx, WebhookdNetworkError) call it again with the same
   * events and the same idempotencyKey, and the API answers with the job the
   * first try made, if it made one. Follow the job with waitJob. */
  async streamEventsBulk(events: Iterable<NewEvent> | AsyncIterable<NewEvent>,
    opts: MutatingCallOptions = {}): Promise<string> {
    const out = await this.do<{ job_id: string }>({ method: "POST", path: "/v1/events/bulk", stream: ndjsonChunks(events),
      idempotencyKey: opts.idempotencyKey ?? "" }, opts);
    return out.job_id;
  }

  /** Follows a job (GET /v1/jobs/{id}) until it is finished (succeeded,
   * failed or canceled) and returns it. Readings start intervalMs apart and
   * back off (×1.5, up to maxIntervalMs) while nothing changes; onProgress,
   * when given, is called with every reading whose status or counts
   * (done, total, failed_count) changed, the finished job included. signal
   * and timeoutMs bound the whole wait (WebhookdAbortError). */
  async waitJob(id: string, opts: WaitJobOptions = {}): Promise<Job> {
    const first = opts.intervalMs ?? 250;
    const most = Math.max(opts.maxIntervalMs ?? 5_000, first);
    const signal = opts.timeoutMs != null
      ? (opts.signal ? anySignal(opts.signal, AbortSignal.timeout(opts.timeoutMs)) : AbortSignal.timeout(opts.timeoutMs))
      : opts.signal;
    let seen: Job | null = null;
    let wait = first;
    for (;;) {
      const j = await this.getJob(id, { signal });
      const changed = !seen || seen.status !== j.status || seen.done !== j.done || seen.total !== j.total ||
        seen.failed_count !== j.failed_count;
      if (changed) opts.onProgress?.(j);
      if (j.status === "succeeded" || j.status === "failed" || j.status === "canceled") return j;
      wait = changed ? first : Math.min(wait * 1.5, most);
      seen = j;
      try {
        await sleep(wait, signal);
      } catch (e) {
        throw new WebhookdAbortError(`webhookd: wait for job ${id}: ${signal?.reason?.name === "TimeoutError" ? "deadline passed" : "cancelled"}`,
          null, e);
      }
    }
  }

  /** POST /v1/endpoints/{id}/filter/test: whether the endpoint's filter (or
   * one to try, t.filter) matches a past event or a given type and data.
   * Sends nothing. */
  async testEndpointFilter(id: string, t: FilterTest, opts: CallOptions = {}): Promise<boolean> {
    const out = await this.do<{ match: boolean }>({ method: "POST", path: `/v1/endpoints/${enc(id)}/filter/test`, body: t,
      mode: "safe" }, opts);
    return out.match;
  }

  /** POST /v1/endpoints/{id}/transformation/test: the request the endpoint's
   * transformation (or one to try, t.transformation) makes of a past event or
   * a given type and data — url, headers, body — or send false when it
   * cancels. Sends nothing. A script that fails is a validation_failed error
   * on the field transformation. */
  testEndpointTransformation(id: string, t: TransformationTest, opts: CallOptions = {}): Promise<TransformationResult> {
    return this.do({ method: "POST", path: `/v1/endpoints/${enc(id)}/transformation/test`, body: t, mode: "safe" }, opts);
  }

  // ---- event-type catalog, portal links

  /** POST /v1/event-types: adds an entry to the catalog, with an optional
   * JSON Schema (2020-12) and example checked against it; validate makes the
   * API refuse events of the type whose data does not match (400
   * validation_failed naming the failing path). One Idempotency-Key for the
   * call, reused on every retry. */
  createEventType(eventType: NewEventType, opts: MutatingCallOptions = {}): Promise<EventType> {
    return this.do({ method: "POST", path: "/v1/event-types", body: eventType, idempotencyKey: opts.idempotencyKey ?? "" },
      opts);
  }

  /** GET /v1/event-types: the catalog by name, every page; archived entries
   * too when filter.archived is true. */
  listEventTypes(filter: EventTypeFilter = {}, opts: CallOptions = {}): AsyncIterableIterator<EventType> {
    return this.list<EventType>("/v1/event-types", { archived: filter.archived ? "true" : undefined,
      limit: num(filter.limit) }, opts);
  }

  /** GET /v1/event-types/{name}, archived or not. */
  getEventType(name: string, opts: CallOptions = {}): Promise<EventType> {
    return this.do({ method: "GET", path: `/v1/event-types/${enc(name)}` }, opts);
  }

  /** PATCH /v1/event-types/{name}: changes the fields present (null clears
   * description, schema or example; archived: false brings an archived entry
   * back). Retried: the same change twice changes nothing more. */
  updateEventType(name: string, patch: EventTypePatch, opts: CallOptions = {}): Promise<EventType> {
    return this.do({ method: "PATCH", path: `/v1/event-types/${enc(name)}`, body: patch }, opts);
  }

  /** DELETE /v1/event-types/{name}: archives the entry (never deletes it: the
   * name stays taken, events of the type are accepted unchecked) and returns
   * it. Retried: archiving an archived entry answers it again. */
  archiveEventType(name: string, opts: CallOptions = {}): Promise<EventType> {
    return this.do({ method: "DELETE", path: `/v1/event-types/${enc(name)}` }, opts);
  }

  /** POST /v1/portal-sessions: a one-time link into the integrators' portal
   * for the key's project, valid for ttl — a duration such as "15m" or "1h",
   * or seconds (60–86400); absent: the API's default, 15 minutes. */
  createPortalSession(params: { ttl?: string | number } = {}, opts: MutatingCallOptions = {}): Promise<PortalSession> {
    const body = params.ttl != null && params.ttl !== "" ? { ttl: params.ttl } : {};
    return this.do({ method: "POST", path: "/v1/portal-sessions", body, idempotencyKey: opts.idempotencyKey ?? "" }, opts);
  }

  /** GET /v1/openapi.json: the API's OpenAPI 3.1 document. */
  getOpenAPIDocument(opts: CallOptions = {}): Promise<Record<string, unknown>> {
    return this.do({ method: "GET", path: "/v1/openapi.json" }, opts);
  }

  // ---- machinery

  private async *list<T>(path: string, query: Record<string, string | undefined>, opts: CallOptions): AsyncIterableIterator<T> {
    let q = { ...query };
    for (;;) {
      const page = await this.do<Page<T>>({ method: "GET", path, query: q }, opts);
      for (const item of page.data) yield item;
      if (!page.next_cursor) return;
      q = { ...q, cursor: page.next_cursor };
    }
  }

  /** Runs a request, retrying as its mode and the policy allow. */
  private async do<T>(r: Request, opts: CallOptions): Promise<T> {
    if (r.idempotencyKey === "") r.idempotencyKey = randomUUID(); // one key per logical operation
    const deadline = opts.timeoutMs != null ? Date.now() + opts.timeoutMs : Infinity;
    const signal = opts.timeoutMs != null
      ? (opts.signal ? anySignal(opts.signal, AbortSignal.timeout(opts.timeoutMs)) : AbortSignal.timeout(opts.timeoutMs))
      : opts.signal;
    let last: WebhookdError | null = null;
    const stopped = (cause: unknown) =>
      new WebhookdAbortError(`webhookd: ${r.method} ${r.path}: ${signal?.reason?.name === "TimeoutError" ? "deadline passed" : "cancelled"}`
        + (last ? ` (last answer: ${last.message})` : ""), last, cause);
    for (let attempt = 1; ; attempt++) {
      try {
        await this.pacer.wait(signal);
      } catch (e) {
        throw stopped(e);
      }
      let res: Response | null = null;
      let text = "";
      let netErr: unknown = null;
      try {
        ({ res, text } = await this.send(r, signal));
      } catch (e) {
        netErr = e;
      }
      this.pacer.done(res);
      if (res && res.status < 300) {
        if (r.ndjsonOut) return text.split("\n").filter((l) => l !== "").map((l) => JSON.parse(l)) as T;
        if (text === "" || res.status === 204) return undefined as T;
        return JSON.parse(text) as T;
      }
      if (res) last = errorFromResponse(res.status, res.headers, text, attempt);
      if (signal?.aborted) throw stopped(signal.reason);
      let retry: boolean;
      let wait: number;
      if (!res) {
        retry = (r.mode ?? "safe") === "safe" || isConnectError(netErr);
        wait = backoff(this.retry, attempt);
      } else {
        if (r.deleteCall && attempt > 1 && res.status === 404) return undefined as T;
        retry = last!.temporary && ((r.mode ?? "safe") === "safe" || res.status === 429);
        wait = backoff(this.retry, attempt);
        const ra = parseRetryAfter(res.headers.get("retry-after"));
        if (ra != null) {
          if (ra > this.retry.maxRetryAfterMs) retry = false;
          wait = afterRetryAfter(ra);
        }
      }
      if (r.stream) retry = false; // its body is spent
      if (!retry || attempt >= this.retry.maxAttempts || Date.now() + wait > deadline) {
        if (res) throw last!;
        throw new WebhookdNetworkError(`webhookd: ${r.method} ${r.path}: ${attempt} tries: ${describe(netErr)}`, attempt, last, netErr);
      }
      try {
        await sleep(wait, signal);
      } catch (e) {
        throw stopped(e);
      }
    }
  }

  /** One try: the answer and its body, or a throw when no whole answer came. */
  private async send(r: Request, signal?: AbortSignal): Promise<{ res: Response; text: string }> {
    const url = new URL(this.baseUrl + r.path);
    for (const [k, v] of Object.entries(r.query ?? {})) if (v != null && v !== "") url.searchParams.set(k, v);
    const headers: Record<string, string> = {
      ...r.headers, Authorization: `Bearer ${this.apiKey}`, Accept: "application/json", "User-Agent": this.userAgent,
    };
    if (r.body !== undefined) headers["Content-Type"] = "application/json";
    if (r.ndjson !== undefined || r.stream) headers["Content-Type"] = "application/x-ndjson";
    if (r.idempotencyKey) headers["Idempotency-Key"] = r.idempotencyKey;
    const perTry = AbortSignal.timeout(this.retry.perTryTimeoutMs);
    const init: RequestInit & { duplex?: "half" } = {
      method: r.method, headers, body: r.ndjson ?? (r.body === undefined ? undefined : JSON.stringify(r.body)),
      signal: signal ? anySignal(signal, perTry) : perTry, redirect: "manual",
    };
    if (r.stream) {
      init.body = readableOf(r.stream);
      init.duplex = "half"; // a streamed request body (fetch requires it said)
    }
    const res = await this.fetch(url, init);
    const text = await res.text();
    return { res, text };
  }
}

/** Options of waitJob; signal and timeoutMs bound the whole wait. */
export interface WaitJobOptions extends CallOptions {
  /** Called with the job whenever its status or counts changed, the finished job included. */
  onProgress?: (job: Job) => void;
  /** The first wait between two readings in ms; default 250. */
  intervalMs?: number;
  /** The longest wait between two readings in ms; default 5000. */
  maxIntervalMs?: number;
}

/** The NDJSON lines of events, in chunks of about 64 KiB: one event at a
 * time is read, and one chunk at a time is held. */
async function* ndjsonChunks(events: Iterable<NewEvent> | AsyncIterable<NewEvent>): AsyncGenerator<Uint8Array> {
  const enc = new TextEncoder();
  let buf = "";
  for await (const e of events) {
    buf += JSON.stringify(e) + "\n";
    if (buf.length >= 64 << 10) {
      yield enc.encode(buf);
      buf = "";
    }
  }
  if (buf !== "") yield enc.encode(buf);
}

/** A ReadableStream pulling from chunks only as fast as the request sends. */
function readableOf(chunks: AsyncIterable<Uint8Array>): ReadableStream<Uint8Array> {
  const it = chunks[Symbol.asyncIterator]();
  return new ReadableStream<Uint8Array>({
    async pull(c) {
      const { value, done } = await it.next();
      if (done) c.close();
      else c.enqueue(value);
    },
    async cancel(reason) {
      await it.return?.(reason);
    },
  });
}

/** A signal that fires when either does (AbortSignal.any, which Node 18
 * lacks: Debian 12's Node is 18). */
function anySignal(a: AbortSignal, b: AbortSignal): AbortSignal {
  const ac = new AbortController();
  for (const s of [a, b]) {
    if (s.aborted) {
      ac.abort(s.reason);
      return ac.signal;
    }
  }
  const onA = () => done(a);
  const onB = () => done(b);
  const done = (s: AbortSignal) => {
    a.removeEventListener("abort", onA);
    b.removeEventListener("abort", onB);
    ac.abort(s.reason);
  };
  a.addEventListener("abort", onA, { once: true });
  b.addEventListener("abort", onB, { once: true });
  return ac.signal;
}

function isConnectError(e: unknown): boolean {
  const code = (e as any)?.cause?.code ?? (e as any)?.code;
  return code === "ECONNREFUSED" || code === "ENOTFOUND" || code === "EAI_AGAIN" || code === "EHOSTUNREACH";
}

function describe(e: unknown): string {
  const cause = (e as any)?.cause;
  return String((e as any)?.message ?? e) + (cause?.message ? `: ${cause.message}` : "");
}

const enc = encodeURIComponent;
const num = (n: number | undefined) => (n == null ? undefined : String(n));
const time = (t: string | Date | undefined) => (t instanceof Date ? t.toISOString() : t);
function strip(o: Record<string, string | undefined>): Record<string, string> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v != null)) as Record<string, string>;
}
