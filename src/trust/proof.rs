//! Proofs as the dispatcher hands them out and an auditor checks them, with nothing but the
//! log's public key: an inclusion proof (a receipt's leaf is in the tree a signed checkpoint
//! names) and a consistency proof (a later signed checkpoint's tree extends an earlier one's).

use super::checkpoint::Checkpoint;
use super::merkle::{self, Hash};
use super::note::{NoteError, Verifier};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde::{Deserialize, Serialize};

/// An inclusion proof as answers carry it and `capdir ledger verify --receipt` reads it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InclusionProof {
    /// The receipt's place in the tree: its `seq` less one.
    pub leaf_index: u64,
    pub tree_size: u64,
    /// Base64 hashes, the leaf's sibling first.
    pub hashes: Vec<String>,
    /// The signed checkpoint of `tree_size` the proof is against.
    pub checkpoint: String,
}

/// A consistency proof between two tree sizes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConsistencyProof {
    pub old_size: u64,
    pub new_size: u64,
    pub hashes: Vec<String>,
}

/// Why a proof does not hold.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProofError {
    #[error("the checkpoint: {0}")]
    Checkpoint(#[from] NoteError),
    #[error("the proof is malformed: {0}")]
    Malformed(String),
    #[error("the proof is for a tree of {proof} receipts, the checkpoint's has {checkpoint}")]
    OtherTree { proof: u64, checkpoint: u64 },
    #[error("the proof does not hold: this leaf is not at that place in the signed tree")]
    NotIncluded,
    #[error(
        "the proof does not hold: the later checkpoint's log does not extend the earlier one's"
    )]
    Inconsistent,
}

/// Hashes as base64 text.
pub fn encode(hashes: &[Hash]) -> Vec<String> {
    hashes.iter().map(|h| B64.encode(h)).collect()
}

/// Base64 text back into hashes.
pub fn decode(hashes: &[String]) -> Result<Vec<Hash>, ProofError> {
    hashes
        .iter()
        .map(|h| {
            B64.decode(h)
                .ok()
                .and_then(|b| b.try_into().ok())
                .ok_or_else(|| ProofError::Malformed(format!("{h:?} is not a base64 SHA-256")))
        })
        .collect()
}

/// The most hashes a proof of a tree of 2^64 leaves can need.
const MAX_PATH: usize = 64;

impl InclusionProof {
    /// Check that the leaf whose data is `leaf_data` is at `leaf_index` in the tree the
    /// checkpoint names, the checkpoint signed by `key`. `checkpoint` replaces the one the proof
    /// carries (an auditor's own copy of it).
    pub fn verify(
        &self,
        leaf_data: &[u8],
        key: &Verifier,
        checkpoint: Option<&str>,
    ) -> Result<Checkpoint, ProofError> {
        let signed = Checkpoint::open(checkpoint.unwrap_or(&self.checkpoint), key)?;
        if signed.size != self.tree_size {
            return Err(ProofError::OtherTree {
                proof: self.tree_size,
                checkpoint: signed.size,
            });
        }
        if self.hashes.len() > MAX_PATH {
            return Err(ProofError::Malformed("too many hashes".into()));
        }
        let path = decode(&self.hashes)?;
        let leaf = merkle::leaf_hash(leaf_data);
        if merkle::verify_inclusion(self.leaf_index, signed.size, &leaf, &path, &signed.root) {
            Ok(signed)
        } else {
            Err(ProofError::NotIncluded)
        }
    }
}

impl ConsistencyProof {
    /// Check that the log `new` (a signed checkpoint) extends the log `old`, both signed by
    /// `key`.
    pub fn verify(
        &self,
        old: &str,
        new: &str,
        key: &Verifier,
    ) -> Result<(Checkpoint, Checkpoint), ProofError> {
        let (old, new) = (Checkpoint::open(old, key)?, Checkpoint::open(new, key)?);
        for (proof, checkpoint) in [(self.old_size, old.size), (self.new_size, new.size)] {
            if proof != checkpoint {
                return Err(ProofError::OtherTree { proof, checkpoint });
            }
        }
        if self.hashes.len() > 2 * MAX_PATH {
            return Err(ProofError::Malformed("too many hashes".into()));
        }
        let path = decode(&self.hashes)?;
        if merkle::verify_consistency(old.size, new.size, &path, &old.root, &new.root) {
            Ok((old, new))
        } else {
            Err(ProofError::Inconsistent)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trust::merkle::Frontier;
    use crate::trust::note::Signer;
    use std::collections::HashMap;

    fn log(n: u64) -> HashMap<(u32, u64), Hash> {
        let mut f = Frontier::default();
        let mut nodes = HashMap::new();
        for i in 0..n {
            for (l, idx, h) in f.push(merkle::leaf_hash(&i.to_be_bytes())) {
                nodes.insert((l, idx), h);
            }
        }
        nodes
    }

    #[test]
    fn proofs_verify_against_signed_checkpoints_only() {
        let key = Signer::generate("log.test/ledger").unwrap();
        let nodes = log(300);
        let mut get = |l, i| nodes[&(l, i)];
        let checkpoint = |size: u64, get: &mut dyn FnMut(u32, u64) -> Hash| {
            Checkpoint {
                origin: "log.test/ledger".into(),
                size,
                root: merkle::root(size, get),
            }
            .sign(&key)
            .unwrap()
        };
        let (c100, c300) = (checkpoint(100, &mut get), checkpoint(300, &mut get));
        let proof = InclusionProof {
            leaf_index: 42,
            tree_size: 300,
            hashes: encode(&merkle::inclusion_proof(42, 300, &mut get)),
            checkpoint: c300.clone(),
        };
        let v = key.verifier();
        assert!(proof.verify(&42u64.to_be_bytes(), &v, None).is_ok());
        assert_eq!(
            proof.verify(&43u64.to_be_bytes(), &v, None),
            Err(ProofError::NotIncluded)
        );
        // The proof against another checkpoint, or one signed by another key.
        assert!(matches!(
            proof.verify(&42u64.to_be_bytes(), &v, Some(&c100)),
            Err(ProofError::OtherTree { .. })
        ));
        let stranger = Signer::generate("log.test/ledger").unwrap().verifier();
        assert!(matches!(
            proof.verify(&42u64.to_be_bytes(), &stranger, None),
            Err(ProofError::Checkpoint(_))
        ));
        let grew = ConsistencyProof {
            old_size: 100,
            new_size: 300,
            hashes: encode(&merkle::consistency_proof(100, 300, &mut get)),
        };
        assert!(grew.verify(&c100, &c300, &v).is_ok());
        // A log rewritten after 100: the old checkpoint's tree is not a prefix.
        let forked_root = {
            let mut f = Frontier::default();
            for i in 0..300u64 {
                f.push(merkle::leaf_hash(&(i + u64::from(i == 7)).to_be_bytes()));
            }
            f.root()
        };
        let forked = Checkpoint {
            origin: "log.test/ledger".into(),
            size: 300,
            root: forked_root,
        }
        .sign(&key)
        .unwrap();
        assert_eq!(
            grew.verify(&c100, &forked, &v),
            Err(ProofError::Inconsistent)
        );
    }

    proptest::proptest! {
        /// Whatever an auditor is handed as a proof (any index, size, hashes, checkpoint
        /// text), checking it never panics and never succeeds without the key's signature.
        #[test]
        fn arbitrary_proofs_never_verify_and_never_panic(
            leaf_index in 0u64..u64::MAX,
            tree_size in 0u64..u64::MAX,
            hashes in proptest::collection::vec("\\PC{0,50}", 0..80),
            checkpoint in "\\PC{0,200}",
            leaf in proptest::collection::vec(0u8..=255, 0..40),
        ) {
            let key = Signer::generate("fuzz.test/ledger").unwrap().verifier();
            let proof = InclusionProof { leaf_index, tree_size, hashes: hashes.clone(), checkpoint: checkpoint.clone() };
            proptest::prop_assert!(proof.verify(&leaf, &key, None).is_err());
            let consistency = ConsistencyProof { old_size: leaf_index, new_size: tree_size, hashes };
            proptest::prop_assert!(consistency.verify(&checkpoint, &checkpoint, &key).is_err());
        }
    }
}
