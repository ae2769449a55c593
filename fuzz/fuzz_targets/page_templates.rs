//! Fuzz a catalogue's page templates: any text as `row.html` (and, after a NUL, as
//! `layout.html`) is taken or refused with diagnostics, never a panic, and a taken one
//! renders its sample page.
#![no_main]

use capdir::build::pages::Templates;
use libfuzzer_sys::fuzz_target;
use std::collections::BTreeMap;

fuzz_target!(|data: &[u8]| {
    let mut parts = data.splitn(2, |b| *b == 0);
    let mut files = BTreeMap::new();
    files.insert("row.html".to_string(), parts.next().unwrap_or_default().to_vec());
    if let Some(layout) = parts.next() {
        files.insert("layout.html".to_string(), layout.to_vec());
    }
    if let Err(refused) = Templates::of_files(files) {
        assert!(!refused.0.is_empty(), "refused without a diagnostic");
    }
});
