//! The standard `process_*` metrics every Prometheus client library exports (CPU, memory, file
//! descriptors, start time), read from /proc at scrape time, and `kafscale_build_info`. The
//! Rust client has no process collector of its own; dashboards and alerts expect these names.

use std::fs;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Unit;

/// What /proc says about this process; a field it could not read is left out.
#[derive(Debug, Default, PartialEq)]
struct ProcessStats {
    cpu_seconds: Option<f64>,
    resident_bytes: Option<i64>,
    virtual_bytes: Option<i64>,
    threads: Option<i64>,
    start_time_seconds: Option<f64>,
    open_fds: Option<i64>,
    max_fds: Option<i64>,
}

impl ProcessStats {
    fn read() -> ProcessStats {
        // SAFETY: sysconf and getrlimit only read process-wide values into the given memory.
        let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        let limit_read = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0;
        let stat = fs::read_to_string("/proc/self/stat").unwrap_or_default();
        let boot_time = fs::read_to_string("/proc/stat")
            .ok()
            .and_then(|text| boot_time_seconds(&text));
        let mut stats = parse_stat(&stat, ticks, page, boot_time);
        stats.open_fds = fs::read_dir("/proc/self/fd")
            .ok()
            .map(|entries| entries.count() as i64);
        stats.max_fds = limit_read.then(|| i64::try_from(limit.rlim_cur).unwrap_or(i64::MAX));
        stats
    }
}

/// The fields of /proc/self/stat after the command name (which may hold spaces and
/// parentheses, hence the last ')'), as proc(5) numbers them from 3.
fn parse_stat(stat: &str, ticks: f64, page: i64, boot_time: Option<f64>) -> ProcessStats {
    let Some(rest) = stat.rfind(')').map(|at| &stat[at + 1..]) else {
        return ProcessStats::default();
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // proc(5) field n is fields[n - 3].
    let field = |n: usize| fields.get(n - 3).and_then(|v| v.parse::<u64>().ok());
    let cpu_ticks = field(14).zip(field(15)).map(|(user, system)| user + system);
    ProcessStats {
        cpu_seconds: cpu_ticks.map(|t| t as f64 / ticks),
        threads: field(20).map(|n| n as i64),
        start_time_seconds: field(22)
            .zip(boot_time)
            .map(|(start, boot)| boot + start as f64 / ticks),
        virtual_bytes: field(23).map(|n| n as i64),
        resident_bytes: field(24).map(|pages| pages as i64 * page),
        ..ProcessStats::default()
    }
}

/// The `btime` line of /proc/stat: when the machine booted, in seconds since the epoch.
fn boot_time_seconds(proc_stat: &str) -> Option<f64> {
    proc_stat
        .lines()
        .find_map(|line| line.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

#[derive(Debug)]
pub(crate) struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        let stats = ProcessStats::read();
        if let Some(seconds) = stats.cpu_seconds {
            let metric = ConstCounter::new(seconds);
            metric.encode(encoder.encode_descriptor(
                "process_cpu",
                "Total user and system CPU time spent",
                Some(&Unit::Seconds),
                metric.metric_type(),
            )?)?;
        }
        let gauges = [
            (
                "process_resident_memory",
                "Resident memory size",
                Some(Unit::Bytes),
                stats.resident_bytes,
            ),
            (
                "process_virtual_memory",
                "Virtual memory size",
                Some(Unit::Bytes),
                stats.virtual_bytes,
            ),
            (
                "process_open_fds",
                "Open file descriptors",
                None,
                stats.open_fds,
            ),
            (
                "process_max_fds",
                "Most open file descriptors allowed",
                None,
                stats.max_fds,
            ),
            (
                "process_threads",
                "Operating system threads",
                None,
                stats.threads,
            ),
        ];
        for (name, help, unit, value) in gauges {
            if let Some(value) = value {
                let metric = ConstGauge::new(value);
                metric.encode(encoder.encode_descriptor(
                    name,
                    help,
                    unit.as_ref(),
                    metric.metric_type(),
                )?)?;
            }
        }
        if let Some(start) = stats.start_time_seconds {
            let metric = ConstGauge::new(start);
            metric.encode(encoder.encode_descriptor(
                "process_start_time",
                "Start time of the process since the Unix epoch",
                Some(&Unit::Seconds),
                metric.metric_type(),
            )?)?;
        }
        let info = ConstGauge::new(1i64);
        let profile = if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        };
        let labels = [("version", env!("CARGO_PKG_VERSION")), ("profile", profile)];
        let mut family = encoder.encode_descriptor(
            "kafscale_build_info",
            "The running build: its version and Cargo profile (a debug build is many times slower)",
            None,
            info.metric_type(),
        )?;
        info.encode(family.encode_family(&labels)?)
    }
}

#[cfg(test)]
mod tests {
    use prometheus_client::encoding::text::encode;
    use prometheus_client::registry::Registry;

    use super::*;

    #[test]
    fn stat_fields_are_counted_after_the_command_name() {
        // A command name with a space and a parenthesis, as proc(5) warns.
        let stat = "42 (my (odd) cmd) S 1 42 42 0 -1 4194560 100 0 0 0 \
                    250 150 0 0 20 0 7 0 1000 8192000 300 18446744073709551615";
        let stats = parse_stat(stat, 100.0, 4096, Some(1_700_000_000.0));
        assert_eq!(stats.cpu_seconds, Some(4.0));
        assert_eq!(stats.threads, Some(7));
        assert_eq!(stats.start_time_seconds, Some(1_700_000_010.0));
        assert_eq!(stats.virtual_bytes, Some(8_192_000));
        assert_eq!(stats.resident_bytes, Some(300 * 4096));
        assert_eq!(
            parse_stat("garbage", 100.0, 4096, None),
            ProcessStats::default()
        );
        assert_eq!(
            boot_time_seconds("cpu 1 2\nbtime 1700000000\n"),
            Some(1_700_000_000.0)
        );
    }

    #[test]
    fn the_exposition_has_the_standard_process_names_and_build_info() {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(ProcessCollector));
        let mut text = String::new();
        encode(&mut text, &registry).unwrap();
        for name in [
            "process_cpu_seconds_total ",
            "process_resident_memory_bytes ",
            "process_virtual_memory_bytes ",
            "process_open_fds ",
            "process_max_fds ",
            "process_threads ",
            "process_start_time_seconds ",
            "kafscale_build_info{version=\"",
        ] {
            assert!(text.contains(name), "{name} missing from:\n{text}");
        }
    }
}
