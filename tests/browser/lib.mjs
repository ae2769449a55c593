// Helpers for the browser tests: launching Debian's chromium through playwright-core, a plain
// static file server (the site as GitHub Pages would serve it), a guard that no page loads
// anything from another origin, and checks of accessibility basics.

import { chromium } from "playwright-core";
import http from "node:http";
import fs from "node:fs";
import path from "node:path";
import assert from "node:assert/strict";

export const env = {
  siteDir: need("CAPDIR_SITE_DIR"),
  served: need("CAPDIR_SERVED_URL"),
  ownerKey: need("CAPDIR_OWNER_KEY"),
  chromium: process.env.CAPDIR_CHROMIUM || "/usr/bin/chromium",
  shots: need("CAPDIR_SCREENSHOTS"),
  repoWeb: process.env.CAPDIR_REPO_WEB || "",
};

function need(name) {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set: run these tests through \`cargo test --test browser\``);
  return v;
}

// Chromium's own background traffic (updates, sync, field trials) fails noisily without a
// network; these flags keep it quiet and keep the browser on loopback.
export async function launch() {
  return chromium.launch({
    executablePath: env.chromium,
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
}

const TYPES = {
  ".html": "text/html; charset=utf-8",
  ".css": "text/css",
  ".js": "text/javascript",
  ".json": "application/json",
  ".md": "text/markdown; charset=utf-8",
  ".txt": "text/plain; charset=utf-8",
  ".xml": "application/xml",
};

// Serve `dir` as files and nothing else: no /api, no receipts. 404 for anything missing.
export function staticServer(dir) {
  const root = path.resolve(dir);
  const server = http.createServer((req, res) => {
    const url = new URL(req.url, "http://localhost");
    let rel = decodeURIComponent(url.pathname);
    if (rel.endsWith("/")) rel += "index.html";
    const file = path.resolve(root, "." + rel);
    if (!file.startsWith(root + path.sep) || file.endsWith(".sqlite")) {
      res.writeHead(404).end();
      return;
    }
    fs.readFile(file, (err, data) => {
      if (err) {
        res.writeHead(404, { "content-type": "text/plain" }).end("not found");
        return;
      }
      res.writeHead(200, { "content-type": TYPES[path.extname(file)] || "application/octet-stream" });
      res.end(data);
    });
  });
  return new Promise((resolve) => {
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      resolve({ url: `http://127.0.0.1:${port}`, close: () => new Promise((r) => server.close(r)) });
    });
  });
}

// Record every request a page makes and every console error, so a test can assert that
// nothing came from another origin and that the page ran without script errors.
export function watch(page, origin) {
  const seen = { foreign: [], errors: [], requests: [] };
  page.on("request", (r) => {
    const u = r.url();
    seen.requests.push(u);
    if (!u.startsWith(origin + "/") && !u.startsWith("data:")) seen.foreign.push(u);
  });
  page.on("pageerror", (e) => seen.errors.push(String(e)));
  page.on("console", (m) => {
    if (m.type() === "error" && !/status of 404/.test(m.text())) seen.errors.push(m.text());
  });
  return seen;
}

// `expected`: console errors the test provoked on purpose (a refused page's status).
export function assertClean(seen, expected = []) {
  assert.deepEqual(seen.foreign, [], "requests to other origins (the site must ship no external assets)");
  const errors = seen.errors.filter((e) => !expected.some((re) => re.test(e)));
  assert.deepEqual(errors, [], "script errors on the page");
}

export async function shot(page, name, opts = {}) {
  fs.mkdirSync(env.shots, { recursive: true });
  await page.screenshot({ path: path.join(env.shots, name), fullPage: true, ...opts });
}

// Accessibility basics, checked in the page: landmarks, labels, alt text, headings, names
// and the contrast of every piece of text against what is behind it (WCAG AA).
export async function checkA11y(page, where) {
  const problems = await page.evaluate(() => {
    const out = [];
    const visible = (el) => {
      const s = getComputedStyle(el);
      const r = el.getBoundingClientRect();
      return s.visibility !== "hidden" && s.display !== "none" && r.width > 0 && r.height > 0 && !el.closest("[hidden]");
    };
    const count = (sel) => document.querySelectorAll(sel).length;
    if (!document.documentElement.lang) out.push("<html> has no lang");
    if (!document.title.trim()) out.push("the page has no title");
    if (count("main") !== 1) out.push(`expected one <main>, found ${count("main")}`);
    if (count("body > header") !== 1) out.push("no banner landmark (<header> at the top level)");
    if (count("body > footer") !== 1) out.push("no contentinfo landmark (<footer> at the top level)");
    if (count("nav[aria-label]") < 1) out.push("no labelled <nav>");
    if (count("[role=search]") !== 1) out.push("no search landmark");
    if (count("h1") !== 1) out.push(`expected one <h1>, found ${count("h1")}`);
    let last = 0;
    for (const h of document.querySelectorAll("main h1, main h2, main h3, main h4")) {
      const level = Number(h.tagName[1]);
      if (last && level > last + 1) out.push(`heading level skips from h${last} to h${level}: ${h.textContent.trim()}`);
      last = level;
    }
    for (const el of document.querySelectorAll("input, select, textarea")) {
      if (el.type === "hidden") continue;
      const named = el.labels?.length || el.getAttribute("aria-label") || el.getAttribute("aria-labelledby");
      if (!named) out.push(`input without a label: ${el.outerHTML.slice(0, 80)}`);
    }
    for (const img of document.querySelectorAll("img")) {
      if (!img.hasAttribute("alt")) out.push(`image without alt: ${img.src}`);
    }
    for (const svg of document.querySelectorAll("svg")) {
      if (svg.getAttribute("aria-hidden") !== "true" && !svg.querySelector("title") && !svg.getAttribute("aria-label"))
        out.push("svg without a name or aria-hidden");
    }
    for (const b of document.querySelectorAll("button, a[href]")) {
      if (visible(b) && !b.textContent.trim() && !b.getAttribute("aria-label")) out.push(`unnamed control: ${b.outerHTML.slice(0, 80)}`);
    }
    const ids = new Set();
    for (const el of document.querySelectorAll("[id]")) {
      if (ids.has(el.id)) out.push(`duplicate id ${el.id}`);
      ids.add(el.id);
    }

    // Contrast: each element with its own text, against the first opaque background behind it.
    const rgba = (c) => {
      const m = c.match(/rgba?\(([^)]+)\)/);
      if (!m) return null;
      const p = m[1].split(/[ ,/]+/).filter(Boolean).map(Number);
      return { r: p[0], g: p[1], b: p[2], a: p.length > 3 ? p[3] : 1 };
    };
    const lum = ({ r, g, b }) => {
      const f = (v) => {
        v /= 255;
        return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4);
      };
      return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
    };
    const over = (top, bottom) => ({
      r: top.r * top.a + bottom.r * (1 - top.a),
      g: top.g * top.a + bottom.g * (1 - top.a),
      b: top.b * top.a + bottom.b * (1 - top.a),
      a: 1,
    });
    const background = (el) => {
      const layers = [];
      for (let n = el; n; n = n.parentElement) {
        const s = getComputedStyle(n);
        if (s.backgroundImage && s.backgroundImage !== "none") return null; // gradients: not judged
        const c = rgba(s.backgroundColor);
        if (c && c.a > 0) {
          layers.push(c);
          if (c.a >= 1) break;
        }
      }
      let base = { r: 255, g: 255, b: 255, a: 1 };
      for (let i = layers.length - 1; i >= 0; i--) base = over(layers[i], base);
      return base;
    };
    let checked = 0;
    for (const el of document.querySelectorAll("body *")) {
      const own = [...el.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim());
      if (!own || !visible(el) || el.closest(".visually-hidden")) continue;
      const s = getComputedStyle(el);
      const bg = background(el);
      const fg = rgba(s.color);
      if (!bg || !fg) continue;
      const text = over(fg, bg);
      const [a, b] = [lum(text), lum(bg)].sort((x, y) => y - x);
      const ratio = (a + 0.05) / (b + 0.05);
      const size = parseFloat(s.fontSize);
      const large = size >= 24 || (size >= 18.66 && Number(s.fontWeight) >= 700);
      checked++;
      if (ratio < (large ? 3 : 4.5))
        out.push(`contrast ${ratio.toFixed(2)} < ${large ? 3 : 4.5} for <${el.tagName.toLowerCase()} class="${el.className}">${el.textContent.trim().slice(0, 40)}`);
    }
    if (checked < 5) out.push(`only ${checked} text elements were checked for contrast`);
    return out;
  });
  assert.deepEqual(problems, [], `accessibility problems on ${where}`);
}

// The page is as wide as the viewport: nothing forces a phone reader to scroll sideways.
export async function assertNoSidewaysScroll(page, where) {
  const { scroll, width } = await page.evaluate(() => ({
    scroll: document.documentElement.scrollWidth,
    width: window.innerWidth,
  }));
  assert.ok(scroll <= width, `${where} is ${scroll}px wide in a ${width}px viewport`);
}
