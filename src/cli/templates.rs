//! `capdir templates`: capdir's own templates and static files, written out to restyle a
//! catalogue's site from.

use anyhow::Context as _;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub(super) struct Args {
    /// Where to write them: the `templates/` folder beside the catalogue, which every build
    /// of it reads.
    #[arg(default_value = "templates")]
    dir: PathBuf,
    /// Replace files the folder already has.
    #[arg(long)]
    force: bool,
}

pub(super) fn run(a: Args) -> anyhow::Result<ExitCode> {
    use crate::build::pages::{ASSETS, OVERRIDABLE};
    let files = OVERRIDABLE
        .iter()
        .map(|(n, t)| (n.to_string(), t.as_bytes()))
        .chain(ASSETS.iter().map(|(n, b)| (format!("static/{n}"), *b)));
    let (mut wrote, mut kept) = (0, Vec::new());
    for (name, bytes) in files {
        let path = a.dir.join(&name);
        if path.exists() && !a.force {
            kept.push(name);
            continue;
        }
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::write(&path, bytes).with_context(|| format!("writing {}", path.display()))?;
        wrote += 1;
    }
    println!(
        "wrote {wrote} files into {}; edit any, delete the rest (a file left as capdir's is no override), then run `capdir check`",
        a.dir.display()
    );
    if !kept.is_empty() {
        println!(
            "kept {} that were there (--force replaces them): {}",
            kept.len(),
            kept.join(", ")
        );
    }
    Ok(ExitCode::SUCCESS)
}
