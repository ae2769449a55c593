//! The OpenAPI document of the dispatcher's HTTP API, served at `/openapi.json`.
//!
//! Written by hand in `openapi.yaml` beside this file rather than generated from annotations:
//! the dispatcher has five routes and one multi-purpose GET, and a hand-written document says
//! what each query combination answers more plainly than derive macros would. It is kept
//! honest by tests: `tests/openapi.rs` checks every route and answer against it in-process,
//! and `tests/schemathesis.rs` runs schemathesis on a live `capdir serve`.

use serde_json::{Value as Json, json};
use std::sync::LazyLock;

static DOCUMENT: LazyLock<Json> = LazyLock::new(|| {
    serde_yaml::from_str(include_str!("openapi.yaml")).expect("openapi.yaml is valid YAML")
});

/// The document, naming `base_url` as its server.
pub fn document(base_url: &str) -> Json {
    let mut doc = DOCUMENT.clone();
    if let Some(obj) = doc.as_object_mut() {
        obj.insert(
            "servers".into(),
            json!([{"url": base_url.trim_end_matches('/')}]),
        );
        if let Some(info) = obj.get_mut("info").and_then(Json::as_object_mut) {
            info.insert("version".into(), json!(env!("CARGO_PKG_VERSION")));
        }
    }
    doc
}

#[cfg(test)]
mod tests {
    /// serde_yaml keeps the last of two equal keys: a second `parameters:` under
    /// `components` once hid the first.
    #[test]
    fn no_key_is_given_twice() {
        let text = include_str!("openapi.yaml");
        let mut seen = std::collections::HashSet::new();
        let mut path: Vec<(usize, String)> = Vec::new();
        for line in text.lines() {
            let trimmed = line.trim_start();
            let indent = line.len() - trimmed.len();
            if trimmed.starts_with('#') || trimmed.starts_with('-') || !trimmed.contains(':') {
                continue;
            }
            let key = trimmed.split(':').next().unwrap_or_default().to_string();
            if key.contains(' ') || key.contains('{') && !key.starts_with('/') {
                continue;
            }
            while path.last().is_some_and(|(i, _)| *i >= indent) {
                path.pop();
            }
            path.push((indent, key));
            let full: Vec<&str> = path.iter().map(|(_, k)| k.as_str()).collect();
            assert!(seen.insert(full.join("/")), "{} twice", full.join("/"));
        }
    }

    #[test]
    fn parses_and_names_the_server() {
        let d = super::document("http://x.example/");
        assert_eq!(d["servers"][0]["url"], "http://x.example");
        assert!(d["paths"]["/api/dispatch"]["get"].is_object());
    }
}
