// The everyday calls of the `firebase` package (v12, modular API) against
// a real `tern dev`: writes, reads, value and child events, off, and two
// clients seeing each other's writes in order.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import {
  get, increment, off, onChildAdded, onChildChanged, onChildMoved, onChildRemoved, onValue, orderByChild,
  push, query, ref, remove, serverTimestamp, set, update,
} from "firebase/database";

import { Tern, client, freshNs, restGet, setRules, waitFor, sleep } from "./helpers.mjs";

let tern;
before(async () => {
  tern = await Tern.start();
});
after(async () => {
  await tern.stop();
});

test("set, multi-path update, push, remove and get reach the server and read back", async () => {
  const ns = freshNs();
  const a = client(tern, ns);
  try {
    await set(ref(a.db, "users/alice"), { name: "Alice", age: 31, tags: { x: true } });
    await update(ref(a.db), { "users/alice/age": 32, "users/bob/name": "Bob", "users/alice/tags": null });
    const pushed = await push(ref(a.db, "log"), { msg: "hello" });
    assert.equal(pushed.key.length, 20);
    await remove(ref(a.db, "users/bob"));
    assert.deepEqual((await get(ref(a.db, "users"))).val(), { alice: { name: "Alice", age: 32 } });
    assert.deepEqual(await restGet(tern, ns, "users"), { alice: { name: "Alice", age: 32 } });
    assert.deepEqual(await restGet(tern, ns, `log/${pushed.key}`), { msg: "hello" });
    // Unicode keys and values, and a key that is a route word elsewhere.
    await set(ref(a.db, "v1/ns/é✓"), "ünïcødé");
    assert.equal((await get(ref(a.db, "v1/ns/é✓"))).val(), "ünïcødé");
  } finally {
    await a.close();
  }
});

test("value, child_added, child_changed, child_removed and child_moved events, then off", async () => {
  const ns = freshNs();
  await setRules(tern, ns, { ".read": true, ".write": true, items: { ".indexOn": ["n"] } });
  const writer = client(tern, ns);
  const reader = client(tern, ns);
  try {
    const seen = [];
    const items = query(ref(reader.db, "items"), orderByChild("n"));
    onChildAdded(items, (s, prev) => seen.push(["added", s.key, s.val().n, prev]));
    onChildChanged(items, (s) => seen.push(["changed", s.key, s.val().n]));
    onChildRemoved(items, (s) => seen.push(["removed", s.key]));
    onChildMoved(items, (s, prev) => seen.push(["moved", s.key, prev]));
    const values = [];
    onValue(ref(reader.db, "items"), (s) => values.push(s.val()));
    await waitFor(values, (v) => v === null, "the first (empty) value");

    await set(ref(writer.db, "items/a"), { n: 1 });
    await set(ref(writer.db, "items/b"), { n: 2 });
    await waitFor(seen, (e) => e[0] === "added" && e[1] === "b", "b added");
    await update(ref(writer.db, "items/a"), { n: 3 }); // a moves after b
    await waitFor(seen, (e) => e[0] === "moved" && e[1] === "a", "a moved");
    await remove(ref(writer.db, "items/b"));
    await waitFor(seen, (e) => e[0] === "removed" && e[1] === "b", "b removed");
    assert.deepEqual(seen, [
      ["added", "a", 1, null],
      ["added", "b", 2, "a"],
      // The SDK raises moves before changes (removed, added, moved, changed, value).
      ["moved", "a", "b"],
      ["changed", "a", 3],
      ["removed", "b"],
    ]);
    await waitFor(values, (v) => v && v.a?.n === 3 && !v.b, "the value without b");

    // off: no more events for these listeners.
    off(ref(reader.db, "items"));
    off(items);
    const count = seen.length;
    const valueCount = values.length;
    await set(ref(writer.db, "items/c"), { n: 5 });
    await sleep(500);
    assert.equal(seen.length, count, "no child event after off");
    assert.equal(values.length, valueCount, "no value event after off");
  } finally {
    await writer.close();
    await reader.close();
  }
});

test("two clients see each other's writes, in the order they were made", async () => {
  const ns = freshNs();
  const a = client(tern, ns);
  const b = client(tern, ns);
  try {
    const seenByB = [];
    onValue(ref(b.db, "seq"), (s) => seenByB.push(s.val()));
    const seenByA = [];
    onValue(ref(a.db, "reply"), (s) => seenByA.push(s.val()));
    await waitFor(seenByB, (v) => v === null, "b's first value");
    // Not awaited one by one: the SDK pipelines them on its connection.
    const writes = [];
    for (let i = 1; i <= 50; i++) writes.push(set(ref(a.db, "seq"), i));
    await Promise.all(writes);
    await waitFor(seenByB, (v) => v === 50, "the last of a's writes at b");
    const numbers = seenByB.filter((v) => v !== null);
    for (let i = 1; i < numbers.length; i++) assert.ok(numbers[i] > numbers[i - 1], `b saw ${numbers[i - 1]} then ${numbers[i]}`);
    await set(ref(b.db, "reply"), "got 50");
    await waitFor(seenByA, (v) => v === "got 50", "b's reply at a");
    assert.equal(await restGet(tern, ns, "seq"), 50);
  } finally {
    await a.close();
    await b.close();
  }
});

test("serverTimestamp, increment and .info/serverTimeOffset", async () => {
  const ns = freshNs();
  const a = client(tern, ns);
  try {
    const offsets = [];
    onValue(ref(a.db, ".info/serverTimeOffset"), (s) => offsets.push(s.val()));
    const before = Date.now();
    await set(ref(a.db, "stamp"), { at: serverTimestamp(), hits: increment(2) });
    await set(ref(a.db, "stamp/hits"), increment(3));
    const stored = await restGet(tern, ns, "stamp");
    assert.equal(stored.hits, 5);
    assert.ok(stored.at >= before - 1000 && stored.at <= Date.now() + 1000, `the server's clock: ${stored.at}`);
    assert.deepEqual((await get(ref(a.db, "stamp"))).val(), stored);
    await waitFor(offsets, (o) => typeof o === "number", "the server time offset");
    assert.ok(Math.abs(offsets.at(-1)) < 5_000, "one machine: the offset is small");
  } finally {
    await a.close();
  }
});
