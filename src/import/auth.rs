//! Security schemes as a row's `auth`: each scheme the document declares is mapped once to
//! one of the credential forms rows have (`bearer:ENV`, `basic:ENV`, `headers:{…}`,
//! `query:param=ENV`), with an environment-variable name made from the prefix; an operation
//! takes the first of its alternatives that maps. What cannot be mapped (API keys in
//! cookies, digest, mutual TLS) is said, never guessed.

use crate::import::document::Version;
use serde_json::{Map, Value as Json};
use std::collections::BTreeMap;

/// How one scheme is applied, or why it cannot be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scheme {
    Bearer {
        env: String,
        oauth: bool,
    },
    /// An OAuth 2 scheme with a token endpoint: the client-credentials grant, or the
    /// refresh-token grant for flows a person authorizes (authorization code, password).
    OAuth {
        token_url: String,
        client_id: String,
        client_secret: String,
        refresh_token: Option<String>,
    },
    Basic {
        env: String,
    },
    Header {
        name: String,
        env: String,
    },
    Query {
        param: String,
        env: String,
    },
    Unmappable(String),
}

/// The document's schemes, by name.
#[derive(Debug, Clone, Default)]
pub struct Schemes {
    by_name: BTreeMap<String, Scheme>,
}

/// An environment-variable name from free text: `X-Api-Key` → `X_API_KEY`.
pub fn env_part(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_uppercase());
        } else if !out.ends_with('_') && !out.is_empty() {
            out.push('_');
        }
    }
    out.trim_end_matches('_').to_string()
}

impl Schemes {
    /// Read `components.securitySchemes` (3.x) or `securityDefinitions` (2.0); `base` is the
    /// start of every variable name (the prefix, or the API's name).
    pub fn read(root: &Json, version: Version, base: &str) -> Schemes {
        let defs = match version {
            Version::Swagger2 => root.get("securityDefinitions"),
            _ => root.pointer("/components/securitySchemes"),
        };
        let mut by_name = BTreeMap::new();
        let mut used: BTreeMap<String, String> = BTreeMap::new();
        for (name, def) in defs.and_then(Json::as_object).into_iter().flatten() {
            let scheme = match def.as_object() {
                Some(def) => map_one(def, base),
                None => Scheme::Unmappable("its definition is not a mapping".into()),
            };
            // Two schemes must not share a variable: the second is told apart by its name.
            let scheme = match scheme {
                Scheme::Bearer { env, oauth } => Scheme::Bearer {
                    env: distinct(env, name, &mut used),
                    oauth,
                },
                Scheme::Basic { env } => Scheme::Basic {
                    env: distinct(env, name, &mut used),
                },
                Scheme::OAuth {
                    token_url,
                    client_id,
                    client_secret,
                    refresh_token,
                } => Scheme::OAuth {
                    token_url,
                    client_id: distinct(client_id, name, &mut used),
                    client_secret: distinct(client_secret, name, &mut used),
                    refresh_token: refresh_token.map(|r| distinct(r, name, &mut used)),
                },
                Scheme::Header { name: h, env } => Scheme::Header {
                    name: h,
                    env: distinct(env, name, &mut used),
                },
                Scheme::Query { param, env } => Scheme::Query {
                    param,
                    env: distinct(env, name, &mut used),
                },
                other => other,
            };
            by_name.insert(name.clone(), scheme);
        }
        Schemes { by_name }
    }

    /// Every scheme, for the summary.
    pub fn all(&self) -> impl Iterator<Item = (&String, &Scheme)> {
        self.by_name.iter()
    }

    /// The `auth` of an operation with these security requirements (`None`: the document
    /// says nothing, so none), and what could not be mapped.
    pub fn auth_for(&self, requirements: Option<&Json>) -> (String, Vec<String>) {
        let Some(Json::Array(alternatives)) = requirements else {
            return (String::new(), Vec::new());
        };
        let mut why_not = Vec::new();
        for alt in alternatives {
            let Some(alt) = alt.as_object() else { continue };
            if alt.is_empty() {
                // `{}` among the alternatives: the operation may be called without one.
                return (String::new(), Vec::new());
            }
            match self.combine(alt) {
                Ok(auth) => return (auth, Vec::new()),
                Err(e) => why_not.push(e),
            }
        }
        if why_not.is_empty() {
            return (String::new(), Vec::new());
        }
        why_not.dedup();
        (String::new(), why_not)
    }

    /// One alternative (schemes that apply together) as one `auth`.
    fn combine(&self, alt: &Map<String, Json>) -> Result<String, String> {
        let mut schemes = Vec::new();
        for name in alt.keys() {
            match self.by_name.get(name) {
                Some(Scheme::Unmappable(why)) => {
                    return Err(format!("security scheme `{name}` cannot be mapped: {why}"));
                }
                Some(s) => schemes.push(s),
                None => return Err(format!("security scheme `{name}` is not defined")),
            }
        }
        match schemes.as_slice() {
            [Scheme::Bearer { env, .. }] => Ok(format!("bearer:{env}")),
            [
                Scheme::OAuth {
                    token_url,
                    client_id,
                    client_secret,
                    refresh_token,
                },
            ] => {
                let mut o = Map::new();
                o.insert("token_url".into(), Json::String(token_url.clone()));
                o.insert("client_id".into(), Json::String(format!("${client_id}")));
                o.insert(
                    "client_secret".into(),
                    Json::String(format!("${client_secret}")),
                );
                if let Some(r) = refresh_token {
                    o.insert("refresh_token".into(), Json::String(format!("${r}")));
                }
                Ok(format!("oauth:{}", Json::Object(o)))
            }
            [Scheme::Basic { env }] => Ok(format!("basic:{env}")),
            [Scheme::Query { param, env }] => Ok(format!("query:{param}={env}")),
            several if several.iter().all(|s| matches!(s, Scheme::Header { .. })) => {
                let mut headers = Map::new();
                for s in several {
                    if let Scheme::Header { name, env } = s {
                        headers.insert(name.clone(), Json::String(format!("${env}")));
                    }
                }
                Ok(format!("headers:{}", Json::Object(headers)))
            }
            _ => Err(format!(
                "schemes {} apply together, and a row carries one credential (or several headers)",
                alt.keys()
                    .map(|k| format!("`{k}`"))
                    .collect::<Vec<_>>()
                    .join(" and ")
            )),
        }
    }
}

fn distinct(env: String, scheme: &str, used: &mut BTreeMap<String, String>) -> String {
    let env = match used.get(&env) {
        Some(owner) if owner != scheme => format!("{env}_{}", env_part(scheme)),
        _ => env,
    };
    used.insert(env.clone(), scheme.to_string());
    env
}

fn map_one(def: &Map<String, Json>, base: &str) -> Scheme {
    let text = |k: &str| def.get(k).and_then(Json::as_str).unwrap_or("");
    let var = |suffix: &str| {
        let suffix = env_part(suffix);
        if base.is_empty() {
            suffix
        } else {
            format!("{base}_{suffix}")
        }
    };
    match text("type") {
        "http" => match text("scheme").to_ascii_lowercase().as_str() {
            "bearer" => Scheme::Bearer {
                env: var("TOKEN"),
                oauth: false,
            },
            "basic" => Scheme::Basic {
                env: var("BASIC_AUTH"),
            },
            other => Scheme::Unmappable(format!(
                "HTTP `{other}` authentication has no credential form in rows (bearer and basic do)"
            )),
        },
        "basic" => Scheme::Basic {
            env: var("BASIC_AUTH"),
        },
        "oauth2" => match oauth_token_url(def) {
            Some((token_url, person)) => Scheme::OAuth {
                token_url,
                client_id: var("CLIENT_ID"),
                client_secret: var("CLIENT_SECRET"),
                refresh_token: person.then(|| var("REFRESH_TOKEN")),
            },
            // No token endpoint (the implicit flow): an access token got elsewhere.
            None => Scheme::Bearer {
                env: var("TOKEN"),
                oauth: true,
            },
        },
        "openIdConnect" => Scheme::Bearer {
            env: var("TOKEN"),
            oauth: true,
        },
        "apiKey" => {
            let name = text("name");
            let part = env_part(name);
            if name.is_empty() || part.is_empty() {
                return Scheme::Unmappable("its `name` is missing".into());
            }
            match text("in") {
                "header" => Scheme::Header {
                    name: name.to_string(),
                    env: var(&part),
                },
                "query"
                    if name
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c)) =>
                {
                    Scheme::Query {
                        param: name.to_string(),
                        env: var(&part),
                    }
                }
                "query" => Scheme::Unmappable(format!(
                    "query parameter `{name}` has characters a `query:` credential cannot name"
                )),
                "cookie" => Scheme::Unmappable(
                    "an API key in a cookie has no credential form in rows".into(),
                ),
                other => Scheme::Unmappable(format!("an API key `in: {other}` is not known")),
            }
        }
        "mutualTLS" => Scheme::Unmappable("mutual TLS has no credential form in rows".into()),
        other => Scheme::Unmappable(format!("scheme type `{other}` is not known")),
    }
}

/// The token endpoint of an OAuth 2 scheme (an absolute http(s) URL), and whether its flow is
/// one a person authorizes (so the row needs a refresh token): the client-credentials flow
/// first, then authorization code and password. Swagger 2.0 (`flow`, `tokenUrl`) and OpenAPI
/// 3 (`flows.*.tokenUrl`) alike.
fn oauth_token_url(def: &Map<String, Json>) -> Option<(String, bool)> {
    let absolute = |u: &str| {
        url::Url::parse(u)
            .ok()
            .filter(|u| matches!(u.scheme(), "https" | "http") && u.host_str().is_some())
            .map(|_| u.to_string())
    };
    if let Some(flows) = def.get("flows").and_then(Json::as_object) {
        for (flow, person) in [
            ("clientCredentials", false),
            ("authorizationCode", true),
            ("password", true),
        ] {
            if let Some(u) = flows
                .get(flow)
                .and_then(|f| f.get("tokenUrl"))
                .and_then(Json::as_str)
                .and_then(absolute)
            {
                return Some((u, person));
            }
        }
        return None;
    }
    let person = match def.get("flow").and_then(Json::as_str)? {
        "application" => false,
        "accessCode" | "password" => true,
        _ => return None,
    };
    let u = def
        .get("tokenUrl")
        .and_then(Json::as_str)
        .and_then(absolute)?;
    Some((u, person))
}

impl Scheme {
    /// How the summary names it.
    pub fn describe(&self) -> String {
        match self {
            Scheme::Bearer { env, oauth: false } => format!("bearer:{env}"),
            Scheme::Bearer { env, oauth: true } => {
                format!("bearer:{env} (OAuth 2 / OpenID: put an access token in {env})")
            }
            Scheme::Basic { env } => format!("basic:{env} (user:password)"),
            Scheme::OAuth {
                token_url,
                client_id,
                client_secret,
                refresh_token,
            } => format!(
                "oauth: {client_id} and {client_secret}{} at {token_url}",
                refresh_token
                    .as_ref()
                    .map(|r| format!(", refresh token {r}"))
                    .unwrap_or_default()
            ),
            Scheme::Header { name, env } => format!("header {name} from {env}"),
            Scheme::Query { param, env } => format!("query:{param}={env}"),
            Scheme::Unmappable(why) => format!("not mapped: {why}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::row::credential::Credential;
    use serde_json::json;

    #[test]
    fn schemes_map_to_credential_forms() {
        let doc = json!({"components": {"securitySchemes": {
            "bearer": {"type": "http", "scheme": "bearer"},
            "basic": {"type": "http", "scheme": "basic"},
            "key_header": {"type": "apiKey", "in": "header", "name": "X-API-KEY"},
            "key_query": {"type": "apiKey", "in": "query", "name": "apiKey"},
            "key_cookie": {"type": "apiKey", "in": "cookie", "name": "k"},
            "oauth": {"type": "oauth2", "flows": {}},
            "machines": {"type": "oauth2", "flows": {"clientCredentials": {
                "tokenUrl": "https://auth.shop.example/oauth/token", "scopes": {}}}},
            "people": {"type": "oauth2", "flows": {"authorizationCode": {
                "authorizationUrl": "https://auth.shop.example/authorize",
                "tokenUrl": "https://auth.shop.example/oauth/token", "scopes": {}}}},
            "digest": {"type": "http", "scheme": "digest"}
        }}});
        let s = Schemes::read(&doc, Version::OpenApi30, "SHOP");
        let auth = |req: Json| s.auth_for(Some(&req));
        assert_eq!(auth(json!([{"bearer": []}])).0, "bearer:SHOP_TOKEN");
        assert_eq!(auth(json!([{"basic": []}])).0, "basic:SHOP_BASIC_AUTH");
        assert_eq!(
            auth(json!([{"key_header": []}])).0,
            r#"headers:{"X-API-KEY":"$SHOP_X_API_KEY"}"#
        );
        assert_eq!(
            auth(json!([{"key_query": []}])).0,
            "query:apiKey=SHOP_APIKEY"
        );
        // OAuth's token shares the bearer scheme's variable name, so it is told apart.
        assert_eq!(
            auth(json!([{"oauth": ["write"]}])).0,
            "bearer:SHOP_TOKEN_OAUTH"
        );
        // A token endpoint makes an `oauth:` credential: client credentials, or a refresh
        // token for a flow a person authorized.
        let machines = auth(json!([{"machines": []}])).0;
        assert_eq!(
            Credential::parse(&machines).unwrap(),
            Some(Credential::OAuth(Box::new(crate::row::credential::OAuth {
                token_url: "https://auth.shop.example/oauth/token".into(),
                client_id: "SHOP_CLIENT_ID".into(),
                client_secret: "SHOP_CLIENT_SECRET".into(),
                refresh_token: None,
                scope: None,
            })))
        );
        let people = auth(json!([{"people": []}])).0;
        match Credential::parse(&people).unwrap() {
            Some(Credential::OAuth(o)) => {
                assert_eq!(o.refresh_token.as_deref(), Some("SHOP_REFRESH_TOKEN"));
                assert_eq!(
                    o.client_id, "SHOP_CLIENT_ID_PEOPLE",
                    "told apart from machines'"
                );
            }
            other => panic!("{people}: {other:?}"),
        }
        // The first alternative that maps wins; `{}` means none is needed.
        assert_eq!(
            auth(json!([{"key_cookie": []}, {"basic": []}])).0,
            "basic:SHOP_BASIC_AUTH"
        );
        assert_eq!(auth(json!([{}, {"basic": []}])).0, "");
        let (none, why) = auth(json!([{"digest": []}]));
        assert_eq!(none, "");
        assert!(why[0].contains("digest"), "{why:?}");
        let (_, why) = auth(json!([{"bearer": [], "basic": []}]));
        assert!(why[0].contains("apply together"), "{why:?}");
        for (req, _) in [
            (json!([{"key_header": []}]), ()),
            (json!([{"key_query": []}]), ()),
        ] {
            let a = s.auth_for(Some(&req)).0;
            assert!(Credential::parse(&a).is_ok(), "{a}");
        }
    }
}
