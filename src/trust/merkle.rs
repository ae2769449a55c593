//! The receipt log's Merkle tree, hashed as RFC 9162 (Certificate Transparency 2.0) §2.1
//! hashes it: a leaf is SHA-256(0x00 ‖ data), a node SHA-256(0x01 ‖ left ‖ right), and a tree
//! of n leaves splits at the largest power of two below n. With it a holder of one receipt
//! proves that receipt is in the log (an inclusion proof against a signed checkpoint), and a
//! holder of two checkpoints proves the later log only grew from the earlier (a consistency
//! proof); neither needs the ledger.
//!
//! The ledger stores the roots of the tree's perfect subtrees, `(level, index)`: the node at
//! level `l` and index `i` covers leaves `[i·2^l, (i+1)·2^l)`. Appending a leaf adds it and
//! every perfect subtree it completes (two nodes a leaf on average, [`Frontier::push`]); any
//! subtree of any tree size is a few of those combined ([`subtree`]). Proofs are computed in
//! two passes over a node lookup: one that only records which stored nodes it reads, so a
//! ledger fetches them in one query, and one over what was fetched.

use sha2::{Digest, Sha256};
use std::collections::HashMap;

/// A SHA-256 digest.
pub type Hash = [u8; 32];

/// The hash of a leaf whose data is `data`.
pub fn leaf_hash(data: &[u8]) -> Hash {
    let mut h = Sha256::new();
    h.update([0u8]);
    h.update(data);
    h.finalize().into()
}

/// The hash of an inner node.
pub fn node_hash(left: &Hash, right: &Hash) -> Hash {
    let mut h = Sha256::new();
    h.update([1u8]);
    h.update(left);
    h.update(right);
    h.finalize().into()
}

/// The root of the empty tree: SHA-256 of nothing.
pub fn empty_root() -> Hash {
    Sha256::digest([]).into()
}

/// A stored node: its level, its index at that level, its hash.
pub type Node = (u32, u64, Hash);

/// The right edge of a tree: for each level whose bit is set in the tree's size, the root of
/// the perfect subtree waiting there for a right sibling. It is all appending needs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Frontier {
    size: u64,
    /// `pending[l]` is set exactly when bit `l` of `size` is.
    pending: Vec<Option<Hash>>,
}

impl Frontier {
    /// The nodes a tree of `size` leaves keeps at its right edge, to read from storage.
    pub fn coordinates(size: u64) -> Vec<(u32, u64)> {
        (0..64u32)
            .filter(|l| size >> l & 1 == 1)
            .map(|l| (l, (size >> l) - 1))
            .collect()
    }

    /// The frontier of a tree of `size` leaves from its right-edge nodes (as
    /// [`Frontier::coordinates`] names them); `None` when one is missing.
    pub fn load(size: u64, nodes: &HashMap<(u32, u64), Hash>) -> Option<Frontier> {
        let mut pending = vec![None; 64];
        for (l, i) in Frontier::coordinates(size) {
            pending[l as usize] = Some(*nodes.get(&(l, i))?);
        }
        Some(Frontier { size, pending })
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    /// The right edge as bytes: the pending roots, lowest level first (a ledger keeps it
    /// beside the tree so a writer reads it in one row).
    pub fn edge(&self) -> Vec<u8> {
        self.pending
            .iter()
            .flatten()
            .flat_map(|h| h.iter().copied())
            .collect()
    }

    /// A frontier from [`Frontier::edge`]'s bytes for a tree of `size` leaves; `None` when they
    /// are not that size's edge.
    pub fn from_edge(size: u64, edge: &[u8]) -> Option<Frontier> {
        if edge.len() != size.count_ones() as usize * 32 {
            return None;
        }
        let mut hashes = edge.chunks_exact(32);
        let mut pending = vec![None; 64];
        for (l, slot) in pending.iter_mut().enumerate() {
            if size >> l & 1 == 1 {
                *slot = Some(hashes.next()?.try_into().ok()?);
            }
        }
        Some(Frontier { size, pending })
    }

    /// Append a leaf; returns the nodes to store: the leaf and each subtree it completes.
    pub fn push(&mut self, leaf: Hash) -> Vec<Node> {
        if self.pending.len() < 64 {
            self.pending.resize(64, None);
        }
        let index = self.size;
        let mut out = vec![(0, index, leaf)];
        let mut carry = leaf;
        let mut level = 0u32;
        while let Some(left) = self.pending[level as usize].take() {
            carry = node_hash(&left, &carry);
            level += 1;
            out.push((level, index >> level, carry));
        }
        self.pending[level as usize] = Some(carry);
        self.size += 1;
        out
    }

    /// The root of the tree so far.
    pub fn root(&self) -> Hash {
        let mut root: Option<Hash> = None;
        for p in self.pending.iter().flatten() {
            root = Some(match root {
                None => *p,
                Some(r) => node_hash(p, &r),
            });
        }
        root.unwrap_or_else(empty_root)
    }
}

/// The largest power of two strictly below `n` (n ≥ 2).
fn split_point(n: u64) -> u64 {
    debug_assert!(n >= 2);
    1 << (63 - (n - 1).leading_zeros())
}

/// MTH(D[start:end]) from the stored perfect subtrees, read through `node`.
pub fn subtree(start: u64, end: u64, node: &mut dyn FnMut(u32, u64) -> Hash) -> Hash {
    let n = end - start;
    if n == 0 {
        return empty_root();
    }
    if n.is_power_of_two() && start.is_multiple_of(n) {
        let level = n.trailing_zeros();
        return node(level, start >> level);
    }
    let k = split_point(n);
    let left = subtree(start, start + k, node);
    let right = subtree(start + k, end, node);
    node_hash(&left, &right)
}

/// The root of a tree of `size` leaves.
pub fn root(size: u64, node: &mut dyn FnMut(u32, u64) -> Hash) -> Hash {
    subtree(0, size, node)
}

/// The inclusion proof of leaf `index` in the tree of `size` leaves (RFC 9162 §2.1.3.1),
/// leaf-side first.
pub fn inclusion_proof(index: u64, size: u64, node: &mut dyn FnMut(u32, u64) -> Hash) -> Vec<Hash> {
    fn path(
        m: u64,
        start: u64,
        end: u64,
        node: &mut dyn FnMut(u32, u64) -> Hash,
        out: &mut Vec<Hash>,
    ) {
        let n = end - start;
        if n <= 1 {
            return;
        }
        let k = split_point(n);
        if m < k {
            path(m, start, start + k, node, out);
            out.push(subtree(start + k, end, node));
        } else {
            path(m - k, start + k, end, node, out);
            out.push(subtree(start, start + k, node));
        }
    }
    let mut out = Vec::new();
    if index < size {
        path(index, 0, size, node, &mut out);
    }
    out
}

/// The consistency proof between the trees of `old` and `new` leaves (RFC 9162 §2.1.4.1).
pub fn consistency_proof(old: u64, new: u64, node: &mut dyn FnMut(u32, u64) -> Hash) -> Vec<Hash> {
    fn subproof(
        m: u64,
        start: u64,
        end: u64,
        complete: bool,
        node: &mut dyn FnMut(u32, u64) -> Hash,
        out: &mut Vec<Hash>,
    ) {
        let n = end - start;
        if m == n {
            if !complete {
                out.push(subtree(start, end, node));
            }
            return;
        }
        let k = split_point(n);
        if m <= k {
            subproof(m, start, start + k, complete, node, out);
            out.push(subtree(start + k, end, node));
        } else {
            subproof(m - k, start + k, end, false, node, out);
            out.push(subtree(start, start + k, node));
        }
    }
    let mut out = Vec::new();
    if 0 < old && old < new {
        subproof(old, 0, new, true, node, &mut out);
    }
    out
}

/// The stored nodes a computation over the tree reads (its first pass), sorted, once each.
pub fn needed<T>(compute: impl FnOnce(&mut dyn FnMut(u32, u64) -> Hash) -> T) -> Vec<(u32, u64)> {
    let mut wanted = Vec::new();
    compute(&mut |l, i| {
        wanted.push((l, i));
        [0; 32]
    });
    wanted.sort_unstable();
    wanted.dedup();
    wanted
}

/// The computation's second pass, over the nodes fetched for it; `Err` names a node the
/// store lacked.
pub fn evaluate<T>(
    compute: impl FnOnce(&mut dyn FnMut(u32, u64) -> Hash) -> T,
    got: &HashMap<(u32, u64), Hash>,
) -> Result<T, (u32, u64)> {
    let mut missing = None;
    let value = compute(&mut |l, i| match got.get(&(l, i)) {
        Some(h) => *h,
        None => {
            missing.get_or_insert((l, i));
            [0; 32]
        }
    });
    match missing {
        Some(m) => Err(m),
        None => Ok(value),
    }
}

/// Does `proof` show leaf `leaf` at `index` in the tree of `size` leaves whose root is `root`?
/// RFC 9162 §2.1.3.2.
pub fn verify_inclusion(index: u64, size: u64, leaf: &Hash, proof: &[Hash], root: &Hash) -> bool {
    if index >= size {
        return false;
    }
    let (mut fn_, mut sn) = (index, size - 1);
    let mut r = *leaf;
    for p in proof {
        if sn == 0 {
            return false;
        }
        if fn_ & 1 == 1 || fn_ == sn {
            r = node_hash(p, &r);
            if fn_ & 1 == 0 {
                while fn_ & 1 == 0 && fn_ != 0 {
                    fn_ >>= 1;
                    sn >>= 1;
                }
            }
        } else {
            r = node_hash(&r, p);
        }
        fn_ >>= 1;
        sn >>= 1;
    }
    sn == 0 && r == *root
}

/// Does `proof` show that the tree of `old` leaves with root `old_root` is a prefix of the
/// tree of `new` leaves with root `new_root`? RFC 9162 §2.1.4.2.
pub fn verify_consistency(
    old: u64,
    new: u64,
    proof: &[Hash],
    old_root: &Hash,
    new_root: &Hash,
) -> bool {
    if old > new {
        return false;
    }
    if old == new {
        return proof.is_empty() && old_root == new_root;
    }
    if old == 0 {
        return proof.is_empty();
    }
    if proof.is_empty() {
        return false;
    }
    let mut path: Vec<Hash> = proof.to_vec();
    if old.is_power_of_two() {
        path.insert(0, *old_root);
    }
    let (mut fn_, mut sn) = (old - 1, new - 1);
    while fn_ & 1 == 1 {
        fn_ >>= 1;
        sn >>= 1;
    }
    let (mut fr, mut sr) = (path[0], path[0]);
    for c in &path[1..] {
        if sn == 0 {
            return false;
        }
        if fn_ & 1 == 1 || fn_ == sn {
            fr = node_hash(c, &fr);
            sr = node_hash(c, &sr);
            if fn_ & 1 == 0 {
                while fn_ & 1 == 0 && fn_ != 0 {
                    fn_ >>= 1;
                    sn >>= 1;
                }
            }
        } else {
            sr = node_hash(&sr, c);
        }
        fn_ >>= 1;
        sn >>= 1;
    }
    sn == 0 && fr == *old_root && sr == *new_root
}

#[cfg(test)]
mod tests {
    use super::*;

    /// MTH straight from RFC 9162's definition, over the leaves' hashes.
    fn reference_root(leaves: &[Hash]) -> Hash {
        match leaves.len() {
            0 => empty_root(),
            1 => leaves[0],
            n => {
                let k = split_point(n as u64) as usize;
                node_hash(&reference_root(&leaves[..k]), &reference_root(&leaves[k..]))
            }
        }
    }

    fn tree(n: u64) -> (Vec<Hash>, HashMap<(u32, u64), Hash>, Frontier) {
        let mut f = Frontier::default();
        let mut nodes = HashMap::new();
        let mut leaves = Vec::new();
        for i in 0..n {
            let leaf = leaf_hash(format!("receipt {i}").as_bytes());
            leaves.push(leaf);
            for (l, idx, h) in f.push(leaf) {
                nodes.insert((l, idx), h);
            }
        }
        (leaves, nodes, f)
    }

    #[test]
    fn roots_match_the_definition_at_every_size() {
        let (leaves, nodes, _) = tree(70);
        for n in 0..=70u64 {
            let mut get = |l, i| nodes[&(l, i)];
            assert_eq!(
                root(n, &mut get),
                reference_root(&leaves[..n as usize]),
                "{n}"
            );
        }
        let (_, _, f) = tree(37);
        assert_eq!(f.root(), reference_root(&tree(37).0));
        let (_, nodes, f) = tree(37);
        assert_eq!(Frontier::load(37, &nodes), Some(f.clone()));
        assert_eq!(Frontier::from_edge(37, &f.edge()), Some(f.clone()));
        assert_eq!(Frontier::from_edge(39, &f.edge()), None);
    }

    #[test]
    fn every_inclusion_and_consistency_proof_verifies_and_no_other_does() {
        let (leaves, nodes, _) = tree(33);
        let mut get = |l, i| nodes[&(l, i)];
        for n in 1..=33u64 {
            let r = root(n, &mut get);
            for m in 0..n {
                let proof = inclusion_proof(m, n, &mut get);
                assert!(verify_inclusion(m, n, &leaves[m as usize], &proof, &r));
                // Another leaf, another index or another root: refused.
                let other = leaf_hash(b"not in the log");
                assert!(!verify_inclusion(m, n, &other, &proof, &r));
                if n > 1 {
                    assert!(!verify_inclusion(
                        (m + 1) % n,
                        n,
                        &leaves[m as usize],
                        &proof,
                        &r
                    ));
                }
            }
            for old in 1..=n {
                let proof = consistency_proof(old, n, &mut get);
                let old_root = root(old, &mut get);
                assert!(
                    verify_consistency(old, n, &proof, &old_root, &r),
                    "{old}->{n}"
                );
                if old < n {
                    assert!(!verify_consistency(old, n, &proof, &r, &r));
                }
            }
        }
    }

    #[test]
    fn proofs_read_only_the_nodes_they_name() {
        let (leaves, nodes, _) = tree(1000);
        let prove = |get: &mut dyn FnMut(u32, u64) -> Hash| inclusion_proof(517, 1000, get);
        let wanted = needed(prove);
        assert!(wanted.len() < 64, "{} nodes", wanted.len());
        let got = wanted.iter().map(|k| (*k, nodes[k])).collect();
        let proof = evaluate(prove, &got).unwrap();
        let r = reference_root(&leaves);
        assert!(verify_inclusion(517, 1000, &leaves[517], &proof, &r));
        // A store that lacks a node says which.
        assert!(evaluate(|get| root(1000, get), &HashMap::new()).is_err());
    }

    proptest::proptest! {
        /// Arbitrary proofs never verify and never panic, whatever the sizes.
        #[test]
        fn arbitrary_proofs_never_verify(
            index in 0u64..u64::MAX, size in 0u64..u64::MAX, old in 0u64..u64::MAX,
            path in proptest::collection::vec(proptest::array::uniform32(0u8..), 0..70),
        ) {
            let leaf = leaf_hash(b"x");
            let root = leaf_hash(b"y");
            proptest::prop_assert!(!verify_inclusion(index, size, &leaf, &path, &root));
            proptest::prop_assert!(!verify_consistency(old, size, &path, &leaf, &root) || (old == 0 && path.is_empty()));
        }
    }
}
