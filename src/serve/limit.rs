//! A rate limit per peer address, for what anyone may ask without a credential and that
//! touches the ledger: the keyless confirm of a receipt (`?confirm=`, the receipt page without
//! a key). Receipt ids carry 122 random bits, so guessing one is hopeless; the limit keeps an
//! anonymous caller from turning the confirm into a ledger load or an id scan all the same.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Addresses remembered at once before windows that ended are forgotten.
const MAX_ADDRESSES: usize = 65_536;

/// At most `max` asks per address in each `window`.
pub(crate) struct PerAddress {
    max: u32,
    window: Duration,
    seen: Mutex<HashMap<IpAddr, (Instant, u32)>>,
}

impl PerAddress {
    pub(crate) fn new(max: u32, window: Duration) -> PerAddress {
        PerAddress {
            max,
            window,
            seen: Mutex::new(HashMap::new()),
        }
    }

    /// Count one ask from `ip`: `Err(seconds)` when its window is spent, with the seconds
    /// until the next one opens (for `Retry-After`).
    pub(crate) fn check(&self, ip: IpAddr) -> Result<(), u64> {
        let now = Instant::now();
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if seen.len() >= MAX_ADDRESSES {
            let window = self.window;
            seen.retain(|_, (start, _)| now.duration_since(*start) < window);
        }
        let (start, count) = seen.entry(ip).or_insert((now, 0));
        if now.duration_since(*start) >= self.window {
            *start = now;
            *count = 0;
        }
        if *count >= self.max {
            let left = self.window.saturating_sub(now.duration_since(*start));
            return Err(left.as_secs().max(1));
        }
        *count += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_address_gets_its_own_window() {
        let limit = PerAddress::new(3, Duration::from_secs(60));
        let a: IpAddr = "127.0.0.1".parse().unwrap();
        let b: IpAddr = "127.0.0.2".parse().unwrap();
        for _ in 0..3 {
            assert_eq!(limit.check(a), Ok(()));
        }
        let wait = limit.check(a).expect_err("the fourth is refused");
        assert!((1..=60).contains(&wait), "{wait}");
        assert_eq!(
            limit.check(b),
            Ok(()),
            "another address is not limited by a's asks"
        );
        let short = PerAddress::new(1, Duration::from_millis(1));
        assert_eq!(short.check(a), Ok(()));
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(short.check(a), Ok(()), "a new window opens");
    }
}
