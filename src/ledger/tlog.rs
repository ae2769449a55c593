//! The receipt log as a transparency log: beside the hash chain, a Merkle tree over the
//! receipts in ledger order (`trust::merkle`, RFC 9162), its nodes stored in the same
//! transaction as the receipts they cover, so the tree is never behind the chain. The leaf of
//! receipt `seq` is at index `seq - 1`, and its data is the receipt's chain hash (32 bytes): the
//! leaf binds the receipt and, through the chain, everything before it.
//!
//! Inner nodes are stored in runs, one row a batch: `(first, hashes)`, the place of the run's
//! first node in the order pushes make them (`merkle::inner_position`) and the run's hashes end
//! to end. A batch's nodes are consecutive in that order, so the rows only ever grow at their
//! end: a commit writes one row near the last, where a row a node would scatter its writes
//! over every level's region of an index (half the pages a commit wrote, measured).
//!
//! Both backends keep the tree's right edge (`Frontier`) in their writer and reload it from
//! storage when another writer appended meanwhile; a ledger made before the tree existed is
//! caught up from its receipts' hashes the first time a writer opens it.

use super::Ledger;
use crate::trust::merkle::{self, Hash};
use anyhow::{Context as _, Result, anyhow};
use std::collections::HashMap;

/// A receipt's leaf hash, from its chain hash in hex.
pub fn leaf(hash_hex: &str) -> Result<Hash> {
    let bytes = hex::decode(hash_hex).context("a receipt's hash is not hex")?;
    Ok(merkle::leaf_hash(&bytes))
}

/// Run a computation over the stored tree: find the nodes it reads, fetch them in one go,
/// compute.
async fn over_nodes<T>(
    ledger: &dyn Ledger,
    compute: impl Fn(&mut dyn FnMut(u32, u64) -> Hash) -> T,
) -> Result<T> {
    let wanted = merkle::needed(&compute);
    let got = ledger.tree_nodes(&wanted).await?;
    merkle::evaluate(&compute, &got).map_err(|(level, index)| {
        anyhow!("the ledger lacks the tree node at level {level}, index {index}")
    })
}

/// The root of the tree of the first `size` receipts.
pub async fn root(ledger: &dyn Ledger, size: u64) -> Result<Hash> {
    over_nodes(ledger, |get| merkle::root(size, get)).await
}

/// The inclusion proof of the receipt at leaf `index` in the tree of `size` receipts.
pub async fn inclusion(ledger: &dyn Ledger, index: u64, size: u64) -> Result<Vec<Hash>> {
    over_nodes(ledger, |get| merkle::inclusion_proof(index, size, get)).await
}

/// The consistency proof between the trees of `old` and `new` receipts.
pub async fn consistency(ledger: &dyn Ledger, old: u64, new: u64) -> Result<Vec<Hash>> {
    over_nodes(ledger, |get| merkle::consistency_proof(old, new, get)).await
}

/// Most nodes one stored run holds (a catch-up over many receipts is cut in runs).
const RUN: usize = 1024;

/// The inner nodes among `nodes` as stored runs, `(first place, hashes end to end)`; the
/// leaves are left out (each is its receipt's chain hash, read from the receipt).
pub fn runs(nodes: &[merkle::Node]) -> Vec<(i64, Vec<u8>)> {
    let mut out: Vec<(i64, Vec<u8>)> = Vec::new();
    let mut next = None;
    for &(level, index, ref hash) in nodes.iter().filter(|n| n.0 > 0) {
        let place = merkle::inner_position(level, index);
        match out.last_mut() {
            Some((_, run)) if next == Some(place) && run.len() < RUN * 32 => {
                run.extend_from_slice(hash)
            }
            _ => out.push((place as i64, hash.to_vec())),
        }
        next = Some(place + 1);
    }
    out
}

/// The node at `place` in the stored run that starts at `first`, when the run holds it.
pub fn in_run(first: i64, run: &[u8], place: u64) -> Option<Hash> {
    let at = usize::try_from(place.checked_sub(u64::try_from(first).ok()?)?).ok()?;
    run.get(at.checked_mul(32)?..)?.get(..32)?.try_into().ok()
}

/// Nodes read back from storage, by coordinate.
pub type Nodes = HashMap<(u32, u64), Hash>;

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Every inner node of a tree made in batches is found again in the runs its batches
    /// stored, at its own coordinates.
    #[test]
    fn runs_give_back_every_node() {
        let mut f = merkle::Frontier::default();
        let mut stored = Vec::new();
        let mut made = Vec::new();
        for batch in [1usize, 3, 7, 1, 64, 2, 2000, 5] {
            let mut nodes = Vec::new();
            for i in 0..batch {
                nodes.extend(f.push(merkle::leaf_hash(&(stored.len() + i).to_be_bytes())));
            }
            made.extend(nodes.iter().filter(|n| n.0 > 0).copied());
            stored.extend(runs(&nodes));
        }
        assert!(stored.iter().all(|(_, run)| run.len() <= RUN * 32));
        for (level, index, hash) in made {
            let place = merkle::inner_position(level, index);
            let (first, run) = stored
                .iter()
                .rev()
                .find(|(first, _)| *first as u64 <= place)
                .unwrap();
            assert_eq!(in_run(*first, run, place), Some(hash), "({level}, {index})");
        }
    }

    proptest! {
        /// A stored run is read from the ledger's storage: any bytes, any place, no panic.
        #[test]
        fn in_run_takes_any_bytes(first in any::<i64>(), run in proptest::collection::vec(any::<u8>(), 0..200), place in any::<u64>()) {
            let got = in_run(first, &run, place);
            if let Some(hash) = got {
                let at = (place - first as u64) as usize * 32;
                prop_assert_eq!(&run[at..at + 32], &hash[..]);
            }
        }
    }
}
