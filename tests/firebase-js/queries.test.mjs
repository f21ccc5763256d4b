// Queries as listens (the protocol's tagged query updates) and as reads,
// with the SDK's own query constraints, on `.indexOn`ed data.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import {
  endAt, endBefore, equalTo, get, limitToFirst, limitToLast, onValue, orderByChild, orderByKey, orderByPriority,
  orderByValue, query, ref, set, setWithPriority, startAfter, startAt, update,
} from "firebase/database";

import { Tern, client, freshNs, setRules, waitFor } from "./helpers.mjs";

let tern;
before(async () => {
  tern = await Tern.start();
});
after(async () => {
  await tern.stop();
});

const keys = (snapshot) => {
  const out = [];
  snapshot.forEach((child) => {
    out.push(child.key);
  });
  return out;
};

test("every query constraint selects what Firebase selects, read and listened", async () => {
  const ns = freshNs();
  await setRules(tern, ns, { ".read": true, ".write": true, scores: { ".indexOn": ["s", ".value"] }, plain: { ".indexOn": ".value" } });
  const a = client(tern, ns);
  const b = client(tern, ns);
  try {
    await set(ref(a.db, "scores"), { ann: { s: 5 }, bob: { s: 1 }, cat: { s: 3 }, dan: { s: 3 }, eve: { s: 9 } });
    await set(ref(a.db, "plain"), { a: 30, b: 10, c: 20, d: "text", e: true });
    const s = ref(b.db, "scores");
    const p = ref(b.db, "plain");
    const cases = [
      [query(s, orderByChild("s")), ["bob", "cat", "dan", "ann", "eve"]],
      [query(s, orderByChild("s"), limitToFirst(2)), ["bob", "cat"]],
      [query(s, orderByChild("s"), limitToLast(2)), ["ann", "eve"]],
      [query(s, orderByChild("s"), startAt(3)), ["cat", "dan", "ann", "eve"]],
      [query(s, orderByChild("s"), startAt(3, "dan")), ["dan", "ann", "eve"]],
      [query(s, orderByChild("s"), startAfter(3)), ["ann", "eve"]],
      [query(s, orderByChild("s"), endAt(3)), ["bob", "cat", "dan"]],
      [query(s, orderByChild("s"), endBefore(3)), ["bob"]],
      [query(s, orderByChild("s"), equalTo(3)), ["cat", "dan"]],
      [query(s, orderByChild("s"), startAt(2), endAt(5), limitToFirst(2)), ["cat", "dan"]],
      [query(s, orderByKey(), startAt("c"), endBefore("eve")), ["cat", "dan"]],
      [query(s, orderByKey(), startAfter("cat"), limitToFirst(1)), ["dan"]],
      [query(s, orderByKey(), limitToLast(1)), ["eve"]],
      [query(p, orderByValue()), ["e", "b", "c", "a", "d"]],
      [query(p, orderByValue(), startAt(15), endAt(25)), ["c"]],
    ];
    for (const [q, expected] of cases) {
      assert.deepEqual(keys(await get(q)), expected, `get ${q.toString()} ${JSON.stringify(q._queryParams)}`);
      const listened = await new Promise((resolve) => {
        const unsubscribe = onValue(q, (snapshot) => {
          unsubscribe();
          resolve(keys(snapshot));
        });
      });
      assert.deepEqual(listened, expected, `listen ${JSON.stringify(q._queryParams)}`);
    }
  } finally {
    await a.close();
    await b.close();
  }
});

test("orderByPriority orders by the priorities the server keeps", async () => {
  const ns = freshNs();
  const a = client(tern, ns);
  const b = client(tern, ns);
  try {
    await setWithPriority(ref(a.db, "tasks/x"), { t: "x" }, 3);
    await setWithPriority(ref(a.db, "tasks/y"), { t: "y" }, 1);
    await setWithPriority(ref(a.db, "tasks/z"), "z", 2);
    const q = query(ref(b.db, "tasks"), orderByPriority());
    assert.deepEqual(keys(await get(q)), ["y", "z", "x"]);
    const listened = await new Promise((resolve) => onValue(q, (snapshot) => resolve(keys(snapshot)), { onlyOnce: true }));
    assert.deepEqual(listened, ["y", "z", "x"]);
    assert.deepEqual(keys(await get(query(ref(b.db, "tasks"), orderByPriority(), startAt(2)))), ["z", "x"]);
  } finally {
    await a.close();
    await b.close();
  }
});

test("a query listen follows its result set as it changes", async () => {
  const ns = freshNs();
  await setRules(tern, ns, { ".read": true, ".write": true, board: { ".indexOn": "score" } });
  const writer = client(tern, ns);
  const reader = client(tern, ns);
  try {
    await set(ref(writer.db, "board"), { a: { score: 10 }, b: { score: 20 }, c: { score: 30 } });
    const top2 = [];
    onValue(query(ref(reader.db, "board"), orderByChild("score"), limitToLast(2)), (s) => top2.push(keys(s)));
    await waitFor(top2, (k) => k.join() === "b,c", "the first top two");
    await update(ref(writer.db, "board/a"), { score: 40 }); // a enters, b leaves
    await waitFor(top2, (k) => k.join() === "c,a", "a entered");
    await set(ref(writer.db, "board/c"), null); // c leaves, b comes back
    await waitFor(top2, (k) => k.join() === "b,a", "b back");
    await set(ref(writer.db, "board/d"), { score: 1 }); // below the window: no change
    await update(ref(writer.db, "board/b"), { score: 50 });
    await waitFor(top2, (k) => k.join() === "a,b", "b on top");
    assert.ok(top2.every((k) => k.length <= 2), `never more than the limit: ${JSON.stringify(top2)}`);
  } finally {
    await writer.close();
    await reader.close();
  }
});
