//! The baseline for bench/dispatch.sh: the smallest Axum JSON handler, so the benchmark can
//! say what capdir's dispatch path (lookup, runner, durable receipt) costs on top of Axum.
//!   cargo run --release --example bare_axum -- 127.0.0.1:18081

use axum::Router;
use axum::routing::post;
use serde_json::{Value as Json, json};

async fn echo(body: axum::Json<Json>) -> axum::Json<Json> {
    axum::Json(json!({"status": "PROVEN_MATERIAL_RESULT", "output": body.0["body"]}))
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:18081".into());
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    axum::serve(listener, Router::new().route("/api/dispatch", post(echo))).await
}
