//! `http` targets: `"METHOD url"`, with `$N` slots allowed only where an argument cannot
//! redirect the call (path and query, never scheme, host or port).

pub const METHODS: &[&str] = &["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"];

/// A parsed `http` target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpTarget {
    pub method: String,
    /// The URL template, slots still in it.
    pub url: String,
    /// Byte length of `scheme://authority`: the part no argument may touch.
    pub origin_len: usize,
}

/// Why a target is not a usable `METHOD url`: a message and a fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetError {
    pub message: String,
    pub help: String,
}

fn err(message: impl Into<String>, help: impl Into<String>) -> TargetError {
    TargetError {
        message: message.into(),
        help: help.into(),
    }
}

impl HttpTarget {
    pub fn parse(target: &str) -> Result<HttpTarget, TargetError> {
        let target = target.trim();
        let (method, url) = match target.split_once(char::is_whitespace) {
            Some((m, u)) => (m, u.trim()),
            None => (target, ""),
        };
        if !METHODS.contains(&method) {
            return Err(err(
                format!("`{method}` is not an HTTP method"),
                format!("start the target with one of {}", METHODS.join(", ")),
            ));
        }
        if url.is_empty() {
            return Err(err(
                format!("target `{target}` has no URL"),
                "write the target as `GET https://api.example.com/path/$1`",
            ));
        }
        let Some((scheme, rest)) = url.split_once("://") else {
            return Err(err(
                format!("`{url}` is not an absolute http(s) URL"),
                "write the full URL, starting https://",
            ));
        };
        if scheme.contains('$') {
            return Err(err(
                "an argument slot in the URL scheme would let a caller choose the protocol",
                "fix the scheme: https:// (or http://)",
            ));
        }
        if scheme != "http" && scheme != "https" {
            return Err(err(
                format!("scheme `{scheme}` is not http or https"),
                "use https://",
            ));
        }
        let authority_len = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let authority = &rest[..authority_len];
        if authority.contains('$') {
            return Err(err(
                format!(
                    "an argument slot in the host or port (`{authority}`) would let a caller redirect the call"
                ),
                "keep host and port fixed; put arguments in the path or the query",
            ));
        }
        if authority.is_empty() || authority.contains(char::is_whitespace) {
            return Err(err(
                format!("`{url}` has no valid host"),
                "write a host: https://api.example.com/…",
            ));
        }
        if authority.contains(['{', '}']) {
            return Err(err(
                format!("the host or port (`{authority}`) holds a brace"),
                "keep host and port fixed; expressions (`{?name}`, `{/name}`) go in the path or the query",
            ));
        }
        if crate::row::expand::has_url_expressions(url)
            && let Err(e) = crate::row::expand::url_parts(url)
        {
            return Err(err(
                format!("the target's expression {e}"),
                "write `{?name,other}`, `{&name}` or `{/name}`; `name*` explodes, `name[]` sends brackets",
            ));
        }
        if url.contains(char::is_whitespace) {
            return Err(err(
                "the URL contains white space",
                "percent-encode spaces as %20",
            ));
        }
        Ok(HttpTarget {
            method: method.to_string(),
            url: url.to_string(),
            origin_len: scheme.len() + 3 + authority_len,
        })
    }

    pub fn origin(&self) -> &str {
        &self.url[..self.origin_len]
    }

    /// GET, HEAD and OPTIONS do not change anything on the far side.
    pub fn is_read_only(&self) -> bool {
        matches!(self.method.as_str(), "GET" | "HEAD" | "OPTIONS")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses() {
        let t = HttpTarget::parse("GET https://api.example.com:8443/a/$1?q=$2").unwrap();
        assert_eq!(t.origin(), "https://api.example.com:8443");
        assert!(t.is_read_only());
        let t = HttpTarget::parse("GET https://api.example.com/a/$1{/b}{?c,d[],e*}").unwrap();
        assert_eq!(t.origin(), "https://api.example.com");
        for bad in [
            "FETCH https://x.example/a",
            "GET",
            "GET https://$1.example.com/a",
            "GET https://api.example.com:$2/a",
            "GET $1://api.example.com/",
            "GET ftp://x/",
            "GET /relative",
            "GET https://api.example.com{?a}/x",
            "GET https://api.example.com/x{?a:3}",
            "GET https://api.example.com/x{?a",
        ] {
            assert!(HttpTarget::parse(bad).is_err(), "{bad}");
        }
    }
}
