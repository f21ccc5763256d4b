// The client against a real `tern dev`: every call, typed errors, and watch
// with its materialized view, resume and reconnect.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { TernClient, TernError } from "../dist/index.js";
import { Tern, until } from "./tern.mjs";

let tern;
let client;

before(async () => {
  tern = await Tern.start();
  client = new TernClient({ url: tern.url });
});

after(async () => {
  await tern?.stop();
});

test("get, put, delete, list, getMany and batch", async () => {
  const put = await client.put("flags", "checkout", { enabled: true });
  assert.equal(typeof put.version, "number");
  assert.match(put.position, /^default:\d+:\d+$/);
  const got = await client.get("flags", "checkout", { after: put.position });
  assert.deepEqual(got.value, { enabled: true });
  assert.equal(got.version, put.version);
  assert.equal(await client.get("flags", "missing"), undefined);

  const batch = await client.batch([
    { op: "put", pk: "flags", sk: "search", value: 1 },
    { op: "put", pk: "flags", sk: "signup", value: [2] },
  ]);
  const page = await client.list("flags", { after: batch.position, prefix: "s" });
  assert.deepEqual(page.items.map((r) => r.sk), ["search", "signup"]);
  const firstPage = await client.list("flags", { after: batch.position, limit: 1 });
  assert.equal(firstPage.items.length, 1);
  assert.ok(firstPage.next_cursor);
  const many = await client.getMany([{ pk: "flags", sk: "search" }, { pk: "nope" }]);
  assert.equal(many[0].value, 1);
  assert.equal(many[1], null);

  const deleted = await client.delete("flags", "search", { waitApplied: true });
  assert.equal(await client.get("flags", "search", { after: deleted.position }), undefined);

  const once = await client.put("flags", "idem", 1, { idempotencyKey: "k-1" });
  const twice = await client.put("flags", "idem", 1, { idempotencyKey: "k-1" });
  assert.equal(twice.duplicate, true);
  assert.equal(twice.version, once.version);
  // The same key for another write is refused, never dropped as a retry.
  await assert.rejects(client.put("flags", "idem", 2, { idempotencyKey: "k-1" }), (e) => {
    assert.ok(e instanceof TernError);
    assert.equal(e.status, 409);
    assert.equal(e.code, "idempotency_key_reused");
    return true;
  });
});

test("keys a URL path cannot carry (. and ..) reach their own record", async () => {
  // fetch resolves "." and ".." (even as %2E) away: ("dots", ".") would be ("dots", "").
  for (const sk of [".", ".."]) {
    const put = await client.put("dots", sk, { sk }, { waitApplied: true });
    assert.deepEqual((await client.get("dots", sk, { after: put.position })).value, { sk });
  }
  assert.equal(await client.get("dots", ""), undefined, "no other record was written");
  await assert.rejects(client.put("dots", ".", 1, { ifAbsent: true }), (e) => e.code === "condition_failed");
  const deleted = await client.delete("dots", ".", { waitApplied: true });
  assert.equal(await client.get("dots", ".", { after: deleted.position }), undefined);
  assert.deepEqual((await client.get("dots", "..")).value, { sk: ".." });
});

test("errors are typed", async () => {
  const put = await client.put("cas", "", "v1");
  await assert.rejects(client.put("cas", "", "v2", { ifVersion: put.version + 1000 }), (e) => {
    assert.ok(e instanceof TernError);
    assert.equal(e.status, 409);
    assert.equal(e.code, "condition_failed");
    assert.equal(e.details.current_version, put.version);
    return true;
  });
  await assert.rejects(client.put("x".repeat(2000), "", 1), (e) => e instanceof TernError && e.status === 413);
  await assert.rejects(client.batch([{ op: "put", pk: "a", value: 1 }, { op: "put", pk: "b", value: 2 }]), (e) => e.code === "cross_partition");
  await assert.rejects(new TernClient({ url: "http://127.0.0.1:1" }).get("a"), (e) => e.code === "unreachable");
});

test("watch keeps a materialized view from a snapshot and typed events", async () => {
  // Applied before the watch starts, so it is in the snapshot (a plain put
  // answers once the log has it; it could arrive live, after `synced`).
  await client.put("room", "alice", { online: true }, { waitApplied: true });
  const watch = client.watch({ pk: "room" });
  try {
    const events = [];
    watch.on((e) => events.push(e));
    await until(() => watch.synced, "the snapshot");
    assert.deepEqual(watch.get("room", "alice")?.value, { online: true });
    await client.put("room", "bob", { online: true });
    await client.delete("room", "alice");
    await client.put("lobby", "carol", 1); // another pk: not watched
    await until(() => watch.get("room", "bob") && !watch.get("room", "alice"), "the changes");
    assert.deepEqual(watch.records().map((r) => r.sk), ["bob"]);
    const types = events.map((e) => e.type);
    assert.deepEqual(types.slice(0, 4), ["connected", "snapshot", "put", "synced"]);
    assert.ok(types.includes("delete"));
    assert.ok(!events.some((e) => e.type === "put" && e.record.pk === "lobby"));
  } finally {
    await watch.close();
  }
});

test("an unknown namespace fails the watch for good", async () => {
  const watch = client.watch({ ns: "nope" });
  const failed = await new Promise((resolve) => watch.on((e) => e.type === "failed" && resolve(e)));
  assert.equal(failed.error.code, "namespace_not_found");
  await watch.close();
});

test("watch as an async iterator", async () => {
  const watch = client.watch({ pk: "iter", from: "now" });
  const seen = [];
  const reader = (async () => {
    for await (const e of watch) {
      if (e.type === "put") seen.push(e.record.value);
      if (seen.length === 3) break;
    }
  })();
  await until(() => watch.position !== undefined, "the starting position");
  for (const v of [1, 2, 3]) await client.put("iter", "k", v);
  await reader;
  assert.deepEqual(seen, [1, 2, 3]);
  await watch.close();
});
