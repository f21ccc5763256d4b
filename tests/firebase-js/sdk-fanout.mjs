// The `fb-sdk` row of `tern-bench watch` (bench/src/watch.rs): N apps of
// the official `firebase` package in this process, each with its own
// connection to `tern` and an `onValue` of /bench; prints "ready" once all
// have their first value, waits for "go" on stdin, then puts --puts values
// at --rate per second over REST and times put → each app's event on this
// process's clock. Prints one line of JSON: the events and percentiles.
import { createInterface } from "node:readline";
import { parseArgs } from "node:util";

import { initializeApp } from "firebase/app";
import { connectDatabaseEmulator, getDatabase, onValue, ref } from "firebase/database";

const { values: opts } = parseArgs({
  options: {
    url: { type: "string" },
    listeners: { type: "string", default: "300" },
    puts: { type: "string", default: "100" },
    rate: { type: "string", default: "10" },
    "value-bytes": { type: "string", default: "100" },
  },
});
const url = new URL(opts.url);
const listeners = Number(opts.listeners);
const puts = Number(opts.puts);
const rate = Number(opts.rate);
const pad = "x".repeat(Number(opts["value-bytes"]));
const now = () => performance.now();

const sent = new Array(puts);
const latencies = [];
let received = 0;
let started = 0;
const allStarted = new Promise((resolve) => {
  for (let i = 0; i < listeners; i++) {
    const app = initializeApp({ projectId: "demo-bench", databaseURL: `http://${url.host}?ns=default` }, `l${i}`);
    const db = getDatabase(app);
    connectDatabaseEmulator(db, url.hostname, Number(url.port));
    let first = true;
    onValue(ref(db, "bench"), (snapshot) => {
      const at = now();
      if (first) {
        first = false;
        started += 1;
        if (started === listeners) resolve();
        return;
      }
      const seq = snapshot.val()?.seq;
      if (typeof seq === "number" && sent[seq] !== undefined) {
        latencies.push(at - sent[seq]);
        received += 1;
      }
    });
  }
});
await allStarted;
console.log("ready");
await new Promise((resolve) => createInterface({ input: process.stdin }).once("line", resolve));

const start = now();
for (let seq = 0; seq < puts; seq++) {
  const due = start + (seq * 1000) / rate;
  const wait = due - now();
  if (wait > 0) await new Promise((r) => setTimeout(r, wait));
  sent[seq] = now();
  const response = await fetch(`${url.origin}/bench.json?ns=default`, { method: "PUT", body: JSON.stringify({ seq, pad }) });
  if (!response.ok) throw new Error(`put ${seq}: ${response.status}`);
}
const expected = puts * listeners;
const deadline = now() + 10_000;
while (received < expected && now() < deadline) await new Promise((r) => setTimeout(r, 20));
latencies.sort((a, b) => a - b);
const at = (q) => (latencies.length ? latencies[Math.min(latencies.length - 1, Math.floor(q * latencies.length))] : NaN);
console.log(JSON.stringify({ events_expected: expected, events_received: received, p50_ms: at(0.5), p99_ms: at(0.99), max_ms: latencies.at(-1) ?? NaN }));
process.exit(0);
