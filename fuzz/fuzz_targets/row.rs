//! Fuzz the gate on one row file, the input every contributor's pull request is: no bytes make
//! the parser or the checks panic, and every problem is named at a line of the file.
#![no_main]

use capdir::check::check_files;
use capdir::row::catalogue::SourceFile;
use capdir::row::line_breaks;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The file is named after the key it declares, so the checks past "the file name is not
    // the key" are reached.
    let key = std::str::from_utf8(data)
        .ok()
        .and_then(|t| t.lines().find_map(|l| l.strip_prefix("key:")))
        .map(|k| k.trim().trim_matches(['"', '\'']).to_string())
        .filter(|k| !k.is_empty() && !k.contains(['/', '\\', '\0']))
        .unwrap_or_else(|| "FUZZ_ROW".to_string());
    let file = SourceFile {
        path: format!("catalogue/{key}.yaml").into(),
        bytes: data.to_vec(),
    };
    // Lines as YAML counts them (a lone `\r` ends one too), the line after a final break at most.
    let lines = line_breaks(data) + 1;
    let checked = check_files(&[file]);
    for d in &checked.diags {
        assert!(
            d.line <= lines,
            "{}:{} is past the file's {lines} lines: {} {}",
            d.path.display(),
            d.line,
            d.code,
            d.message
        );
    }
});
