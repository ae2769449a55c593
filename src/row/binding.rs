//! Credential bindings: for each secret the catalogue may use, where it may go.
//!
//! A row names its credential by environment variable and names the host it calls; nothing
//! else tied the two, so whoever wrote a row decided where the dispatcher sent which secret.
//! The owner declares the bindings in `catalogue/bindings.yaml`, reviewed in Git with the
//! rows (a CODEOWNERS line keeps it the owner's): each credential's origins (scheme, host,
//! port, optionally a path prefix and methods) and which rows may use it. Deny by default: a
//! credential no binding names is never read from the environment, whatever a row says, and
//! the dispatcher's own variables (`CAPDIR_*`) can never be bound. A deployment narrows the
//! catalogue's bindings without a commit (`capdir serve --bindings FILE`, the same format:
//! only what both allow holds).
//!
//! `capdir check` judges rows against the bindings, the write API judges tokens' writes, and
//! the runners judge the URL they are about to connect to, parsed by the HTTP client's own
//! URL parser (`url`), so a userinfo, an encoded or IDN host, a trailing dot, a port or a
//! scheme cannot make one origin look like another.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use url::{Host, Url};

/// The file in the catalogue's directory that holds the bindings. Its name is lowercase, so
/// it is never a row's (keys are capitals).
pub const FILE: &str = "bindings.yaml";

/// Every credential the catalogue may use, by environment variable.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bindings {
    /// Variable name → where its secret may go.
    #[serde(default)]
    pub credentials: BTreeMap<String, Binding>,
}

/// Where one credential may go, and which rows may send it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Binding {
    /// `scheme://host[:port][/path-prefix]`: the origins (and path prefixes) the secret may
    /// be sent to. `stdio:` lets an MCP server started as a command receive it (`env:`).
    pub origins: Vec<String>,
    /// HTTP methods it may be sent with; none: any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub methods: Vec<String>,
    /// Rows that may use it, by key; with `categories` empty too, every row may.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keys: Vec<String>,
    /// Rows that may use it, by category.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub categories: Vec<String>,
}

/// Why a credential may not go where a row would send it; `code` is stable (a check code, and
/// the runner's `ERR:auth:CODE:ENV`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BindingRefusal {
    pub code: &'static str,
    pub env: String,
    pub message: String,
}

/// The origin a binding names, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Origin {
    scheme: String,
    host: Host<String>,
    port: Option<u16>,
    /// The path the request's must be, or start with at a segment boundary.
    path: String,
}

/// `stdio:`: the binding that lets `env:` hand a variable to an MCP server's process.
pub const STDIO: &str = "stdio:";

/// Is this a variable of the dispatcher itself, never a row's to name?
pub fn is_reserved(env: &str) -> bool {
    env.starts_with("CAPDIR_")
}

fn parse_origin(text: &str) -> Result<Origin, String> {
    let url = Url::parse(text.trim()).map_err(|e| format!("`{text}` is not a URL: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!(
            "`{text}`: an origin is http:// or https:// (or `{STDIO}` for an MCP server's process)"
        ));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(format!(
            "`{text}` carries a user or password; name the origin only"
        ));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(format!(
            "`{text}` has a query or fragment; name the origin and a path prefix only"
        ));
    }
    let host = url
        .host()
        .ok_or_else(|| format!("`{text}` names no host"))?
        .to_owned();
    Ok(Origin {
        scheme: url.scheme().to_string(),
        host,
        port: url.port_or_known_default(),
        path: url.path().to_string(),
    })
}

impl Origin {
    fn admits(&self, url: &Url) -> bool {
        self.same_origin(url) && self.admits_path(url)
    }

    fn same_origin(&self, url: &Url) -> bool {
        url.host().is_some_and(|host| {
            url.scheme() == self.scheme
                && host.to_owned() == self.host
                && url.port_or_known_default() == self.port
        })
    }

    fn admits_path(&self, url: &Url) -> bool {
        let prefix = self.path.as_str();
        let path = url.path();
        prefix == "/"
            || path == prefix
            || (path.starts_with(prefix)
                && (prefix.ends_with('/') || path[prefix.len()..].starts_with('/')))
    }
}

/// A `bindings.yaml` that could not be read; `line` and `col` where serde_yaml says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    pub line: usize,
    pub col: usize,
    pub message: String,
}

impl Bindings {
    /// Read a bindings file (YAML, or JSON, which is YAML).
    pub fn parse(bytes: &[u8]) -> Result<Bindings, ParseError> {
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(Bindings::default());
        }
        serde_yaml::from_slice::<Bindings>(bytes).map_err(|e| {
            let (line, col) = e.location().map_or((1, 1), |l| (l.line(), l.column()));
            ParseError {
                line,
                col,
                message: e.to_string(),
            }
        })
    }

    /// What is wrong with the bindings themselves, by variable: a reserved or malformed name,
    /// an origin that is not one, a method that is not one.
    pub fn problems(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for (env, b) in &self.credentials {
            if !crate::row::credential::is_env_name(env) {
                out.push((
                    env.clone(),
                    format!("`{env}` is not an environment-variable name"),
                ));
            }
            if is_reserved(env) {
                out.push((
                    env.clone(),
                    format!("`{env}` is the dispatcher's own; no row may be given it"),
                ));
            }
            if b.origins.is_empty() {
                out.push((env.clone(), format!("`{env}` names no origin it may go to")));
            }
            for o in b.origins.iter().filter(|o| o.trim() != STDIO) {
                if let Err(e) = parse_origin(o) {
                    out.push((env.clone(), e));
                }
            }
            for m in &b.methods {
                if m.is_empty() || !m.bytes().all(|c| c.is_ascii_uppercase()) {
                    out.push((
                        env.clone(),
                        format!("`{m}` is not an HTTP method in capitals"),
                    ));
                }
            }
        }
        out
    }

    /// Does any binding name `url`'s origin (and path prefix) as a place its credential may
    /// go? Such an origin is the owner's trusted peer: it may be sent the trace context.
    pub fn names_origin(&self, url: &Url) -> bool {
        url.username().is_empty()
            && url.password().is_none()
            && self.credentials.values().any(|b| {
                b.origins
                    .iter()
                    .filter_map(|o| parse_origin(o).ok())
                    .any(|o| o.admits(url))
            })
    }

    /// May row `key` (in `category`) send `env` to `url` with `method`? Reserved names and
    /// names no binding holds are refused before anything is read.
    pub fn admit(
        &self,
        env: &str,
        url: &Url,
        method: &str,
        key: &str,
        category: &str,
    ) -> Result<(), BindingRefusal> {
        self.admit_to(env, url, method, key, category, Origin::admits)
    }

    /// `admit` by origin alone, the path left out: what `capdir check` can judge of a target
    /// whose path still has slots (the runner judges the whole URL once rendered).
    pub fn admit_origin(
        &self,
        env: &str,
        url: &Url,
        method: &str,
        key: &str,
        category: &str,
    ) -> Result<(), BindingRefusal> {
        self.admit_to(env, url, method, key, category, Origin::same_origin)
    }

    fn admit_to(
        &self,
        env: &str,
        url: &Url,
        method: &str,
        key: &str,
        category: &str,
        admits: fn(&Origin, &Url) -> bool,
    ) -> Result<(), BindingRefusal> {
        let binding = self.binding_for(env, key, category)?;
        let refuse = |code: &'static str, message: String| {
            Err(BindingRefusal {
                code,
                env: env.to_string(),
                message,
            })
        };
        if !url.username().is_empty() || url.password().is_some() {
            return refuse(
                "origin_not_bound",
                format!("{env} is never sent to a URL that carries a user or password"),
            );
        }
        let admitted = binding
            .origins
            .iter()
            .filter_map(|o| parse_origin(o).ok())
            .any(|o| admits(&o, url));
        if !admitted {
            return refuse(
                "origin_not_bound",
                format!(
                    "{env} may go to {}, not {}",
                    binding.origins.join(", "),
                    shown(url)
                ),
            );
        }
        if !binding.methods.is_empty() && !binding.methods.iter().any(|m| m == method) {
            return refuse(
                "method_not_bound",
                format!(
                    "{env} may be sent with {}, not {method}",
                    binding.methods.join(", ")
                ),
            );
        }
        Ok(())
    }

    /// May row `key` hand `env` to the MCP server it starts as a command (`env:`)?
    pub fn admit_stdio(&self, env: &str, key: &str, category: &str) -> Result<(), BindingRefusal> {
        let binding = self.binding_for(env, key, category)?;
        if binding.origins.iter().any(|o| o.trim() == STDIO) {
            return Ok(());
        }
        Err(BindingRefusal {
            code: "origin_not_bound",
            env: env.to_string(),
            message: format!(
                "{env} may go to {}, not to a process the row starts (bind it to `{STDIO}`)",
                binding.origins.join(", ")
            ),
        })
    }

    /// The binding of `env`, if row `key` in `category` may use it at all.
    pub fn binding_for(
        &self,
        env: &str,
        key: &str,
        category: &str,
    ) -> Result<&Binding, BindingRefusal> {
        let refuse = |code: &'static str, message: String| BindingRefusal {
            code,
            env: env.to_string(),
            message,
        };
        if is_reserved(env) {
            return Err(refuse(
                "reserved_credential",
                format!("{env} is the dispatcher's own; no row may use it"),
            ));
        }
        let Some(binding) = self.credentials.get(env) else {
            return Err(refuse(
                "unbound_credential",
                format!("no binding names {env}: the owner has not said where it may go"),
            ));
        };
        let any_row = binding.keys.is_empty() && binding.categories.is_empty();
        let listed = binding.keys.iter().any(|k| k == key)
            || (!category.is_empty() && binding.categories.iter().any(|c| c == category));
        if !any_row && !listed {
            return Err(refuse(
                "row_not_bound",
                format!("{env} is bound to other rows than {key}"),
            ));
        }
        Ok(binding)
    }
}

/// The catalogue's bindings and an operator's narrowing of them (`serve --bindings`): a
/// credential goes where both allow. Judged layer by layer, so no merge can widen what
/// either allows (a narrowing to other rows than the catalogue's allows none).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Layered {
    pub catalogue: Bindings,
    pub narrowing: Option<Bindings>,
}

impl Layered {
    /// `Bindings::names_origin` in both layers.
    pub fn names_origin(&self, url: &Url) -> bool {
        self.catalogue.names_origin(url)
            && self.narrowing.as_ref().is_none_or(|n| n.names_origin(url))
    }

    pub fn admit(
        &self,
        env: &str,
        url: &Url,
        method: &str,
        key: &str,
        category: &str,
    ) -> Result<(), BindingRefusal> {
        self.catalogue.admit(env, url, method, key, category)?;
        match &self.narrowing {
            Some(n) => n.admit(env, url, method, key, category),
            None => Ok(()),
        }
    }

    pub fn admit_stdio(&self, env: &str, key: &str, category: &str) -> Result<(), BindingRefusal> {
        self.catalogue.admit_stdio(env, key, category)?;
        match &self.narrowing {
            Some(n) => n.admit_stdio(env, key, category),
            None => Ok(()),
        }
    }
}

/// Where a row sends its credential, as far as the row alone says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Destination {
    /// An HTTP request: the target's origin (the path may still have slots) and method.
    Http { origin: Url, method: String },
    /// An MCP server the row starts as a command (`env:` hands it variables).
    Stdio,
    /// An agent row's model endpoint, which the dispatcher's provider table chooses.
    Model,
}

/// Where `row` sends its credential, when its target says (an unreadable target is the
/// gate's `bad_*_target` already).
pub fn destination_of(row: &crate::row::Row) -> Option<Destination> {
    use crate::row::mcp::{McpServer, McpTarget};
    if row.kind == crate::row::RowType::Agent {
        return Some(Destination::Model);
    }
    if row.is_mcp() || McpTarget::looks_like(&row.target) {
        return match McpTarget::parse(row.target.trim()).ok()?.server {
            McpServer::Stdio { .. } => Some(Destination::Stdio),
            McpServer::Http { url } => Some(Destination::Http {
                origin: Url::parse(&url).ok()?,
                method: "POST".into(),
            }),
        };
    }
    let target = crate::row::target::HttpTarget::parse(row.target.trim()).ok()?;
    Some(Destination::Http {
        origin: Url::parse(&format!("{}/", target.origin())).ok()?,
        method: target.method,
    })
}

/// A URL as a refusal may show it: scheme, host, port and path, never a userinfo or query.
fn shown(url: &Url) -> String {
    let mut s = format!("{}://{}", url.scheme(), url.host_str().unwrap_or(""));
    if let Some(p) = url.port() {
        s.push_str(&format!(":{p}"));
    }
    s.push_str(url.path());
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bindings(yaml: &str) -> Bindings {
        Bindings::parse(yaml.as_bytes()).expect("bindings")
    }

    fn url(s: &str) -> Url {
        Url::parse(s).expect("url")
    }

    const GH: &str = "credentials:\n  GITHUB_TOKEN:\n    origins: [\"https://api.github.com\"]\n    methods: [GET, POST]\n    categories: [code]\n  LOCAL_KEY:\n    origins: [\"http://127.0.0.1:9000/v1/\"]\n";

    #[test]
    fn a_credential_goes_only_to_its_origins() {
        let b = bindings(GH);
        let ok = |u: &str, m: &str| b.admit("GITHUB_TOKEN", &url(u), m, "GH_ROW", "code");
        assert_eq!(
            ok("https://api.github.com/repos/a/b/issues", "POST"),
            Ok(())
        );
        let code = |u: &str| ok(u, "GET").map_err(|r| r.code);
        for wrong in [
            "http://api.github.com/repos",           // scheme
            "https://api.github.com:8443/repos",     // port
            "https://api.github.com.evil.example/x", // suffix host
            "https://api.github.com./x",             // trailing dot
            "https://user@api.github.com/x",         // userinfo
            "https://evil.example/api.github.com",   // path that looks like the host
            "https://xn--80ak6aa92e.com/",           // an IDN host
            "https://[::1]/",                        // IPv6 literal
        ] {
            assert_eq!(code(wrong), Err("origin_not_bound"), "{wrong}");
        }
        // An encoded host is the same host once parsed: the client connects there too.
        assert_eq!(code("https://%61pi.github.com/x"), Ok(()));
        assert_eq!(
            ok("https://api.github.com/x", "DELETE").map_err(|r| r.code),
            Err("method_not_bound")
        );
        assert_eq!(
            b.admit(
                "GITHUB_TOKEN",
                &url("https://api.github.com/"),
                "GET",
                "OTHER",
                "text"
            )
            .map_err(|r| r.code),
            Err("row_not_bound")
        );
        assert_eq!(
            b.admit(
                "AWS_SECRET",
                &url("https://api.github.com/"),
                "GET",
                "X",
                "code"
            )
            .map_err(|r| r.code),
            Err("unbound_credential")
        );
        assert_eq!(
            b.admit(
                "CAPDIR_OWNER_KEY",
                &url("https://api.github.com/"),
                "GET",
                "X",
                "code"
            )
            .map_err(|r| r.code),
            Err("reserved_credential")
        );
        // A path prefix holds at segment boundaries, and IP hosts compare as addresses.
        let local = |u: &str| {
            b.admit("LOCAL_KEY", &url(u), "GET", "L", "")
                .map_err(|r| r.code)
        };
        assert_eq!(local("http://127.0.0.1:9000/v1/chat"), Ok(()));
        assert_eq!(local("http://127.0.0.1:9000/v1"), Err("origin_not_bound"));
        assert_eq!(
            local("http://127.0.0.1:9000/v10/x"),
            Err("origin_not_bound")
        );
        assert_eq!(
            local("http://0x7f.0.0.1:9000/v1/x"),
            Ok(()),
            "the parser's form"
        );
        assert_eq!(local("http://127.0.0.2:9000/v1/x"), Err("origin_not_bound"));
    }

    #[test]
    fn bad_bindings_are_named() {
        let b = bindings(
            "credentials:\n  CAPDIR_TOKEN_KEY:\n    origins: [\"https://x.example\"]\n  BAD:\n    origins: [\"ftp://x\", \"https://u:p@x.example\"]\n    methods: [get]\n  NONE:\n    origins: []\n",
        );
        let problems = b.problems();
        assert!(problems.iter().any(|(e, _)| e == "CAPDIR_TOKEN_KEY"));
        assert_eq!(
            problems.iter().filter(|(e, _)| e == "BAD").count(),
            3,
            "{problems:?}"
        );
        assert!(problems.iter().any(|(e, _)| e == "NONE"));
        assert!(Bindings::parse(b"credentials:\n  X:\n    origin: [a]\n").is_err());
        assert_eq!(Bindings::parse(b"  \n").unwrap(), Bindings::default());
    }

    #[test]
    fn an_operator_narrows_and_never_widens() {
        let ours = bindings(GH);
        let theirs = bindings(
            "credentials:\n  GITHUB_TOKEN:\n    origins: [\"https://api.github.com/repos/acme/\"]\n    methods: [GET]\n    keys: [GH_ROW]\n  EXTRA:\n    origins: [\"https://x.example\"]\n",
        );
        let both = Layered {
            catalogue: ours,
            narrowing: Some(theirs),
        };
        let ok = |u: &str, m: &str, key: &str, cat: &str| {
            both.admit("GITHUB_TOKEN", &url(u), m, key, cat)
                .map_err(|r| r.code)
        };
        assert_eq!(
            ok(
                "https://api.github.com/repos/acme/x",
                "GET",
                "GH_ROW",
                "code"
            ),
            Ok(())
        );
        assert_eq!(
            ok(
                "https://api.github.com/repos/other/x",
                "GET",
                "GH_ROW",
                "code"
            ),
            Err("origin_not_bound")
        );
        assert_eq!(
            ok(
                "https://api.github.com/repos/acme/x",
                "POST",
                "GH_ROW",
                "code"
            ),
            Err("method_not_bound")
        );
        // The catalogue lets every `code` row, the operator one key: only that key, and a
        // row of neither list is refused (no merge of the two lists widens them).
        assert_eq!(
            ok(
                "https://api.github.com/repos/acme/x",
                "GET",
                "OTHER",
                "code"
            ),
            Err("row_not_bound")
        );
        let code = |env: &str, u: &str| {
            both.admit(env, &url(u), "GET", "GH_ROW", "code")
                .map_err(|r| r.code)
        };
        assert_eq!(
            code("EXTRA", "https://x.example/"),
            Err("unbound_credential"),
            "not in the catalogue's"
        );
        assert_eq!(
            code("LOCAL_KEY", "http://127.0.0.1:9000/v1/x"),
            Err("unbound_credential"),
            "not in the operator's"
        );
    }

    proptest::proptest! {
        /// Any bytes as a bindings file, any text as an origin or a URL: an answer, never a
        /// panic; and whatever is admitted is the bound host.
        #[test]
        fn any_input_is_judged_without_panicking(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300),
            origin in "[a-z:/\\\\.@%0-9\\[\\]]{0,40}",
            target in "(https?://)?[a-z0-9.:@%\\[\\]/]{0,40}",
        ) {
            let _ = Bindings::parse(&bytes).map(|b| b.problems());
            let yaml = format!("credentials:\n  T:\n    origins: [{origin:?}]\n");
            if let Ok(b) = Bindings::parse(yaml.as_bytes()) {
                let _ = b.problems();
                if let Ok(u) = Url::parse(&target)
                    && b.admit("T", &u, "GET", "K", "c").is_ok()
                {
                    let bound = Url::parse(&origin).expect("an admitting origin parses");
                    proptest::prop_assert_eq!(u.host(), bound.host());
                }
            }
        }
    }
}
