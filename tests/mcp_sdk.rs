//! The official MCP Python SDK (`mcp` from PyPI) as the client of the built `capdir` binary,
//! over stdio and Streamable HTTP: runs tests/mcp/ with pytest. `.ci/deps` installs the SDK;
//! without it this test fails and says so rather than passing vacuously.

use std::path::Path;
use std::process::Command;

fn python() -> String {
    std::env::var("PYTHON").unwrap_or_else(|_| "python3".into())
}

#[test]
fn official_python_sdk_over_stdio_and_http() {
    let python = python();
    let probe = Command::new(&python)
        .args([
            "-c",
            "import mcp, pytest, anyio, httpx2; from mcp import ClientSession",
        ])
        .output()
        .unwrap_or_else(|e| panic!("cannot run `{python}`: {e}; install Python 3 (.ci/deps)"));
    assert!(
        probe.status.success(),
        "the official MCP Python SDK is not importable by `{python}`; run `.ci/deps` \
         (it pip-installs mcp and pytest)\n{}",
        String::from_utf8_lossy(&probe.stderr)
    );
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(&python)
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/mcp"])
        .current_dir(root)
        .env("CAPDIR_BIN", env!("CARGO_BIN_EXE_capdir"))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .expect("pytest runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the MCP SDK tests failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // pytest's summary names what ran; a run that collected nothing must not pass.
    assert!(
        stdout.contains(" passed") && !stdout.contains("no tests ran"),
        "{stdout}"
    );
}
