//! The receipt log's proofs at a million receipts: how large an inclusion proof is (printed
//! once: the hashes, and the JSON an answer carries) and how long checking one takes, with the
//! checkpoint's signature. Target (issue: verifiable from outside): under 1 KB and under 1 ms.
//! Run with `cargo bench --bench tlog`.

use capdir::trust::checkpoint::Checkpoint;
use capdir::trust::merkle::{self, Frontier, Hash};
use capdir::trust::note::Signer;
use capdir::trust::proof::{InclusionProof, encode};
use criterion::{Criterion, criterion_group, criterion_main};
use std::collections::HashMap;
use std::hint::black_box;

const SIZE: u64 = 1_000_000;

fn bench(c: &mut Criterion) {
    let mut frontier = Frontier::default();
    let mut nodes: HashMap<(u32, u64), Hash> = HashMap::new();
    for i in 0..SIZE {
        for (l, idx, h) in frontier.push(merkle::leaf_hash(&i.to_be_bytes())) {
            nodes.insert((l, idx), h);
        }
    }
    let key = Signer::generate("bench.test/ledger").expect("key");
    let checkpoint = Checkpoint {
        origin: "bench.test/ledger".into(),
        size: SIZE,
        root: frontier.root(),
    }
    .sign(&key)
    .expect("checkpoint");
    let index = 777_777u64;
    let path = merkle::inclusion_proof(index, SIZE, &mut |l, i| nodes[&(l, i)]);
    let proof = InclusionProof {
        leaf_index: index,
        tree_size: SIZE,
        hashes: encode(&path),
        checkpoint: checkpoint.clone(),
    };
    let json = serde_json::to_string(&proof).expect("json");
    println!(
        "inclusion proof at {SIZE} receipts: {} hashes, {} bytes of hashes, {} bytes as JSON with its signed checkpoint ({} without it)",
        path.len(),
        path.len() * 32,
        json.len(),
        json.len() - checkpoint.len()
    );
    let verifier = key.verifier();
    let leaf = index.to_be_bytes();
    c.bench_function(
        "inclusion proof at 1M receipts: verify (checkpoint signature + path)",
        |b| {
            b.iter(|| {
                proof
                    .verify(black_box(&leaf), &verifier, None)
                    .expect("verifies")
            })
        },
    );
    c.bench_function("inclusion proof at 1M receipts: the path alone", |b| {
        let root = frontier.root();
        let leaf = merkle::leaf_hash(&leaf);
        b.iter(|| {
            assert!(merkle::verify_inclusion(
                index,
                SIZE,
                black_box(&leaf),
                &path,
                &root
            ))
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
