//! Fuzz `capdir import openapi` on an untrusted document: no text makes the parser or the
//! importer panic, and every row it proposes passes the gate (the importer never writes a row
//! `capdir check` refuses).
#![no_main]

use capdir::check::{asks_gate, check_files};
use capdir::import::{Options, document, import};
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
    let checked = check_files(&plan.files(Path::new("out")));
    assert!(
        !checked.has_errors(),
        "{:#?}\n{:#?}",
        checked.diags,
        plan.writes
    );
    let asks = asks_gate(&checked.rows);
    assert!(asks.is_empty(), "{asks:?}");
});
