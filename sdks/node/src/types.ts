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
  max_in_flight?: number; ordering?: "none" | "fifo";
}

export interface EndpointPatch {
  url?: string; description?: string; event_types?: string[] | null; rate_limit_per_second?: number | null;
  max_in_flight?: number; status?: "active" | "disabled"; replay_dead_letters?: boolean;
}

export interface Endpoint {
  id: string; url: string; description: string; event_types: string[]; status: "active" | "disabled";
  disabled_reason: null | "manual" | "gone" | "failing"; rate_limit_per_second: number | null;
  max_in_flight: number; ordering: "none" | "fifo"; circuit: "closed" | "open" | "probing"; version: number;
  created_at: string; updated_at: string;
  /** Only in the create answer. */
  secret?: string;
}

export interface Secret { secret: string; previous_secret: string | null; previous_expires_at: string | null }

export interface Attempt {
  number: number; request_id: string; url: string; trigger: "auto" | "manual" | "test" | "inspector";
  status_code: number | null; error: string | null; duration_ms: number; started_at: string;
  request_headers: Record<string, string>; response_headers: Record<string, string> | null; response_body: string | null;
}

export interface Delivery {
  id: string; event_id: string; endpoint_id: string; event_type: string;
  status: "pending" | "retrying" | "succeeded" | "dead_letter"; attempts_count: number;
  next_attempt_at: string | null; last_status_code: number | null; last_error: string | null;
  created_at: string; updated_at: string;
  /** Only when read one by one: every attempt, oldest first. */
  attempts?: Attempt[];
}

export interface DeadLetter {
  id: string; delivery_id: string; event_id: string; endpoint_id: string; event_type: string;
  reason: "exhausted" | "client_error" | "redirect" | "endpoint_disabled"; last_status_code: number | null;
  dead_lettered_at: string; replayed_at: string | null;
}

export interface Job {
  id: string; kind: "dead_letter_replay"; status: "queued" | "running" | "succeeded" | "failed";
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

export interface Page<T> { data: T[]; next_cursor: string | null }
