//! Ed25519 keys and signed notes in the format transparency-log tools share (C2SP
//! `signed-note`): a text that ends in a newline, a blank line, then one line per signature,
//! `— NAME BASE64(KEY_ID ‖ SIGNATURE)`. A key is named; its id is the first four bytes of
//! SHA-256(name ‖ `\n` ‖ 0x01 ‖ public key), so a verifier picks the line meant for its key and
//! ignores the others (which is how one note carries an old and a new key's signatures
//! during a rotation).
//!
//! Keys are written as such tools write them: the verifier key `NAME+KEYID+BASE64(0x01 ‖
//! PUBLIC)`, the signer key `PRIVATE+KEY+NAME+KEYID+BASE64(0x01 ‖ SEED)`. Signing and
//! verifying are ring's (already built for TLS), never hand-written.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use ring::signature::{ED25519, Ed25519KeyPair, KeyPair as _, UnparsedPublicKey};
use sha2::{Digest, Sha256};

/// The algorithm byte of Ed25519 keys in signed notes.
const ALG_ED25519: u8 = 0x01;

/// What opens a signature line.
const DASH: &str = "\u{2014} ";

/// Longest note accepted for reading (a checkpoint or a build's signature is a few hundred
/// bytes).
pub const MAX_NOTE_BYTES: usize = 1 << 20;

/// Why a key or a note was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoteError {
    #[error("not a key: {0}")]
    BadKey(String),
    #[error("not a signed note: {0}")]
    Malformed(String),
    #[error("no signature by {0} in the note")]
    Unsigned(String),
    #[error("the signature by {0} does not verify: the note was changed or not signed by that key")]
    BadSignature(String),
}

/// A key name: printable, no spaces or `+` (they separate a key's parts).
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 256
        && name
            .chars()
            .all(|c| !c.is_whitespace() && !c.is_control() && c != '+')
}

/// The four-byte id of an Ed25519 key named `name`.
fn key_id(name: &str, public: &[u8]) -> [u8; 4] {
    let mut h = Sha256::new();
    h.update(name.as_bytes());
    h.update(b"\n");
    h.update([ALG_ED25519]);
    h.update(public);
    let d = h.finalize();
    [d[0], d[1], d[2], d[3]]
}

/// A public key that verifies notes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verifier {
    pub name: String,
    id: [u8; 4],
    public: [u8; 32],
}

/// The 32 bytes of a key's base64 part: the Ed25519 algorithm byte, then the public key or
/// the seed (`what`).
fn ed25519_bytes(
    b64: &str,
    what: &str,
    bad: &dyn Fn(&str) -> NoteError,
) -> Result<[u8; 32], NoteError> {
    let raw = B64.decode(b64).map_err(|_| bad("the key is not base64"))?;
    let Some((&ALG_ED25519, key)) = raw.split_first() else {
        return Err(bad("not an Ed25519 key"));
    };
    key.try_into()
        .map_err(|_| bad(&format!("an Ed25519 {what} has 32 bytes")))
}

impl Verifier {
    /// Read `NAME+KEYID+BASE64`, checking that the id is the key's.
    pub fn parse(text: &str) -> Result<Verifier, NoteError> {
        let text = text.trim();
        let bad = |why: &str| NoteError::BadKey(format!("{why} (expected NAME+KEYID+BASE64)"));
        // The name has no `+`; the base64 key may.
        let mut parts = text.splitn(3, '+');
        let (Some(name), Some(hex_id), Some(b64)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(bad("too few parts"));
        };
        if !valid_name(name) {
            return Err(bad("the name is empty or has spaces"));
        }
        let public = ed25519_bytes(b64, "public key", &bad)?;
        let id = key_id(name, &public);
        if hex_id.len() != 8 || !hex_id.eq_ignore_ascii_case(&hex::encode(id)) {
            return Err(bad("the key id does not match the key"));
        }
        Ok(Verifier {
            name: name.to_string(),
            id,
            public,
        })
    }

    /// Does `signature` (64 bytes) sign `message` under this key?
    pub fn verifies(&self, message: &[u8], signature: &[u8]) -> bool {
        UnparsedPublicKey::new(&ED25519, &self.public)
            .verify(message, signature)
            .is_ok()
    }

    /// The text of a note this key signed, refused unless one of its signature lines is this
    /// key's and verifies.
    pub fn open<'a>(&self, note: &'a str) -> Result<&'a str, NoteError> {
        let (text, signatures) = split(note)?;
        let mut seen = false;
        for (name, id, sig) in signatures {
            if name == self.name && id == self.id {
                seen = true;
                if self.verifies(text.as_bytes(), &sig) {
                    return Ok(text);
                }
            }
        }
        Err(if seen {
            NoteError::BadSignature(self.to_string())
        } else {
            NoteError::Unsigned(self.to_string())
        })
    }
}

impl std::fmt::Display for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut raw = vec![ALG_ED25519];
        raw.extend_from_slice(&self.public);
        write!(
            f,
            "{}+{}+{}",
            self.name,
            hex::encode(self.id),
            B64.encode(raw)
        )
    }
}

/// A private key that signs notes.
pub struct Signer {
    name: String,
    pair: Ed25519KeyPair,
    seed: [u8; 32],
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Signer({})", self.verifier())
    }
}

impl Signer {
    /// A new key named `name`, from the system's random source.
    pub fn generate(name: &str) -> Result<Signer, NoteError> {
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed)
            .map_err(|e| NoteError::BadKey(format!("no randomness for a key: {e}")))?;
        Signer::from_seed(name, seed)
    }

    fn from_seed(name: &str, seed: [u8; 32]) -> Result<Signer, NoteError> {
        if !valid_name(name) {
            return Err(NoteError::BadKey(format!(
                "a key name has no spaces or '+': {name:?}"
            )));
        }
        let pair = Ed25519KeyPair::from_seed_unchecked(&seed)
            .map_err(|_| NoteError::BadKey("not an Ed25519 seed".into()))?;
        Ok(Signer {
            name: name.to_string(),
            pair,
            seed,
        })
    }

    /// Read `PRIVATE+KEY+NAME+KEYID+BASE64`.
    pub fn parse(text: &str) -> Result<Signer, NoteError> {
        let bad = |why: &str| {
            NoteError::BadKey(format!(
                "{why} (expected PRIVATE+KEY+NAME+KEYID+BASE64, as `capdir key new` writes)"
            ))
        };
        let rest = text
            .trim()
            .strip_prefix("PRIVATE+KEY+")
            .ok_or_else(|| bad("not a private key"))?;
        let mut parts = rest.splitn(3, '+');
        let (Some(name), Some(hex_id), Some(b64)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(bad("too few parts"));
        };
        let seed = ed25519_bytes(b64, "seed", &bad)?;
        let signer = Signer::from_seed(name, seed)?;
        if !hex_id.eq_ignore_ascii_case(&hex::encode(signer.verifier().id)) {
            return Err(bad("the key id does not match the key"));
        }
        Ok(signer)
    }

    /// The key as `PRIVATE+KEY+…`, for its file.
    pub fn private_text(&self) -> String {
        let mut raw = vec![ALG_ED25519];
        raw.extend_from_slice(&self.seed);
        format!(
            "PRIVATE+KEY+{}+{}+{}",
            self.name,
            hex::encode(self.verifier().id),
            B64.encode(raw)
        )
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The public half.
    pub fn verifier(&self) -> Verifier {
        let mut public = [0u8; 32];
        public.copy_from_slice(self.pair.public_key().as_ref());
        Verifier {
            name: self.name.clone(),
            id: key_id(&self.name, &public),
            public,
        }
    }

    /// The signature line of this key over `text`.
    fn line(&self, text: &str) -> String {
        let mut raw = self.verifier().id.to_vec();
        raw.extend_from_slice(self.pair.sign(text.as_bytes()).as_ref());
        format!("{DASH}{} {}\n", self.name, B64.encode(raw))
    }
}

/// Sign `text` (which must end in a newline) with every key of `signers`, in order.
pub fn sign(text: &str, signers: &[&Signer]) -> Result<String, NoteError> {
    if !text.ends_with('\n') || text.contains("\n\n") {
        return Err(NoteError::Malformed(
            "a note's text ends in one newline and has no blank line".into(),
        ));
    }
    let mut note = format!("{text}\n");
    for s in signers {
        note.push_str(&s.line(text));
    }
    Ok(note)
}

/// A signature line: the key's name, id and signature.
type Line = (String, [u8; 4], Vec<u8>);

/// A note's text and its signature lines.
pub fn split(note: &str) -> Result<(&str, Vec<Line>), NoteError> {
    if note.len() > MAX_NOTE_BYTES {
        return Err(NoteError::Malformed("over 1 MiB".into()));
    }
    let at = note
        .rfind("\n\n")
        .ok_or_else(|| NoteError::Malformed("no blank line before the signatures".into()))?;
    let text = &note[..=at];
    let lines = &note[at + 2..];
    if !lines.ends_with('\n') {
        return Err(NoteError::Malformed(
            "the last signature line does not end in a newline".into(),
        ));
    }
    let mut out = Vec::new();
    for line in lines.lines() {
        let bad = || NoteError::Malformed(format!("not a signature line: {line:?}"));
        let rest = line.strip_prefix(DASH).ok_or_else(bad)?;
        let (name, b64) = rest.split_once(' ').ok_or_else(bad)?;
        let raw = B64.decode(b64).map_err(|_| bad())?;
        if raw.len() < 5 || !valid_name(name) {
            return Err(bad());
        }
        let id = [raw[0], raw[1], raw[2], raw[3]];
        out.push((name.to_string(), id, raw[4..].to_vec()));
    }
    if out.is_empty() {
        return Err(NoteError::Malformed("no signature line".into()));
    }
    Ok((text, out))
}

/// The text of a note signed by any of `keys`, and the key that signed it.
pub fn open_any<'a, 'k>(
    note: &'a str,
    keys: &'k [Verifier],
) -> Result<(&'a str, &'k Verifier), NoteError> {
    let mut last = NoteError::Unsigned(
        keys.iter()
            .map(Verifier::to_string)
            .collect::<Vec<_>>()
            .join(" or "),
    );
    for key in keys {
        match key.open(note) {
            Ok(text) => return Ok((text, key)),
            Err(e @ NoteError::Malformed(_)) => return Err(e),
            Err(e @ NoteError::BadSignature(_)) => last = e,
            Err(NoteError::Unsigned(_) | NoteError::BadKey(_)) => {}
        }
    }
    Err(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signed_note_opens_with_its_key_only() {
        let a = Signer::generate("capdir.test/build").unwrap();
        let b = Signer::generate("capdir.test/build").unwrap();
        let note = sign("hello\nworld\n", &[&a]).unwrap();
        assert_eq!(a.verifier().open(&note).unwrap(), "hello\nworld\n");
        assert!(matches!(
            b.verifier().open(&note),
            Err(NoteError::Unsigned(_))
        ));
        // One byte of the text changed: the signature no longer holds.
        let changed = note.replacen("world", "worle", 1);
        assert!(matches!(
            a.verifier().open(&changed),
            Err(NoteError::BadSignature(_))
        ));
        // Two signatures: each key finds its own.
        let both = sign("x\n", &[&a, &b]).unwrap();
        assert!(a.verifier().open(&both).is_ok() && b.verifier().open(&both).is_ok());
    }

    #[test]
    fn keys_round_trip_through_their_text() {
        let a = Signer::generate("example.com/log").unwrap();
        let again = Signer::parse(&a.private_text()).unwrap();
        assert_eq!(again.verifier(), a.verifier());
        let v = Verifier::parse(&a.verifier().to_string()).unwrap();
        assert_eq!(v, a.verifier());
        // A key id that is not the key's is refused.
        let text = a.verifier().to_string();
        let parts: Vec<&str> = text.splitn(3, '+').collect();
        let forged = format!("{}+00000000+{}", parts[0], parts[2]);
        assert!(Verifier::parse(&forged).is_err());
        // Keys whose base64 holds a `+` read back too (a name never has one).
        for _ in 0..64 {
            let k = Signer::generate("a.test/log").unwrap();
            assert_eq!(
                Verifier::parse(&k.verifier().to_string()).unwrap(),
                k.verifier()
            );
            assert_eq!(
                Signer::parse(&k.private_text()).unwrap().verifier(),
                k.verifier()
            );
        }
    }

    /// Go's `golang.org/x/mod/sumdb/note` test vector: the key, and a note it signed.
    #[test]
    fn interoperates_with_the_published_test_vector() {
        let vkey = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW";
        let note = "If you think cryptography is the answer to your problem,\n\
                    then you don't know what your problem is.\n\
                    \n\
                    \u{2014} PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n";
        let v = Verifier::parse(vkey).unwrap();
        assert_eq!(
            v.open(note).unwrap(),
            "If you think cryptography is the answer to your problem,\nthen you don't know what your problem is.\n"
        );
    }

    proptest::proptest! {
        /// Any bytes as a note or a key are refused or read, never a panic, and never open
        /// under a key that did not sign them.
        #[test]
        fn arbitrary_notes_never_verify(text in "\\PC{0,300}", key in "\\PC{0,80}") {
            let a = Signer::generate("k").unwrap();
            let _ = Verifier::parse(&key);
            let _ = Signer::parse(&key);
            proptest::prop_assert!(a.verifier().open(&text).is_err());
            let _ = split(&text);
        }
    }
}
