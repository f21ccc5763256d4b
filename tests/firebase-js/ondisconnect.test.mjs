// onDisconnect: writes the server makes when a connection goes away,
// exactly once: when the client goes offline, when its process is
// killed, and when the node holding its connection is killed.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { after, before, test } from "node:test";

import { goOffline, goOnline, increment, onDisconnect, onValue, ref, serverTimestamp, set, update } from "firebase/database";

import { Tern, client, freshNs, restGet, sleep, until, waitFor } from "./helpers.mjs";

let tern;
before(async () => {
  tern = await Tern.start();
});
after(async () => {
  await tern.stop();
});

test("set, update, remove and cancel run when the client goes offline, and only those not cancelled", async () => {
  const ns = freshNs();
  const a = client(tern, ns);
  const watcher = client(tern, ns);
  try {
    await set(ref(a.db, "room"), { status: "here", keep: 1, gone: "x", cancelled: "still" });
    await onDisconnect(ref(a.db, "room/status")).set("away");
    await onDisconnect(ref(a.db, "room")).update({ keep: 2, "nested/at": serverTimestamp() });
    await onDisconnect(ref(a.db, "room/gone")).remove();
    await onDisconnect(ref(a.db, "room/cancelled")).set("not this");
    await onDisconnect(ref(a.db, "room/cancelled")).cancel();
    const seen = [];
    onValue(ref(watcher.db, "room"), (s) => seen.push(s.val()));
    await waitFor(seen, (v) => v?.status === "here", "the room before");
    assert.equal((await restGet(tern, ns, "room")).status, "here", "nothing runs while connected");
    const before = Date.now();
    goOffline(a.db);
    // One log entry; the SDK may raise a value event per path it changes.
    const room = await waitFor(seen, (v) => v?.status === "away" && v.keep === 2 && v.gone === undefined, "the onDisconnect writes");
    assert.equal(room.cancelled, "still");
    assert.ok(room.nested.at >= before - 1000, "a server timestamp, the server's clock at the disconnect");
    // Going online again does not run them again.
    goOnline(a.db);
    await set(ref(a.db, "room/status"), "back");
    await sleep(2500);
    assert.equal((await restGet(tern, ns, "room")).status, "back");
  } finally {
    await a.close();
    await watcher.close();
  }
});

test("the presence recipe: .info/connected and onDisconnect", async () => {
  const ns = freshNs();
  const a = client(tern, ns);
  const b = client(tern, ns);
  try {
    const connected = [];
    onValue(ref(a.db, ".info/connected"), async (s) => {
      connected.push(s.val());
      if (s.val() === true) {
        await onDisconnect(ref(a.db, "status/a")).set({ online: false, last: serverTimestamp() });
        await set(ref(a.db, "status/a"), { online: true });
      }
    });
    const statuses = [];
    onValue(ref(b.db, "status/a"), (s) => statuses.push(s.val()));
    await waitFor(statuses, (v) => v?.online === true, "a online");
    goOffline(a.db);
    await waitFor(statuses, (v) => v?.online === false && typeof v.last === "number", "a offline, with when");
    await waitFor(connected, (v) => v === false, ".info/connected false");
    goOnline(a.db);
    await until(() => statuses.at(-1)?.online === true, "a online again");
    assert.deepEqual(connected.filter((v, i) => v !== connected[i - 1]), [false, true, false, true].slice(connected[0] === false ? 0 : 1));
  } finally {
    await a.close();
    await b.close();
  }
});

test("a killed client process's onDisconnect writes run once", async () => {
  const ns = freshNs();
  const child = spawn(process.execPath, ["disconnect_child.mjs", String(tern.port), ns, "kid"], { cwd: import.meta.dirname, stdio: ["ignore", "pipe", "inherit"] });
  await new Promise((resolve, reject) => {
    child.stdout.on("data", (d) => String(d).includes("ready") && resolve());
    child.on("exit", (code) => reject(new Error(`the child exited with ${code}`)));
  });
  assert.equal(await restGet(tern, ns, "presence/kid"), "online");
  child.kill("SIGKILL");
  await until(async () => (await restGet(tern, ns, "presence/kid"))?.state === "offline", "the killed client's onDisconnect");
  await sleep(2500); // a sweep or two: nothing runs twice
  assert.equal(await restGet(tern, ns, "fired/kid"), 1);
});

test("when the node holding the connection is killed, the restarted node runs its onDisconnect writes once", async () => {
  const node = await Tern.start();
  const ns = freshNs();
  const a = client(node, ns);
  try {
    await set(ref(a.db, "who"), "here");
    await onDisconnect(ref(a.db, "who")).set("gone");
    await onDisconnect(ref(a.db, "count")).set(increment(1));
    await node.kill(); // SIGKILL: the connection dies with the node, nothing is written at close
    await node.spawn(); // same data directory and port
    await until(async () => (await restGet(node, ns, "who")) === "gone", "the writes of the dead node's connection");
    assert.equal(await restGet(node, ns, "count"), 1);
    // The client's SDK reconnects to the restarted node; as with Firebase,
    // writes registered once run once (an app registers again on
    // `.info/connected`: the presence recipe).
    await set(ref(a.db, "who"), "back");
    await update(ref(a.db), { marker: true });
    await sleep(2500);
    assert.equal(await restGet(node, ns, "count"), 1, "run once, not again by a later sweep");
    await a.close();
    await sleep(500);
    assert.equal(await restGet(node, ns, "count"), 1);
    assert.equal(await restGet(node, ns, "who"), "back");
  } finally {
    await node.stop();
  }
});
