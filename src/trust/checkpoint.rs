//! Checkpoints of the receipt log in the C2SP `tlog-checkpoint` format: the body of a signed
//! note that says `ORIGIN\nSIZE\nBASE64(ROOT)\n`, so a transparency-log client that knows the
//! format and the key can read capdir's, and capdir's verifier reads theirs. The origin names
//! the log (a dispatcher's address and `/ledger`); the size is how many receipts the tree
//! holds, the root its RFC 9162 hash.

use super::merkle::Hash;
use super::note::{self, NoteError, Signer, Verifier};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;

/// What a checkpoint says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    pub origin: String,
    pub size: u64,
    pub root: Hash,
}

impl Checkpoint {
    /// The note's body.
    pub fn text(&self) -> String {
        format!(
            "{}\n{}\n{}\n",
            self.origin,
            self.size,
            B64.encode(self.root)
        )
    }

    /// The checkpoint as a note signed by `key`.
    pub fn sign(&self, key: &Signer) -> Result<String, NoteError> {
        note::sign(&self.text(), &[key])
    }

    /// Read a checkpoint's body (extension lines after the root are allowed and ignored).
    pub fn parse(text: &str) -> Result<Checkpoint, NoteError> {
        let bad = |why: &str| NoteError::Malformed(format!("not a checkpoint: {why}"));
        let mut lines = text.split('\n');
        let origin = lines.next().filter(|o| !o.is_empty());
        let (Some(origin), Some(size), Some(root)) = (origin, lines.next(), lines.next()) else {
            return Err(bad("it has an origin, a size and a root hash, a line each"));
        };
        if size.is_empty()
            || size.len() > 20
            || !size.bytes().all(|b| b.is_ascii_digit())
            || (size.len() > 1 && size.starts_with('0'))
        {
            return Err(bad("the size is not a decimal number"));
        }
        let size = size.parse().map_err(|_| bad("the size is too large"))?;
        let root: Hash = B64
            .decode(root)
            .ok()
            .and_then(|r| r.try_into().ok())
            .ok_or_else(|| bad("the root is not a base64 SHA-256"))?;
        Ok(Checkpoint {
            origin: origin.to_string(),
            size,
            root,
        })
    }

    /// Open a signed checkpoint with `key`: the signature must verify, and the origin must be
    /// the key's name, so a key for one log never vouches for another's.
    pub fn open(note: &str, key: &Verifier) -> Result<Checkpoint, NoteError> {
        let text = key.open(note)?;
        let checkpoint = Checkpoint::parse(text)?;
        if checkpoint.origin != key.name {
            return Err(NoteError::Malformed(format!(
                "the checkpoint is of log {:?}, the key of {:?}",
                checkpoint.origin, key.name
            )));
        }
        Ok(checkpoint)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signed_checkpoint_opens_and_a_changed_one_does_not() {
        let key = Signer::generate("127.0.0.1:8080/ledger").unwrap();
        let c = Checkpoint {
            origin: "127.0.0.1:8080/ledger".into(),
            size: 12345,
            root: [7; 32],
        };
        let note = c.sign(&key).unwrap();
        assert_eq!(Checkpoint::open(&note, &key.verifier()).unwrap(), c);
        let grown = note.replacen("12345", "12346", 1);
        assert!(Checkpoint::open(&grown, &key.verifier()).is_err());
        // A key named for another log does not open it, even when it signed it.
        let other = Signer::generate("elsewhere/ledger").unwrap();
        let signed_by_other = note::sign(&c.text(), &[&other]).unwrap();
        assert!(Checkpoint::open(&signed_by_other, &other.verifier()).is_err());
    }

    proptest::proptest! {
        #[test]
        fn any_text_parses_or_is_refused(text in "\\PC{0,200}") {
            let _ = Checkpoint::parse(&text);
        }
    }
}
