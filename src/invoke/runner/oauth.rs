//! `oauth:` credentials (RFC 6749): the access token a row's call carries, fetched from the
//! token endpoint with the client-credentials grant (section 4.4) or the refresh-token grant
//! (section 6), the client authenticated with HTTP Basic (section 2.3.1). A token is cached
//! per credential until shortly before it expires, fetched again when an API answers 401
//! (once per call), and never logged, receipted or returned: every failure names the
//! endpoint's error code, never a value.
//!
//! The token endpoint is bound like the API: the variables go only where the owner bound
//! them (`admit_credential` on the endpoint's URL) and the request takes the runner's client,
//! so the egress policy judges the address it connects to and no redirect is followed.

use super::Call;
use crate::invoke::outcome::Failure;
use crate::row::credential::OAuth;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One cached access token, and the refresh token the endpoint rotated to, if it did.
#[derive(Clone)]
struct Held {
    access: String,
    until: Instant,
    refresh: Option<String>,
}

/// The access tokens of one invoker's `oauth:` credentials, by credential.
#[derive(Default)]
pub struct Tokens {
    held: Mutex<HashMap<String, Held>>,
}

/// The answer of a token endpoint (RFC 6749 section 5.1), or its error (section 5.2).
#[derive(serde::Deserialize)]
struct Answer {
    access_token: Option<String>,
    token_type: Option<String>,
    expires_in: Option<serde_json::Value>,
    refresh_token: Option<String>,
    error: Option<String>,
}

/// How long before its expiry a token is fetched again: a tenth of its life, at most a minute.
fn margin(life: Duration) -> Duration {
    (life / 10).min(Duration::from_secs(60))
}

fn failed(code: &str, detail: impl Into<String>) -> Failure {
    Failure::new(format!("auth:oauth:{code}"), detail)
}

/// The access token a token endpoint's answer grants, how long it lives (an hour when it
/// does not say), and the refresh token it rotated to; or why it granted none.
fn granted(
    status: reqwest::StatusCode,
    text: &str,
) -> Result<(String, Duration, Option<String>), Failure> {
    let answer: Answer = serde_json::from_str(text).map_err(|_| {
        failed(
            "bad_answer",
            format!("the token endpoint answered {status} with no token JSON"),
        )
    })?;
    if let Some(error) = answer.error.filter(|e| !e.is_empty()) {
        // `invalid_grant` (a revoked or expired refresh token), `invalid_client`, …: the
        // code only; its description may quote what was sent.
        // Only the codes RFC 6749 section 5.2 defines: an endpoint that echoes what it was
        // sent cannot put it in an answer through here.
        let code = [
            "invalid_request",
            "invalid_client",
            "invalid_grant",
            "unauthorized_client",
            "unsupported_grant_type",
            "invalid_scope",
        ]
        .into_iter()
        .find(|c| *c == error)
        .unwrap_or("refused");
        return Err(failed(
            code,
            format!("the token endpoint refused the grant ({status})"),
        ));
    }
    let access = answer
        .access_token
        .filter(|t| !t.is_empty() && status.is_success())
        .ok_or_else(|| {
            failed(
                "bad_answer",
                format!("the token endpoint answered {status} without an access_token"),
            )
        })?;
    if let Some(kind) = &answer.token_type
        && !kind.eq_ignore_ascii_case("bearer")
    {
        return Err(failed(
            "token_type",
            format!("the endpoint issued a `{kind}` token; only bearer tokens are sent"),
        ));
    }
    let life = match answer.expires_in {
        Some(serde_json::Value::Number(n)) => n.as_u64(),
        Some(serde_json::Value::String(s)) => s.parse().ok(),
        _ => None,
    }
    .map_or(Duration::from_secs(3600), Duration::from_secs);
    let rotated = answer.refresh_token.filter(|t| !t.is_empty());
    Ok((access, life, rotated))
}

impl Tokens {
    /// The access token for `o` (with the secrets the call must scrub): the cached one unless
    /// `fresh`, else a new one from the token endpoint.
    pub async fn access(
        &self,
        call: &Call<'_>,
        credential: &crate::row::credential::Credential,
        o: &OAuth,
        client: &reqwest::Client,
        fresh: bool,
    ) -> Result<(String, Vec<String>), Failure> {
        // One token per endpoint, client and scope: two rows naming the same variables with
        // another endpoint or scope never share a token.
        let name = format!(
            "{}|{}|{}",
            credential.name(),
            o.token_url,
            o.scope.as_deref().unwrap_or("")
        );
        let cached = self
            .held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&name)
            .cloned();
        if let Some(h) = &cached
            && !fresh
            && Instant::now() < h.until
        {
            return Ok((h.access.clone(), vec![h.access.clone()]));
        }
        let url =
            url::Url::parse(&o.token_url).map_err(|e| failed("bad_token_url", e.to_string()))?;
        // Bound first: the client's secret goes only where the owner bound it.
        super::admit_credential(call, credential, Some((&url, "POST")))?;
        let env = call.invoker.env();
        let id = env.require(&o.client_id)?;
        let secret = env.require(&o.client_secret)?;
        let mut secrets = vec![id.clone(), secret.clone()];
        let refresh = match (&o.refresh_token, cached.and_then(|h| h.refresh)) {
            // A refresh token the endpoint rotated to replaces the one first given.
            (Some(_), Some(rotated)) => Some(rotated),
            (Some(var), None) => Some(env.require(var)?),
            (None, _) => None,
        };
        let mut form: Vec<(&str, &str)> = match &refresh {
            Some(rt) => {
                secrets.push(rt.clone());
                vec![("grant_type", "refresh_token"), ("refresh_token", rt)]
            }
            None => vec![("grant_type", "client_credentials")],
        };
        if let Some(scope) = &o.scope {
            form.push(("scope", scope));
        }
        let enc = |s: &str| url::form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
        let body = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(&form)
            .finish();
        let resp = client
            .post(url)
            .basic_auth(enc(&id), Some(enc(&secret)))
            .header(reqwest::header::ACCEPT, "application/json")
            .header(
                reqwest::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .body(body)
            .send()
            .await
            .map_err(|e| {
                if let Some(why) = crate::invoke::egress::refusal_in(&e) {
                    return Failure::new("egress:refused", why);
                }
                failed("fetch", "the token endpoint could not be reached")
            })?;
        let status = resp.status();
        let text = resp
            .text()
            .await
            .map_err(|_| failed("fetch", "the token endpoint's answer could not be read"))?;
        let (access, life, rotated) = granted(status, &text)?;
        let held = Held {
            access: access.clone(),
            until: Instant::now() + life - margin(life),
            refresh: rotated.or(refresh),
        };
        self.held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name, held);
        secrets.push(access.clone());
        Ok((access, secrets))
    }
}
