//! The contract markdown agents read (`k/KEY.md`) and a removed row's, written by capdir
//! itself. These are machine forms, fixed whatever a catalogue's templates say, so they are
//! code rather than templates: nothing here is a site owner's to restyle, and a page written
//! with `push_str` costs a fifth of what the template engine costs for it.

use crate::build::contract::{Contract, HistoryLine, Tombstone, brief, first_ten};
use crate::build::pages::Links;
use std::fmt::Write as _;

/// Contract `c` as markdown, `u` its addresses on the public dispatcher.
pub fn contract(c: &Contract, u: Links) -> String {
    let mut s = String::with_capacity(4096);
    head(&mut s, c);
    call(&mut s, c, u);
    access(&mut s, c);
    machine(&mut s, c, u);
    s.push_str("\n\n## Troubleshooting\n");
    for t in &c.troubleshooting {
        let _ = write!(s, "\n- {t}");
    }
    s.push_str("\n\n## History\n");
    history(&mut s, &c.history, true);
    s
}

/// A removed row as markdown.
pub fn tombstone(t: &Tombstone) -> String {
    let mut s = String::with_capacity(1024);
    let _ = write!(
        s,
        "# {} (removed)\n\nThis row was removed on {} by commit `{}`: {}.\n",
        t.key,
        first_ten(&t.removed_at),
        first_ten(&t.removed_by),
        t.removed_subject
    );
    match t.replaced_by.as_deref().filter(|r| !r.is_empty()) {
        Some(r) => {
            let _ = write!(s, "\nUse [{r}]({r}.md) instead.\n");
        }
        None => s.push_str("\nNo replacement was named. Ask the catalogue for what you need.\n"),
    }
    let _ = write!(
        s,
        "\nInvoking `{}` answers `unknown_key`. Receipts of past calls stay readable.\n\n## History\n",
        t.key
    );
    history(&mut s, &t.history, false);
    s
}

/// The title line, the facts line and what the row is for.
fn head(s: &mut String, c: &Contract) {
    let _ = write!(
        s,
        "# {}\n\n`{}` · type `{}` · runner `{}` · auth `{}` · risk `{}`",
        c.key, c.path, c.kind, c.runner, c.auth_form, c.risk
    );
    if !c.enabled {
        s.push_str(" · **disabled**");
    }
    if !c.planner_visible {
        s.push_str(" · hidden from planners");
    }
    let _ = write!(s, "\n\n**What:** {}\n", c.what);
    if !c.when_to_use.is_empty() {
        let _ = write!(s, "\n**When to use:** {}\n", c.when_to_use);
    }
}

/// How to call the row: the request, the tag, its arguments, examples and output.
fn call(s: &mut String, c: &Contract, u: Links) {
    s.push_str("\n## Call\n\n");
    if u.invoke.is_empty() {
        s.push_str("This catalogue has no public dispatcher. Run one on this site with `capdir serve --site SITE` (it serves these pages too) and call it there:\n\n```\nPOST /api/dispatch\n");
    } else {
        let _ = write!(s, "Run now: <{}>\n\n```\nPOST {}\n", u.run_now, u.invoke);
    }
    let _ = write!(
        s,
        "{}\n```\n\n- As a router tag in any text: `{}`\n- Arguments: {} (one string, pieces split on `|`",
        c.example_request,
        c.example_tag,
        if c.args.is_empty() { "none" } else { &c.args }
    );
    if let Some(first) = c.arguments.first() {
        let _ = write!(
            s,
            "; or by name, `\"args\": {{\"{}\": …}}` instead of `\"body\"`",
            first.name
        );
    }
    s.push(')');
    for a in c.arguments.iter().take(4) {
        let _ = write!(s, "\n- `${}` {}: {}", a.position, a.name, a.kind);
        if a.required {
            s.push_str(", required");
        }
        if !a.description.is_empty() {
            let _ = write!(s, ". {}", brief(&a.description));
        }
    }
    if let Some(fifth) = c.arguments.get(4) {
        let _ = write!(
            s,
            "\n- and {} more, from `${}` {} on (the JSON contract describes each)",
            c.arguments.len() - 4,
            fifth.position,
            fifth.name
        );
    }
    if !c.examples.is_empty() {
        s.push_str("\n- Examples: ");
        list(s, &c.examples, ", ", |s, e| {
            let _ = write!(s, "`{e}`");
        });
    }
    let _ = write!(s, "\n- Output: {}", c.output);
    if !c.steps.is_empty() {
        s.push_str("\n- Steps: ");
        list(s, &c.steps, " → ", |s, k| {
            let _ = write!(s, "[{k}]({k}.md)");
        });
    }
    if !c.includes.is_empty() {
        s.push_str("\n- System prompt starts with: ");
        list(s, &c.includes, ", ", |s, k| {
            let _ = write!(s, "[{k}]({k}.md)");
        });
    }
}

/// The credential, where it may go, and who may call.
fn access(s: &mut String, c: &Contract) {
    s.push_str("\n\n## Access\n\n- Credential: ");
    if c.credential_envs.is_empty() {
        s.push_str("none");
    } else {
        let _ = write!(
            s,
            "`{}` ({}), held by the dispatcher; never send it",
            c.credential_envs.join("`, `"),
            c.auth_form
        );
    }
    if !c.credential_bindings.is_empty() {
        s.push_str("\n- Where it may go (the catalogue's bindings; the dispatcher refuses any other request before reading the secret):");
        for b in &c.credential_bindings {
            let _ = write!(s, "\n  - `{}`: ", b.env);
            if !b.bound {
                let _ = write!(
                    s,
                    "not bound: calls are refused (`{}`)",
                    b.refused.unwrap_or_default()
                );
                continue;
            }
            list(s, &b.origins, ", ", |s, o| {
                let _ = write!(s, "`{o}`");
            });
            if b.methods.is_empty() {
                s.push_str("; any method");
            } else {
                let _ = write!(s, "; {} only", b.methods.join(", "));
            }
        }
    }
    s.push_str("\n- Accepts: ");
    list(s, &c.accepts, "; ", |s, a| {
        let _ = write!(s, "`{}` ({})", a.credential, a.condition);
    });
    s.push_str("\n- Fetch this contract from the dispatcher with your credential to see what it may do here: may it invoke, which body, until when.");
}

/// The fingerprint, the receipt and how to repair a call.
fn machine(s: &mut String, c: &Contract, u: Links) {
    let _ = write!(
        s,
        "\n\n## Machine contract\n\nRead this contract; don't infer the row from memory. Fingerprint `{}`.\nFewer pieces than ARGS names is refused (`missing_args`). Each call answers a receipt `inv_…` with its `proof`:\n",
        c.fingerprint
    );
    if u.receipt.is_empty() {
        s.push_str("full at `/receipt/inv_…`, keyless at `/api/dispatch?confirm=inv_…` of the dispatcher that ran it; repair with `\"repairs\": \"inv_…\"`.");
    } else {
        let _ = write!(
            s,
            "full at {}, keyless at {}; SHA-256 chained (`capdir ledger verify`).\nRepair a `FAILED`, `REFUSED` or `RAN_NO_MATERIAL` call: `POST {}` `{{\"key\": \"{}\", \"body\": \"…\", \"repairs\": \"inv_…\"}}`; replay: the run-now link.",
            u.receipt, u.confirm, u.invoke, c.key
        );
    }
}

/// A row's commits, newest first; `or_none` says so when there are none.
fn history(s: &mut String, lines: &[HistoryLine], or_none: bool) {
    for h in lines {
        let _ = write!(
            s,
            "\n- {} `{}` {}: {} ({})",
            first_ten(&h.date),
            h.short,
            h.kind,
            h.subject,
            h.author
        );
    }
    if lines.is_empty() && or_none {
        s.push_str("\n- no Git history");
    }
    s.push('\n');
}

/// `items` written one by one with `each`, `sep` between them.
fn list<T>(s: &mut String, items: &[T], sep: &str, mut each: impl FnMut(&mut String, &T)) {
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            s.push_str(sep);
        }
        each(s, item);
    }
}
