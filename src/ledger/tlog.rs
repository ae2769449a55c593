//! The receipt log as a transparency log: beside the hash chain, a Merkle tree over the
//! receipts in ledger order (`trust::merkle`, RFC 9162), its nodes stored in the same
//! transaction as the receipts they cover, so the tree is never behind the chain. The leaf of
//! receipt `seq` is at index `seq - 1`, and its data is the receipt's chain hash (32 bytes): the
//! leaf binds the receipt and, through the chain, everything before it.
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

/// Nodes read back from storage, by coordinate.
pub type Nodes = HashMap<(u32, u64), Hash>;

/// A stored hash back into a `Hash`.
pub fn stored_hash(level: i64, index: i64, bytes: &[u8]) -> Result<((u32, u64), Hash)> {
    let hash: Hash = bytes
        .try_into()
        .map_err(|_| anyhow!("tree node ({level}, {index}) is not 32 bytes"))?;
    Ok(((level as u32, index as u64), hash))
}
