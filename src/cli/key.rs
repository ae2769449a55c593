//! `capdir key new FILE`: an Ed25519 signing key for builds (`capdir build --sign`) or for a
//! dispatcher's receipt log (`capdir serve --log-key`), written where only its owner reads it;
//! the public key a follower or an auditor trusts is printed. `capdir key public FILE` prints
//! it again. Also where the commands that sign read their key from.

use crate::trust::note::Signer;
use anyhow::{Context as _, Result, bail};
use clap::Subcommand;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(clap::Args)]
pub(super) struct Args {
    #[command(subcommand)]
    action: Action,
}

#[derive(Subcommand)]
enum Action {
    /// Write a new private key to FILE (refused when FILE exists) and print its public key.
    New {
        file: PathBuf,
        /// The key's name, which a signed note carries and a follower checks: a build key is
        /// named for the site (`owner.github.io/catalogue`), a log key for the log
        /// (`dispatcher.example/ledger`).
        #[arg(long, default_value = "capdir")]
        name: String,
    },
    /// Print the public key of the private key in FILE.
    Public { file: PathBuf },
}

pub(super) fn run(a: Args) -> Result<ExitCode> {
    match a.action {
        Action::New { file, name } => {
            let key = Signer::generate(&name)?;
            write_private(&file, &key)?;
            eprintln!(
                "wrote {}; keep it secret (a repository secret in CI). Its public key:",
                file.display()
            );
            println!("{}", key.verifier());
        }
        Action::Public { file } => println!("{}", read(&file)?.verifier()),
    }
    Ok(ExitCode::SUCCESS)
}

/// Write a private key to a new file readable by its owner only.
pub(super) fn write_private(file: &Path, key: &Signer) -> Result<()> {
    use std::io::Write as _;
    if let Some(dir) = file.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut f = options.open(file).with_context(|| {
        format!(
            "writing {} (an existing key is never overwritten)",
            file.display()
        )
    })?;
    f.write_all(format!("{}\n", key.private_text()).as_bytes())?;
    f.sync_all()?;
    Ok(())
}

/// A private key from a file, or from the variable `env` holding the key's text (how CI hands
/// a repository secret over without writing it to disk).
pub(super) fn read_from(file: Option<&Path>, env: &str) -> Result<Option<Signer>> {
    if let Some(file) = file {
        return Ok(Some(read(file)?));
    }
    match std::env::var(env) {
        Ok(text) if !text.trim().is_empty() => Ok(Some(
            Signer::parse(&text).with_context(|| format!("${env} is not a signing key"))?,
        )),
        _ => Ok(None),
    }
}

pub(super) fn read(file: &Path) -> Result<Signer> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    Signer::parse(&text).with_context(|| format!("{} is not a signing key", file.display()))
}

/// The log key at `file`, made (named `name`) when there is none yet.
pub(super) fn read_or_make(file: &Path, name: &str) -> Result<(Signer, &'static str)> {
    if file.exists() {
        return Ok((read(file)?, "file"));
    }
    let key = Signer::generate(name)?;
    match write_private(file, &key) {
        Ok(()) => Ok((key, "generated")),
        // Another process made it first: use theirs.
        Err(_) if file.exists() => Ok((read(file)?, "file")),
        Err(e) => bail!("{e:#}"),
    }
}
