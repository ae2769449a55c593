// Row pages: a copy button for the example call and, when a capdir dispatcher serves the
// page, a form that runs the row. The key or token typed in goes with the one request (and
// with "Show the full receipt", as a form field); nothing is written to storage or cookies.
(function () {
  "use strict";
  function selectText(node) {
    var range = document.createRange();
    range.selectNodeContents(node);
    var sel = window.getSelection();
    sel.removeAllRanges();
    sel.addRange(range);
  }
  Array.prototype.forEach.call(document.querySelectorAll("button.copy"), function (b) {
    var target = document.getElementById(b.getAttribute("data-copy"));
    if (!target) return;
    b.hidden = false;
    b.addEventListener("click", function () {
      var text = target.textContent;
      var done = function (label) {
        b.textContent = label;
        setTimeout(function () { b.textContent = "Copy"; }, 1500);
      };
      var fallback = function () {
        selectText(target);
        var ok = false;
        try { ok = document.execCommand("copy"); } catch (e) { ok = false; }
        done(ok ? "Copied" : "Press Ctrl+C");
      };
      if (navigator.clipboard && window.isSecureContext) {
        navigator.clipboard.writeText(text).then(function () { done("Copied"); }, fallback);
      } else {
        fallback();
      }
    });
  });

  var run = document.getElementById("run");
  var form = document.getElementById("run-form");
  if (!run || !form) return;
  var api = run.getAttribute("data-api");
  var receipts = run.getAttribute("data-receipts");
  var key = run.getAttribute("data-key");
  var out = document.getElementById("run-result");
  var go = document.getElementById("run-go");

  if (run.hasAttribute("data-remote")) {
    // The catalogue names its dispatcher: run here only on a page that dispatcher serves;
    // on the static host, point at the same page there (no request to the host's origin).
    if (new URL(api, location.href).origin === location.origin) {
      run.hidden = false;
    } else {
      var elsewhere = document.getElementById("run-elsewhere");
      if (elsewhere) elsewhere.hidden = false;
    }
  } else {
    // No public dispatcher: only one the reader runs answers ?map=1 with the counts.
    fetch(api + "?map=1", { headers: { accept: "application/json" } })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (d) {
        if (d && d.counts) {
          run.hidden = false;
          var none = document.getElementById("no-dispatcher");
          if (none) none.hidden = true;
        }
      })
      .catch(function () {});
  }

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function show(status, answer) {
    out.textContent = "";
    var err = answer && answer.error;
    var id = answer && typeof answer.receipt === "string" ? answer.receipt : null;
    var line = el("p", "status-line");
    var label = answer.status || (err && err.code) || ("HTTP " + status);
    line.appendChild(el("span", "status status-" + String(label).toLowerCase(), label));
    if (err) line.appendChild(el("span", null, err.message));
    out.appendChild(line);
    if (err && err.how_to_fix) out.appendChild(el("p", "muted", err.how_to_fix));
    if (answer.output !== undefined) {
      out.appendChild(el("h3", null, "Output"));
      var pre = el("pre", "output");
      pre.tabIndex = 0;
      pre.appendChild(el("code", null, String(answer.output)));
      out.appendChild(pre);
    }
    if (id) {
      var p = el("p", "receipt-line");
      p.appendChild(document.createTextNode("Receipt "));
      var a = el("a", null, id);
      a.href = receipts + id;
      a.id = "run-receipt";
      p.appendChild(a);
      p.appendChild(document.createTextNode(" "));
      // Posts this form (the credential field with it) to the receipt page: no storage needed.
      var open = el("button", null, "Show the full receipt");
      open.type = "submit";
      open.id = "run-open-receipt";
      open.setAttribute("formaction", receipts + id);
      open.setAttribute("formmethod", "post");
      p.appendChild(open);
      out.appendChild(p);
    }
  }
  form.addEventListener("submit", function (e) {
    if (e.submitter && e.submitter.id === "run-open-receipt") return;
    e.preventDefault();
    var credential = document.getElementById("run-credential").value;
    var body = document.getElementById("run-body").value;
    go.disabled = true;
    out.textContent = "Running " + key + "…";
    fetch(api, {
      method: "POST",
      headers: { "content-type": "application/json", accept: "application/json", authorization: "Bearer " + credential },
      body: JSON.stringify({ key: key, body: body }),
      credentials: "omit",
      cache: "no-store"
    })
      .then(function (r) {
        return r.json().then(function (j) { return [r.status, j]; }, function () { return [r.status, {}]; });
      })
      .then(function (p) { show(p[0], p[1]); }, function (err) { show(0, { error: { code: "network", message: String(err) } }); })
      .then(function () { go.disabled = false; });
  });
})();
