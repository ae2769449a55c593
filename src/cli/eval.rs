//! `capdir eval`: search quality on labelled queries, with floors CI can fail on.

use crate::search::{Boosts, Fusion, Ranking};

use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub(super) struct Args {
    /// Labelled requests. With `--ablation`, several sets may be given, each with its own
    /// `--site` in the same order, and are scored side by side.
    #[arg(long, value_name = "FILE.jsonl", required = true)]
    queries: Vec<PathBuf>,
    #[arg(long, default_value = "site")]
    site: Vec<PathBuf>,
    /// Fail (exit 1) when MRR@12 is below this.
    #[arg(long)]
    min_mrr: Option<f64>,
    /// Fail (exit 1) when recall@5 is below this.
    #[arg(long)]
    min_recall5: Option<f64>,
    /// Fail (exit 1) when recall@1 is below this.
    #[arg(long)]
    min_recall1: Option<f64>,
    #[arg(long)]
    json: bool,
    /// Field weights to try instead of the defaults, e.g. `key=2,what=1`.
    #[arg(long)]
    boosts: Option<Boosts>,
    /// Which ranking to score: `fused` (what ask does), `lexical` (BM25 alone) or `semantic`.
    #[arg(long, value_enum, default_value = "fused")]
    ranking: super::ask::RankingArg,
    /// Score lexical, semantic and fused side by side.
    #[arg(long, conflicts_with = "tune")]
    ablation: bool,
    /// Fusion settings to try instead of the defaults, e.g. `weight=0.5,floor=0.1`.
    #[arg(long)]
    fusion: Option<FusionArg>,
    /// Choose the fusion by N-fold cross-validation on these queries and print each fold's
    /// choice with its held-out figures.
    #[arg(long, value_name = "FOLDS")]
    tune: Option<usize>,
    /// Write each query's two rankings before fusion, 100 deep, as JSON lines (query, keys,
    /// lexical and semantic [position, score] pairs): for studying fusions outside capdir.
    #[arg(long, value_name = "FILE.jsonl")]
    lists: Option<PathBuf>,
}

/// `weight=0.5,depth=100,floor=0.1,alone=0.25`: the named settings changed, the rest at their defaults.
#[derive(Clone, Copy)]
struct FusionArg(Fusion);

impl std::str::FromStr for FusionArg {
    type Err = String;

    fn from_str(s: &str) -> Result<FusionArg, String> {
        let mut f = Fusion::default();
        for part in s.split(',').filter(|p| !p.trim().is_empty()) {
            let (name, value) = part
                .split_once('=')
                .ok_or_else(|| format!("`{part}` is not name=value"))?;
            let v: f32 = value
                .trim()
                .parse()
                .map_err(|_| format!("`{value}` is not a number"))?;
            match name.trim() {
                "weight" => f.weight = v,
                "floor" => f.floor = v,
                "alone" => f.alone = v,
                "depth" if v >= 1.0 => f.depth = v as usize,
                other => {
                    return Err(format!(
                        "unknown or invalid setting `{other}` (weight, depth ≥ 1, floor, alone)"
                    ));
                }
            }
        }
        Ok(FusionArg(f))
    }
}

/// The searcher over `site` with the settings `a` names.
fn searcher(a: &Args, site: &std::path::Path) -> anyhow::Result<crate::search::Searcher> {
    let mut searcher = super::ask::open_searcher(site)?;
    if let Some(b) = a.boosts {
        searcher = searcher.with_boosts(b);
    }
    if let Some(f) = a.fusion {
        searcher = searcher.with_fusion(f.0);
    }
    Ok(searcher.with_ranking(a.ranking.into()))
}

/// Each ranking's figures as a JSON object keyed by the ranking's name (`lexical`, …).
fn by_ranking(
    rows: &[(Ranking, crate::search::eval::Figures)],
) -> anyhow::Result<serde_json::Map<String, serde_json::Value>> {
    rows.iter()
        .map(|(r, f)| Ok((format!("{r:?}").to_lowercase(), serde_json::to_value(f)?)))
        .collect()
}

/// Every ranking's figures on each (queries, site) pair: `--ablation` over several sets.
fn ablation_of_sets(a: &Args) -> anyhow::Result<ExitCode> {
    let mut sets = Vec::new();
    for (queries, site) in a.queries.iter().zip(&a.site) {
        let searcher = searcher(a, site)?;
        let labelled = crate::search::eval::read_queries(&std::fs::read_to_string(queries)?)?;
        let rows = crate::search::eval::ablation(&searcher, &labelled)?;
        sets.push((queries.display().to_string(), rows));
    }
    if a.json {
        let v: serde_json::Map<String, serde_json::Value> = sets
            .iter()
            .map(|(set, rows)| Ok((set.clone(), serde_json::Value::Object(by_ranking(rows)?))))
            .collect::<anyhow::Result<_>>()?;
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print!("{}", crate::search::eval::render_ablation_of_sets(&sets));
    }
    Ok(ExitCode::SUCCESS)
}

pub(super) fn run(a: Args) -> anyhow::Result<ExitCode> {
    // `--site` defaults to one `site`: one query file and no `--site` make a pair too.
    if a.site.len() != a.queries.len() {
        anyhow::bail!(
            "{} query files and {} sites: give one --site per --queries, in the same order",
            a.queries.len(),
            a.site.len()
        );
    }
    if a.queries.len() > 1 {
        if !a.ablation {
            anyhow::bail!("several --queries are scored side by side only with --ablation");
        }
        return ablation_of_sets(&a);
    }
    let searcher = searcher(&a, &a.site[0])?;
    let labelled = crate::search::eval::read_queries(&std::fs::read_to_string(&a.queries[0])?)?;
    if let Some(path) = &a.lists {
        let mut out = String::new();
        for q in &labelled {
            let l = searcher.lists(&q.query, Ranking::Fused, 100, -1.0)?;
            let line = serde_json::json!({
                "query": q.query,
                "keys": q.keys,
                "lexical": l.lexical,
                "semantic": l.semantic,
            });
            out.push_str(&line.to_string());
            out.push('\n');
        }
        std::fs::write(path, out)?;
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(folds) = a.tune {
        let tuning = crate::search::eval::tune(&searcher, &labelled, folds)?;
        if a.json {
            println!("{}", serde_json::to_string_pretty(&tuning)?);
        } else {
            print!("{}", tuning.render());
        }
        return Ok(ExitCode::SUCCESS);
    }
    if a.ablation {
        let rows = crate::search::eval::ablation(&searcher, &labelled)?;
        if a.json {
            println!("{}", serde_json::to_string_pretty(&by_ranking(&rows)?)?);
        } else {
            print!("{}", crate::search::eval::render_ablation(&rows));
        }
        return Ok(ExitCode::SUCCESS);
    }
    let figures = crate::search::eval::evaluate(&searcher, &labelled)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&figures)?);
    } else {
        print!("{}", figures.render());
    }
    let mut ok = true;
    if let Some(floor) = a.min_mrr.filter(|f| figures.mrr_at_12 < *f) {
        eprintln!(
            "error: MRR@12 {:.3} is below the floor {floor}",
            figures.mrr_at_12
        );
        ok = false;
    }
    if let Some(floor) = a.min_recall5.filter(|f| figures.recall_at_5 < *f) {
        eprintln!(
            "error: recall@5 {:.3} is below the floor {floor}",
            figures.recall_at_5
        );
        ok = false;
    }
    if let Some(floor) = a.min_recall1.filter(|f| figures.recall_at_1 < *f) {
        eprintln!(
            "error: recall@1 {:.3} is below the floor {floor}",
            figures.recall_at_1
        );
        ok = false;
    }
    Ok(super::exit(ok))
}
