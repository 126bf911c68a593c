//! The core's log output: tracing to stderr, text or JSON, in the format Python's logging uses.

use std::io::IsTerminal;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use time::macros::format_description;
use tracing_subscriber::fmt::time::UtcTime;
use tracing_subscriber::EnvFilter;

#[pyfunction]
pub fn init_logging(level: &str, format: &str) -> PyResult<()> {
    let level = match level {
        "warning" => "warn",
        other => other,
    };
    // The broker's own events at the chosen level; libraries only when they warn.
    let filter = EnvFilter::try_new(format!("warn,kafscale={level}"))
        .map_err(|e| PyValueError::new_err(format!("KAFSCALE_LOG_LEVEL={level}: {e}")))?;
    // Same shape as Python's lines: `2026-11-21T13:10:00.123Z  INFO target: message`.
    let timer = UtcTime::new(format_description!(
        "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z"
    ));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_timer(timer)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    // A second call (tests start several brokers in one process) keeps the first subscriber,
    // so the "already set" error is deliberately ignored.
    let _ = match format {
        "json" => builder.json().flatten_event(true).try_init(),
        "text" => builder.try_init(),
        other => {
            return Err(PyValueError::new_err(format!(
                "KAFSCALE_LOG_FORMAT={other}: use text or json"
            )))
        }
    };
    Ok(())
}
