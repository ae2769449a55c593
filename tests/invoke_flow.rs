//! The flow runner: bindings, fan-out order and concurrency, stopping at the first failure,
//! malformed steps, the depth limit, and the bundled flows.

use crate::common;

use axum::Router;
use axum::extract::{Path, State};
use axum::routing::get;
use capdir::invoke::outcome::Status;
use capdir::invoke::runner::Environment;
use common::{bundled, call, invoker, row, row_with, serve};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

fn fn_rows() -> Vec<capdir::row::Row> {
    vec![
        row("UP", "fn", "upper", r#"["$1+"]"#),
        row("LOW", "fn", "lower", r#"["$1+"]"#),
        row("ECHO", "fn", "echo", r#"["$1+"]"#),
        row("HASH", "fn", "sha256", r#"["$1+"]"#),
        row("GET", "fn", "json_get", r#"["$2+", "$1"]"#),
    ]
}

fn with(mut rows: Vec<capdir::row::Row>, more: Vec<capdir::row::Row>) -> Vec<capdir::row::Row> {
    rows.extend(more);
    rows
}

#[tokio::test]
async fn bindings_prev_and_the_flows_own_args() {
    let inv = invoker(
        with(
            fn_rows(),
            vec![row(
                "F",
                "flow",
                "",
                "UP: $1 => BIG > LOW: $2 => SMALL > ECHO: $BIG and $SMALL, prev=$PREV, $UNBOUND",
            )],
        ),
        Environment::default(),
    );
    let o = call(&inv, "F", "Hello|WORLD").await;
    assert_eq!(o.output, "HELLO and world, prev=world, $UNBOUND");
    assert_eq!(
        (o.status, o.runner.as_str()),
        (Status::ProvenMaterialResult, "flow")
    );
}

#[tokio::test]
async fn step_bodies_are_split_by_the_callee() {
    let inv = invoker(
        with(
            fn_rows(),
            vec![row(
                "F",
                "flow",
                "",
                r#"ECHO: {"a": {"b": "$1"}} => DOC > GET: a.b|$DOC"#,
            )],
        ),
        Environment::default(),
    );
    assert_eq!(call(&inv, "F", "x|y").await.output, "x");
}

#[tokio::test]
async fn fan_out_runs_concurrently_in_branch_order() {
    // The upstream answers only once both branches' requests are in: a runner that waits for
    // one branch before starting the next gets "alone" (after the barrier gives up) instead.
    let barrier = Arc::new(tokio::sync::Barrier::new(2));
    let app = Router::new()
        .route(
            "/meet/{name}",
            get(
                |State(b): State<Arc<tokio::sync::Barrier>>, Path(name): Path<String>| async move {
                    match tokio::time::timeout(Duration::from_secs(3), b.wait()).await {
                        Ok(_) => format!("{name} met"),
                        Err(_) => format!("{name} alone"),
                    }
                },
            ),
        )
        .with_state(barrier);
    let addr = serve(app).await;
    let inv = invoker(
        with(
            fn_rows(),
            vec![
                row("MEET", "http", &format!("GET http://{addr}/meet/$1"), ""),
                row_with(
                    "F",
                    "flow",
                    "",
                    "{ MEET: a => A | MEET: b | UP: $1 } => ALL > ECHO: $A / $ALL",
                    json!({}),
                ),
            ],
        ),
        Environment::default(),
    );
    let o = call(&inv, "F", "x").await;
    assert_eq!(
        o.output,
        r#"HTTP 200:a met / ["HTTP 200:a met","HTTP 200:b met","X"]"#
    );
}

#[tokio::test]
async fn first_failure_stops_the_flow() {
    let hits = Arc::new(AtomicUsize::new(0));
    let app = Router::new()
        .route(
            "/count",
            get(|State(h): State<Arc<AtomicUsize>>| async move {
                h.fetch_add(1, Ordering::SeqCst);
                "counted"
            }),
        )
        .with_state(hits.clone());
    let addr = serve(app).await;
    let inv = invoker(
        with(
            fn_rows(),
            vec![
                row("COUNT", "http", &format!("GET http://{addr}/count"), ""),
                row("F", "flow", "", "GET: missing.path|{} > COUNT: x"),
                row("G", "flow", "", "{ UP: a | GET: nope|[] } > COUNT: x"),
                row("H", "flow", "", "UP: a > NO_SUCH_ROW: x > COUNT: x"),
                row("I", "flow", "", "F: $1"),
            ],
        ),
        Environment::default(),
    );
    let o = call(&inv, "F", "").await;
    assert_eq!(
        o.output,
        "ERR:flow:step_failed:GET:ERR:fn:json_get:path `missing.path` not found (at `missing`)"
    );
    assert_eq!(
        (o.status, o.error_code()),
        (Status::Failed, Some("flow:step_failed"))
    );
    let o = call(&inv, "G", "").await;
    assert!(
        o.output
            .starts_with("ERR:flow:step_failed:GET:ERR:fn:json_get:"),
        "{}",
        o.output
    );
    let o = call(&inv, "H", "").await;
    assert!(
        o.output
            .starts_with("ERR:flow:step_failed:NO_SUCH_ROW:ERR:unknown_key:"),
        "{}",
        o.output
    );
    // Nested: the path of steps stays readable.
    let o = call(&inv, "I", "z").await;
    assert!(
        o.output
            .starts_with("ERR:flow:step_failed:F:ERR:flow:step_failed:GET:ERR:fn:json_get:"),
        "{}",
        o.output
    );
    assert_eq!(
        hits.load(Ordering::SeqCst),
        0,
        "no step after a failure may run"
    );
}

#[tokio::test]
async fn bad_steps_and_depth() {
    let mut rows = fn_rows();
    rows.push(row("BAD", "flow", "", "ECHO: a > > ECHO: b"));
    rows.push(row("LOOP", "flow", "", "ECHO: $1 > LOOP: $PREV"));
    // N0 → N1 → … → N8 → ECHO: nine flows deep.
    for i in 0..9 {
        let next = if i == 8 {
            "ECHO".to_string()
        } else {
            format!("N{}", i + 1)
        };
        rows.push(row(&format!("N{i}"), "flow", "", &format!("{next}: $1")));
    }
    let inv = invoker(rows, Environment::default());
    let o = call(&inv, "BAD", "").await;
    assert!(
        o.output.starts_with("ERR:flow:bad_step:empty step"),
        "{}",
        o.output
    );
    assert_eq!(o.error_code(), Some("flow:bad_step"));

    let o = call(&inv, "LOOP", "x").await;
    assert!(
        o.output
            .starts_with("ERR:flow:too_deep:flows nest more than 8 deep: LOOP > LOOP"),
        "{}",
        o.output
    );
    assert_eq!(o.error_code(), Some("flow:too_deep"));

    let o = call(&inv, "N0", "deep").await;
    assert_eq!(o.error_code(), Some("flow:too_deep"));
    // Eight deep is allowed.
    assert_eq!(call(&inv, "N1", "deep").await.output, "deep");
}

#[tokio::test]
async fn bundled_flows() {
    let inv = bundled();
    let o = call(&inv, "HASH_AND_TIMESTAMP", "contract v3 final").await;
    use sha2::Digest as _;
    let digest = hex::encode(sha2::Sha256::digest(b"contract v3 final"));
    assert!(
        o.output.starts_with(&format!("sha256={digest} at=20")),
        "{}",
        o.output
    );
    assert!(o.output.ends_with("text=contract v3 final"), "{}", o.output);
    assert_eq!(
        call(&inv, "TEXT_STATS", "the quick brown fox").await.output,
        r#"["19","4"]"#
    );
}
