//! The upstream breaker: stop waiting on an origin that keeps not answering.
//!
//! An http row's upstream that hangs, trickles its answer, resets or refuses the connection
//! costs each caller the whole timeout and holds one of the dispatcher's invocation slots
//! meanwhile. After [`THRESHOLD`] such failures in a row from one origin (`scheme://host:port`),
//! calls to it answer `ERR:breaker_open:<origin>:until <RFC3339>` at once, without sending,
//! for [`OPEN_FOR`]; then one call is let through to try it, and only its answer closes the
//! breaker again (or opens it for another spell). Any HTTP answer, whatever its status, counts
//! as the origin answering. The state lives in the dispatcher's memory: it is about this
//! process's view of the network, not the credential's standing, which `breaker.rs` keeps.

use crate::invoke::outcome::Failure;
use chrono::{SecondsFormat, Utc};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Failures in a row that open an origin's breaker.
pub const THRESHOLD: u32 = 5;
/// How long it stays open before one call tries the origin again.
pub const OPEN_FOR: Duration = Duration::from_secs(10);

/// The health of every origin the http runner has sent to; cheap to clone, shared by every
/// build the dispatcher loads.
#[derive(Clone, Debug)]
pub struct Upstreams {
    origins: Arc<Mutex<HashMap<String, Health>>>,
    threshold: u32,
    open_for: Duration,
}

impl Default for Upstreams {
    fn default() -> Self {
        Upstreams::new(THRESHOLD, OPEN_FOR)
    }
}

#[derive(Debug, Default)]
struct Health {
    failures: u32,
    open_until: Option<Instant>,
    /// A call let through to try an origin whose spell ended, not yet answered.
    trying: bool,
}

impl Upstreams {
    pub fn new(threshold: u32, open_for: Duration) -> Upstreams {
        Upstreams {
            origins: Arc::default(),
            threshold: threshold.max(1),
            open_for,
        }
    }

    /// Before sending to `origin`: refused while its breaker is open, or while the one call
    /// trying it again is out. The pass records the call's fate; dropped unrecorded (the
    /// caller went away), it frees the trial for the next call.
    pub fn admit(&self, origin: &str) -> Result<Pass, Failure> {
        let mut origins = self.lock();
        let Some(health) = origins.get_mut(origin) else {
            return Ok(self.pass(origin));
        };
        if let Some(until) = health.open_until {
            let now = Instant::now();
            if now < until || health.trying {
                let left = until.saturating_duration_since(now);
                let at = Utc::now() + chrono::Duration::from_std(left).unwrap_or_default();
                return Err(Failure::new(
                    "breaker_open",
                    format!(
                        "{origin}:until {}",
                        at.to_rfc3339_opts(SecondsFormat::Secs, true)
                    ),
                ));
            }
            health.trying = true;
        }
        Ok(self.pass(origin))
    }

    fn pass(&self, origin: &str) -> Pass {
        Pass {
            upstreams: self.clone(),
            origin: origin.to_string(),
            recorded: false,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Health>> {
        self.origins.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn record(&self, origin: &str, answered: bool) {
        let mut origins = self.lock();
        if answered {
            origins.remove(origin);
            return;
        }
        let health = origins.entry(origin.to_string()).or_default();
        health.failures += 1;
        if health.trying || health.failures >= self.threshold {
            if health.open_until.is_none() || health.trying {
                tracing::warn!(
                    origin,
                    failures = health.failures,
                    "upstream breaker opened: the origin keeps not answering"
                );
            }
            health.open_until = Some(Instant::now() + self.open_for);
            health.trying = false;
        }
    }
}

/// One call admitted to an origin; say how it went with [`Pass::answered`] or
/// [`Pass::failed`].
pub struct Pass {
    upstreams: Upstreams,
    origin: String,
    recorded: bool,
}

impl Pass {
    /// The origin answered (any HTTP status): its count is cleared and its breaker closed.
    pub fn answered(mut self) {
        self.recorded = true;
        self.upstreams.record(&self.origin, true);
    }

    /// No answer: a timeout, a reset or a refused connection counts against the origin.
    pub fn failed(mut self) {
        self.recorded = true;
        self.upstreams.record(&self.origin, false);
    }
}

impl Drop for Pass {
    fn drop(&mut self) {
        if !self.recorded
            && let Some(h) = self.upstreams.lock().get_mut(&self.origin)
        {
            h.trying = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ORIGIN: &str = "http://127.0.0.1:9";

    fn refused(u: &Upstreams) -> bool {
        match u.admit(ORIGIN) {
            Err(f) => {
                assert_eq!(f.code, "breaker_open");
                assert!(f.detail.starts_with("http://127.0.0.1:9:until 20"), "{f:?}");
                true
            }
            Ok(_) => false,
        }
    }

    #[test]
    fn opens_after_the_threshold_in_a_row_and_an_answer_clears_the_count() {
        let u = Upstreams::new(3, Duration::from_secs(60));
        u.admit(ORIGIN).unwrap().failed();
        u.admit(ORIGIN).unwrap().failed();
        u.admit(ORIGIN).unwrap().answered();
        u.admit(ORIGIN).unwrap().failed();
        u.admit(ORIGIN).unwrap().failed();
        assert!(!refused(&u), "two failures since the answer");
        u.admit(ORIGIN).unwrap().failed();
        assert!(refused(&u));
        assert!(
            u.admit("http://127.0.0.1:10").is_ok(),
            "other origins unaffected"
        );
    }

    #[test]
    fn after_the_spell_one_call_tries_and_its_answer_decides() {
        let u = Upstreams::new(1, Duration::from_millis(30));
        u.admit(ORIGIN).unwrap().failed();
        assert!(refused(&u));
        std::thread::sleep(Duration::from_millis(40));
        let trial = u.admit(ORIGIN).expect("one trial after the spell");
        assert!(refused(&u), "only one trial at a time");
        trial.failed();
        assert!(refused(&u), "a failed trial opens it again");
        std::thread::sleep(Duration::from_millis(40));
        u.admit(ORIGIN).unwrap().answered();
        assert!(u.admit(ORIGIN).is_ok());
        assert!(u.admit(ORIGIN).is_ok(), "closed: every call goes");
    }

    #[test]
    fn a_trial_dropped_unrecorded_frees_the_next_one() {
        let u = Upstreams::new(1, Duration::from_millis(10));
        u.admit(ORIGIN).unwrap().failed();
        std::thread::sleep(Duration::from_millis(20));
        drop(u.admit(ORIGIN).expect("trial"));
        assert!(
            u.admit(ORIGIN).is_ok(),
            "the caller went away: another may try"
        );
    }
}
