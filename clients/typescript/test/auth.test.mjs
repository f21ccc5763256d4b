// The client's `token` option against a real `tern dev --auth`: calls and
// watches carry it; without it, or with a token lacking a grant, the typed
// errors say unauthenticated and permission_denied.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";

import { TernClient, TernError } from "../dist/index.js";
import { Tern, until } from "./tern.mjs";

let tern;
let root;

before(async () => {
  tern = await Tern.start({ auth: true });
  root = readFileSync(join(tern.dataDir, "admin.token"), "utf8").trim();
});

after(async () => {
  await tern?.stop();
});

test("calls and watches carry the token; missing and insufficient tokens are typed errors", async () => {
  const admin = new TernClient({ url: tern.url, token: root });
  const put = await admin.put("flags", "a", 1);
  assert.deepEqual((await admin.get("flags", "a", { after: put.position })).value, 1);

  await assert.rejects(new TernClient({ url: tern.url }).get("flags", "a"), (e) => {
    assert.ok(e instanceof TernError);
    assert.equal(e.status, 401);
    assert.equal(e.code, "unauthenticated");
    return true;
  });

  const created = await fetch(`${tern.url}/v1/tokens`, {
    method: "POST",
    headers: { authorization: `Bearer ${root}`, "content-type": "application/json" },
    body: JSON.stringify({ ns: "default", prefix: "flags", verbs: ["read", "watch"] }),
  });
  assert.equal(created.status, 201);
  const { token } = await created.json();
  const reader = new TernClient({ url: tern.url, token });
  await assert.rejects(reader.put("flags", "b", 2), (e) => e instanceof TernError && e.status === 403 && e.code === "permission_denied");

  const watch = reader.watch({ pk: "flags" });
  try {
    await until(() => watch.synced, "the snapshot");
    await admin.put("flags", "c", 3);
    await until(() => watch.get("flags", "c")?.value === 3, "the put, pushed to the token's watch");
  } finally {
    await watch.close();
  }
});
