// Runs sdks/conformance/cases.json against cmd/webhookd-conformance (make
// test-sdks starts it and sets WEBHOOKD_CONFORMANCE_URL): a real API behind
// a fault proxy. The checks are the server's (internal/conformance); this
// runner only makes each case's calls with one client and reports them.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { WebhookdAbortError, WebhookdClient, WebhookdError } from "../src/index.js";

const control = process.env.WEBHOOKD_CONFORMANCE_URL;
const file = JSON.parse(readFileSync(new URL("../../../conformance/cases.json", import.meta.url), "utf8"));

async function post(path: string, body: unknown): Promise<any> {
  const res = await fetch(control + path, { method: "POST", body: JSON.stringify(body) });
  assert.equal(res.status, 200, await res.clone().text());
  return res.json();
}

async function runCall(c: WebhookdClient, call: any): Promise<unknown> {
  const ac = new AbortController();
  const timer = call.cancel_after_ms ? setTimeout(() => ac.abort(), call.cancel_after_ms) : undefined;
  try {
    let ev;
    if (call.op === "send_event") {
      ev = await c.sendEvent({ type: call.type, data: call.data, external_id: call.external_id },
        { idempotencyKey: call.idempotency_key, signal: ac.signal });
    } else if (call.op === "get_event") {
      ev = await c.getEvent(call.id, { signal: ac.signal });
    } else if (call.op === "send_bulk") {
      return await runBulk(c, call, ac.signal);
    } else {
      throw new Error(`unknown op ${call.op}`);
    }
    return { ok: true, id: ev.id };
  } catch (e) {
    const cancelled = e instanceof WebhookdAbortError;
    const api = e instanceof WebhookdError ? e : cancelled ? e.lastError : null;
    return { ok: false, error: { cancelled, message: String(e), status: api?.status ?? 0, code: api?.code ?? "",
      field: api?.field ?? "", request_id: api?.requestId ?? "", attempts: api?.attempts ?? 0 } };
  } finally {
    clearTimeout(timer);
  }
}

/** Streams a send_bulk call's events from a generator as one job, waits for
 * it with a progress callback and lists its refused lines. */
async function runBulk(c: WebhookdClient, call: any, signal: AbortSignal): Promise<unknown> {
  async function* events() {
    for (const e of call.events) yield e;
  }
  const id = await c.streamEventsBulk(events(), { signal });
  const progress: unknown[] = [];
  const j = await c.waitJob(id, { signal, timeoutMs: 30_000, intervalMs: 20,
    onProgress: (p) => progress.push({ status: p.status, total: p.total, done: p.done, failed_count: p.failed_count }) });
  const errors = (await c.listJobErrors(id, { signal })).map((e) => ({ line: e.line, code: e.code, field: e.field ?? "" }));
  return { ok: true, id, job: { status: j.status, total: j.total, done: j.done, failed_count: j.failed_count, progress, errors } };
}

for (const kase of file.cases) {
  test(`conformance: ${kase.name}`, { skip: control ? false : "WEBHOOKD_CONFORMANCE_URL is not set (make test-sdks sets it)" }, async () => {
    const sess = await post("/sessions", { case: kase.name });
    const r = kase.retry ?? {};
    const c = new WebhookdClient(sess.api_url, sess.api_key,
      { retry: { maxAttempts: r.max_attempts, baseDelayMs: r.base_delay_ms, maxDelayMs: r.max_delay_ms } });
    const start = Date.now();
    const results: unknown[] = [];
    for (const call of kase.calls) {
      const n = call.repeat ?? 1;
      const out: unknown[] = new Array(n);
      let next = 0;
      const worker = async () => {
        while (next < n) {
          const i = next++;
          out[i] = await runCall(c, call);
        }
      };
      await Promise.all(Array.from({ length: call.concurrency ?? 1 }, worker));
      results.push(...out);
    }
    const verdict = await post(`/sessions/${sess.id}/outcome`, { results, elapsed_ms: Date.now() - start });
    assert.deepEqual(verdict.problems, [], `${kase.name}: ${JSON.stringify(verdict.problems)}`);
    assert.equal(verdict.pass, true);
  });
}
