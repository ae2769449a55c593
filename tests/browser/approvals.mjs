// The approvals page (/approvals on `capdir serve`) in Debian's chromium. Run by
// tests/watcher_page.rs, which starts the dispatcher, queues one call for approval and passes
// it in CAPDIR_FIRST_CALL ({"approval", "key", "arguments"}). This script signs in with the
// owner key, waits for that call to appear without reloading, prints READY on stdout, reads
// the second call the Rust side then queues (the same JSON, one line on stdin), waits for it
// to appear too, still without a reload, approves the first and reads the status line. It
// prints DONE and exits 0, or names the step that failed and exits non-zero; 30 s at most.

import assert from "node:assert/strict";
import readline from "node:readline";
import { env, launch, watch, assertClean, shot } from "./lib.mjs";

const LIMIT_MS = 30_000;
const first = JSON.parse(process.env.CAPDIR_FIRST_CALL || "null");
let step = "start";
let browser;

const timer = setTimeout(() => {
  console.error(`approvals page: timed out after ${LIMIT_MS / 1000} s at: ${step}`);
  process.exit(2);
}, LIMIT_MS);

function at(what) {
  step = what;
  console.error(`approvals page: ${what}`);
}

// A call's section, by its id (apr_ and hex: a CSS-safe attribute value).
const section = (page, id) => page.locator(`#queue section.call[id="${id}"]`);

// The call as the page shows it: the row key in data-key and the heading, the arguments as
// the runner will receive them in the <pre>, and its two buttons.
async function checkShown(page, call) {
  const box = section(page, call.approval);
  await box.waitFor({ state: "visible" });
  assert.equal(await box.getAttribute("data-key"), call.key, "the section's data-key");
  assert.equal((await box.locator("h2").textContent()).trim(), call.key, "the section's heading");
  const pre = await box.locator("pre").textContent();
  assert.deepEqual(JSON.parse(pre), call.arguments, `the arguments shown: ${pre}`);
  assert.equal(await box.locator("input.note").count(), 1, "a note field");
  assert.equal(await box.locator("button.approve").count(), 1, "an approve button");
  assert.equal(await box.locator("button.deny").count(), 1, "a deny button");
  return box;
}

// Poll `read` (in node: the page's Content-Security-Policy makes waitForFunction fragile)
// until `ok` holds of what it returns, or fail with the last value read.
async function until(what, read, ok, ms = 10_000) {
  const end = Date.now() + ms;
  let last;
  for (;;) {
    last = await read();
    if (ok(last)) return last;
    if (Date.now() > end) throw new Error(`${what}: not within ${ms / 1000} s; last seen: ${JSON.stringify(last)}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

const statusMatches = (page, re) =>
  until(`#status matches ${re}`, () => page.locator("#status").textContent(), (t) => re.test(t));

async function main() {
  assert.ok(first?.approval && first?.key && Array.isArray(first?.arguments), "CAPDIR_FIRST_CALL is not set: run this through tests/watcher_page.rs");
  const stdin = readline.createInterface({ input: process.stdin })[Symbol.asyncIterator]();

  at("launch chromium");
  browser = await launch();
  const context = await browser.newContext({ viewport: { width: 1000, height: 800 } });
  context.setDefaultTimeout(10_000);
  const page = await context.newPage();
  const origin = new URL(env.served).origin;
  const seen = watch(page, origin);
  let navigations = 0;
  page.on("framenavigated", (f) => {
    if (f === page.mainFrame()) navigations++;
  });

  at("open /approvals");
  const res = await page.goto(env.served + "/approvals");
  assert.equal(res.status(), 200, "GET /approvals");
  // Gone if the page reloads or navigates: proof that what follows came without a reload.
  await page.evaluate(() => (window.__sameDocument = true));

  at("sign in with the owner key");
  await page.locator("#key").fill(env.ownerKey);
  await page.locator("#login button[type=submit]").click();

  at(`wait for the first call ${first.approval}`);
  await checkShown(page, first);
  await statusMatches(page, /^1 call is waiting\.$/);
  // A note typed before the queue changes must survive the change.
  await section(page, first.approval).locator("input.note").fill("checked in the browser test");
  console.log("READY");

  at("read the second call from stdin");
  const line = await stdin.next();
  assert.ok(!line.done, "stdin closed before the second call came");
  const second = JSON.parse(line.value);

  at(`wait for the second call ${second.approval}, queued after the page loaded`);
  await checkShown(page, second);
  await statusMatches(page, /^2 calls are waiting\.$/);
  assert.equal(await page.locator("#queue section.call").count(), 2, "two calls in the queue");
  await shot(page, "approvals.png");

  at(`approve ${first.approval}`);
  const box = section(page, first.approval);
  assert.equal(
    await box.locator("input.note").inputValue(),
    "checked in the browser test",
    "the note typed before the second call arrived is still there",
  );
  const [decided] = await Promise.all([
    page.waitForResponse((r) => r.request().method() === "POST" && r.url().endsWith("/api/approvals/" + first.approval)),
    box.locator("button.approve").click(),
  ]);
  const sent = decided.request();
  assert.equal(sent.headers()["authorization"], "Bearer " + env.ownerKey, "the decision carries the typed key");
  assert.deepEqual(sent.postDataJSON(), { decision: "approve", note: "checked in the browser test" }, "the decision's body");
  const answer = await decided.text();
  assert.equal(decided.status(), 200, `the decision's answer: ${answer}`);
  const view = JSON.parse(answer);
  assert.equal(view.state, "approved", `the decision's answer: ${JSON.stringify(view)}`);
  assert.equal(view.result?.status, "PROVEN_MATERIAL_RESULT", `the run's answer: ${JSON.stringify(view.result)}`);
  assert.equal(view.decision?.note, "checked in the browser test", "the note is kept");

  at("read the decision in the page's log of decisions");
  const want = `${first.approval}: approved · ran: PROVEN_MATERIAL_RESULT`;
  await until(
    `#decided says "${want}"`,
    () => page.locator("#decided li").allTextContents(),
    (texts) => texts.some((t) => t.includes(want)),
  );

  at("the approved call leaves the queue; the other stays");
  await box.waitFor({ state: "detached" });
  await checkShown(page, second);
  assert.equal(await page.locator("#queue section.call").count(), 1, "one call left in the queue");
  assert.equal(await page.evaluate(() => window.__sameDocument), true, "the page reloaded");
  assert.equal(navigations, 1, "the page navigated after it loaded");
  await shot(page, "approvals-decided.png");

  at("the page is whole: its styles apply, nothing from elsewhere, no script errors");
  const border = await section(page, second.approval).evaluate((e) => getComputedStyle(e).borderTopStyle);
  assert.equal(
    border,
    "solid",
    "the page's style sheet (/approvals.css) did not apply",
  );
  assertClean(seen);

  await context.close();
  await browser.close();
  console.log("DONE");
}

main().then(
  () => {
    clearTimeout(timer);
    process.exit(0);
  },
  async (e) => {
    console.error(`approvals page: failed at: ${step}\n${e?.stack || e}`);
    // Best effort: the browser must not keep the process alive past a failure.
    await Promise.race([browser?.close(), new Promise((r) => setTimeout(r, 3000))]).catch(() => {});
    process.exit(1);
  },
);
