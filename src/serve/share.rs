//! Share links: every link to this dispatcher's `/api/dispatch?` in an answer to a caller with
//! a credential carries a share token derived from that caller (`Dispatcher::share_token`):
//! one row, ten minutes, risk low, never above the caller's scope or limits, revoked with
//! it. So a model that can only fetch URLs follows the links it is given and is the caller
//! it came as. Anonymous callers get the links as built; the static site never holds one.

use super::AppState;
use crate::access::auth::Caller;

/// Characters that end a URL in the texts answered (markdown, JSON, plain text).
fn ends_url(c: char) -> bool {
    c.is_whitespace() || matches!(c, ')' | '"' | '<' | '>' | ']' | '\'' | '`' | '\\')
}

/// `text` (the contract of `only`) with a share token in every link to this dispatcher's
/// `/api/dispatch?` that names that row (`invoke=KEY`, whose `body` becomes the share's only
/// body, or `key=KEY`). A link to any other row is left as it is: a row's docstring is the
/// row's author's text, and a link planted there must not become a call signed for the
/// caller. Links that already carry a share are left alone too.
pub(super) fn with_shares(state: &AppState, caller: &Caller, text: &str, only: &str) -> String {
    if *caller == Caller::Anonymous {
        return text.to_string();
    }
    let prefix = format!("{}/api/dispatch?", state.inner.base);
    let live = state.live();
    let mut out = String::with_capacity(text.len() + 256);
    let mut rest = text;
    while let Some(at) = rest.find(&prefix) {
        out.push_str(&rest[..at]);
        let link = &rest[at..];
        let end = link[prefix.len()..]
            .find(ends_url)
            .map_or(link.len(), |i| prefix.len() + i);
        let (url, after) = link.split_at(end);
        out.push_str(url);
        if let Some(token) = share_for(state, &live, caller, &url[prefix.len()..], only) {
            out.push_str("&share=");
            out.push_str(&token);
        }
        rest = after;
    }
    out.push_str(rest);
    out
}

/// `url` (a link the dispatcher made for the row `only`) with a share token, when it is a
/// link to this dispatcher naming that row and the caller may share it.
pub(super) fn share_link(
    state: &AppState,
    live: &crate::dispatch::Live,
    caller: &Caller,
    url: &str,
    only: &str,
) -> String {
    let prefix = format!("{}/api/dispatch?", state.inner.base);
    let Some(query) = url.strip_prefix(&prefix) else {
        return url.to_string();
    };
    match share_for(state, live, caller, query, only) {
        Some(token) => format!("{url}&share={token}"),
        None => url.to_string(),
    }
}

/// The share token for one link's query, when it names the row `only` and the caller may
/// share it.
fn share_for(
    state: &AppState,
    live: &crate::dispatch::Live,
    caller: &Caller,
    query: &str,
    only: &str,
) -> Option<String> {
    let mut key = None;
    let mut body = None;
    let mut run_now = false;
    for (name, value) in url::form_urlencoded::parse(query.as_bytes()) {
        match name.as_ref() {
            "share" => return None,
            "invoke" => {
                key = Some(value.into_owned());
                run_now = true;
            }
            "key" if key.is_none() => key = Some(value.into_owned()),
            "body" => body = Some(value.into_owned()),
            _ => {}
        }
    }
    let key = key.filter(|k| k == only)?;
    let callable = live.invoker.rows().get(&key)?;
    // A run-now link runs the body it names and nothing else; a link to the contract lets
    // the caller send its own arguments.
    let body = if run_now {
        Some(body.unwrap_or_default())
    } else {
        None
    };
    state
        .dispatcher()
        .share_token(caller, &key, &callable.row.category, body.as_deref())
}
