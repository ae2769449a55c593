//! Measuring search quality: recall@1, recall@5 and MRR@12 over a labelled query set, with
//! per-query latency, so ranking changes are judged by numbers rather than impressions.

use crate::search::Searcher;
use anyhow::{Context as _, Result};
use serde::{Deserialize, Serialize};
use std::time::Instant;

/// One labelled request: any of `keys` is a right answer.
#[derive(Debug, Clone, Deserialize)]
pub struct Labelled {
    pub query: String,
    pub keys: Vec<String>,
}

/// The figures of one evaluation run.
#[derive(Debug, Clone, Serialize)]
pub struct Figures {
    pub queries: usize,
    pub recall_at_1: f64,
    pub recall_at_5: f64,
    pub mrr_at_12: f64,
    pub mean_ms: f64,
    pub p99_ms: f64,
}

pub fn read_queries(text: &str) -> Result<Vec<Labelled>> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l)
                .with_context(|| format!("line {}: not a {{\"query\", \"keys\"}} object", i + 1))
        })
        .collect()
}

/// The 1-based rank of the first right key among `ranked`, if any.
pub fn first_right(ranked: &[String], right: &[String]) -> Option<usize> {
    ranked.iter().position(|k| right.contains(k)).map(|p| p + 1)
}

pub fn evaluate(searcher: &Searcher, queries: &[Labelled]) -> Result<Figures> {
    // Warm up: latency is reported for a running server, not a cold page cache.
    for q in queries.iter().take(64) {
        searcher.ask(&q.query, 12)?;
    }
    let mut times = Vec::with_capacity(queries.len());
    let (mut r1, mut r5, mut mrr) = (0usize, 0usize, 0f64);
    for q in queries {
        let t = Instant::now();
        let hits = searcher.ask(&q.query, 12)?;
        times.push(t.elapsed().as_secs_f64() * 1000.0);
        let ranked: Vec<String> = hits.into_iter().map(|h| h.key).collect();
        if let Some(rank) = first_right(&ranked, &q.keys) {
            r1 += usize::from(rank == 1);
            r5 += usize::from(rank <= 5);
            mrr += 1.0 / rank as f64;
        }
    }
    let n = queries.len().max(1) as f64;
    Ok(Figures {
        queries: queries.len(),
        recall_at_1: r1 as f64 / n,
        recall_at_5: r5 as f64 / n,
        mrr_at_12: mrr / n,
        mean_ms: times.iter().sum::<f64>() / n,
        p99_ms: percentile(&mut times, 0.99),
    })
}

pub fn percentile(values: &mut [f64], p: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let i = ((values.len() as f64 * p).ceil() as usize).clamp(1, values.len()) - 1;
    values[i]
}

impl Figures {
    pub fn render(&self) -> String {
        format!(
            "| queries | recall@1 | recall@5 | MRR@12 | mean ms | p99 ms |\n|---|---|---|---|---|---|\n| {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} |\n",
            self.queries,
            self.recall_at_1,
            self.recall_at_5,
            self.mrr_at_12,
            self.mean_ms,
            self.p99_ms
        )
    }
}
