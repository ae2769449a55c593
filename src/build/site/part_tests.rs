use super::*;
use crate::build::pages::SiteMeta;
use crate::build::snapshot::{BuildInfo, Counts};
use crate::row::{catalogue, parse_row};
use serde_json::Value;

/// The bundled catalogue's rows.
fn bundled() -> Vec<Row> {
    let files = catalogue::read_dir(Path::new("catalogue")).expect("the bundled catalogue");
    files
        .iter()
        .filter_map(|f| parse_row(&f.path, &f.bytes).row)
        .collect()
}

/// The three files written a part per row, as serde writes each document whole (the
/// bytes every earlier build wrote).
fn whole(
    rows: &[&Row],
    commit: &str,
    urls: &Urls,
    prints: &HashMap<String, String>,
) -> [Vec<u8>; 3] {
    let tools: Vec<Value> = rows
        .iter()
        .filter(|r| r.planner_visible)
        .map(|r| serde_json::to_value(projection::McpTool::of(r)).unwrap())
        .collect();
    let mut listed: Vec<&&Row> = rows.iter().filter(|r| !r.is_test_shaped()).collect();
    listed.sort_by(|a, b| {
        crate::row::listing_order(a.seq, &a.key).cmp(&crate::row::listing_order(b.seq, &b.key))
    });
    let registry: Vec<Value> = listed
        .iter()
        .map(|r| {
            serde_json::to_value(projection::registry_entry(r, urls, &prints[&r.key])).unwrap()
        })
        .collect();
    let index: Vec<[String; 4]> = rows
        .iter()
        .map(|r| {
            let mut extra = r.doc().when_to_use.clone().unwrap_or_default();
            for a in &r.asks {
                extra.push(' ');
                extra.push_str(a);
            }
            [
                r.key.clone(),
                r.category.clone(),
                r.what().to_string(),
                extra,
            ]
        })
        .collect();
    let line = |mut v: Vec<u8>| {
        v.push(b'\n');
        v
    };
    [
        line(serde_json::to_vec_pretty(&json!({"tools": tools})).unwrap()),
        line(serde_json::to_vec(&json!({"commit": commit, "rows": registry})).unwrap()),
        serde_json::to_vec(&json!({"v": 1, "rows": index})).unwrap(),
    ]
}

fn written(out: &Path) -> [Vec<u8>; 3] {
    [MCP_TOOLS, REGISTRY, SEARCH_INDEX].map(|f| std::fs::read(out.join(f)).unwrap())
}

#[test]
fn projections_written_a_part_per_row_are_the_documents_whole() {
    let site = tempfile::tempdir().unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let mut rows = bundled();
    assert!(rows.len() > 20, "{} rows", rows.len());
    let urls = Urls::new("https://dispatch.example.com");
    let write_all = |out: &Path, rows: &[Row], commit: &str, reuse: Option<&parts::Reuse>| {
        let refs: Vec<&Row> = rows.iter().collect();
        let counts = Counts::of(rows.iter());
        let info = BuildInfo {
            commit: commit.into(),
            date: String::new(),
            capdir_version: "0".into(),
            history_partial: false,
            counts: counts.clone(),
        };
        let common = Common {
            site: SiteMeta::default_for(&counts),
            counts: &counts,
            build: &info,
            repo_url: None,
            dispatcher: urls.dispatcher.clone(),
            templates: &Templates::builtin(),
        };
        let prints = crate::row::call::fingerprints(rows);
        let layouts = write_projections(out, &refs, &common, &urls, &[], &prints, reuse).unwrap();
        let expected = whole(&refs, commit, &urls, &prints);
        (layouts, expected, prints)
    };
    let same = |out: &Path, expected: [Vec<u8>; 3], what: &str| {
        for (file, (got, want)) in [MCP_TOOLS, REGISTRY, SEARCH_INDEX]
            .iter()
            .zip(written(out).iter().zip(expected.iter()))
        {
            assert!(
                got == want,
                "{file}, {what}:\n{}\n{}",
                String::from_utf8_lossy(got),
                String::from_utf8_lossy(want)
            );
        }
    };
    let (layouts, expected, prints) = write_all(site.path(), &rows, "c0ffee", None);
    same(site.path(), expected, "a full build");
    parts::Layouts::save(site.path(), &layouts).unwrap();
    let layouts = parts::Layouts::take(site.path());

    // One row's text changed, one row gone, one moved in the listing (its seq), a new
    // commit: the parts of the rest are copied, and the files are what a full build writes.
    let mut changed = BTreeSet::new();
    rows[3].parsed.doc.when_to_use = Some("never, \"quoted\" \u{e9}".into());
    changed.insert(rows[3].key.clone());
    changed.insert(rows.remove(5).key);
    rows[8].seq = Some(-1);
    changed.insert(rows[8].key.clone());
    // And the rows whose fingerprint moved (their registry entries name it), as a change
    // in place marks them.
    let prints_after = crate::row::call::fingerprints(&rows);
    changed.extend(
        prints_after
            .iter()
            .filter(|(k, p)| prints.get(*k) != Some(p))
            .map(|(k, _)| k.clone()),
    );
    let reuse = parts::Reuse {
        site: site.path(),
        layouts: &layouts,
        changed: &changed,
    };
    let (_, expected, _) = write_all(scratch.path(), &rows, "beef", Some(&reuse));
    same(scratch.path(), expected, "a change in place");
}
