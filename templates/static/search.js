// Search as you type over the compact index written at build time (search.json); no server.
(function () {
  "use strict";
  var input = document.getElementById("q");
  var list = document.getElementById("results");
  if (!input || !list) return;
  var root = input.getAttribute("data-root") || "";
  var rows = null, loading = null, selected = -1, shown = [];

  function load() {
    if (!loading) {
      loading = fetch(root + "search.json").then(function (r) { return r.json(); })
        .then(function (d) { rows = d.rows.map(function (r) {
          return { key: r[0], category: r[1], what: r[2], text: (r[0].replace(/_/g, " ") + " " + r[1] + " " + r[2] + " " + r[3]).toLowerCase() };
        }); });
    }
    return loading;
  }
  function words(q) { return q.toLowerCase().split(/[^a-z0-9]+/).filter(function (w) { return w.length > 1; }); }
  function score(row, ws) {
    var s = 0;
    for (var i = 0; i < ws.length; i++) {
      var w = ws[i], k = row.key.toLowerCase();
      if (k.indexOf(w) >= 0) s += 3;
      var at = row.text.indexOf(w);
      if (at >= 0) s += (at === 0 || row.text.charAt(at - 1) === " ") ? 2 : 1;
    }
    return s;
  }
  function render() {
    list.innerHTML = "";
    shown.forEach(function (r, i) {
      var li = document.createElement("li");
      li.setAttribute("role", "option");
      li.id = "opt-" + i;
      li.setAttribute("aria-selected", i === selected ? "true" : "false");
      var a = document.createElement("a");
      a.href = root + "k/" + r.key + ".html";
      a.textContent = r.key;
      var what = document.createElement("span");
      what.className = "what";
      what.textContent = r.what;
      a.appendChild(what);
      li.appendChild(a);
      list.appendChild(li);
    });
    list.hidden = shown.length === 0;
    if (selected >= 0) input.setAttribute("aria-activedescendant", "opt-" + selected);
    else input.removeAttribute("aria-activedescendant");
  }
  function search() {
    var ws = words(input.value);
    if (!ws.length) { shown = []; selected = -1; render(); return; }
    load().then(function () {
      shown = rows.map(function (r) { return [score(r, ws), r]; })
        .filter(function (p) { return p[0] > 0; })
        .sort(function (a, b) { return b[0] - a[0] || (a[1].key < b[1].key ? -1 : 1); })
        .slice(0, 10).map(function (p) { return p[1]; });
      selected = shown.length ? 0 : -1;
      render();
    });
  }
  input.setAttribute("role", "combobox");
  input.setAttribute("aria-controls", "results");
  input.setAttribute("aria-autocomplete", "list");
  input.addEventListener("focus", load);
  input.addEventListener("input", search);
  input.addEventListener("keydown", function (e) {
    if (e.key === "ArrowDown" && shown.length) { selected = (selected + 1) % shown.length; render(); e.preventDefault(); }
    else if (e.key === "ArrowUp" && shown.length) { selected = (selected - 1 + shown.length) % shown.length; render(); e.preventDefault(); }
    else if (e.key === "Enter" && selected >= 0 && shown[selected]) { window.location.href = root + "k/" + shown[selected].key + ".html"; e.preventDefault(); }
    else if (e.key === "Escape") { shown = []; selected = -1; render(); }
  });
})();
