//! Which connections the broker takes: at most `max_connections` in all and
//! `max_connections_per_ip` from one address. A connection past a cap is accepted and closed
//! at once (the listen backlog must keep draining, or it would stall every client).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Why a connection was refused; the message names the setting to raise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    Total(usize),
    PerIp(usize),
    /// The operations endpoint's cap.
    Operations(usize),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Total(cap) => write!(
                f,
                "{cap} client connections are open, the most allowed: raise \
                 --max-connections (KAFSCALE_MAX_CONNECTIONS) and the open-file limit if \
                 clients need more"
            ),
            Refusal::PerIp(cap) => write!(
                f,
                "{cap} client connections from this address are open, the most allowed: \
                 raise --max-connections-per-ip (KAFSCALE_MAX_CONNECTIONS_PER_IP) if one \
                 host needs more"
            ),
            Refusal::Operations(cap) => write!(
                f,
                "{cap} connections to the operations endpoint are open, the most allowed: \
                 raise --metrics-max-connections (KAFSCALE_METRICS_MAX_CONNECTIONS) if \
                 scrapers and probes need more"
            ),
        }
    }
}

#[derive(Default)]
struct Open {
    total: usize,
    per_ip: HashMap<IpAddr, usize>,
}

/// Counts open connections. Cloned into every connection's [`Admitted`] ticket.
#[derive(Clone)]
pub(crate) struct Admission {
    max_total: usize,
    max_per_ip: usize,
    open: Arc<Mutex<Open>>,
}

impl Admission {
    pub(crate) fn new(max_total: usize, max_per_ip: usize) -> Admission {
        Admission {
            max_total,
            max_per_ip,
            open: Arc::default(),
        }
    }

    /// A ticket for one more connection from `ip`, held for the connection's lifetime.
    pub(crate) fn admit(&self, ip: IpAddr) -> Result<Admitted, Refusal> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if open.total >= self.max_total {
            return Err(Refusal::Total(self.max_total));
        }
        let from_ip = open.per_ip.entry(ip).or_insert(0);
        if *from_ip >= self.max_per_ip {
            return Err(Refusal::PerIp(self.max_per_ip));
        }
        *from_ip += 1;
        open.total += 1;
        Ok(Admitted {
            admission: self.clone(),
            ip,
        })
    }
}

/// One open connection; dropping it (the connection ended, or its task was aborted) frees
/// its place.
pub(crate) struct Admitted {
    admission: Admission,
    ip: IpAddr,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut open = self
            .admission
            .open
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        open.total -= 1;
        if let Some(from_ip) = open.per_ip.get_mut(&self.ip) {
            *from_ip -= 1;
            if *from_ip == 0 {
                open.per_ip.remove(&self.ip);
            }
        }
    }
}

/// Logs refusals at most once per interval, with how many were not logged meanwhile: a
/// flood of connections must not become a flood of log lines.
pub(crate) struct RefusalLog {
    interval: Duration,
    last: Option<Instant>,
    unlogged: u64,
}

impl RefusalLog {
    pub(crate) fn new(interval: Duration) -> RefusalLog {
        RefusalLog {
            interval,
            last: None,
            unlogged: 0,
        }
    }

    /// Returns whether this refusal was logged.
    pub(crate) fn refused(&mut self, refusal: Refusal, peer: IpAddr) -> bool {
        let now = Instant::now();
        if self.last.is_some_and(|last| now - last < self.interval) {
            self.unlogged += 1;
            return false;
        }
        tracing::warn!(
            %peer,
            refused_since_last_message = self.unlogged,
            "closed a new connection at once: {refusal}"
        );
        self.last = Some(now);
        self.unlogged = 0;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([127, 0, 0, last])
    }

    #[test]
    fn caps_per_ip_and_in_total_and_frees_places_on_drop() {
        let admission = Admission::new(3, 2);
        let a1 = admission.admit(ip(1)).unwrap();
        let _a2 = admission.admit(ip(1)).unwrap();
        assert_eq!(admission.admit(ip(1)).err(), Some(Refusal::PerIp(2)));
        let _b1 = admission.admit(ip(2)).unwrap();
        assert_eq!(admission.admit(ip(3)).err(), Some(Refusal::Total(3)));
        drop(a1);
        assert!(admission.admit(ip(1)).is_ok());
        assert!(admission.open.lock().unwrap().per_ip.len() <= 2);
    }

    #[test]
    fn refusal_messages_name_the_setting() {
        assert!(Refusal::Total(5)
            .to_string()
            .contains("KAFSCALE_MAX_CONNECTIONS)"));
        assert!(Refusal::PerIp(5)
            .to_string()
            .contains("KAFSCALE_MAX_CONNECTIONS_PER_IP"));
    }

    #[test]
    fn a_flood_of_refusals_logs_once_per_interval() {
        let mut log = RefusalLog::new(Duration::from_secs(3600));
        assert!(log.refused(Refusal::Total(1), ip(1)));
        for _ in 0..1000 {
            assert!(!log.refused(Refusal::Total(1), ip(1)));
        }
        assert_eq!(log.unlogged, 1000);
    }
}
