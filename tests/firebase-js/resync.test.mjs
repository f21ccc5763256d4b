// Connections that go away and come back: goOffline/goOnline and a node
// that dies and restarts. The SDK listens again and resyncs; nothing is
// missed or doubled. And long messages, split into frames both ways.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { get, goOffline, goOnline, onChildAdded, onChildRemoved, onValue, push, ref, remove, set } from "firebase/database";

import { Tern, client, freshNs, restGet, sleep, until, waitFor } from "./helpers.mjs";

let tern;
before(async () => {
  tern = await Tern.start();
});
after(async () => {
  await tern.stop();
});

test("after goOffline and goOnline a listener gets what it missed, once", async () => {
  const ns = freshNs();
  const writer = client(tern, ns);
  const reader = client(tern, ns);
  try {
    const added = [];
    const removed = [];
    onChildAdded(ref(reader.db, "feed"), (s) => added.push(s.key));
    onChildRemoved(ref(reader.db, "feed"), (s) => removed.push(s.key));
    const first = (await push(ref(writer.db, "feed"), 0)).key;
    await waitFor(added, (k) => k === first, "the first item");
    goOffline(reader.db);
    const missed = [];
    for (let i = 1; i <= 5; i++) missed.push((await push(ref(writer.db, "feed"), i)).key);
    await remove(ref(writer.db, `feed/${first}`));
    await sleep(200);
    assert.deepEqual(added, [first], "nothing while offline");
    goOnline(reader.db);
    await until(() => added.length === 6 && removed.length === 1, "the resync");
    await sleep(300);
    assert.deepEqual(added, [first, ...missed], "each missed item once, in order");
    assert.deepEqual(removed, [first]);
  } finally {
    await writer.close();
    await reader.close();
  }
});

test("when the node dies and comes back, the SDK reconnects, listens again and writes what it held", async () => {
  const node = await Tern.start();
  const ns = freshNs();
  const a = client(node, ns);
  const b = client(node, ns);
  try {
    const values = [];
    onValue(ref(b.db, "doc"), (s) => values.push(s.val()));
    await set(ref(a.db, "doc"), "before");
    await waitFor(values, (v) => v === "before", "the first value");
    await node.kill();
    const pending = set(ref(a.db, "doc"), "while down"); // held by the SDK, sent on reconnect
    await node.spawn();
    await pending;
    await waitFor(values, (v) => v === "while down", "the held write, after the restart");
    await set(ref(a.db, "doc"), "after");
    await waitFor(values, (v) => v === "after", "a write after the restart");
    const distinct = values.filter((v, i) => v !== values[i - 1]);
    assert.deepEqual(distinct.filter((v) => v !== null), ["before", "while down", "after"]);
    assert.equal(await restGet(node, ns, "doc"), "after");
  } finally {
    await a.close();
    await b.close();
    await node.stop();
  }
});

test("long messages go in frames both ways; a write over Tern's bound is refused whole", async () => {
  const ns = freshNs();
  const a = client(tern, ns);
  const b = client(tern, ns);
  try {
    const big = {};
    for (let i = 0; i < 2000; i++) big[`k${i}`] = "é✓".repeat(250) + i; // ~2 MB of UTF-8
    const values = [];
    onValue(ref(b.db, "big"), (s) => values.push(s.val()));
    await set(ref(a.db, "big"), big);
    const seen = await waitFor(values, (v) => v && Object.keys(v).length === 2000, "the big value at b");
    assert.deepEqual(seen, big);
    assert.deepEqual((await get(ref(b.db, "big"))).val(), big);
    const huge = { blob: "x".repeat(5 * 1024 * 1024) };
    await assert.rejects(set(ref(a.db, "huge"), huge), /too_big/i);
    assert.equal(await restGet(tern, ns, "huge"), null);
    await set(ref(a.db, "after"), "still connected");
    assert.equal(await restGet(tern, ns, "after"), "still connected");
  } finally {
    await a.close();
    await b.close();
  }
});
