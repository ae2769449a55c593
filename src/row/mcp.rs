//! MCP targets: which MCP server a `runner: mcp` row forwards its calls to, and which tool.
//!
//! A row stays one of the four types (an MCP tool is a call to a server, so `type: http`); its
//! `runner: mcp` and a target of this form say where the call goes:
//!
//! - `mcp+stdio:COMMAND ARG…#TOOL` — start COMMAND (found on `PATH`, run in the dispatcher's
//!   working directory) and speak MCP over its standard input and output;
//! - `mcp+http://HOST/PATH#TOOL`, `mcp+https://…#TOOL` — a Streamable HTTP endpoint.
//!
//! The fragment after the last `#` is the tool's name, percent-encoded where it holds anything
//! but letters, digits and `-._~`. Words of a command are split on spaces; a word holding a
//! space, a quote, a backslash or `#` is written in double quotes, with `\"` and `\\` inside.
//! [`McpTarget::render`] writes exactly what [`McpTarget::parse`] reads, so an importer's
//! targets read back as they were written.

use crate::row::target::TargetError;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};
use std::fmt;

/// The runner name a row gives in `runner:` to be run by MCP.
pub const RUNNER: &str = "mcp";

const STDIO: &str = "mcp+stdio:";
const HTTP: &str = "mcp+http://";
const HTTPS: &str = "mcp+https://";

/// What a tool name keeps unencoded in a target: the URL's unreserved characters.
const TOOL_ENCODE: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// An MCP server: a command to start, or an HTTP endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum McpServer {
    /// A program spoken to over its standard input and output.
    Stdio { command: String, args: Vec<String> },
    /// A Streamable HTTP endpoint (`http://…` or `https://…`).
    Http { url: String },
}

/// A parsed `runner: mcp` target: the server and the tool called on it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct McpTarget {
    pub server: McpServer,
    pub tool: String,
}

fn err(message: impl Into<String>, help: impl Into<String>) -> TargetError {
    TargetError {
        message: message.into(),
        help: help.into(),
    }
}

const FORMS: &str = "write `mcp+stdio:COMMAND ARG…#TOOL` (a server started as a command) or `mcp+https://HOST/PATH#TOOL` (a Streamable HTTP endpoint)";

impl McpTarget {
    /// Is `target` written as an MCP target (whatever the row's runner says)?
    pub fn looks_like(target: &str) -> bool {
        target.trim_start().starts_with("mcp+")
    }

    pub fn parse(target: &str) -> Result<McpTarget, TargetError> {
        let target = target.trim();
        let Some(hash) = target.rfind('#') else {
            return Err(err(
                format!("MCP target `{target}` names no tool"),
                "end the target with `#TOOL`, the tool's name as the server lists it",
            ));
        };
        let (spec, fragment) = (&target[..hash], &target[hash + 1..]);
        let tool = percent_decode_str(fragment)
            .decode_utf8()
            .map_err(|_| err("the tool name is not UTF-8 once decoded", FORMS))?
            .into_owned();
        if tool.is_empty() {
            return Err(err(
                format!("MCP target `{target}` has an empty tool name after `#`"),
                "end the target with `#TOOL`, the tool's name as the server lists it",
            ));
        }
        let server = if let Some(rest) = spec.strip_prefix(STDIO) {
            let mut words = split_words(rest)?.into_iter();
            let Some(command) = words.next() else {
                return Err(err(
                    "`mcp+stdio:` names no command",
                    "write the command that starts the server: `mcp+stdio:npx -y @scope/server@1.2.3#TOOL`",
                ));
            };
            McpServer::Stdio {
                command,
                args: words.collect(),
            }
        } else if spec.starts_with(HTTP) || spec.starts_with(HTTPS) {
            let url = &spec["mcp+".len()..];
            let host = url.split_once("://").map_or("", |(_, r)| r);
            let authority = host.split(['/', '?']).next().unwrap_or("");
            if authority.is_empty() || url.chars().any(char::is_whitespace) {
                return Err(err(
                    format!("`{url}` is not an http(s) URL with a host"),
                    "write `mcp+https://mcp.example.com/mcp#TOOL`",
                ));
            }
            if authority.contains('@') {
                return Err(err(
                    "credentials in an MCP URL would be committed with the row",
                    "remove them and name the variable that holds the secret in `auth` (bearer:ENV, basic:ENV, headers:… or query:param=ENV)",
                ));
            }
            McpServer::Http {
                url: url.to_string(),
            }
        } else {
            return Err(err(
                format!(
                    "`{spec}` is not an MCP server: it must start mcp+stdio:, mcp+http:// or mcp+https://"
                ),
                FORMS,
            ));
        };
        Ok(McpTarget { server, tool })
    }

    /// The target as a row writes it.
    pub fn render(&self) -> String {
        format!(
            "{}#{}",
            self.server,
            utf8_percent_encode(&self.tool, TOOL_ENCODE)
        )
    }
}

impl McpServer {
    pub fn is_stdio(&self) -> bool {
        matches!(self, McpServer::Stdio { .. })
    }
}

/// The server as a target starts (`mcp+stdio:npx -y pkg`, `mcp+https://host/mcp`): rows of one
/// server share it, and so do their calls' sessions.
impl fmt::Display for McpServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            McpServer::Stdio { command, args } => {
                f.write_str(STDIO)?;
                f.write_str(&quote(command))?;
                for a in args {
                    write!(f, " {}", quote(a))?;
                }
                Ok(())
            }
            McpServer::Http { url } => write!(f, "mcp+{url}"),
        }
    }
}

/// A word as a command line in a target writes it.
fn quote(word: &str) -> String {
    let plain = !word.is_empty()
        && !word
            .chars()
            .any(|c| c.is_whitespace() || matches!(c, '"' | '\\' | '#' | '\''));
    if plain {
        return word.to_string();
    }
    let mut out = String::with_capacity(word.len() + 2);
    out.push('"');
    for c in word.chars() {
        if matches!(c, '"' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

/// Split a command on spaces, with double-quoted words (`\"` and `\\` escaped inside).
fn split_words(text: &str) -> Result<Vec<String>, TargetError> {
    let mut words = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        let Some(&first) = chars.peek() else {
            return Ok(words);
        };
        let mut word = String::new();
        if first == '"' {
            chars.next();
            loop {
                match chars.next() {
                    None => {
                        return Err(err(
                            "a quoted word of the command is not closed",
                            "close the word with `\"`; write `\\\"` for a quote inside it",
                        ));
                    }
                    Some('"') => break,
                    Some('\\') => match chars.next() {
                        Some(c @ ('"' | '\\')) => word.push(c),
                        Some(c) => {
                            word.push('\\');
                            word.push(c);
                        }
                        None => word.push('\\'),
                    },
                    Some(c) => word.push(c),
                }
            }
            if chars.peek().is_some_and(|c| !c.is_whitespace()) {
                return Err(err(
                    "a quoted word of the command runs into the next one",
                    "put a space after the closing `\"`",
                ));
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c.is_whitespace() {
                    break;
                }
                if c == '"' {
                    return Err(err(
                        "a quote in the middle of a word of the command",
                        "quote the whole word: `\"a b\"`",
                    ));
                }
                word.push(c);
                chars.next();
            }
        }
        words.push(word);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stdio_and_http_targets() {
        let t = McpTarget::parse(
            "mcp+stdio:npx -y @modelcontextprotocol/server-everything@2026.8.31#get-sum",
        )
        .unwrap();
        assert_eq!(
            t.server,
            McpServer::Stdio {
                command: "npx".into(),
                args: vec![
                    "-y".into(),
                    "@modelcontextprotocol/server-everything@2026.8.31".into()
                ]
            }
        );
        assert_eq!(t.tool, "get-sum");
        let h = McpTarget::parse("mcp+https://mcp.example.com/mcp?x=1#files%2Fread").unwrap();
        assert_eq!(
            h.server,
            McpServer::Http {
                url: "https://mcp.example.com/mcp?x=1".into()
            }
        );
        assert_eq!(h.tool, "files/read");
        assert_eq!(
            h.render(),
            "mcp+https://mcp.example.com/mcp?x=1#files%2Fread"
        );
    }

    #[test]
    fn quoted_words_round_trip() {
        let t = McpTarget {
            server: McpServer::Stdio {
                command: "/opt/my server/run".into(),
                args: vec![
                    "a#b".into(),
                    "say \"hi\"".into(),
                    String::new(),
                    "back\\slash".into(),
                    "plain".into(),
                ],
            },
            tool: "tool with space#".into(),
        };
        let text = t.render();
        assert_eq!(McpTarget::parse(&text).unwrap(), t, "{text}");
    }

    #[test]
    fn refusals() {
        for bad in [
            "mcp+stdio:npx -y pkg",
            "mcp+stdio:#echo",
            "mcp+stdio:npx \"unclosed#echo",
            "mcp+stdio:a\"b\"#echo",
            "mcp+http://#echo",
            "mcp+https://user:pw@host/mcp#echo",
            "mcp+ftp://host#echo",
            "GET https://example.com#echo",
            "mcp+stdio:npx#",
        ] {
            assert!(McpTarget::parse(bad).is_err(), "{bad}");
        }
        assert!(McpTarget::looks_like(" mcp+stdio:x#y"));
        assert!(!McpTarget::looks_like("GET https://x"));
    }
}
