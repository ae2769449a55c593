//! Reading a set of templates: capdir's own, over them a catalogue's folder file by file,
//! each through the gate before tera parses it (encoding, depth, fixed names, cycles) and
//! after (the sample walk, `lint.rs`). Only a set that passes is handed to a build.

use super::set::{ASSETS, FIXED, Files, OVERRIDABLE, TemplateErrors, Templates, beside, engine};
use super::{graph, lint};
use crate::row::diag::Diagnostic;
use anyhow::{Context as _, Result};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// The largest template or static file read from a catalogue.
const MAX_FILE: u64 = 4 << 20;

/// How deep a template may nest brackets in a tag, or tags (`if`, `for`, `block`…) in tags:
/// tera's parser and renderer, and the gate's walk, recurse once a level, and a template
/// from a catalogue must not be able to run them out of stack.
const MAX_DEPTH: usize = 64;

/// Where `text` first nests deeper than [`MAX_DEPTH`] (line, column), if it does.
fn too_deep(text: &str) -> Option<(usize, usize)> {
    const OPEN: &[&str] = &["if", "for", "block", "filter", "macro", "raw"];
    let (mut tags, mut in_tag) = (0usize, false);
    let mut brackets = 0usize;
    let bytes = text.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        let next = bytes.get(i + 1).copied();
        match (b, next) {
            (b'{', Some(b'{' | b'%')) if !in_tag => {
                in_tag = true;
                if next == Some(b'%') {
                    let word: String = text[i + 2..]
                        .trim_start_matches(['-', ' ', '\t', '\n', '\r'])
                        .chars()
                        .take_while(char::is_ascii_alphabetic)
                        .collect();
                    if OPEN.contains(&word.as_str()) {
                        tags += 1;
                    } else if word.starts_with("end") {
                        tags = tags.saturating_sub(1);
                    }
                }
            }
            (b'}' | b'%', Some(b'}')) if in_tag => {
                in_tag = false;
                brackets = 0;
            }
            (b'(' | b'[', _) if in_tag => brackets += 1,
            (b')' | b']', _) if in_tag => brackets = brackets.saturating_sub(1),
            _ => {}
        }
        if tags > MAX_DEPTH || brackets > MAX_DEPTH {
            let line = text[..i].matches('\n').count() + 1;
            let col = i - text[..i].rfind('\n').map_or(0, |j| j + 1) + 1;
            return Some((line, col));
        }
    }
    None
}

impl Templates {
    /// capdir's own templates.
    pub fn builtin() -> Templates {
        Templates::from_files(None, BTreeMap::new())
            .unwrap_or_else(|refused| panic!("capdir's own templates are refused: {refused}"))
    }

    /// The templates a build of `catalogue` renders with: `dir` when given, else the
    /// `templates/` folder beside the catalogue when there is one, over capdir's own.
    pub fn for_catalogue(catalogue: &Path, dir: Option<&Path>) -> Result<Templates> {
        let dir = match dir {
            Some(d) => Some(d.to_path_buf()),
            None => beside(catalogue).filter(|d| d.is_dir()),
        };
        let Some(dir) = dir else {
            return Ok(Templates::builtin());
        };
        let (files, mut diags) = read_folder(&dir)?;
        match Templates::from_files(Some(dir), files) {
            Ok(t) if diags.is_empty() => Ok(t),
            Ok(_) => Err(TemplateErrors(diags).into()),
            Err(TemplateErrors(more)) => {
                diags.extend(more);
                Err(TemplateErrors(diags).into())
            }
        }
    }

    /// The templates of `files` (a catalogue's folder as read: `row.html`, `static/x.css`
    /// by name) over capdir's, through their gate.
    pub fn of_files(files: Files) -> Result<Templates, TemplateErrors> {
        Templates::from_files(None, files)
    }

    /// The templates of `files` (the catalogue's, by name) over capdir's, checked.
    fn from_files(dir: Option<PathBuf>, files: Files) -> Result<Templates, TemplateErrors> {
        let path_of = |name: &str| match &dir {
            Some(d) => d.join(name),
            None => PathBuf::from("templates").join(name),
        };
        let mut diags = Vec::new();
        let mut overrides = BTreeMap::new();
        let mut sources: HashMap<String, String> = OVERRIDABLE
            .iter()
            .copied()
            .chain(FIXED.iter().filter_map(|&(n, t)| Some((n, t?))))
            .map(|(n, t)| (n.to_string(), t.to_string()))
            .collect();
        let mut added = Vec::new();
        for (name, bytes) in files {
            if let Some(asset) = name.strip_prefix("static/") {
                if ASSETS.iter().all(|(n, b)| *n != asset || *b != bytes) {
                    overrides.insert(name, bytes);
                }
                continue;
            }
            let text = match template_text(&name, bytes, &path_of(&name)) {
                Ok(Some(text)) => text,
                Ok(None) => continue,
                Err(d) => {
                    diags.push(d);
                    continue;
                }
            };
            match OVERRIDABLE.iter().find(|(n, _)| *n == name) {
                Some((_, builtin)) if text == *builtin => continue,
                Some(_) => {}
                None if name.starts_with('_') => {}
                None => added.push(name.clone()),
            }
            overrides.insert(name.clone(), text.clone().into_bytes());
            sources.insert(name, text);
        }
        if let Some(c) = graph::cycle(&sources) {
            let at = lint::find(&sources[&c.template], &c.needle);
            diags.push(Diagnostic::error(
                &path_of(&c.template),
                at,
                "template_cycle",
                format!("the templates go round for ever: {}", c.steps),
                "break the cycle: a page cannot reach itself by extends, include or import, nor a macro call itself (write the levels out: the pages' fields are shallow)",
            ));
            return Err(TemplateErrors(diags));
        }
        let mut tera = engine();
        let mut ordered: Vec<(&str, &str)> = sources
            .iter()
            .map(|(n, t)| (n.as_str(), t.as_str()))
            .collect();
        ordered.sort();
        if let Err(e) = tera.add_raw_templates(ordered) {
            diags.push(lint::parse_error(&e, &sources, &path_of));
            return Err(TemplateErrors(diags));
        }
        added.sort();
        let templates = Templates {
            tera,
            dir: dir.clone(),
            overrides,
            added,
            sources,
        };
        // capdir's own templates pass the gate (a test walks them): only a catalogue's are
        // walked at each build.
        if !templates.is_builtin() {
            diags.extend(lint::check(&templates, &path_of));
        }
        if diags.is_empty() {
            Ok(templates)
        } else {
            Err(TemplateErrors(diags))
        }
    }
}

/// A catalogue's template as text, when the gate takes it before tera parses it: UTF-8,
/// nested at most [`MAX_DEPTH`] deep, and not one of capdir's fixed forms (`Ok(None)`: the
/// same as capdir's fixed one, left out).
fn template_text(name: &str, bytes: Vec<u8>, path: &Path) -> Result<Option<String>, Diagnostic> {
    let Ok(text) = String::from_utf8(bytes) else {
        return Err(Diagnostic::error(
            path,
            (0, 0),
            "template_not_utf8",
            "the template is not UTF-8 text",
            "save the template as UTF-8",
        ));
    };
    if let Some(at) = too_deep(&text) {
        return Err(Diagnostic::error(
            path,
            at,
            "template_too_deep",
            format!("nested more than {MAX_DEPTH} deep (brackets in a tag, or tags in tags)"),
            "flatten it: set a variable, or split the page with include",
        ));
    }
    if let Some((_, fixed)) = FIXED.iter().find(|(n, _)| *n == name) {
        if Some(text.as_str()) != *fixed {
            return Err(Diagnostic::error(
                path,
                (0, 0),
                "template_fixed",
                format!("{name} is fixed by capdir and cannot be overridden"),
                "remove the file: agents and the dispatcher rely on this form (restyle the pages with layout.html, row.html and static/style.css)",
            ));
        }
        return Ok(None);
    }
    Ok(Some(text))
}

/// The templates (`*.html` at the top) and static files (`static/*`) of a folder. Only
/// regular files are read: a link could point anywhere on the machine that builds.
fn read_folder(dir: &Path) -> Result<(Files, Vec<Diagnostic>)> {
    let mut files = BTreeMap::new();
    let mut diags = Vec::new();
    for (sub, prefix) in [(dir.to_path_buf(), ""), (dir.join("static"), "static/")] {
        let entries = match std::fs::read_dir(&sub) {
            Ok(e) => e,
            Err(e) if prefix.is_empty() || e.kind() != std::io::ErrorKind::NotFound => {
                return Err(e).with_context(|| format!("reading {}", sub.display()));
            }
            Err(_) => continue,
        };
        for entry in entries {
            let entry = entry.with_context(|| format!("reading {}", sub.display()))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = entry.path();
            let meta = std::fs::symlink_metadata(&path)
                .with_context(|| format!("reading {}", path.display()))?;
            let wanted = !name.starts_with('.')
                && (!prefix.is_empty()
                    || name.ends_with(".html")
                    || FIXED.iter().any(|(n, _)| *n == name));
            if !wanted || meta.is_dir() {
                continue;
            }
            if !meta.is_file() {
                diags.push(Diagnostic::error(
                    &path,
                    (0, 0),
                    "template_not_a_file",
                    "a template or static file must be a regular file, not a link",
                    "replace the link with the file itself",
                ));
                continue;
            }
            if meta.len() > MAX_FILE {
                diags.push(Diagnostic::error(
                    &path,
                    (0, 0),
                    "template_too_large",
                    format!(
                        "{} bytes, over the {MAX_FILE} a template may have",
                        meta.len()
                    ),
                    "keep large files (images, fonts) out of templates/ and link to them",
                ));
                continue;
            }
            let bytes =
                std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
            files.insert(format!("{prefix}{name}"), bytes);
        }
    }
    Ok((files, diags))
}
