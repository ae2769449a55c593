//! `capdir build` over a site it built before changes the site in place (`build::incremental`):
//! after each kind of change (an edit, an added row, a removed row with its replacement, a
//! disabled row, a flow whose step changed) the site holds what a full build of the same
//! commit holds, the search index and the snapshot's bytes aside (compared by what they
//! answer and hold), and its manifest describes every file as it is.

use crate::common;

use capdir::build::incremental::{self, Built, Opened};
use capdir::build::{self, Options};
use capdir::search::Searcher;
use common::{Repo, fixture, fn_row};
use std::collections::BTreeMap;
use std::path::Path;

fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(dir).unwrap().display().to_string();
            // Made differently by design: the index's segments, the snapshot's pages, the
            // manifest (digests of those), and the lists kept beside the site.
            if rel.starts_with('.')
                || rel.starts_with("index")
                || rel == "catalogue.sqlite"
                || rel == "build.json"
            {
                continue;
            }
            if p.is_dir() {
                stack.push(p);
            } else {
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

fn table(site: &Path, sql: &str) -> Vec<Vec<String>> {
    let db = rusqlite::Connection::open(site.join("catalogue.sqlite")).unwrap();
    let mut stmt = db.prepare(sql).unwrap();
    let n = stmt.column_count();
    stmt.query_map([], |r| {
        (0..n)
            .map(|i| {
                r.get::<_, rusqlite::types::Value>(i)
                    .map(|v| format!("{v:?}"))
            })
            .collect()
    })
    .unwrap()
    .collect::<Result<_, _>>()
    .unwrap()
}

/// The site changed in place holds what a cold build holds.
fn assert_same_as_cold(repo: &Repo, site: &Path, what: &str) {
    let cold = repo.path().join(format!("cold-{}", what.replace(' ', "-")));
    build::run(&Options::new(repo.catalogue(), &cold)).expect("cold build");
    let (a, b) = (files(site), files(&cold));
    let differ: Vec<&String> = a
        .keys()
        .chain(b.keys())
        .filter(|k| a.get(*k) != b.get(*k))
        .collect();
    assert!(differ.is_empty(), "{what}: files differ: {differ:?}");
    for sql in [
        "SELECT * FROM directory ORDER BY key",
        "SELECT * FROM row_history ORDER BY key, seq",
        "SELECT * FROM tombstones ORDER BY key",
        "SELECT * FROM build",
    ] {
        assert_eq!(table(site, sql), table(&cold, sql), "{what}: {sql}");
    }
    let (mine, theirs) = (
        Searcher::open(&site.join("index")).unwrap(),
        Searcher::open(&cold.join("index")).unwrap(),
    );
    assert_eq!(mine.len(), theirs.len(), "{what}");
    for ask in ["repeat my text back", "current time", "fetch an item"] {
        let keys = |s: &Searcher| -> Vec<String> {
            s.ask(ask, 3).unwrap().into_iter().map(|h| h.key).collect()
        };
        assert_eq!(keys(&mine), keys(&theirs), "{what}: {ask}");
    }
    // The manifest names every file with its bytes' digest, in the site rebuilt and in the
    // full build (whose contract files are hashed as they are written, not read back).
    for built in [site, cold.as_path()] {
        let manifest = build::manifest::Manifest::read(built).expect("manifest");
        for e in &manifest.files {
            let (size, sha) = build::manifest::sha256_file(&built.join(&e.path)).unwrap();
            assert_eq!(
                (size, sha.as_str()),
                (e.size, e.sha256.as_str()),
                "{what}: {}",
                e.path
            );
        }
    }
    let manifest = build::manifest::Manifest::read(site).expect("manifest");
    let listed = |m: &build::manifest::Manifest| -> Vec<String> {
        m.files
            .iter()
            .map(|e| e.path.clone())
            .filter(|p| !p.starts_with("index/"))
            .collect()
    };
    let cold_manifest = build::manifest::Manifest::read(&cold).expect("manifest");
    assert_eq!(listed(&manifest), listed(&cold_manifest), "{what}");
}

/// A catalogue of three rows (R_ONE, R_TWO, R_THREE) in one commit, and its site built.
fn three_rows_built() -> (Repo, std::path::PathBuf) {
    let repo = Repo::new();
    for key in ["R_ONE", "R_TWO", "R_THREE"] {
        repo.write(&format!("{key}.yaml"), &fn_row(key, "text", "An echo."));
    }
    repo.commit("Rows", "2024-01-01T10:00:00Z");
    let site = repo.path().join("site");
    build::run(&Options::new(repo.catalogue(), &site)).expect("build");
    (repo, site)
}

/// Build in place; what it says of the opening (how many files it took as checked).
fn opened_in_place(repo: &Repo, site: &Path) -> String {
    let updated = incremental::build(&Options::new(repo.catalogue(), site))
        .expect("update")
        .expect("changed in place");
    updated.steps[0].2.clone()
}

/// Build in place; the number of rows it changed.
fn update(repo: &Repo, site: &Path) -> usize {
    incremental::build(&Options::new(repo.catalogue(), site))
        .expect("update")
        .expect("changed in place, not built anew")
        .changed
}

#[test]
fn each_kind_of_change_in_place_equals_a_full_build() {
    let repo = Repo::new();
    for f in ["GOOD_ECHO.yaml", "GOOD_NOW.yaml", "GOOD_FLOW.yaml"] {
        repo.write(f, &fixture(&format!("good/{f}")));
    }
    repo.write("OLD_ROW.yaml", &fn_row("OLD_ROW", "text", "An old echo."));
    repo.commit("First rows", "2024-01-01T10:00:00Z");
    let site = repo.path().join("site");
    build::run(&Options::new(repo.catalogue(), &site)).expect("build");
    assert_eq!(update(&repo, &site), 0, "nothing changed");

    repo.write(
        "GOOD_ECHO.yaml",
        &fixture("good/GOOD_ECHO.yaml").replace("# WHEN_TO_USE:", "# WHEN_TO_USE: Parrots."),
    );
    repo.commit("Edit the echo", "2024-02-01T10:00:00Z");
    assert_eq!(update(&repo, &site), 1);
    assert_same_as_cold(&repo, &site, "an edit");
    // The edit reached the index (the row's document is not kept as it was).
    let ask = Searcher::open(&site.join("index"))
        .unwrap()
        .ask("parrots", 3);
    assert_eq!(
        ask.unwrap().first().map(|h| h.key.as_str()),
        Some("GOOD_ECHO")
    );

    repo.write("ADDED_ROW.yaml", &fn_row("ADDED_ROW", "text", "Added."));
    repo.remove("OLD_ROW.yaml");
    repo.commit(
        "Add one, remove one\n\nReplaced-by: ADDED_ROW",
        "2024-03-01T10:00:00Z",
    );
    assert_eq!(update(&repo, &site), 2);
    assert_same_as_cold(&repo, &site, "an add and a removal");
    let tomb = std::fs::read_to_string(site.join("k/OLD_ROW.json")).unwrap();
    assert!(tomb.contains(r#""replaced_by": "ADDED_ROW""#), "{tomb}");

    repo.write(
        "ADDED_ROW.yaml",
        &fn_row("ADDED_ROW", "text", "Added.")
            .replace("category: text\n", "category: text\nenabled: false\n"),
    );
    repo.commit("Disable it", "2024-04-01T10:00:00Z");
    update(&repo, &site);
    assert_same_as_cold(&repo, &site, "a disabled row");
    assert!(!site.join("k/ADDED_ROW.md").exists());

    // The flow's step changes its call: the flow's fingerprint (which covers its steps) and
    // so its contract change too, though its file did not.
    let flow_before = std::fs::read_to_string(site.join("k/GOOD_FLOW.json")).unwrap();
    repo.write(
        "GOOD_NOW.yaml",
        &fixture("good/GOOD_NOW.yaml").replace("category: time", "category: clock"),
    );
    repo.commit("Move now", "2024-05-01T10:00:00Z");
    update(&repo, &site);
    assert_same_as_cold(&repo, &site, "a step of a flow");
    if fixture("good/GOOD_FLOW.yaml").contains("GOOD_NOW") {
        let flow_after = std::fs::read_to_string(site.join("k/GOOD_FLOW.json")).unwrap();
        assert_ne!(flow_before, flow_after);
    }

    // A row whose file comes back after its removal loses its tombstone.
    repo.write("OLD_ROW.yaml", &fn_row("OLD_ROW", "text", "Back again."));
    repo.commit("Bring it back", "2024-06-01T10:00:00Z");
    update(&repo, &site);
    assert_same_as_cold(&repo, &site, "a row back");
}

#[test]
fn a_site_made_otherwise_is_built_anew() {
    let repo = Repo::new();
    repo.write("GOOD_ECHO.yaml", &fixture("good/GOOD_ECHO.yaml"));
    repo.commit("First", "2024-01-01T10:00:00Z");
    let site = repo.path().join("site");
    build::run(&Options::new(repo.catalogue(), &site)).expect("build");
    let other = Options {
        dispatcher_url: "https://elsewhere.example".into(),
        ..Options::new(repo.catalogue(), &site)
    };
    assert!(matches!(Built::open(&other), Ok(Opened::Full(_))));
    std::fs::remove_file(site.join(incremental::MADE_FILE)).unwrap();
    assert!(matches!(
        Built::open(&Options::new(repo.catalogue(), &site)),
        Ok(Opened::Full(_))
    ));
}

/// An edit that fails the gate does not reach the site by the in-place path: a row's host moved
/// into an argument slot (a caller could then send the call, and its credential, anywhere) is
/// refused with its file and line, and the site keeps every byte it had. The in-place path
/// reads the site while it checks the catalogue; the check still decides first.
#[test]
fn an_edit_that_fails_the_gate_changes_nothing_in_place() {
    let repo = Repo::new();
    let bad = fixture("broken/bad_http_target_slot_in_host/HTTP_SLOT_IN_HOST.yaml");
    let good = bad.replace("https://$1.example.com/a", "https://api.example.com/a/$1");
    assert_ne!(good, bad);
    repo.write("HTTP_SLOT_IN_HOST.yaml", &good);
    repo.write("GOOD_ECHO.yaml", &fixture("good/GOOD_ECHO.yaml"));
    repo.commit("First", "2024-01-01T10:00:00Z");
    let site = repo.path().join("site");
    build::run(&Options::new(repo.catalogue(), &site)).expect("build");
    let before = files(&site);

    repo.write("HTTP_SLOT_IN_HOST.yaml", &bad);
    repo.commit("Let the caller pick the host", "2024-02-01T10:00:00Z");
    match incremental::build(&Options::new(repo.catalogue(), &site)) {
        Err(build::BuildError::Check(report)) => {
            assert!(
                report.contains("HTTP_SLOT_IN_HOST.yaml:3:") && report.contains("bad_http_target"),
                "{report}"
            );
        }
        Err(other) => panic!("refused for another reason: {other}"),
        Ok(updated) => panic!("the edit was applied: {updated:?}"),
    }
    assert!(files(&site) == before, "the site changed");
}

/// A category page changes only with its rows, the categories or the counts: an edit of one
/// row rewrites its category's page and leaves every other category page as it was (the same
/// file, not a copy), the manifest still describing each; a row in a new category changes the
/// list of categories every page shows, so every page is written.
#[test]
fn an_edit_rewrites_only_its_category_page() {
    use std::os::unix::fs::MetadataExt as _;
    let repo = Repo::new();
    for (key, cat) in [("A_ONE", "alpha"), ("A_TWO", "alpha"), ("B_ONE", "beta")] {
        repo.write(&format!("{key}.yaml"), &fn_row(key, cat, "An echo."));
    }
    repo.commit("Rows", "2024-01-01T10:00:00Z");
    let site = repo.path().join("site");
    build::run(&Options::new(repo.catalogue(), &site)).expect("build");
    let inode = |cat: &str| {
        std::fs::metadata(site.join(format!("c/{cat}.html")))
            .unwrap()
            .ino()
    };
    let (alpha, beta) = (inode("alpha"), inode("beta"));

    repo.write("A_ONE.yaml", &fn_row("A_ONE", "alpha", "An edited echo."));
    repo.commit("Edit one", "2024-02-01T10:00:00Z");
    assert_eq!(update(&repo, &site), 1);
    assert_ne!(
        inode("alpha"),
        alpha,
        "the edited row's category page is written"
    );
    assert_eq!(inode("beta"), beta, "another category's page is left alone");
    assert_same_as_cold(&repo, &site, "an edit in one category");

    let beta = inode("beta");
    repo.write("G_ONE.yaml", &fn_row("G_ONE", "gamma", "A new echo."));
    repo.commit("A new category", "2024-03-01T10:00:00Z");
    assert_eq!(update(&repo, &site), 1);
    assert_ne!(inode("beta"), beta, "every page names the new category");
    assert_same_as_cold(&repo, &site, "a new category");
}

/// A rebuild in place runs the rules of one file over the files that changed only, taking
/// the others as the site's last gate found them, byte for byte (`build::checked`); the result
/// is a full build's. A list of clean files that does not read is not believed: every file is
/// checked again. (An edit that fails the gate is refused all the same:
/// `an_edit_that_fails_the_gate_changes_nothing_in_place`.)
#[test]
fn a_rebuild_checks_again_only_the_files_that_changed() {
    let (repo, site) = three_rows_built();
    let opened = |repo: &Repo| opened_in_place(repo, &site);

    repo.write("R_TWO.yaml", &fn_row("R_TWO", "text", "An edited echo."));
    repo.commit("Edit", "2024-02-01T10:00:00Z");
    let said = opened(&repo);
    assert!(said.contains("(2 files unchanged since checked,"), "{said}");
    assert_same_as_cold(&repo, &site, "an edit, two files taken as checked");

    std::fs::write(site.join(build::checked::FILE), "garbage\n").unwrap();
    repo.write("R_ONE.yaml", &fn_row("R_ONE", "text", "Edited too."));
    repo.commit("Edit again", "2024-03-01T10:00:00Z");
    let said = opened(&repo);
    assert!(said.contains("(0 files unchanged since checked,"), "{said}");
    assert_same_as_cold(&repo, &site, "an edit, every file checked");
    // The list is whole again for the next rebuild.
    repo.write(
        "R_THREE.yaml",
        &fn_row("R_THREE", "text", "Edited as well."),
    );
    repo.commit("Edit a third", "2024-04-01T10:00:00Z");
    let said = opened(&repo);
    assert!(said.contains("(2 files unchanged since checked,"), "{said}");
}

/// A file the site's list has with the stamp it has now is not read: its row is the
/// snapshot's. Changing a file's bytes moves its stamp whatever is done to its size and
/// modification time (its change time moves), so the gate reads it and refuses what it says;
/// a rule across rows that names a file left unread still says where in it.
#[test]
fn a_file_left_unread_for_its_stamp_is_read_again_once_its_stamp_moves() {
    let (repo, site) = three_rows_built();
    let opened = |repo: &Repo| opened_in_place(repo, &site);
    // Files written within the clock's last two seconds are read every time.
    let said = opened(&repo);
    assert!(
        said.contains("3 files unchanged since checked, 0 of them not read"),
        "{said}"
    );
    std::thread::sleep(std::time::Duration::from_millis(2100));
    let said = opened(&repo);
    assert!(said.contains("0 of them not read"), "{said}");
    let said = opened(&repo);
    assert!(
        said.contains("3 files unchanged since checked, 3 of them not read"),
        "{said}"
    );

    // The same size and modification time, other bytes: read, and refused.
    let path = repo.catalogue().join("R_TWO.yaml");
    let modified = std::fs::metadata(&path).unwrap().modified().unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    let bad = text.replacen("type: fn", "type: zz", 1);
    assert_eq!(bad.len(), text.len());
    std::fs::write(&path, &bad).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_modified(modified)
        .unwrap();
    match incremental::build(&Options::new(repo.catalogue(), &site)) {
        Err(build::BuildError::Check(diags)) => {
            assert!(diags.contains("R_TWO.yaml:2:"), "{diags}")
        }
        other => panic!("the changed file was not checked: {other:?}"),
    }
    std::fs::write(&path, &text).unwrap();

    // A new file with the key of a file left unread: the duplicate is named in the unread
    // file, at its key's value.
    std::thread::sleep(std::time::Duration::from_millis(2100));
    opened(&repo);
    repo.write("A_COPY.yaml", &fn_row("R_ONE", "text", "A copy."));
    match incremental::build(&Options::new(repo.catalogue(), &site)) {
        Err(build::BuildError::Check(diags)) => {
            assert!(diags.contains("R_ONE.yaml:1:6"), "{diags}");
            assert!(diags.contains("duplicate_key"), "{diags}");
        }
        other => panic!("the duplicate was not found: {other:?}"),
    }
}
