// The approvals page: follows GET /api/approvals every second with the key typed into it
// (kept in this tab's session storage only) and decides with POST /api/approvals/ID.
"use strict";
(function () {
  const queue = document.getElementById("queue");
  const status = document.getElementById("status");
  const keyInput = document.getElementById("key");
  const decided = document.getElementById("decided");
  let key = sessionStorage.getItem("capdir-approver-key") || "";

  function headers() {
    return { "Authorization": "Bearer " + key, "Content-Type": "application/json" };
  }

  function el(tag, text, cls) {
    const e = document.createElement(tag);
    if (text !== undefined) e.textContent = text;
    if (cls) e.className = cls;
    return e;
  }

  // The queue is changed in place: a call that arrives is added, one that leaves is removed,
  // and the others (with any note being typed) are left alone.
  function render(pending) {
    status.textContent = pending.length === 0
      ? "No call is waiting."
      : pending.length + " call" + (pending.length === 1 ? " is" : "s are") + " waiting.";
    const ids = new Set(pending.map((p) => p.approval));
    for (const box of Array.from(queue.children)) {
      if (!ids.has(box.id)) box.remove();
    }
    for (const p of pending) {
      if (document.getElementById(p.approval)) continue;
      queue.append(section(p));
    }
  }

  function section(p) {
    const box = el("section", undefined, "call");
    box.id = p.approval;
    box.dataset.key = p.key;
    box.append(el("h2", p.key));
    box.append(el("p", p.what));
    box.append(el("p", "asked by " + p.caller + " · " + p.age_secs + " s ago · expires " +
      p.expires_at + " · waits because: " + p.needs, "meta"));
    if (!p.contract_current) box.append(el("p", "The row changed since this call was asked: it cannot be approved.", "stale"));
    box.append(el("p", "Arguments as the runner will receive them:", "meta"));
    box.append(el("pre", JSON.stringify(p.arguments, null, 1)));
    box.append(el("p", "input SHA-256 " + p.args_sha256 + " · contract " + p.fingerprint.slice(0, 12), "meta"));
    const note = el("input");
    note.placeholder = "note (optional)";
    note.className = "note";
    const approve = el("button", "Approve", "approve");
    const deny = el("button", "Deny", "deny");
    approve.onclick = () => decide(p.approval, "approve", note.value, box);
    deny.onclick = () => decide(p.approval, "deny", note.value, box);
    box.append(note, el("br"), approve, deny);
    return box;
  }

  async function decide(id, decision, note, box) {
    box.querySelectorAll("button").forEach((b) => (b.disabled = true));
    const r = await fetch("/api/approvals/" + encodeURIComponent(id), {
      method: "POST", headers: headers(), body: JSON.stringify({ decision, note }),
    });
    const body = await r.json().catch(() => ({}));
    const said = r.ok
      ? id + ": " + body.state + (body.result && body.result.status ? " · ran: " + body.result.status : "")
      : id + ": " + ((body.error && body.error.message) || r.status);
    decided.prepend(el("li", said));
    if (r.ok) box.remove();
    else box.querySelectorAll("button").forEach((b) => (b.disabled = false));
    refresh();
  }

  async function refresh() {
    if (!key) return;
    try {
      const r = await fetch("/api/approvals", { headers: headers(), cache: "no-store" });
      const body = await r.json();
      if (!r.ok) {
        status.textContent = (body.error && body.error.message) || ("error " + r.status);
        queue.replaceChildren();
        return;
      }
      render(body.pending);
    } catch (e) {
      status.textContent = "The dispatcher did not answer: " + e;
    }
  }

  document.getElementById("login").addEventListener("submit", (e) => {
    e.preventDefault();
    key = keyInput.value.trim();
    sessionStorage.setItem("capdir-approver-key", key);
    refresh();
  });
  setInterval(refresh, 1000);
  refresh();
})();
