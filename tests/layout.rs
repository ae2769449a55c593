//! The layout's walls (ARCHITECTURE.md): one folder per stage, the table of who may use whom
//! kept true, no circle between folders, HTTP only in `serve/` and `cli/`.
//!
//! The table is read from ARCHITECTURE.md itself, so the document and the code cannot drift:
//! an import the table does not allow fails here, and so does a table entry with no folder.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The code of a file without its comments (doc links are not imports).
fn code_of(text: &str) -> String {
    text.lines()
        .map(|line| match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The stage folder a file belongs to (`None` for `lib.rs` and `main.rs`).
fn folder_of(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).expect("under src");
    let mut parts = rel.components();
    let first = parts.next()?.as_os_str().to_str()?.to_string();
    parts.next().map(|_| first)
}

/// Folder → the folders its code names through `crate::…`.
fn actual_uses(src: &Path, folders: &BTreeSet<String>) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut uses: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let Some(folder) = folder_of(src, &file) else {
            continue;
        };
        let code = code_of(&std::fs::read_to_string(&file).expect("read"));
        let used = uses.entry(folder.clone()).or_default();
        for (at, _) in code.match_indices("crate::") {
            let name: String = code[at + "crate::".len()..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if folders.contains(&name) && name != folder {
                used.insert(name);
            }
        }
        assert!(
            !code.contains("super::super::"),
            "{}: reach other folders through crate::, so this test sees the import",
            file.display()
        );
    }
    uses
}

/// The table between the layout markers of ARCHITECTURE.md.
fn allowed_uses() -> BTreeMap<String, BTreeSet<String>> {
    let doc = std::fs::read_to_string("ARCHITECTURE.md").expect("ARCHITECTURE.md");
    let begin = doc
        .find("<!-- layout:begin -->")
        .expect("layout:begin marker");
    let end = doc.find("<!-- layout:end -->").expect("layout:end marker");
    let mut table = BTreeMap::new();
    for line in doc[begin..end].lines().filter(|l| l.starts_with("- `")) {
        let (name, rest) = line[3..].split_once("` uses: ").expect("- `x` uses: a, b");
        let deps = match rest.trim() {
            "nothing" => BTreeSet::new(),
            list => list.split(',').map(|d| d.trim().to_string()).collect(),
        };
        table.insert(name.to_string(), deps);
    }
    table
}

/// A circle in `graph`, if it has one, as the path that closes it.
fn find_circle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| p == node) {
            let mut circle = path[at..].to_vec();
            circle.push(node.to_string());
            return Some(circle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(c) = visit(next, graph, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|n| visit(n, graph, &mut Vec::new(), &mut done))
}

fn stage_folders(src: &Path) -> BTreeSet<String> {
    std::fs::read_dir(src)
        .expect("read src")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.is_dir())
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn every_import_between_folders_is_in_the_architecture_table() {
    let src = Path::new("src");
    let folders = stage_folders(src);
    let table = allowed_uses();
    assert_eq!(
        table.keys().cloned().collect::<BTreeSet<_>>(),
        folders,
        "ARCHITECTURE.md's table names exactly the folders of src/"
    );
    let actual = actual_uses(src, &folders);
    let mut wrong = Vec::new();
    for (folder, used) in &actual {
        for dep in used.difference(&table[folder]) {
            wrong.push(format!("{folder}/ uses {dep}/"));
        }
    }
    assert!(
        wrong.is_empty(),
        "imports the table in ARCHITECTURE.md does not allow: {wrong:?}"
    );
    assert!(table["row"].is_empty(), "row/ imports no other stage");
}

#[test]
fn no_circle_between_folders() {
    let table = allowed_uses();
    assert_eq!(find_circle(&table), None, "the allowed table has a circle");
    let src = Path::new("src");
    let actual = actual_uses(src, &stage_folders(src));
    assert_eq!(find_circle(&actual), None, "the code has a circle");
    // The check itself finds a circle when there is one.
    let mut with_circle = table.clone();
    with_circle
        .get_mut("row")
        .expect("row")
        .insert("serve".into());
    assert!(find_circle(&with_circle).is_some());
}

#[test]
fn only_serve_and_cli_speak_http() {
    let src = Path::new("src");
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let offenders: Vec<String> = files
        .iter()
        .filter(|f| {
            let folder = folder_of(src, f);
            folder.is_some() && !matches!(folder.as_deref(), Some("serve") | Some("cli"))
        })
        .filter(|f| {
            let code = code_of(&std::fs::read_to_string(f).expect("read"));
            code.contains("axum") || code.contains("tower")
        })
        .map(|f| f.display().to_string())
        .collect();
    assert!(
        offenders.is_empty(),
        "axum or tower outside serve/ and cli/: {offenders:?}"
    );
}

/// The modules directly inside a module folder (`NAME.rs` beside `mod.rs`, or a folder of its
/// own with a `mod.rs`), by name, each with the files it is made of.
fn sibling_modules(dir: &Path) -> BTreeMap<String, Vec<PathBuf>> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(dir).expect("read dir") {
        let path = entry.expect("entry").path();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        if path.is_dir() && path.join("mod.rs").exists() {
            let mut files = Vec::new();
            rust_files(&path, &mut files);
            out.insert(name, files);
        } else if path.extension().is_some_and(|e| e == "rs") && name != "mod" {
            // `NAME.rs` and the modules of its own folder `NAME/`, if it has one.
            let mut files = vec![path.clone()];
            let own = path.with_extension("");
            if own.is_dir() {
                rust_files(&own, &mut files);
            }
            out.insert(name, files);
        }
    }
    out
}

/// The names `code` reaches below `prefix` (`crate::build` → `site` in `crate::build::site::x`
/// and in `crate::build::{site, pages::Y}`).
fn names_below(code: &str, prefix: &str, names: &mut BTreeSet<String>) {
    let word = |s: &str| -> String {
        s.trim()
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    for (at, _) in code.match_indices(&format!("{prefix}::")) {
        let rest = &code[at + prefix.len() + 2..];
        if let Some(group) = rest.strip_prefix('{') {
            let group = &group[..group.find('}').unwrap_or(group.len())];
            names.extend(group.split(',').map(word));
        } else {
            names.insert(word(rest));
        }
    }
}

/// Module folder → its modules → the sibling modules each one's code (tests left out) names.
fn sibling_uses(src: &Path) -> Vec<(PathBuf, BTreeMap<String, BTreeSet<String>>)> {
    let mut dirs = vec![src.to_path_buf()];
    let mut out = Vec::new();
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("read dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                dirs.push(path);
            }
        }
        // A module's folder: with its `mod.rs`, or beside its `NAME.rs`.
        if !dir.join("mod.rs").exists() && !dir.with_extension("rs").is_file() {
            continue;
        }
        let module = format!(
            "crate::{}",
            dir.strip_prefix(src)
                .unwrap()
                .to_string_lossy()
                .replace('/', "::")
        );
        let siblings = sibling_modules(&dir);
        let mut graph = BTreeMap::new();
        for (name, files) in &siblings {
            let mut named = BTreeSet::new();
            // A module's unit tests may use anything of the folder.
            let unit_tests = |f: &&PathBuf| {
                let name = f.file_name().unwrap_or_default().to_string_lossy();
                name == "tests.rs" || name.ends_with("_tests.rs")
            };
            for file in files.iter().filter(|f| !unit_tests(f)) {
                let text = std::fs::read_to_string(file).expect("read");
                let code = code_of(&text);
                let code = code.split("#[cfg(test)]").next().unwrap_or_default();
                names_below(code, &module, &mut named);
                // `super::` is the folder's module from its own files, and from a sub-module's
                // mod.rs or NAME.rs.
                let direct = file.parent() == Some(dir.as_path())
                    || (file.parent().and_then(Path::parent) == Some(dir.as_path())
                        && file.ends_with("mod.rs"));
                if direct {
                    names_below(code, "super", &mut named);
                }
            }
            named.retain(|n| n != name && siblings.contains_key(n));
            graph.insert(name.clone(), named);
        }
        out.push((dir, graph));
    }
    out
}

#[test]
fn no_circle_between_the_files_of_a_folder() {
    let src = Path::new("src");
    let mut circles = Vec::new();
    for (dir, graph) in sibling_uses(src) {
        if let Some(circle) = find_circle(&graph) {
            circles.push(format!("{}: {}", dir.display(), circle.join(" → ")));
        }
    }
    assert!(circles.is_empty(), "files that use each other: {circles:?}");
    // The walk sees a use that closes a circle, grouped or not.
    let mut seen = BTreeSet::new();
    names_below(
        "use crate::build::{site, pages::Frame}; crate::build::git::x",
        "crate::build",
        &mut seen,
    );
    assert_eq!(
        seen,
        ["git", "pages", "site"].map(String::from).into(),
        "names_below"
    );
}

#[test]
fn the_files_beside_the_folders_import_no_folder() {
    let src = Path::new("src");
    let folders = stage_folders(src);
    for entry in std::fs::read_dir(src).expect("read src") {
        let path = entry.expect("entry").path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() || matches!(name.as_str(), "lib.rs" | "main.rs") {
            continue;
        }
        let code = code_of(&std::fs::read_to_string(&path).expect("read"));
        let mut named = BTreeSet::new();
        names_below(&code, "crate", &mut named);
        named.retain(|n| folders.contains(n));
        assert!(
            named.is_empty(),
            "{name} is a leaf every folder may use, yet it uses {named:?}"
        );
    }
}

/// `text` with its comments, strings and character literals blanked (line breaks kept), so
/// that the braces counted are the code's.
fn blanked(text: &str) -> String {
    let b: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let blank = |out: &mut String, s: &[char]| {
        out.extend(s.iter().map(|&c| if c == '\n' { '\n' } else { ' ' }));
    };
    let mut i = 0;
    while i < b.len() {
        let rest = &b[i..];
        let starts = |p: &str| rest.iter().take(p.len()).copied().eq(p.chars());
        let end = if starts("//") {
            rest.iter().position(|&c| c == '\n').unwrap_or(rest.len())
        } else if starts("/*") {
            (2..rest.len())
                .find(|&k| rest[k - 2..k] == ['*', '/'])
                .unwrap_or(rest.len())
        } else if rest[0] == 'r'
            && (i == 0 || b[i - 1] == 'b' || !(b[i - 1].is_alphanumeric() || b[i - 1] == '_'))
            && rest[1..].iter().take_while(|&&c| c == '#').count() + 1 < rest.len()
            && rest[1 + rest[1..].iter().take_while(|&&c| c == '#').count()] == '"'
        {
            let hashes = rest[1..].iter().take_while(|&&c| c == '#').count();
            let close: Vec<char> = std::iter::once('"')
                .chain(std::iter::repeat_n('#', hashes))
                .collect();
            let from = hashes + 2;
            (from..=rest.len())
                .find(|&k| rest[..k].ends_with(&close) && k >= from + close.len())
                .unwrap_or(rest.len())
        } else if rest[0] == '"' {
            let mut k = 1;
            while k < rest.len() && rest[k] != '"' {
                k += if rest[k] == '\\' { 2 } else { 1 };
            }
            (k + 1).min(rest.len())
        } else if rest[0] == '\'' && rest.len() > 2 {
            // A character literal ('x', '\n', '\u{1F600}'), not a lifetime ('a).
            let len = if rest[1] == '\\' {
                rest[2..].iter().position(|&c| c == '\'').map(|p| p + 3)
            } else {
                (rest[2] == '\'').then_some(3)
            };
            len.unwrap_or(1)
        } else {
            out.push(rest[0]);
            i += 1;
            continue;
        };
        blank(&mut out, &rest[..end]);
        i += end;
    }
    out
}

/// Each function of `code` (blanked) with a body: its name, its first line, and how many
/// lines it spans.
fn functions(code: &str) -> Vec<(String, usize, usize)> {
    let bytes = code.as_bytes();
    let mut found = Vec::new();
    for (at, _) in code.match_indices("fn ") {
        if at > 0 && (bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_') {
            continue;
        }
        let name: String = code[at + 3..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if name.is_empty() {
            continue;
        }
        let Some(open) = code[at..].find(['{', ';']).map(|o| at + o) else {
            continue;
        };
        if bytes[open] == b';' {
            continue;
        }
        let mut depth = 0usize;
        let mut close = open;
        for (k, &c) in bytes.iter().enumerate().skip(open) {
            match c {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        close = k;
                        break;
                    }
                }
                _ => {}
            }
        }
        let line = |p: usize| code[..p].matches('\n').count() + 1;
        found.push((name, line(at), line(close) - line(at) + 1));
    }
    found
}

/// The code of every source file outside unit tests, by path.
fn code_outside_tests() -> Vec<(PathBuf, String)> {
    let mut files = Vec::new();
    rust_files(Path::new("src"), &mut files);
    files
        .into_iter()
        .filter(|f| {
            let name = f.file_name().unwrap_or_default().to_string_lossy();
            name != "tests.rs" && !name.ends_with("_tests.rs")
        })
        .map(|f| {
            let code = blanked(&std::fs::read_to_string(&f).expect("read"));
            let code = match code.find("#[cfg(test)]\nmod tests {") {
                Some(at) => code[..at].to_string(),
                None => code,
            };
            (f, code)
        })
        .collect()
}

#[test]
fn no_function_over_100_lines_outside_tests() {
    let long: Vec<String> = code_outside_tests()
        .iter()
        .flat_map(|(file, code)| {
            functions(code)
                .into_iter()
                .filter(|(_, _, len)| *len > 100)
                .map(move |(name, line, len)| {
                    format!("{}:{line} {name} ({len} lines)", file.display())
                })
        })
        .collect();
    assert!(
        long.is_empty(),
        "functions over 100 lines: {long:?}: make their steps functions"
    );
    // The count sees braces of code only, and a function's whole body.
    let sample = "fn a() {\n let s = \"}\"; // }\n let c = '}';\n let r = r#\"}\"#;\n if x { y }\n}\nfn b();\n";
    assert_eq!(functions(&blanked(sample)), [("a".to_string(), 1, 6)]);
}

#[test]
fn no_file_over_1000_lines() {
    let mut files = Vec::new();
    rust_files(Path::new("src"), &mut files);
    let long: Vec<String> = files
        .iter()
        .filter_map(|f| {
            let lines = std::fs::read_to_string(f).expect("read").lines().count();
            (lines > 1000).then(|| format!("{} ({lines} lines)", f.display()))
        })
        .collect();
    assert!(
        long.is_empty(),
        "files over 1,000 lines: {long:?}: split them by what they do"
    );
}
