//! The process's open-file limit: every connection is a file descriptor, and so is every
//! segment file, etcd and object-store socket. Running out stops far more than new
//! connections (segments cannot be opened, flushes and compaction fail, acks time out,
//! shutdown fails), so the broker raises the limit where it may and caps connections below
//! it.
//!
//! Every descriptor a client can make the broker hold is counted: a Kafka connection holds
//! exactly one from the moment it is accepted (a TLS one too, handshake included:
//! tls::SharedSocket), counted against `max_connections` before its first byte is read; the
//! operations endpoint's connections are capped by `metrics_max_connections`, and sockets
//! accepted but not yet admitted or refused by `ACCEPT_QUEUE` and one per listener. Those
//! and `RESERVED_FDS` are set apart first; the Kafka connections get what is left.

/// Descriptors kept for everything but client connections: segment files being read or
/// written, the object-store and etcd connection pools, the metrics listener, the metadata
/// store and the Python interpreter's own files (an idle broker holds about 40).
const RESERVED_FDS: u64 = 256;

/// Sockets accepted and waiting for the server loop to admit or refuse them (its queue).
pub(crate) const ACCEPT_QUEUE: usize = 64;

/// Soft and hard `RLIMIT_NOFILE` after raising the soft limit to the hard one (where the
/// system allows it; otherwise the limits as they were). `None` if they cannot be read.
pub(crate) fn raise_open_file_limit() -> Option<(u64, u64)> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we pass and reads nothing else.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return None;
    }
    let before = limit.rlim_cur;
    if limit.rlim_cur < limit.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: limit.rlim_max,
            rlim_max: limit.rlim_max,
        };
        // SAFETY: setrlimit only reads the struct we pass.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            limit.rlim_cur = limit.rlim_max;
        } else {
            tracing::warn!(
                soft = before,
                hard = limit.rlim_max,
                error = %std::io::Error::last_os_error(),
                "could not raise the open-file limit to its hard limit"
            );
        }
    }
    tracing::info!(
        soft = limit.rlim_cur,
        hard = limit.rlim_max,
        soft_at_start = before,
        "open-file limit"
    );
    Some((limit.rlim_cur, limit.rlim_max))
}

/// The connection cap the open-file limit allows: `configured`, or fewer (with a warning
/// saying what to change) when the soft limit minus the reserve and the `kept_apart`
/// descriptors of other sockets (the operations endpoint's connections, the accept queue) is
/// smaller. Under a tiny limit, half of what the other sockets leave.
pub(crate) fn connection_cap(
    configured: usize,
    soft_limit: Option<u64>,
    kept_apart: usize,
) -> usize {
    let Some(soft) = soft_limit else {
        return configured;
    };
    let kept_apart = kept_apart as u64;
    let allowed = soft
        .saturating_sub(RESERVED_FDS + kept_apart)
        .max(soft.saturating_sub(kept_apart) / 2)
        .max(1);
    let allowed = usize::try_from(allowed).unwrap_or(usize::MAX);
    if configured <= allowed {
        return configured;
    }
    tracing::warn!(
        max_connections = configured,
        open_file_limit = soft,
        "--max-connections (KAFSCALE_MAX_CONNECTIONS) is {configured}, but the open-file \
         limit of {soft} leaves room for {allowed} connections ({RESERVED_FDS} descriptors \
         are kept for segment files and etcd/S3 connections, {kept_apart} for the operations \
         endpoint's connections and connections being accepted): accepting at most \
         {allowed}. Raise the limit (ulimit -n, systemd LimitNOFILE, the container's nofile \
         ulimit) or lower --max-connections"
    );
    allowed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_leaves_descriptors_for_segments_and_stores() {
        assert_eq!(connection_cap(10_000, Some(1024), 0), 768);
        assert_eq!(connection_cap(500, Some(1024), 0), 500);
        assert_eq!(connection_cap(10_000, Some(1_048_576), 0), 10_000);
        assert_eq!(connection_cap(10_000, Some(300), 0), 150);
        assert_eq!(connection_cap(10_000, None, 0), 10_000);
    }

    #[test]
    fn the_operations_endpoint_and_the_accept_queue_are_set_apart() {
        // 4,096 descriptors, 64 operations connections, the queue and two listeners.
        let kept_apart = 64 + ACCEPT_QUEUE + 2;
        let cap = connection_cap(10_000, Some(4096), kept_apart);
        assert_eq!(cap, 4096 - 256 - 130);
        // Every socket a client can make the broker hold, at its most, leaves the reserve.
        assert_eq!(4096 - (cap + kept_apart), RESERVED_FDS as usize);
        assert_eq!(connection_cap(10_000, Some(300), 130), 85);
    }

    #[test]
    fn the_soft_limit_ends_at_the_hard_limit() {
        let (soft, hard) = raise_open_file_limit().expect("getrlimit works on Linux");
        assert!(soft <= hard);
    }
}
