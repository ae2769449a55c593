//! A site owner's templates: an override of one page changes that page and nothing else,
//! escaping stays on through an override, pages and static files can be added, and the gate
//! (`capdir check`, and every build) names a template that does not parse, reads a field
//! the page lacks, turns escaping off, reads the environment or replaces a fixed form, with
//! file and line, before anything is published.

use crate::common::{Repo, fn_row};
use capdir::build::{self, BuildError, Options};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_capdir");

/// capdir's own template `name`, as the repository holds it.
fn builtin(name: &str) -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("templates")
            .join(name),
    )
    .unwrap()
}

/// Every file of a site by path, but the build's own bookkeeping (stamps and digests).
fn files(site: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut dirs = vec![site.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let path = e.unwrap().path();
            let rel = path
                .strip_prefix(site)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            if path.is_dir() {
                dirs.push(path);
            } else if !rel.starts_with('.') && rel != "build.json" {
                out.insert(rel, std::fs::read(&path).unwrap());
            }
        }
    }
    out
}

fn build_with(
    catalogue: &Path,
    out: &Path,
    templates: Option<&Path>,
) -> Result<build::Report, BuildError> {
    build::run(&Options {
        templates: templates.map(Path::to_path_buf),
        ..Options::new(catalogue, out)
    })
}

/// A folder holding `files` (name, text), as a catalogue's `templates/`.
fn folder(root: &Path, files: &[(&str, &str)]) -> PathBuf {
    let dir = root.join("templates");
    std::fs::create_dir_all(dir.join("static")).unwrap();
    for (name, text) in files {
        std::fs::write(dir.join(name), text).unwrap();
    }
    dir
}

const BANNER: &str = "<p class=\"owner\">Acme's tools</p>\n";

#[test]
fn an_override_of_row_html_changes_every_row_page_and_no_other_file() {
    let catalogue = Path::new(env!("CARGO_MANIFEST_DIR")).join("catalogue");
    let tmp = tempfile::tempdir().unwrap();
    let row = builtin("row.html").replacen("<article", &format!("{BANNER}<article"), 1);
    let dir = folder(tmp.path(), &[("row.html", &row)]);
    let (plain, restyled) = (tmp.path().join("plain"), tmp.path().join("restyled"));
    build_with(&catalogue, &plain, None).expect("build");
    build_with(&catalogue, &restyled, Some(&dir)).expect("build with row.html overridden");
    let (before, after) = (files(&plain), files(&restyled));
    assert_eq!(
        before.keys().collect::<Vec<_>>(),
        after.keys().collect::<Vec<_>>(),
        "the same files"
    );
    let mut rows = 0;
    for (path, old) in &before {
        let new = &after[path];
        let row_page = path.starts_with("k/") && path.ends_with(".html");
        if !row_page {
            assert!(
                old == new,
                "{path} changed though only row.html was overridden"
            );
            continue;
        }
        rows += 1;
        let (old, new) = (String::from_utf8_lossy(old), String::from_utf8_lossy(new));
        assert!(new.contains(BANNER), "{path} lacks the banner");
        assert_eq!(
            new.replacen(BANNER, "", 1),
            old,
            "{path}: more changed than the banner"
        );
    }
    assert!(rows >= 40, "{rows} row pages");
}

/// A contributor writes markup into a row's docstring; the owner's template shows the field
/// where capdir's did not: the markup shows as text.
#[test]
fn a_row_field_with_markup_shows_as_text_through_an_override() {
    let repo = Repo::new();
    repo.write(
        "XSS.yaml",
        &fn_row(
            "XSS",
            "text",
            "Echoes <script>alert('x')</script> & \"quotes\".",
        ),
    );
    repo.commit("Add XSS", "2024-01-01T00:00:00Z");
    let row = builtin("row.html").replacen(
        "<article",
        "<div id=\"own\" title=\"{{ c.what }}\">{{ c.what }}</div>\n<article",
        1,
    );
    let dir = folder(repo.path(), &[("row.html", &row)]);
    let out = repo.path().join("site");
    build_with(&repo.catalogue(), &out, Some(&dir)).expect("build");
    let page = std::fs::read_to_string(out.join("k/XSS.html")).unwrap();
    let shown = "Echoes &lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;quotes&quot;.";
    assert!(
        page.contains(&format!("<div id=\"own\" title=\"{shown}\">{shown}</div>")),
        "{page}"
    );
    assert!(!page.contains("<script>alert"), "markup passed through");
}

/// Pages, the layout around them and static files from the catalogue's own `templates/`
/// beside it, found without a flag; a later build sees a changed template (the site is
/// built anew, not changed in place with pages of the old one).
#[test]
fn the_folder_beside_the_catalogue_restyles_adds_pages_and_static_files() {
    let repo = Repo::new();
    repo.write("ECHO.yaml", &fn_row("ECHO", "text", "Echoes its input."));
    repo.commit("Add ECHO", "2024-01-01T00:00:00Z");
    let layout = builtin("layout.html").replace("capdir</a>", "Acme tools</a>");
    let about = "{% extends \"layout.html\" %}\n{% block title %}About · {{ f.title }}{% endblock %}\n{% block main %}<h1>About</h1><p>{{ counts.enabled.value }} capabilities.</p>{% include \"_note.html\" %}{% endblock %}\n";
    let dir = folder(
        repo.path(),
        &[
            ("layout.html", &layout),
            ("about.html", about),
            ("_note.html", "<p class=\"note\">Kept by Acme.</p>"),
            ("static/style.css", "body { color: rebeccapurple; }\n"),
            (
                "static/logo.svg",
                "<svg xmlns=\"http://www.w3.org/2000/svg\"/>\n",
            ),
        ],
    );
    let out = repo.path().join("site");
    build::run(&Options::new(repo.catalogue(), &out)).expect("build");
    let read = |p: &str| std::fs::read_to_string(out.join(p)).unwrap();
    for page in [
        "index.html",
        "search.html",
        "k/ECHO.html",
        "credentials.html",
    ] {
        assert!(
            read(page).contains("Acme tools</a>"),
            "{page} lacks the layout"
        );
    }
    let about = read("about.html");
    assert!(
        about.contains("<h1>About</h1><p>1 capabilities.</p><p class=\"note\">Kept by Acme.</p>"),
        "{about}"
    );
    assert!(
        about.contains("<title>About · capdir catalogue</title>"),
        "{about}"
    );
    assert!(!out.join("_note.html").exists(), "a partial is not a page");
    assert_eq!(read("static/style.css"), "body { color: rebeccapurple; }\n");
    assert!(read("static/logo.svg").starts_with("<svg"));
    assert!(
        out.join("static/search.js").exists(),
        "capdir's other assets stay"
    );
    let manifest = read("build.json");
    assert!(manifest.contains("\"about.html\"") && manifest.contains("\"static/logo.svg\""));

    std::fs::write(
        dir.join("layout.html"),
        builtin("layout.html").replace("capdir</a>", "Acme, again</a>"),
    )
    .unwrap();
    // As `capdir build` rebuilds: in place when it can, else in full.
    let opts = Options::new(repo.catalogue(), &out);
    if build::incremental::build(&opts).expect("rebuild").is_none() {
        build::run(&opts).expect("full rebuild");
    }
    assert!(
        read("k/ECHO.html").contains("Acme, again</a>"),
        "the row page kept the old layout"
    );
    assert!(read("index.html").contains("Acme, again</a>"));
}

/// `capdir check` on a catalogue and its templates; its text output and whether it passed.
fn check(catalogue: &Path) -> (String, bool) {
    let out = Command::new(BIN)
        .args(["check", "--format", "text"])
        .arg(catalogue)
        .env_remove("GITHUB_ACTIONS")
        .output()
        .unwrap();
    (
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
        out.status.success(),
    )
}

/// A catalogue with one row and the templates `files`, checked and then built: the check
/// and the build both refuse, and nothing is published.
fn refused(files: &[(&str, &str)]) -> (String, String) {
    let repo = Repo::new();
    repo.write("ECHO.yaml", &fn_row("ECHO", "text", "Echoes its input."));
    repo.commit("Add ECHO", "2024-01-01T00:00:00Z");
    folder(repo.path(), files);
    let (report, ok) = check(&repo.catalogue());
    assert!(!ok, "check passed: {report}");
    let out = repo.path().join("site");
    let err = build::run(&Options::new(repo.catalogue(), &out)).expect_err("the build refuses");
    assert!(matches!(err, BuildError::Check(_)), "{err}");
    assert!(!out.exists(), "a refused build published a site");
    (report, err.to_string())
}

#[test]
fn a_field_the_page_lacks_is_named_with_file_and_line_even_in_an_if() {
    let row = builtin("row.html").replacen(
        "{% block main %}",
        "{% block main %}{% if c.whta %}<p>{{ c.whta }}</p>{% endif %}",
        1,
    );
    let line = row.lines().position(|l| l.contains("c.whta")).unwrap() + 1;
    let (report, err) = refused(&[("row.html", &row)]);
    let at = format!("templates/row.html:{line}:");
    assert!(
        report.contains(&at) && report.contains("template_unknown_field"),
        "{report}"
    );
    assert!(report.contains("`c.whta` is not a field"), "{report}");
    assert!(err.contains(&at), "{err}");
    // Only in an `if`: tera alone would render it as nothing.
    let quiet = builtin("row.html").replacen(
        "{% block main %}",
        "{% block main %}{% if c.whta %}x{% endif %}",
        1,
    );
    let (report, _) = refused(&[("row.html", &quiet)]);
    assert!(report.contains("template_unknown_field"), "{report}");
}

#[test]
fn a_template_that_does_not_parse_is_named_with_its_line() {
    let index =
        "{% extends \"layout.html\" %}\n{% block main %}\n<p>{% if %}</p>\n{% endblock %}\n";
    let (report, _) = refused(&[("index.html", index)]);
    assert!(
        report.contains("templates/index.html:3:") && report.contains("template_parse"),
        "{report}"
    );
}

#[test]
fn safe_on_a_row_field_is_refused() {
    let row = builtin("row.html").replacen("{{ c.what }}</p>", "{{ c.what | safe }}</p>", 1);
    let (report, _) = refused(&[("row.html", &row)]);
    assert!(report.contains("template_unsafe"), "{report}");
    let section = "{% extends \"layout.html\" %}{% block main %}{% filter safe %}{{ f.title }}{% endfilter %}{% endblock %}";
    let (report, _) = refused(&[("index.html", section)]);
    assert!(report.contains("template_unsafe"), "{report}");
}

/// The build runs in CI beside the signing key: a template must not be able to write a
/// secret into the published site.
#[test]
fn a_template_cannot_read_the_environment() {
    let secret = "s3cret-value-from-the-environment";
    let repo = Repo::new();
    repo.write("ECHO.yaml", &fn_row("ECHO", "text", "Echoes its input."));
    repo.commit("Add ECHO", "2024-01-01T00:00:00Z");
    let index = "{% extends \"layout.html\" %}{% block main %}{{ get_env(name=\"CAPDIR_SIGNING_KEY\") }}{% set k = get_env(name=\"CAPDIR_SIGNING_KEY\", default=\"\") %}{{ k }}{% endblock %}";
    folder(repo.path(), &[("index.html", index)]);
    let out = repo.path().join("site");
    let run = Command::new(BIN)
        .arg("build")
        .arg(repo.catalogue())
        .arg("--out")
        .arg(&out)
        .env("CAPDIR_SIGNING_KEY", secret)
        .output()
        .unwrap();
    let stderr =
        String::from_utf8_lossy(&run.stdout).into_owned() + &String::from_utf8_lossy(&run.stderr);
    assert!(!run.status.success(), "{stderr}");
    assert!(stderr.contains("get_env is refused"), "{stderr}");
    assert!(!stderr.contains(secret), "the secret is in the error");
    assert!(!out.exists(), "a site was published");
    let (report, ok) = check(&repo.catalogue());
    assert!(
        !ok && report.contains("templates/index.html:1:") && report.contains("template_function"),
        "{report}"
    );
}

#[test]
fn the_machine_forms_are_fixed() {
    let contract = "# {{ c.key }}\nsomething else entirely\n";
    let (report, _) = refused(&[("contract.md", contract)]);
    assert!(
        report.contains("templates/contract.md") && report.contains("template_fixed"),
        "{report}"
    );
}

/// A link in the templates folder could point anywhere on the machine that builds.
#[cfg(unix)]
#[test]
fn a_linked_template_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let target = tmp.path().join("elsewhere.html");
    std::fs::write(&target, "{% extends \"layout.html\" %}").unwrap();
    let repo = Repo::new();
    repo.write("ECHO.yaml", &fn_row("ECHO", "text", "Echoes its input."));
    repo.commit("Add ECHO", "2024-01-01T00:00:00Z");
    let dir = folder(repo.path(), &[]);
    std::os::unix::fs::symlink(&target, dir.join("row.html")).unwrap();
    let (report, ok) = check(&repo.catalogue());
    assert!(!ok && report.contains("template_not_a_file"), "{report}");
}

/// capdir's own templates pass their own gate, and a catalogue whose folder holds copies of
/// them (as this repository's does) builds as with none.
#[test]
fn the_bundled_templates_pass_the_gate() {
    let (report, ok) = check(&Path::new(env!("CARGO_MANIFEST_DIR")).join("catalogue"));
    assert!(ok, "{report}");
    assert!(!report.contains("template_"), "{report}");
}

/// `capdir templates` writes capdir's own to start from: as written they override nothing
/// and pass the gate; a second run keeps the owner's edits.
#[test]
fn capdir_templates_writes_a_folder_to_start_from() {
    let repo = Repo::new();
    repo.write("ECHO.yaml", &fn_row("ECHO", "text", "Echoes its input."));
    repo.commit("Add ECHO", "2024-01-01T00:00:00Z");
    let dir = repo.path().join("templates");
    let run = || {
        let out = Command::new(BIN)
            .arg("templates")
            .arg(&dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    run();
    assert_eq!(
        std::fs::read_to_string(dir.join("row.html")).unwrap(),
        builtin("row.html")
    );
    assert!(dir.join("static/style.css").is_file());
    let (report, ok) = check(&repo.catalogue());
    assert!(ok, "{report}");
    std::fs::write(dir.join("row.html"), "{% extends \"layout.html\" %}").unwrap();
    let again = run();
    assert!(again.contains("kept 1"), "{again}");
    assert_eq!(
        std::fs::read_to_string(dir.join("row.html")).unwrap(),
        "{% extends \"layout.html\" %}"
    );
}

mod props {
    use capdir::build::pages::Templates;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    /// Pieces of tera and of the pages' fields, so random templates reach the walk and the
    /// sample render, not only the parser.
    fn piece() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("{% extends \"layout.html\" %}".to_string()),
            Just("{% block main %}".to_string()),
            Just("{% endblock %}".to_string()),
            Just("{% if c.what %}".to_string()),
            Just("{% endif %}".to_string()),
            Just("{% for a in c.arguments %}".to_string()),
            Just("{% endfor %}".to_string()),
            Just("{{ c.key }}".to_string()),
            Just("{{ a.name | upper }}".to_string()),
            Just("{{ c.history[0].date | short }}".to_string()),
            Just("{% set x = c.history %}{{ x.0.kind }}".to_string()),
            Just("{% include \"history.html\" %}".to_string()),
            Just("{{ loop.index }}".to_string()),
            Just("{{ c.nope.deeper[3][\"k\"] }}".to_string()),
            Just("{% filter upper %}".to_string()),
            Just("{% endfilter %}".to_string()),
            Just("{% macro m(x) %}{{ x.y }}{% endmacro %}".to_string()),
            Just("{% include \"_a.html\" %}".to_string()),
            Just("{% extends \"row.html\" %}".to_string()),
            Just("{% import \"_a.html\" as a %}".to_string()),
            Just("{{ a::m() }}".to_string()),
            Just("{% macro m() %}{{ self::m() }}{% endmacro %}".to_string()),
            Just("{{".to_string()),
            Just("%}".to_string()),
            "[ -~]{0,12}",
            "\\PC{0,4}",
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        /// Any row.html (and layout.html, and a partial) is taken or refused with a diagnostic;
        /// none panics or runs out of stack (an extends, include or macro cycle did).
        #[test]
        fn any_template_is_taken_or_refused_with_a_reason(
            row in prop::collection::vec(piece(), 0..24),
            layout in prop::option::of(prop::collection::vec(piece(), 0..8)),
            partial in prop::option::of(prop::collection::vec(piece(), 0..8)),
        ) {
            let mut files = BTreeMap::new();
            files.insert("row.html".to_string(), row.concat().into_bytes());
            if let Some(l) = layout {
                files.insert("layout.html".to_string(), l.concat().into_bytes());
            }
            if let Some(p) = partial {
                files.insert("_a.html".to_string(), p.concat().into_bytes());
            }
            if let Err(refused) = Templates::of_files(files) {
                prop_assert!(!refused.0.is_empty());
            }
        }

        /// Templates that parse, each extending, importing, including and calling the others
        /// at random: every cycle among them is refused before tera follows it.
        #[test]
        fn templates_that_reach_each_other_are_taken_or_refused(
            files in prop::collection::btree_map(name(), linked(), 1..5),
        ) {
            let files = files.into_iter().map(|(n, t)| (n, t.into_bytes())).collect();
            if let Err(refused) = Templates::of_files(files) {
                prop_assert!(!refused.0.is_empty());
            }
        }
    }

    fn name() -> impl Strategy<Value = String> {
        prop::sample::select(vec!["row.html", "layout.html", "_a.html", "_b.html"])
            .prop_map(str::to_string)
    }

    /// A template that parses: perhaps an `extends` and an `import`, then closed tags.
    fn linked() -> impl Strategy<Value = String> {
        let atom = prop_oneof![
            Just("x".to_string()),
            Just("{{ f.title }}".to_string()),
            name().prop_map(|n| format!("{{% include \"{n}\" %}}")),
            Just("{% block main %}b{% endblock %}".to_string()),
            Just("{% macro m() %}{{ self::m() }}{% endmacro %}".to_string()),
            Just("{% macro n() %}n{% endmacro %}".to_string()),
            Just("{{ a::m() }}".to_string()),
            Just("{{ a::n() }}".to_string()),
        ];
        (
            prop::option::of(name()),
            prop::option::of(name()),
            prop::collection::vec(atom, 0..5),
        )
            .prop_map(|(extends, import, body)| {
                let mut t = String::new();
                if let Some(p) = extends {
                    t.push_str(&format!("{{% extends \"{p}\" %}}"));
                }
                if let Some(i) = import {
                    t.push_str(&format!("{{% import \"{i}\" as a %}}"));
                }
                t + &body.concat()
            })
    }
}
