//! Signed builds: the publisher signs the manifest, so a follower that trusts the publisher's
//! key (`capdir serve --follow URL --trust KEY`) can tell a build the publisher made from one
//! that whoever controls the static host made, and refuses the attacks The Update Framework
//! names: an arbitrary build (no signature, or a wrong one), a rollback (a build number lower
//! than the one served) and a freeze (a manifest past its expiry).
//!
//! Signing (`capdir build --sign FILE`) fills the manifest's `number` (the catalogue's commit
//! count, which only grows while history is not rewritten), `expires` and, for a key rotation,
//! `keys` (the keys trusted from this build on), writes it again, and writes `build.json.sig`:
//! a signed note (`trust::note`) whose text names the manifest's SHA-256. During a rotation the
//! build is signed by both keys (`--sign OLD --sign NEW`), so followers on either accept it.

use super::manifest::{self, Manifest};
use crate::trust::note::{self, NoteError, Signer, Verifier};
use anyhow::{Context as _, Result, bail};
use sha2::{Digest, Sha256};
use std::path::Path;

/// The first line of a build signature's text.
const HEADER: &str = "capdir build manifest";

/// How a build is signed.
pub struct Signing<'a> {
    /// Every key that signs (one, or the old and the new during a rotation).
    pub keys: &'a [Signer],
    pub number: u64,
    /// RFC 3339.
    pub expires: String,
    /// The keys a follower trusts from this build on (empty: unchanged).
    pub next_keys: Vec<Verifier>,
}

/// The text a build's signature signs: the manifest's digest.
fn note_text(manifest_bytes: &[u8]) -> String {
    format!(
        "{HEADER}\nsha256 {}\n",
        hex::encode(Sha256::digest(manifest_bytes))
    )
}

/// The catalogue's commit count at HEAD: the build number a signed build carries.
pub fn build_number(catalogue: &Path) -> Result<u64> {
    let (repo, _) = super::git::locate(catalogue)?;
    let head = repo
        .head_id()
        .map_err(|e| anyhow::anyhow!("the catalogue has no commits to number a build by: {e}"))?;
    let mut n = 0u64;
    for info in repo.rev_walk([head.detach()]).all()? {
        info?;
        n += 1;
    }
    Ok(n)
}

/// Sign the built site `site`: its manifest gains the number, the expiry and the next keys,
/// and the signature is written beside it.
pub fn sign(site: &Path, how: &Signing) -> Result<Manifest> {
    if how.keys.is_empty() {
        bail!("no key to sign with");
    }
    let path = site.join(manifest::FILE);
    let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
    let mut manifest = Manifest::parse(&bytes)?;
    manifest.number = Some(how.number);
    manifest.expires = Some(how.expires.clone());
    manifest.keys = how.next_keys.iter().map(Verifier::to_string).collect();
    let text = serde_json::to_string(&manifest)? + "\n";
    let signers: Vec<&Signer> = how.keys.iter().collect();
    let signature = note::sign(&note_text(text.as_bytes()), &signers)?;
    crate::atomic::write(&path, text.as_bytes())?;
    crate::atomic::write(&site.join(manifest::SIG_FILE), signature.as_bytes())?;
    Ok(manifest)
}

/// Why a follower refused a published build.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BuildRefusal {
    #[error("the build is not signed (no build.json.sig)")]
    Unsigned,
    #[error("the build's signature does not hold: {0}")]
    BadSignature(String),
    #[error("the build carries no build number or expiry")]
    Unnumbered,
    #[error("rollback: build {offered} is not newer than build {held}, which is served")]
    Rollback { offered: u64, held: u64 },
    #[error("the build expired at {0}: the host may be serving a stale build (freeze)")]
    Expired(String),
}

impl BuildRefusal {
    /// The reason as `/metrics` labels it.
    pub fn code(&self) -> &'static str {
        match self {
            BuildRefusal::Unsigned => "unsigned",
            BuildRefusal::BadSignature(_) => "bad_signature",
            BuildRefusal::Unnumbered => "unnumbered",
            BuildRefusal::Rollback { .. } => "rollback",
            BuildRefusal::Expired(_) => "expired",
        }
    }
}

/// Check a published manifest (its exact bytes) and its signature against the keys trusted;
/// returns the key that signed it.
pub fn verify<'k>(
    manifest_bytes: &[u8],
    signature: Option<&str>,
    trusted: &'k [Verifier],
) -> Result<&'k Verifier, BuildRefusal> {
    let signature = signature.ok_or(BuildRefusal::Unsigned)?;
    let (text, key) = note::open_any(signature, trusted).map_err(|e| match e {
        NoteError::Unsigned(_) => {
            BuildRefusal::BadSignature("no signature by a trusted key".to_string())
        }
        other => BuildRefusal::BadSignature(other.to_string()),
    })?;
    if text != note_text(manifest_bytes) {
        return Err(BuildRefusal::BadSignature(
            "the signature is of another manifest".into(),
        ));
    }
    Ok(key)
}

/// Is the signed `manifest` acceptable after the build `held` (the one served), at `now`?
pub fn admit(manifest: &Manifest, held: Option<&Manifest>, now: i64) -> Result<(), BuildRefusal> {
    let (Some(number), Some(expires)) = (manifest.number, manifest.expires.as_deref()) else {
        return Err(BuildRefusal::Unnumbered);
    };
    if let Some(held) = held
        && let Some(held_number) = held.number
        && (number < held_number || number == held_number && manifest.commit != held.commit)
    {
        // The same number is the same build signed again (a later expiry), never another
        // commit: history rewritten to the same count is refused like an older build.
        return Err(BuildRefusal::Rollback {
            offered: number,
            held: held_number,
        });
    }
    let expiry = chrono::DateTime::parse_from_rfc3339(expires)
        .map_err(|_| BuildRefusal::Unnumbered)?
        .timestamp();
    if expiry <= now {
        return Err(BuildRefusal::Expired(expires.to_string()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_covers_the_exact_manifest() {
        let key = Signer::generate("site.test").unwrap();
        let bytes = br#"{"format":1}"#;
        let sig = note::sign(&note_text(bytes), &[&key]).unwrap();
        let trusted = [key.verifier()];
        assert!(verify(bytes, Some(&sig), &trusted).is_ok());
        assert_eq!(verify(bytes, None, &trusted), Err(BuildRefusal::Unsigned));
        assert!(matches!(
            verify(br#"{"format":2}"#, Some(&sig), &trusted),
            Err(BuildRefusal::BadSignature(_))
        ));
        let stranger = [Signer::generate("site.test").unwrap().verifier()];
        assert!(matches!(
            verify(bytes, Some(&sig), &stranger),
            Err(BuildRefusal::BadSignature(_))
        ));
    }
}
