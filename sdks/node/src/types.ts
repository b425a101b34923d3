/** The resources of webhookd's API (SPEC §2 "Resource shapes"). Times are
 * RFC 3339 UTC strings; absent values are null. */

export interface NewEvent {
  /** 1–128 characters of [A-Za-z0-9._:-]. */
  type: string;
  data: unknown;
  /** Unique per project: a second event with it fails with external_id_taken. */
  external_id?: string;
  /** Limits the event to these endpoints. */
  endpoint_ids?: string[];
}

export interface DeliveryRef { id: string; endpoint_id: string; status: string }

export interface Event {
  id: string; type: string; data: unknown; external_id: string | null; created_at: string;
  deliveries: DeliveryRef[];
}

export interface NewEndpoint {
  url: string; description?: string; event_types?: string[]; rate_limit_per_second?: number;
  /** The ceiling of the endpoint's adaptive concurrency limit per worker
   * (1–1000); absent or null: the default, 1000. */
  max_in_flight?: number | null; ordering?: "none" | "fifo";
  /** Conditions on the event's type and data it must match, beside its
   * event types: `{"data.status": "shipped", "data.total": {"$gt": 100}}`. */
  filter?: Record<string, unknown> | null;
  /** JavaScript defining `function handler(webhook)` that returns the
   * webhook `{method, url, headers, payload}` changed, or `{cancel: true}`. */
  transformation?: string | null;
}

export interface EndpointPatch {
  url?: string; description?: string; event_types?: string[] | null; rate_limit_per_second?: number | null;
  /** null: back to the default, 1000. */
  max_in_flight?: number | null; ordering?: "none" | "fifo"; status?: "active" | "disabled"; replay_dead_letters?: boolean;
  /** null: remove it. */
  filter?: Record<string, unknown> | null;
  /** null: remove it. */
  transformation?: string | null;
}

export interface Endpoint {
  id: string; url: string; description: string; event_types: string[]; status: "active" | "disabled";
  disabled_reason: null | "manual" | "gone" | "failing"; rate_limit_per_second: number | null;
  /** The ceiling of its adaptive concurrency limit per worker (default 1000). */
  max_in_flight: number;
  /** fifo: deliveries in acceptance order, one at a time (not offered yet: always none). */
  ordering: "none" | "fifo";
  /** The conditions an event of its types must match; null: none. */
  filter: Record<string, unknown> | null;
  /** The script that reshapes each request; null: none. */
  transformation: string | null;
  /** Its circuit breaker: open after consecutive failures, its due deliveries
   * then waiting for probes without spending attempts. */
  circuit: "closed" | "open" | "probing";
  version: number;
  created_at: string; updated_at: string;
  /** Only in the create answer. */
  secret?: string;
}

export interface Secret { secret: string; previous_secret: string | null; previous_expires_at: string | null }

export interface Attempt {
  number: number; request_id: string; url: string; trigger: "auto" | "manual" | "test" | "inspector";
  status_code: number | null; error: string | null; duration_ms: number; started_at: string;
  request_headers: Record<string, string>; response_headers: Record<string, string> | null; response_body: string | null;
  /** The OpenTelemetry trace the attempt was sent in (32 hex digits); null while tracing was off. */
  trace_id: string | null;
}

/** Why a delivery waits: a retry's backoff, its endpoint (busy, rate limit, open circuit), or its turn in an ordered queue. */
export type WaitingReason = "schedule" | "endpoint_busy" | "rate_limit" | "circuit_open" | "fifo_turn";

export interface Delivery {
  id: string; event_id: string; endpoint_id: string; event_type: string;
  status: "pending" | "retrying" | "succeeded" | "dead_letter" | "canceled"; attempts_count: number;
  next_attempt_at: string | null;
  /** Why a delivery that is not done waits until next_attempt_at; null while nothing holds it back. */
  waiting_reason: WaitingReason | null;
  last_status_code: number | null; last_error: string | null;
  created_at: string; updated_at: string;
  /** Only when read one by one: every attempt, oldest first. */
  attempts?: Attempt[];
}

export interface DeadLetter {
  id: string; delivery_id: string; event_id: string; endpoint_id: string; event_type: string;
  reason: "exhausted" | "client_error" | "redirect" | "endpoint_disabled" | "transformation_failed"; last_status_code: number | null;
  dead_lettered_at: string; replayed_at: string | null;
}

export interface Job {
  id: string; kind: "dead_letter_replay" | "event_bulk"; status: "queued" | "running" | "succeeded" | "failed" | "canceled";
  total: number; done: number; failed_count: number; created_at: string; finished_at: string | null;
}

export interface DeliveryFilter {
  status?: string; endpoint_id?: string; event_type?: string; event_id?: string; since?: string | Date;
  /** Page size (1–100); the iterator still yields every item. */
  limit?: number;
}

export interface DeadLetterFilter {
  endpoint_id?: string; event_type?: string; since?: string | Date; until?: string | Date; limit?: number;
}

export interface NewEventType {
  /** 1–128 characters of [A-Za-z0-9._:-]. */
  name: string;
  description?: string;
  /** A JSON Schema (draft 2020-12 unless it says otherwise): an object or a boolean. */
  schema?: Record<string, unknown> | boolean | null;
  /** An example of the event's data, checked against the schema. */
  example?: unknown;
  /** Refuse events of this type whose data does not match the schema (needs one). */
  validate?: boolean;
}

/** The fields present change; null clears description, schema or example. */
export interface EventTypePatch {
  description?: string | null; schema?: Record<string, unknown> | boolean | null; example?: unknown;
  validate?: boolean; archived?: boolean;
}

/** An entry of the event-type catalog; schema and example are null when it has none. */
export interface EventType {
  name: string; description: string; schema: Record<string, unknown> | boolean | null; example: unknown;
  validate: boolean; archived: boolean; created_at: string; updated_at: string;
}

export interface EventTypeFilter {
  /** true: archived entries too. */
  archived?: boolean;
  /** Page size (1–100); the iterator still yields every item. */
  limit?: number;
}

/** A one-time link into the integrators' portal. */
export interface PortalSession { url: string; expires_at: string }

export interface Page<T> { data: T[]; next_cursor: string | null }

/** A line of a bulk job that was refused (GET /v1/jobs/{id}/errors). */
export interface JobError {
  line: number; code: string; message: string; field?: string;
}

/** What POST /v1/endpoints/{id}/filter/test is asked: a past event, or a
 * type and data; filter tries one before it is saved. */
export interface FilterTest {
  event_id?: string; type?: string; data?: unknown; filter?: Record<string, unknown> | null;
}

/** What POST /v1/endpoints/{id}/transformation/test is asked: a past event,
 * or a type and data; transformation tries one before it is saved (null:
 * none, the request as webhookd makes it). */
export interface TransformationTest {
  event_id?: string; type?: string; data?: unknown; transformation?: string | null;
}

/** The request a transformation makes of an event; send false: it cancels
 * the delivery (url and body null). */
export interface TransformationResult {
  send: boolean; url: string | null; headers: Record<string, string>; body: string | null;
}
