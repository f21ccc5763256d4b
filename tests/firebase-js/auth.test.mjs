// Who a connection is, and what the rules let it do: denials as the SDK
// expects them (`permission_denied`), listens cancelled when the rules
// stop allowing them, the owner credential (firebase-admin), emulator ID
// tokens, and Tern's own tokens with `tern dev --auth`.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";

import { get, onValue, ref, set } from "firebase/database";
import admin from "firebase-admin";

import { BIN } from "../../clients/typescript/test/tern.mjs";
import { Tern, client, freshNs, restGet, setRules, waitFor } from "./helpers.mjs";

let tern;
before(async () => {
  // Rules are looked at again on each keep-alive of a listen: often here.
  process.env.TERN_WATCH_KEEP_ALIVE_MS = "300";
  try {
    tern = await Tern.start();
  } finally {
    delete process.env.TERN_WATCH_KEEP_ALIVE_MS;
  }
});
after(async () => {
  await tern.stop();
});

const RULES = {
  docs: {
    $uid: { ".read": "auth != null && auth.uid == $uid", ".write": "auth != null && auth.uid == $uid" },
  },
  open: { ".read": true, ".write": true },
};

test("rules decide for emulator ID tokens; denials are permission_denied", async () => {
  const ns = freshNs();
  await setRules(tern, ns, RULES);
  const alice = client(tern, ns, { token: { sub: "alice", user_id: "alice" } });
  const anonymous = client(tern, ns);
  try {
    await set(ref(alice.db, "docs/alice"), { note: "mine" });
    await assert.rejects(set(ref(anonymous.db, "docs/alice"), { note: "theirs" }), (e) => e.code === "PERMISSION_DENIED" || /permission_denied/.test(e.message));
    await assert.rejects(set(ref(alice.db, "docs/bob"), 1), /permission_denied/i);
    // get() rejects with the server's text, as against Firebase: "Permission denied".
    await assert.rejects(get(ref(anonymous.db, "docs/alice")), /permission denied/i);
    // A listen the rules refuse is cancelled with the SDK's error.
    const cancelled = await new Promise((resolve) => onValue(ref(anonymous.db, "docs/alice"), () => resolve(null), (e) => resolve(e)));
    assert.match(String(cancelled?.message ?? cancelled), /permission_denied/i);
    assert.deepEqual((await get(ref(alice.db, "docs/alice"))).val(), { note: "mine" });
    await set(ref(anonymous.db, "open/x"), 1);
    assert.deepEqual(await restGet(tern, ns, "docs/alice"), { note: "mine" }, "nothing of a denied write landed");
  } finally {
    await alice.close();
    await anonymous.close();
  }
});

test("a listen is cancelled when the rules stop allowing it", async () => {
  const ns = freshNs();
  await setRules(tern, ns, { ".read": true, ".write": true });
  const a = client(tern, ns, { token: { sub: "ann", user_id: "ann" } });
  try {
    await set(ref(a.db, "board"), "v1");
    const values = [];
    const errors = [];
    onValue(ref(a.db, "board"), (s) => values.push(s.val()), (e) => errors.push(e));
    await waitFor(values, (v) => v === "v1", "the value");
    await setRules(tern, ns, { ".read": false, ".write": true });
    await waitFor(errors, (e) => /permission_denied/i.test(e.message), "the listen's cancellation");
  } finally {
    await a.close();
  }
});

test("firebase-admin is the owner: rules do not apply to it", async () => {
  const ns = freshNs();
  await setRules(tern, ns, { ".read": false, ".write": false });
  process.env.FIREBASE_DATABASE_EMULATOR_HOST = `127.0.0.1:${tern.port}`;
  const app = admin.initializeApp({ projectId: "demo-tern", databaseURL: `https://${ns}.firebaseio.com` }, `admin-${ns}`);
  try {
    const db = app.database();
    await db.ref("config/flags").set({ beta: true });
    assert.deepEqual((await db.ref("config").once("value")).val(), { flags: { beta: true } });
    const seen = [];
    db.ref("config/flags").on("value", (s) => seen.push(s.val()));
    await db.ref("config/flags/beta").set(false);
    await waitFor(seen, (v) => v?.beta === false, "the admin's listen");
    assert.deepEqual(await restGet(tern, ns, "config"), { flags: { beta: false } });
  } finally {
    await app.delete();
    delete process.env.FIREBASE_DATABASE_EMULATOR_HOST;
  }
});

test("with tern dev --auth, Tern's tokens authenticate the realtime protocol", async () => {
  const secured = await Tern.start({ auth: true });
  const ns = freshNs();
  const root = readFileSync(join(secured.dataDir, "admin.token"), "utf8").trim();
  // With authentication on, a database is made on first use only for an
  // admin of it; the browser SDK authenticates after its upgrade, so its
  // database is made first (issue 35: anonymous clients create nothing).
  const created = await fetch(`${secured.url}/v1/ns/${ns}`, {
    method: "PUT",
    headers: { Authorization: `Bearer ${root}`, "Content-Type": "application/json" },
    body: JSON.stringify({ partitions: 1 }),
  });
  assert.equal(created.status, 201);
  const token = (grant) =>
    execFileSync(BIN, ["token", "create", ...grant, "--url", secured.url, "--token", root], { encoding: "utf8" }).trim().split(/\s+/).at(-1);
  try {
    const writer = client(secured, ns, { token: token(["--ns", ns, "--prefix", "", "--verbs", "read,write,watch"]) });
    const stranger = client(secured, ns, { token: token(["--ns", "elsewhere", "--prefix", "", "--verbs", "read,write,watch"]) });
    const nobody = client(secured, ns);
    try {
      await set(ref(writer.db, "x"), 42);
      assert.equal((await get(ref(writer.db, "x"))).val(), 42);
      await assert.rejects(set(ref(stranger.db, "x"), 1), /permission_denied/i, "a key for another namespace");
      await assert.rejects(set(ref(nobody.db, "x"), 1), /permission_denied/i, "no token: nothing is allowed");
      const response = await fetch(`${secured.url}/x.json?ns=${ns}`, { headers: { Authorization: `Bearer ${root}` } });
      assert.equal(await response.json(), 42);
    } finally {
      await writer.close();
      await stranger.close();
      await nobody.close();
    }
  } finally {
    await secured.stop();
  }
});
