//! A rate limit for log lines any client can trigger (a failed login, a refused request, a
//! topic it cannot have created): a client sending such requests in a loop must not flood the
//! log, and with it the disk and whoever reads it. Each kind of line gets its own limit, a
//! `static` at the line: at most `PER_SECOND` lines a second; the ones over are counted, and
//! the next line let through after them is preceded by one that says how many were suppressed.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Lines of one kind let through per second.
const PER_SECOND: u32 = 10;
const WINDOW: Duration = Duration::from_secs(1);

/// The limit of one kind of log line.
pub(crate) struct LogLimit {
    /// What the lines are about, for the "suppressed" line.
    kind: &'static str,
    window: Mutex<Window>,
}

struct Window {
    /// None until the first line.
    started: Option<Instant>,
    logged: u32,
    suppressed: u64,
}

impl LogLimit {
    pub(crate) const fn new(kind: &'static str) -> LogLimit {
        LogLimit {
            kind,
            window: Mutex::new(Window {
                started: None,
                logged: 0,
                suppressed: 0,
            }),
        }
    }

    /// Whether to log the line at hand (after saying how many were suppressed, if any were).
    pub(crate) fn admit(&self) -> bool {
        match self.admit_at(Instant::now()) {
            Admission::Log { after_suppressing } => {
                if after_suppressing > 0 {
                    tracing::info!(
                        kind = self.kind,
                        suppressed = after_suppressing,
                        "suppressed {after_suppressing} similar log lines ({})",
                        self.kind
                    );
                }
                true
            }
            Admission::Suppress => false,
        }
    }

    fn admit_at(&self, now: Instant) -> Admission {
        let mut w = self.window.lock().unwrap_or_else(|p| p.into_inner());
        if w.started.is_none_or(|started| now >= started + WINDOW) {
            w.started = Some(now);
            w.logged = 0;
        }
        if w.logged >= PER_SECOND {
            w.suppressed += 1;
            return Admission::Suppress;
        }
        w.logged += 1;
        Admission::Log {
            after_suppressing: std::mem::take(&mut w.suppressed),
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Admission {
    /// Log it; `after_suppressing` lines were suppressed since the last one logged.
    Log {
        after_suppressing: u64,
    },
    Suppress,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_most_the_limit_a_second_then_the_count_of_those_suppressed() {
        let limit = LogLimit::new("test lines");
        let start = Instant::now();
        for _ in 0..PER_SECOND {
            assert_eq!(
                limit.admit_at(start),
                Admission::Log {
                    after_suppressing: 0
                }
            );
        }
        for _ in 0..5 {
            assert_eq!(limit.admit_at(start + WINDOW / 2), Admission::Suppress);
        }
        assert_eq!(
            limit.admit_at(start + WINDOW),
            Admission::Log {
                after_suppressing: 5
            }
        );
        assert_eq!(
            limit.admit_at(start + WINDOW),
            Admission::Log {
                after_suppressing: 0
            }
        );
    }

    #[test]
    fn kinds_are_limited_apart() {
        let (logins, frames) = (LogLimit::new("logins"), LogLimit::new("frames"));
        let now = Instant::now();
        for _ in 0..PER_SECOND {
            limit_used(&logins, now);
        }
        assert_eq!(logins.admit_at(now), Admission::Suppress);
        assert_ne!(frames.admit_at(now), Admission::Suppress);
    }

    fn limit_used(limit: &LogLimit, now: Instant) {
        assert_ne!(limit.admit_at(now), Admission::Suppress);
    }
}
