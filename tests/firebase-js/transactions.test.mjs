// runTransaction: the SDK sends the hash of the value it started from;
// the server applies the put only if that is still the value, else
// answers `datastale` and the SDK runs the transaction again.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { get, ref, runTransaction, set } from "firebase/database";

import { Tern, client, freshNs, restGet } from "./helpers.mjs";

let tern;
before(async () => {
  tern = await Tern.start();
});
after(async () => {
  await tern.stop();
});

test("transactions from many clients on one counter add up exactly", async () => {
  const ns = freshNs();
  const clients = Array.from({ length: 8 }, () => client(tern, ns));
  const perClient = 15;
  try {
    const results = await Promise.all(
      clients.map(async (c) => {
        let committed = 0;
        let gaveUp = 0;
        for (let i = 0; i < perClient; i++) {
          try {
            const result = await runTransaction(ref(c.db, "counter"), (n) => (n ?? 0) + 1);
            if (result.committed) committed += 1;
          } catch (e) {
            // The SDK gives up after 25 stale attempts (`maxretry`), as
            // against Firebase: under this much contention a few may.
            assert.equal(e.message, "maxretry");
            gaveUp += 1;
          }
        }
        return { committed, gaveUp };
      }),
    );
    const committed = results.reduce((a, b) => a + b.committed, 0);
    const gaveUp = results.reduce((a, b) => a + b.gaveUp, 0);
    assert.equal(committed + gaveUp, clients.length * perClient);
    assert.ok(committed > gaveUp, `most commit (${committed} committed, ${gaveUp} gave up)`);
    assert.equal(await restGet(tern, ns, "counter"), committed, "the counter is exactly the number of commits: none lost, none twice");
    assert.equal((await get(ref(clients[0].db, "counter"))).val(), committed);
  } finally {
    await Promise.all(clients.map((c) => c.close()));
  }
});

test("a transaction on an object with priorities, and one that aborts, change exactly what they say", async () => {
  const ns = freshNs();
  const a = client(tern, ns);
  const b = client(tern, ns);
  try {
    await set(ref(a.db, "account"), { balance: 100, owner: "ann", ".priority": 7 });
    const results = await Promise.all([
      runTransaction(ref(a.db, "account"), (acc) => (acc ? { ...acc, balance: acc.balance - 30 } : acc)),
      runTransaction(ref(b.db, "account"), (acc) => (acc ? { ...acc, balance: acc.balance - 50 } : acc)),
    ]);
    assert.ok(results.every((r) => r.committed));
    assert.equal((await restGet(tern, ns, "account")).balance, 20);
    const aborted = await runTransaction(ref(a.db, "account"), () => undefined);
    assert.equal(aborted.committed, false);
    assert.equal((await restGet(tern, ns, "account")).balance, 20);
  } finally {
    await a.close();
    await b.close();
  }
});
