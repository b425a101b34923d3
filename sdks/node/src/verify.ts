import { createHmac, timingSafeEqual } from "node:crypto";

/** A delivery whose signature, timestamp or headers do not check out. */
export class WebhookVerificationError extends Error {
  override name = "WebhookVerificationError";
}

export interface VerifyOptions {
  /** How far webhook-timestamp may be from now, in seconds; default 300. */
  toleranceSeconds?: number;
  /** Now, in ms since the epoch (tests); default Date.now(). */
  now?: number;
}

type HeaderBag = Headers | Record<string, string | string[] | undefined>;

function header(headers: HeaderBag, name: string): string | undefined {
  if (typeof (headers as Headers).get === "function") return (headers as Headers).get(name) ?? undefined;
  const bag = headers as Record<string, string | string[] | undefined>;
  for (const [k, v] of Object.entries(bag)) {
    if (k.toLowerCase() === name) return Array.isArray(v) ? v.join(" ") : v;
  }
  return undefined;
}

function key(secret: string): Buffer {
  const encoded = secret.startsWith("whsec_") ? secret.slice("whsec_".length) : secret;
  const raw = Buffer.from(encoded, "base64");
  if (raw.length === 0) throw new WebhookVerificationError("webhookd: the signing secret is empty or not base64");
  return raw;
}

/**
 * Verifies a delivery webhookd sent (Standard Webhooks): the raw body as
 * received, its headers (a Headers, or Node's / Express's header object),
 * and the endpoint's secret (`whsec_...`) — or both secrets during a
 * rotation. Returns the parsed body; throws WebhookVerificationError when
 * the signature does not match any secret, or webhook-timestamp is more than
 * 5 minutes (toleranceSeconds) from now. Signatures are compared in constant
 * time.
 */
export function verify(body: string | Uint8Array, headers: HeaderBag, secret: string | string[], options: VerifyOptions = {}): unknown {
  const id = header(headers, "webhook-id");
  const ts = header(headers, "webhook-timestamp");
  const sigs = header(headers, "webhook-signature");
  if (!id || !ts || !sigs) throw new WebhookVerificationError("webhookd: missing webhook-id, webhook-timestamp or webhook-signature");
  if (!/^\d+$/.test(ts)) throw new WebhookVerificationError("webhookd: webhook-timestamp is not Unix seconds");
  const now = Math.floor((options.now ?? Date.now()) / 1000);
  const tolerance = options.toleranceSeconds ?? 300;
  const sent = Number(ts);
  if (now - sent > tolerance) throw new WebhookVerificationError("webhookd: webhook-timestamp is too old");
  if (sent - now > tolerance) throw new WebhookVerificationError("webhookd: webhook-timestamp is too new");
  const raw = typeof body === "string" ? Buffer.from(body, "utf8") : Buffer.from(body.buffer, body.byteOffset, body.byteLength);
  const signed = Buffer.concat([Buffer.from(`${id}.${ts}.`, "utf8"), raw]);
  const secrets = Array.isArray(secret) ? secret : [secret];
  let ok = false;
  for (const s of secrets) {
    const expected = createHmac("sha256", key(s)).update(signed).digest();
    for (const entry of sigs.split(" ")) {
      const [version, value] = entry.split(",", 2);
      if (version !== "v1" || !value) continue;
      const got = Buffer.from(value, "base64");
      // Compare every entry, without stopping early, in constant time.
      if (got.length === expected.length && timingSafeEqual(got, expected)) ok = true;
    }
  }
  if (!ok) throw new WebhookVerificationError("webhookd: no signature matches");
  return JSON.parse(raw.toString("utf8"));
}

/** Signs a body as webhookd does (for receivers' own tests): the value of
 * webhook-signature for one secret. */
export function sign(secret: string, id: string, timestampSeconds: number, body: string | Uint8Array): string {
  const raw = typeof body === "string" ? Buffer.from(body, "utf8") : Buffer.from(body);
  const mac = createHmac("sha256", key(secret)).update(`${id}.${timestampSeconds}.`).update(raw).digest("base64");
  return `v1,${mac}`;
}
