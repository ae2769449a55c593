//! The one step timer: a run of steps, each timed from the end of the one before, for the
//! logs and reports that say where a build or a write spent its time. It imports nothing of
//! capdir.

use std::time::{Duration, Instant};

/// The steps so far, by name, with the time each took.
#[derive(Debug)]
pub struct Laps {
    pub steps: Vec<(&'static str, Duration)>,
    clock: Instant,
}

impl Default for Laps {
    fn default() -> Laps {
        Laps {
            steps: Vec::new(),
            clock: Instant::now(),
        }
    }
}

impl Laps {
    /// The step `name` ends now; how long it took.
    pub fn lap(&mut self, name: &'static str) -> Duration {
        let took = self.clock.elapsed();
        self.took(name, took);
        took
    }

    /// A step timed elsewhere (on a thread of its own) took `took`; the next starts now.
    pub fn took(&mut self, name: &'static str, took: Duration) {
        self.steps.push((name, took));
        self.restart();
    }

    /// The next step starts now (the time since the last lap belongs to no step).
    pub fn restart(&mut self) {
        self.clock = Instant::now();
    }

    /// The time since the last lap.
    pub fn running(&self) -> Duration {
        self.clock.elapsed()
    }
}

/// `read 1.2 ms, gate 0.4 ms`.
impl std::fmt::Display for Laps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, (name, t)) in self.steps.iter().enumerate() {
            let sep = if i == 0 { "" } else { ", " };
            write!(f, "{sep}{name} {:.1} ms", t.as_secs_f64() * 1000.0)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_step_is_timed_from_the_end_of_the_one_before() {
        let mut laps = Laps::default();
        std::thread::sleep(Duration::from_millis(20));
        let first = laps.lap("first");
        laps.took("elsewhere", Duration::from_secs(3));
        laps.lap("second");
        assert!(first >= Duration::from_millis(20), "{first:?}");
        assert_eq!(laps.steps[1].1, Duration::from_secs(3));
        let names: Vec<_> = laps.steps.iter().map(|s| s.0).collect();
        assert_eq!(names, ["first", "elsewhere", "second"]);
        assert!(laps.to_string().contains("elsewhere 3000.0 ms"), "{laps}");
    }
}
