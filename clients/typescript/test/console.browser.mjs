// The web console (`/console`) in a real browser (Debian's chromium, driven
// by playwright-core) against real `tern dev` nodes: browse a namespace's
// key tree, search by prefix, live updates, edit with a conflict (the
// save sends if_version; the page shows theirs and overwrites only when
// asked), history, delete with confirmation, a new record, a Firebase
// tree kept live, the overview's settings, the cluster, API keys, and
// login on a node with authentication. Screenshots land in test-artifacts/.
import assert from "node:assert/strict";
import { mkdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";

import { chromium } from "playwright-core";

import { TernClient } from "../dist/index.js";
import { freeUdpPort, Tern, until } from "./tern.mjs";

const CHROMIUM = process.env.CHROMIUM ?? "/usr/bin/chromium";
const ARTIFACTS = process.env.TERN_ARTIFACTS ?? join(process.cwd(), "..", "..", "test-artifacts");
const WAIT = { timeout: 20_000 };

let browser;

before(async () => {
  mkdirSync(ARTIFACTS, { recursive: true });
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
});

after(async () => {
  await browser?.close();
});

/** A page that records console errors and uncaught exceptions. */
async function openPage() {
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  const errors = [];
  page.on("console", (m) => m.type() === "error" && !/Failed to load resource/.test(m.text()) && errors.push(m.text()));
  page.on("pageerror", (e) => errors.push(e.message));
  return { page, errors };
}

async function createNamespace(url, name, body, token) {
  const headers = { "content-type": "application/json", ...(token ? { authorization: `Bearer ${token}` } : {}) };
  const response = await fetch(`${url}/v1/ns/${name}`, { method: "PUT", headers, body: JSON.stringify(body) });
  assert.ok(response.ok, `create ${name}: ${response.status} ${await response.text()}`);
}

test("the console browses, edits with a conflict, keeps history and follows changes live", async () => {
  const tern = await Tern.start();
  const { page, errors } = await openPage();
  try {
    await createNamespace(tern.url, "app", { partitions: 4, history_max: 5 });
    const client = new TernClient({ url: tern.url, namespace: "app" });
    await client.put("svc/api", "config", { port: 8080, tls: true });
    await client.put("svc/web", "config", { port: 443 });
    await client.put("flags/checkout", "", { enabled: false });
    await client.put("é/日本", "ключ", "unicode");
    await client.batch([{ op: "put", pk: "dots", sk: ".", value: "the dot record" }]);
    await client.put("dots", "", "the empty-sk record");
    // A number JavaScript cannot hold exactly, written as its text.
    const big = await fetch(`${tern.url}/v1/ns/app/kv/big/n?wait=applied`, { method: "PUT", body: '{"id": 12345678901234567890, "f": 1.0}' });
    assert.ok(big.ok);

    // GET / lands in the console; the namespace is listed and opens.
    const served = await page.goto(`${tern.url}/`);
    assert.match(page.url(), /\/console$/);
    assert.match(served.headers()["content-security-policy"], /frame-ancestors 'none'/, "never framed by another page");
    await page.click('#namespaces a[data-ns="app"]', WAIT);
    await page.waitForSelector('a.record[data-pk="svc/api"][data-sk="config"]', WAIT);
    await page.waitForSelector('#live[data-state="live"]', WAIT);
    assert.ok(await page.$('a.record[data-pk="é/日本"][data-sk="ключ"]'), "unicode keys are listed");

    // A prefix narrows the tree.
    await page.fill("input[name=prefix]", "flags");
    await page.waitForSelector('a.record[data-pk="svc/api"]', { state: "detached", ...WAIT });
    await page.waitForSelector('a.record[data-pk="flags/checkout"]', WAIT);
    await page.fill("input[name=prefix]", "");
    await page.waitForSelector('a.record[data-pk="svc/api"]', WAIT);

    // A write made elsewhere appears without a reload.
    await client.put("svc/db", "config", { pool: 10 });
    await page.waitForSelector('a.record[data-pk="svc/db"][data-sk="config"]', WAIT);

    // Open a record: the editor holds it, pretty; a change elsewhere while
    // nothing is edited shows at once.
    await page.click('a.record[data-pk="svc/api"][data-sk="config"]');
    await page.waitForFunction(() => document.querySelector("#editor")?.value.includes('"port": 8080'), null, WAIT);
    await client.put("svc/api", "config", { port: 8081, tls: true });
    await page.waitForFunction(() => document.querySelector("#editor")?.value.includes('"port": 8081'), null, WAIT);
    await page.screenshot({ path: join(ARTIFACTS, "console-records.png") });

    // Invalid JSON cannot be saved: the check says why.
    await page.fill("#editor", '{"port": ');
    await page.waitForSelector("#json-check.error", WAIT);
    await page.click("#save");
    assert.equal((await client.get("svc/api", "config", { strong: true })).value.port, 8081, "nothing was written");

    // Edit with a conflict: someone else writes while this editor is dirty.
    await page.fill("#editor", JSON.stringify({ port: 9000, tls: true }));
    await client.put("svc/api", "config", { port: 7000, tls: false });
    await page.waitForFunction(() => document.querySelector("#record-message")?.textContent.includes("while you edit"), null, WAIT);
    await page.click("#save");
    await page.waitForSelector("#conflict:not([hidden])", WAIT);
    assert.match(await page.textContent("#conflict"), /someone else changed this record/);
    assert.match(await page.textContent("#conflict"), /7000/, "their value is shown");
    assert.equal((await client.get("svc/api", "config", { strong: true })).value.port, 7000, "the conflicting save wrote nothing");
    await page.screenshot({ path: join(ARTIFACTS, "console-conflict.png") });
    await page.click("#overwrite");
    await page.waitForFunction(() => document.querySelector("#record-message")?.textContent.startsWith("Saved"), null, WAIT);
    assert.deepEqual((await client.get("svc/api", "config", { strong: true })).value, { port: 9000, tls: true }, "overwritten when asked");

    // A record whose sk is "." opens and saves as itself (a URL path cannot
    // carry it: review found the console edited ("dots", "") instead).
    await page.click('a.record[data-pk="dots"][data-sk="."]');
    await page.waitForFunction(() => document.querySelector("#editor")?.value === '"the dot record"', null, WAIT);
    await page.fill("#editor", '"the dot record, edited"');
    await page.click("#save");
    await page.waitForFunction(() => document.querySelector("#record-message")?.textContent.startsWith("Saved"), null, WAIT);
    assert.equal((await client.get("dots", ".", { strong: true })).value, "the dot record, edited");
    assert.equal((await client.get("dots", "", { strong: true })).value, "the empty-sk record", "the empty sk is untouched");
    // Digits past 2^53 survive an edit of another field (review found them rounded).
    await page.click('a.record[data-pk="big"][data-sk="n"]');
    await page.waitForFunction(() => document.querySelector("#editor")?.value.includes("12345678901234567890"), null, WAIT);
    await page.waitForFunction(() => document.querySelector("#editor")?.value.includes('"f": 1.0'), null, WAIT);
    await page.fill("#editor", '{"id": 12345678901234567890, "f": 1.0, "note": "kept"}');
    await page.click("#save");
    await page.waitForFunction(() => document.querySelector("#record-message")?.textContent.startsWith("Saved"), null, WAIT);
    const stored = await (await fetch(`${tern.url}/v1/ns/app/kv/big/n`)).text();
    assert.match(stored, /"id": ?12345678901234567890, ?"f": ?1\.0/, stored);
    await page.click('a.record[data-pk="svc/api"][data-sk="config"]');
    await page.waitForFunction(() => document.querySelector("#editor")?.value.includes('"port": 9000'), null, WAIT);

    // History: the versions, newest first.
    await page.click("#show-history");
    await page.waitForSelector("#history tbody tr", WAIT);
    const versions = await page.$$eval("#history tbody tr", (rows) => rows.map((r) => r.children[4].textContent));
    assert.deepEqual(versions.slice(0, 3), ['{"port":9000,"tls":true}', '{"port":7000,"tls":false}', '{"port":8081,"tls":true}']);

    // Delete, with confirmation, sends the version it shows.
    page.once("dialog", (d) => d.accept());
    await page.click("#delete");
    await page.waitForSelector('a.record[data-pk="svc/api"]', { state: "detached", ...WAIT });
    assert.equal(await client.get("svc/api", "config", { strong: true }), undefined);

    // A new record; one that exists is refused, not overwritten.
    await page.click("#new-record");
    await page.fill("#new-form input[name=pk]", "svc/web");
    await page.fill("#new-form input[name=sk]", "config");
    await page.fill("#editor", '{"port": 1}');
    await page.click('#new-form button[type=submit]');
    await page.waitForFunction(() => document.querySelector("#new-form .message")?.textContent.includes("exists already"), null, WAIT);
    assert.equal((await client.get("svc/web", "config", { strong: true })).value.port, 443);
    await page.fill("#new-form input[name=pk]", "svc/cache");
    await page.click('#new-form button[type=submit]');
    await page.waitForSelector('a.record[data-pk="svc/cache"]', WAIT);

    // The Firebase tree, live.
    const fb = (path, value) => fetch(`${tern.url}/${path}.json?ns=app`, { method: "PUT", body: JSON.stringify(value) });
    assert.ok((await fb("users/alice", { name: "Alice", age: 31 })).ok);
    await page.click('nav.tabs a[data-tab="firebase"]');
    await page.waitForSelector('#fb-live[data-state="live"]', WAIT);
    await page.click('#fb-tree details[data-path="/users"] > summary');
    await page.click('#fb-tree details[data-path="/users/alice"] > summary');
    await page.waitForSelector('#fb-tree .leaf[data-path="/users/alice/name"]', WAIT);
    assert.ok((await fb("users/bob", { name: "Bob" })).ok);
    await page.waitForSelector('#fb-tree details[data-path="/users/bob"]', WAIT);
    // A key named __proto__ is a key, not the page's Object.prototype.
    assert.ok((await fb("x/__proto__", { polluted: true })).ok);
    await page.waitForSelector('#fb-tree details[data-path="/x"]', WAIT);
    assert.equal(await page.evaluate(() => ({}).polluted), undefined, "Object.prototype untouched");
    await page.screenshot({ path: join(ARTIFACTS, "console-firebase.png") });

    // Creating a namespace that exists changes nothing (its settings are the overview's).
    await page.fill('#create-ns input[name=name]', "app");
    await page.click('#create-ns button[type=submit]');
    await page.waitForFunction(() => document.querySelector("#error")?.textContent.includes("exists"), null, WAIT);
    assert.equal((await (await fetch(`${tern.url}/v1/ns/app`)).json()).history_max, 5);
    // A new one is made with the form's settings, and opened.
    await page.fill('#create-ns input[name=name]', "fresh");
    await page.fill('#create-ns input[name=partitions]', "3");
    await page.selectOption('#create-ns select[name=write_mode]', "journaled");
    await page.fill('#create-ns input[name=history_max]', "2");
    await page.click('#create-ns button[type=submit]');
    await page.waitForFunction(() => location.hash === "#/ns/fresh/records", null, WAIT);
    await page.waitForSelector('#namespaces a[data-ns="fresh"]', WAIT);
    const fresh = await (await fetch(`${tern.url}/v1/ns/fresh`)).json();
    assert.deepEqual([fresh.partitions, fresh.write_mode, fresh.history_max], [3, "journaled", 2]);
    await page.goto(`${tern.url}/console#/ns/app/records`);
    await page.waitForSelector('#namespaces a.selected[data-ns="app"]', WAIT);
    await page.waitForSelector('#live[data-state="live"]', WAIT);

    // Procedures: what runs, its counters and the outbox backlog.
    const wasm = readFileSync(join(process.cwd(), "..", "..", "examples", "procedures", "build", "counter.wasm")).toString("base64");
    const deployed = await fetch(`${tern.url}/v1/ns/app/procedures/counter`, { method: "PUT", headers: { "content-type": "application/json" }, body: JSON.stringify({ runtime: "wasm", module: wasm, outputs: { seen: "app.seen-here" } }) });
    assert.ok(deployed.ok, `deploy: ${deployed.status} ${await deployed.text()}`);
    await client.put("in/one", "", 1);
    await page.click('nav.tabs a[data-tab="procedures"]');
    await page.waitForSelector('#procedures tr[data-name="counter"]', WAIT);
    // Before the fix, a procedure's outputs (a name → topic map) broke the view.
    assert.match(await page.textContent('#procedures tr[data-name="counter"]'), /seen → app\.seen-here/);
    assert.match(await page.textContent("#outbox-backlog"), /^\d+$/);
    await page.screenshot({ path: join(ARTIFACTS, "console-procedures.png") });

    // The overview: every partition, and the settings saved through the API.
    await page.click('nav.tabs a[data-tab="overview"]');
    await page.waitForSelector("#partitions tbody tr", WAIT);
    assert.equal((await page.$$("#partitions tbody tr")).length, 4);
    await page.fill("#history-max", "9");
    await page.click('#settings button[type=submit]');
    await page.waitForFunction(() => document.querySelector("#settings + .message")?.textContent === "Saved.", null, WAIT);
    const described = await (await fetch(`${tern.url}/v1/ns/app`)).json();
    assert.equal(described.history_max, 9);
    await page.screenshot({ path: join(ARTIFACTS, "console-overview.png") });

    // The cluster, and API keys on a node without authentication.
    await page.click('nav.pages a[data-page="cluster"]');
    await page.waitForSelector("#nodes tbody tr", WAIT);
    await page.click('nav.pages a[data-page="tokens"]');
    await page.waitForSelector("#tokens-off", WAIT);

    // Paging: 200 records a page, "Load more", and past what the page holds
    // (held_max) a new window of the namespace, then back to the start.
    // One pk (a batch is atomic within a partition): 450 sort keys.
    const ops = Array.from({ length: 450 }, (_, i) => ({ op: "put", pk: "many/list", sk: String(i).padStart(4, "0"), value: i }));
    const batched = await fetch(`${tern.url}/v1/ns/app/batch`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ ops }) });
    assert.ok(batched.ok, `batch: ${batched.status} ${await batched.text()}`);
    // Listed in full before the page reads it (a write is applied just after its acknowledgement).
    for (let tries = 0; ; tries++) {
      const listed = await (await fetch(`${tern.url}/v1/ns/app/kv?prefix=many/&limit=1000`)).json();
      if (listed.items.length === 450) break;
      assert.ok(tries < 200, `listed ${listed.items.length} of 450`);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    await page.goto(`${tern.url}/console?held_max=300#/ns/app/records`);
    await page.waitForSelector('#live[data-state="live"]', WAIT);
    // The whole namespace is listed first (flags/checkout among it); the
    // search for many/ takes over once it is gone from the tree.
    await page.waitForSelector('a.record[data-pk="flags/checkout"]', WAIT);
    await page.fill("input[name=prefix]", "many/");
    await page.waitForSelector('a.record[data-pk="flags/checkout"]', { state: "detached", ...WAIT });
    const counted = (text) => page.waitForFunction((t) => document.querySelector("#record-count")?.textContent === t, text, WAIT);
    await counted("200 records of more");
    await page.click("#load-more");
    await counted("records 201 to 400 of more");
    assert.equal(await page.$('a.record[data-sk="0000"]'), null, "the first window is let go");
    await page.waitForSelector('a.record[data-sk="0399"]', WAIT);
    await page.click("#load-more");
    await counted("records 201 to 450");
    assert.ok(await page.isHidden("#load-more"));
    await page.click("#back-to-start");
    await counted("200 records of more");
    await page.waitForSelector('a.record[data-sk="0000"]', WAIT);

    // A namespace that does not exist: said, and nothing of the last one stays.
    await page.goto(`${tern.url}/console#/ns/nope/records`);
    await page.waitForSelector("#unknown-ns", WAIT);
    assert.equal(await page.$("a.record"), null);
    assert.deepEqual(errors, []);
  } finally {
    await page.close();
    await tern.stop();
  }
});

test("with authentication the console asks for a token, keeps it in the session only, and makes keys", async () => {
  const tern = await Tern.start({ auth: true });
  const root = readFileSync(join(tern.dataDir, "admin.token"), "utf8").trim();
  const { page } = await openPage();
  try {
    await createNamespace(tern.url, "app", { partitions: 2 }, root);
    await new TernClient({ url: tern.url, namespace: "app", token: root }).put("cfg", "a", 1);
    await page.goto(`${tern.url}/console`);
    await page.waitForSelector("#login:not([hidden])", WAIT);
    // A wrong token is refused and asked again.
    await page.fill("#login-token", "tern_nope_nope");
    await page.click("#login-form button");
    await page.waitForFunction(() => document.querySelector("#login-why")?.textContent.length > 0, null, WAIT);
    await page.fill("#login-token", root);
    await page.click("#login-form button");
    await page.click('#namespaces a[data-ns="app"]', WAIT);
    await page.waitForSelector('a.record[data-pk="cfg"]', WAIT);
    await page.waitForSelector('#live[data-state="live"]', WAIT);
    // Kept in this tab's session only.
    const stored = await page.evaluate(() => ({ session: Object.values(sessionStorage), local: Object.values(localStorage), cookie: document.cookie }));
    assert.deepEqual(stored, { session: [root], local: [], cookie: "" });
    // Make a key: its token is shown once; it is listed.
    await page.click('nav.pages a[data-page="tokens"]');
    await page.waitForSelector("#token-form", WAIT);
    await page.selectOption("#token-form select[name=ns]", "app");
    await page.click('#token-form button[type=submit]');
    await page.waitForSelector("#new-token", WAIT);
    const made = (await page.textContent("#new-token")).trim();
    assert.match(made, /^tern_/);
    const listed = await (await fetch(`${tern.url}/v1/tokens`, { headers: { authorization: `Bearer ${root}` } })).json();
    assert.equal(listed.tokens.length, 1);
    await page.waitForSelector(`#tokens tr[data-id="${listed.tokens[0].id}"]`, WAIT);
    // Revoking asks first; the key is gone from the list and refused.
    page.once("dialog", (dialog) => dialog.accept());
    await page.click(`#tokens tr[data-id="${listed.tokens[0].id}"] button.danger`);
    await page.waitForSelector(`#tokens tr[data-id="${listed.tokens[0].id}"]`, { state: "detached", ...WAIT });
    const after = await (await fetch(`${tern.url}/v1/tokens`, { headers: { authorization: `Bearer ${root}` } })).json();
    assert.equal(after.tokens.length, 0);
    const refused = await fetch(`${tern.url}/v1/ns/app/kv/cfg/a`, { headers: { authorization: `Bearer ${made}` } });
    assert.equal(refused.status, 401);
    // Signing out forgets it.
    await page.click("#sign-out");
    await page.waitForSelector("#login:not([hidden])", WAIT);
    assert.deepEqual(await page.evaluate(() => Object.values(sessionStorage)), []);
  } finally {
    await page.close();
    await tern.stop();
  }
});

test("the cluster page shows every node of a cluster, its group and round trip, and who serves what", async () => {
  const bootstrap = process.env.TERN_TEST_KAFKA;
  assert.ok(bootstrap, "TERN_TEST_KAFKA names the test broker (scripts/test.sh starts it)");
  const prefix = `console${Date.now()}.`;
  const ids = [["a", "a"], ["b1", "b"], ["b2", "b"]];
  const gossip = Object.fromEntries(await Promise.all(ids.map(async ([id]) => [id, await freeUdpPort()])));
  const nodes = {};
  const { page, errors } = await openPage();
  try {
    for (const [id, group] of ids) {
      nodes[id] = await Tern.start({
        command: "serve",
        args: ["--node-id", id, "--group", group, "--region", "r1", "--log", `kafka://${bootstrap}`, "--kafka-topic-prefix", prefix,
          "--namespace", "default:4", "--gossip", `127.0.0.1:${gossip[id]}`, "--seeds", `127.0.0.1:${gossip.a}`],
      });
    }
    // Every node live with a round trip, group b's partitions split between its two members.
    const served = (view, id) => view.nodes.find((n) => n.id === id && n.state === "live")?.partitions.filter((p) => p.ns === "default").length ?? 0;
    await until(async () => {
      const view = await (await fetch(`${nodes.a.url}/v1/cluster`)).json();
      const peers = view.nodes.filter((n) => !n.self);
      return view.nodes.filter((n) => n.state === "live").length === 3 && peers.every((n) => n.rtt_ms !== null)
        && served(view, "a") === 4 && served(view, "b1") > 0 && served(view, "b2") > 0 && served(view, "b1") + served(view, "b2") === 4;
    }, "three live nodes, group b split", 90_000);
    await page.goto(`${nodes.a.url}/console#/cluster`);
    const row = async (id) => (await page.$$eval(`#nodes tr[data-node="${id}"] td`, (cells) => cells.map((c) => c.textContent)));
    await page.waitForSelector('#nodes tr[data-node="b2"]', WAIT);
    const [a, b1, b2] = [await row("a"), await row("b1"), await row("b2")];
    assert.deepEqual([a[0], a[1], a[2], a[4], a[7]], ["a (this node)", "r1", "a", "live", "4"]);
    for (const [id, cells] of [["b1", b1], ["b2", b2]]) {
      assert.deepEqual([cells[0], cells[2], cells[4], cells[6]], [id, "b", "live", "yes"]);
      // Rounded as people read it (it showed 0.7197250000000001 ms).
      assert.match(cells[5], /^(\d\.\d\d|\d\d\.\d|\d{3,}) ms$/, `${id}'s round trip`);
    }
    assert.equal(Number(b1[7]) + Number(b2[7]), 4, "group b's members serve its four partitions between them");
    // From a, every partition of default is served by a itself.
    const routes = await page.$$eval("#routes tbody tr", (rows) => rows.map((r) => [...r.children].map((c) => c.textContent)));
    assert.deepEqual(routes.filter(([holder]) => holder.startsWith("default ")), [["default → a", "0–3"]], JSON.stringify(routes));
    await page.screenshot({ path: join(ARTIFACTS, "console-cluster.png") });
    assert.deepEqual(errors, []);
  } finally {
    await page.close();
    for (const node of Object.values(nodes)) await node.stop();
  }
});
