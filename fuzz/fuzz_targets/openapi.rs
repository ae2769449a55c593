//! Fuzz `capdir import openapi` on an untrusted document: no text makes the parser or the
//! importer panic, and every row it proposes passes the gate (the importer never writes a row
//! `capdir check` refuses).
#![no_main]

use capdir::check::{asks_gate, check_files};
use capdir::import::{Options, document, import};
use capdir::row::catalogue::SourceFile;
use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(doc) = document::parse(text, "fuzz.yaml") else {
        return;
    };
    let Ok(plan) = import(&doc, &Options::default(), &[], Path::new("out")) else {
        return;
    };
    let files: Vec<SourceFile> = plan
        .writes
        .iter()
        .map(|(name, text)| SourceFile {
            path: Path::new("out").join(name),
            bytes: text.clone().into_bytes(),
        })
        .collect();
    let checked = check_files(&files);
    assert!(
        !checked.has_errors(),
        "{:#?}\n{:#?}",
        checked.diags,
        plan.writes
    );
    let asks = asks_gate(&checked.rows);
    assert!(asks.is_empty(), "{asks:?}");
});
