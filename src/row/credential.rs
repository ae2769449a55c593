//! Credentials a row names: how to apply a secret held in an environment variable.
//!
//! A row never holds a secret, only the variable's name (`bearer:GITHUB_TOKEN`). This module
//! parses the four forms of DESIGN.md §1 once, for `check` and for the http runner alike, and
//! a fifth for MCP servers started as commands: `env:NAME,NAME`, the variables handed to the
//! server's process.

use serde::Serialize;

/// How a row applies its credential.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "form", rename_all = "lowercase")]
pub enum Credential {
    /// `bearer:ENV` → `Authorization: Bearer $ENV`.
    Bearer { env: String },
    /// `basic:ENV`, the variable holding `user:pass`.
    Basic { env: String },
    /// `headers:{"X-Api-Key":"$ENV"}`: header values with `$ENV` references.
    Headers { headers: Vec<(String, String)> },
    /// `query:param=ENV` → `?param=$ENV`.
    Query { param: String, env: String },
    /// `env:A,B`: these variables are put into the environment of an MCP server the row starts
    /// as a command (`runner: mcp`, `mcp+stdio:`), and nothing else of the dispatcher's.
    Env { names: Vec<String> },
    /// `oauth:{"token_url": "https://…", "client_id": "$ID", "client_secret": "$SECRET",
    /// "refresh_token": "$RT", "scope": "…"}`: an OAuth 2.0 access token (RFC 6749) fetched
    /// from the token endpoint with the client-credentials grant, or the refresh-token grant
    /// when a refresh token is named, and sent as `Authorization: Bearer`.
    OAuth(Box<OAuth>),
}

/// What an `oauth:` credential names: the token endpoint and the variables of the grant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OAuth {
    pub token_url: String,
    /// Variables holding the client's id and secret.
    pub client_id: String,
    pub client_secret: String,
    /// The variable holding a refresh token, for the refresh-token grant.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refresh_token: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
}

/// Why an `auth` string could not be read; `code` is a stable check code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CredentialError {
    pub code: &'static str,
    pub message: String,
    pub help: String,
}

pub const PREFIXES: &[&str] = &["bearer", "basic", "headers", "query", "env", "oauth"];

/// An environment-variable name: `[A-Z_][A-Z0-9_]*`.
pub fn is_env_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && (b[0].is_ascii_uppercase() || b[0] == b'_')
        && b.iter()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == b'_')
}

fn bad_env(env: &str, form: &str) -> CredentialError {
    if env.is_empty() {
        return CredentialError {
            code: "bad_auth_env",
            message: format!("`{form}:` names no environment variable"),
            help: format!("name the variable that holds the secret: `{form}:MY_SERVICE_TOKEN`"),
        };
    }
    CredentialError {
        code: "bad_auth_env",
        message: format!("`{env}` is not an environment-variable name"),
        help: format!(
            "name the variable that holds the secret, in capitals: `{form}:MY_SERVICE_TOKEN`"
        ),
    }
}

impl Credential {
    /// Parse a row's `auth`; `Ok(None)` when it is empty.
    pub fn parse(auth: &str) -> Result<Option<Credential>, CredentialError> {
        let auth = auth.trim();
        if auth.is_empty() {
            return Ok(None);
        }
        let Some((prefix, rest)) = auth.split_once(':') else {
            return Err(unknown_prefix(auth));
        };
        let rest = rest.trim();
        match prefix {
            "bearer" | "basic" => {
                if !is_env_name(rest) {
                    return Err(bad_env(rest, prefix));
                }
                let env = rest.to_string();
                Ok(Some(if prefix == "bearer" {
                    Credential::Bearer { env }
                } else {
                    Credential::Basic { env }
                }))
            }
            "query" => {
                let Some((param, env)) = rest.split_once('=') else {
                    return Err(CredentialError {
                        code: "bad_auth_env",
                        message: format!("`query:{rest}` has no `param=ENV`"),
                        help: "write `query:api_key=MY_SERVICE_KEY`".into(),
                    });
                };
                if param.is_empty()
                    || !param
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c))
                {
                    return Err(CredentialError {
                        code: "bad_auth_env",
                        message: format!("`{param}` is not a query parameter name"),
                        help: "write `query:api_key=MY_SERVICE_KEY`".into(),
                    });
                }
                if !is_env_name(env) {
                    return Err(bad_env(env, "query:param="));
                }
                Ok(Some(Credential::Query {
                    param: param.to_string(),
                    env: env.to_string(),
                }))
            }
            "env" => {
                let names: Vec<String> = rest.split(',').map(|n| n.trim().to_string()).collect();
                if let Some(bad) = names.iter().find(|n| !is_env_name(n)) {
                    return Err(bad_env(bad, "env"));
                }
                Ok(Some(Credential::Env { names }))
            }
            "headers" => {
                let map: serde_json::Map<String, serde_json::Value> = serde_json::from_str(rest)
                    .map_err(|e| CredentialError {
                        code: "bad_auth_env",
                        message: format!("`headers:` must be followed by a JSON object: {e}"),
                        help: r#"write `headers:{"X-Api-Key":"$MY_SERVICE_KEY"}`"#.into(),
                    })?;
                let mut headers = Vec::new();
                for (name, value) in map {
                    let Some(value) = value.as_str() else {
                        return Err(CredentialError {
                            code: "bad_auth_env",
                            message: format!("header `{name}` must be a string"),
                            help: r#"write `headers:{"X-Api-Key":"$MY_SERVICE_KEY"}`"#.into(),
                        });
                    };
                    let envs = env_refs(value);
                    if envs.is_empty() {
                        return Err(CredentialError {
                            code: "bad_auth_env",
                            message: format!("header `{name}` names no `$ENV` variable"),
                            help: r#"reference the secret's variable: `{"X-Api-Key":"$MY_SERVICE_KEY"}`"#.into(),
                        });
                    }
                    headers.push((name, value.to_string()));
                }
                if headers.is_empty() {
                    return Err(CredentialError {
                        code: "bad_auth_env",
                        message: "`headers:{}` sets no header".into(),
                        help: r#"write `headers:{"X-Api-Key":"$MY_SERVICE_KEY"}`"#.into(),
                    });
                }
                Ok(Some(Credential::Headers { headers }))
            }
            "oauth" => parse_oauth(rest).map(|o| Some(Credential::OAuth(Box::new(o)))),
            _ => Err(unknown_prefix(prefix)),
        }
    }

    /// The environment variables this credential reads.
    pub fn envs(&self) -> Vec<String> {
        match self {
            Credential::Bearer { env }
            | Credential::Basic { env }
            | Credential::Query { env, .. } => {
                vec![env.clone()]
            }
            Credential::Headers { headers } => {
                headers.iter().flat_map(|(_, v)| env_refs(v)).collect()
            }
            Credential::Env { names } => names.clone(),
            Credential::OAuth(o) => [
                Some(&o.client_id),
                Some(&o.client_secret),
                o.refresh_token.as_ref(),
            ]
            .into_iter()
            .flatten()
            .cloned()
            .collect(),
        }
    }

    /// A stable name for breaker state and receipts: the form and the variables, never values.
    pub fn name(&self) -> String {
        self.envs().join("+")
    }

    pub fn form(&self) -> &'static str {
        match self {
            Credential::Bearer { .. } => "bearer",
            Credential::Basic { .. } => "basic",
            Credential::Headers { .. } => "headers",
            Credential::Query { .. } => "query",
            Credential::Env { .. } => "env",
            Credential::OAuth(_) => "oauth",
        }
    }
}

fn oauth_error(message: impl Into<String>) -> CredentialError {
    CredentialError {
        code: "bad_auth_env",
        message: message.into(),
        help: r#"write `oauth:{"token_url": "https://auth.example.com/oauth/token", "client_id": "$MY_CLIENT_ID", "client_secret": "$MY_CLIENT_SECRET"}` (and "refresh_token": "$MY_REFRESH_TOKEN" for the refresh-token grant)"#.into(),
    }
}

/// `oauth:{…}`: the token endpoint (an absolute http(s) URL) and `$ENV` references.
fn parse_oauth(rest: &str) -> Result<OAuth, CredentialError> {
    let map: serde_json::Map<String, serde_json::Value> = serde_json::from_str(rest)
        .map_err(|e| oauth_error(format!("`oauth:` must be followed by a JSON object: {e}")))?;
    let text = |name: &str| map.get(name).and_then(|v| v.as_str()).map(str::trim);
    if let Some(unknown) = map.keys().find(|k| {
        ![
            "token_url",
            "client_id",
            "client_secret",
            "refresh_token",
            "scope",
        ]
        .contains(&k.as_str())
    }) {
        return Err(oauth_error(format!("`oauth:` takes no field `{unknown}`")));
    }
    let token_url = text("token_url").ok_or_else(|| oauth_error("`oauth:` names no token_url"))?;
    let parsed = url::Url::parse(token_url)
        .map_err(|e| oauth_error(format!("token_url `{token_url}` is not a URL: {e}")))?;
    if !matches!(parsed.scheme(), "https" | "http") || parsed.host_str().is_none() {
        return Err(oauth_error(format!(
            "token_url `{token_url}` is not an http(s) URL"
        )));
    }
    let env = |name: &str, required: bool| -> Result<Option<String>, CredentialError> {
        match text(name) {
            None if required => Err(oauth_error(format!("`oauth:` names no {name}"))),
            None => Ok(None),
            Some(v) => match v.strip_prefix('$') {
                Some(env) if is_env_name(env) => Ok(Some(env.to_string())),
                _ => Err(oauth_error(format!(
                    "{name} must name the variable that holds it, as `$MY_{}`",
                    name.to_uppercase()
                ))),
            },
        }
    };
    Ok(OAuth {
        token_url: token_url.to_string(),
        client_id: env("client_id", true)?.unwrap_or_default(),
        client_secret: env("client_secret", true)?.unwrap_or_default(),
        refresh_token: env("refresh_token", false)?,
        scope: text("scope").filter(|s| !s.is_empty()).map(str::to_string),
    })
}

fn unknown_prefix(prefix: &str) -> CredentialError {
    CredentialError {
        code: "unknown_auth_prefix",
        message: format!("unknown auth form `{prefix}`"),
        help: "use bearer:ENV, basic:ENV, headers:{\"Header\":\"$ENV\"}, query:param=ENV or oauth:{\"token_url\": …, \"client_id\": \"$ID\", \"client_secret\": \"$SECRET\"}".into(),
    }
}

/// `$NAME` references in a header value template.
pub fn env_refs(value: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = value;
    while let Some(i) = rest.find('$') {
        rest = &rest[i + 1..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
            .collect();
        if is_env_name(&name) {
            rest = &rest[name.len()..];
            out.push(name);
        }
    }
    out
}

/// Replace `$ENV` references in a header value with values from `lookup`.
pub fn expand_env(value: &str, lookup: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = value;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        rest = &rest[i + 1..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
            .collect();
        if is_env_name(&name) {
            out.push_str(&lookup(&name).ok_or_else(|| name.clone())?);
            rest = &rest[name.len()..];
        } else {
            out.push('$');
        }
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms() {
        assert_eq!(
            Credential::parse("bearer:GITHUB_TOKEN").unwrap(),
            Some(Credential::Bearer {
                env: "GITHUB_TOKEN".into()
            })
        );
        assert_eq!(
            Credential::parse("query:appid=OWM_KEY").unwrap(),
            Some(Credential::Query {
                param: "appid".into(),
                env: "OWM_KEY".into()
            })
        );
        let h = Credential::parse(r#"headers:{"X-Api-Key":"$NEWS_KEY"}"#)
            .unwrap()
            .unwrap();
        assert_eq!(h.envs(), vec!["NEWS_KEY"]);
        assert_eq!(Credential::parse("").unwrap(), None);
        assert_eq!(
            Credential::parse("token:X").unwrap_err().code,
            "unknown_auth_prefix"
        );
        assert_eq!(
            Credential::parse("bearer:github-token").unwrap_err().code,
            "bad_auth_env"
        );
        assert_eq!(
            Credential::parse("bearer:").unwrap_err().code,
            "bad_auth_env"
        );
        let e = Credential::parse("env:GITHUB_TOKEN, NPM_TOKEN")
            .unwrap()
            .unwrap();
        assert_eq!(e.envs(), vec!["GITHUB_TOKEN", "NPM_TOKEN"]);
        assert_eq!(e.form(), "env");
        assert_eq!(Credential::parse("env:").unwrap_err().code, "bad_auth_env");
        assert_eq!(
            Credential::parse("env:A,lower").unwrap_err().code,
            "bad_auth_env"
        );
    }

    #[test]
    fn oauth_forms() {
        let o = Credential::parse(
            r#"oauth:{"token_url": "https://auth.example.com/t", "client_id": "$CID", "client_secret": "$CS", "refresh_token": "$RT", "scope": "read"}"#,
        )
        .unwrap()
        .unwrap();
        assert_eq!(o.envs(), vec!["CID", "CS", "RT"]);
        assert_eq!(o.form(), "oauth");
        for bad in [
            r#"oauth:{"client_id": "$CID", "client_secret": "$CS"}"#,
            r#"oauth:{"token_url": "ftp://x/t", "client_id": "$CID", "client_secret": "$CS"}"#,
            r#"oauth:{"token_url": "/relative", "client_id": "$CID", "client_secret": "$CS"}"#,
            r#"oauth:{"token_url": "https://a/t", "client_id": "CID", "client_secret": "$CS"}"#,
            r#"oauth:{"token_url": "https://a/t", "client_id": "$CID"}"#,
            r#"oauth:{"token_url": "https://a/t", "client_id": "$CID", "client_secret": "$CS", "extra": 1}"#,
            "oauth:not json",
        ] {
            assert_eq!(
                Credential::parse(bad).unwrap_err().code,
                "bad_auth_env",
                "{bad}"
            );
        }
    }

    proptest::proptest! {
        /// Any `auth` text parses or is refused with a code; it never panics, and whatever it
        /// accepts names only environment variables.
        #[test]
        fn any_auth_text_parses_or_is_refused(prefix in "(bearer|basic|headers|query|env|oauth|x)", rest in "\\PC{0,80}") {
            if let Ok(Some(c)) = Credential::parse(&format!("{prefix}:{rest}")) {
                proptest::prop_assert!(c.envs().iter().all(|e| is_env_name(e)));
            }
        }
    }

    #[test]
    fn expand() {
        let v = expand_env("Key $A_B!", &|n| (n == "A_B").then(|| "s3".to_string())).unwrap();
        assert_eq!(v, "Key s3!");
        assert_eq!(expand_env("$MISSING", &|_| None).unwrap_err(), "MISSING");
    }
}
