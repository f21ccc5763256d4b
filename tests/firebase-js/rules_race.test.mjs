// Rules that read data, under concurrent writers from the official SDK
// (issue 36, defect 8): a write's rules are judged against the data it
// lands on, as one Firebase database judges and commits under one lock.
// Before the fix, every racer for a name won its claim.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { ref, runTransaction, set } from "firebase/database";

import { Tern, client, freshNs, restGet, setRules } from "./helpers.mjs";

let tern;
before(async () => {
  tern = await Tern.start();
});
after(async () => {
  await tern.stop();
});

test("of SDK clients racing to claim a name under !data.exists(), exactly one wins", async () => {
  const ns = freshNs("claims");
  await setRules(tern, ns, { ".read": true, names: { $name: { ".write": "!data.exists()" } } });
  const racers = Array.from({ length: 8 }, () => client(tern, ns));
  const names = 10;
  try {
    const outcomes = await Promise.all(
      racers.flatMap((c, racer) =>
        Array.from({ length: names }, (_, name) =>
          set(ref(c.db, `names/n${name}`), { by: racer }).then(
            () => ({ name, racer, won: true }),
            (e) => {
              assert.match(String(e.message ?? e), /permission_denied/i);
              return { name, racer, won: false };
            },
          ),
        ),
      ),
    );
    const stored = await restGet(tern, ns, "names");
    for (let name = 0; name < names; name++) {
      const winners = outcomes.filter((o) => o.name === name && o.won).map((o) => o.racer);
      assert.equal(winners.length, 1, `name n${name} was claimed by racers ${winners}`);
      assert.deepEqual(stored[`n${name}`], { by: winners[0] }, "the winner's value stays");
    }
  } finally {
    await Promise.all(racers.map((c) => c.close()));
  }
});

// The SDK's transaction hash alone already keeps this counter exact; what
// this checks is the answer to a stale transaction under a rule that reads
// the value: `datastale` (the SDK runs it again), never `permission_denied`
// judged against the newer value.
test("transactions under a rule that reads the counter count every commit once", async () => {
  const ns = freshNs("counted");
  const rule = "newData.isNumber() && newData.val() == (data.exists() ? data.val() : 0) + 1";
  await setRules(tern, ns, { ".read": true, counter: { ".write": rule } });
  const clients = Array.from({ length: 6 }, () => client(tern, ns));
  const perClient = 10;
  try {
    const results = await Promise.all(
      clients.map(async (c) => {
        let committed = 0;
        for (let i = 0; i < perClient; i++) {
          try {
            const result = await runTransaction(ref(c.db, "counter"), (n) => (n ?? 0) + 1);
            if (result.committed) committed += 1;
          } catch (e) {
            // Stale 25 times (`maxretry`), as against Firebase; never denied:
            // every attempt the server judges is n + 1 of what it lands on.
            assert.equal(e.message, "maxretry");
          }
        }
        return committed;
      }),
    );
    const committed = results.reduce((a, b) => a + b, 0);
    assert.ok(committed > 0);
    assert.equal(await restGet(tern, ns, "counter"), committed, "every commit counted once, none denied after it was judged");
  } finally {
    await Promise.all(clients.map((c) => c.close()));
  }
});
