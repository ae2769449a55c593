//! Property tests: arguments stay in their slots. No argument moves an http call to another
//! origin or adds a query parameter, none breaks out of a JSON string, and no body makes an
//! invocation panic.

use capdir::invoke::rowset::RowSet;
use capdir::invoke::runner::http::{prepare, render_url};
use capdir::invoke::runner::{Call, Environment};
use capdir::invoke::{Input, Invoker, InvokerConfig};
use capdir::row::RowType;
use capdir::row::target::HttpTarget;
use capdir::row::template::{Context, Vars, render};
use proptest::prelude::*;
use std::path::Path;
use std::sync::OnceLock;

/// Strings built to attack a URL or JSON slot, mixed with arbitrary text.
fn hostile() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "[a-z@:/?#&=%.\\\\\\[\\] \"{}$|,+-]{0,24}",
        Just("evil.example.com".to_string()),
        Just("@evil.example.com/".to_string()),
        Just("../../admin?x=1#".to_string()),
        Just("x&appid=stolen".to_string()),
        Just("%2F%3F%23".to_string()),
        Just("\", \"admin\": true, \"x\": \"".to_string()),
        Just("\\\"}]".to_string()),
        Just("1, \"k\": 2".to_string()),
    ]
}

fn pieces() -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec(hostile(), 4..6)
}

fn query_keys(url: &reqwest::Url) -> Vec<String> {
    url.query_pairs().map(|(k, _)| k.into_owned()).collect()
}

const URLS: &[&str] = &[
    "GET http://127.0.0.1:8080/a/$1?q=$2&r=$3",
    "GET https://api.github.com/repos/$1/$2/issues?state=$3",
    "GET https://api.example.com:8443/$1+",
    "POST https://api.example.com/v1/x?fixed=1#frag$4",
];

proptest! {
    #[test]
    fn no_argument_changes_the_origin_or_adds_a_query_parameter(args in pieces()) {
        for t in URLS {
            let target = HttpTarget::parse(t).expect("target");
            let template_url = reqwest::Url::parse(&target.url.replace('$', "")).expect("template");
            let url = render_url(&target, Vars { args: &args, ..Default::default() })
                .expect("a rendered URL always parses with the row's origin");
            prop_assert_eq!(url.scheme(), template_url.scheme());
            prop_assert_eq!(url.host_str(), template_url.host_str());
            prop_assert_eq!(url.port_or_known_default(), template_url.port_or_known_default());
            prop_assert_eq!(query_keys(&url), query_keys(&template_url));
            prop_assert!(url.username().is_empty() && url.password().is_none());
        }
    }

    #[test]
    fn no_argument_breaks_out_of_a_json_template(args in pieces()) {
        let object = r#"{"title": "$1", "body": "$2+", "n": $3, "nested": {"k": ["$4", $1]}}"#;
        let vars = Vars { args: &args, ..Default::default() };
        let out = render(object, Context::Json, vars).expect("render");
        let v: serde_json::Value = serde_json::from_str(&out).expect("rendered JSON parses");
        let keys: Vec<&String> = v.as_object().expect("object").keys().collect();
        prop_assert_eq!(keys, vec!["title", "body", "n", "nested"]);
        prop_assert_eq!(v["title"].as_str(), Some(args[0].as_str()));
        prop_assert_eq!(v["nested"].as_object().map(|o| o.len()), Some(1));
        prop_assert_eq!(v["nested"]["k"].as_array().map(Vec::len), Some(2));

        let array = r#"["$1", $2, "$3+"]"#;
        let out = render(array, Context::Json, vars).expect("render");
        let v: serde_json::Value = serde_json::from_str(&out).expect("rendered array parses");
        prop_assert_eq!(v.as_array().map(Vec::len), Some(3));
    }
}

fn bundled() -> &'static Invoker {
    static INV: OnceLock<Invoker> = OnceLock::new();
    INV.get_or_init(|| {
        Invoker::new(
            RowSet::from_dir(Path::new("catalogue")).expect("catalogue"),
            InvokerConfig {
                env: Environment::fixed([
                    ("GITHUB_TOKEN", "t"),
                    ("OPENWEATHER_API_KEY", "owm-key-value"),
                    ("NEWSAPI_KEY", "n"),
                    ("MAILGUN_BASIC_AUTH", "api:k"),
                    ("SLACK_BOT_TOKEN", "s"),
                ]),
                bindings: std::sync::Arc::new(
                    capdir::row::binding::Bindings::parse(
                        &std::fs::read("catalogue/bindings.yaml").expect("bindings"),
                    )
                    .expect("bindings"),
                ),
                ..Default::default()
            },
        )
        .expect("invoker")
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// Every bundled http row, any body: the prepared request keeps the row's origin and only
    /// the row's query parameters (plus its credential's). Nothing is sent.
    #[test]
    fn bundled_http_rows_keep_their_origin(body in prop::collection::vec(hostile(), 0..6)) {
        let inv = bundled();
        let body = body.join("|");
        let pieces = capdir::row::args::split_body(&body);
        for key in inv.rows().keys() {
            let Some(c) = inv.rows().get(key) else { continue };
            if c.row.kind != RowType::Http {
                continue;
            }
            if pieces.len() < c.needed_args {
                continue;
            }
            let target = HttpTarget::parse(&c.row.target).expect("target");
            let template_url = reqwest::Url::parse(&target.url.replace('$', "")).expect("template");
            // A path an argument leads out of the credential's bound prefix (`..`) is refused
            // before anything is sent; anything else is prepared at the row's origin.
            let p = match prepare(&Call { callable: c, args: &pieces, invoker: inv, context: &Default::default() }, None) {
                Ok(p) => p,
                Err(f) => {
                    prop_assert_eq!(f.code.as_str(), "auth:origin_not_bound", "{}: {}", key, f.detail);
                    continue;
                }
            };
            prop_assert_eq!(p.url.origin(), template_url.origin(), "{}", key);
            let mut allowed = query_keys(&template_url);
            if let Ok(Some(capdir::row::credential::Credential::Query { param, .. })) = &c.credential {
                allowed.push(param.clone());
            }
            prop_assert_eq!(query_keys(&p.url), allowed, "{}", key);
            if let Some(b) = p.body.as_deref().filter(|_| Context::for_body(c.row.payload()) == Context::Json) {
                let v: serde_json::Value = serde_json::from_str(b).expect("JSON body parses");
                prop_assert!(v.is_object(), "{}", key);
            }
        }
    }

    /// No body makes any bundled fn or fn-only flow row panic, and each answers something.
    #[test]
    fn no_body_panics(body in hostile(), extra in prop::collection::vec(hostile(), 0..4)) {
        let inv = bundled();
        let body = if extra.is_empty() { body } else { format!("{body}|{}", extra.join("|")) };
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        for key in ["ECHO", "SHA256", "JSON_GET", "REGEX_EXTRACT", "BASE64_DECODE", "URL_DECODE",
                    "LAST_REPLY_OF", "HTTP_BODY", "TEXT_STATS", "HASH_AND_TIMESTAMP", "WORD_COUNT", "NOW", "NO_SUCH_KEY"] {
            let o = runtime.block_on(inv.invoke(key, Input::body(body.clone())));
            prop_assert!(o.is_success() || o.output.starts_with("ERR:"), "{}: {}", key, o.output);
        }
    }
}

/// Named arguments (issue 31): any value, in any slot kind — a query expression (plain,
/// exploded, brackets), a path piece, a form, multipart or JSON field, a header — arrives as
/// itself in its own slot, or the call is refused. Nothing else appears in the request.
mod named_slots {
    use capdir::row::expand::{body, expand_url, headers, lines};
    use proptest::prelude::*;
    use serde_json::{Map, Value as Json, json};

    /// `hostile()`, and line breaks and other control characters (`any::<String>()` makes
    /// none), the stuff of a header injection.
    fn text() -> impl Strategy<Value = String> {
        prop_oneof![
            super::hostile(),
            "[\\x00-\\x1f\\x7f a-z:]{0,12}",
            Just("v\r\nX-Admin: true".to_string()),
        ]
    }

    fn value() -> impl Strategy<Value = Json> {
        prop_oneof![
            text().prop_map(Json::String),
            prop::collection::vec(text(), 1..3).prop_map(|v| json!(v)),
            prop::collection::btree_map("[a-z&=%\\[\\]{}]{1,6}", text(), 1..3)
                .prop_map(|m| json!(m)),
        ]
    }

    fn pairs(text: &str) -> Vec<(String, String)> {
        url::form_urlencoded::parse(text.as_bytes())
            .into_owned()
            .collect()
    }

    /// The `(name, text)` pairs the bracket convention makes of `v` under `name`, as the
    /// receiver must see them.
    fn flat(name: &str, v: &Json) -> Result<Vec<(String, String)>, String> {
        let mut out = Vec::new();
        capdir::row::expand::flatten(name, v, &mut out)?;
        Ok(out)
    }

    /// What a receiver that reads the bracket convention (Stripe's, Rails', PHP's) makes of
    /// the pairs: `a[k][]=v` is `{"a": {"k": ["v"]}}`.
    fn unflatten(pairs: &[(String, String)]) -> Json {
        fn insert(node: &mut Json, segs: &[String], v: &str) {
            let Some((first, rest)) = segs.split_first() else {
                return;
            };
            if rest.is_empty() {
                match node {
                    Json::Array(a) if first.is_empty() => a.push(json!(v)),
                    Json::Object(m) => {
                        m.insert(first.clone(), json!(v));
                    }
                    _ => {}
                }
                return;
            }
            let fresh = if rest[0].is_empty() {
                json!([])
            } else {
                json!({})
            };
            let child = match node {
                Json::Object(m) => m.entry(first.clone()).or_insert(fresh),
                Json::Array(a) => {
                    a.push(fresh);
                    a.last_mut().expect("pushed")
                }
                _ => return,
            };
            insert(child, rest, v);
        }
        let mut root = json!({});
        for (k, v) in pairs {
            let (base, mut rest) = match k.find('[') {
                Some(i) => (&k[..i], &k[i..]),
                None => (k.as_str(), ""),
            };
            let mut segs = vec![base.to_string()];
            while let Some(inner) = rest.strip_prefix('[') {
                let Some(close) = inner.find(']') else { break };
                segs.push(inner[..close].to_string());
                rest = &inner[close + 1..];
            }
            insert(&mut root, &segs, v);
        }
        root
    }

    fn bracket_key(v: &Json) -> bool {
        v.as_object()
            .is_some_and(|m| m.keys().any(|k| k.contains(['[', ']'])))
    }

    proptest! {
        #[test]
        fn any_value_stays_in_its_slot(a in value(), b in value()) {
            let args: Map<String, Json> =
                [("a".to_string(), a.clone()), ("b".to_string(), b.clone())].into_iter().collect();
            // Query, brackets: exactly the pairs of `a` and `b`, in order, or a refusal.
            match expand_url("https://x.example/p{?a[],b[]}", &args) {
                Ok(url) => {
                    let url = reqwest::Url::parse(&url).expect("a URL");
                    prop_assert_eq!(url.host_str(), Some("x.example"));
                    prop_assert_eq!(url.path(), "/p");
                    prop_assert!(url.fragment().is_none());
                    let mut want = flat("a", &a).expect("flattened");
                    want.extend(flat("b", &b).expect("flattened"));
                    let got: Vec<(String, String)> = url.query_pairs().into_owned().collect();
                    prop_assert_eq!(unflatten(&got), json!({"a": a, "b": b}));
                    prop_assert_eq!(got, want);
                }
                Err(e) => prop_assert!(bracket_key(&a) || bracket_key(&b), "{}", e),
            }
            // Query, exploded and plain, and a path piece: the path keeps its segments.
            if let Ok(url) = expand_url("https://x.example/p{/a}{?b*}", &args) {
                let url = reqwest::Url::parse(&url).expect("a URL");
                prop_assert_eq!(url.host_str(), Some("x.example"));
                prop_assert!(url.fragment().is_none());
                // `/p` and the one piece `a` makes, whatever slashes it holds.
                let segments = url.path_segments().map(|s| s.count()).unwrap_or(0);
                prop_assert_eq!(segments, 2);
            }
            // Form and multipart: the fields are exactly the flattened arguments.
            let form = lines("{form:a,b}").expect("lines").expect("parse");
            match body(&form, &args) {
                Ok(Some(sent)) => {
                    let mut want = flat("a", &a).expect("flattened");
                    want.extend(flat("b", &b).expect("flattened"));
                    let got = pairs(&sent.text);
                    prop_assert_eq!(unflatten(&got), json!({"a": a, "b": b}));
                    prop_assert_eq!(got, want);
                }
                Ok(None) => prop_assert!(false, "a present field sends a body"),
                Err(_) => prop_assert!(bracket_key(&a) || bracket_key(&b)),
            }
            let multi = lines("{multipart:a}").expect("lines").expect("parse");
            if let Ok(Some(sent)) = body(&multi, &args) {
                let boundary = sent.content_type.rsplit('=').next().unwrap_or("").to_string();
                let parts = sent.text.matches(&format!("--{boundary}\r\n")).count();
                prop_assert_eq!(parts, flat("a", &a).expect("flattened").len());
            }
            // JSON: one object, its members exactly the arguments.
            let js = lines("{json:a,b}").expect("lines").expect("parse");
            let sent = body(&js, &args).expect("JSON never refuses").expect("a body");
            let parsed: Json = serde_json::from_str(&sent.text).expect("JSON");
            prop_assert_eq!(parsed, json!({"a": a, "b": b}));
            // A header: the value as given, or refused when it holds a control character.
            let h = lines("{header:X-A=a}").expect("lines").expect("parse");
            let text = match &a {
                Json::String(s) => s.clone(),
                Json::Array(items) => items
                    .iter()
                    .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string))
                    .collect::<Vec<_>>()
                    .join(","),
                other => other.to_string(),
            };
            match headers(&h, &args) {
                Ok(set) => {
                    prop_assert!(!text.chars().any(char::is_control), "a line break was let into a header");
                    prop_assert_eq!(set, vec![("X-A".to_string(), text)]);
                }
                Err(_) => prop_assert!(text.chars().any(char::is_control)),
            }
        }
    }
}
