//! Fuzz the template engine: no input panics, an argument never changes a JSON template's
//! structure, and never moves a rendered http URL to another origin.
#![no_main]

use capdir::invoke::runner::http::render_url;
use capdir::row::target::HttpTarget;
use capdir::row::template::{Context, Vars, highest_slot, names, render};
use libfuzzer_sys::fuzz_target;
use std::collections::HashMap;

/// The document's skeleton: object keys and array lengths at every depth, every scalar alike. An
/// argument may turn a number slot into a string, but never add a key, an element or a level.
fn shape(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::Object(m) => {
            let inner: Vec<String> = m
                .iter()
                .map(|(k, v)| format!("{k:?}:{}", shape(v)))
                .collect();
            format!("{{{}}}", inner.join(","))
        }
        serde_json::Value::Array(a) => {
            format!("[{}]", a.iter().map(shape).collect::<Vec<_>>().join(","))
        }
        _ => "_".to_string(),
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // template \0 arg1 \0 arg2 …
    let mut parts = text.split('\0');
    let template = parts.next().unwrap_or("");
    let args: Vec<String> = parts.map(str::to_string).collect();
    let mut bindings = HashMap::new();
    bindings.insert(
        "NAME".to_string(),
        args.first().cloned().unwrap_or_default(),
    );
    let vars = Vars {
        args: &args,
        prev: Some(args.last().map_or("", String::as_str)),
        bindings: Some(&bindings),
    };

    let _ = highest_slot(template);
    let _ = names(template);
    for ctx in [Context::Raw, Context::Url, Context::Json] {
        let _ = render(template, ctx, vars);
    }

    // JSON: a template that is valid JSON with neutral values must keep its skeleton with any
    // arguments. `$$` inserts raw by design, so it is left out; so are templates with a slot in
    // an object key (neutral values give different keys) or glued to other characters of a token
    // (`$1e2`: a word does not fit where a number did) — slots that are not a whole value.
    if !template.contains("$$") {
        let skeleton = |fill: &str| {
            let neutral = vec![fill.to_string(); args.len()];
            let v = Vars {
                args: &neutral,
                prev: Some(fill),
                bindings: None,
            };
            render(template, Context::Json, v)
                .ok()
                .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
                .map(|j| shape(&j))
        };
        if let (Some(a), Some(b), Some(c)) = (skeleton("0"), skeleton("1"), skeleton("x")) {
            if a == b && b == c {
                let hostile = Vars {
                    bindings: None,
                    ..vars
                };
                let rendered =
                    render(template, Context::Json, hostile).expect("same args as neutral");
                let got =
                    serde_json::from_str::<serde_json::Value>(&rendered).unwrap_or_else(|e| {
                        panic!(
                            "template {template:?} args {args:?} -> invalid JSON {rendered}: {e}"
                        )
                    });
                assert_eq!(
                    a,
                    shape(&got),
                    "template {template:?} args {args:?} -> {rendered}"
                );
            }
        }
    }

    // URL: an accepted http target keeps its origin whatever the arguments.
    if let Ok(target) = HttpTarget::parse(&format!("GET {template}")) {
        if let Err(f) = render_url(&target, vars) {
            assert_ne!(
                f.code, "http:origin_changed",
                "template {template:?} args {args:?}: {}",
                f.detail
            );
        }
    }
});
