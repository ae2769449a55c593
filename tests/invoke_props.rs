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
