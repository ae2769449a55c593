//! `capdir import openapi` on real documents: GitHub's REST description (OpenAPI 3.0, about a
//! thousand operations), Kubernetes' and the Petstore's (Swagger 2.0), ReadMe's examples
//! (3.0 and 3.1), and hand-written edge cases. Every imported catalogue passes the gate and
//! builds; a re-import changes nothing; a newer document changes only what changed; what
//! cannot be mapped is reported; an imported row is invoked against a loopback server that
//! checks the request on the wire; no document makes the importer panic.
//!
//! The npm documents are installed by `.ci/deps` into `tests/openapi/` (or where
//! `CAPDIR_OPENAPI_FIXTURES` says); a test fails, saying so, when they are missing.

use crate::common;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use serde_json::{Value as Json, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

/// Where `.ci/deps` installed the npm documents.
fn fixtures() -> PathBuf {
    match std::env::var_os("CAPDIR_OPENAPI_FIXTURES") {
        Some(p) => PathBuf::from(p),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/openapi"),
    }
}

/// A real document, which must be there: a missing one fails the test.
fn real(rel: &str) -> PathBuf {
    let p = fixtures().join(rel);
    assert!(
        p.is_file(),
        "{} is missing: run `.ci/deps` (it installs tests/openapi/package.json's pinned npm packages \
         and unpacks Kubernetes' description), or point CAPDIR_OPENAPI_FIXTURES at a copy",
        p.display()
    );
    p
}

fn github() -> PathBuf {
    real("node_modules/@octokit/openapi/generated/api.github.com.json")
}

fn oas_example(rel: &str) -> PathBuf {
    real(&format!("node_modules/@readme/oas-examples/{rel}"))
}

fn edges() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/openapi/edges-3.1.yaml")
}

/// Run capdir; (stdout, stderr, exit code).
fn capdir(args: &[&str], env: &[(&str, &str)]) -> (String, String, i32) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_capdir"));
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run capdir");
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        out.status.code().unwrap_or(-1),
    )
}

/// Import `doc` into `out` with `extra` flags; the JSON report.
fn import(doc: &Path, out: &Path, extra: &[&str]) -> Json {
    let (doc, out) = (doc.to_str().expect("utf-8"), out.to_str().expect("utf-8"));
    let mut args = vec!["import", "openapi", doc, "--out", out, "--json"];
    args.extend_from_slice(extra);
    let (stdout, stderr, code) = capdir(&args, &[]);
    assert_eq!(code, 0, "import failed: {stderr}");
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("report is not JSON ({e}): {stdout}"))
}

fn statuses(report: &Json) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for r in report["rows"].as_array().expect("rows") {
        *out.entry(r["status"].as_str().unwrap_or("").to_string())
            .or_default() += 1;
    }
    out
}

fn count(report: &Json, status: &str) -> usize {
    statuses(report).get(status).copied().unwrap_or(0)
}

/// `capdir check DIR` passes, asks gate included.
fn assert_checks(dir: &Path) {
    let (stdout, stderr, code) = capdir(&["check", dir.to_str().expect("utf-8")], &[]);
    assert_eq!(code, 0, "capdir check failed:\n{stdout}{stderr}");
    assert!(stdout.contains(" 0 errors"), "{stdout}");
}

fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.is_file())
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&p).expect("read"),
            )
        })
        .collect()
}

fn row_of(report: &Json, key: &str) -> Json {
    report["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .find(|r| r["key"] == key)
        .cloned()
        .unwrap_or_else(|| panic!("no row {key} in the report"))
}

fn note_kinds(row: &Json) -> Vec<String> {
    row["notes"]
        .as_array()
        .expect("notes")
        .iter()
        .map(|n| n["kind"].as_str().unwrap_or("").to_string())
        .collect()
}

fn skipped(report: &Json, operation: &str) -> Json {
    report["skipped"]
        .as_array()
        .expect("skipped")
        .iter()
        .find(|s| s["operation"] == operation)
        .cloned()
        .unwrap_or_else(|| {
            panic!(
                "{operation} is not among the operations not imported: {}",
                report["skipped"]
            )
        })
}

fn github_flags() -> [&'static str; 6] {
    [
        "--prefix",
        "github",
        "--category",
        "github",
        "--auth",
        "bearer:GITHUB_TOKEN",
    ]
}

#[test]
fn github_imports_passes_the_gate_builds_and_reimports_unchanged() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = tmp.path().join("catalogue");
    let report = import(&github(), &out, &github_flags());
    let rows = report["rows"].as_array().expect("rows").len();
    let operations = report["operations"].as_u64().expect("operations") as usize;
    assert!(operations > 1000, "{operations} operations");
    assert_eq!(
        rows + report["skipped"].as_array().unwrap().len(),
        operations
    );
    assert!(rows > 1000, "{rows} rows");
    assert_eq!(count(&report, "new"), rows);
    assert_eq!(files(&out).len(), rows + 1, "the rows and bindings.yaml");
    assert_checks(&out);

    // The one credential the rows use is bound to the origins they call (the document's
    // server, and the one its release-asset upload names), for them alone.
    let bindings = bindings_of(&out);
    let keys: Vec<String> = report["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["key"].as_str().unwrap().to_string())
        .collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(
        bindings,
        json!({"credentials": {"GITHUB_TOKEN": {
            "origins": ["https://api.github.com", "https://uploads.github.com"],
            "keys": sorted,
        }}})
    );
    let text = std::fs::read_to_string(out.join("bindings.yaml")).expect("bindings");
    assert!(text.starts_with("# Where each credential"), "{text}");
    assert!(
        text.contains(
            "  GITHUB_TOKEN:\n    origins: [\"https://api.github.com\", \"https://uploads.github.com\"]\n    keys:\n      - GITHUB_"
        ),
        "{text}"
    );
    assert_eq!(
        report["bindings"],
        json!([{"env": "GITHUB_TOKEN", "origins": ["https://api.github.com", "https://uploads.github.com"],
                "rows": rows, "status": "new",
                "added_origins": ["https://api.github.com", "https://uploads.github.com"],
                "added_keys": rows}])
    );

    let upload =
        std::fs::read_to_string(out.join("GITHUB_REPOS_UPLOAD_RELEASE_ASSET.yaml")).expect("row");
    assert!(
        upload.contains("target: \"POST https://uploads.github.com/repos/"),
        "{upload}"
    );

    let created = std::fs::read_to_string(out.join("GITHUB_ISSUES_CREATE.yaml")).expect("row");
    assert!(
        created.contains("target: \"POST https://api.github.com/repos/$1/$2/issues\""),
        "{created}"
    );
    assert!(created.contains("auth: bearer:GITHUB_TOKEN\n"), "{created}");
    assert!(created.contains("sensitive: true\n"), "{created}");
    // Each body field is an argument: the required one by position, the rest by name.
    assert!(
        created.contains(
            "  # ARGS: $1=owner, $2=repo, $3=title; optional, by name: body, assignee, milestone, labels,"
        ),
        "{created}"
    );
    assert!(
        created.contains("\n  {json:title,body,assignee,milestone,labels,assignees,"),
        "{created}"
    );
    // Optional query parameters are placed, absent ones left out when sent.
    let listed =
        std::fs::read_to_string(out.join("GITHUB_ISSUES_LIST_FOR_REPO.yaml")).expect("row");
    assert!(
        listed.contains(
            "target: \"GET https://api.github.com/repos/$1/$2/issues{?milestone,state,assignee,"
        ),
        "{listed}"
    );
    assert!(listed.contains(",per_page,page}\""), "{listed}");
    assert_eq!(report["reachable"].as_u64(), Some(rows as u64 - 1));

    let site = tmp.path().join("site");
    let built = capdir::build::run(&capdir::build::Options::new(&out, &site))
        .expect("the imported catalogue builds");
    assert_eq!(built.rows, rows);
    // The contract budget: each contract stays a few KB.
    for entry in std::fs::read_dir(site.join("k")).expect("k/") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "md") {
            let size = std::fs::metadata(&path).expect("size").len();
            assert!(size < 4096, "{} is {size} bytes", path.display());
        }
    }

    let before = files(&out);
    let again = import(&github(), &out, &github_flags());
    assert_eq!(count(&again, "unchanged"), rows, "{:?}", statuses(&again));
    assert_eq!(count(&again, "changed") + count(&again, "new"), 0);
    assert_eq!(
        files(&out)["bindings.yaml"],
        before["bindings.yaml"],
        "a re-import leaves bindings.yaml byte-identical"
    );
    assert_eq!(files(&out), before, "a re-import rewrites nothing");
    assert_eq!(again["bindings"][0]["status"], "unchanged");
}

/// The catalogue's bindings.yaml as JSON.
fn bindings_of(dir: &Path) -> Json {
    let text = std::fs::read_to_string(dir.join("bindings.yaml")).expect("bindings.yaml");
    serde_yaml::from_str(&text).expect("bindings.yaml is YAML")
}

#[test]
fn bindings_are_added_to_never_dropped() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = tmp.path().join("catalogue");
    std::fs::create_dir(&out).expect("mkdir");
    // The owner's file: a binding of another credential, written as the import writes them,
    // and one of a credential the import uses, for a hand-written row and another origin.
    let other = "  OTHER_TOKEN:\n    origins: [\"https://other.example/api/\"]\n    methods: [GET]\n    categories: [tools]\n";
    let owners = format!(
        "# The owner's bindings.\n# Reviewed by the owner.\ncredentials:\n{other}  PETSTORE_API_KEY:\n    origins: [\"https://petstore.swagger.io/v2/\"]\n    keys: [HAND_ROW]\n"
    );
    std::fs::write(out.join("bindings.yaml"), &owners).expect("write");
    let hand = "key: HAND_ROW\ntype: http\ntarget: \"GET https://petstore.swagger.io/v2/store/inventory\"\nauth: \"headers:{\\\"api_key\\\":\\\"$PETSTORE_API_KEY\\\"}\"\ncontent: |\n  # WHAT: The store's inventory, written by hand.\n";
    std::fs::write(out.join("HAND_ROW.yaml"), hand).expect("write");
    assert_checks(&out);

    let doc = oas_example("2.0/json/petstore.json");
    let report = import(&doc, &out, &["--prefix", "petstore"]);
    assert_checks(&out);
    let text = std::fs::read_to_string(out.join("bindings.yaml")).expect("bindings");
    assert!(
        text.starts_with("# The owner's bindings.\n# Reviewed by the owner.\ncredentials:\n"),
        "the leading comment is kept: {text}"
    );
    assert!(
        text.contains(other),
        "the other credential's binding is there as it was: {text}"
    );
    let before: Json = serde_yaml::from_str(&owners).expect("yaml");
    let after = bindings_of(&out);
    assert_eq!(
        after["credentials"]["OTHER_TOKEN"],
        before["credentials"]["OTHER_TOKEN"]
    );
    let key = &after["credentials"]["PETSTORE_API_KEY"];
    assert_eq!(
        key["origins"],
        json!([
            "https://petstore.swagger.io/v2/",
            "http://petstore.swagger.io/v2/"
        ]),
        "the rows call http://: that origin is added, the owner's kept"
    );
    let keys: Vec<&str> = key["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k.as_str().unwrap())
        .collect();
    assert!(keys.contains(&"HAND_ROW"), "{keys:?}");
    assert!(keys.contains(&"PETSTORE_GET_PET_BY_ID"), "{keys:?}");
    assert!(keys.is_sorted(), "{keys:?}");
    assert_eq!(
        after["credentials"]["PETSTORE_TOKEN"]["origins"],
        json!(["http://petstore.swagger.io/v2/"])
    );
    let status: BTreeMap<&str, &str> = report["bindings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| (b["env"].as_str().unwrap(), b["status"].as_str().unwrap()))
        .collect();
    assert_eq!(
        status,
        BTreeMap::from([("PETSTORE_API_KEY", "extended"), ("PETSTORE_TOKEN", "new")])
    );

    // Nothing new: the file is not touched.
    let written = std::fs::read(out.join("bindings.yaml")).expect("read");
    let (stdout, stderr, code) = capdir(
        &[
            "import",
            "openapi",
            doc.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--prefix",
            "petstore",
        ],
        &[],
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        std::fs::read(out.join("bindings.yaml")).expect("read"),
        written
    );
    assert!(
        stdout
            .contains("PETSTORE_TOKEN is already bound to http://petstore.swagger.io/v2/ for its "),
        "{stdout}"
    );

    // An owner's file that does not read stops the import before anything is written.
    let fresh = tmp.path().join("untouched");
    std::fs::create_dir(&fresh).expect("mkdir");
    std::fs::write(fresh.join("bindings.yaml"), "credentials: [\n").expect("write");
    let (_, stderr, code) = capdir(
        &[
            "import",
            "openapi",
            doc.to_str().unwrap(),
            "--out",
            fresh.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("bindings.yaml:"), "{stderr}");
    assert!(stderr.contains("bindings do not read"), "{stderr}");
    assert_eq!(files(&fresh).len(), 1, "nothing was written");
}

#[test]
fn a_newer_github_document_changes_only_what_changed() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = tmp.path().join("catalogue");
    let first = import(&github(), &out, &github_flags());
    let rows = first["rows"].as_array().expect("rows").len();
    let before = files(&out);

    let mut doc: Json =
        serde_json::from_slice(&std::fs::read(github()).expect("read")).expect("json");
    doc["paths"]["/repos/{owner}/{repo}/issues"]["post"]["summary"] = json!("Open an issue");
    let lock = doc["paths"]["/repos/{owner}/{repo}/issues/{issue_number}/lock"]
        .as_object_mut()
        .expect("lock path");
    assert!(
        lock.remove("delete").is_some(),
        "issues/unlock is in the document"
    );
    let newer = tmp.path().join("newer.json");
    std::fs::write(&newer, serde_json::to_vec(&doc).expect("json")).expect("write");

    let second = import(&newer, &out, &github_flags());
    // Besides the edited operation, only rows whose ask moved may change: two near-identical
    // operations (an organisation variable of Actions and of Agents) share an ask, and the
    // gate keeps it on whichever the search ranks first; removing a row re-ranks them.
    let after = files(&out);
    let only_asks = |k: &String| {
        let strip = |b: &[u8]| {
            String::from_utf8_lossy(b)
                .lines()
                .skip(2)
                .take_while(|l| *l != "asks:")
                .collect::<Vec<_>>()
                .join("\n")
        };
        before.get(k).map(|b| strip(b)) == after.get(k).map(|a| strip(a))
    };
    let asks_moved = before
        .keys()
        .filter(|k| *k != "GITHUB_ISSUES_CREATE.yaml" && before.get(*k) != after.get(*k))
        .inspect(|k| assert!(only_asks(k), "{k} changed beyond its asks"))
        .count();
    assert!(asks_moved <= 2, "{asks_moved} rows' asks moved");
    assert_eq!(
        (
            count(&second, "changed"),
            count(&second, "unchanged"),
            count(&second, "new")
        ),
        (1 + asks_moved, rows - 2 - asks_moved, 0),
        "{:?}",
        statuses(&second)
    );
    assert_eq!(row_of(&second, "GITHUB_ISSUES_CREATE")["status"], "changed");
    let gone = second["gone"].as_array().expect("gone");
    assert_eq!(gone.len(), 1, "{gone:?}");
    assert_eq!(
        (gone[0]["key"].as_str(), gone[0]["action"].as_str()),
        (Some("GITHUB_ISSUES_UNLOCK"), Some("kept"))
    );
    assert_ne!(
        before.get("GITHUB_ISSUES_CREATE.yaml"),
        after.get("GITHUB_ISSUES_CREATE.yaml")
    );
    assert!(
        String::from_utf8_lossy(&after["GITHUB_ISSUES_CREATE.yaml"])
            .contains("# WHAT: Open an issue\n"),
    );
    // The gone operation's row stays until asked: with --prune it is deleted.
    let pruned = {
        let mut flags = github_flags().to_vec();
        flags.push("--prune");
        import(&newer, &out, &flags)
    };
    assert_eq!(pruned["gone"][0]["action"], "deleted");
    assert!(!out.join("GITHUB_ISSUES_UNLOCK.yaml").exists());
    assert_eq!(
        files(&out).len(),
        rows - 1 + 1,
        "the rows left and bindings.yaml"
    );
    assert_checks(&out);
}

#[test]
fn importing_beside_hand_written_rows_names_the_asks_it_outranks() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = tmp.path().join("catalogue");
    std::fs::create_dir(&out).expect("mkdir");
    let bundled = Path::new(env!("CARGO_MANIFEST_DIR")).join("catalogue");
    for f in std::fs::read_dir(&bundled).expect("catalogue") {
        let f = f.expect("entry").path();
        std::fs::copy(&f, out.join(f.file_name().unwrap())).expect("copy");
    }
    // A problem that was there before the import is not the import's.
    let broken = "key: ALREADY_BROKEN\ntype: fn\ntarget: echo\ncategory: Not A Category\ncontent: |\n  # WHAT: Echo.\n  [\"$1\"]\n";
    std::fs::write(out.join("ALREADY_BROKEN.yaml"), broken).expect("write");
    let doc = github();
    let mut args = vec![
        "import",
        "openapi",
        doc.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend(github_flags());
    let (stdout, stderr, code) = capdir(&args, &[]);
    assert_eq!(
        code, 1,
        "the import ran, and the catalogue now fails the gate: {stdout}"
    );
    assert!(
        stdout.contains("fails the gate where it passed before"),
        "{stdout}"
    );
    let blamed: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("catalogue: "))
        .collect();
    assert!(!blamed.is_empty());
    assert!(
        blamed.iter().all(|l| l.contains(": ask_not_found: ")),
        "{blamed:?}"
    );
    // Only hand-written rows are blamed (which asks lose depends on the ranking).
    for line in &blamed {
        let file = line
            .split(".yaml:")
            .next()
            .and_then(|p| p.rsplit('/').next())
            .expect("a file");
        assert!(
            bundled.join(format!("{file}.yaml")).exists(),
            "{file} is not a bundled row: {line}"
        );
    }
    assert!(!stderr.contains("ALREADY_BROKEN"), "{stderr}");
    assert!(
        out.join("GITHUB_ISSUES_CREATE.yaml").exists(),
        "the rows were written"
    );
    // The bundled bindings: every other credential's as it was, GITHUB_TOKEN's hand-written
    // row still bound, the imported rows added.
    let bundled_bindings: Json = serde_yaml::from_str(
        &std::fs::read_to_string(bundled.join("bindings.yaml")).expect("bundled bindings"),
    )
    .expect("yaml");
    let after = bindings_of(&out);
    for (env, binding) in bundled_bindings["credentials"]
        .as_object()
        .expect("credentials")
    {
        if env != "GITHUB_TOKEN" {
            assert_eq!(&after["credentials"][env], binding, "{env}");
        }
    }
    let github = &after["credentials"]["GITHUB_TOKEN"];
    assert_eq!(
        github["origins"],
        json!(["https://api.github.com", "https://uploads.github.com"])
    );
    for key in ["GITHUB_CREATE_ISSUE", "GITHUB_ISSUES_CREATE"] {
        assert!(
            github["keys"].as_array().unwrap().contains(&json!(key)),
            "{key}"
        );
    }
}

#[test]
fn swagger2_petstore_round_trip_json_and_yaml_alike() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    let report = import(
        &oas_example("2.0/json/petstore.json"),
        &a,
        &["--prefix", "petstore"],
    );
    import(
        &oas_example("2.0/yaml/petstore.yaml"),
        &b,
        &["--prefix", "petstore"],
    );
    assert_eq!(
        files(&a),
        files(&b),
        "the JSON and the YAML document import alike"
    );
    assert_eq!(report["version"], "Swagger 2.0");
    assert_eq!(report["operations"], 20);
    assert_checks(&a);

    let get = std::fs::read_to_string(a.join("PETSTORE_GET_PET_BY_ID.yaml")).expect("row");
    assert!(
        get.contains("target: \"GET http://petstore.swagger.io/v2/pet/$1\"\n"),
        "{get}"
    );
    assert!(
        get.contains("auth: \"headers:{\\\"api_key\\\":\\\"$PETSTORE_API_KEY\\\"}\"\n"),
        "{get}"
    );
    let add = std::fs::read_to_string(a.join("PETSTORE_ADD_PET.yaml")).expect("row");
    assert!(
        add.contains("auth: bearer:PETSTORE_TOKEN\n"),
        "OAuth 2 maps to a bearer token: {add}"
    );
    assert!(add.contains("\n  required: [name, photoUrls]\n"), "{add}");
    assert!(
        add.contains("\n  {json:name,photoUrls,id,category,tags,status}\n"),
        "{add}"
    );
    // Form fields are sent as a form, multipart ones as multipart; a file is said, not sent.
    let form = std::fs::read_to_string(a.join("PETSTORE_UPDATE_PET_WITH_FORM.yaml")).expect("row");
    assert!(form.contains("\n  {form:name,status}\n"), "{form}");
    assert!(note_kinds(&row_of(&report, "PETSTORE_UPDATE_PET_WITH_FORM")).is_empty());
    let upload = std::fs::read_to_string(a.join("PETSTORE_UPLOAD_FILE.yaml")).expect("row");
    assert!(
        upload.contains("\n  {multipart:additionalMetadata}\n"),
        "{upload}"
    );
    let kinds = note_kinds(&row_of(&report, "PETSTORE_UPLOAD_FILE"));
    assert_eq!(kinds, ["file_field"]);
    // The `api_key` header parameter carries the credential: it is the row's auth.
    let delete = std::fs::read_to_string(a.join("PETSTORE_DELETE_PET.yaml")).expect("row");
    assert!(
        delete.contains("auth: \"headers:{\\\"api_key\\\":\\\"$PETSTORE_API_KEY\\\"}\"\n"),
        "{delete}"
    );
    assert_eq!(report["reachable"], 19);
    let schemes: BTreeMap<String, String> = report["schemes"]
        .as_array()
        .expect("schemes")
        .iter()
        .map(|p| (p[0].as_str().unwrap().into(), p[1].as_str().unwrap().into()))
        .collect();
    assert!(
        schemes["petstore_auth"].starts_with("bearer:PETSTORE_TOKEN (OAuth 2"),
        "{schemes:?}"
    );

    let again = import(
        &oas_example("2.0/json/petstore.json"),
        &a,
        &["--prefix", "petstore"],
    );
    assert_eq!(count(&again, "unchanged"), 20);
    assert_eq!(files(&a), files(&b));
}

#[test]
fn swagger2_kubernetes_imports_and_passes_the_gate() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = tmp.path().join("k8s");
    let doc = real("kubernetes/swagger-1.13.json");
    // Kubernetes' description names no host: without --server the import says so.
    let (_, stderr, code) = capdir(
        &[
            "import",
            "openapi",
            doc.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("pass --server"), "{stderr}");
    let report = import(
        &doc,
        &out,
        &[
            "--prefix",
            "k8s",
            "--server",
            "https://k8s.example.com:6443",
        ],
    );
    let rows = report["rows"].as_array().expect("rows").len();
    assert!(rows > 900, "{rows} rows of {}", report["operations"]);
    assert_checks(&out);
    let list =
        std::fs::read_to_string(out.join("K8S_LIST_CORE_V1_NAMESPACED_POD.yaml")).expect("row");
    assert!(
        list.contains("target: \"GET https://k8s.example.com:6443/api/v1/namespaces/$1/pods{?includeUninitialized,pretty,continue,fieldSelector,labelSelector,limit,resourceVersion,timeoutSeconds,watch}\"\n"),
        "{list}"
    );
    assert!(
        list.contains("auth: \"headers:{\\\"authorization\\\":\\\"$K8S_AUTHORIZATION\\\"}\"\n"),
        "{list}"
    );
}

#[test]
fn openapi_3_and_3_1_examples_import_and_report_what_they_cannot_map() {
    let tmp = tempfile::tempdir().expect("tempdir");
    // Each document with the rows it makes: a document that stopped making rows fails here
    // rather than passing with nothing checked. The webhooks example has only webhooks,
    // which are not calls a row can make.
    for (rel, rows) in [
        ("3.0/json/petstore.json", 20),
        ("3.0/json/callbacks.json", 1),
        ("3.0/json/parameters-cookies.json", 1),
        ("3.0/json/security-multiple.json", 4),
        ("3.0/json/form-data.json", 1),
        ("3.0/json/file-uploads.json", 3),
        ("3.0/json/schema-circular.json", 3),
        ("3.0/json/parameters-style.json", 18),
        ("3.1/json/petstore.json", 20),
        ("3.1/json/webhooks.json", 0),
        ("3.1/json/train-travel.json", 7),
        ("3.1/yaml/schema-types.yaml", 23),
    ] {
        let out = tmp.path().join(rel.replace('/', "_"));
        let report = import(
            &oas_example(rel),
            &out,
            &["--server", "https://api.example.com"],
        );
        assert_eq!(report["rows"].as_array().map(Vec::len), Some(rows), "{rel}");
        if rows > 0 {
            assert_eq!(
                files(&out)
                    .keys()
                    .filter(|n| n.ends_with(".yaml") && *n != "bindings.yaml")
                    .count(),
                rows,
                "{rel}: a file for each row"
            );
            assert_checks(&out);
        } else {
            assert!(!out.exists(), "{rel}: nothing to write, nothing written");
        }
        let notes: Vec<String> = report["rows"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(note_kinds)
            .chain(
                report["skipped"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .flat_map(note_kinds),
            )
            .chain(
                report["document_notes"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|n| n["kind"].as_str().unwrap().to_string()),
            )
            .collect();
        let expect: &[&str] = match rel {
            "3.0/json/callbacks.json" => &["callbacks"],
            "3.0/json/parameters-cookies.json" => &["cookie_parameter"],
            "3.0/json/security-multiple.json" => &["security"],
            "3.0/json/file-uploads.json" => &["file_field"],
            "3.0/json/schema-circular.json" => &["schema"],
            "3.1/json/webhooks.json" => &["webhooks"],
            _ => &[],
        };
        for kind in expect {
            assert!(
                notes.iter().any(|n| n == kind),
                "{rel}: expected a `{kind}` note among {notes:?}"
            );
        }
    }
}

#[test]
fn edge_cases_are_mapped_cut_or_reported() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = tmp.path().join("edges");
    let report = import(&edges(), &out, &[]);
    assert_eq!(report["version"], "OpenAPI 3.1");
    assert_checks(&out);

    let get = std::fs::read_to_string(out.join("GET_ITEM.yaml")).expect("row");
    assert!(
        get.contains(
            "target: \"GET https://eu.api.example.com/v1/items/$1{?fields*,per_page,page}\"\n"
        ),
        "{get}"
    );
    assert!(get.contains("\n  {header:X-Trace}\n"), "{get}");
    assert!(get.contains("auth: bearer:EDGE_CASES_TOKEN\n"), "{get}");
    assert!(
        get.contains("examples:\n  - \"42|[\\\"name\\\",\\\"size\\\"]\"\n"),
        "{get}"
    );
    assert!(
        get.contains(
            "# WHEN_TO_USE: Reads one item. See the guide. Fields not asked for are left out.\n"
        ),
        "{get}"
    );
    // Every parameter is placed, the merge key's `page` too: nothing to report.
    assert!(note_kinds(&row_of(&report, "GET_ITEM")).is_empty());

    let put = std::fs::read_to_string(out.join("PUT_ITEM.yaml")).expect("row");
    // The first alternative (digest) cannot be mapped; the second (an API key header) is.
    assert!(
        put.contains("auth: \"headers:{\\\"X-Key\\\":\\\"$EDGE_CASES_X_KEY\\\"}\"\n"),
        "{put}"
    );
    assert!(
        put.contains("  - \"42|first note|[\\\"x\\\"]\"\n"),
        "each body field an argument, from the document's example: {put}"
    );
    assert!(put.contains("\n  {json:text,tags}\n"), "{put}");
    assert!(note_kinds(&row_of(&report, "PUT_ITEM")).is_empty());

    let tree = note_kinds(&row_of(&report, "CREATE_TREE"));
    for k in ["callbacks", "schema", "security"] {
        assert!(tree.contains(&k.to_string()), "{tree:?}");
    }
    assert_eq!(note_kinds(&row_of(&report, "READ_EXTERNAL")), ["schema"]);
    assert_eq!(note_kinds(&row_of(&report, "ADD_NOTE")), ["security"]);
    let note = std::fs::read_to_string(out.join("ADD_NOTE.yaml")).expect("row");
    assert!(note.contains("# ARGS: $1=body (text)\n"), "{note}");
    assert!(note.contains("\n  {body:body}\n"), "{note}");
    // A deepObject query parameter goes by the bracket convention; a file field is said.
    let search = std::fs::read_to_string(out.join("SEARCH.yaml")).expect("row");
    assert!(search.contains("/search{?filter[]}\"\n"), "{search}");
    assert_eq!(note_kinds(&row_of(&report, "UPLOAD")), ["file_field"]);
    assert_eq!(report["reachable"], 6);

    for (operation, kind) in [
        ("DELETE /items/{item_id}", "cookie_parameter"),
        ("TRACE /items/{item_id}", "method"),
        ("GET /broken", "malformed"),
    ] {
        let s = skipped(&report, operation);
        assert_eq!(s["notes"][0]["kind"], kind, "{operation}: {s}");
    }
    assert!(
        skipped(&report, "GET /broken")["notes"][0]["message"]
            .as_str()
            .unwrap()
            .starts_with("/paths/~1broken/get/parameters: must be a list"),
    );
    assert_eq!(report["document_notes"][0]["kind"], "webhooks");

    // The same things, as a person reads them on standard error.
    let (stdout, stderr, code) = capdir(
        &[
            "import",
            "openapi",
            edges().to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--dry-run",
        ],
        &[],
    );
    assert_eq!(code, 0);
    assert!(
        stdout.starts_with("would import Edge Cases (OpenAPI 3.1)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("rows: 0 new, 0 changed, 7 unchanged"),
        "{stdout}"
    );
    assert!(stderr.contains("UPLOAD (POST /uploads): file_field: form field `file` is a file, which rows do not send"), "{stderr}");
    assert!(
        stdout.contains("every parameter reachable: 6 of 10 selected operations (60.0%)"),
        "{stdout}"
    );
}

/// Found by the import fuzz: an OpenAPI 3 document with a `formData` parameter (a Swagger 2.0
/// word) and a text body drafted `{body:id,body}`, which the gate refuses, and lost the
/// operation. The parameter is now said and left out; the body is sent.
#[test]
fn form_data_parameter_outside_swagger2_does_not_spoil_the_body() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let doc = tmp.path().join("doc.json");
    let text = json!({"openapi": "3.0.3", "info": {"title": "F", "version": "1"},
        "servers": [{"url": "https://api.example.com"}],
        "paths": {"/a": {"post": {"operationId": "postA", "summary": "post an a",
            "parameters": [{"name": "id", "in": "formData", "schema": {"type": "string"}}],
            "requestBody": {"content": {"text/plain": {"schema": {"type": "string"}}}},
            "responses": {"200": {"description": "ok"}}}}}});
    std::fs::write(&doc, text.to_string()).expect("write");
    let out = tmp.path().join("out");
    let report = import(&doc, &out, &[]);
    assert_eq!(note_kinds(&row_of(&report, "POST_A")), ["body_field"]);
    let row = std::fs::read_to_string(out.join("POST_A.yaml")).expect("row");
    assert!(row.contains("\n  {body:body}\n"), "{row}");
}

/// Rows imported before templates took named arguments (written by the importer of `main`
/// then, kept in `tests/fixtures/openapi/before_named_args/`) are the importer's own: a
/// re-import updates them once, to their complete form, and then changes nothing.
#[test]
fn rows_imported_before_named_arguments_update_once() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = tmp.path().join("catalogue");
    std::fs::create_dir(&out).expect("mkdir");
    let old =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/openapi/before_named_args");
    for f in std::fs::read_dir(&old).expect("the old rows") {
        let f = f.expect("entry").path();
        std::fs::copy(&f, out.join(f.file_name().unwrap())).expect("copy");
    }
    let doc = oas_example("2.0/json/petstore.json");
    let first = import(&doc, &out, &["--prefix", "petstore"]);
    for key in ["PETSTORE_FIND_PETS_BY_STATUS", "PETSTORE_DELETE_PET"] {
        assert_eq!(row_of(&first, key)["status"], "changed", "{key}");
    }
    assert_eq!(count(&first, "kept_edited"), 0);
    let found =
        std::fs::read_to_string(out.join("PETSTORE_FIND_PETS_BY_STATUS.yaml")).expect("row");
    assert!(found.contains("/pet/findByStatus{?status*}\"\n"), "{found}");
    let again = import(&doc, &out, &["--prefix", "petstore"]);
    assert_eq!(count(&again, "unchanged"), 20, "{:?}", statuses(&again));
}

#[test]
fn hand_edits_and_other_rows_are_never_overwritten() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = tmp.path().join("catalogue");
    std::fs::create_dir(&out).expect("mkdir");
    // A hand-written row already holds a key the import would choose.
    let hand = "key: PETSTORE_GET_INVENTORY\ntype: fn\ntarget: echo\ncontent: |\n  # WHAT: Echo, written by hand.\n  [\"$1\"]\n";
    std::fs::write(out.join("PETSTORE_GET_INVENTORY.yaml"), hand).expect("write");
    let doc = oas_example("2.0/json/petstore.json");
    let report = import(&doc, &out, &["--prefix", "petstore"]);
    assert_eq!(
        std::fs::read_to_string(out.join("PETSTORE_GET_INVENTORY.yaml")).unwrap(),
        hand
    );
    let inventory = report["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["operation"] == "GET /store/inventory")
        .expect("inventory row");
    let key = inventory["key"].as_str().unwrap();
    assert!(
        key.starts_with("PETSTORE_GET_INVENTORY_")
            && key.len() == "PETSTORE_GET_INVENTORY_".len() + 6,
        "{key}"
    );
    assert_eq!(note_kinds(inventory), ["key"]);
    assert_checks(&out);

    // An imported row edited by hand is kept as it is; --force overwrites it.
    let path = out.join("PETSTORE_GET_PET_BY_ID.yaml");
    let edited = std::fs::read_to_string(&path)
        .unwrap()
        .replace("# WHAT: Find pet by ID", "# WHAT: Find one pet by its ID");
    std::fs::write(&path, &edited).unwrap();
    let again = import(&doc, &out, &["--prefix", "petstore"]);
    assert_eq!(
        row_of(&again, "PETSTORE_GET_PET_BY_ID")["status"],
        "kept_edited"
    );
    assert_eq!(count(&again, "unchanged"), 19);
    assert_eq!(std::fs::read_to_string(&path).unwrap(), edited);
    let forced = import(&doc, &out, &["--prefix", "petstore", "--force"]);
    assert_eq!(
        row_of(&forced, "PETSTORE_GET_PET_BY_ID")["status"],
        "changed"
    );
    assert!(
        std::fs::read_to_string(&path)
            .unwrap()
            .contains("# WHAT: Find pet by ID\n")
    );
}

#[test]
fn malformed_documents_get_clear_errors() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = tmp.path().join("out");
    let write = |name: &str, text: &str| {
        let p = tmp.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_string()
    };
    let cases = [
        (
            write("bad.json", "{\"openapi\": \"3.0.0\",\n \"paths\": [}"),
            ":2:12: not valid JSON",
        ),
        (
            write("bad.yaml", "openapi: 3.0.0\npaths: {a: [}\n"),
            ": not valid YAML or JSON",
        ),
        (
            write("none.yaml", "info: {title: x}\npaths: {}\n"),
            ": not an OpenAPI document",
        ),
        (
            write("v4.yaml", "openapi: 4.0.0\npaths: {}\n"),
            " at /openapi: OpenAPI version `4.0.0`",
        ),
        (
            write("paths.yaml", "openapi: 3.0.0\npaths: [1]\n"),
            " at /paths: `paths` must be a mapping",
        ),
        (
            write(
                "noserver.yaml",
                "openapi: 3.0.0\npaths: {/a: {get: {responses: {}}}}\n",
            ),
            " at /servers: the server URL `/` is relative",
        ),
        (
            tmp.path()
                .join("missing.yaml")
                .to_str()
                .unwrap()
                .to_string(),
            "cannot read the document",
        ),
    ];
    for (doc, expect) in &cases {
        let (_, stderr, code) = capdir(
            &["import", "openapi", doc, "--out", out.to_str().unwrap()],
            &[],
        );
        assert_eq!(code, 2, "{doc}: {stderr}");
        assert!(
            stderr.contains(doc.as_str()) && stderr.contains(expect),
            "{doc}: expected `{expect}` in {stderr}"
        );
    }
    assert!(!out.exists(), "nothing was written");
}

/// What the loopback API saw of each request.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<Json>>>);

async fn record(
    State(seen): State<Seen>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> (StatusCode, String) {
    let header = |n: &str| {
        headers
            .get(n)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string()
    };
    seen.0.lock().expect("lock").push(json!({
        "method": method.as_str(),
        "path": uri.path(),
        "query": uri.query().unwrap_or(""),
        "authorization": header("authorization"),
        "api_key": header("api_key"),
        "content_type": header("content-type"),
        "body": String::from_utf8_lossy(&body),
    }));
    (StatusCode::CREATED, r#"{"number": 1347}"#.to_string())
}

fn invoke(
    dir: &Path,
    data: &Path,
    key: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> (String, i32) {
    let mut all = vec!["invoke", key];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--catalogue", dir.to_str().unwrap()]);
    let mut env = env.to_vec();
    env.push(("CAPDIR_DATA", data.to_str().unwrap()));
    // The loopback API: rows reach it only when the operator allows it.
    env.push(("CAPDIR_ALLOW_EGRESS", "loopback"));
    let (stdout, stderr, code) = capdir(&all, &env);
    (format!("{stdout}{stderr}"), code)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_imported_github_row_is_invoked_on_the_wire() {
    let seen = Seen::default();
    let addr = common::serve(Router::new().fallback(record).with_state(seen.clone())).await;
    let tmp = tempfile::tempdir().expect("tempdir");
    let (out, data) = (tmp.path().join("catalogue"), tmp.path().join("data"));
    let server = format!("http://{addr}");
    let mut flags = github_flags().to_vec();
    flags.extend([
        "--server",
        &server,
        "--only",
        "/repos/*/*/issues",
        "--only",
        "/search/labels",
    ]);
    let (out2, flags2) = (
        out.clone(),
        flags.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
    );
    let report = tokio::task::spawn_blocking(move || {
        let flags: Vec<&str> = flags2.iter().map(String::as_str).collect();
        import(&github(), &out2, &flags)
    })
    .await
    .expect("import");
    assert_eq!(report["selected"], 3, "{}", report["rows"]);

    let token = [("GITHUB_TOKEN", "tok-wire-7f3")];
    let (o, d) = (out.clone(), data.clone());
    let results = tokio::task::spawn_blocking(move || {
        vec![
            // Positional: owner, repository (a space to encode), the required title.
            invoke(&o, &d, "GITHUB_ISSUES_CREATE", &["octo-org|hello world|Found a bug"], &token),
            // By name, as MCP and agents send arguments.
            invoke(&o, &d, "GITHUB_SEARCH_LABELS", &["--args", r#"{"repository_id": 64778136, "q": "bug & defect"}"#], &token),
            // A body without the required title never leaves.
            invoke(&o, &d, "GITHUB_ISSUES_CREATE", &["--args", r#"{"owner": "octo-org", "repo": "hello", "body": "no title"}"#], &token),
            // Nor does anything without the credential.
            invoke(&o, &d, "GITHUB_ISSUES_CREATE", &["octo-org|hello|x"], &[]),
            // The optional fields by name, as an MCP client sends them: a pipe is just text.
            invoke(&o, &d, "GITHUB_ISSUES_CREATE", &["--args", r#"{"owner": "octo-org", "repo": "hello", "title": "By name", "body": "a | b", "labels": ["a"]}"#], &token),
            // Optional query parameters: closed issues, the second page; the absent left out.
            invoke(&o, &d, "GITHUB_ISSUES_LIST_FOR_REPO", &["--args", r#"{"owner": "octo-org", "repo": "hello", "state": "closed", "page": 2}"#], &token),
            invoke(&o, &d, "GITHUB_ISSUES_LIST_FOR_REPO", &["octo-org|hello"], &token),
        ]
    })
    .await
    .expect("invoke");
    assert_eq!(results[0], ("HTTP 201:{\"number\": 1347}\n".to_string(), 0));
    assert_eq!(results[1].1, 0, "{}", results[1].0);
    assert!(
        results[2].0.contains("bad_args") && results[2].0.contains("title"),
        "{}",
        results[2].0
    );
    assert_eq!(results[2].1, 1);
    assert!(
        results[3].0.contains("ERR:auth:missing_env:GITHUB_TOKEN"),
        "{}",
        results[3].0
    );

    let seen = seen.0.lock().expect("lock").clone();
    assert_eq!(
        seen.len(),
        5,
        "only the good calls reached the API: {seen:?}"
    );
    let create = &seen[0];
    assert_eq!(
        (&create["method"], &create["path"], &create["query"]),
        (
            &json!("POST"),
            &json!("/repos/octo-org/hello%20world/issues"),
            &json!("")
        )
    );
    assert_eq!(create["authorization"], "Bearer tok-wire-7f3");
    assert_eq!(create["content_type"], "application/json");
    let body: Json = serde_json::from_str(create["body"].as_str().unwrap()).expect("json body");
    assert_eq!(body, json!({"title": "Found a bug"}));
    let search = &seen[1];
    assert_eq!(
        (&search["method"], &search["path"]),
        (&json!("GET"), &json!("/search/labels"))
    );
    assert_eq!(
        search["query"],
        "repository_id=64778136&q=bug%20%26%20defect"
    );
    assert_eq!(search["authorization"], "Bearer tok-wire-7f3");
    assert_eq!(search["body"], "");
    assert_eq!(results[4], ("HTTP 201:{\"number\": 1347}\n".to_string(), 0));
    assert_eq!(results[5].1, 0, "{}", results[5].0);
    assert_eq!(results[6].1, 0, "{}", results[6].0);
    let by_name = &seen[2];
    assert_eq!(by_name["path"], "/repos/octo-org/hello/issues");
    assert_eq!(by_name["content_type"], "application/json");
    let body: Json = serde_json::from_str(by_name["body"].as_str().unwrap()).expect("json body");
    assert_eq!(
        body,
        json!({"title": "By name", "body": "a | b", "labels": ["a"]})
    );
    let (closed, all) = (&seen[3], &seen[4]);
    assert_eq!(
        (&closed["method"], &closed["path"], &closed["query"]),
        (
            &json!("GET"),
            &json!("/repos/octo-org/hello/issues"),
            &json!("state=closed&page=2")
        )
    );
    assert_eq!(closed["authorization"], "Bearer tok-wire-7f3");
    assert_eq!(all["query"], "");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_document_fetched_by_url_with_security_from_the_document() {
    // The loopback host serves the document (its server URL relative to where it is) and is
    // the API too.
    let doc = json!({
        "openapi": "3.0.3",
        "info": {"title": "Loop Shop", "version": "1"},
        "servers": [{"url": "/api/v3"}],
        "components": {"securitySchemes": {"key": {"type": "apiKey", "in": "header", "name": "api_key"}}},
        "security": [{"key": []}],
        "paths": {"/pets/{petId}": {"get": {
            "operationId": "getPetById",
            "summary": "Find a pet by its number",
            "parameters": [{"name": "petId", "in": "path", "required": true, "schema": {"type": "integer"}, "example": 7}],
            "responses": {"200": {"description": "The pet"}}
        }}}
    });
    let seen = Seen::default();
    let text = doc.to_string();
    let app = Router::new()
        .route(
            "/docs/openapi.json",
            axum::routing::get(move || async move { text }),
        )
        .fallback(record)
        .with_state(seen.clone());
    let addr = common::serve(app).await;
    let tmp = tempfile::tempdir().expect("tempdir");
    let (out, data) = (tmp.path().join("catalogue"), tmp.path().join("data"));
    let url = format!("http://{addr}/docs/openapi.json");
    let (o, d) = (out.clone(), data.clone());
    let (report, called) = tokio::task::spawn_blocking(move || {
        let report = import(Path::new(&url), &o, &[]);
        let called = invoke(
            &o,
            &d,
            "GET_PET_BY_ID",
            &["7"],
            &[("LOOP_SHOP_API_KEY", "k-31")],
        );
        (report, called)
    })
    .await
    .expect("import and invoke");
    assert_eq!(count(&report, "new"), 1);
    let row = std::fs::read_to_string(out.join("GET_PET_BY_ID.yaml")).expect("row");
    assert!(
        row.contains(&format!("target: \"GET http://{addr}/api/v3/pets/$1\"\n")),
        "{row}"
    );
    assert_eq!(called.1, 0, "{}", called.0);
    let seen = seen.0.lock().expect("lock").clone();
    assert_eq!(
        (&seen[0]["path"], &seen[0]["api_key"]),
        (&json!("/api/v3/pets/7"), &json!("k-31"))
    );
}

mod never_panics {
    use capdir::import::{Options, document, import};
    use proptest::prelude::*;
    use serde_json::{Value as Json, json};
    use std::path::Path;

    /// JSON built from the words OpenAPI documents use, so the generator reaches deep into
    /// the importer rather than stopping at "not a document".
    fn value() -> impl Strategy<Value = Json> {
        let words = prop::sample::select(vec![
            "get",
            "post",
            "put",
            "trace",
            "parameters",
            "requestBody",
            "content",
            "application/json",
            "multipart/form-data",
            "text/plain",
            "schema",
            "$ref",
            "in",
            "name",
            "required",
            "type",
            "object",
            "array",
            "string",
            "integer",
            "file",
            "properties",
            "items",
            "allOf",
            "oneOf",
            "nullable",
            "exclusiveMinimum",
            "minimum",
            "pattern",
            "enum",
            "servers",
            "url",
            "security",
            "securitySchemes",
            "components",
            "schemas",
            "definitions",
            "responses",
            "200",
            "default",
            "description",
            "summary",
            "operationId",
            "tags",
            "example",
            "examples",
            "value",
            "callbacks",
            "path",
            "query",
            "header",
            "cookie",
            "body",
            "formData",
            "consumes",
            "host",
            "basePath",
            "#/components/schemas/A",
            "#/definitions/A",
            "#/paths",
            "#",
            "#/components/parameters/P",
            "other.yaml#/X",
            "/a/{id}",
            "{id}",
            "id",
            "http",
            "bearer",
            "apiKey",
            "oauth2",
        ]);
        let leaf = prop_oneof![
            Just(Json::Null),
            any::<bool>().prop_map(Json::Bool),
            (-5i64..300).prop_map(Json::from),
            words.clone().prop_map(Json::from),
            ".{0,6}".prop_map(Json::String),
        ];
        leaf.prop_recursive(6, 96, 6, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Json::Array),
                prop::collection::btree_map(words.clone().prop_map(String::from), inner, 0..6)
                    .prop_map(|m| Json::Object(m.into_iter().collect())),
            ]
        })
    }

    /// A path item with an operation shaped as documents write them (its parameters, body
    /// and responses drawn, some of them odd), so a good share of documents reach the gate.
    fn path_item() -> impl Strategy<Value = Json> {
        let parameter = (
            prop::sample::select(vec![
                "id", "x", "y", "q", "limit", "page size", "", "token", "api_key", "a,b", "X-R=1",
                "page[size]", "~x", "body", "Content-Type",
            ]),
            prop::sample::select(vec!["path", "query", "header", "cookie", "body", "formData"]),
            any::<bool>(),
            prop::sample::select(vec!["string", "integer", "number", "boolean", "array", "object", "file"]),
            prop::sample::select(vec!["form", "deepObject", "spaceDelimited", "simple", "matrix"]),
            prop::option::of(any::<bool>()),
        )
            .prop_map(|(name, place, required, kind, style, explode)| {
                let mut p = json!({"name": name, "in": place, "required": required, "type": kind,
                                   "schema": {"type": kind}, "style": style,
                                   "collectionFormat": if style == "form" { "multi" } else { "ssv" }});
                if let Some(e) = explode {
                    p["explode"] = json!(e);
                }
                p
            });
        (
            prop::sample::select(vec!["get", "post", "put", "patch", "delete", "trace"]),
            prop::option::of(prop::sample::select(vec![
                "listThings",
                "get-a",
                "x",
                "ünï",
                "",
            ])),
            ".{0,40}",
            prop::collection::vec(parameter, 0..4),
            prop::option::of(value()),
            value(),
            prop::sample::select(vec![
                "application/json",
                "application/x-www-form-urlencoded",
                "multipart/form-data",
                "text/plain",
                "application/xml",
            ]),
        )
            .prop_map(|(method, id, summary, parameters, body, extra, media)| {
                let mut operation = json!({
                    "summary": summary,
                    "parameters": parameters,
                    "responses": {"200": {"description": "ok"}},
                    "x-extra": extra,
                });
                if let Some(id) = id {
                    operation["operationId"] = json!(id);
                }
                if let Some(body) = body {
                    operation["requestBody"] = json!({"content": {media: {"schema": body}}});
                }
                json!({ method: operation })
            })
    }

    fn document_value() -> impl Strategy<Value = Json> {
        (
            prop::sample::select(vec![
                json!({"openapi": "3.0.3"}),
                json!({"openapi": "3.1.0"}),
                json!({"swagger": "2.0"}),
            ]),
            prop::collection::btree_map(
                prop::sample::select(vec!["/a", "/a/{id}", "/b/{x}/{y}", "x-ext", "/"]),
                prop_oneof![2 => path_item(), 1 => value()],
                0..4,
            ),
            value(),
        )
            .prop_map(|(mut root, paths, components)| {
                root["paths"] =
                    Json::Object(paths.into_iter().map(|(k, v)| (k.to_string(), v)).collect());
                root["components"] = components.clone();
                root["definitions"] = components;
                root["servers"] = json!([{"url": "https://api.example.com"}]);
                root["host"] = json!("api.example.com");
                root
            })
    }

    /// Any document: an error or rows, never a panic; and every row proposed passes the gate,
    /// asks included. At least a quarter of the cases must propose rows, so the gate is
    /// reached and not only the parser's refusals.
    #[test]
    fn any_document() {
        let reached = std::cell::Cell::new(0u32);
        let cases = 160;
        let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(cases));
        runner
            .run(&document_value(), |doc| {
                let text = doc.to_string();
                let Ok(parsed) = document::parse(&text, "fuzz.json") else {
                    return Ok(());
                };
                if let Ok(plan) = import(&parsed, &Options::default(), &[], Path::new("out")) {
                    // The importer never drafts a template the gate refuses.
                    for sk in &plan.report.skipped {
                        for n in &sk.notes {
                            prop_assert!(
                                !(n.kind == "gate"
                                    && (n.message.contains("bad_named_args")
                                        || n.message.contains("bad_http_target"))),
                                "{}: {}",
                                sk.operation,
                                n.message
                            );
                        }
                    }
                    let checked = capdir::check::check_files(&plan.files(Path::new("out")));
                    prop_assert!(
                        !checked.has_errors(),
                        "{:?}\n{:?}",
                        checked.diags,
                        plan.writes
                    );
                    let asks = capdir::check::asks_gate(&checked.rows);
                    prop_assert!(asks.is_empty(), "{asks:?}");
                    if !checked.rows.is_empty() {
                        reached.set(reached.get() + 1);
                    }
                }
                Ok(())
            })
            .unwrap();
        assert!(
            reached.get() >= cases / 4,
            "only {} of {cases} documents proposed a row for the gate",
            reached.get()
        );
    }

    proptest! {
        /// Any text at all.
        #[test]
        fn any_text(text in ".{0,400}") {
            let _ = document::parse(&text, "fuzz.yaml");
            let _ = document::parse(&format!("openapi: 3.1.0\npaths:\n  /a:\n{text}"), "fuzz.yaml");
        }
    }
}
