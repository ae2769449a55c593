//! Fuzz the flow parser: no input panics, and what it accepts respects its own limits.
#![no_main]

use capdir::row::flow::{self, MAX_BRANCHES, MAX_STEPS, Step};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match flow::parse(text) {
        Ok(f) => {
            assert!(!f.steps.is_empty());
            assert!(f.keys().count() <= MAX_STEPS);
            for step in &f.steps {
                if let Step::FanOut { branches, .. } = step {
                    assert!(!branches.is_empty() && branches.len() <= MAX_BRANCHES);
                }
            }
            for key in f.keys() {
                assert!(key.starts_with(|c: char| c.is_ascii_uppercase()), "{key:?}");
            }
        }
        Err(e) => assert!(
            e.offset <= text.len(),
            "offset {} past {}",
            e.offset,
            text.len()
        ),
    }
});
