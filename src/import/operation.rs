//! The operations of a document, read the same way from Swagger 2.0 and OpenAPI 3.x: method,
//! path, documentation, parameters (the path item's merged with the operation's), the body,
//! security, servers and the success response. What is malformed is named by its JSON
//! pointer; an operation with a malformed part is not imported.

use crate::import::document::{Document, Version, escape_pointer, kind};
use crate::import::schema::Refs;
use serde_json::{Map, Value as Json};

/// The HTTP methods a path item may hold, in the order the specification lists them.
pub const METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

/// Where a parameter goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum In {
    Path,
    Query,
    Header,
    Cookie,
    /// Swagger 2.0 form fields.
    FormData,
}

impl In {
    fn parse(s: &str) -> Option<In> {
        Some(match s {
            "path" => In::Path,
            "query" => In::Query,
            "header" => In::Header,
            "cookie" => In::Cookie,
            "formData" => In::FormData,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            In::Path => "path",
            In::Query => "query",
            In::Header => "header",
            In::Cookie => "cookie",
            In::FormData => "form",
        }
    }
}

/// One parameter, resolved.
#[derive(Debug, Clone)]
pub struct Param<'d> {
    pub name: String,
    pub location: In,
    pub required: bool,
    pub def: &'d Map<String, Json>,
}

/// The request body, as the document describes it.
#[derive(Debug, Clone)]
pub enum Body<'d> {
    /// OpenAPI 3: `requestBody`, by media type.
    Content {
        required: bool,
        description: String,
        content: &'d Map<String, Json>,
    },
    /// Swagger 2.0: the `in: body` parameter, sent as one of `consumes`.
    Schema {
        required: bool,
        description: String,
        param: &'d Map<String, Json>,
        consumes: Vec<String>,
    },
    /// Swagger 2.0: `in: formData` parameters.
    Form {
        required: bool,
        multipart: bool,
        fields: Vec<Param<'d>>,
    },
}

/// One operation of the document.
#[derive(Debug, Clone)]
pub struct Operation<'d> {
    /// `/paths/~1pets~1{id}/get`.
    pub pointer: String,
    /// Upper case: `GET`.
    pub method: String,
    pub path: String,
    pub id: Option<String>,
    pub summary: String,
    pub description: String,
    pub tags: Vec<String>,
    pub deprecated: bool,
    pub params: Vec<Param<'d>>,
    pub body: Option<Body<'d>>,
    /// The operation's `security`, else the document's.
    pub security: Option<&'d Json>,
    /// The operation's `servers`, else its path item's (3.x).
    pub servers: Option<&'d Json>,
    /// The first success response: its code and definition.
    pub success: Option<(String, &'d Json)>,
    /// Callback names (3.x), which a row cannot receive.
    pub callbacks: Vec<String>,
    /// Malformed parts, each with its pointer; the operation is not imported when any.
    pub malformed: Vec<String>,
}

impl Operation<'_> {
    /// `POST /repos/{owner}/{repo}/issues`.
    pub fn label(&self) -> String {
        format!("{} {}", self.method, self.path)
    }
}

/// A path item that is not one: reported, its operations unknown.
#[derive(Debug, Clone)]
pub struct BadPathItem {
    pub pointer: String,
    pub message: String,
}

fn text(m: &Map<String, Json>, k: &str) -> String {
    m.get(k).and_then(Json::as_str).unwrap_or("").to_string()
}

/// Every operation of the document, in document order.
pub fn read(doc: &Document) -> (Vec<Operation<'_>>, Vec<BadPathItem>) {
    let refs = Refs::new(&doc.root);
    let mut ops = Vec::new();
    let mut bad = Vec::new();
    let Some(paths) = doc.root.get("paths").and_then(Json::as_object) else {
        return (ops, bad);
    };
    let root_security = doc.root.get("security");
    let root_consumes = strings(doc.root.get("consumes"));
    for (path, item) in paths {
        let item_pointer = format!("/paths/{}", escape_pointer(path));
        if path.starts_with("x-") {
            continue;
        }
        let item = match refs.follow(item) {
            Ok(Json::Object(m)) => m,
            Ok(other) => {
                bad.push(BadPathItem {
                    pointer: item_pointer,
                    message: format!("a path item must be a mapping, found {}", kind(other)),
                });
                continue;
            }
            Err(e) => {
                bad.push(BadPathItem {
                    pointer: item_pointer,
                    message: e,
                });
                continue;
            }
        };
        let mut shared_malformed = Vec::new();
        let shared = params(
            &refs,
            item.get("parameters"),
            &format!("{item_pointer}/parameters"),
            &mut shared_malformed,
        );
        for method in METHODS {
            let Some(op) = item.get(method) else { continue };
            let pointer = format!("{item_pointer}/{method}");
            let Json::Object(op) = op else {
                bad.push(BadPathItem {
                    message: format!("an operation must be a mapping, found {}", kind(op)),
                    pointer,
                });
                continue;
            };
            let mut malformed = shared_malformed.clone();
            let own = params(
                &refs,
                op.get("parameters"),
                &format!("{pointer}/parameters"),
                &mut malformed,
            );
            let mut all = overridden(&shared.0, own.0);
            let body = match doc.version {
                Version::Swagger2 => {
                    let consumes = match op.get("consumes") {
                        Some(c) => strings(Some(c)),
                        None => root_consumes.clone(),
                    };
                    swagger_body(&mut all, own.1.or(shared.1), consumes)
                }
                _ => request_body(&refs, op, &pointer, &mut malformed),
            };
            ops.push(Operation {
                method: method.to_ascii_uppercase(),
                path: path.clone(),
                id: op
                    .get("operationId")
                    .and_then(Json::as_str)
                    .map(str::to_string)
                    .filter(|s| !s.trim().is_empty()),
                summary: text(op, "summary"),
                description: text(op, "description"),
                tags: strings(op.get("tags")),
                deprecated: op.get("deprecated") == Some(&Json::Bool(true)),
                params: all,
                body,
                security: op.get("security").or(root_security),
                servers: op
                    .get("servers")
                    .or_else(|| item.get("servers"))
                    .filter(|s| s.as_array().is_some_and(|a| !a.is_empty())),
                success: success(&refs, op),
                callbacks: op
                    .get("callbacks")
                    .and_then(Json::as_object)
                    .map(|c| c.keys().cloned().collect())
                    .unwrap_or_default(),
                malformed,
                pointer,
            });
        }
    }
    (ops, bad)
}

/// The path item's parameters (`shared`) with the operation's (`own`) over those of the same
/// name and place.
fn overridden<'d>(shared: &[Param<'d>], own: Vec<Param<'d>>) -> Vec<Param<'d>> {
    let mut all: Vec<Param<'d>> = shared
        .iter()
        .filter(|s| {
            !own.iter()
                .any(|o| o.name == s.name && o.location == s.location)
        })
        .cloned()
        .collect();
    all.extend(own);
    all
}

/// OpenAPI 3's `requestBody` of `op`, if it has a readable one (else a note in `malformed`).
fn request_body<'d>(
    refs: &Refs<'d>,
    op: &'d Map<String, Json>,
    pointer: &str,
    malformed: &mut Vec<String>,
) -> Option<Body<'d>> {
    match op.get("requestBody").map(|b| refs.follow(b)) {
        None => None,
        Some(Ok(Json::Object(b))) => match b.get("content") {
            Some(Json::Object(content)) => Some(Body::Content {
                required: b.get("required") == Some(&Json::Bool(true)),
                description: text(b, "description"),
                content,
            }),
            _ => {
                malformed.push(format!(
                    "{pointer}/requestBody: a request body needs `content`, a mapping of media types"
                ));
                None
            }
        },
        Some(Ok(other)) => {
            malformed.push(format!(
                "{pointer}/requestBody: must be a mapping, found {}",
                kind(other)
            ));
            None
        }
        Some(Err(e)) => {
            malformed.push(format!("{pointer}/requestBody: {e}"));
            None
        }
    }
}

/// The answer a call is expected to get: the first 2XX response, else `default`.
fn success<'d>(refs: &Refs<'d>, op: &'d Map<String, Json>) -> Option<(String, &'d Json)> {
    let r = op.get("responses").and_then(Json::as_object)?;
    let mut codes: Vec<&String> = r
        .keys()
        .filter(|c| c.starts_with('2') || c.as_str() == "default")
        .collect();
    codes.sort_by_key(|c| (c.as_str() == "default", c.as_str()));
    let code = codes.first()?;
    let def = refs.follow(&r[code.as_str()]).ok()?;
    Some(((*code).clone(), def))
}

fn strings(v: Option<&Json>) -> Vec<String> {
    v.and_then(Json::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Json::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// A parameter list, each entry resolved, and Swagger 2.0's `in: body` parameter kept
/// apart; malformed entries are recorded.
fn params<'d>(
    refs: &Refs<'d>,
    list: Option<&'d Json>,
    pointer: &str,
    malformed: &mut Vec<String>,
) -> (Vec<Param<'d>>, Option<&'d Map<String, Json>>) {
    let (mut out, mut body) = (Vec::new(), None);
    let Some(list) = list else {
        return (out, body);
    };
    let Json::Array(list) = list else {
        malformed.push(format!("{pointer}: must be a list, found {}", kind(list)));
        return (out, body);
    };
    for (i, p) in list.iter().enumerate() {
        let at = format!("{pointer}/{i}");
        let def = match refs.follow(p) {
            Ok(Json::Object(m)) => m,
            Ok(other) => {
                malformed.push(format!(
                    "{at}: a parameter must be a mapping, found {}",
                    kind(other)
                ));
                continue;
            }
            Err(e) => {
                malformed.push(format!("{at}: {e}"));
                continue;
            }
        };
        let name = text(def, "name");
        let place = def.get("in").and_then(Json::as_str).unwrap_or("");
        if place == "body" {
            body = Some(def);
            continue;
        }
        let (Some(location), false) = (In::parse(place), name.is_empty()) else {
            malformed.push(format!(
                "{at}: a parameter needs a `name` and an `in` (path, query, header, cookie, formData or body)"
            ));
            continue;
        };
        let required = location == In::Path || def.get("required") == Some(&Json::Bool(true));
        out.push(Param {
            name,
            location,
            required,
            def,
        });
    }
    (out, body)
}

/// Swagger 2.0 carries the body among the parameters: the `in: body` one, or the form fields
/// (taken out of `params`).
fn swagger_body<'d>(
    params: &mut Vec<Param<'d>>,
    body: Option<&'d Map<String, Json>>,
    consumes: Vec<String>,
) -> Option<Body<'d>> {
    let fields: Vec<Param<'d>> = params
        .iter()
        .filter(|p| p.location == In::FormData)
        .cloned()
        .collect();
    params.retain(|p| p.location != In::FormData);
    if let Some(def) = body {
        return Some(Body::Schema {
            required: def.get("required") == Some(&Json::Bool(true)),
            description: text(def, "description"),
            param: def,
            consumes,
        });
    }
    if fields.is_empty() {
        return None;
    }
    Some(Body::Form {
        required: fields.iter().any(|f| f.required),
        multipart: consumes.iter().any(|c| c.starts_with("multipart/"))
            || fields
                .iter()
                .any(|f| f.def.get("type").and_then(Json::as_str) == Some("file")),
        fields,
    })
}

/// `{name}` placeholders of a path template, in order, each once.
pub fn path_params(path: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut rest = path;
    while let Some(open) = rest.find('{') {
        let Some(close) = rest[open..].find('}') else {
            break;
        };
        let name = &rest[open + 1..open + close];
        if !name.is_empty() && !out.iter().any(|n| n == name) {
            out.push(name.to_string());
        }
        rest = &rest[open + close + 1..];
    }
    out
}
