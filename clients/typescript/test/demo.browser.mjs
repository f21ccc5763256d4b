// The live demo page in a real browser (Debian's chromium, driven by
// playwright-core): it loads, shows the namespace's records, and a write
// made through the API appears in it. The screenshot is kept as an artifact.
import assert from "node:assert/strict";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";

import { chromium } from "playwright-core";

import { TernClient } from "../dist/index.js";
import { Tern } from "./tern.mjs";

const CHROMIUM = process.env.CHROMIUM ?? "/usr/bin/chromium";
const ARTIFACTS = process.env.TERN_ARTIFACTS ?? join(process.cwd(), "..", "..", "test-artifacts");

test("the demo page shows a write made through the API, live", async () => {
  const tern = await Tern.start();
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: [
      "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync",
    ],
  });
  try {
    const client = new TernClient({ url: tern.url });
    await client.put("dns", "www.example.com", { a: "192.0.2.10", ttl: 60 });
    const page = await browser.newPage({ viewport: { width: 1100, height: 640 } });
    const consoleErrors = [];
    // The browser's own note of an error answer (the unknown namespace's 404) is not the page's error.
    page.on("console", (m) => m.type() === "error" && !/Failed to load resource/.test(m.text()) && consoleErrors.push(m.text()));
    page.on("pageerror", (e) => consoleErrors.push(e.message));
    await page.goto(`${tern.url}/demo`);
    await page.waitForSelector('#status[data-state="live"]', { timeout: 20_000 });
    await page.waitForSelector('tr[data-pk="dns"][data-sk="www.example.com"]', { timeout: 20_000 });

    // A write through the API appears without a reload.
    await client.put("flags", "checkout", { enabled: true, rollout: 0.25 });
    const row = page.locator('tr[data-pk="flags"][data-sk="checkout"]');
    await row.waitFor({ timeout: 20_000 });
    assert.match(await row.locator("td.value").innerText(), /"rollout":0.25/);
    // And a change to it, and a delete.
    await client.put("flags", "checkout", { enabled: false });
    await page.waitForFunction(() => document.querySelector('tr[data-pk="flags"] td.value')?.textContent === '{"enabled":false}', null, { timeout: 20_000 });
    await client.delete("dns", "www.example.com");
    await page.locator('tr[data-pk="dns"]').waitFor({ state: "detached", timeout: 20_000 });

    // A write made on the page reaches the API.
    await page.fill("input[name=pk]", "ui");
    await page.fill("input[name=sk]", "banner");
    await page.fill("input[name=value]", '"hello from the browser"');
    await page.click("button[type=submit]");
    await page.locator('tr[data-pk="ui"][data-sk="banner"]').waitFor({ timeout: 20_000 });
    const stored = await client.get("ui", "banner", { strong: true });
    assert.equal(stored.value, "hello from the browser");

    // Switching to a namespace that does not exist leaves none of the old
    // rows (their delete buttons acted on the new namespace before).
    await page.fill("#ns", "nope");
    await page.press("#ns", "Enter");
    await page.waitForSelector('#status[data-state="failed"]', { timeout: 20_000 });
    assert.equal(await page.$("tr[data-pk]"), null, "no row of the last namespace stays");
    // And back: the rows come back, and delete acts on their namespace.
    await page.fill("#ns", "default");
    await page.press("#ns", "Enter");
    await page.locator('tr[data-pk="ui"][data-sk="banner"]').waitFor({ timeout: 20_000 });
    mkdirSync(ARTIFACTS, { recursive: true });
    await page.screenshot({ path: join(ARTIFACTS, "demo.png"), fullPage: true });
    assert.deepEqual(consoleErrors, []);
  } finally {
    await browser.close();
    await tern.stop();
  }
});
