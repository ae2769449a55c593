//! `capdir eval`: search quality on labelled queries, with floors CI can fail on.

use crate::search::Boosts;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub(super) struct Args {
    #[arg(long, value_name = "FILE.jsonl")]
    queries: PathBuf,
    #[arg(long, default_value = "site")]
    site: PathBuf,
    /// Fail (exit 1) when MRR@12 is below this.
    #[arg(long)]
    min_mrr: Option<f64>,
    /// Fail (exit 1) when recall@5 is below this.
    #[arg(long)]
    min_recall5: Option<f64>,
    #[arg(long)]
    json: bool,
    /// Field weights to try instead of the defaults, e.g. `key=2,what=1`.
    #[arg(long)]
    boosts: Option<Boosts>,
}

pub(super) fn run(a: Args) -> anyhow::Result<ExitCode> {
    let mut searcher = super::ask::open_searcher(&a.site)?;
    if let Some(b) = a.boosts {
        searcher = searcher.with_boosts(b);
    }
    let labelled = crate::search::eval::read_queries(&std::fs::read_to_string(&a.queries)?)?;
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
    Ok(super::exit(ok))
}
