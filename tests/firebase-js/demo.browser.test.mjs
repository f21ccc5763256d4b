// The Firebase demo page served by `tern dev` (a shared list with
// presence, on the official SDK) in Debian's chromium, driven by
// playwright-core: two browser contexts see each other come and go and
// each other's items. The screenshot is kept as a test artifact.
import assert from "node:assert/strict";
import { readFileSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";

import { chromium } from "playwright-core";

import { Tern, restGet } from "./helpers.mjs";

const CHROMIUM = process.env.CHROMIUM ?? "/usr/bin/chromium";
const ARTIFACTS = process.env.TERN_ARTIFACTS ?? join(import.meta.dirname, "..", "..", "test-artifacts");
const VENDORED = join(import.meta.dirname, "..", "..", "web", "demo", "firebase-sdk");

let tern;
let browser;
before(async () => {
  tern = await Tern.start();
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
});
after(async () => {
  await browser?.close();
  await tern?.stop();
});

test("the page serves the SDK files of the pinned firebase version, unchanged", () => {
  const pinned = JSON.parse(readFileSync(join(import.meta.dirname, "package.json"), "utf8")).devDependencies.firebase;
  const installed = JSON.parse(readFileSync(join(import.meta.dirname, "node_modules", "firebase", "package.json"), "utf8")).version;
  assert.equal(installed, pinned);
  for (const file of ["firebase-app.js", "firebase-database.js"]) {
    const shipped = readFileSync(join(import.meta.dirname, "node_modules", "firebase", file), "utf8");
    assert.equal(readFileSync(join(VENDORED, file), "utf8"), shipped, `web/demo/firebase-sdk/${file} is the package's own (see its README to update)`);
  }
  const page = readFileSync(join(import.meta.dirname, "..", "..", "web", "demo", "firebase.html"), "utf8");
  assert.ok(page.includes(`firebasejs/${pinned}/firebase-app.js`), "the page maps the SDK's own import of its version");
});

test("two browsers share the list and see each other come and go", async () => {
  const ns = `demo${process.pid}`;
  const errors = [];
  const open = async (name) => {
    const context = await browser.newContext({ viewport: { width: 900, height: 620 } });
    const page = await context.newPage();
    page.on("console", (m) => m.type() === "error" && errors.push(`${name}: ${m.text()}`));
    page.on("pageerror", (e) => errors.push(`${name}: ${e.message}`));
    await page.goto(`${tern.url}/demo/firebase?ns=${ns}&name=${name}`);
    await page.waitForSelector('#status[data-state="live"]', { timeout: 20_000 });
    return { context, page };
  };
  const ann = await open("ann");
  const bob = await open("bob");
  try {
    // Each sees both.
    for (const { page } of [ann, bob]) {
      await page.waitForSelector('#people li[data-name="ann"]', { timeout: 20_000 });
      await page.waitForSelector('#people li[data-name="bob"]', { timeout: 20_000 });
    }
    // An item added in one shows in the other, in order.
    for (const [who, text] of [[ann, "milk"], [bob, "bread"], [ann, "eggs"]]) {
      await who.page.fill("#add input[name=text]", text);
      await who.page.click("#add button[type=submit]");
      await bob.page.waitForSelector(`#items li[data-text="${text}"]`, { timeout: 20_000 });
      await ann.page.waitForSelector(`#items li[data-text="${text}"]`, { timeout: 20_000 });
    }
    const order = async (page) => page.$$eval("#items li", (lis) => lis.map((li) => li.dataset.text));
    assert.deepEqual(await order(ann.page), ["milk", "bread", "eggs"]);
    assert.deepEqual(await order(bob.page), ["milk", "bread", "eggs"]);
    // A removal in one is gone in the other.
    await bob.page.click('#items li[data-text="bread"] button');
    await ann.page.locator('#items li[data-text="bread"]').waitFor({ state: "detached", timeout: 20_000 });
    const stored = await restGet(tern, ns, "items");
    assert.deepEqual(Object.values(stored).map((i) => i.text).sort(), ["eggs", "milk"]);

    mkdirSync(ARTIFACTS, { recursive: true });
    await ann.page.screenshot({ path: join(ARTIFACTS, "firebase-demo.png"), fullPage: true });

    // Bob closes his window: the server removes his presence (onDisconnect).
    await bob.context.close();
    await ann.page.locator('#people li[data-name="bob"]').waitFor({ state: "detached", timeout: 20_000 });
    assert.deepEqual(Object.values(await restGet(tern, ns, "presence")).map((p) => p.name), ["ann"]);
    assert.deepEqual(errors, []);
  } finally {
    await ann.context.close();
    await bob.context.close().catch(() => {});
  }
});
