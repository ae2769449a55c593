//! Fuzz a catalogue's page templates: any text as `row.html` (and, after a NUL, as
//! `layout.html`, after another as the partial `_a.html`) is taken or refused with
//! diagnostics, never a panic or a stack overflow, and a taken one renders its sample page.
#![no_main]

use capdir::build::pages::Templates;
use libfuzzer_sys::fuzz_target;
use std::collections::BTreeMap;

fuzz_target!(|data: &[u8]| {
    let mut files = BTreeMap::new();
    for (name, part) in ["row.html", "layout.html", "_a.html"]
        .into_iter()
        .zip(data.splitn(3, |b| *b == 0))
    {
        files.insert(name.to_string(), part.to_vec());
    }
    if let Err(refused) = Templates::of_files(files) {
        assert!(!refused.0.is_empty(), "refused without a diagnostic");
    }
});
