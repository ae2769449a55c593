//! The MCP registry's `server.json` (schema 2025-09-29): how a registry entry names a server
//! (its remotes, reached over HTTP, and its packages, started as a command) and how a row
//! that forwards to an MCP server (`runner: mcp`) is described as one. Both directions here,
//! so that a description the build publishes imports back to the same target.
//!
//! A registry entry is someone else's document. What it may decide is limited: the command
//! that starts a package is the one its registry type names (`npx`, `uvx`, `docker`, `dnx`),
//! never one the entry picks; runtime arguments (a `docker run` flag can mount the host) are
//! refused unless the operator allows them; no variable it names may be one of capdir's own.

use crate::row::credential::Credential;
use crate::row::mcp::{McpServer, McpTarget};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The schema the descriptions are written for (and validated against in the tests).
pub const SCHEMA: &str =
    "https://static.modelcontextprotocol.io/schemas/2025-09-29/server.schema.json";

/// A registry entry. Fields capdir does not use (title, icons, …) are ignored on reading.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerJson {
    #[serde(rename = "$schema", default, skip_serializing_if = "String::is_empty")]
    pub schema: String,
    pub name: String,
    pub description: String,
    pub version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub website_url: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub packages: Vec<Package>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remotes: Vec<Transport>,
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<serde_json::Value>,
}

/// A package a client installs and starts.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Package {
    pub registry_type: String,
    pub identifier: String,
    #[serde(default)]
    pub version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_hint: Option<String>,
    pub transport: Transport,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runtime_arguments: Vec<Argument>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub package_arguments: Vec<Argument>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub environment_variables: Vec<KeyValue>,
}

/// How a client speaks to the server: `stdio`, `streamable-http` or `sse`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Transport {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<KeyValue>,
    /// `{NAME}` in the URL, by name (a newer schema's field; read, never written).
    #[serde(default, skip_serializing)]
    pub variables: BTreeMap<String, Input>,
}

/// A command-line argument: `positional` (a value) or `named` (`--flag` and a value).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Argument {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_hint: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<String>,
}

/// A header or an environment variable the server needs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KeyValue {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_required: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_secret: bool,
}

/// A value a client may be asked for.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Input {
    #[serde(default)]
    pub default: Option<String>,
    #[serde(default)]
    pub value: Option<String>,
}

/// Read a registry entry: the document itself, or the registry API's answer for one server
/// (`{"server": {…}, "_meta": {…}}`).
pub fn parse(text: &str) -> Result<ServerJson, String> {
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let entry = match value.get("server") {
        Some(inner @ serde_json::Value::Object(_)) if value.get("name").is_none() => inner.clone(),
        _ => value,
    };
    serde_json::from_value(entry).map_err(|e| format!("not a server.json: {e}"))
}

/// Which of an entry's ways to reach the server to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pick {
    /// The first remote (nothing to install), else the first package started over stdio.
    Auto,
    Remote(usize),
    Package(usize),
}

/// A server as capdir reaches it, and the credential its rows name (variables only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    pub server: McpServer,
    pub auth: String,
}

/// How capdir reaches the server `entry` describes, `pick`ing among its ways; the variables
/// it needs are named `PREFIX_NAME` (`prefix` may be empty). Refused with the reason when
/// capdir cannot, or may not, start or reach it as written.
pub fn launch(
    entry: &ServerJson,
    pick: Pick,
    prefix: &str,
    runtime_arguments: bool,
) -> Result<Launch, String> {
    let pick = match pick {
        Pick::Auto if !entry.remotes.is_empty() => Pick::Remote(0),
        Pick::Auto => match entry
            .packages
            .iter()
            .position(|p| p.transport.kind == "stdio")
        {
            Some(i) => Pick::Package(i),
            None => {
                return Err(format!(
                    "{} lists no remote and no package started over stdio",
                    entry.name
                ));
            }
        },
        p => p,
    };
    match pick {
        Pick::Remote(i) => {
            let remote = entry
                .remotes
                .get(i)
                .ok_or_else(|| format!("{} has {} remotes", entry.name, entry.remotes.len()))?;
            remote_launch(remote, prefix)
        }
        Pick::Package(i) => {
            let package = entry
                .packages
                .get(i)
                .ok_or_else(|| format!("{} has {} packages", entry.name, entry.packages.len()))?;
            package_launch(package, runtime_arguments)
        }
        Pick::Auto => unreachable!("resolved above"),
    }
}

/// A remote: a Streamable HTTP endpoint, its `{variables}` filled from their defaults, each
/// header it needs sent from a variable of its own.
fn remote_launch(remote: &Transport, prefix: &str) -> Result<Launch, String> {
    if remote.kind != "streamable-http" {
        return Err(format!(
            "a `{}` remote: capdir reaches MCP servers over Streamable HTTP or stdio",
            remote.kind
        ));
    }
    let mut url = remote.url.clone().unwrap_or_default();
    for (name, input) in &remote.variables {
        let value = input.value.as_ref().or(input.default.as_ref());
        if let Some(value) = value {
            url = url.replace(&format!("{{{name}}}"), value);
        }
    }
    if let Some(open) = url.find('{') {
        let name: String = url[open + 1..].chars().take_while(|c| *c != '}').collect();
        return Err(format!(
            "the remote's URL needs `{{{name}}}`, which has no default: import with --url instead"
        ));
    }
    let target = McpTarget::parse(&format!("mcp+{url}#tool"))
        .map_err(|e| format!("the remote's URL {url}: {}", e.message))?;
    let mut headers = Vec::new();
    for h in &remote.headers {
        let env = variable(prefix, &h.name)?;
        let value = match &h.value {
            Some(v) if !h.is_secret => v.replace(&format!("{{{}}}", h.name), &format!("${env}")),
            _ => format!("${env}"),
        };
        headers.push((h.name.clone(), value));
    }
    let auth = if headers.is_empty() {
        String::new()
    } else {
        let map: serde_json::Map<String, serde_json::Value> = headers
            .into_iter()
            .map(|(k, v)| (k, serde_json::Value::String(v)))
            .collect();
        format!("headers:{}", serde_json::Value::Object(map))
    };
    Ok(Launch {
        server: target.server,
        auth,
    })
}

/// The command that starts a package of each registry type, and how it names a version.
fn runtime(registry_type: &str) -> Option<(&'static str, &'static [&'static str], &'static str)> {
    match registry_type {
        "npm" => Some(("npx", &["-y"], "@")),
        "pypi" => Some(("uvx", &[], "==")),
        "nuget" => Some(("dnx", &["--yes"], "@")),
        "oci" => Some(("docker", &["run", "-i", "--rm"], "")),
        _ => None,
    }
}

/// A package: its registry's runner, then the package pinned to its version, then its
/// arguments; its environment variables (named as the package reads them, no prefix) are
/// the rows' `env:` credential.
fn package_launch(package: &Package, allow_runtime: bool) -> Result<Launch, String> {
    if package.transport.kind != "stdio" {
        return Err(format!(
            "a package reached over `{}`: start it yourself and import it with --url",
            package.transport.kind
        ));
    }
    let Some((command, fixed, pin)) = runtime(&package.registry_type) else {
        return Err(format!(
            "a `{}` package: capdir starts npm, pypi, nuget and oci packages",
            package.registry_type
        ));
    };
    if let Some(hint) = &package.runtime_hint
        && hint != command
    {
        return Err(format!(
            "the entry asks for `{hint}` to start a {} package; capdir starts those with `{command}` only",
            package.registry_type
        ));
    }
    let word = |w: &str, what: &str| {
        if w.is_empty()
            || w.starts_with('-')
            || w.chars().any(|c| c.is_whitespace() || c.is_control())
        {
            Err(format!(
                "the package's {what} `{w}` is not one word that is not a flag"
            ))
        } else {
            Ok(())
        }
    };
    word(&package.identifier, "identifier")?;
    let mut args: Vec<String> = fixed.iter().map(|s| s.to_string()).collect();
    if !package.runtime_arguments.is_empty() {
        if !allow_runtime {
            return Err(format!(
                "the entry gives `{command}` arguments of its own ({}); they can change what runs and where: pass --runtime-arguments to allow them",
                rendered(&package.runtime_arguments)?.join(" ")
            ));
        }
        args.extend(rendered(&package.runtime_arguments)?);
    }
    let mut env = Vec::new();
    for e in &package.environment_variables {
        let name = variable("", &e.name)?;
        if command == "docker" {
            args.extend(["-e".to_string(), name.clone()]);
        }
        env.push(name);
    }
    let pinned = match (package.version.as_str(), pin) {
        ("", _) | (_, "") => package.identifier.clone(),
        (v, pin) => {
            word(v, "version")?;
            format!("{}{pin}{v}", package.identifier)
        }
    };
    args.push(pinned);
    args.extend(rendered(&package.package_arguments)?);
    let auth = if env.is_empty() {
        String::new()
    } else {
        format!("env:{}", env.join(","))
    };
    Ok(Launch {
        server: McpServer::Stdio {
            command: command.to_string(),
            args,
        },
        auth,
    })
}

/// Arguments as words: a named one as its flag and value, a positional one as its value (or
/// its default); one without a value cannot be started unattended.
fn rendered(arguments: &[Argument]) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for a in arguments {
        let value = a.value.clone().or_else(|| a.default.clone());
        match (a.kind.as_str(), &a.name, value) {
            ("named", Some(flag), value) => {
                out.push(flag.clone());
                out.extend(value);
            }
            ("positional", _, Some(value)) => out.push(value),
            _ => {
                let hint = a.value_hint.as_deref().or(a.name.as_deref()).unwrap_or("?");
                return Err(format!(
                    "the argument `{hint}` has no value: start the server yourself and import it with `capdir import mcp -- …`"
                ));
            }
        }
    }
    Ok(out)
}

/// A variable named by the entry, as capdir names it: capitals, digits and `_`, `prefix`
/// in front; never one of capdir's own (`CAPDIR_…`).
fn variable(prefix: &str, name: &str) -> Result<String, String> {
    let mut env: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect();
    if !prefix.is_empty() {
        env = format!("{}_{env}", prefix.to_ascii_uppercase());
    }
    let valid = env.starts_with(|c: char| c.is_ascii_uppercase() || c == '_') && env.len() <= 128;
    if !valid {
        return Err(format!(
            "`{name}` cannot be the name of an environment variable"
        ));
    }
    if env.starts_with("CAPDIR_") {
        return Err(format!(
            "the entry names `{env}`, one of capdir's own variables; no row may use it"
        ));
    }
    Ok(env)
}

/// The registry description of the server a `runner: mcp` row calls: `name` and `version`
/// the caller's, `description` the row's WHAT. None when the server is a command no
/// registry type starts.
pub fn describe(
    target: &McpTarget,
    auth: &str,
    name: &str,
    version: &str,
    description: &str,
) -> Option<ServerJson> {
    let credential = Credential::parse(auth).ok().flatten();
    let mut entry = ServerJson {
        schema: SCHEMA.into(),
        name: name.into(),
        description: description.into(),
        version: version.into(),
        ..ServerJson::default()
    };
    match &target.server {
        McpServer::Http { url } => {
            entry.remotes.push(Transport {
                kind: "streamable-http".into(),
                url: Some(url.clone()),
                headers: secret_headers(credential.as_ref()),
                variables: BTreeMap::new(),
            });
        }
        McpServer::Stdio { command, args } => {
            entry
                .packages
                .push(package_of(command, args, credential.as_ref())?);
        }
    }
    Some(entry)
}

/// The headers a credential sends, each a secret the client must supply.
fn secret_headers(credential: Option<&Credential>) -> Vec<KeyValue> {
    let secret = |name: &str, description: String| KeyValue {
        name: name.into(),
        description: Some(description),
        is_required: true,
        is_secret: true,
        ..KeyValue::default()
    };
    match credential {
        Some(Credential::Bearer { env }) => {
            vec![secret("Authorization", format!("Bearer ${env}"))]
        }
        Some(Credential::Headers { headers }) => {
            headers.iter().map(|(h, v)| secret(h, v.clone())).collect()
        }
        _ => Vec::new(),
    }
}

/// The package `command args` starts, when it is a registry type's runner started on a
/// pinned package: `npx -y NAME@V`, `uvx NAME==V`, `dnx NAME@V --yes`, `docker run -i --rm IMAGE`.
fn package_of(command: &str, args: &[String], credential: Option<&Credential>) -> Option<Package> {
    let registry_type = ["npm", "pypi", "nuget", "oci"]
        .into_iter()
        .find(|t| runtime(t).is_some_and(|(c, _, _)| c == command))?;
    let (_, fixed, pin) = runtime(registry_type)?;
    let mut rest = args.iter().map(String::as_str).peekable();
    for f in fixed {
        if rest.peek() == Some(f) {
            rest.next();
        }
    }
    // docker's `-e NAME` pairs are the environment, not arguments.
    let mut words: Vec<&str> = Vec::new();
    let mut names: Vec<String> = match credential {
        Some(Credential::Env { names }) => names.clone(),
        _ => Vec::new(),
    };
    while let Some(w) = rest.next() {
        if registry_type == "oci" && w == "-e" {
            if let Some(name) = rest.next()
                && !names.iter().any(|n| n == name)
            {
                names.push(name.to_string());
            }
            continue;
        }
        words.push(w);
    }
    let spec = words.first()?;
    if spec.starts_with('-') {
        return None;
    }
    let (identifier, version) = match pin {
        "" => (spec.to_string(), String::new()),
        pin => match spec.get(1..).and_then(|s| s.rfind(pin)).map(|i| i + 1) {
            Some(i) => (spec[..i].to_string(), spec[i + pin.len()..].to_string()),
            None => (spec.to_string(), String::new()),
        },
    };
    let package_arguments = words[1..]
        .iter()
        .map(|w| Argument {
            kind: "positional".into(),
            value: Some(w.to_string()),
            ..Argument::default()
        })
        .collect();
    let environment_variables = names
        .into_iter()
        .map(|name| KeyValue {
            name,
            is_required: true,
            is_secret: true,
            ..KeyValue::default()
        })
        .collect();
    let version = if registry_type == "oci" {
        spec.rsplit_once(':')
            .map(|(_, t)| t.to_string())
            .unwrap_or_default()
    } else {
        version
    };
    // The registry takes pinned packages only.
    if version.is_empty() || version == "latest" {
        return None;
    }
    Some(Package {
        registry_type: registry_type.into(),
        identifier,
        version,
        runtime_hint: Some(command.into()),
        transport: Transport {
            kind: "stdio".into(),
            ..Transport::default()
        },
        runtime_arguments: Vec::new(),
        package_arguments,
        environment_variables,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(json: serde_json::Value) -> ServerJson {
        parse(&json.to_string()).expect("an entry")
    }

    fn npm(extra: serde_json::Value) -> ServerJson {
        let mut package = serde_json::json!({
            "registryType": "npm",
            "identifier": "@scope/weather",
            "version": "1.2.3",
            "transport": {"type": "stdio"},
        });
        for (k, v) in extra.as_object().unwrap() {
            package[k] = v.clone();
        }
        entry(serde_json::json!({
            "name": "io.github.user/weather",
            "description": "Weather.",
            "version": "1.2.3",
            "packages": [package],
        }))
    }

    #[test]
    fn a_package_starts_with_its_registrys_runner_pinned() {
        let l = launch(
            &npm(serde_json::json!({
                "runtimeHint": "npx",
                "packageArguments": [
                    {"type": "positional", "value": "serve"},
                    {"type": "named", "name": "--port", "value": "8080"},
                ],
                "environmentVariables": [{"name": "WEATHER_KEY", "isSecret": true}],
            })),
            Pick::Auto,
            "W",
            false,
        )
        .unwrap();
        assert_eq!(
            l.server,
            McpServer::Stdio {
                command: "npx".into(),
                args: ["-y", "@scope/weather@1.2.3", "serve", "--port", "8080"]
                    .map(String::from)
                    .to_vec(),
            }
        );
        // Environment variables keep their names: the package reads them so.
        assert_eq!(l.auth, "env:WEATHER_KEY");
        let oci = entry(serde_json::json!({
            "name": "a/b", "description": "d", "version": "1",
            "packages": [{"registryType": "oci", "identifier": "ghcr.io/a/b:1.0", "version": "1.0",
                "transport": {"type": "stdio"}, "environmentVariables": [{"name": "TOKEN"}]}],
        }));
        let l = launch(&oci, Pick::Auto, "", false).unwrap();
        assert_eq!(
            l.server.to_string(),
            "mcp+stdio:docker run -i --rm -e TOKEN ghcr.io/a/b:1.0"
        );
    }

    #[test]
    fn what_an_entry_may_not_decide_is_refused() {
        let refused = |e: ServerJson, needle: &str| {
            let why = launch(&e, Pick::Auto, "", false).unwrap_err();
            assert!(why.contains(needle), "{why}");
        };
        // Another program than the registry type's runner.
        refused(npm(serde_json::json!({"runtimeHint": "sh"})), "`npx` only");
        // The runtime's own flags (docker's could mount the host), unless allowed.
        let flags = npm(serde_json::json!({
            "runtimeArguments": [{"type": "named", "name": "--registry", "value": "http://evil"}],
        }));
        refused(flags.clone(), "--runtime-arguments");
        assert!(launch(&flags, Pick::Auto, "", true).is_ok());
        // capdir's own variables.
        refused(
            npm(serde_json::json!({"environmentVariables": [{"name": "CAPDIR_OWNER_KEY"}]})),
            "capdir's own",
        );
        // An identifier or version that would be read as a flag or as two words.
        refused(
            npm(serde_json::json!({"identifier": "--eval=x"})),
            "not a flag",
        );
        refused(npm(serde_json::json!({"version": "1 --foo"})), "not a flag");
        // An argument nobody can fill in unattended.
        refused(
            npm(
                serde_json::json!({"packageArguments": [{"type": "positional", "valueHint": "path"}]}),
            ),
            "has no value",
        );
        let remote = |r: serde_json::Value| {
            entry(
                serde_json::json!({"name": "a/b", "description": "d", "version": "1", "remotes": [r]}),
            )
        };
        refused(
            remote(serde_json::json!({"type": "sse", "url": "https://a.example/sse"})),
            "Streamable HTTP",
        );
        refused(
            remote(
                serde_json::json!({"type": "streamable-http", "url": "https://{tenant}.example/mcp"}),
            ),
            "{tenant}",
        );
        refused(
            remote(
                serde_json::json!({"type": "streamable-http", "url": "https://u:p@a.example/mcp"}),
            ),
            "credentials",
        );
        refused(
            remote(
                serde_json::json!({"type": "streamable-http", "url": "https://a.example/mcp",
                "headers": [{"name": "CAPDIR_TOKEN_KEY", "isSecret": true}]}),
            ),
            "capdir's own",
        );
    }

    #[test]
    fn a_remote_sends_each_header_from_a_variable_of_its_own() {
        let e = entry(serde_json::json!({
            "name": "a/b", "description": "d", "version": "1",
            "remotes": [{"type": "streamable-http", "url": "https://{host}/mcp",
                "variables": {"host": {"default": "api.example.com"}},
                "headers": [
                    {"name": "Authorization", "isSecret": true},
                    {"name": "X-Tenant", "value": "t-{X-Tenant}"},
                ]}],
        }));
        let l = launch(&e, Pick::Auto, "wx", false).unwrap();
        assert_eq!(
            l.server,
            McpServer::Http {
                url: "https://api.example.com/mcp".into()
            }
        );
        assert_eq!(
            l.auth,
            r#"headers:{"Authorization":"$WX_AUTHORIZATION","X-Tenant":"t-$WX_X_TENANT"}"#
        );
        assert!(Credential::parse(&l.auth).unwrap().is_some());
    }

    #[test]
    fn a_description_launches_the_rows_own_server() {
        for target in [
            "mcp+stdio:npx -y @modelcontextprotocol/server-everything@2026.8.31#echo",
            "mcp+stdio:uvx mcp-server-time==1.0.0 --local-timezone UTC#now",
            "mcp+stdio:docker run -i --rm -e TOKEN ghcr.io/a/b:1.0#t",
            "mcp+https://mcp.example.com/mcp#add",
        ] {
            let t = McpTarget::parse(target).unwrap();
            let auth = if t.server.is_stdio() {
                ""
            } else {
                "bearer:EXAMPLE_TOKEN"
            };
            let described = describe(&t, auth, "a/b", "1.0.0", "d").expect(target);
            let back: ServerJson = parse(&serde_json::to_string(&described).unwrap()).unwrap();
            let l = launch(&back, Pick::Auto, "", false).unwrap();
            assert_eq!(l.server, t.server, "{target}");
        }
        // A command no registry starts, or a package not pinned, is not described.
        for target in [
            "mcp+stdio:node server.js#t",
            "mcp+stdio:npx -y some-server#t",
            "mcp+stdio:docker run -i --rm image#t",
        ] {
            let t = McpTarget::parse(target).unwrap();
            assert!(describe(&t, "", "a/b", "1", "d").is_none(), "{target}");
        }
    }

    #[test]
    fn a_registry_api_answer_is_unwrapped_and_junk_is_an_error() {
        let e = parse(
            r#"{"server": {"name": "a/b", "description": "d", "version": "1"}, "_meta": {}}"#,
        )
        .unwrap();
        assert_eq!(e.name, "a/b");
        for junk in ["", "[]", "{\"name\": 3}", "{\"server\": 1}", "\u{0}"] {
            assert!(parse(junk).is_err(), "{junk:?}");
        }
    }

    proptest::proptest! {
        /// Whatever an entry holds, reading it and launching any of its ways answers, never
        /// panics: a registry entry is untrusted input.
        #[test]
        fn any_entry_reads_and_launches_or_says_why(
            name in ".{0,12}",
            kind in proptest::sample::select(vec!["stdio", "streamable-http", "sse", "", "x"]),
            registry in proptest::sample::select(vec!["npm", "pypi", "oci", "nuget", "mcpb", ""]),
            word in "[ -~\u{80}-\u{10FFFF}]{0,16}",
            url in "[ -~]{0,24}",
        ) {
            let doc = serde_json::json!({
                "name": name, "description": word, "version": word,
                "remotes": [{"type": kind, "url": url, "headers": [{"name": word}],
                    "variables": {word.clone(): {"default": url}}}],
                "packages": [{"registryType": registry, "identifier": word, "version": word,
                    "runtimeHint": word, "transport": {"type": kind},
                    "packageArguments": [{"type": "named", "name": word, "value": url},
                        {"type": "positional", "valueHint": word}],
                    "environmentVariables": [{"name": word}]}],
            });
            let entry = parse(&doc.to_string()).unwrap();
            for pick in [Pick::Auto, Pick::Remote(0), Pick::Package(0), Pick::Remote(9)] {
                for allow in [false, true] {
                    if let Ok(l) = launch(&entry, pick, &word, allow) {
                        // What it would start or reach is one of the four runners, or a URL.
                        match &l.server {
                            McpServer::Stdio { command, .. } => proptest::prop_assert!(
                                ["npx", "uvx", "docker", "dnx"].contains(&command.as_str())
                            ),
                            McpServer::Http { url } => proptest::prop_assert!(url.starts_with("http")),
                        }
                        proptest::prop_assert!(!l.auth.contains("CAPDIR_"));
                    }
                }
            }
            let _ = parse(&word);
        }
    }
}
