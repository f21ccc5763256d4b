// A watch survives its node dying: it reconnects with backoff, resumes from
// its last position and ends with exactly the log: no change lost, none twice.
import assert from "node:assert/strict";
import { test } from "node:test";

import { TernClient } from "../dist/index.js";
import { Tern, until } from "./tern.mjs";

test("reconnects after the node is killed and restarted, without loss or repeats", async () => {
  let tern = await Tern.start();
  const { port, dataDir } = tern;
  const client = new TernClient({ url: tern.url });
  const watch = client.watch({ pk: "counter", mode: "log", backoff: { initialMs: 200, maxMs: 1000 } });
  const received = [];
  const states = [];
  watch.on((e) => {
    if (e.type === "put") received.push(e.record.value);
    if (e.type === "connected" || e.type === "disconnected") states.push(e.type);
  });
  await until(() => watch.synced, "the first snapshot");
  for (let i = 0; i < 50; i++) await client.put("counter", "n", i);
  await until(() => received.length === 50, "the first 50 changes");
  await tern.kill();
  await until(() => states.includes("disconnected"), "the watch to notice");
  tern = await Tern.start({ port, dataDir });
  for (let i = 50; i < 100; i++) await client.put("counter", "n", i);
  await until(() => received.length >= 100, "the changes after the restart", 30_000);
  await new Promise((r) => setTimeout(r, 300));
  assert.deepEqual(received, [...Array(100).keys()], "every change once, in order");
  assert.equal(watch.get("counter", "n").value, 99);
  assert.ok(states.filter((s) => s === "connected").length >= 2, `reconnected: ${states}`);
  await watch.close();
  tern.ownsDir = true;
  await tern.stop();
});

test("backoff delays are jittered, start near 1 s and stop at 30 s", async () => {
  // Nothing listens on port 1: every attempt fails at once.
  const watch = new TernClient({ url: "http://127.0.0.1:1" }).watch({ backoff: {} });
  const delays = [];
  await new Promise((resolve) =>
    watch.on((e) => {
      if (e.type === "disconnected") {
        delays.push(e.retryInMs);
        if (delays.length === 1) resolve();
      }
    }),
  );
  await watch.close();
  assert.ok(delays[0] >= 500 && delays[0] <= 1000, `first delay ${delays[0]} ms`);
  // The schedule itself: half to all of min(30 s, 1 s * 2^attempt).
  const probe = new TernClient({ url: "http://127.0.0.1:1" }).watch({ backoff: {} });
  const samples = Array.from({ length: 200 }, (_, i) => probe["delay"](i % 12));
  await probe.close();
  assert.ok(samples.every((d) => d >= 500 && d <= 30_000), "bounded by the cap");
  assert.ok(samples.some((d) => d > 15_000), "reaches the cap's range");
  assert.ok(new Set(samples).size > 100, "jittered");
});
