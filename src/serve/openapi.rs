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
    #[test]
    fn parses_and_names_the_server() {
        let d = super::document("http://x.example/");
        assert_eq!(d["servers"][0]["url"], "http://x.example");
        assert!(d["paths"]["/api/dispatch"]["get"].is_object());
    }
}
