import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { ROUTES, WebhookdClient } from "../src/index.js";

test("every route of the OpenAPI document has a method", () => {
  const doc = JSON.parse(readFileSync(new URL("../../../../api/openapi.json", import.meta.url), "utf8"));
  const client = new WebhookdClient("http://127.0.0.1:9", "k") as unknown as Record<string, unknown>;
  const routes = ROUTES as Record<string, { method: string; path: string; sdk: string }>;
  let n = 0;
  for (const [path, ops] of Object.entries<Record<string, { operationId: string; "x-sdk"?: boolean }>>(doc.paths)) {
    for (const [method, op] of Object.entries(ops)) {
      // x-sdk false: a route for webhookd's own CLI (the relay stream of `webhookd listen`).
      if (!["get", "post", "put", "patch", "delete"].includes(method) || op["x-sdk"] === false) continue;
      n++;
      const r = routes[op.operationId];
      assert.ok(r, `${method.toUpperCase()} ${path} (${op.operationId}) has no method in the Node SDK`);
      assert.equal(`${r.method} ${r.path}`, `${method.toUpperCase()} ${path}`, op.operationId);
      assert.equal(typeof client[r.sdk], "function", `${op.operationId}: WebhookdClient.${r.sdk} is missing`);
    }
  }
  assert.equal(Object.keys(routes).length, n, "ROUTES names an operation the document does not have");
});
