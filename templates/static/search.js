// Search as you type over the compact index written at build time (search.json): no server.
// The header box is an ARIA combobox: arrows move, Enter opens, Escape closes, "/" focuses.
// search.html?q=… shows the ranked list; without JavaScript that page lists every row.
(function () {
  "use strict";
  var input = document.getElementById("q");
  var list = document.getElementById("results");
  var status = document.getElementById("search-status");
  if (!input || !list) return;
  var root = input.getAttribute("data-root") || "";
  var rows = null, loading = null, selected = -1, shown = [], total = 0;

  function load() {
    if (!loading) {
      loading = fetch(root + "search.json")
        .then(function (r) { if (!r.ok) throw new Error("search.json: " + r.status); return r.json(); })
        .then(function (d) {
          rows = d.rows.map(function (r) {
            return {
              key: r[0], category: r[1], what: r[2],
              keyText: " " + r[0].toLowerCase().replace(/_/g, " ") + " ",
              what_: " " + (r[1] + " " + r[2]).toLowerCase() + " ",
              rest: " " + r[3].toLowerCase() + " "
            };
          });
        })
        .catch(function (e) { loading = null; rows = null; throw e; });
    }
    return loading;
  }
  function words(q) {
    return q.toLowerCase().split(/[^a-z0-9]+/).filter(function (w) { return w.length > 1 || /[0-9]/.test(w); })
      .map(function (w) { return w.length > 3 ? w.replace(/(es|s)$/, "") : w; });
  }
  // Points for where a word lands: a whole key word beats a key prefix beats the description.
  function hit(text, w, whole, start, inside) {
    if (text.indexOf(" " + w + " ") >= 0) return whole;
    if (text.indexOf(" " + w) >= 0) return start;
    return text.indexOf(w) >= 0 ? inside : 0;
  }
  function score(row, ws) {
    var s = 0, matched = 0;
    for (var i = 0; i < ws.length; i++) {
      var w = ws[i];
      var p = hit(row.keyText, w, 8, 5, 2) + hit(row.what_, w, 3, 2, 1) + hit(row.rest, w, 1, 1, 0);
      if (p > 0) matched++;
      s += p;
    }
    return matched === ws.length ? s + 100 : s;
  }
  function rank(q) {
    var ws = words(q);
    if (!ws.length || !rows) return [];
    return rows.map(function (r) { return [score(r, ws), r]; })
      .filter(function (p) { return p[0] > 0; })
      .sort(function (a, b) { return b[0] - a[0] || (a[1].key < b[1].key ? -1 : 1); })
      .map(function (p) { return p[1]; });
  }
  function href(r) { return root + "k/" + r.key + ".html"; }
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text) e.textContent = text;
    return e;
  }
  function option(i, a) {
    var li = el("li");
    li.setAttribute("role", "option");
    li.id = "opt-" + i;
    li.setAttribute("aria-selected", i === selected ? "true" : "false");
    a.tabIndex = -1;
    li.appendChild(a);
    return li;
  }
  function render() {
    list.textContent = "";
    var q = input.value.trim();
    shown.forEach(function (r, i) {
      var a = el("a");
      a.href = href(r);
      a.appendChild(el("span", "k", r.key));
      if (r.category) a.appendChild(el("span", "c", r.category));
      a.appendChild(el("span", "what", r.what));
      list.appendChild(option(i, a));
    });
    if (q && words(q).length) {
      var all = el("a", null, total ? "See all " + total + " results for \u201c" + q + "\u201d" : "No row matches \u201c" + q + "\u201d; browse every row");
      all.href = root + "search.html" + (total ? "?q=" + encodeURIComponent(q) : "");
      var li = option(shown.length, all);
      li.className = "all";
      list.appendChild(li);
    }
    var open = list.children.length > 0;
    list.hidden = !open;
    input.setAttribute("aria-expanded", open ? "true" : "false");
    if (selected >= 0) input.setAttribute("aria-activedescendant", "opt-" + selected);
    else input.removeAttribute("aria-activedescendant");
    var cur = document.getElementById("opt-" + selected);
    if (cur && cur.scrollIntoView) cur.scrollIntoView({ block: "nearest" });
  }
  function count() { return list.children.length; }
  function close() {
    shown = []; selected = -1;
    list.textContent = "";
    list.hidden = true;
    input.setAttribute("aria-expanded", "false");
    input.removeAttribute("aria-activedescendant");
  }
  function search() {
    var q = input.value;
    if (!words(q).length) { close(); if (status) status.textContent = ""; return; }
    load().then(function () {
      if (input.value !== q) return;
      var hits = rank(q);
      total = hits.length;
      shown = hits.slice(0, 8);
      selected = shown.length ? 0 : -1;
      render();
      if (status) status.textContent = total === 1 ? "1 result" : total + " results";
    }, function () {
      if (status) status.textContent = "Search is unavailable; press Enter for the list of every row.";
    });
  }

  input.setAttribute("role", "combobox");
  input.setAttribute("aria-controls", "results");
  input.setAttribute("aria-autocomplete", "list");
  input.setAttribute("aria-expanded", "false");
  input.addEventListener("focus", function () { load().catch(function () {}); if (input.value) search(); });
  input.addEventListener("input", search);
  input.addEventListener("keydown", function (e) {
    var n = count();
    if (e.key === "ArrowDown" && n) { selected = (selected + 1) % n; render(); e.preventDefault(); }
    else if (e.key === "ArrowUp" && n) { selected = (selected - 1 + n) % n; render(); e.preventDefault(); }
    else if (e.key === "Enter" && selected >= 0) {
      var a = list.querySelector("#opt-" + selected + " a");
      if (a) { e.preventDefault(); window.location.href = a.href; }
    } else if (e.key === "Escape") {
      if (n) { close(); } else { input.value = ""; }
      e.preventDefault();
    }
  });
  // Keep the list open while a pointer picks from it; close it when focus leaves the form.
  list.addEventListener("mousedown", function (e) { e.preventDefault(); });
  input.addEventListener("blur", function () { setTimeout(function () { if (document.activeElement !== input) close(); }, 100); });
  document.addEventListener("keydown", function (e) {
    var t = e.target, tag = t && t.tagName;
    if (e.key === "/" && tag !== "INPUT" && tag !== "TEXTAREA" && !(t && t.isContentEditable)) {
      e.preventDefault();
      input.focus();
      input.select();
    }
  });

  // The search page: rank every row for ?q=… in place of the full list.
  var hits = document.getElementById("hits");
  var q = new URLSearchParams(window.location.search).get("q");
  if (hits && q && words(q).length) {
    input.value = q;
    load().then(function () {
      var found = rank(q);
      var ol = document.getElementById("hit-list");
      document.getElementById("hits-summary").textContent =
        (found.length === 1 ? "1 row matches" : found.length + " rows match") + " \u201c" + q + "\u201d.";
      found.slice(0, 100).forEach(function (r) {
        var li = el("li");
        var a = el("a", "key", r.key);
        a.href = href(r);
        li.appendChild(a);
        if (r.category) { li.appendChild(document.createTextNode(" ")); li.appendChild(el("span", "tag", r.category)); }
        li.appendChild(el("span", "what", r.what));
        ol.appendChild(li);
      });
      hits.hidden = false;
      document.getElementById("all").hidden = true;
      var h1 = document.querySelector("main h1");
      if (h1) h1.textContent = "Search results";
      document.title = q + " · " + document.title;
    }, function () {});
  }
})();
