// The outbox: make an event part of your own PostgreSQL transaction. The row
// goes into webhookd_outbox (made once by `webhookd outbox init --database-url
// URL`) in the transaction that makes your business change, so the event
// exists exactly when it commits; webhookd's workers (WEBHOOKD_OUTBOX_SOURCES)
// move it out. See the main README, "Outbox".

/** The INSERT, with $1–$4: type, data (JSON text), external_id or null,
 * endpoint_ids as a PostgreSQL array literal or null. Every value is text. */
export const OUTBOX_INSERT =
  "INSERT INTO webhookd_outbox (type, data, external_id, endpoint_ids) VALUES ($1, $2::jsonb, $3, $4::text[])";

/** One outbox row: an event once its transaction commits. */
export interface OutboxEvent {
  type: string;
  /** Any JSON value. */
  data: unknown;
  externalId?: string;
  /** Deliver to these endpoints only; absent: every subscribed endpoint. */
  endpointIds?: string[];
}

/** The query that inserts ev, as node-postgres takes it: `client.query(outboxInsert(ev))`. */
export function outboxInsert(ev: OutboxEvent): { text: string; values: (string | null)[] } {
  if (!ev.type) throw new TypeError("outbox: type is required");
  const data = JSON.stringify(ev.data);
  if (data === undefined) throw new TypeError("outbox: data is not a JSON value");
  const ids =
    ev.endpointIds === undefined
      ? null
      : "{" + ev.endpointIds.map((id) => '"' + id.replace(/\\/g, "\\\\").replace(/"/g, '\\"') + '"').join(",") + "}";
  return { text: OUTBOX_INSERT, values: [ev.type, data, ev.externalId ?? null, ids] };
}

/** Anything with node-postgres's query(text, values): a pg.PoolClient inside BEGIN ... COMMIT. */
export interface Queryable {
  query(text: string, values: unknown[]): Promise<unknown>;
}

/** Insert ev with tx, the client of your open transaction: it is an event
 * once that transaction commits, and nothing if it rolls back. */
export async function outbox(tx: Queryable, ev: OutboxEvent): Promise<void> {
  const q = outboxInsert(ev);
  await tx.query(q.text, q.values);
}
