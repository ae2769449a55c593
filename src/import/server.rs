//! Where an operation's requests go: the document's base URL (OpenAPI 3's `servers`, with
//! their variables at their defaults; Swagger 2.0's `schemes`, `host` and `basePath`), made
//! absolute against the document's own URL when it was fetched, or `--server` instead.

use crate::import::document::{Document, Version, escape_pointer};
use crate::import::operation::path_params;
use serde_json::{Value as Json, json};

/// The server URL a `servers` list names: its first entry, variables at their defaults,
/// relative to where the document came from when it is relative.
pub fn of_servers(servers: &Json, origin: &str) -> Result<String, String> {
    let first = servers
        .as_array()
        .and_then(|s| s.first())
        .ok_or("the document lists no servers")?;
    let mut url = first
        .get("url")
        .and_then(Json::as_str)
        .ok_or("the first server has no `url`")?
        .to_string();
    for name in path_params(&url) {
        let default = first
            .pointer(&format!("/variables/{}/default", escape_pointer(&name)))
            .and_then(Json::as_str)
            .ok_or_else(|| format!("server variable `{name}` has no default"))?;
        url = url.replace(&format!("{{{name}}}"), default);
    }
    absolute(&url, origin)
}

/// `url` made absolute against the document's origin when that is a URL.
fn absolute(url: &str, origin: &str) -> Result<String, String> {
    if url.starts_with("http://") || url.starts_with("https://") {
        return Ok(url.trim_end_matches('/').to_string());
    }
    // Scheme-relative (`//api.example.com/v1`): https, wherever the document came from.
    if let Some(rest) = url.strip_prefix("//") {
        return Ok(format!("https://{}", rest.trim_end_matches('/')));
    }
    let base = reqwest::Url::parse(origin)
        .ok()
        .filter(|u| u.scheme().starts_with("http"));
    match base.and_then(|b| b.join(url).ok()) {
        Some(u) => Ok(u.as_str().trim_end_matches('/').to_string()),
        None => Err(format!(
            "the server URL `{url}` is relative and the document was not fetched from a URL; pass --server https://…"
        )),
    }
}

/// The base URL of the whole document (every operation without servers of its own uses it).
pub fn of_document(doc: &Document, server: Option<&str>) -> Result<String, String> {
    if let Some(s) = server {
        return absolute(s, &doc.origin);
    }
    match doc.version {
        Version::Swagger2 => {
            let origin = reqwest::Url::parse(&doc.origin).ok();
            let host = doc
                .root
                .get("host")
                .and_then(Json::as_str)
                .map(str::to_string)
                .or_else(|| {
                    origin
                        .as_ref()
                        .filter(|o| o.scheme().starts_with("http"))
                        .and_then(|o| o.host_str().map(|h| match o.port() {
                            Some(p) => format!("{h}:{p}"),
                            None => h.to_string(),
                        }))
                })
                .ok_or("the document names no `host` and was not fetched from a URL; pass --server https://…")?;
            let schemes: Vec<&str> = doc
                .root
                .get("schemes")
                .and_then(Json::as_array)
                .map(|s| s.iter().filter_map(Json::as_str).collect())
                .unwrap_or_default();
            let scheme = if schemes.contains(&"https") {
                "https"
            } else if schemes.contains(&"http") {
                "http"
            } else {
                origin
                    .as_ref()
                    .map(|o| o.scheme())
                    .filter(|s| *s == "http")
                    .unwrap_or("https")
            };
            let base_path = doc
                .root
                .get("basePath")
                .and_then(Json::as_str)
                .unwrap_or("");
            Ok(format!(
                "{scheme}://{host}{}",
                base_path.trim_end_matches('/')
            ))
        }
        _ => {
            let servers = doc
                .root
                .get("servers")
                .filter(|s| s.as_array().is_some_and(|a| !a.is_empty()));
            let cx_servers = servers.cloned().unwrap_or_else(|| json!([{"url": "/"}]));
            let first = &cx_servers[0];
            let mut url = first
                .get("url")
                .and_then(Json::as_str)
                .unwrap_or("/")
                .to_string();
            for name in path_params(&url) {
                let default = first
                    .pointer(&format!("/variables/{}/default", escape_pointer(&name)))
                    .and_then(Json::as_str)
                    .ok_or_else(|| {
                        format!("server variable `{name}` has no default; pass --server https://…")
                    })?;
                url = url.replace(&format!("{{{name}}}"), default);
            }
            absolute(&url, &doc.origin)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_and_scheme_relative_servers() {
        let servers = json!([{"url": "//api.example.com/v1/"}]);
        assert_eq!(
            of_servers(&servers, "spec.yaml").as_deref(),
            Ok("https://api.example.com/v1")
        );
        let servers = json!([{"url": "/api/v3"}]);
        assert_eq!(
            of_servers(&servers, "http://127.0.0.1:9/docs/openapi.json").as_deref(),
            Ok("http://127.0.0.1:9/api/v3")
        );
        let err = of_servers(&servers, "spec.yaml").expect_err("no base to resolve against");
        assert!(err.contains("--server"), "{err}");
    }
}
