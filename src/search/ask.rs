//! The answer to an ask: the best row with what to do next, and the ranked candidates.
//! Shared by `capdir ask` and the dispatcher's `?ask=`.

use crate::row::urls::Urls;
use crate::search::{Hit, Searcher};
use anyhow::Result;
use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct Best {
    pub key: String,
    pub what: String,
    pub run_now_url: String,
    pub contract_url: String,
    pub next: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Answer {
    pub query: String,
    pub best: Option<Best>,
    pub candidates: Vec<Hit>,
}

pub fn answer(searcher: &Searcher, query: &str, limit: usize, urls: &Urls) -> Result<Answer> {
    let candidates = searcher.ask(query, limit.clamp(1, 100))?;
    let best = candidates.first().map(|h| {
        let ex = searcher.meta(&h.key).map(|m| m.ex.as_str()).unwrap_or("");
        Best {
            key: h.key.clone(),
            what: h.what.clone(),
            run_now_url: urls.run_now(&h.key, ex),
            contract_url: urls.contract(&h.key),
            next: format!(
                "Read the contract of {} (its ARGS line), then invoke it by key with `a|b|c` arguments.",
                h.key
            ),
        }
    });
    Ok(Answer {
        query: query.to_string(),
        best,
        candidates,
    })
}

impl Answer {
    pub fn render(&self) -> String {
        let Some(best) = &self.best else {
            return format!("no row matches {:?}; try other words\n", self.query);
        };
        let mut s = format!(
            "best: {}: {}\n  contract: {}\n  run now:  {}\n  next: {}\n\ncandidates:\n",
            best.key, best.what, best.contract_url, best.run_now_url, best.next
        );
        for (i, h) in self.candidates.iter().enumerate() {
            s.push_str(&format!(
                "{:>3}. {:>7.3}  {:<32} {}\n",
                i + 1,
                h.score,
                h.key,
                h.what
            ));
        }
        s
    }
}
