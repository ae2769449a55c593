//! Measuring search quality: recall@1, recall@5 and MRR@12 over a labelled query set, with
//! per-query latency, so ranking changes are judged by numbers rather than impressions.

use crate::search::{Fusion, Lists, Ranking, Searcher};
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
    evaluate_by(searcher, queries, searcher.ranking())
}

/// The figures of one ranking.
pub fn evaluate_by(searcher: &Searcher, queries: &[Labelled], ranking: Ranking) -> Result<Figures> {
    // Warm up: latency is reported for a running server, not a cold page cache.
    for q in queries.iter().take(64) {
        searcher.ask_by(&q.query, 12, ranking)?;
    }
    let mut times = Vec::with_capacity(queries.len());
    let (mut r1, mut r5, mut mrr) = (0usize, 0usize, 0f64);
    for q in queries {
        let t = Instant::now();
        let hits = searcher.ask_by(&q.query, 12, ranking)?;
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

/// Quality figures alone, for cross-validation.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Quality {
    pub recall_at_1: f64,
    pub recall_at_5: f64,
    pub mrr_at_12: f64,
}

/// One fold of `tune`: the fusion the other folds chose and how it did on this one.
#[derive(Debug, Clone, Serialize)]
pub struct Fold {
    pub queries: usize,
    pub chosen: Fusion,
    pub held_out: Quality,
}

#[derive(Debug, Clone, Serialize)]
pub struct Tuning {
    pub folds: Vec<Fold>,
    /// The held-out figures of all folds pooled: what the chosen fusion does on queries it
    /// was not chosen on.
    pub held_out: Quality,
    /// The fusion the whole set chooses, and its (in-sample) figures.
    pub chosen: Fusion,
    pub in_sample: Quality,
}

/// The fusions `tune` tries: semantic weight and cosine floor.
fn grid() -> Vec<Fusion> {
    let mut g = Vec::new();
    for weight in [0.2, 0.3, 0.5, 0.7, 0.85, 1.0, 1.2, 1.5, 2.0] {
        for floor in [0.0, 0.1, 0.2, 0.3] {
            g.push(Fusion {
                weight,
                floor,
                ..Fusion::default()
            });
        }
    }
    g
}

/// Choose the fusion by `folds`-fold cross-validation: for each fold, the grid point with the
/// best MRR@12 on the other folds, scored on this one. Queries go to folds by the SHA-256 of
/// their text, so the split is the same on every run and machine.
pub fn tune(searcher: &Searcher, queries: &[Labelled], folds: usize) -> Result<Tuning> {
    use sha2::{Digest, Sha256};
    let folds = folds.max(2);
    let depth = Fusion::default().depth;
    let lists: Vec<Lists> = queries
        .iter()
        .map(|q| searcher.lists(&q.query, Ranking::Fused, depth, -1.0))
        .collect::<Result<_>>()?;
    let fold_of: Vec<usize> = queries
        .iter()
        .map(|q| Sha256::digest(q.query.as_bytes())[0] as usize % folds)
        .collect();
    let grid = grid();
    // quality[g][i]: (hit@1, hit@5, reciprocal rank) of query i under grid point g.
    let scores: Vec<Vec<(f64, f64, f64)>> = grid
        .iter()
        .map(|&f| {
            queries
                .iter()
                .zip(&lists)
                .map(|(q, l)| {
                    let ranked: Vec<String> = searcher
                        .rank(l, Ranking::Fused, f)
                        .into_iter()
                        .take(12)
                        .map(|(_, m)| m.key.clone())
                        .collect();
                    match first_right(&ranked, &q.keys) {
                        Some(r) => (
                            f64::from(u8::from(r == 1)),
                            f64::from(u8::from(r <= 5)),
                            1.0 / r as f64,
                        ),
                        None => (0.0, 0.0, 0.0),
                    }
                })
                .collect()
        })
        .collect();
    let quality = |g: usize, keep: &dyn Fn(usize) -> bool| {
        let (mut n, mut sum) = (0usize, (0.0, 0.0, 0.0));
        for (_, s) in scores[g].iter().enumerate().filter(|(i, _)| keep(*i)) {
            n += 1;
            sum = (sum.0 + s.0, sum.1 + s.1, sum.2 + s.2);
        }
        let n = n.max(1) as f64;
        Quality {
            recall_at_1: sum.0 / n,
            recall_at_5: sum.1 / n,
            mrr_at_12: sum.2 / n,
        }
    };
    let best = |keep: &dyn Fn(usize) -> bool| {
        let mrr: Vec<f64> = (0..grid.len())
            .map(|g| quality(g, keep).mrr_at_12)
            .collect();
        (0..grid.len())
            .max_by(|&a, &b| mrr[a].total_cmp(&mrr[b]).then(b.cmp(&a)))
            .unwrap_or(0)
    };
    let mut out = Vec::new();
    let mut pooled = (0.0, 0.0, 0.0);
    for f in 0..folds {
        let g = best(&|i| fold_of[i] != f);
        let held = quality(g, &|i| fold_of[i] == f);
        let n = fold_of.iter().filter(|&&x| x == f).count();
        pooled.0 += held.recall_at_1 * n as f64;
        pooled.1 += held.recall_at_5 * n as f64;
        pooled.2 += held.mrr_at_12 * n as f64;
        out.push(Fold {
            queries: n,
            chosen: grid[g],
            held_out: held,
        });
    }
    let n = queries.len().max(1) as f64;
    let all = best(&|_| true);
    Ok(Tuning {
        folds: out,
        held_out: Quality {
            recall_at_1: pooled.0 / n,
            recall_at_5: pooled.1 / n,
            mrr_at_12: pooled.2 / n,
        },
        chosen: grid[all],
        in_sample: quality(all, &|_| true),
    })
}

impl Tuning {
    pub fn render(&self) -> String {
        let mut s = String::from(
            "| fold | queries | weight | floor | held-out R@1 | R@5 | MRR@12 |\n|---|---|---|---|---|---|---|\n",
        );
        for (i, f) in self.folds.iter().enumerate() {
            s.push_str(&format!(
                "| {} | {} | {} | {} | {:.3} | {:.3} | {:.3} |\n",
                i + 1,
                f.queries,
                f.chosen.weight,
                f.chosen.floor,
                f.held_out.recall_at_1,
                f.held_out.recall_at_5,
                f.held_out.mrr_at_12
            ));
        }
        let q = self.held_out;
        s.push_str(&format!(
            "| all, held out | | | | {:.3} | {:.3} | {:.3} |\n",
            q.recall_at_1, q.recall_at_5, q.mrr_at_12
        ));
        let (c, q) = (self.chosen, self.in_sample);
        s.push_str(&format!(
            "\nchosen on every query: weight={} floor={} (in-sample R@1 {:.3} R@5 {:.3} MRR@12 {:.3})\n",
            c.weight, c.floor, q.recall_at_1, q.recall_at_5, q.mrr_at_12
        ));
        s
    }
}

pub fn percentile(values: &mut [f64], p: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let i = ((values.len() as f64 * p).ceil() as usize).clamp(1, values.len()) - 1;
    values[i]
}

/// Several rankings' figures side by side.
pub fn render_ablation(rows: &[(Ranking, Figures)]) -> String {
    let mut s = String::from(
        "| ranking | queries | recall@1 | recall@5 | MRR@12 | mean ms | p99 ms |\n|---|---|---|---|---|---|---|\n",
    );
    for (r, f) in rows {
        s.push_str(&format!("| {} |{}", r.name(), f.cells()));
    }
    s
}

/// Several sets' rankings side by side: (set, its rankings' figures).
pub fn render_ablation_of_sets(sets: &[(String, Vec<(Ranking, Figures)>)]) -> String {
    let mut s = String::from(
        "| set | ranking | queries | recall@1 | recall@5 | MRR@12 | mean ms | p99 ms |\n|---|---|---|---|---|---|---|---|\n",
    );
    for (set, rows) in sets {
        for (r, f) in rows {
            s.push_str(&format!("| {set} | {} |{}", r.name(), f.cells()));
        }
    }
    s
}

/// Every ranking's figures on `queries`, in the order of `Ranking::ALL`.
pub fn ablation(searcher: &Searcher, queries: &[Labelled]) -> Result<Vec<(Ranking, Figures)>> {
    Ranking::ALL
        .into_iter()
        .map(|r| Ok((r, evaluate_by(searcher, queries, r)?)))
        .collect()
}

impl Figures {
    /// The figures as the cells of a table row, ending the row.
    fn cells(&self) -> String {
        format!(
            " {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} |\n",
            self.queries,
            self.recall_at_1,
            self.recall_at_5,
            self.mrr_at_12,
            self.mean_ms,
            self.p99_ms
        )
    }

    pub fn render(&self) -> String {
        format!(
            "| queries | recall@1 | recall@5 | MRR@12 | mean ms | p99 ms |\n|---|---|---|---|---|---|\n|{}",
            self.cells()
        )
    }
}
