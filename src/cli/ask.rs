//! `capdir ask`: plain words in, the best row and ranked candidates out (one query, or a
//! batch of them as JSON lines).

use crate::search::{Ranking, Searcher};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(clap::Args)]
pub(super) struct Args {
    /// The request, e.g. "what time is it".
    #[arg(required_unless_present = "batch")]
    query: Option<String>,
    /// Answer one query per line of FILE, one JSON line each, in input order.
    #[arg(long, value_name = "FILE", conflicts_with = "query")]
    batch: Option<PathBuf>,
    #[arg(long, default_value = "site")]
    site: PathBuf,
    #[arg(long, default_value_t = 12)]
    limit: usize,
    #[arg(long)]
    json: bool,
    /// Which ranking answers: `fused` (the default), `lexical` (BM25 alone) or `semantic`.
    #[arg(long, value_enum, default_value = "fused")]
    ranking: RankingArg,
    /// The dispatcher's URL, for run-now and contract links.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    base_url: String,
}

/// The search index of a built site, or an error that says to build one.
pub(super) fn open_searcher(site: &Path) -> anyhow::Result<Searcher> {
    Searcher::open(&site.join("index"))
        .map_err(|e| anyhow::anyhow!("{e:#}; run `capdir build` first"))
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub(super) enum RankingArg {
    Lexical,
    Semantic,
    Fused,
}

impl From<RankingArg> for Ranking {
    fn from(r: RankingArg) -> Ranking {
        match r {
            RankingArg::Lexical => Ranking::Lexical,
            RankingArg::Semantic => Ranking::Semantic,
            RankingArg::Fused => Ranking::Fused,
        }
    }
}

pub(super) fn run(a: Args) -> anyhow::Result<ExitCode> {
    let searcher = open_searcher(&a.site)?.with_ranking(a.ranking.into());
    if let Some(file) = a.batch {
        let text = std::fs::read_to_string(&file)?;
        let mut out = std::io::BufWriter::new(std::io::stdout().lock());
        for line in text.lines() {
            let keys: Vec<String> = searcher
                .ask(line, a.limit)?
                .into_iter()
                .map(|h| h.key)
                .collect();
            writeln!(out, "{}", serde_json::json!({"query": line, "keys": keys}))?;
        }
        out.flush()?;
        return Ok(ExitCode::SUCCESS);
    }
    let query = a.query.unwrap_or_default();
    let answer = crate::search::ask::answer(&searcher, &query, a.limit, &a.base_url)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&answer)?);
    } else {
        print!("{}", answer.render());
    }
    Ok(super::exit(answer.best.is_some()))
}
