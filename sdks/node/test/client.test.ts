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
