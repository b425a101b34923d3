import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { OUTBOX_INSERT, outbox, outboxInsert } from "../src/index.js";

test("a row with every column", async () => {
  const calls: [string, unknown[]][] = [];
  await outbox(
    { query: async (text, values) => calls.push([text, values]) },
    { type: "order.created", data: { id: 1 }, externalId: "o-1", endpointIds: ["ep_1", 'ep "2"'] },
  );
  assert.deepEqual(calls, [[OUTBOX_INSERT, ["order.created", '{"id":1}', "o-1", '{"ep_1","ep \\"2\\""}']]]);
});

test("optional columns are null; type and data are required", () => {
  assert.deepEqual(outboxInsert({ type: "a", data: [1, 2] }).values, ["a", "[1,2]", null, null]);
  assert.throws(() => outboxInsert({ type: "", data: {} }), TypeError);
  assert.throws(() => outboxInsert({ type: "a", data: undefined }), TypeError);
});

test("the same statement as the Go client", () => {
  const go = readFileSync(new URL("../../../../client/outbox.go", import.meta.url), "utf8");
  assert.equal(/const OutboxInsert = `([^`]*)`/.exec(go)?.[1], OUTBOX_INSERT);
});
