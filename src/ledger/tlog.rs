//! The receipt log as a transparency log: beside the hash chain, a Merkle tree over the
//! receipts in ledger order (`trust::merkle`, RFC 9162), its nodes stored in the same
//! transaction as the receipts they cover, so the tree is never behind the chain. The leaf of
//! receipt `seq` is at index `seq - 1`, and its data is the receipt's chain hash (32 bytes): the
//! leaf binds the receipt and, through the chain, everything before it.
//!
//! Each inner node is kept in the row of the receipt whose leaf completed it (`nodes`, the
//! hashes end to end, lowest level first: the row of receipt `seq` keeps as many nodes as `seq`
//! has trailing zero bits, one on average). So the tree adds no row and no index to a commit,
//! only some 32 bytes a receipt to rows the commit writes anyway; the node at level `l`, index
//! `i` is in the row of receipt `(i + 1)·2^l`. (Kept as rows of their own, the nodes had cost a
//! commit about half of the pages it wrote, and on PostgreSQL a sixth of the throughput.)
//!
//! Both backends keep the tree's right edge (`Frontier`) in their writer and reload it from
//! the rows it lies in when another writer appended meanwhile; the receipts of a ledger made
//! before their rows kept nodes (`nodes` is null) are caught up from their hashes the first time
//! a writer opens it.

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

/// The nodes a receipt's row keeps, from what pushing its leaf made (`Frontier::push`): the
/// inner ones, lowest level first, end to end.
pub fn row_nodes(made: &[merkle::Node]) -> Vec<u8> {
    made.iter()
        .filter(|n| n.0 > 0)
        .flat_map(|n| n.2.iter().copied())
        .collect()
}

/// The receipt whose row keeps the node at `(level, index)` (its hash for a leaf, its `nodes`
/// above); `None` past the last possible receipt.
pub fn row_of(level: u32, index: u64) -> Option<i64> {
    let seq = index.checked_add(1)?.checked_shl(level)?;
    (seq >> level == index + 1)
        .then_some(seq)
        .and_then(|s| i64::try_from(s).ok())
}

/// Receipt rows as the tree reads them: by `seq`, the chain hash (hex) and the kept nodes.
pub type Rows = HashMap<i64, (String, Option<Vec<u8>>)>;

/// The nodes at `wanted` from the rows that keep them (rows missing or too short give nothing,
/// and the computation that wanted them reports it).
pub fn pick(wanted: &[(u32, u64)], rows: &Rows) -> Result<Nodes> {
    let mut out = Nodes::new();
    for &(level, index) in wanted {
        let Some((hash, nodes)) = row_of(level, index).and_then(|seq| rows.get(&seq)) else {
            continue;
        };
        if level == 0 {
            out.insert((0, index), leaf(hash)?);
            continue;
        }
        let at = (level as usize - 1) * 32;
        if let Some(node) = nodes.as_deref().and_then(|n| n.get(at..at + 32)) {
            out.insert((level, index), node.try_into().expect("32 bytes"));
        }
    }
    Ok(out)
}

/// The receipts whose rows keep the nodes at `wanted`.
pub fn rows_for(wanted: &[(u32, u64)]) -> Vec<i64> {
    let mut seqs: Vec<i64> = wanted.iter().filter_map(|&(l, i)| row_of(l, i)).collect();
    seqs.sort_unstable();
    seqs.dedup();
    seqs
}

/// Nodes read back from storage, by coordinate.
pub type Nodes = HashMap<(u32, u64), Hash>;

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Every node of a tree is found again in the row its receipt keeps, at its coordinates.
    #[test]
    fn rows_give_back_every_node() {
        let mut f = merkle::Frontier::default();
        let mut rows = HashMap::new();
        let mut made = Vec::new();
        for seq in 1..=1000i64 {
            let hash = hex::encode(seq.to_be_bytes().repeat(4));
            let pushed = f.push(leaf(&hash).unwrap());
            rows.insert(seq, (hash, Some(row_nodes(&pushed))));
            made.extend(pushed);
        }
        let wanted: Vec<(u32, u64)> = made.iter().map(|n| (n.0, n.1)).collect();
        assert_eq!(rows_for(&wanted).len(), 1000);
        let got = pick(&wanted, &rows).unwrap();
        for (level, index, hash) in made {
            assert_eq!(got.get(&(level, index)), Some(&hash), "({level}, {index})");
        }
    }

    proptest! {
        /// Rows are read from the ledger's storage: any bytes, any coordinates, no panic, and a
        /// node is only ever taken from the row that keeps it.
        #[test]
        fn pick_takes_any_rows(level in 0u32..70, index in any::<u64>(), nodes in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..200))) {
            let mut rows = HashMap::new();
            if let Some(seq) = row_of(level, index) {
                prop_assert_eq!(((seq as u64) >> level) - 1, index);
                rows.insert(seq, ("00".repeat(32), nodes));
            }
            let _ = pick(&[(level, index)], &rows);
        }
    }
}
