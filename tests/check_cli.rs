//! `capdir check` as CI runs it: the three output formats, the automatic choice of GitHub
//! annotations under Actions, and the exit code. The fixture is the scaffold `capdir new`
//! writes, left unfilled.

use serde_json::Value as Json;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_capdir");
const SCAFFOLD: &str = "tests/fixtures/broken/scaffold_placeholder";

fn check(args: &[&str], github_actions: Option<&str>) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.arg("check")
        .args(args)
        .env_remove("GITHUB_ACTIONS")
        .env_remove("GITHUB_STEP_SUMMARY");
    if let Some(v) = github_actions {
        cmd.env("GITHUB_ACTIONS", v);
    }
    cmd.output().expect("run capdir check")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn json_names_every_problem_with_its_place() {
    let out = check(&[SCAFFOLD, "--format", "json"], None);
    assert_eq!(out.status.code(), Some(1));
    let doc: Json = serde_json::from_str(&stdout(&out)).expect("JSON");
    assert_eq!(doc["ok"], false);
    let diags = doc["diagnostics"].as_array().expect("diagnostics");
    assert_eq!(doc["errors"].as_u64(), Some(diags.len() as u64));
    let placeholder: Vec<(u64, u64)> = diags
        .iter()
        .filter(|d| d["code"] == "scaffold_placeholder")
        .map(|d| (d["line"].as_u64().unwrap(), d["col"].as_u64().unwrap()))
        .collect();
    // Every TODO(capdir) line of the scaffold: category, the five docstring lines, the ask.
    assert_eq!(
        placeholder.iter().map(|p| p.0).collect::<Vec<_>>(),
        [5, 7, 8, 9, 10, 11, 14]
    );
    assert_eq!(placeholder[0], (5, 11));
    let good = check(&["tests/fixtures/good", "--format", "json"], None);
    assert!(good.status.success());
    let doc: Json = serde_json::from_str(&stdout(&good)).expect("JSON");
    assert_eq!(doc["ok"], true);
    assert_eq!(doc["diagnostics"].as_array().map(Vec::len), Some(0));
}

#[test]
fn github_annotations_point_at_file_line_and_column() {
    let out = check(&[SCAFFOLD, "--format", "github"], None);
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    let annotations: Vec<&str> = text.lines().filter(|l| l.starts_with("::error ")).collect();
    assert_eq!(annotations.len(), 8, "{text}");
    assert!(
        annotations[0].starts_with(&format!(
            "::error file={SCAFFOLD}/SCAFFOLD_ROW.yaml,line=5,col=11,title=capdir check [bad_category]::"
        )),
        "{}",
        annotations[0]
    );
    assert!(
        text.lines()
            .last()
            .is_some_and(|l| l.starts_with("checked 1 row"))
    );
}

/// GitHub shows ten annotations of a level per step and drops the rest: past ten, the log
/// says how many more there are, and the step summary holds every finding.
#[test]
fn past_ten_annotations_the_step_summary_holds_every_finding() {
    let dir = tempfile::tempdir().expect("tempdir");
    let scaffold =
        std::fs::read_to_string(format!("{SCAFFOLD}/SCAFFOLD_ROW.yaml")).expect("scaffold");
    for key in ["SCAFFOLD_ONE", "SCAFFOLD_TWO"] {
        std::fs::write(
            dir.path().join(format!("{key}.yaml")),
            scaffold.replace("SCAFFOLD_ROW", key),
        )
        .expect("write");
    }
    let catalogue = dir.path().to_str().unwrap();
    let json: Json =
        serde_json::from_str(&stdout(&check(&[catalogue, "--format", "json"], None))).unwrap();
    let findings = json["diagnostics"].as_array().expect("diagnostics").len();
    let errors = json["errors"].as_u64().unwrap() as usize;
    assert!(
        errors > 10,
        "the fixture makes more than ten errors: {json}"
    );
    let summary = dir.path().join("summary.md");
    let out = Command::new(BIN)
        .args(["check", catalogue])
        .env("GITHUB_ACTIONS", "true")
        .env("GITHUB_STEP_SUMMARY", &summary)
        .output()
        .expect("run capdir check");
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    let unshown = (errors - 10) + (findings - errors).saturating_sub(10);
    assert!(
        text.contains(&format!(
            "::notice title=capdir check::{unshown} more findings than GitHub shows"
        )),
        "{text}"
    );
    let table = std::fs::read_to_string(&summary).expect("the step summary");
    let rows: Vec<&str> = table.lines().filter(|l| l.starts_with("| `")).collect();
    assert_eq!(rows.len(), findings, "{table}");
    assert!(
        rows.iter()
            .any(|r| r.contains("SCAFFOLD_TWO.yaml:5:11` | error | `bad_category`")),
        "{table}"
    );
    // Under ten of each: no notice.
    let few = stdout(&check(&[SCAFFOLD, "--format", "github"], None));
    assert!(!few.contains("::notice"), "{few}");
}

#[test]
fn actions_get_annotations_without_asking_and_people_get_text() {
    let explicit = stdout(&check(&[SCAFFOLD, "--format", "github"], None));
    let on_actions = stdout(&check(&[SCAFFOLD], Some("true")));
    assert_eq!(on_actions, explicit, "GITHUB_ACTIONS=true chooses github");
    let at_a_desk = stdout(&check(&[SCAFFOLD], None));
    assert!(!at_a_desk.contains("::error"), "{at_a_desk}");
    assert!(at_a_desk.contains("SCAFFOLD_ROW.yaml:5:11: error[bad_category]"));
    let not_actions = stdout(&check(&[SCAFFOLD], Some("false")));
    assert_eq!(not_actions, at_a_desk);
    // An explicit format wins over the environment.
    let json_on_actions = stdout(&check(&[SCAFFOLD, "--format", "json"], Some("true")));
    assert!(json_on_actions.trim_start().starts_with('{'));
}
