use super::shell_quote;
use crate::build::contract::Contract;
use crate::build::pages::Templates;
use crate::build::snapshot::{BuildInfo, Counts};
use crate::row::binding::Bindings;

fn http_row(key: &str, auth: &str) -> crate::row::Row {
    let text = format!(
        "key: {key}\ntype: http\ntarget: \"GET https://api.example.com/items/$1\"\nauth: {auth}\ncategory: items\ncontent: |\n  # WHAT: Fetches one item.\n  # ARGS: $1=id\n  # EX: 42\n  # OUTPUT: JSON\n"
    );
    crate::row::parse_row(std::path::Path::new("X.yaml"), text.as_bytes())
        .row
        .expect("row")
}

/// The facts of a build made of nothing but `counts`.
fn unbuilt(counts: &Counts) -> BuildInfo {
    BuildInfo {
        commit: String::new(),
        date: String::new(),
        capdir_version: "0".into(),
        history_partial: false,
        counts: counts.clone(),
    }
}

/// The markdown and HTML of `row`'s contract under `bindings`.
fn rendered(row: &crate::row::Row, bindings: &Bindings) -> (Contract, String, String) {
    let urls = crate::row::urls::Urls::new("");
    let c = Contract::new(row, &[], &urls, "f", bindings);
    let (md, html) = render(&c, row);
    (c, md, html)
}

/// The markdown and HTML of contract `c` of `row`.
fn render(c: &Contract, row: &crate::row::Row) -> (String, String) {
    let counts = Counts::of([row]);
    let info = unbuilt(&counts);
    let common = super::Common {
        site: crate::build::pages::SiteMeta::default_for(&counts),
        counts: &counts,
        build: &info,
        repo_url: None,
        dispatcher: None,
        templates: &Templates::builtin(),
    };
    let frame = crate::build::pages::Frame::contract(&common);
    super::Renderer::new(&frame, common.templates)
        .contract(c)
        .unwrap()
}

/// The compiled markdown lists four arguments and counts the rest, cuts a long
/// description after 160 graphemes (never inside one: `e` and a combining accent are one)
/// and dates a commit by its day.
#[test]
fn the_markdown_lists_four_arguments_and_cuts_long_descriptions() {
    let row = http_row("ITEM", "none");
    let urls = crate::row::urls::Urls::new("");
    let mut c = Contract::new(&row, &[], &urls, "f", &Bindings::default());
    let accented = "e\u{301}".repeat(200);
    c.arguments = (1..=6)
        .map(|i| crate::build::contract::Argument {
            position: i,
            name: format!("a{i}"),
            kind: "string".into(),
            required: i == 1,
            description: if i == 1 {
                accented.clone()
            } else {
                "short".into()
            },
        })
        .collect();
    c.history = vec![crate::build::contract::HistoryLine {
        sha: "0123456789abcdef".into(),
        short: "0123456789".into(),
        date: "2024-05-01T10:00:00+02:00".into(),
        author: "Ann".into(),
        subject: "Add ITEM".into(),
        kind: "added",
        url: None,
    }];
    let (md, _) = render(&c, &row);
    let cut = format!("- `$1` a1: string, required. {}…\n", "e\u{301}".repeat(160));
    for line in [
        cut.as_str(),
        "- `$4` a4: string. short\n",
        "- and 2 more, from `$5` a5 on (the JSON contract describes each)",
        "- 2024-05-01 `0123456789` added: Add ITEM (Ann)\n",
    ] {
        assert!(md.contains(line), "{line:?} not in {md}");
    }
    assert!(!md.contains("`$5` a5: string"), "{md}");
    assert!(md.ends_with("(Ann)\n"), "{md:?}");
}

/// A credential no binding names (a site built by hand or by an older capdir) is shown
/// as refused; one that is bound shows where it may go, the page escaping it all.
#[test]
fn a_contract_says_where_each_credential_may_go() {
    let row = http_row(
        "GH_ITEM",
        "headers:{\"A\":\"$TOKEN_A\",\"B\":\"$TOKEN_B $TOKEN_A\"}",
    );
    let bindings = Bindings::parse(
            b"credentials:\n  TOKEN_A:\n    origins: [\"https://%61pi.Example.com/items/\", \"javascript:<b>x</b>\"]\n    methods: [GET, HEAD]\n",
        )
        .unwrap();
    let (c, md, html) = rendered(&row, &bindings);
    let envs: Vec<(&str, bool)> = c
        .credential_bindings
        .iter()
        .map(|b| (b.env.as_str(), b.bound))
        .collect();
    assert_eq!(envs, [("TOKEN_A", true), ("TOKEN_B", false)], "each once");
    assert!(
            md.contains("  - `TOKEN_A`: `https://api.example.com/items/`, `javascript:<b>x</b>`; GET, HEAD only\n"),
            "{md}"
        );
    assert!(
        md.contains("  - `TOKEN_B`: not bound: calls are refused (`unbound_credential`)"),
        "{md}"
    );
    assert!(
            html.contains("<code class=\"wrap\">https://api.example.com/items/</code>, <code class=\"wrap\">javascript:&lt;b&gt;x&lt;/b&gt;</code>; GET, HEAD only"),
            "{html}"
        );
    assert!(!html.contains("<b>x"), "{html}");
    assert!(
            html.contains("<code>TOKEN_B</code>: <strong>not bound: calls are refused</strong> (<code>unbound_credential</code>)"),
            "{html}"
        );
    let json = serde_json::to_value(&c).unwrap();
    assert_eq!(
        json["credential_bindings"][1]["refused"],
        "unbound_credential"
    );
    assert!(json["credential_bindings"][0].get("refused").is_none());

    // A row without a credential says nothing of bindings.
    let plain = http_row("PLAIN", "\"\"");
    let (c, md, html) = rendered(&plain, &bindings);
    assert!(c.credential_bindings.is_empty());
    assert!(
        serde_json::to_value(&c)
            .unwrap()
            .get("credential_bindings")
            .is_none()
    );
    assert!(!md.contains("Where it may go") && !html.contains("May go to"));
}

/// The credentials page lists the rows refused a credential apart from those bound.
#[test]
fn the_credentials_page_shows_refused_rows() {
    let rows = [
        http_row("BOUND_ROW", "bearer:TOKEN_A"),
        http_row("LOST_ROW", "bearer:TOKEN_Z"),
    ];
    let bindings =
        Bindings::parse(b"credentials:\n  TOKEN_A:\n    origins: [\"https://api.example.com\"]\n")
            .unwrap();
    let counts = Counts::of(rows.iter());
    let info = unbuilt(&counts);
    let common = super::Common {
        site: crate::build::pages::SiteMeta::default_for(&counts),
        counts: &counts,
        build: &info,
        repo_url: None,
        dispatcher: None,
        templates: &Templates::builtin(),
    };
    let dir = tempfile::tempdir().unwrap();
    let refs: Vec<&crate::row::Row> = rows.iter().collect();
    super::write_credentials(dir.path(), &common, &refs, &bindings).unwrap();
    let page = std::fs::read_to_string(dir.path().join(super::CREDENTIALS_PAGE)).unwrap();
    assert!(
        page.contains("<a href=\"k/BOUND_ROW.html\">BOUND_ROW</a>"),
        "{page}"
    );
    assert!(
            page.contains("<li><code>TOKEN_Z</code> (<code>unbound_credential</code>): <a href=\"k/LOST_ROW.html\">LOST_ROW</a></li>"),
            "{page}"
        );
}

#[test]
fn shell_quoting_survives_single_quotes() {
    assert_eq!(shell_quote("it's"), r"'it'\''s'");
}
