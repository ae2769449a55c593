//! What a row drafted from an operation is made of, shared by the files that draft it: what
//! the document gives every operation, an argument and where it goes, and the draft itself.

use crate::import::Note;
use crate::import::Options;
use crate::import::auth::Schemes;
use crate::import::document::Document;
use crate::import::schema::Refs;
use crate::row::expand::Mode;
use serde_json::Value as Json;

/// Characters of an argument's description.
pub const ARG_DESCRIPTION_CHARS: usize = 200;

/// A row drafted from an operation, before its key is final.
#[derive(Debug, Clone)]
pub struct Draft {
    /// The key's words before it is made unique (see `key.rs`).
    pub name: Vec<String>,
    pub operation: String,
    pub operation_id: Option<String>,
    pub target: String,
    /// The base URL the target starts with (where its credential goes).
    pub base: String,
    pub auth: String,
    pub category: String,
    pub sensitive: bool,
    pub input_schema: Json,
    pub examples: Vec<String>,
    pub doc: Vec<String>,
    pub payload: String,
    pub asks: Vec<String>,
    pub notes: Vec<Note>,
}

/// What the document gives every operation.
pub struct Context<'d> {
    pub doc: &'d Document,
    pub refs: Refs<'d>,
    pub schemes: Schemes,
    pub options: &'d Options,
    /// The document's base URL, or why there is none.
    pub base: Result<String, String>,
    pub title: String,
    /// The start of every credential variable's name (the prefix, or the API's name).
    pub env_base: String,
}

/// An argument: a parameter, a body field, or the body whole.
pub struct Arg {
    /// Its name in `input_schema` (the parameter's, or with the place in front when two
    /// places share one: `body_expand`).
    pub name: String,
    pub schema: Json,
    pub examples: Vec<Json>,
    pub place: Place,
    pub required: bool,
}

/// Where an argument goes, and the name it is sent under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// A `$N` slot in the path, for this placeholder.
    Path(String),
    /// In the query expression, its name percent-encoded.
    Query(String, Mode),
    Header(String),
    /// A field of a JSON object, form or multipart body.
    Field(String),
    /// The whole body.
    Body,
}

pub fn note(kind: &'static str, message: impl Into<String>) -> Note {
    Note {
        kind,
        message: message.into(),
    }
}
