//! The credential bindings an import's rows need (`catalogue/bindings.yaml`), merged into
//! the catalogue's own.
//!
//! The gate refuses a row whose credential no binding names, or names for other origins or
//! other rows. So an import that writes credentialed rows also proposes, for review, where
//! each credential may go: for every variable its rows use, the origins those rows call (an
//! OpenAPI document's base URL, an MCP server's endpoint, or `stdio:` for a server started as
//! a command), with `keys:` listing the imported rows, so a binding the import writes never
//! silently covers rows written by hand.
//!
//! What is already there is kept: bindings of other credentials are left as they are, and a
//! credential already bound only gains the origins and keys its imported rows need and it does
//! not already admit (a binding for every row gains no keys, which would narrow it; methods
//! are never widened). When nothing is missing the file is not written, so a re-import leaves
//! it byte-identical. When it is written, it is rendered whole, deterministically: its
//! leading comment kept (a short one when the file is new), credentials sorted, each binding
//! as `origins`, `methods`, `keys`, `categories`; comments inside the file are not kept.

use crate::row::binding::{self, Binding, Bindings, STDIO};
use crate::row::catalogue::SourceFile;
use crate::row::credential::{Credential, is_env_name};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use url::Url;

/// The comment a new bindings file starts with.
pub const NEW_FILE_COMMENT: &str = "\
# Where each credential the catalogue may use may go (capdir check and the dispatcher enforce
# it; deny by default): per environment variable, the origins (scheme://host[:port][/path-prefix],
# or `stdio:` for an MCP server started as a command) and, optionally, the methods and the rows
# (keys:, categories:) that may send it. `capdir import` adds what its rows need; review it.
";

/// A flow list (`keys: [A, B]`) longer than this is written as a block list, one per line.
const FLOW_LINE_CHARS: usize = 100;

/// One imported row's use of one credential.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Use {
    /// The environment variable.
    pub env: String,
    /// Where the row sends it: `scheme://host[:port][/path-prefix]`, or `stdio:`.
    pub origin: String,
    pub key: String,
    pub category: String,
}

/// The uses of the credential `auth` names by row `key`, sending it to `origin`.
pub fn uses(auth: &str, origin: &str, key: &str, category: &str) -> Vec<Use> {
    let Ok(Some(credential)) = Credential::parse(auth) else {
        return Vec::new();
    };
    let mut envs = credential.envs();
    envs.dedup();
    // An `oauth:` credential's variables go to its token endpoint too.
    let mut origins = vec![origin.to_string()];
    if let Credential::OAuth(o) = &credential
        && let Some(endpoint) = endpoint_origin(&o.token_url)
    {
        origins.push(endpoint);
    }
    envs.iter()
        .flat_map(|env| {
            origins.iter().map(move |origin| Use {
                env: env.clone(),
                origin: origin.clone(),
                key: key.to_string(),
                category: category.to_string(),
            })
        })
        .collect()
}

/// The binding origin of an OpenAPI base URL: `scheme://host[:port]`, and its path as a
/// prefix (`https://api.example.com/v1/`) when it has one. None when it is not an http(s) URL
/// a binding can name (a user, a password).
pub fn base_origin(base: &str) -> Option<String> {
    let url = bindable(base)?;
    let path = url.path().trim_end_matches('/');
    Some(if path.is_empty() {
        origin_only(&url)
    } else {
        format!("{}{path}/", origin_only(&url))
    })
}

/// The binding origin of an MCP server's Streamable HTTP endpoint: `scheme://host[:port]` and
/// the endpoint's path (the requests go to that path alone).
pub fn endpoint_origin(endpoint: &str) -> Option<String> {
    let url = bindable(endpoint)?;
    let path = url.path();
    Some(if path == "/" || path.is_empty() {
        origin_only(&url)
    } else {
        format!("{}{path}", origin_only(&url))
    })
}

fn bindable(text: &str) -> Option<Url> {
    let url = Url::parse(text.trim()).ok()?;
    let ok = matches!(url.scheme(), "http" | "https")
        && url.host_str().is_some()
        && url.username().is_empty()
        && url.password().is_none();
    ok.then_some(url)
}

/// `scheme://host[:port]`, the port only when it is not the scheme's own.
fn origin_only(url: &Url) -> String {
    let host = url.host_str().unwrap_or_default();
    match url.port() {
        Some(port) => format!("{}://{host}:{port}", url.scheme()),
        None => format!("{}://{host}", url.scheme()),
    }
}

/// What the import did to one credential's binding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Bound {
    pub env: String,
    /// The origins the imported rows send it to.
    pub origins: Vec<String>,
    /// How many imported rows use it.
    pub rows: usize,
    /// `new` (no binding named it), `extended` (origins or keys added), `unchanged`.
    pub status: &'static str,
    /// Origins added to its binding.
    pub added_origins: Vec<String>,
    /// Keys added to its binding.
    pub added_keys: usize,
}

/// The catalogue's bindings with what the import's rows need.
#[derive(Debug, Clone, Default)]
pub struct Merged {
    pub bindings: Bindings,
    /// The bindings file as it will be (the catalogue's own when nothing changes; none when
    /// there is none and none is needed): what the import's gate judges its rows with.
    pub file: Option<SourceFile>,
    /// The file's new text, when it changes.
    pub write: Option<String>,
    /// Per credential the rows use, what was done, by variable name.
    pub bound: Vec<Bound>,
}

/// Why the catalogue's bindings file cannot be merged into.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreadable {
    pub line: usize,
    pub col: usize,
    pub message: String,
}

/// Merge `uses` into `existing` (the catalogue's `bindings.yaml`, if any); `path` is where
/// the file is (or goes).
pub fn merge(
    existing: Option<&SourceFile>,
    uses: &[Use],
    path: &Path,
) -> Result<Merged, Unreadable> {
    let original = match existing {
        Some(f) => Bindings::parse(&f.bytes).map_err(|e| Unreadable {
            line: e.line,
            col: e.col,
            message: e.message,
        })?,
        None => Bindings::default(),
    };
    let mut bindings = original.clone();
    let mut bound: BTreeMap<String, Bound> = BTreeMap::new();
    let mut sort_keys: BTreeSet<String> = BTreeSet::new();
    for u in uses {
        // The gate refuses these rows whatever the bindings say (a reserved or malformed name,
        // a target no binding can name); a binding of them would make the file itself fail.
        if !is_env_name(&u.env) || binding::is_reserved(&u.env) || u.origin.is_empty() {
            continue;
        }
        let report = bound.entry(u.env.clone()).or_insert_with(|| Bound {
            env: u.env.clone(),
            origins: Vec::new(),
            rows: 0,
            status: if original.credentials.contains_key(&u.env) {
                "unchanged"
            } else {
                "new"
            },
            added_origins: Vec::new(),
            added_keys: 0,
        });
        report.rows += 1;
        if !report.origins.contains(&u.origin) {
            report.origins.push(u.origin.clone());
        }
        let b = bindings.credentials.entry(u.env.clone()).or_default();
        let fresh = b.origins.is_empty() && b.keys.is_empty() && b.categories.is_empty();
        let every_row = b.keys.is_empty() && b.categories.is_empty();
        if original.credentials.contains_key(&u.env)
            && every_row
            && !admits_origin(b, &u.env, &u.origin)
        {
            // The owner let every row send this credential to its origins: a new origin there
            // would let every row send it to a host the document chose. The binding is left
            // as it is; the gate refuses the imported row (origin_not_bound), for review.
            continue;
        }
        if !admits_origin(b, &u.env, &u.origin) {
            b.origins.push(u.origin.clone());
            report.added_origins.push(u.origin.clone());
        }
        if fresh || !covers_row(b, &u.key, &u.category) {
            if !b.keys.contains(&u.key) {
                b.keys.push(u.key.clone());
                report.added_keys += 1;
            }
            sort_keys.insert(u.env.clone());
        }
    }
    for env in &sort_keys {
        if let Some(b) = bindings.credentials.get_mut(env) {
            b.keys.sort();
            b.keys.dedup();
        }
    }
    for b in bound.values_mut() {
        if b.status == "unchanged" && (!b.added_origins.is_empty() || b.added_keys > 0) {
            b.status = "extended";
        }
    }
    let bound: Vec<Bound> = bound.into_values().collect();
    if bindings == original {
        return Ok(Merged {
            bindings,
            file: existing.cloned(),
            write: None,
            bound,
        });
    }
    let text = existing.map(|f| String::from_utf8_lossy(&f.bytes).into_owned());
    let comment = match text.as_deref() {
        Some(t) if !t.trim().is_empty() => leading_comment(t),
        _ => NEW_FILE_COMMENT.to_string(),
    };
    let text = render(&comment, &bindings);
    Ok(Merged {
        bindings,
        file: Some(SourceFile {
            path: path.to_path_buf(),
            bytes: text.clone().into_bytes(),
        }),
        write: Some(text),
        bound,
    })
}

/// Does binding `b` of `env` already let a request to `origin` (its path prefix included) go?
fn admits_origin(b: &Binding, env: &str, origin: &str) -> bool {
    if origin.trim() == STDIO {
        return b.origins.iter().any(|o| o.trim() == STDIO);
    }
    let Ok(url) = Url::parse(origin) else {
        return false;
    };
    // The binding's origins alone, for any row and method: `Bindings::admit` judges them.
    let probe = Bindings {
        credentials: BTreeMap::from([(
            env.to_string(),
            Binding {
                origins: b.origins.clone(),
                ..Binding::default()
            },
        )]),
    };
    probe.admit(env, &url, "GET", "", "").is_ok()
}

/// May row `key` in `category` use binding `b`, as `Bindings::binding_for` says: every row
/// when it lists no keys and no categories, else the rows it lists.
fn covers_row(b: &Binding, key: &str, category: &str) -> bool {
    (b.keys.is_empty() && b.categories.is_empty())
        || b.keys.iter().any(|k| k == key)
        || (!category.is_empty() && b.categories.iter().any(|c| c == category))
}

/// The comment lines a file starts with (blank lines among them kept, trailing ones not).
fn leading_comment(text: &str) -> String {
    let lines: Vec<&str> = text
        .lines()
        .take_while(|l| l.trim().is_empty() || l.trim_start().starts_with('#'))
        .collect();
    let end = lines
        .iter()
        .rposition(|l| !l.trim().is_empty())
        .map_or(0, |i| i + 1);
    lines[..end].iter().map(|l| format!("{l}\n")).collect()
}

/// The bindings file: `comment`, then every credential in name order.
pub fn render(comment: &str, bindings: &Bindings) -> String {
    let mut out = comment.to_string();
    if bindings.credentials.is_empty() {
        out.push_str("credentials: {}\n");
    } else {
        out.push_str("credentials:\n");
    }
    for (env, b) in &bindings.credentials {
        out.push_str(&format!("  {}:\n", plain_or_quoted(env)));
        let origins: Vec<String> = b.origins.iter().map(|o| quoted(o)).collect();
        list(&mut out, "origins", &origins, true);
        for (name, items) in [
            ("methods", &b.methods),
            ("keys", &b.keys),
            ("categories", &b.categories),
        ] {
            let items: Vec<String> = items.iter().map(|s| plain_or_quoted(s)).collect();
            list(&mut out, name, &items, false);
        }
    }
    // What is written must read back as exactly these bindings; should the hand-rolled form
    // ever not, serde's own is.
    if Bindings::parse(out.as_bytes()).ok().as_ref() != Some(bindings) {
        return format!(
            "{comment}{}",
            serde_yaml::to_string(bindings).unwrap_or_default()
        );
    }
    out
}

/// `    name: [a, b]`, or a block list when that is long; nothing when empty unless `always`.
fn list(out: &mut String, name: &str, items: &[String], always: bool) {
    if items.is_empty() && !always {
        return;
    }
    let flow = format!("    {name}: [{}]\n", items.join(", "));
    if flow.trim_end().chars().count() <= FLOW_LINE_CHARS || items.is_empty() {
        out.push_str(&flow);
        return;
    }
    out.push_str(&format!("    {name}:\n"));
    for item in items {
        out.push_str(&format!("      - {item}\n"));
    }
}

/// A YAML double-quoted scalar (JSON's string syntax, which YAML reads alike).
fn quoted(text: &str) -> String {
    serde_json::to_string(text).unwrap_or_else(|_| "\"\"".into())
}

/// `text` as a plain scalar when it reads back as that same string in a flow list, else
/// quoted.
fn plain_or_quoted(text: &str) -> String {
    let safe = text.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        && serde_yaml::from_str::<serde_yaml::Value>(text)
            .is_ok_and(|v| v == serde_yaml::Value::String(text.to_string()));
    if safe { text.to_string() } else { quoted(text) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn file(text: &str) -> SourceFile {
        SourceFile {
            path: PathBuf::from("cat/bindings.yaml"),
            bytes: text.as_bytes().to_vec(),
        }
    }

    fn u(env: &str, origin: &str, key: &str) -> Use {
        Use {
            env: env.into(),
            origin: origin.into(),
            key: key.into(),
            category: "api".into(),
        }
    }

    #[test]
    fn origins_of_bases_and_endpoints() {
        assert_eq!(
            base_origin("https://api.github.com").as_deref(),
            Some("https://api.github.com")
        );
        assert_eq!(
            base_origin("https://API.example.com:443/v1").as_deref(),
            Some("https://api.example.com/v1/")
        );
        assert_eq!(
            base_origin("http://127.0.0.1:8080/api/v3/").as_deref(),
            Some("http://127.0.0.1:8080/api/v3/")
        );
        assert_eq!(base_origin("https://u:p@x.example"), None);
        assert_eq!(base_origin("ftp://x.example"), None);
        assert_eq!(
            endpoint_origin("http://127.0.0.1:3001/mcp?x=1").as_deref(),
            Some("http://127.0.0.1:3001/mcp")
        );
        assert_eq!(
            endpoint_origin("https://mcp.example.com/").as_deref(),
            Some("https://mcp.example.com")
        );
        assert_eq!(
            uses(
                "headers:{\"A\":\"$X_KEY\",\"B\":\"$X_KEY\"}",
                "https://x",
                "K",
                ""
            )
            .len(),
            1
        );
    }

    #[test]
    fn a_new_file_binds_each_credential_to_its_rows() {
        let uses = [
            u("GH_TOKEN", "https://api.github.com", "GH_B"),
            u("GH_TOKEN", "https://api.github.com", "GH_A"),
            u("CAPDIR_OWNER_KEY", "https://api.github.com", "GH_C"),
            u("RUN_VAR", STDIO, "RUN"),
        ];
        let m = merge(None, &uses, Path::new("cat/bindings.yaml")).unwrap();
        let text = m.write.expect("written");
        assert!(text.starts_with(NEW_FILE_COMMENT), "{text}");
        assert!(
            text.ends_with(
                "credentials:\n  GH_TOKEN:\n    origins: [\"https://api.github.com\"]\n    keys: [GH_A, GH_B]\n  RUN_VAR:\n    origins: [\"stdio:\"]\n    keys: [RUN]\n"
            ),
            "{text}"
        );
        assert_eq!(Bindings::parse(text.as_bytes()).unwrap(), m.bindings);
        assert!(!m.bindings.credentials.contains_key("CAPDIR_OWNER_KEY"));
        let unbindable = merge(None, &[u("X_KEY", "", "X")], Path::new("b")).unwrap();
        assert!(unbindable.write.is_none());
        assert_eq!(m.bound.len(), 2);
        assert_eq!((m.bound[0].status, m.bound[0].rows), ("new", 2));
        // Merging the same again changes nothing.
        let again = merge(m.file.as_ref(), &uses, Path::new("cat/bindings.yaml")).unwrap();
        assert_eq!(again.write, None);
        assert!(again.bound.iter().all(|b| b.status == "unchanged"));
        // Nothing needed, no file.
        let none = merge(None, &[], Path::new("cat/bindings.yaml")).unwrap();
        assert!(none.write.is_none() && none.file.is_none());
    }

    #[test]
    fn what_is_there_is_kept_and_only_what_is_missing_added() {
        let existing = file(
            "# Owner's file.\n\n# Second paragraph.\ncredentials:\n  OTHER:\n    origins: [\"https://other.example/x/\"]\n    methods: [GET]\n  GH_TOKEN:\n    origins: [\"https://api.github.com/repos/\"]\n    keys: [HAND_WRITTEN]\n  ALL_ROWS:\n    origins: [\"https://all.example\"]\n",
        );
        let m = merge(
            Some(&existing),
            &[
                u("GH_TOKEN", "https://api.github.com", "GH_A"),
                u("ALL_ROWS", "https://all.example/v2/", "GH_A"),
            ],
            Path::new("cat/bindings.yaml"),
        )
        .unwrap();
        let text = m.write.expect("written");
        assert!(
            text.starts_with("# Owner's file.\n\n# Second paragraph.\ncredentials:\n"),
            "{text}"
        );
        let before = Bindings::parse(&existing.bytes).unwrap();
        assert_eq!(m.bindings.credentials["OTHER"], before.credentials["OTHER"]);
        // A binding for every row stays one: adding a key would narrow it.
        assert_eq!(
            m.bindings.credentials["ALL_ROWS"],
            before.credentials["ALL_ROWS"]
        );
        let gh = &m.bindings.credentials["GH_TOKEN"];
        assert_eq!(
            gh.origins,
            ["https://api.github.com/repos/", "https://api.github.com"]
        );
        assert_eq!(gh.keys, ["GH_A", "HAND_WRITTEN"]);
        let status: Vec<(&str, &str)> = m.bound.iter().map(|b| (&*b.env, b.status)).collect();
        assert_eq!(
            status,
            [("ALL_ROWS", "unchanged"), ("GH_TOKEN", "extended")]
        );
        assert!(merge(Some(&file("credentials: [")), &[], Path::new("b")).is_err());
    }

    #[test]
    fn long_lists_go_one_per_line_and_odd_names_are_quoted() {
        let mut b = Bindings::default();
        b.credentials.insert(
            "T".into(),
            Binding {
                origins: vec!["https://x.example".into()],
                keys: (0..40).map(|i| format!("KEY_{i:02}")).collect(),
                categories: vec!["true".into(), "a b".into(), "null".into(), "web".into()],
                ..Binding::default()
            },
        );
        let text = render("", &b);
        assert!(text.contains("    keys:\n      - KEY_00\n"), "{text}");
        assert!(
            text.contains("categories: [\"true\", \"a b\", \"null\", web]"),
            "{text}"
        );
        assert_eq!(Bindings::parse(text.as_bytes()).unwrap(), b);
    }
}
