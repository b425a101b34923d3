import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { Webhook } from "standardwebhooks";
import { sign, verify, WebhookVerificationError } from "../src/index.js";

interface Fixture {
  deliveries: { name: string; secrets: string[]; headers: Record<string, string>; body: string }[];
}
const fixture: Fixture = JSON.parse(readFileSync(new URL("../../../conformance/signatures.json", import.meta.url), "utf8"));
const at = (h: Record<string, string>) => Number(h["webhook-timestamp"]) * 1000;

test("requests webhookd sent verify with each of their secrets", () => {
  assert.ok(fixture.deliveries.length >= 2);
  for (const d of fixture.deliveries) {
    for (const secret of d.secrets) {
      const payload = verify(d.body, d.headers, secret, { now: at(d.headers) }) as { id: string };
      assert.equal(payload.id, d.headers["webhook-id"], d.name);
    }
    verify(d.body, new Headers(d.headers), d.secrets, { now: at(d.headers) });
  }
});

test("a changed body, another secret or a far clock is refused", () => {
  const other = "whsec_" + Buffer.from("another key of 24 bytes!").toString("base64");
  for (const d of fixture.deliveries) {
    const now = at(d.headers);
    const refuse = (fn: () => unknown, what: string) => assert.throws(fn, WebhookVerificationError, `${d.name}: ${what}`);
    refuse(() => verify(d.body.replace("invoice", "invoicf"), d.headers, d.secrets[0], { now }), "changed body");
    refuse(() => verify(d.body, d.headers, other, { now }), "another secret");
    refuse(() => verify(d.body, d.headers, d.secrets[0], { now: now + 301_000 }), "5 minutes later");
    refuse(() => verify(d.body, d.headers, d.secrets[0], { now: now - 301_000 }), "5 minutes earlier");
    verify(d.body, d.headers, d.secrets[0], { now: now + 299_000 });
    refuse(() => verify(d.body, { ...d.headers, "webhook-signature": "" }, d.secrets[0], { now }), "no signature");
    refuse(() => verify(d.body, { ...d.headers, "webhook-id": "evt_other" }, d.secrets[0], { now }), "another id");
  }
});

test("the official standardwebhooks library agrees, both ways", () => {
  for (const d of fixture.deliveries) {
    const ts = new Date(at(d.headers));
    const entries = d.headers["webhook-signature"].split(" ");
    // What webhookd sent is what the official library signs.
    d.secrets.forEach((secret, i) => assert.equal(new Webhook(secret).sign(d.headers["webhook-id"], ts, d.body), entries[i]));
  }
  // Fresh deliveries signed by the official library verify here, and ours there.
  const secret = fixture.deliveries[0].secrets[0];
  const body = JSON.stringify({ id: "evt_1", type: "a.b", timestamp: new Date().toISOString(), data: { n: 1 } });
  const now = new Date();
  const official = new Webhook(secret).sign("evt_1", now, body);
  const headers = { "webhook-id": "evt_1", "webhook-timestamp": String(Math.floor(now.getTime() / 1000)), "webhook-signature": official };
  assert.deepEqual(verify(body, headers, secret), JSON.parse(body));
  const ours = sign(secret, "evt_1", Math.floor(now.getTime() / 1000), body);
  assert.equal(ours, official);
  new Webhook(secret).verify(body, { ...headers, "webhook-signature": ours });
  assert.throws(() => new Webhook(secret).verify(body + " ", headers));
});
