import assert from "node:assert/strict";
import { createServer, IncomingMessage, ServerResponse } from "node:http";
import { AddressInfo } from "node:net";
import { test } from "node:test";
import { backoff, DEFAULT_RETRY_POLICY, parseRetryAfter, WebhookdAbortError, WebhookdClient, WebhookdError } from "../src/index.js";

type Handler = (n: number, req: IncomingMessage, body: string, res: ServerResponse) => void;

/** A loopback server answering with a script; it records each request. */
async function serve(handler: Handler) {
  const seen: { method: string; url: string; key: string | undefined; body: string }[] = [];
  const server = createServer((req, res) => {
    let body = "";
    req.on("data", (c) => (body += c));
    req.on("end", () => {
      seen.push({ method: req.method!, url: req.url!, key: req.headers["idempotency-key"] as string | undefined, body });
      handler(seen.length, req, body, res);
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return { url, seen, close: () => new Promise((r) => server.close(r)) };
}

function answer(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}) {
  res.writeHead(status, { "Content-Type": "application/json", "X-Request-Id": "req_test", ...headers });
  res.end(JSON.stringify(body));
}
const fast = { retry: { baseDelayMs: 1, maxDelayMs: 5 } };
const apiError = (code: string, extra = {}) => ({ error: { code, message: "m", request_id: "req_body", ...extra } });

test("backoff is full jitter under a doubling, capped ceiling; Retry-After reads seconds and dates", () => {
  const p = { ...DEFAULT_RETRY_POLICY, baseDelayMs: 100, maxDelayMs: 1000 };
  assert.equal(backoff(p, 1, () => 1), 100);
  assert.equal(backoff(p, 3, () => 1), 400);
  assert.equal(backoff(p, 10, () => 1), 1000);
  assert.equal(backoff(p, 3, () => 0), 0);
  assert.equal(parseRetryAfter("2"), 2000);
  assert.equal(parseRetryAfter(new Date(10_000).toUTCString(), 4_000), 6000);
  assert.equal(parseRetryAfter("soon"), null);
  assert.equal(parseRetryAfter(null), null);
});

test("a 503 is retried with the same Idempotency-Key; a 400 is not retried and is typed", async () => {
  const s = await serve((n, req, _b, res) => {
    if (req.url === "/v1/events" && n === 1) return answer(res, 503, apiError("unavailable"), { "Retry-After": "0" });
    if (req.url === "/v1/events") return answer(res, 202, { id: "evt_1", deliveries: [] });
    answer(res, 400, apiError("validation_failed", { field: "type" }));
  });
  try {
    const c = new WebhookdClient(s.url, "key", fast);
    const ev = await c.sendEvent({ type: "a.b", data: { n: 1 } });
    assert.equal(ev.id, "evt_1");
    assert.equal(s.seen.length, 2);
    assert.match(s.seen[0].key!, /^[0-9a-f-]{36}$/);
    assert.equal(s.seen[1].key, s.seen[0].key);
    const err = await c.sendEvents([{ type: "bad type", data: 1 }]).catch((e) => e);
    assert.ok(err instanceof WebhookdError);
    assert.deepEqual([err.status, err.code, err.field, err.requestId, err.attempts], [400, "validation_failed", "type", "req_body", 1]);
    assert.equal(s.seen.length, 3);
    assert.notEqual(s.seen[2].key, s.seen[0].key);
  } finally {
    await s.close();
  }
});

test("list iterators follow next_cursor", async () => {
  const s = await serve((_n, req, _b, res) => {
    const cursor = new URL(req.url!, "http://x").searchParams.get("cursor");
    if (!cursor) return answer(res, 200, { data: [{ id: "ep_1" }, { id: "ep_2" }], next_cursor: "c2" });
    answer(res, 200, { data: [{ id: "ep_3" }], next_cursor: null });
  });
  try {
    const c = new WebhookdClient(s.url, "key", fast);
    const ids: string[] = [];
    for await (const ep of c.listEndpoints({ limit: 2 })) ids.push(ep.id);
    assert.deepEqual(ids, ["ep_1", "ep_2", "ep_3"]);
    assert.equal(s.seen[1].url, "/v1/endpoints?limit=2&cursor=c2");
  } finally {
    await s.close();
  }
});

test("the test route is not retried after a 500 (the API does not deduplicate it); a delete that finds it gone succeeds", async () => {
  const s = await serve((n, req, _b, res) => {
    if (req.method === "DELETE") return n === 2 ? answer(res, 503, apiError("unavailable")) : answer(res, 404, apiError("not_found"));
    answer(res, 500, apiError("internal"));
  });
  try {
    const c = new WebhookdClient(s.url, "key", fast);
    await assert.rejects(c.testEndpoint("ep_1"), (e: WebhookdError) => e.status === 500 && e.attempts === 1);
    await c.deleteEndpoint("ep_1"); // 503, then 404: an earlier try deleted it
    assert.equal(s.seen.length, 3);
  } finally {
    await s.close();
  }
});

test("a deadline shorter than a Retry-After gives up at once with the answer; an abort stops a wait", async () => {
  const s = await serve((_n, _r, _b, res) => answer(res, 429, apiError("rate_limited"), { "Retry-After": "20" }));
  try {
    const c = new WebhookdClient(s.url, "key");
    const start = Date.now();
    await assert.rejects(c.getEvent("evt_1", { timeoutMs: 3000 }), (e: WebhookdError) => e.status === 429);
    assert.ok(Date.now() - start < 1000);
    const ac = new AbortController();
    setTimeout(() => ac.abort(), 200);
    await assert.rejects(c.getEvent("evt_1", { signal: ac.signal }),
      (e: WebhookdAbortError) => e.name === "AbortError" && e.lastError?.status === 429);
  } finally {
    await s.close();
  }
});

test("the event-type catalog and portal links: a create retried with its key, lists following next_cursor", async () => {
  const et = (name: string) => ({ name, description: "", schema: null, example: null, validate: false, archived: false,
    created_at: "2026-01-01T00:00:00Z", updated_at: "2026-01-01T00:00:00Z" });
  let creates = 0;
  const s = await serve((_n, req, _b, res) => {
    const u = new URL(req.url!, "http://x");
    if (req.method === "POST" && u.pathname === "/v1/event-types") {
      return ++creates === 1 ? answer(res, 503, apiError("unavailable"), { "Retry-After": "0" }) : answer(res, 201, et("invoice.paid"));
    }
    if (req.method === "GET" && u.pathname === "/v1/event-types") {
      if (!u.searchParams.get("cursor")) return answer(res, 200, { data: [et("a.b")], next_cursor: "c2" });
      return answer(res, 200, { data: [et("c.d")], next_cursor: null });
    }
    if (u.pathname === "/v1/event-types/a%2Fb") return answer(res, 404, apiError("not_found"));
    if (req.method === "PATCH") return answer(res, 200, { ...et("invoice.paid"), validate: true });
    if (req.method === "DELETE") return answer(res, 200, { ...et("invoice.paid"), archived: true });
    if (u.pathname === "/v1/portal-sessions") {
      return answer(res, 201, { url: "http://x/portal/open/wpl_1", expires_at: "2026-01-01T01:00:00Z" });
    }
    answer(res, 599, apiError("no_rule"));
  });
  try {
    const c = new WebhookdClient(s.url, "key", fast);
    const created = await c.createEventType({ name: "invoice.paid", schema: { type: "object" }, validate: true });
    assert.equal(created.name, "invoice.paid");
    assert.equal(s.seen.length, 2);
    assert.match(s.seen[0].key!, /^[0-9a-f-]{36}$/);
    assert.equal(s.seen[1].key, s.seen[0].key);
    assert.deepEqual(JSON.parse(s.seen[1].body), { name: "invoice.paid", schema: { type: "object" }, validate: true });

    const names: string[] = [];
    for await (const t of c.listEventTypes({ archived: true, limit: 1 })) names.push(t.name);
    assert.deepEqual(names, ["a.b", "c.d"]);
    assert.equal(s.seen[2].url, "/v1/event-types?archived=true&limit=1");
    assert.equal(s.seen[3].url, "/v1/event-types?archived=true&limit=1&cursor=c2");

    await assert.rejects(c.getEventType("a/b"), (e: WebhookdError) => e.status === 404 && e.code === "not_found");
    const patched = await c.updateEventType("invoice.paid", { validate: true, example: null });
    assert.equal(patched.validate, true);
    assert.deepEqual([s.seen[5].method, s.seen[5].url, JSON.parse(s.seen[5].body)],
      ["PATCH", "/v1/event-types/invoice.paid", { validate: true, example: null }]);
    assert.equal((await c.archiveEventType("invoice.paid")).archived, true);
    assert.deepEqual([s.seen[6].method, s.seen[6].key], ["DELETE", undefined]);

    const link = await c.createPortalSession({ ttl: "1h" }, { idempotencyKey: "k-portal" });
    assert.match(link.url, /\/portal\/open\/wpl_/);
    assert.deepEqual([s.seen[7].key, JSON.parse(s.seen[7].body)], ["k-portal", { ttl: "1h" }]);
    await c.createPortalSession();
    assert.equal(s.seen[8].body, "{}");
    assert.match(s.seen[8].key!, /^[0-9a-f-]{36}$/);
  } finally {
    await s.close();
  }
});

test("streamEventsBulk streams an async iterable as chunked NDJSON while it is read, and makes one try", async () => {
  let received = 0;
  let gotFirstChunk!: () => void;
  const firstChunk = new Promise<void>((r) => (gotFirstChunk = r));
  const seen: { headers: IncomingMessage["headers"]; body: string }[] = [];
  const server = createServer((req, res) => {
    let body = "";
    req.on("data", (c: Buffer) => {
      body += c;
      received += c.length;
      gotFirstChunk();
    });
    req.on("end", () => {
      seen.push({ headers: req.headers, body });
      if (seen.length === 2) return answer(res, 503, apiError("unavailable"), { "Retry-After": "0" });
      answer(res, 202, { job_id: "job_1" });
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  try {
    const c = new WebhookdClient(url, "key", fast);
    const n = 3000;
    async function* events() {
      for (let i = 1; i <= n; i++) {
        // Half-way, wait until the API has bytes: a client that read every
        // event before sending would never get past this line.
        if (i === n / 2) await firstChunk;
        yield { type: "bulk.item", data: { n: i, pad: "x".repeat(40) } };
      }
    }
    assert.equal(await c.streamEventsBulk(events(), { idempotencyKey: "k1" }), "job_1");
    assert.ok(received > 0);
    const h = seen[0].headers;
    assert.equal(h["transfer-encoding"], "chunked");
    assert.equal(h["content-length"], undefined);
    assert.equal(h["content-type"], "application/x-ndjson");
    assert.equal(h["idempotency-key"], "k1");
    const lines = seen[0].body.split("\n");
    assert.equal(lines.length, n + 1);
    assert.deepEqual(JSON.parse(lines[776]), { type: "bulk.item", data: { n: 777, pad: "x".repeat(40) } });
    // A plain array streams too; its 503 is not retried (the body is spent).
    const err = await c.streamEventsBulk([{ type: "a", data: 1 }]).catch((e) => e);
    assert.ok(err instanceof WebhookdError);
    assert.deepEqual([err.status, err.attempts], [503, 1]);
    assert.equal(seen.length, 2);
  } finally {
    await new Promise((r) => server.close(r));
  }
});

test("waitJob backs off until the job is finished and reports each change of its counts", async () => {
  const readings = [
    { status: "queued", total: 3, done: 0, failed_count: 0 },
    { status: "running", total: 3, done: 1, failed_count: 0 },
    { status: "running", total: 3, done: 1, failed_count: 0 },
    { status: "running", total: 3, done: 1, failed_count: 0 },
    { status: "succeeded", total: 3, done: 2, failed_count: 1 },
  ];
  const s = await serve((n, req, _b, res) => {
    assert.equal(req.url, "/v1/jobs/job_1");
    answer(res, 200, { id: "job_1", kind: "event_bulk", ...readings[Math.min(n, readings.length) - 1] });
  });
  try {
    const c = new WebhookdClient(s.url, "key", fast);
    const progress: string[] = [];
    const j = await c.waitJob("job_1", { intervalMs: 5, onProgress: (p) => progress.push(`${p.status} ${p.done}/${p.total} ${p.failed_count}`) });
    assert.equal(j.status, "succeeded");
    assert.deepEqual(progress, ["queued 0/3 0", "running 1/3 0", "succeeded 2/3 1"]);
    assert.equal(s.seen.length, 5);
    // A deadline ends the wait with WebhookdAbortError.
    const never = await serve((_n, _r, _b, res) => answer(res, 200, { id: "job_2", status: "running", total: 1, done: 0, failed_count: 0 }));
    try {
      const err = await new WebhookdClient(never.url, "key", fast).waitJob("job_2", { intervalMs: 5, timeoutMs: 100 }).catch((e) => e);
      assert.ok(err instanceof WebhookdAbortError, String(err));
    } finally {
      await never.close();
    }
  } finally {
    await s.close();
  }
});
