//! What lets someone outside check capdir without trusting whoever runs it: Ed25519 keys and
//! signed notes (`note`), the receipt log's Merkle tree with its inclusion and consistency
//! proofs (`merkle`, RFC 9162), and the log's signed checkpoints (`checkpoint`, C2SP). Pure
//! functions of bytes and keys: the ledger stores the tree, the build signs its manifest, the
//! follower and `capdir ledger verify` check what they are given. It imports no other folder.

pub mod checkpoint;
pub mod merkle;
pub mod note;
pub mod proof;
