//! Who may do what (DESIGN.md §8): every gate reason with its status code, in order, over both
//! ways a token travels (bearer header and run-now `share`); tampered tokens; `--open`;
//! affordances in contracts; receipts a token may read; and the limits (saturation with
//! Retry-After, upstream timeout, response cap, flow depth).
//!
//! The rows invoke a loopback server that counts its hits, so "refused before any runner" is
//! measured, not assumed: a refusal must leave the count unchanged.

use crate::common;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use capdir::access::token::{self, Claims, Risk, TokenKey};
use capdir::build::{self, Options};
use capdir::invoke::rowset::RowSet;
use capdir::ledger::{self, SqliteLedger, Verdict};
use capdir::row::call::fingerprint;
use capdir::serve::{AppState, Settings, app};
use common::Repo;
use http_body_util::BodyExt;
use serde_json::{Value as Json, json};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tower::ServiceExt;

const OWNER: &str = "tokens-test-owner-key";
const TOKEN_KEY: &str = "tokens-test-signing-key-0123456789abcdef";
const BASE: &str = "http://127.0.0.1:8080";

/// A loopback upstream: `/hit/…` counts, `/slow` answers after two seconds, `/big` sends 64 KiB.
async fn upstream() -> (std::net::SocketAddr, Arc<AtomicUsize>) {
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    let router = axum::Router::new()
        .route(
            "/hit/{x}",
            axum::routing::get(move |axum::extract::Path(x): axum::extract::Path<String>| {
                let counter = counter.clone();
                async move {
                    counter.fetch_add(1, Ordering::SeqCst);
                    format!("hit {x}")
                }
            }),
        )
        .route(
            "/slow/{x}",
            axum::routing::get(|| async {
                tokio::time::sleep(Duration::from_secs(2)).await;
                "late"
            }),
        )
        .route(
            "/big/{x}",
            axum::routing::get(|| async { "x".repeat(64 * 1024) }),
        );
    (common::serve(router).await, hits)
}

fn http_row(key: &str, category: &str, target: &str, extra: &str) -> String {
    format!(
        "key: {key}\ntype: http\ntarget: \"{target}\"\ncategory: {category}\n{extra}content: |\n  # WHAT: Calls the loopback upstream ({key}).\n  # WHEN_TO_USE: Tests.\n  # ARGS: $1=text\n  # EX: a\n  # OUTPUT: HTTP 200\n"
    )
}

fn flow_row(key: &str, next: &str) -> String {
    format!(
        "key: {key}\ntype: flow\ncategory: flows\ncontent: |\n  # WHAT: Calls {next}.\n  # WHEN_TO_USE: Tests.\n  # ARGS: $1=text\n  # EX: a\n  # OUTPUT: text\n  {next}: $1\n"
    )
}

const SCHEMA: &str =
    "input_schema:\n  type: object\n  properties:\n    text: {type: string}\n  required: [text]\n";

struct Fixture {
    repo: Repo,
    dir: tempfile::TempDir,
    hits: Arc<AtomicUsize>,
}

impl Fixture {
    fn site(&self) -> PathBuf {
        self.dir.path().join("site")
    }
    fn ledger_path(&self) -> PathBuf {
        self.dir.path().join("ledger.sqlite")
    }
    fn build(&self) {
        build::run(&Options::new(self.repo.catalogue(), self.site())).expect("build");
    }
}

async fn fixture() -> Fixture {
    let (addr, hits) = upstream().await;
    let repo = Repo::new();
    let up = format!("http://{addr}");
    repo.write(
        "HIT.yaml",
        &http_row("HIT", "net", &format!("GET {up}/hit/$1"), ""),
    );
    repo.write(
        "SENSITIVE_HIT.yaml",
        &http_row(
            "SENSITIVE_HIT",
            "net",
            &format!("GET {up}/hit/$1"),
            &format!("sensitive: true\n{SCHEMA}"),
        ),
    );
    repo.write(
        "CRED_HIT.yaml",
        &http_row(
            "CRED_HIT",
            "net",
            &format!("GET {up}/hit/$1"),
            "auth: bearer:TOKENS_TEST_UPSTREAM_KEY\n",
        ),
    );
    repo.write(
        "bindings.yaml",
        &common::bindings_yaml(&[("TOKENS_TEST_UPSTREAM_KEY", &up.to_string())]),
    );
    repo.write(
        "SLOW.yaml",
        &http_row("SLOW", "net", &format!("GET {up}/slow/$1"), ""),
    );
    repo.write(
        "BIG.yaml",
        &http_row("BIG", "net", &format!("GET {up}/big/$1"), ""),
    );
    repo.write(
        "OTHER.yaml",
        &common::fn_row("OTHER", "misc", "Echoes, in another category."),
    );
    for i in 1..=9 {
        let next = if i == 9 {
            "OTHER".to_string()
        } else {
            format!("DEEP_{}", i + 1)
        };
        repo.write(
            &format!("DEEP_{i}.yaml"),
            &flow_row(&format!("DEEP_{i}"), &next),
        );
    }
    repo.commit("rows", "2024-01-01T00:00:00Z");
    let f = Fixture {
        repo,
        dir: tempfile::tempdir().expect("tempdir"),
        hits,
    };
    f.build();
    f
}

fn settings(f: &Fixture) -> Settings {
    let ledger = SqliteLedger::open(&f.ledger_path()).expect("ledger");
    let mut s = Settings::new(f.site(), Arc::new(ledger));
    s.owner_key = Some(OWNER.into());
    s.token_key = Some(key());
    s.base_url = BASE.into();
    s.config.egress = capdir::invoke::egress::Egress::loopback();
    s.config.http.timeout = Duration::from_millis(400);
    s.config.http.max_body_bytes = 1024;
    s
}

fn key() -> TokenKey {
    TokenKey::from_text(TOKEN_KEY).expect("key")
}

fn claims(keys: &[&str]) -> Claims {
    Claims {
        exp: chrono::Utc::now().timestamp() + 3600,
        ..common::claims_for(BASE, keys)
    }
}

async fn send(state: &AppState, req: Request<Body>) -> (StatusCode, axum::http::HeaderMap, String) {
    let res = app(state.clone()).oneshot(req).await.expect("response");
    let status = res.status();
    let headers = res.headers().clone();
    let bytes = res.into_body().collect().await.expect("body").to_bytes();
    (
        status,
        headers,
        String::from_utf8_lossy(&bytes).into_owned(),
    )
}

fn enc(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
}

/// How the credential travels.
#[derive(Clone, Copy, Debug)]
enum Via {
    Bearer,
    Share,
}

async fn invoke(
    state: &AppState,
    via: Via,
    credential: Option<&str>,
    key: &str,
    body: Option<&str>,
) -> (StatusCode, Json) {
    let req = match via {
        Via::Bearer => {
            let mut payload = json!({"key": key});
            if let Some(b) = body {
                payload["body"] = json!(b);
            }
            let mut r = Request::post("/api/dispatch").header("content-type", "application/json");
            if let Some(c) = credential {
                r = r.header("authorization", format!("Bearer {c}"));
            }
            r.body(Body::from(payload.to_string())).expect("request")
        }
        Via::Share => {
            let mut uri = format!("/api/dispatch?invoke={key}");
            if let Some(b) = body {
                uri.push_str(&format!("&body={}", enc(b)));
            }
            if let Some(c) = credential {
                uri.push_str(&format!("&share={}", enc(c)));
            }
            Request::get(uri).body(Body::empty()).expect("request")
        }
    };
    let (st, _, text) = send(state, req).await;
    (
        st,
        serde_json::from_str(&text).unwrap_or_else(|_| panic!("json: {text}")),
    )
}

/// One row of the gate table.
struct Case {
    name: &'static str,
    claims: Claims,
    revoke: bool,
    key: &'static str,
    body: Option<&'static str>,
    /// 200, or the refusal's status and literal reason.
    want: (u16, &'static str),
}

fn case(
    name: &'static str,
    claims: Claims,
    key: &'static str,
    body: Option<&'static str>,
    want: (u16, &'static str),
) -> Case {
    Case {
        name,
        claims,
        revoke: false,
        key,
        body,
        want,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_gate_reason_with_its_status_in_order() {
    let f = fixture().await;
    let state = AppState::new(settings(&f)).expect("state");
    let rows = RowSet::from_site(&f.site()).expect("rows");
    let hit_fp = fingerprint(&rows.get("HIT").expect("HIT").row);
    let now = chrono::Utc::now().timestamp();

    let expired = |mut c: Claims| {
        c.exp = now - 1;
        c
    };
    let with = |f: &dyn Fn(&mut Claims), keys: &[&str]| {
        let mut c = claims(keys);
        f(&mut c);
        c
    };
    let mut cases = vec![
        case(
            "in scope by key",
            claims(&["HIT"]),
            "HIT",
            Some("a"),
            (200, ""),
        ),
        case(
            "in scope by category",
            with(&|c| c.categories = vec!["net".into()], &[]),
            "HIT",
            Some("a"),
            (200, ""),
        ),
        Case {
            revoke: true,
            ..case(
                "revoked",
                claims(&["HIT"]),
                "HIT",
                Some("a"),
                (403, "revoked"),
            )
        },
        case(
            "expired",
            expired(claims(&["HIT"])),
            "HIT",
            Some("a"),
            (401, "expired"),
        ),
        case(
            "audience",
            with(&|c| c.aud = "https://another.example".into(), &["HIT"]),
            "HIT",
            Some("a"),
            (403, "audience"),
        ),
        case(
            "scope",
            claims(&["OTHER"]),
            "HIT",
            Some("a"),
            (403, "scope"),
        ),
        case(
            "scope (another category)",
            with(&|c| c.categories = vec!["misc".into()], &[]),
            "HIT",
            Some("a"),
            (403, "scope"),
        ),
        case(
            "contract_changed",
            with(&|c| c.pin = Some("0".repeat(64)), &["HIT"]),
            "HIT",
            Some("a"),
            (409, "contract_changed"),
        ),
        case(
            "pinned to the current contract",
            with(&|c| c.pin = Some(hit_fp.clone()), &["HIT"]),
            "HIT",
            Some("a"),
            (200, ""),
        ),
        // A sensitive row above the token's ceiling is not refused but waits for a person
        // (202 PENDING_APPROVAL): tests/watcher.rs.
        case(
            "risk high runs a sensitive row",
            with(&|c| c.risk = Risk::High, &["SENSITIVE_HIT"]),
            "SENSITIVE_HIT",
            Some("a"),
            (200, ""),
        ),
        case(
            "fixed_body",
            with(&|c| c.body = Some("a".into()), &["HIT"]),
            "HIT",
            Some("b"),
            (403, "fixed_body"),
        ),
        case(
            "the fixed body, sent",
            with(&|c| c.body = Some("a".into()), &["HIT"]),
            "HIT",
            Some("a"),
            (200, ""),
        ),
        case(
            "the fixed body, filled in",
            with(&|c| c.body = Some("a".into()), &["HIT"]),
            "HIT",
            None,
            (200, ""),
        ),
        case(
            "payload_ceiling",
            with(&|c| c.max_payload = Some(3), &["HIT"]),
            "HIT",
            Some("abcd"),
            (413, "payload_ceiling"),
        ),
        case(
            "at the payload ceiling",
            with(&|c| c.max_payload = Some(3), &["HIT"]),
            "HIT",
            Some("abc"),
            (200, ""),
        ),
        // Order: with two faults, the earlier reason is the one answered.
        Case {
            revoke: true,
            ..case(
                "revoked before expired",
                expired(claims(&["HIT"])),
                "HIT",
                Some("a"),
                (403, "revoked"),
            )
        },
        case(
            "expired before audience",
            expired(with(&|c| c.aud = "https://x.example".into(), &["HIT"])),
            "HIT",
            Some("a"),
            (401, "expired"),
        ),
        case(
            "audience before scope",
            with(&|c| c.aud = "https://x.example".into(), &["OTHER"]),
            "HIT",
            Some("a"),
            (403, "audience"),
        ),
        case(
            "scope before contract_changed",
            with(&|c| c.pin = Some("0".repeat(64)), &["OTHER"]),
            "HIT",
            Some("a"),
            (403, "scope"),
        ),
        case(
            "contract_changed before risk",
            with(&|c| c.pin = Some("0".repeat(64)), &["SENSITIVE_HIT"]),
            "SENSITIVE_HIT",
            Some("a"),
            (409, "contract_changed"),
        ),
        case(
            "a person stands in for the risk ceiling, not for the fixed body",
            with(&|c| c.body = Some("z".into()), &["SENSITIVE_HIT"]),
            "SENSITIVE_HIT",
            Some("a"),
            (403, "fixed_body"),
        ),
        case(
            "fixed_body before payload_ceiling",
            with(
                &|c| {
                    c.body = Some("a".into());
                    c.max_payload = Some(1);
                },
                &["HIT"],
            ),
            "HIT",
            Some("abcdef"),
            (403, "fixed_body"),
        ),
        case(
            "a fixed body over the ceiling",
            with(
                &|c| {
                    c.body = Some("abcdef".into());
                    c.max_payload = Some(2);
                },
                &["HIT"],
            ),
            "HIT",
            None,
            (413, "payload_ceiling"),
        ),
    ];
    let mut refusals = 0;
    let mut successes = 0;
    for c in cases.drain(..) {
        if c.revoke {
            assert!(state.ledger().revoke(&c.claims.id).await.expect("revoke"));
        }
        let tok = key().sign(&c.claims);
        for via in [Via::Bearer, Via::Share] {
            let before = f.hits.load(Ordering::SeqCst);
            let (st, v) = invoke(&state, via, Some(&tok), c.key, c.body).await;
            let what = format!("{} via {via:?}: {v}", c.name);
            assert_eq!(st.as_u16(), c.want.0, "{what}");
            let ran = f.hits.load(Ordering::SeqCst) - before;
            if c.want.0 == 200 {
                successes += 1;
                assert_eq!(ran, 1, "{what}");
                assert_eq!(v["status"], "PROVEN_MATERIAL_RESULT", "{what}");
                let r = ledger::get(&f.ledger_path(), v["receipt"].as_str().expect("id"))
                    .expect("read")
                    .expect("receipt");
                assert_eq!(r.draft.actor, format!("token:{}", c.claims.id));
                continue;
            }
            refusals += 1;
            assert_eq!(ran, 0, "refused, yet the runner ran: {what}");
            assert_eq!(v["error"]["code"], c.want.1, "{what}");
            assert_eq!(v["reason"], c.want.1, "{what}");
            assert_eq!(v["status"], "REFUSED", "{what}");
            assert!(
                v["error"]["how_to_fix"]
                    .as_str()
                    .is_some_and(|s| !s.is_empty())
            );
            let id = v["receipt"].as_str().expect("a refusal names its receipt");
            let r = ledger::get(&f.ledger_path(), id)
                .expect("read")
                .expect("receipt");
            assert_eq!(r.draft.status, "REFUSED", "{what}");
            assert_eq!(r.draft.error_code.as_deref(), Some(c.want.1), "{what}");
            assert_eq!(r.draft.actor, format!("token:{}", c.claims.id));
            assert_eq!(r.draft.key, c.key);
            assert!(!r.draft.input.contains("cdt1.") && !r.draft.output.contains("cdt1."));
        }
    }
    assert!(refusals >= 30 && successes >= 14, "{refusals} {successes}");

    // The owner may do everything; unknown keys are 404 for a valid token as for the owner.
    let (st, v) = invoke(&state, Via::Bearer, Some(OWNER), "SENSITIVE_HIT", Some("a")).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let tok = key().sign(&claims(&["HIT"]));
    let (st, v) = invoke(&state, Via::Share, Some(&tok), "NO_SUCH_ROW", Some("a")).await;
    assert_eq!(st, StatusCode::NOT_FOUND, "{v}");
    assert_eq!(v["error"]["code"], "unknown_key");
    // No credential: 401; a wrong owner key: 403.
    let (st, v) = invoke(&state, Via::Bearer, None, "HIT", Some("a")).await;
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (StatusCode::UNAUTHORIZED, Some("unauthorized"))
    );
    let (st, v) = invoke(&state, Via::Share, None, "HIT", Some("a")).await;
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (StatusCode::UNAUTHORIZED, Some("unauthorized"))
    );
    let (st, v) = invoke(&state, Via::Bearer, Some("not-the-owner"), "HIT", Some("a")).await;
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (StatusCode::FORBIDDEN, Some("forbidden"))
    );
    // A run-now URL's token is the whole credential: a header beside it is not read.
    let req = Request::get(format!(
        "/api/dispatch?invoke=HIT&body=a&share={}",
        enc(&tok)
    ))
    .header("x-owner-key", "not-the-owner")
    .body(Body::empty())
    .expect("request");
    let (st, _, text) = send(&state, req).await;
    assert_eq!(st, StatusCode::OK, "{text}");
    let v: Json = serde_json::from_str(&text).expect("json");
    let r = ledger::get(&f.ledger_path(), v["receipt"].as_str().expect("id"))
        .expect("read")
        .expect("receipt");
    assert!(r.draft.actor.starts_with("token:tok_"), "{}", r.draft.actor);

    assert!(matches!(
        ledger::verify(&f.ledger_path()).expect("verify"),
        Verdict::Intact { .. }
    ));
}

/// Replace the claims part of a token, keeping its MAC.
fn with_claims(token: &str, edit: impl Fn(&mut Json)) -> String {
    let rest = token.strip_prefix(token::PREFIX).expect("prefix");
    let (claims, mac) = rest.split_once('.').expect("two parts");
    let mut v: Json =
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(claims).expect("b64")).expect("json");
    edit(&mut v);
    format!(
        "{}{}.{mac}",
        token::PREFIX,
        URL_SAFE_NO_PAD.encode(v.to_string())
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tampered_tokens_are_refused_before_the_gate() {
    let f = fixture().await;
    let state = AppState::new(settings(&f)).expect("state");
    let good = key().sign(&claims(&["OTHER"]));
    let (st, v) = invoke(&state, Via::Bearer, Some(&good), "OTHER", Some("x")).await;
    assert_eq!(st, StatusCode::OK, "the untampered token works: {v}");

    let mut flipped = good.clone();
    let last = flipped.pop().expect("char");
    flipped.push(if last == 'A' { 'B' } else { 'A' });
    let other_key = TokenKey::from_text("another-key-of-enough-length-0123456789").expect("key");
    let tampered = [
        (
            "scope widened",
            with_claims(&good, |v| v["keys"] = json!(["OTHER", "HIT"])),
        ),
        (
            "expiry extended",
            with_claims(&good, |v| {
                v["exp"] = json!(v["exp"].as_i64().unwrap_or(0) + 86_400 * 365)
            }),
        ),
        (
            "risk raised",
            with_claims(&good, |v| v["risk"] = json!("high")),
        ),
        ("signature changed", flipped),
        (
            "signed with another key",
            other_key.sign(&claims(&["OTHER"])),
        ),
        ("not a token", "cdt1.bm9wZQ".to_string()),
        ("garbage claims", format!("{}!!!.AAAA", token::PREFIX)),
    ];
    let hits = f.hits.load(Ordering::SeqCst);
    let receipts_before = count_receipts(&f);
    for (name, tok) in &tampered {
        for via in [Via::Bearer, Via::Share] {
            let (st, v) = invoke(&state, via, Some(tok), "OTHER", Some("x")).await;
            assert_eq!(st, StatusCode::FORBIDDEN, "{name} via {via:?}: {v}");
            assert_eq!(v["error"]["code"], "forbidden", "{name}");
            assert!(
                v.get("receipt").is_none(),
                "{name}: no receipt for an unverified caller"
            );
            assert!(
                !v.to_string().contains(tok.as_str()),
                "{name}: the answer quotes the token"
            );
        }
    }
    assert_eq!(f.hits.load(Ordering::SeqCst), hits);
    assert_eq!(count_receipts(&f), receipts_before);

    // A dispatcher without a token key refuses every token.
    let mut s = settings(&f);
    s.token_key = None;
    let keyless = AppState::new(s).expect("state");
    let (st, v) = invoke(&keyless, Via::Bearer, Some(&good), "OTHER", Some("x")).await;
    assert_eq!(st, StatusCode::FORBIDDEN, "{v}");
}

fn count_receipts(f: &Fixture) -> i64 {
    rusqlite::Connection::open(f.ledger_path())
        .expect("db")
        .query_row("SELECT count(*) FROM receipts", [], |r| r.get(0))
        .expect("count")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_mode_lets_anonymous_callers_run_plain_rows_only() {
    let f = fixture().await;
    let closed = AppState::new(settings(&f)).expect("state");
    let (st, v) = invoke(&closed, Via::Share, None, "HIT", Some("a")).await;
    assert_eq!(st, StatusCode::UNAUTHORIZED, "{v}");

    let mut s = settings(&f);
    s.open = true;
    let open = AppState::new(s).expect("state");
    for via in [Via::Bearer, Via::Share] {
        let before = f.hits.load(Ordering::SeqCst);
        let (st, v) = invoke(&open, via, None, "HIT", Some("a")).await;
        assert_eq!(st, StatusCode::OK, "{v}");
        assert_eq!(f.hits.load(Ordering::SeqCst), before + 1);
        let r = ledger::get(&f.ledger_path(), v["receipt"].as_str().expect("id"))
            .expect("read")
            .expect("receipt");
        assert_eq!(r.draft.actor, "anonymous");
        for (key, why) in [("SENSITIVE_HIT", "sensitive"), ("CRED_HIT", "credential")] {
            let (st, v) = invoke(&open, via, None, key, Some("a")).await;
            assert_eq!(st, StatusCode::UNAUTHORIZED, "{key}: {v}");
            assert_eq!(v["reason"], "anonymous");
            assert!(
                v["error"]["message"]
                    .as_str()
                    .is_some_and(|m| m.contains(why)),
                "{v}"
            );
            assert_eq!(v["status"], "REFUSED");
        }
        assert_eq!(f.hits.load(Ordering::SeqCst), before + 1);
    }
}

async fn contract_with(
    state: &AppState,
    key: &str,
    format: &str,
    credential: Option<&str>,
) -> (StatusCode, String) {
    let mut r = Request::get(format!("/api/dispatch?key={key}&format={format}"));
    if let Some(c) = credential {
        r = r.header("authorization", format!("Bearer {c}"));
    }
    let (st, _, text) = send(state, r.body(Body::empty()).expect("request")).await;
    (st, text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contracts_say_what_the_presented_credential_may_do() {
    let f = fixture().await;
    let state = AppState::new(settings(&f)).expect("state");

    // Static: which kinds of credential the row accepts, and no affordances.
    let (st, text) = contract_with(&state, "SENSITIVE_HIT", "json", None).await;
    assert_eq!(st, StatusCode::OK);
    let v: Json = serde_json::from_str(&text).expect("json");
    assert!(v.get("affordances").is_none(), "{v}");
    let kinds: Vec<&str> = v["accepts"]
        .as_array()
        .expect("accepts")
        .iter()
        .filter_map(|a| a["credential"].as_str())
        .collect();
    assert_eq!(kinds, ["owner_key", "capability_token"]);
    assert!(
        v["accepts"][1]["condition"]
            .as_str()
            .is_some_and(|c| c.contains("high"))
    );
    let (_, text) = contract_with(&state, "HIT", "json", None).await;
    let v: Json = serde_json::from_str(&text).expect("json");
    assert_eq!(v["accepts"][2]["credential"], "anonymous");
    let (_, md) = contract_with(&state, "HIT", "markdown", None).await;
    assert!(md.contains("Accepts: `owner_key`"), "{md}");
    assert!(!md.contains("What your credential may do"));

    // A token with a fixed body and a ceiling, computed for the caller.
    let mut c = claims(&["HIT"]);
    c.body = Some("hello".into());
    c.max_payload = Some(100);
    let tok = key().sign(&c);
    let (st, text) = contract_with(&state, "HIT", "json", Some(&tok)).await;
    assert_eq!(st, StatusCode::OK, "{text}");
    let a = &serde_json::from_str::<Json>(&text).expect("json")["affordances"];
    assert_eq!(a["credential"], "capability_token");
    assert_eq!(a["token"], c.id.as_str());
    assert_eq!(a["may_invoke"], true);
    assert_eq!(a["body"], "fixed");
    assert_eq!(a["fixed_body"], "hello");
    assert_eq!(a["max_payload_bytes"], 100);
    assert_eq!(a["until"], c.expires_at().as_str());
    assert_eq!(a["risk_ceiling"], "low");
    let (_, md) = contract_with(&state, "HIT", "markdown", Some(&tok)).await;
    assert!(md.contains("## What your credential may do"), "{md}");
    assert!(md.contains("- May invoke: yes"), "{md}");
    assert!(md.contains("only `hello`"), "{md}");

    // The same token, on rows the gate would refuse: the reason is the gate's.
    let (_, text) = contract_with(&state, "OTHER", "json", Some(&tok)).await;
    let a = &serde_json::from_str::<Json>(&text).expect("json")["affordances"];
    assert_eq!(a["may_invoke"], false);
    assert_eq!(a["refused"]["reason"], "scope");
    let mut s = claims(&["SENSITIVE_HIT"]);
    s.risk = Risk::Low;
    let (_, text) = contract_with(&state, "SENSITIVE_HIT", "json", Some(&key().sign(&s))).await;
    let a = &serde_json::from_str::<Json>(&text).expect("json")["affordances"];
    assert_eq!(a["may_invoke"], true, "{a}");
    assert_eq!(a["needs_approval"], "sensitive", "{a}");
    state.ledger().revoke(&c.id).await.expect("revoke");
    let (_, md) = contract_with(&state, "HIT", "markdown", Some(&tok)).await;
    assert!(md.contains("May invoke: no — `revoked`"), "{md}");

    // The owner: everything, no expiry. A share token in the URL works for contracts too.
    let (_, text) = contract_with(&state, "SENSITIVE_HIT", "json", Some(OWNER)).await;
    let a = &serde_json::from_str::<Json>(&text).expect("json")["affordances"];
    assert_eq!(
        (a["may_invoke"].as_bool(), a["until"].is_null()),
        (Some(true), true)
    );
    let share = key().sign(&claims(&["OTHER"]));
    let req = Request::get(format!(
        "/api/dispatch?key=OTHER&format=json&share={}",
        enc(&share)
    ))
    .body(Body::empty())
    .expect("request");
    let (_, _, text) = send(&state, req).await;
    let a = &serde_json::from_str::<Json>(&text).expect("json")["affordances"];
    assert_eq!(a["may_invoke"], true, "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_reads_its_own_receipts_only() {
    let f = fixture().await;
    let state = AppState::new(settings(&f)).expect("state");
    let mine = key().sign(&claims(&["OTHER"]));
    let theirs = key().sign(&claims(&["OTHER"]));
    let (_, v) = invoke(&state, Via::Bearer, Some(&mine), "OTHER", Some("x")).await;
    let id = v["receipt"].as_str().expect("id").to_string();
    let read = |cred: &str| {
        Request::get(format!("/receipt/{id}"))
            .header("authorization", format!("Bearer {cred}"))
            .body(Body::empty())
            .expect("request")
    };
    let (st, _, text) = send(&state, read(&mine)).await;
    assert_eq!(st, StatusCode::OK, "{text}");
    let (st, _, text) = send(&state, read(&theirs)).await;
    assert_eq!(st, StatusCode::FORBIDDEN, "{text}");
    let (st, _, _) = send(&state, read(OWNER)).await;
    assert_eq!(st, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_answer_with_clear_errors() {
    let f = fixture().await;
    let state = AppState::new(settings(&f)).expect("state");

    // Upstream timeout: 504 with the receipt.
    let (st, v) = invoke(&state, Via::Bearer, Some(OWNER), "SLOW", Some("a")).await;
    assert_eq!(st, StatusCode::GATEWAY_TIMEOUT, "{v}");
    assert_eq!(v["error"]["code"], "upstream_timeout");
    assert!(
        v["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("timed out after 400 ms")),
        "{v}"
    );
    assert_eq!(v["status"], "FAILED");

    // Response cap: the answer is cut and says so.
    let (st, v) = invoke(&state, Via::Bearer, Some(OWNER), "BIG", Some("a")).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["truncated"], true);
    let out = v["output"].as_str().expect("output");
    assert!(
        out.len() < 2048 && out.contains("truncated at 1024 bytes"),
        "{out}"
    );

    // Flow depth: nine nested flows stop at the eighth, naming the path.
    let (st, v) = invoke(&state, Via::Bearer, Some(OWNER), "DEEP_1", Some("a")).await;
    assert_eq!(st, StatusCode::BAD_GATEWAY, "{v}");
    assert_eq!(v["reason"], "flow:too_deep", "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("DEEP_1 > DEEP_2")),
        "{v}"
    );
    let (st, v) = invoke(&state, Via::Bearer, Some(OWNER), "DEEP_2", Some("a")).await;
    assert_eq!(st, StatusCode::OK, "eight levels are allowed: {v}");

    // Request body: 413 before anything else.
    let big = json!({"key": "OTHER", "body": "a".repeat(300 * 1024)}).to_string();
    let req = Request::post("/api/dispatch")
        .header("x-owner-key", OWNER)
        .body(Body::from(big))
        .expect("request");
    let (st, _, text) = send(&state, req).await;
    assert_eq!(st, StatusCode::PAYLOAD_TOO_LARGE, "{text}");

    // Concurrent invocations: 503 with Retry-After while the slots are taken.
    let mut s = settings(&f);
    s.max_inflight = 1;
    let one = AppState::new(s).expect("state");
    let busy = {
        let one = one.clone();
        tokio::spawn(async move { invoke(&one, Via::Bearer, Some(OWNER), "SLOW", Some("a")).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let req = Request::post("/api/dispatch")
        .header("x-owner-key", OWNER)
        .body(Body::from(json!({"key": "OTHER", "body": "x"}).to_string()))
        .expect("request");
    let (st, headers, text) = send(&one, req).await;
    assert_eq!(st, StatusCode::SERVICE_UNAVAILABLE, "{text}");
    assert!(text.contains("\"saturated\""), "{text}");
    assert_eq!(
        headers.get("retry-after").and_then(|v| v.to_str().ok()),
        Some("1")
    );
    let _ = busy.await.expect("the slow call ends");
    let (st, v) = invoke(&one, Via::Bearer, Some(OWNER), "OTHER", Some("x")).await;
    assert_eq!(st, StatusCode::OK, "the slot is free again: {v}");
}

/// The whole path through the command line: mint (pinned) → invoke → the row changes →
/// 409 contract_changed; revoke → 403 revoked; list shows both states.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_mint_pin_revoke_and_list() {
    let f = fixture().await;
    let bin = env!("CARGO_BIN_EXE_capdir");
    let ledger_url = format!("sqlite:{}", f.ledger_path().display());
    let run = |args: &[&str]| {
        let out = std::process::Command::new(bin)
            .args(args)
            .args(["--ledger", &ledger_url])
            .env("CAPDIR_TOKEN_KEY", TOKEN_KEY)
            .output()
            .expect("capdir runs");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let site = f.site().display().to_string();
    let (code, out, err) = run(&[
        "token",
        "mint",
        "--keys",
        "OTHER",
        "--pin",
        "--ttl",
        "10m",
        "--audience",
        BASE,
        "--max-payload",
        "64",
        "--site",
        &site,
    ]);
    assert_eq!(code, Some(0), "{out}{err}");
    let tok = out.lines().last().expect("a last line").to_string();
    assert!(tok.starts_with("cdt1."), "{out}");
    let id = out
        .lines()
        .find_map(|l| l.strip_prefix("id:"))
        .expect("id line")
        .trim()
        .to_string();
    let (code, _, err) = run(&["token", "mint", "--keys", "OTHR", "--site", &site]);
    assert_eq!(code, Some(2));
    assert!(err.contains("did you mean OTHER"), "{err}");
    let (code, _, err) = run(&[
        "token",
        "mint",
        "--keys",
        "OTHER,HIT",
        "--pin",
        "--site",
        &site,
    ]);
    assert_eq!(code, Some(2));
    assert!(err.contains("exactly one key"), "{err}");
    let (code, _, err) = run(&["token", "mint", "--site", &site]);
    assert_eq!(code, Some(2));
    assert!(err.contains("needs a scope"), "{err}");
    // A write scope alone is a scope: keys (one still to create) and categories, by form.
    let (code, out, err) = run(&["token", "mint", "--write", "NEW_ROW,misc", "--site", &site]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.contains("scope:     write:NEW_ROW, write:category:misc"),
        "{out}"
    );
    let (code, _, err) = run(&["token", "mint", "--write", "Not A Key", "--site", &site]);
    assert_eq!(code, Some(2));
    assert!(err.contains("--write takes keys"), "{err}");

    let state = AppState::new(settings(&f)).expect("state");
    let (st, v) = invoke(&state, Via::Share, Some(&tok), "OTHER", Some("x")).await;
    assert_eq!(st, StatusCode::OK, "{v}");

    // The row's call changes (its payload): the pinned token now answers 409.
    f.repo.write(
        "OTHER.yaml",
        &common::fn_row("OTHER", "misc", "Echoes, in another category.")
            .replace("[\"$1\"]", "[\"changed $1\"]"),
    );
    f.repo.commit("change OTHER", "2024-02-01T00:00:00Z");
    f.build();
    assert!(state.reload_if_changed());
    let (st, v) = invoke(&state, Via::Share, Some(&tok), "OTHER", Some("x")).await;
    assert_eq!(st, StatusCode::CONFLICT, "{v}");
    assert_eq!(v["error"]["code"], "contract_changed");

    let (code, out, _) = run(&["token", "revoke", &id]);
    assert_eq!(code, Some(0));
    assert!(out.contains("revoked"), "{out}");
    let (_, out, _) = run(&["token", "revoke", &id]);
    assert!(out.contains("already revoked"), "{out}");
    let (st, v) = invoke(&state, Via::Share, Some(&tok), "OTHER", Some("x")).await;
    assert_eq!(st, StatusCode::FORBIDDEN, "{v}");
    assert_eq!(v["error"]["code"], "revoked");

    let (code, out, _) = run(&["token", "list"]);
    assert_eq!(code, Some(0));
    let line = out.lines().find(|l| l.starts_with(&id)).expect("listed");
    assert!(
        line.contains("revoked") && line.contains("OTHER") && line.contains("pinned"),
        "{line}"
    );
    let db = std::fs::read(f.ledger_path()).expect("ledger bytes");
    let sig = tok.rsplit('.').next().expect("mac");
    assert!(
        !db.windows(sig.len()).any(|w| w == sig.as_bytes()),
        "the ledger keeps claims, never the token"
    );
}
