//! `capdir build` on a fixture catalogue in a temporary Git repository with adds, edits and a
//! deletion: the snapshot's tables, history and dates, the four counts, the tombstone, the
//! fingerprint rule, determinism, atomicity, and contract snapshots of each row type.

use crate::common;

use capdir::build::{self, BuildError, Options};
use common::{Repo, fixture, fn_row};
use rusqlite::Connection;
use std::collections::BTreeMap;
use std::path::Path;

/// The fixture history: five commits on fixed dates.
fn repo() -> Repo {
    let r = Repo::new();
    for f in [
        "GOOD_ECHO.yaml",
        "GOOD_NOW.yaml",
        "PB_PLAIN_STYLE.yaml",
        "GOOD_AGENT.yaml",
    ] {
        r.write(f, &fixture(&format!("good/{f}")));
    }
    r.commit("Add echo, now and the agent", "2024-01-01T10:00:00Z");
    r.write("GOOD_HTTP_ITEM.yaml", &fixture("good/GOOD_HTTP_ITEM.yaml"));
    r.write("GOOD_FLOW.yaml", &fixture("good/GOOD_FLOW.yaml"));
    r.write("OLD_ROW.yaml", &fn_row("OLD_ROW", "text", "An old echo."));
    r.commit("Add http, flow and an old row", "2024-02-01T10:00:00Z");
    r.write(
        "GOOD_ECHO.yaml",
        &fixture("good/GOOD_ECHO.yaml")
            .replace("# WHEN_TO_USE:", "# WHEN_TO_USE: Whenever you need it."),
    );
    r.commit("Improve the echo docstring", "2024-03-01T10:00:00Z");
    r.remove("OLD_ROW.yaml");
    r.commit(
        "Remove OLD_ROW\n\nReplaced-by: GOOD_ECHO",
        "2024-04-01T10:00:00Z",
    );
    r.write(
        "ZZ_TEST_PING.yaml",
        &fn_row("ZZ_TEST_PING", "test", "A test-shaped row."),
    );
    r.write(
        "RETIRED_ROW.yaml",
        &fn_row("RETIRED_ROW", "text", "Disabled.")
            .replace("category: text\n", "category: text\nenabled: false\n"),
    );
    // GOOD_HTTP_ITEM's credential, bound in the last commit (so the snapshotted rows'
    // histories, and their commits' hashes, are those of the rows alone).
    r.write("bindings.yaml", &fixture("good/bindings.yaml"));
    r.commit("Add a test row and a disabled row", "2024-05-01T10:00:00Z");
    r
}

fn build(repo: &Repo, out: &Path) -> build::Report {
    build::run(&Options::new(repo.catalogue(), out)).expect("build")
}

#[test]
fn snapshot_history_counts_and_tombstone() {
    let repo = repo();
    let out = repo.path().join("site");
    let report = build(&repo, &out);
    assert_eq!(report.rows, 8);

    let db = Connection::open(out.join("catalogue.sqlite")).unwrap();
    let cols: Vec<String> = db
        .prepare("SELECT name FROM pragma_table_info('directory')")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(cols.len(), 22, "{cols:?}");
    for c in [
        "key",
        "type",
        "target",
        "auth",
        "content",
        "category",
        "allowed_categories",
        "seq",
        "enabled",
        "planner_visible",
        "planner_rank",
        "input_schema",
        "examples",
        "sensitive",
        "runner",
        "includes",
        "created_at",
        "updated_at",
        "asks",
        "path",
        "contract_hash",
        "route_reply",
    ] {
        assert!(cols.iter().any(|x| x == c), "missing column {c}");
    }
    let dates: (String, String) = db
        .query_row(
            "SELECT created_at, updated_at FROM directory WHERE key='GOOD_ECHO'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(
        dates,
        ("2024-01-01T10:00:00Z".into(), "2024-03-01T10:00:00Z".into())
    );
    let hist: Vec<(String, String)> = db
        .prepare("SELECT kind, subject FROM row_history WHERE key='GOOD_ECHO' ORDER BY seq")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        hist,
        vec![
            ("modified".into(), "Improve the echo docstring".into()),
            ("added".into(), "Add echo, now and the agent".into())
        ]
    );
    let (rows, enabled, registry, mcp): (i64, i64, i64, i64) = db
        .query_row("SELECT rows, enabled, registry, mcp FROM build", [], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
        })
        .unwrap();
    // 8 rows; RETIRED_ROW disabled; ZZ_TEST_PING test-shaped; PB_PLAIN_STYLE not planner-visible.
    assert_eq!((rows, enabled, registry, mcp), (8, 7, 6, 6));
    let counts: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("counts.json")).unwrap()).unwrap();
    assert_eq!(counts["registry"]["value"], 6);
    assert!(
        counts["mcp"]["predicate"]
            .as_str()
            .unwrap()
            .contains("planner_visible")
    );
    let registry: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("registry.json")).unwrap()).unwrap();
    assert_eq!(registry["rows"].as_array().unwrap().len(), 6);
    let tools: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("mcp/tools.json")).unwrap())
            .unwrap();
    assert_eq!(tools["tools"].as_array().unwrap().len(), 6);
    assert!(
        !out.join("k/RETIRED_ROW.md").exists(),
        "a disabled row has no contract"
    );
    let llms = std::fs::read_to_string(out.join("llms.txt")).unwrap();
    assert!(
        llms.starts_with("# ")
            && llms.contains("[GOOD_ECHO](http://127.0.0.1:8080/k/GOOD_ECHO.md)")
    );
    assert!(!llms.contains("RETIRED_ROW"));

    // The deleted row answers with a tombstone naming its replacement.
    let tomb = std::fs::read_to_string(out.join("k/OLD_ROW.md")).unwrap();
    assert!(
        tomb.contains("removed on 2024-04-01") && tomb.contains("Use [GOOD_ECHO]"),
        "{tomb}"
    );
    let tomb_json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("k/OLD_ROW.json")).unwrap())
            .unwrap();
    assert_eq!(tomb_json["replaced_by"], "GOOD_ECHO");
    assert!(out.join("k/OLD_ROW.html").exists());
    let replaced: Option<String> = db
        .query_row(
            "SELECT replaced_by FROM tombstones WHERE key='OLD_ROW'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(replaced.as_deref(), Some("GOOD_ECHO"));
}

/// Every file under `dir` with its bytes, but the list of where the parts of the per-row
/// projections lie and the snapshot's line of the list of clean files: they name files' stamps
/// (their inodes and times), which no two builds share.
fn tree(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.insert(
                    p.strip_prefix(dir).unwrap().display().to_string(),
                    std::fs::read(&p).unwrap(),
                );
            }
        }
    }
    out.remove(build::parts::PARTS);
    if let Some(list) = out.get_mut(build::checked::FILE) {
        let text = String::from_utf8_lossy(list).into_owned();
        let kept: Vec<&str> = text
            .lines()
            .filter(|l| !l.starts_with("snapshot "))
            .collect();
        assert!(
            kept.len() < text.lines().count(),
            "the list names the snapshot"
        );
        *list = kept.join("\n").into_bytes();
    }
    out
}

#[test]
fn same_commit_builds_identical_files() {
    let repo = repo();
    let a = repo.path().join("a");
    let b = repo.path().join("b");
    build(&repo, &a);
    build(&repo, &b);
    let (ta, tb) = (tree(&a), tree(&b));
    assert_eq!(ta.keys().collect::<Vec<_>>(), tb.keys().collect::<Vec<_>>());
    for (name, bytes) in &ta {
        assert!(tb[name] == *bytes, "{name} differs between two builds");
    }
}

#[test]
fn failed_build_leaves_the_old_site() {
    let repo = repo();
    let out = repo.path().join("site");
    build(&repo, &out);
    let before = tree(&out);
    repo.write("NEW_ROW.yaml", &fn_row("NEW_ROW", "text", "New."));
    for step in ["snapshot", "pages"] {
        let opts = Options {
            fail_after: Some(step.into()),
            ..Options::new(repo.catalogue(), &out)
        };
        assert!(matches!(build::run(&opts), Err(BuildError::Other(_))));
        assert_eq!(tree(&out), before, "failing after {step} changed the site");
    }
    // A catalogue with errors builds nothing either.
    repo.write("BROKEN.yaml", "key: BROKEN\ntype: nope\n");
    assert!(matches!(
        build::run(&Options::new(repo.catalogue(), &out)),
        Err(BuildError::Check(_))
    ));
    assert_eq!(tree(&out), before);
    let leftovers: Vec<_> = std::fs::read_dir(repo.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".build-"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    // And a good build replaces the site.
    repo.remove("BROKEN.yaml");
    build(&repo, &out);
    assert!(out.join("k/NEW_ROW.md").exists());
}

#[test]
fn outside_git_builds_with_a_warning() {
    let tmp = tempfile::tempdir().unwrap();
    let cat = tmp.path().join("catalogue");
    std::fs::create_dir(&cat).unwrap();
    std::fs::write(cat.join("GOOD_ECHO.yaml"), fixture("good/GOOD_ECHO.yaml")).unwrap();
    let report = build::run(&Options::new(&cat, tmp.path().join("site"))).unwrap();
    assert!(
        report.warnings.iter().any(|w| w.contains("no Git history")),
        "{:?}",
        report.warnings
    );
    let md = std::fs::read_to_string(tmp.path().join("site/k/GOOD_ECHO.md")).unwrap();
    assert!(md.contains("no Git history"));
}

/// Contract snapshots, one row of each type in all three formats. `CAPDIR_BLESS=1` rewrites.
#[test]
fn contract_snapshots() {
    let repo = repo();
    let out = repo.path().join("site");
    build(&repo, &out);
    let snaps = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots");
    let bless = std::env::var("CAPDIR_BLESS").is_ok();
    std::fs::create_dir_all(&snaps).unwrap();
    let mut diffs = Vec::new();
    for key in [
        "GOOD_ECHO",
        "GOOD_HTTP_ITEM",
        "GOOD_AGENT",
        "GOOD_FLOW",
        "OLD_ROW",
    ] {
        for ext in ["md", "json", "html"] {
            let got = std::fs::read_to_string(out.join(format!("k/{key}.{ext}"))).unwrap();
            let path = snaps.join(format!("contract_{key}.{ext}"));
            if bless {
                std::fs::write(&path, &got).unwrap();
            } else if std::fs::read_to_string(&path).unwrap_or_default() != got {
                diffs.push(format!("{} differs:\n{got}", path.display()));
            }
        }
        let md = std::fs::read_to_string(out.join(format!("k/{key}.md"))).unwrap();
        assert!(md.len() < 3 * 1024, "{key}.md is {} bytes", md.len());
    }
    assert!(diffs.is_empty(), "{}", diffs.join("\n"));
}

/// A rebuild starts from the history the previous site saved and walks only newer commits;
/// the result is the same as a build from nothing.
#[test]
fn rebuild_walks_only_new_commits_and_agrees_with_a_cold_build() {
    let repo = repo();
    let site = repo.path().join("site");
    let first = build(&repo, &site);
    assert!(site.join(build::HISTORY_CACHE).exists());
    assert!(
        first
            .steps
            .iter()
            .any(|(n, _, what)| *n == "history" && what.starts_with("5 commits"))
    );
    repo.write(
        "GOOD_NOW.yaml",
        &fixture("good/GOOD_NOW.yaml").replace("# WHEN_TO_USE:", "# WHEN_TO_USE: Always."),
    );
    repo.commit("Improve the now docstring", "2024-06-01T10:00:00Z");
    let second = build(&repo, &site);
    assert!(
        second
            .steps
            .iter()
            .any(|(n, _, what)| *n == "history" && what.starts_with("1 commits")),
        "{:?}",
        second.steps
    );
    let cold = repo.path().join("cold");
    build(&repo, &cold);
    assert!(
        std::fs::read(site.join("catalogue.sqlite")).unwrap()
            == std::fs::read(cold.join("catalogue.sqlite")).unwrap(),
        "a cached rebuild and a cold build disagree"
    );
    assert_eq!(
        std::fs::read_to_string(site.join("k/GOOD_NOW.md")).unwrap(),
        std::fs::read_to_string(cold.join("k/GOOD_NOW.md")).unwrap()
    );
}

/// A rebuild hard-links every contract file that did not change to the previous site's, so
/// it writes (and the old site's removal frees) only what changed; the result is still the
/// same as a cold build, file for file.
#[test]
fn rebuild_links_unchanged_contract_files() {
    use std::os::unix::fs::MetadataExt;
    let repo = repo();
    let site = repo.path().join("site");
    build(&repo, &site);
    let inode = |rel: &str| std::fs::metadata(site.join(rel)).unwrap().ino();
    let before: Vec<u64> = [
        "k/GOOD_HTTP_ITEM.html",
        "k/GOOD_HTTP_ITEM.md",
        "k/GOOD_NOW.html",
    ]
    .iter()
    .map(|f| inode(f))
    .collect();
    repo.write(
        "GOOD_NOW.yaml",
        &fixture("good/GOOD_NOW.yaml").replace("# WHEN_TO_USE:", "# WHEN_TO_USE: Always."),
    );
    repo.commit("Improve the now docstring", "2024-06-01T10:00:00Z");
    let second = build(&repo, &site);
    let pages = step(&second, "pages");
    // Six of the seven rows kept their inputs: linked without being rendered.
    assert!(pages.contains("18 files unchanged, linked"), "{pages}");
    assert!(pages.contains("6 rows not rendered again"), "{pages}");
    // The untouched row keeps its files (same inode, one link now the old site is gone) ...
    assert_eq!(inode("k/GOOD_HTTP_ITEM.html"), before[0]);
    assert_eq!(inode("k/GOOD_HTTP_ITEM.md"), before[1]);
    let meta = std::fs::metadata(site.join("k/GOOD_HTTP_ITEM.html")).unwrap();
    assert_eq!(meta.nlink(), 1);
    // ... the edited one is written anew.
    assert_ne!(inode("k/GOOD_NOW.html"), before[2]);
    assert!(
        std::fs::read_to_string(site.join("k/GOOD_NOW.md"))
            .unwrap()
            .contains("Always.")
    );
    let cold = repo.path().join("cold");
    build(&repo, &cold);
    assert!(
        same_site(&site, &cold),
        "a linked rebuild and a cold build differ"
    );

    // A list of inputs that does not match what the old files were made from (edited by
    // hand here) makes no stale page: the rows are rendered and compared, and still linked.
    let inputs = site.join(capdir::build::site::PAGE_INPUTS);
    let listed = std::fs::read_to_string(&inputs).unwrap();
    assert_eq!(listed.lines().count(), 1 + 7, "{listed}");
    let wrong: String = listed
        .lines()
        .map(|l| match l.split_once(' ') {
            Some((k, _)) if !l.starts_with('#') => format!("{k} {}\n", "0".repeat(64)),
            _ => format!("{l}\n"),
        })
        .collect();
    std::fs::write(&inputs, wrong).unwrap();
    let third = build(&repo, &site);
    let pages = step(&third, "pages");
    assert!(pages.contains("21 files unchanged, linked"), "{pages}");
    assert!(pages.contains("0 rows not rendered again"), "{pages}");
    assert!(
        same_site(&site, &cold),
        "a rebuild from a wrong input list differs"
    );

    // A new row changes the counts, which no row's pages show: every other row's pages are
    // reused unrendered (what lets an incremental rebuild leave them alone).
    repo.write("ADDED_ROW.yaml", &fn_row("ADDED_ROW", "text", "Added."));
    repo.commit("Add a row", "2024-07-01T10:00:00Z");
    let fourth = build(&repo, &site);
    let pages = step(&fourth, "pages");
    assert!(pages.contains("7 rows not rendered again"), "{pages}");
    let cold = repo.path().join("cold-2");
    build(&repo, &cold);
    assert!(
        same_site(&site, &cold),
        "a rebuild after an added row differs"
    );
}

/// What a build's step `name` says it did.
fn step<'r>(report: &'r build::Report, name: &str) -> &'r str {
    let found = report.steps.iter().find(|(n, _, _)| *n == name);
    &found.unwrap_or_else(|| panic!("no step {name}")).2
}

/// Two sites hold the same files with the same bytes, apart from the history cache (whose
/// walk started elsewhere).
fn same_site(a: &Path, b: &Path) -> bool {
    let (mut a, mut b) = (tree(a), tree(b));
    for t in [&mut a, &mut b] {
        t.remove(build::HISTORY_CACHE);
    }
    a == b
}

/// History links to commits: the `origin` remote's web address (its credentials dropped) by
/// default, `--repo-url` when given, none when that is empty.
#[test]
fn history_links_commits_to_the_repository() {
    let repo = repo();
    repo.git(
        &[
            "remote",
            "add",
            "origin",
            "https://ci:tok3n-secret@example.test/team/cat.git",
        ],
        None,
    );
    let out = repo.path().join("site");
    build(&repo, &out);
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("k/GOOD_ECHO.json")).unwrap())
            .unwrap();
    let sha = json["history"][0]["sha"].as_str().unwrap();
    let url = format!("https://example.test/team/cat/commit/{sha}");
    assert_eq!(json["history"][0]["url"], url.as_str());
    let page = std::fs::read_to_string(out.join("k/GOOD_ECHO.html")).unwrap();
    assert!(page.contains(&format!(r#"<a href="{url}">"#)), "{page}");
    let tomb = std::fs::read_to_string(out.join("k/OLD_ROW.html")).unwrap();
    assert!(tomb.contains("https://example.test/team/cat/commit/"));
    for (name, bytes) in tree(&out) {
        assert!(
            !String::from_utf8_lossy(&bytes).contains("tok3n-secret"),
            "{name} carries the remote's credential"
        );
    }

    let given = Options {
        repo_url: Some("https://git.example.org/x/y/".into()),
        ..Options::new(repo.catalogue(), &out)
    };
    build::run(&given).unwrap();
    let page = std::fs::read_to_string(out.join("k/GOOD_ECHO.html")).unwrap();
    assert!(page.contains(&format!("https://git.example.org/x/y/commit/{sha}")));

    let off = Options {
        repo_url: Some(String::new()),
        ..Options::new(repo.catalogue(), &out)
    };
    build::run(&off).unwrap();
    let page = std::fs::read_to_string(out.join("k/GOOD_ECHO.html")).unwrap();
    assert!(!page.contains("/commit/"), "{page}");
}

/// Packed, Git stores each commit's catalogue tree as a delta on its parent's, and the walk
/// applies those deltas itself; the history it reads must be the one read from loose objects,
/// through a merge and a side branch too.
#[test]
fn history_from_packed_deltas_equals_history_from_loose_objects() {
    let repo = Repo::new();
    for i in 0..40 {
        repo.write(
            &format!("ROW_{i:03}.yaml"),
            &fn_row(&format!("ROW_{i:03}"), "text", "A row."),
        );
    }
    repo.commit("Add forty rows", "2024-01-01T00:00:00Z");
    for i in 0..60 {
        let n = (i * 7) % 40;
        let key = format!("ROW_{n:03}");
        repo.write(
            &format!("{key}.yaml"),
            &fn_row(&key, "text", &format!("Edit {i}.")),
        );
        if i % 9 == 0 {
            repo.write(
                &format!("NEW_{i:03}.yaml"),
                &fn_row(&format!("NEW_{i:03}"), "text", "New."),
            );
        }
        if i % 13 == 5 {
            repo.remove(&format!("NEW_{:03}.yaml", (i / 9) * 9));
        }
        repo.commit(
            &format!("Change {i}"),
            &format!("2024-02-{:02}T{:02}:00:00Z", 1 + i / 24, i % 24),
        );
        if i == 30 {
            repo.git(&["checkout", "-q", "-b", "side"], None);
            repo.write("SIDE.yaml", &fn_row("SIDE", "text", "From a branch."));
            repo.commit("Side row", "2024-03-01T00:00:00Z");
            repo.git(&["checkout", "-q", "main"], None);
        }
    }
    repo.git(
        &["merge", "-q", "--no-ff", "-m", "Merge side", "side"],
        Some("2024-04-01T00:00:00Z"),
    );
    let changes = |h: &capdir::build::history::History| -> BTreeMap<String, Vec<(String, String)>> {
        h.files
            .iter()
            .map(|(f, cs)| {
                let cs = cs
                    .iter()
                    .map(|c| (c.commit.sha.clone(), c.kind.as_str().to_string()));
                (f.clone(), cs.collect())
            })
            .collect()
    };
    let loose = capdir::build::history::read(&repo.catalogue());
    assert_eq!(loose.trees_from_deltas, 0, "nothing is packed yet");
    repo.git(&["repack", "-adq", "--window=50", "--depth=50"], None);
    let packed = capdir::build::history::read(&repo.catalogue());
    assert!(
        packed.trees_from_deltas > 30,
        "only {} trees came from deltas",
        packed.trees_from_deltas
    );
    assert_eq!(changes(&packed), changes(&loose));
    assert_eq!(packed.commits_walked, 63);
    // `git fast-import` packs each tree as a delta on its parent's (the other direction):
    // the same history again.
    let export = std::process::Command::new("git")
        .args(["fast-export", "--all"])
        .current_dir(repo.path())
        .output()
        .unwrap();
    assert!(export.status.success());
    let imported = Repo::new();
    imported.fast_import(&export.stdout);
    let fast = capdir::build::history::read(&imported.catalogue());
    assert!(fast.missing.is_none(), "{:?}", fast.missing);
    assert!(
        fast.trees_from_deltas > 30,
        "only {} trees came from deltas",
        fast.trees_from_deltas
    );
    assert_eq!(changes(&fast), changes(&loose));
    assert!(
        packed
            .of("SIDE.yaml")
            .iter()
            .any(|c| c.commit.subject == "Side row")
    );
    assert_eq!(
        packed.of("ROW_000.yaml").len(),
        1 + (0..60).filter(|i| (i * 7) % 40 == 0).count()
    );
}

/// A thread lent to a history walk under way takes part of it: the history is the same as
/// one walker alone finds, in both pack layouts (walked oldest first and newest first), and
/// the same in both. The
/// repository is made with `git fast-import` (600 commits, some in the same second), and
/// repacked the way a clone is.
#[test]
fn history_walked_with_a_helper_equals_history_walked_alone() {
    let repo = Repo::new();
    let mut stream = String::new();
    for i in 0..600u32 {
        let row = (i * 37) % 150;
        let body = format!("key: ROW_{row:03}\n# version {i}\n");
        let time = 1_700_000_000 + (i / 3) * 60; // three commits a minute: equal times
        stream.push_str(&format!(
            "commit refs/heads/main\ncommitter T <t@example.com> {time} +0000\ndata {}\nEdit {i}\n",
            format!("Edit {i}\n").len() - 1
        ));
        stream.push_str(&format!(
            "M 100644 inline catalogue/ROW_{row:03}.yaml\ndata {}\n{body}\n",
            body.len()
        ));
        if i % 50 == 49 {
            stream.push_str(&format!("D catalogue/ROW_{:03}.yaml\n", (i * 11) % 150));
        }
    }
    repo.fast_import(stream.as_bytes());
    let changes = |h: &capdir::build::history::History| {
        h.files
            .iter()
            .map(|(f, cs)| {
                let list: Vec<_> = cs.iter().map(|c| (c.kind, c.commit.sha.clone())).collect();
                (f.clone(), list)
            })
            .collect::<Vec<_>>()
    };
    let mut first: Option<Vec<_>> = None;
    for layout in ["generated", "repacked"] {
        if layout == "repacked" {
            repo.git(&["repack", "-adfq", "--window=50", "--depth=50"], None);
        }
        let alone = capdir::build::history::read_cached(&repo.catalogue(), None, 1, None);
        assert_eq!(alone.commits_walked, 600);
        assert_eq!(alone.commits_helped, 0);
        // Walked the other way, commits of the same second still come in one order.
        let found = changes(&alone);
        assert_eq!(first.get_or_insert_with(|| found.clone()), &found);
        // Whether the helper arrives in time to take a part depends on the scheduler: try a
        // few times; every walk must agree with the lone one.
        let mut helped = 0;
        for _ in 0..5 {
            let helper = capdir::build::history::SpareWalker::default();
            let lent = {
                let helper = helper.clone();
                std::thread::spawn(move || helper.help())
            };
            let with =
                capdir::build::history::read_cached(&repo.catalogue(), None, 1, Some(&helper));
            lent.join().unwrap();
            assert!(with.missing.is_none(), "{:?}", with.missing);
            assert_eq!(changes(&with), changes(&alone), "{layout}");
            helped = helped.max(with.commits_helped);
        }
        assert!(helped > 0, "{layout}: the helper never took a part");
    }
}

/// The bindings of [`credentials_repo`]: `SOME_TOKEN` to two origins (one written in capitals,
/// as the dispatcher reads it: lowercase), GET only, for one key and a category whose name is
/// markup (nothing validates a binding's category, so the page must escape it); `UNUSED_KEY`
/// for any row, used by none yet.
const BINDINGS: &str = "credentials:\n  SOME_TOKEN:\n    origins: [\"https://API.Example.com/items/\", \"https://backup.example.com:8443/v1/\"]\n    methods: [GET]\n    keys: [GOOD_HTTP_ITEM]\n    categories: [\"<img src=x onerror=alert(1)>\"]\n  UNUSED_KEY:\n    origins: [\"https://unused.example\"]\n";

fn credentials_repo() -> Repo {
    let r = Repo::new();
    r.write("GOOD_HTTP_ITEM.yaml", &fixture("good/GOOD_HTTP_ITEM.yaml"));
    r.write("GOOD_ECHO.yaml", &fixture("good/GOOD_ECHO.yaml"));
    r.write("bindings.yaml", BINDINGS);
    r.commit("Rows and their bindings", "2024-01-01T10:00:00Z");
    r
}

fn read(site: &Path, rel: &str) -> String {
    std::fs::read_to_string(site.join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// A credentialed row's contract, in all three formats, says where the catalogue lets its
/// credential go; a row without one says nothing of it. The credentials page lists every
/// bound credential with its origins, methods, the rows it is for and the rows that use it,
/// escaping what the bindings say; the index links it, and the manifest lists it.
#[test]
fn contracts_and_the_credentials_page_say_where_each_credential_goes() {
    let repo = credentials_repo();
    let out = repo.path().join("site");
    build(&repo, &out);

    let json: serde_json::Value =
        serde_json::from_str(&read(&out, "k/GOOD_HTTP_ITEM.json")).unwrap();
    assert_eq!(
        json["credential_bindings"],
        serde_json::json!([{
            "env": "SOME_TOKEN",
            "bound": true,
            "origins": ["https://api.example.com/items/", "https://backup.example.com:8443/v1/"],
            "methods": ["GET"],
        }])
    );
    let md = read(&out, "k/GOOD_HTTP_ITEM.md");
    assert!(
        md.contains("  - `SOME_TOKEN`: `https://api.example.com/items/`, `https://backup.example.com:8443/v1/`; GET only\n"),
        "{md}"
    );
    let html = read(&out, "k/GOOD_HTTP_ITEM.html");
    assert!(
        html.contains(r#"<dt>May go to</dt><dd><ul class="bound"><li><code>SOME_TOKEN</code>: <code class="wrap">https://api.example.com/items/</code>, <code class="wrap">https://backup.example.com:8443/v1/</code>; GET only</li></ul>"#),
        "{html}"
    );
    assert!(html.contains(r#"<a href="../credentials.html">"#));
    let echo: serde_json::Value = serde_json::from_str(&read(&out, "k/GOOD_ECHO.json")).unwrap();
    assert!(echo.get("credential_bindings").is_none(), "{echo}");
    assert!(!read(&out, "k/GOOD_ECHO.md").contains("Where it may go"));
    assert!(!read(&out, "k/GOOD_ECHO.html").contains("May go to"));

    let page = read(&out, "credentials.html");
    assert!(
        page.contains(r#"<tr id="SOME_TOKEN"><th scope="row"><code>SOME_TOKEN</code></th><td><code class="wrap">https://api.example.com/items/</code><br><code class="wrap">https://backup.example.com:8443/v1/</code></td><td>GET</td>"#),
        "{page}"
    );
    assert!(
        page.contains(r#"<td>rows <code>GOOD_HTTP_ITEM</code>; category <code>&lt;img src=x onerror=alert(1)&gt;</code></td><td><a href="k/GOOD_HTTP_ITEM.html">GOOD_HTTP_ITEM</a></td>"#),
        "{page}"
    );
    assert!(
        !page.contains("<img"),
        "the category's markup is escaped: {page}"
    );
    assert!(
        page.contains(r#"<code class="wrap">https://unused.example/</code></td><td>any</td><td>any row</td><td><span class="muted">none yet</span>"#),
        "{page}"
    );
    assert!(
        !page.contains("Not bound"),
        "every row's credential is bound: {page}"
    );
    assert!(
        read(&out, "index.html")
            .contains(r#"<a href="credentials.html">Where each credential may go</a>"#)
    );
    assert!(read(&out, build::manifest::FILE).contains("\"credentials.html\""));
    let site_bindings = build::site_bindings(&out);
    assert_eq!(site_bindings.credentials.len(), 2);
}

/// A row changed in place (as a write does) brings the credentials page and its own contract
/// along, as a full build of the same commit makes them.
#[test]
fn an_incremental_build_keeps_the_credentials_page() {
    let repo = credentials_repo();
    let out = repo.path().join("site");
    build(&repo, &out);
    repo.write(
        "NEW_THING.yaml",
        &fixture("good/GOOD_HTTP_ITEM.yaml")
            .replace("GOOD_HTTP_ITEM", "NEW_THING")
            .replace("SOME_TOKEN", "UNUSED_KEY")
            .replace(
                "https://api.example.com/items",
                "https://unused.example/things",
            )
            .replace("one item by id", "one thing by its number")
            .replace("fetch item by id", "look up a thing by its number"),
    );
    repo.commit("Add a thing", "2024-02-01T10:00:00Z");
    let updated = build::incremental::build(&Options::new(repo.catalogue(), &out))
        .expect("incremental build")
        .expect("changed in place");
    assert_eq!(updated.changed, 1);
    let page = read(&out, "credentials.html");
    assert!(
        page.contains(r#"<a href="k/NEW_THING.html">NEW_THING</a>"#),
        "{page}"
    );
    assert!(
        read(&out, "k/NEW_THING.md")
            .contains("  - `UNUSED_KEY`: `https://unused.example/`; any method\n")
    );
    let cold = repo.path().join("cold");
    build(&repo, &cold);
    for rel in [
        "credentials.html",
        "k/NEW_THING.json",
        "k/NEW_THING.html",
        "index.html",
    ] {
        assert_eq!(read(&out, rel), read(&cold, rel), "{rel}");
    }
}
