//! The answer to an ask: the best row with what to do next, and the ranked candidates.
//! Shared by `capdir ask` and the dispatcher's `?ask=`.

use crate::row::urls::{contract_url, run_now_url};
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
    pub candidates: Vec<Candidate>,
}

/// One ranked row, with the link that runs it as its contract's example does.
#[derive(Debug, Clone, Serialize)]
pub struct Candidate {
    #[serde(flatten)]
    pub hit: Hit,
    pub run_now_url: String,
}

/// Ask the index behind the dispatcher at `dispatcher`: links in the answer point there.
pub fn answer(searcher: &Searcher, query: &str, limit: usize, dispatcher: &str) -> Result<Answer> {
    let dispatcher = dispatcher.trim_end_matches('/');
    let example = |key: &str| searcher.meta(key).map(|m| m.ex.as_str()).unwrap_or("");
    let candidates: Vec<Candidate> = searcher
        .ask(query, limit.clamp(1, 100))?
        .into_iter()
        .map(|hit| Candidate {
            run_now_url: run_now_url(dispatcher, &hit.key, example(&hit.key)),
            hit,
        })
        .collect();
    let best = candidates.first().map(|c| {
        let h = &c.hit;
        Best {
            key: h.key.clone(),
            what: h.what.clone(),
            run_now_url: c.run_now_url.clone(),
            contract_url: contract_url(dispatcher, &h.key),
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
        for (i, h) in self.candidates.iter().map(|c| &c.hit).enumerate() {
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
