// The capdir site in Debian's chromium. Run by tests/browser.rs, which builds the fixture
// site, starts `capdir serve` and passes the addresses in the environment. The static tests
// use a plain file server (no dispatcher); the last one runs a row on the live dispatcher.

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { env, launch, staticServer, watch, assertClean, shot, checkA11y, assertNoSidewaysScroll } from "./lib.mjs";

const counts = JSON.parse(fs.readFileSync(path.join(env.siteDir, "counts.json"), "utf8"));
const index = JSON.parse(fs.readFileSync(path.join(env.siteDir, "search.json"), "utf8"));
const enabledKeys = index.rows.map((r) => r[0]).sort();
const perCategory = {};
for (const r of index.rows) perCategory[r[1]] = (perCategory[r[1]] || 0) + 1;

let browser, files;
before(async () => {
  browser = await launch();
  files = await staticServer(env.siteDir);
});
after(async () => {
  await browser?.close();
  await files?.close();
});

async function open(url, options = {}) {
  const context = await browser.newContext({ viewport: { width: 1200, height: 900 }, ...options });
  const page = await context.newPage();
  const origin = new URL(url).origin;
  const seen = watch(page, origin);
  const res = await page.goto(url);
  return { context, page, seen, res };
}

test("index: what the catalogue is, the four counts, categories, recent rows, a search box", async () => {
  const { context, page, seen } = await open(files.url + "/index.html");
  assert.equal(await page.locator("h1").textContent(), "capdir catalogue");
  const shown = await page.locator(".counts > div").evaluateAll((ds) =>
    ds.map((d) => [d.querySelector("dt").textContent, Number(d.querySelector(".num").textContent)]),
  );
  assert.deepEqual(shown, [
    ["Rows", counts.rows.value],
    ["Enabled", counts.enabled.value],
    ["Registry", counts.registry.value],
    ["MCP tools", counts.mcp.value],
  ]);
  // 9 rows in the catalogue (OLD_ROW is gone), RETIRED_ROW disabled.
  assert.deepEqual([counts.rows.value, counts.enabled.value], [9, 8]);
  const cats = await page.locator(".cats li a").evaluateAll((as) =>
    as.map((a) => [a.querySelector(".name").textContent, Number(a.querySelector(".n").firstChild.textContent)]),
  );
  assert.deepEqual(Object.fromEntries(cats), perCategory);
  const added = await page.locator("section[aria-labelledby=added-h] .key").allTextContents();
  assert.equal(added[0], "GOOD_FLOW", "the newest row comes first");
  const changed = await page.locator("section[aria-labelledby=changed-h] li").allTextContents();
  assert.equal(changed.length, 1);
  assert.match(changed[0], /GOOD_ECHO.*2024-03-01.*Improve the echo docstring/s);
  const removed = await page.locator("section[aria-labelledby=removed-h] li").allTextContents();
  assert.match(removed.join("\n"), /OLD_ROW.*replaced by GOOD_ECHO/s);
  assert.equal(await page.getByRole("combobox", { name: "Search the catalogue" }).count(), 1);
  await checkA11y(page, "the index");
  await shot(page, "index.png");
  assertClean(seen);
  await context.close();
});

test("search as you type and reach a row page by keyboard, with no server behind the site", async () => {
  const { context, page, seen } = await open(files.url + "/index.html");
  await page.keyboard.press("/");
  assert.equal(await page.evaluate(() => document.activeElement.id), "q", "'/' focuses the search box");
  await page.keyboard.type("hash text");
  const options = page.locator("#results [role=option]");
  await options.first().waitFor();
  const keys = await page.locator("#results [role=option] .k").allTextContents();
  assert.equal(keys[0], "SHA256", `best hit for "hash text": ${keys}`);
  assert.equal(await page.locator("#q").getAttribute("aria-expanded"), "true");
  // Walk down to the second hit and back up; aria-activedescendant follows.
  await page.keyboard.press("ArrowDown");
  assert.equal(await page.locator("#q").getAttribute("aria-activedescendant"), "opt-1");
  await page.keyboard.press("ArrowUp");
  assert.equal(await page.locator("#opt-0").getAttribute("aria-selected"), "true");
  await checkA11y(page, "the index with search results open");
  await shot(page, "search.png", { fullPage: false });
  await Promise.all([page.waitForURL("**/k/SHA256.html"), page.keyboard.press("Enter")]);
  assert.equal(await page.locator("h1").textContent(), "SHA256");
  // Escape closes; Enter without a pick opens the result page, ranked in place.
  await page.keyboard.press("/");
  await page.keyboard.type("echo");
  await options.first().waitFor();
  await page.keyboard.press("Escape");
  assert.equal(await page.locator("#results").isHidden(), true);
  await Promise.all([page.waitForURL("**/search.html?q=echo"), page.keyboard.press("Enter")]);
  await page.locator("#hit-list li").first().waitFor();
  assert.equal(await page.locator("#hit-list li .key").first().textContent(), "GOOD_ECHO");
  assert.equal(await page.locator("#all").isHidden(), true);
  assert.equal(await page.locator("h1").textContent(), "Search results");
  await checkA11y(page, "the search result page");
  await shot(page, "search-page.png");
  assertClean(seen);
  await context.close();
});

test("a row page: the contract, a copyable call, linked history; no run form on a static host", async () => {
  const { context, page, seen } = await open(files.url + "/k/GOOD_ECHO.html", { permissions: ["clipboard-read", "clipboard-write"] });
  assert.equal(await page.locator("h1").textContent(), "GOOD_ECHO");
  assert.match(await page.locator(".what-big").textContent(), /Returns its arguments unchanged/);
  const call = await page.locator("#ex-call").textContent();
  assert.match(call, /curl -sS '.*\/api\/dispatch'/);
  assert.match(call, /-d '\{"key":"GOOD_ECHO","body":"hello"\}'/);
  assert.doesNotMatch(call, new RegExp(env.ownerKey), "the page never holds a key");
  await page.getByRole("button", { name: "Copy" }).click();
  assert.equal(await page.evaluate(() => navigator.clipboard.readText()), call);
  const history = page.locator(".history li");
  assert.equal(await history.count(), 2);
  assert.match(await history.nth(0).textContent(), /2024-03-01\s+modified .*Improve the echo docstring/s);
  const link = await history.nth(0).locator("a").getAttribute("href");
  assert.match(link, new RegExp("^" + env.repoWeb + "/commit/[0-9a-f]{40}$"), "commits link to the origin remote's web address");
  // On the static host the form to run the row stays hidden, and the page points at the
  // same page on the catalogue's dispatcher instead (no request to the host's /api).
  await page.waitForLoadState("networkidle");
  assert.equal(await page.locator("#run").isHidden(), true);
  const elsewhere = page.locator("#run-elsewhere a");
  await elsewhere.waitFor({ state: "visible" });
  assert.equal(await elsewhere.getAttribute("href"), env.served + "/k/GOOD_ECHO.html");
  assert.deepEqual(seen.requests.filter((u) => u.includes("/api/")), [], "the static host is asked for no API path");
  await checkA11y(page, "a row page");
  await shot(page, "row.png");
  assertClean(seen);
  await context.close();
});

test("follow a category from the index to its rows and on to a row", async () => {
  const { context, page, seen } = await open(files.url + "/index.html");
  await Promise.all([page.waitForURL("**/c/text.html"), page.locator(".cats a", { hasText: "text" }).click()]);
  assert.equal(await page.locator("h1").textContent(), "text");
  const keys = await page.locator("main .rows .key").allTextContents();
  const want = index.rows.filter((r) => r[1] === "text").map((r) => r[0]).sort();
  assert.deepEqual(keys, want);
  assert.ok(!keys.includes("RETIRED_ROW"), "a disabled row is not listed");
  await checkA11y(page, "a category page");
  await shot(page, "category.png");
  await Promise.all([page.waitForURL("**/k/UPPER.html"), page.locator("main .rows .key", { hasText: "UPPER" }).click()]);
  assert.equal(await page.locator(".crumbs li").allTextContents().then((c) => c.join(" › ")), "Catalogue › text › UPPER");
  assertClean(seen);
  await context.close();
});

test("a tombstone page says when the row went and what replaced it", async () => {
  const { context, page, seen } = await open(files.url + "/index.html");
  await Promise.all([
    page.waitForURL("**/k/OLD_ROW.html"),
    page.locator("section[aria-labelledby=removed-h] a", { hasText: "OLD_ROW" }).click(),
  ]);
  assert.match(await page.locator("h1").textContent(), /OLD_ROW/);
  const notice = await page.locator(".notice").textContent();
  assert.match(notice, /removed on 2024-04-01 by commit [0-9a-f]{10}: Remove OLD_ROW/);
  const kinds = await page.locator(".history .kind").allTextContents();
  assert.deepEqual(kinds, ["deleted", "added"]);
  await checkA11y(page, "a tombstone page");
  await shot(page, "tombstone.png");
  await Promise.all([page.waitForURL("**/k/GOOD_ECHO.html"), page.getByRole("link", { name: "GOOD_ECHO" }).click()]);
  assertClean(seen);
  await context.close();
});

test("without JavaScript: every page reads, and the search page is a plain list of every row", async () => {
  const { context, page, seen } = await open(files.url + "/search.html?q=echo", { javaScriptEnabled: false });
  const keys = (await page.locator("#all .rows .key").allTextContents()).sort();
  assert.deepEqual(keys, enabledKeys);
  assert.equal(await page.locator("#hits").isHidden(), true);
  await shot(page, "nojs-search.png");
  await page.goto(files.url + "/k/GOOD_HTTP_ITEM.html");
  assert.match(await page.locator("#ex-call").textContent(), /GOOD_HTTP_ITEM/);
  assert.equal(await page.locator("button.copy").isHidden(), true, "no dead Copy button without JavaScript");
  assert.equal(await page.locator("#run").isHidden(), true);
  await page.goto(files.url + "/index.html");
  await Promise.all([page.waitForURL("**/search.html?q=time"), page.locator("#q").fill("time").then(() => page.keyboard.press("Enter"))]);
  assertClean(seen);
  await context.close();
});

test("on a phone and in dark mode: no sideways scrolling, contrast holds", async () => {
  const phone = { viewport: { width: 390, height: 844 }, deviceScaleFactor: 2, isMobile: true, hasTouch: true };
  for (const scheme of ["light", "dark"]) {
    const { context, page, seen } = await open(files.url + "/index.html", { ...phone, colorScheme: scheme });
    for (const p of ["/index.html", "/k/GOOD_HTTP_ITEM.html", "/c/text.html", "/k/OLD_ROW.html", "/search.html"]) {
      await page.goto(files.url + p);
      await assertNoSidewaysScroll(page, `${p} (${scheme})`);
      await checkA11y(page, `${p} on a phone (${scheme})`);
    }
    await page.goto(files.url + "/k/GOOD_HTTP_ITEM.html");
    await shot(page, `row-phone-${scheme}.png`, { fullPage: false });
    assertClean(seen);
    await context.close();
  }
  const { context, page } = await open(files.url + "/index.html", { colorScheme: "dark" });
  const bg = await page.evaluate(() => getComputedStyle(document.body).backgroundColor);
  assert.equal(bg, "rgb(13, 17, 23)", "dark mode follows the reader's setting");
  await checkA11y(page, "the index (dark)");
  await shot(page, "index-dark.png");
  await context.close();
});

test("on capdir serve: run a row's example with a typed key and read its receipt", async () => {
  const { context, page, seen } = await open(env.served + "/k/GOOD_ECHO.html");
  const run = page.locator("#run");
  await run.waitFor({ state: "visible" });
  assert.equal(await page.locator("#run-body").inputValue(), "hello", "the example is filled in");
  await page.locator("#run-body").fill("hello from chromium");
  await page.getByLabel("Owner key or token").fill(env.ownerKey);
  await page.getByRole("button", { name: "Run GOOD_ECHO" }).click();
  const receiptLink = page.locator("#run-receipt");
  await receiptLink.waitFor();
  const id = await receiptLink.textContent();
  assert.match(id, /^inv_[0-9a-f]{44}$/);
  assert.equal(await page.locator("#run-result .status").first().textContent(), "PROVEN_MATERIAL_RESULT");
  assert.equal(await page.locator("#run-result pre").textContent(), "hello from chromium");
  assert.equal(await receiptLink.getAttribute("href"), env.served + "/receipt/" + id, "receipts link to the dispatcher");
  // The key was used for the one request and kept nowhere.
  const stored = await page.evaluate(() => ({ cookie: document.cookie, local: localStorage.length, session: sessionStorage.length }));
  assert.deepEqual(stored, { cookie: "", local: 0, session: 0 });
  assert.deepEqual(await context.cookies(), []);
  await checkA11y(page, "a served row page after a run");
  await shot(page, "run.png");

  // The receipt page, full: the form posts the typed key with the one request.
  await Promise.all([page.waitForURL("**/receipt/" + id), page.getByRole("button", { name: "Show the full receipt" }).click()]);
  assert.match(await page.locator("h1").textContent(), new RegExp(id));
  assert.equal(await page.locator(".status").textContent(), "PROVEN_MATERIAL_RESULT");
  assert.equal(await page.locator("pre.output").textContent(), "hello from chromium");
  const json = await (await fetch(`${env.served}/receipt/${id}`, { headers: { "x-owner-key": env.ownerKey } })).json();
  const facts = await page.locator(".hashes dd").allTextContents();
  assert.ok(facts.includes(json.hash) && facts.includes(json.input_sha256), "the page shows the ledger's hashes");
  assert.equal(json.actor, "owner");
  assert.ok(!(await page.content()).includes(env.ownerKey), "the key is not echoed into the page");
  await checkA11y(page, "the full receipt page");
  await shot(page, "receipt.png");

  // Without a key, the same address shows the keyless confirmation and a form for the key.
  await page.goto(`${env.served}/receipt/${id}`);
  assert.equal(await page.locator(".status").textContent(), "PROVEN_MATERIAL_RESULT");
  assert.ok((await page.locator(".hashes").textContent()).includes(json.hash));
  assert.equal(await page.locator("pre.output").count(), 0, "no output without a key");
  assert.ok(!(await page.content()).includes("hello from chromium"));
  await checkA11y(page, "the keyless receipt page");
  await shot(page, "receipt-keyless.png");
  // A wrong key: refused with the same code as the API, the key form offered again.
  await page.getByLabel("Owner key or token").fill("not-the-key");
  const [res] = await Promise.all([page.waitForResponse((r) => r.request().method() === "POST"), page.getByRole("button", { name: "Show the full receipt" }).click()]);
  assert.equal(res.status(), 403);
  assert.match(await page.locator("[role=alert]").textContent(), /forbidden/);
  assert.equal(await page.locator("pre.output").count(), 0);
  assertClean(seen, [/status of 403/]);
  await context.close();
});
