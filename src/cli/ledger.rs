//! `capdir ledger verify|show`: walk the receipt chain, or read one receipt; and, with
//! `--checkpoint` and `--key`, verify the log from outside with no access to the ledger: a
//! receipt's inclusion proof against a signed checkpoint, or the consistency proof between two
//! checkpoints.

use crate::ledger::{Location, Verdict};
use crate::trust::note::Verifier;
use crate::trust::proof::{ConsistencyProof, InclusionProof};
use anyhow::{Context as _, bail};
use clap::Subcommand;
use serde_json::Value as Json;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(clap::Args)]
pub(super) struct Args {
    #[command(subcommand)]
    action: Action,
    #[command(flatten)]
    ledger: super::LedgerArg,
}

#[derive(Subcommand)]
enum Action {
    /// Walk the hash chain; name the first broken link (exit 1). With --checkpoint and
    /// --key, verify offline instead: a receipt's inclusion (--receipt), or that the second
    /// checkpoint's log extends the first's (two --checkpoint and --proof).
    Verify(Offline),
    /// Print one receipt as JSON.
    Show {
        id: String,
        /// With the receipts of the calls it made, nested under `children` (a flow's steps).
        #[arg(long)]
        tree: bool,
    },
}

pub(super) fn run(a: Args) -> anyhow::Result<ExitCode> {
    let location = Location::parse(&a.ledger.url)?;
    let runtime = super::current_thread()?;
    match a.action {
        Action::Verify(offline) if offline.is_offline() => offline.run(),
        Action::Verify(_) => match runtime.block_on(location.verify())? {
            Verdict::Intact { receipts } => {
                println!("ok: {receipts} receipts, every link holds");
                Ok(ExitCode::SUCCESS)
            }
            Verdict::Broken { seq, id, why } => {
                println!("broken at receipt {seq} ({id}): {why}");
                Ok(ExitCode::FAILURE)
            }
        },
        Action::Show { id, tree } => match runtime.block_on(location.get(&id))? {
            Some(r) if tree => {
                let root = r.draft.root.clone().unwrap_or_else(|| r.draft.id.clone());
                let below = runtime.block_on(location.tree(&root))?;
                let node = crate::ledger::nest(r, &below);
                println!("{}", serde_json::to_string_pretty(&node)?);
                Ok(ExitCode::SUCCESS)
            }
            Some(r) => {
                println!("{}", serde_json::to_string_pretty(&r)?);
                Ok(ExitCode::SUCCESS)
            }
            None => {
                eprintln!("no receipt {id} in {location}");
                Ok(ExitCode::FAILURE)
            }
        },
    }
}

/// What an offline verification is given: files and a key, never the ledger.
#[derive(clap::Args)]
struct Offline {
    /// A signed checkpoint (as `GET /api/ledger/checkpoint` answers it); give two, older
    /// first, with --proof to check that the log only grew between them.
    #[arg(long, value_name = "FILE")]
    checkpoint: Vec<PathBuf>,
    /// The log's public key (`NAME+ID+BASE64`, as `/api/ledger/key` and `capdir key` print
    /// it), or a file holding it.
    #[arg(long, value_name = "KEY")]
    key: Option<String>,
    /// A receipt as JSON with its inclusion proof under `proof`: the answer of
    /// `?confirm=ID&proof=1`, or a full receipt (`capdir ledger show`, `/receipt/ID`), whose
    /// contents are then checked against its hash.
    #[arg(long, value_name = "FILE")]
    receipt: Option<PathBuf>,
    /// The proof as JSON: the consistency proof between two checkpoints
    /// (`/api/ledger/consistency`), or the receipt's inclusion proof when its file lacks one.
    #[arg(long, value_name = "FILE")]
    proof: Option<PathBuf>,
}

fn read_json(path: &Path) -> anyhow::Result<Json> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))
}

fn read_text(path: &Path) -> anyhow::Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}

impl Offline {
    fn is_offline(&self) -> bool {
        !self.checkpoint.is_empty() || self.key.is_some() || self.receipt.is_some()
    }

    fn key(&self) -> anyhow::Result<Verifier> {
        let Some(text) = &self.key else {
            bail!("--key is needed: the log's public key (GET /api/ledger/key)");
        };
        let text = match Path::new(text).is_file() {
            true => read_text(Path::new(text))?,
            false => text.clone(),
        };
        Ok(Verifier::parse(&text)?)
    }

    fn run(self) -> anyhow::Result<ExitCode> {
        let key = self.key()?;
        let checkpoints = self
            .checkpoint
            .iter()
            .map(|p| read_text(p))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let verdict = match (&self.receipt, checkpoints.as_slice()) {
            (Some(file), cps) if cps.len() <= 1 => {
                self.receipt(file, &key, cps.first().map(String::as_str))?
            }
            (None, [old, new]) => {
                let Some(file) = &self.proof else {
                    bail!(
                        "--proof is needed: the consistency proof (GET /api/ledger/consistency?from=OLD&to=NEW)"
                    );
                };
                let proof: ConsistencyProof = serde_json::from_value(read_json(file)?)
                    .with_context(|| format!("{} is not a consistency proof", file.display()))?;
                proof.verify(old, new, &key).map(|(o, n)| {
                    format!(
                        "ok: the log of {} receipts (root {}) extends the log of {} (signed by {})",
                        n.size,
                        hex::encode(n.root),
                        o.size,
                        key.name
                    )
                })
                .map_err(|e| e.to_string())
            }
            _ => bail!(
                "give --receipt FILE (and at most one --checkpoint), or two --checkpoint and --proof"
            ),
        };
        match verdict {
            Ok(said) => {
                println!("{said}");
                Ok(ExitCode::SUCCESS)
            }
            Err(why) => {
                println!("FAILED: {why}");
                Ok(ExitCode::FAILURE)
            }
        }
    }

    /// A receipt's inclusion: its contents against its hash (a full receipt), then its hash
    /// against the signed tree.
    fn receipt(
        &self,
        file: &Path,
        key: &Verifier,
        checkpoint: Option<&str>,
    ) -> anyhow::Result<Result<String, String>> {
        let json = read_json(file)?;
        let proof_json = match (json.get("proof"), &self.proof) {
            (Some(p), _) => p.clone(),
            (None, Some(path)) => read_json(path)?,
            (None, None) => bail!(
                "{} carries no proof: fetch it with ?confirm=ID&proof=1, or give --proof",
                file.display()
            ),
        };
        let proof: InclusionProof = serde_json::from_value(proof_json).with_context(|| {
            format!("the proof in {} is not an inclusion proof", file.display())
        })?;
        let (Some(hash), Some(seq)) = (
            json.get("hash").and_then(Json::as_str),
            json.get("seq").and_then(Json::as_i64),
        ) else {
            bail!(
                "{} has no `hash` and `seq`: it is not a receipt",
                file.display()
            );
        };
        // A full receipt: its own id, checked against its hash. A confirmation: only its hash
        // is bound to the proof, so only that is said.
        let (id, contents) = if json.get("prev_hash").is_some() {
            let receipt: crate::ledger::Receipt = serde_json::from_value(json.clone())
                .with_context(|| format!("{} is not a receipt", file.display()))?;
            let id = receipt.draft.id.clone();
            if receipt.hash != hash || receipt.seq != seq || !crate::ledger::hash_holds(&receipt) {
                return Ok(Err(format!(
                    "receipt {id} (seq {seq}) was changed: its contents do not match its hash"
                )));
            }
            (id, "its contents match its hash")
        } else {
            (
                format!("with hash {hash}"),
                "only its hash was checked: give the full receipt to check its contents",
            )
        };
        if seq.checked_sub(1).and_then(|i| u64::try_from(i).ok()) != Some(proof.leaf_index) {
            return Ok(Err(format!(
                "receipt {id} is seq {seq}, the proof is for leaf {}",
                proof.leaf_index
            )));
        }
        let leaf = hex::decode(hash).with_context(|| format!("the hash of {id} is not hex"))?;
        Ok(match proof.verify(&leaf, key, checkpoint) {
            Ok(c) => Ok(format!(
                "ok: receipt {id} (seq {seq}) is in the log {} of {} receipts, root {}; {contents}",
                c.origin,
                c.size,
                hex::encode(c.root)
            )),
            Err(e) => Err(format!("receipt {id} (seq {seq}): {e}")),
        })
    }
}
